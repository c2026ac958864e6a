//! \file
//! Host API of the CUDA tree-masked SSM kernels (specdec::kernels). Plain
//! C++: every pointer inside the views is a device pointer; launches are
//! asynchronous on `stream` (a cudaStream_t, null = default). Shapes are
//! validated up front on the host (no device memory is read); the tree's
//! parent links are checked by the kernels, which report the first fault
//! (not_topological) through the optional device `request_status` (one
//! int32: a single tree is one request; the launch resets it to 0 on the
//! stream first) instead of trapping. Input values (NaN, A > 0) are
//! trusted: validate on the host if they may be bad.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "specdec/core/status.hpp"
#include "specdec/core/view.hpp"
#include "specdec/core/workspace.hpp"
#include "specdec/ssm/tree_conv1d.hpp"
#include "specdec/ssm/tree_ssm_batch.hpp"
#include "specdec/ssm/tree_ssm_inputs.hpp"
#include "specdec/tree/token_tree.hpp"

namespace specdec::kernels {

//! Arguments of the device tree scan (trivially copyable).
template <class T>
struct tree_scan_params {
  const node_id* parent = nullptr;         //!< [N] device array, topological order
  tree_ssm_inputs<T> in;                   //!< device views, as for the host scan
  tree_ssm_options<T> opt;                 //!< dt' options
  view3d<T> y;                             //!< [N, heads, headdim] output
  view4d<T> states{};                      //!< optional [N, heads, headdim, dstate] per-node states (no zero strides)
  std::int32_t* request_status = nullptr;  //!< optional device int32, the tree's status: 0, or the first fault
};

//! Arguments of the device tree conv1d (trivially copyable).
template <class T>
struct tree_conv1d_params {
  const node_id* parent = nullptr;         //!< [N] device array, topological order
  tree_conv1d_inputs<T> in;                //!< device views, as for the host conv
  view2d<T> out;                           //!< [N, channels]
  std::int32_t* request_status = nullptr;  //!< optional device int32, the tree's status: 0, or the first fault
};

static_assert(std::is_trivially_copyable_v<tree_scan_params<float>>);
static_assert(std::is_trivially_copyable_v<tree_conv1d_params<double>>);

//! Host checks of a tree_scan call, no device memory read: the shapes
//! and strides of every view, dt limits, non-null parent, dstate <= 256
//! and grid limits (unsupported beyond), and no zero stride in `states`
//! (the kernel reads parent states back from it, so a broadcast dimension
//! would alias live states).
template <class T>
status tree_scan_can_implement(const tree_scan_params<T>& p) noexcept {
  tree_ssm_shape s;
  SPECDEC_TRY(validate_tree_ssm_shapes(p.in, s));
  SPECDEC_TRY(validate_tree_ssm_output(p.y, s));
  SPECDEC_TRY(validate_tree_ssm_states(p.states, s));
  if (p.parent == nullptr) return make_status(status_code::invalid_argument, "parent is required");
  if (s.dstate > 256) return make_status(status_code::unsupported, "tree_scan kernel supports dstate <= 256");
  if (s.nodes > INT32_MAX || s.heads > 65535) return make_status(status_code::unsupported, "too many nodes or heads");
  if ((s.headdim + 3) / 4 > 65535) return make_status(status_code::unsupported, "tree_scan kernel: headdim too large");
  if (!(p.opt.dt_min >= T(0)) || !(p.opt.dt_max >= p.opt.dt_min))
    return make_status(status_code::invalid_argument, "dt limits must satisfy 0 <= dt_min <= dt_max");
  for (int d = 0; d < 4; ++d)
    if (p.states.data != nullptr && p.states.extent[d] > 1 && p.states.stride[d] == 0)
      return make_status(status_code::invalid_argument, "tree_scan kernel: states must not have a zero stride");
  return status::success();
}

//! Workspace bytes tree_scan needs: 0 when `p.states` is given (the
//! per-node states are the working memory), else room for N * heads *
//! headdim * dstate scalars (carved with workspace_carver). 0 for shapes
//! tree_scan_can_implement rejects.
template <class T>
std::size_t tree_scan_workspace_size(const tree_scan_params<T>& p) noexcept {
  tree_ssm_shape s;
  if (p.states.data != nullptr || !validate_tree_ssm_shapes(p.in, s).ok()) return 0;
  workspace_carver c;
  (void)c.take<T>(static_cast<std::size_t>(s.nodes * s.heads * s.headdim * s.dstate));
  return c.bytes_used();
}

//! Recurrent tree scan on the device, equal to the host
//! tree_scan_recurrent up to float rounding (the dot products are summed in
//! a different order). `workspace`: tree_scan_workspace_size(p) bytes of
//! device memory, 256-byte aligned. Cost per node: one state row read
//! (parent, unless it is the previous node) and written per (head,
//! headdim) row. Returns the can_implement status, buffer_too_small,
//! invalid_argument (misaligned workspace) or cuda_error (launch).
status tree_scan(const tree_scan_params<float>& p, void* workspace, std::size_t workspace_bytes, void* stream) noexcept;
//! Double-precision overload.
status tree_scan(const tree_scan_params<double>& p, void* workspace, std::size_t workspace_bytes,
                 void* stream) noexcept;

//! Host checks of a tree_conv1d call: shapes and strides of the views,
//! non-null parent, at most 65535 nodes (unsupported beyond).
template <class T>
status tree_conv1d_can_implement(const tree_conv1d_params<T>& p) noexcept {
  if (p.parent == nullptr) return make_status(status_code::invalid_argument, "parent is required");
  SPECDEC_TRY(specdec::detail::tree_conv1d_check_shapes(p.in.x.extent[0], p.in));
  const std::int64_t n = p.in.x.extent[0], ch = p.in.x.extent[1];
  if (p.out.data == nullptr || p.out.extent[0] != n || p.out.extent[1] != ch)
    return make_status(status_code::size_mismatch, "out must be [N, channels]");
  if (!specdec::detail::ssm_view_nonnegative_strides(p.out))
    return make_status(status_code::invalid_argument, "negative stride in out");
  if (n > 65535) return make_status(status_code::unsupported, "tree_conv1d kernel: at most 65535 nodes");
  return status::success();
}

//! Workspace bytes tree_conv1d needs: none (each thread walks its own
//! window), so any pointer, null included, may be passed.
template <class T>
constexpr std::size_t tree_conv1d_workspace_size(const tree_conv1d_params<T>&) noexcept {
  return 0;
}

//! Tree conv1d on the device, equal to the host tree_conv1d up to rounding
//! (same summation order, so usually bit-identical). Returns the
//! can_implement status or cuda_error.
status tree_conv1d(const tree_conv1d_params<float>& p, void* workspace, std::size_t workspace_bytes,
                   void* stream) noexcept;
//! Double-precision overload.
status tree_conv1d(const tree_conv1d_params<double>& p, void* workspace, std::size_t workspace_bytes,
                   void* stream) noexcept;

//! Host checks of kernels::tree_scan_batch, no device memory read:
//! tree_scan_batch_check_shapes (the host twin's), then the kernel's limits
//! (unsupported beyond): dstate <= 256, heads and R <= 65535, and no zero
//! stride in `states` (read back as parent states).
template <class T>
status tree_scan_batch_can_implement(const tree_scan_batch_params<T>& p) noexcept {
  tree_ssm_shape s;
  SPECDEC_TRY(tree_scan_batch_check_shapes(p, s));
  if (p.num_requests == 0) return status::success();
  if (s.dstate > 256) return make_status(status_code::unsupported, "tree_scan kernel supports dstate <= 256");
  if (s.nodes > INT32_MAX || s.heads > 65535 || p.num_requests > 65535)
    return make_status(status_code::unsupported, "too many nodes, heads or requests");
  if ((s.headdim + 3) / 4 > 65535) return make_status(status_code::unsupported, "tree_scan kernel: headdim too large");
  for (int d = 0; d < 4; ++d)
    if (p.states.data != nullptr && p.states.extent[d] > 1 && p.states.stride[d] == 0)
      return make_status(status_code::invalid_argument, "tree_scan kernel: states must not have a zero stride");
  return status::success();
}

//! Workspace bytes kernels::tree_scan_batch needs: 0 when `p.states` is
//! given, else room for capacity * heads * headdim * dstate scalars (0 for
//! calls tree_scan_batch_can_implement rejects).
template <class T>
std::size_t tree_scan_batch_workspace_size(const tree_scan_batch_params<T>& p) noexcept {
  tree_ssm_shape s;
  if (p.states.data != nullptr || p.num_requests <= 0 || !tree_scan_batch_check_shapes(p, s).ok()) return 0;
  workspace_carver c;
  (void)c.take<T>(static_cast<std::size_t>(s.nodes * s.heads * s.headdim * s.dstate));
  return c.bytes_used();
}

//! R tree scans in two launches (a one-block check of the offsets and of
//! every request's parents, then grid (heads, headdim / 4, R)), equal to
//! the host twin specdec::tree_scan_batch up to rounding. The offsets must
//! hold R + 1 entries; offsets that leave [0, capacity] or decrease give
//! every request out_of_range or not_sorted in request_status, and a
//! request that is empty or not topological gets empty_input or
//! not_topological: such requests read and write nothing else. Input
//! values are trusted (the host twin reports non_finite, and
//! invalid_argument for A > 0). Returns
//! tree_scan_batch_can_implement's status, buffer_too_small /
//! invalid_argument (workspace) or cuda_error (launch); statuses stay on
//! the device.
status tree_scan_batch(const tree_scan_batch_params<float>& p, void* workspace, std::size_t workspace_bytes,
                       void* stream) noexcept;
//! Double-precision overload.
status tree_scan_batch(const tree_scan_batch_params<double>& p, void* workspace, std::size_t workspace_bytes,
                       void* stream) noexcept;

//! Host checks of kernels::tree_conv1d_batch: tree_conv1d_batch_check_shapes
//! and a node capacity of at most 65535 (unsupported beyond).
template <class T>
status tree_conv1d_batch_can_implement(const tree_conv1d_batch_params<T>& p) noexcept {
  SPECDEC_TRY(tree_conv1d_batch_check_shapes(p));
  if (p.num_requests > 0 && p.in.x.extent[0] > 65535)
    return make_status(status_code::unsupported, "tree_conv1d kernel: at most 65535 nodes");
  return status::success();
}

//! R tree conv1d calls in two launches (the check of tree_scan_batch, then
//! one thread per (node, channel)), equal to the host twin
//! specdec::tree_conv1d_batch up to rounding (same summation order). No
//! workspace. Statuses as kernels::tree_scan_batch.
status tree_conv1d_batch(const tree_conv1d_batch_params<float>& p, void* workspace, std::size_t workspace_bytes,
                         void* stream) noexcept;
//! Double-precision overload.
status tree_conv1d_batch(const tree_conv1d_batch_params<double>& p, void* workspace, std::size_t workspace_bytes,
                         void* stream) noexcept;

}  // namespace specdec::kernels
