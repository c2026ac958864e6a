//! \file
//! Ragged batches of tree SSM calls: R trees of any sizes, their nodes
//! concatenated along the node axis of every view (request r owns nodes
//! [offsets[r], offsets[r + 1])), one initial SSM state and one conv state
//! per request. The params structs are shared by the host twins
//! (`tree_scan_batch` in ssm/tree_scan.hpp, `tree_conv1d_batch` here) and
//! the CUDA entry points of the same names (kernels/ssm.hpp: a check launch,
//! then one launch for the whole batch); this header stays light for the
//! latter. Statuses: one int32 per request (0 = ok, else a
//! status_code); the checks are the same functions on both sides.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "specdec/core/config.hpp"
#include "specdec/core/status.hpp"
#include "specdec/core/view.hpp"
#include "specdec/core/workspace.hpp"
#include "specdec/ssm/tree_conv1d.hpp"
#include "specdec/ssm/tree_ssm_inputs.hpp"
#include "specdec/tree/token_tree.hpp"

namespace specdec {

//! A ragged batch of tree scans (trivially copyable; host pointers for
//! tree_scan_batch, device pointers for kernels::tree_scan_batch). The node
//! capacity is in.x.extent[0]: x, dt, B, C, z, y, states and parent hold
//! that many nodes, and every request's span must lie within it.
template <ssm_scalar T>
struct tree_scan_batch_params {
  const std::int32_t* offsets = nullptr;   //!< R + 1 node offsets, non-decreasing, within [0, capacity]
  const node_id* parent = nullptr;         //!< [capacity] parent ids local to each request (its root: -1)
  tree_ssm_inputs<T> in;                   //!< node axis: the concatenated nodes; in.h0 must be empty (use h0)
  view4d<const T> h0{};                    //!< optional [R, heads, headdim, dstate] initial states (zeros)
  tree_ssm_options<T> opt;                 //!< dt' options, shared
  view3d<T> y;                             //!< [capacity, heads, headdim] output
  view4d<T> states{};                      //!< optional [capacity, heads, headdim, dstate] per-node states
  std::int32_t num_requests = 0;           //!< R
  std::int32_t* request_status = nullptr;  //!< R statuses: 0, or the request's status_code
};

//! A ragged batch of tree conv1d calls (see tree_scan_batch_params).
template <ssm_scalar T>
struct tree_conv1d_batch_params {
  const std::int32_t* offsets = nullptr;   //!< R + 1 node offsets, non-decreasing, within [0, capacity]
  const node_id* parent = nullptr;         //!< [capacity] parent ids local to each request (its root: -1)
  tree_conv1d_inputs<T> in;                //!< x: [capacity, channels]; in.conv_state must be empty
  view3d<const T> conv_state{};            //!< [R, channels, L], L >= W - 1 (required when W > 1)
  view2d<T> out;                           //!< [capacity, channels]
  std::int32_t num_requests = 0;           //!< R
  std::int32_t* request_status = nullptr;  //!< R statuses: 0, or the request's status_code
};

//! The whole batch's offsets check, before anything else is read: ok when
//! offsets[0] >= 0, offsets[R] <= capacity and the offsets never decrease
//! (so the spans cannot overlap); out_of_range when an end leaves [0,
//! capacity], else not_sorted. On failure every request gets the code and
//! nothing else is read or written. Entry i of the monotonicity part is
//! ssm_batch_offset_step_ok, so the device checks it in parallel.
SPECDEC_HD bool ssm_batch_offset_step_ok(const std::int32_t* offsets, std::int32_t i) noexcept {
  return offsets[i] <= offsets[i + 1];
}
//! See ssm_batch_offset_step_ok.
SPECDEC_HD status_code ssm_batch_offsets_check(const std::int32_t* offsets, std::int32_t num_requests,
                                               std::int64_t capacity) noexcept {
  if (offsets[0] < 0 || offsets[num_requests] > capacity) return status_code::out_of_range;
  for (std::int32_t i = 0; i < num_requests; ++i)
    if (!ssm_batch_offset_step_ok(offsets, i)) return status_code::not_sorted;
  return status_code::ok;
}

//! Request r's own check once the offsets passed: empty_input for no
//! nodes, not_topological unless its local parents are topological (node
//! 0 the root with -1, every other node's parent in [0, i)). A failing
//! request reads and writes nothing else.
SPECDEC_HD status_code ssm_batch_request_check(const std::int32_t* offsets, const node_id* parent,
                                               std::int32_t r) noexcept {
  const std::int32_t b = offsets[r], n = offsets[r + 1] - b;
  if (n == 0) return status_code::empty_input;
  for (std::int32_t i = 0; i < n; ++i) {
    const node_id p = parent[b + i];
    if (i == 0 ? p != -1 : (p < 0 || p >= i)) return status_code::not_topological;
  }
  return status_code::ok;
}

namespace detail {

//! Rows [begin, begin + count) of a view's first (node) axis.
template <class V>
constexpr V node_rows(V v, std::int64_t begin, std::int64_t count) noexcept {
  if (v.data == nullptr) return v;
  v.data += begin * v.stride[0];
  v.extent[0] = count;
  return v;
}

//! Request r's inputs of a batched scan: its node rows and its h0.
template <class T>
tree_ssm_inputs<T> batch_request_inputs(const tree_scan_batch_params<T>& p, std::int32_t r, std::int64_t b,
                                        std::int64_t n) noexcept {
  tree_ssm_inputs<T> in = p.in;
  in.x = node_rows(in.x, b, n);
  in.dt = node_rows(in.dt, b, n);
  in.B = node_rows(in.B, b, n);
  in.C = node_rows(in.C, b, n);
  in.z = node_rows(in.z, b, n);
  in.h0 = p.h0.data != nullptr ? p.h0.slice(r) : view3d<const T>{};
  return in;
}

}  // namespace detail

//! Host checks of a batched scan that read no offsets or parents (what
//! kernels::tree_scan_batch can check without reading device memory): R >=
//! 0 (an empty batch passes unchecked and does nothing), the pointers, the
//! shapes of the shared views against the node capacity, in.h0 empty, h0
//! [R, heads, headdim, dstate], dt limits. `shape.nodes` is the capacity.
template <ssm_scalar T>
status tree_scan_batch_check_shapes(const tree_scan_batch_params<T>& p, tree_ssm_shape& shape) noexcept {
  if (p.num_requests < 0) return make_status(status_code::invalid_argument, "num_requests must be >= 0");
  if (p.num_requests == 0) return status::success();
  if (p.offsets == nullptr || p.parent == nullptr || p.request_status == nullptr)
    return make_status(status_code::invalid_argument, "offsets, parent and request_status are required");
  if (p.in.h0.data != nullptr)
    return make_status(status_code::invalid_argument, "batched scans take per-request initial states in h0");
  SPECDEC_TRY(validate_tree_ssm_shapes(p.in, shape));
  SPECDEC_TRY(validate_tree_ssm_output(p.y, shape));
  SPECDEC_TRY(validate_tree_ssm_states(p.states, shape));
  if (p.h0.data != nullptr && (p.h0.extent[0] != p.num_requests || p.h0.extent[1] != shape.heads ||
                               p.h0.extent[2] != shape.headdim || p.h0.extent[3] != shape.dstate))
    return make_status(status_code::size_mismatch, "h0 must be [R, heads, headdim, dstate]");
  if (!detail::ssm_view_nonnegative_strides(p.h0))
    return make_status(status_code::invalid_argument, "negative stride in h0");
  if (!(p.opt.dt_min >= T(0)) || !(p.opt.dt_max >= p.opt.dt_min))
    return make_status(status_code::invalid_argument, "dt limits must satisfy 0 <= dt_min <= dt_max");
  return status::success();
}

//! Host checks of a batched conv1d that read no offsets or parents: R >= 0
//! (an empty batch passes unchecked), the pointers, the shared views (x
//! [capacity, channels]), in.conv_state empty, conv_state [R, channels, L
//! >= W - 1] (required when W > 1), out [capacity, channels].
template <ssm_scalar T>
status tree_conv1d_batch_check_shapes(const tree_conv1d_batch_params<T>& p) noexcept {
  if (p.num_requests < 0) return make_status(status_code::invalid_argument, "num_requests must be >= 0");
  if (p.num_requests == 0) return status::success();
  if (p.offsets == nullptr || p.parent == nullptr || p.request_status == nullptr)
    return make_status(status_code::invalid_argument, "offsets, parent and request_status are required");
  if (p.in.conv_state.data != nullptr)
    return make_status(status_code::invalid_argument, "batched conv1d takes per-request states in conv_state");
  // The shared views checked as one tree of `capacity` nodes, request 0's state standing in for all.
  tree_conv1d_inputs<T> in = p.in;
  if (p.conv_state.data != nullptr) {
    if (p.conv_state.extent[0] != p.num_requests)
      return make_status(status_code::size_mismatch, "conv_state must be [R, channels, L]");
    if (!detail::ssm_view_nonnegative_strides(p.conv_state))
      return make_status(status_code::invalid_argument, "negative stride in conv_state");
    in.conv_state = p.conv_state.slice(0);
  }
  const std::int64_t n = in.x.extent[0];
  SPECDEC_TRY(detail::tree_conv1d_check_shapes(n, in));
  if (p.out.data == nullptr || p.out.extent[0] != n || p.out.extent[1] != in.x.extent[1])
    return make_status(status_code::size_mismatch, "out must be [capacity, channels]");
  if (!detail::ssm_view_nonnegative_strides(p.out))
    return make_status(status_code::invalid_argument, "negative stride in out");
  return status::success();
}

//! Host twin of kernels::tree_conv1d_batch: each request goes through
//! tree_conv1d on its node rows and its conv state (statuses as
//! tree_scan_batch). `workspace`: tree_conv1d_workspace_size(W) bytes.
template <ssm_scalar T>
status tree_conv1d_batch(const tree_conv1d_batch_params<T>& p, std::span<std::byte> workspace) noexcept {
  SPECDEC_TRY(tree_conv1d_batch_check_shapes(p));
  if (p.num_requests == 0) return status::success();
  const std::int64_t capacity = p.in.x.extent[0];
  const status_code all = ssm_batch_offsets_check(p.offsets, p.num_requests, capacity);
  for (std::int32_t r = 0; r < p.num_requests; ++r) {
    status_code code = all != status_code::ok ? all : ssm_batch_request_check(p.offsets, p.parent, r);
    if (code == status_code::ok) {
      const std::int64_t b = p.offsets[r], n = p.offsets[r + 1] - b;
      tree_conv1d_inputs<T> in = p.in;
      in.x = detail::node_rows(in.x, b, n);
      if (p.conv_state.data != nullptr) in.conv_state = p.conv_state.slice(r);
      const std::span<const node_id> par(p.parent + b, static_cast<std::size_t>(n));
      code = tree_conv1d(par, in, detail::node_rows(p.out, b, n), workspace).code();
    }
    p.request_status[r] = static_cast<std::int32_t>(code);
  }
  return status::success();
}

}  // namespace specdec
