//! \file
//! Device templates for the tree-masked SSM primitives: the recurrent tree
//! scan (parent-state lookup) and the tree conv1d. The host twins are
//! ssm/tree_scan_recurrent.hpp and ssm/tree_conv1d.hpp; the compiled entry
//! points are in specdec::kernels (kernels/ssm.hpp).
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

#include "specdec/core/config.hpp"
#include "specdec/core/status.hpp"
#include "specdec/core/view.hpp"
#include "specdec/core/workspace.hpp"
#include "specdec/cuda/check.cuh"
#include "specdec/kernels/ssm.hpp"
#include "specdec/ssm/tree_conv1d.hpp"
#include "specdec/ssm/tree_ssm_batch.hpp"
#include "specdec/ssm/tree_ssm_inputs.hpp"
#include "specdec/tree/token_tree.hpp"

namespace specdec::cuda {

//! Most dstate entries one lane of the scan keeps in registers (dstate <= 32 * this).
inline constexpr int ssm_scan_max_per_lane = 8;
//! Warps per block of the scan kernel; each warp owns one headdim row.
inline constexpr int ssm_scan_warps = 4;

//! Records the first error in a device status word (0 = ok), never traps.
SPECDEC_DEVICE void ssm_report(std::int32_t* word, status_code code) {
  if (word != nullptr) atomicCAS(reinterpret_cast<int*>(word), 0, static_cast<int>(code));
}

//! True when node i's parent is legal in a topological array (root 0 with
//! parent -1, else 0 <= parent < i): checked on the device because the host
//! API never reads device memory.
SPECDEC_DEVICE bool ssm_parent_ok(std::int32_t i, node_id p) { return i == 0 ? p == -1 : (p >= 0 && p < i); }

//! One warp's headdim row p of head h through the `nodes` nodes of a tree
//! whose node i is row base + i of every node-major view (parent ids
//! local): lane l owns state entries n = l + 32 r. Nodes are visited in
//! storage order (any topological order); node i starts from its parent's
//! state, read from `states` (written earlier by this very thread, so no
//! synchronisation), from registers when the parent is node i - 1 (chains,
//! first children in DFS order), or from h0 ([heads, headdim, dstate];
//! null: zeros) at the root. Every node's state is written to `states`.
//! y = warp-reduced C . h + D x, gated. CheckParents: returns false at the
//! first parent that is not topological (nodes before it are written).
template <bool CheckParents, class T>
SPECDEC_DEVICE bool ssm_scan_row(const node_id* parent, std::int64_t base, std::int64_t nodes,
                                 const tree_ssm_inputs<T>& in, const view3d<const T>& h0,
                                 const tree_ssm_options<T>& opt, const view3d<T>& y, const view4d<T>& states,
                                 std::int64_t h, std::int64_t p, int lane) {
  const std::int64_t dstate = in.B.extent[2];
  const std::int64_t g = h / (in.x.extent[1] / in.B.extent[1]);
  const T bias = in.dt_bias.data != nullptr ? in.dt_bias(h) : T(0);
  const T a = in.A(h);
  const T dcoef = tree_ssm_d(in, h, p);
  T reg[ssm_scan_max_per_lane];
#pragma unroll
  for (int r = 0; r < ssm_scan_max_per_lane; ++r) reg[r] = T(0);
  for (std::int64_t i = 0; i < nodes; ++i) {
    const std::int64_t k = base + i;
    const node_id par = parent[k];
    if (CheckParents && !ssm_parent_ok(static_cast<std::int32_t>(i), par)) return false;
    const T dt = specdec::detail::ssm_dt_effective(in.dt(k, h), bias, opt);
    const T decay = exp(specdec::detail::ssm_log_decay(dt, a));
    const T xv = in.x(k, h, p);
    const T xdt = dt * xv;
    T acc = T(0);
#pragma unroll
    for (int r = 0; r < ssm_scan_max_per_lane; ++r) {
      const std::int64_t n = lane + 32 * r;
      if (n < dstate) {
        T prev;
        if (par < 0)
          prev = h0.data != nullptr ? h0(h, p, n) : T(0);
        else if (par == i - 1)
          prev = reg[r];
        else
          prev = states(base + par, h, p, n);
        const T v = decay * prev + xdt * in.B(k, g, n);
        reg[r] = v;
        states(k, h, p, n) = v;
        acc += v * in.C(k, g, n);
      }
    }
#pragma unroll
    for (int off = 16; off > 0; off /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, off);
    if (lane == 0) {
      T out = acc + dcoef * xv;
      if (in.z.data != nullptr) out *= specdec::detail::ssm_silu(in.z(k, h, p));
      y(k, h, p) = out;
    }
  }
  return true;
}

//! Recurrent tree scan. Grid (heads, ceil(headdim / ssm_scan_warps)), block
//! 32 * ssm_scan_warps threads: warp w of block (h, t) runs row p = t *
//! warps + w of head h through ssm_scan_row, states [N, heads, headdim,
//! dstate] (the caller's per-node output or a workspace).
template <class T>
SPECDEC_KERNEL void tree_scan_kernel(const node_id* parent, tree_ssm_inputs<T> in, tree_ssm_options<T> opt, view3d<T> y,
                                     view4d<T> states, std::int32_t* request_status) {
  const std::int64_t h = blockIdx.x;
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const std::int64_t p = static_cast<std::int64_t>(blockIdx.y) * ssm_scan_warps + warp;
  if (h >= in.x.extent[1] || p >= in.x.extent[2]) return;
  if (!ssm_scan_row<true>(parent, 0, in.x.extent[0], in, view3d<const T>(in.h0), opt, y, states, h, p, lane))
    ssm_report(request_status, status_code::not_topological);
}

//! The check of a batched SSM call, one block: request_status[r] =
//! ssm_batch_offsets_check's code for every request when the offsets fail
//! (endpoints, then the steps in parallel), else ssm_batch_request_check's.
template <int Threads>
SPECDEC_KERNEL void __launch_bounds__(Threads)
    ssm_batch_check_kernel(const std::int32_t* offsets, const node_id* parent, std::int32_t num_requests,
                           std::int64_t capacity, std::int32_t* request_status) {
  __shared__ int out_of_range, unsorted;
  if (threadIdx.x == 0) {
    out_of_range = offsets[0] < 0 || offsets[num_requests] > capacity ? 1 : 0;
    unsorted = 0;
  }
  __syncthreads();
  if (out_of_range == 0)
    for (std::int32_t i = static_cast<std::int32_t>(threadIdx.x); i < num_requests; i += Threads)
      if (!ssm_batch_offset_step_ok(offsets, i)) unsorted = 1;  // every writer writes 1
  __syncthreads();
  const status_code all = out_of_range != 0 ? status_code::out_of_range
                          : unsorted != 0   ? status_code::not_sorted
                                            : status_code::ok;
  for (std::int32_t r = static_cast<std::int32_t>(threadIdx.x); r < num_requests; r += Threads)
    request_status[r] =
        static_cast<std::int32_t>(all != status_code::ok ? all : ssm_batch_request_check(offsets, parent, r));
}

//! Batched recurrent tree scan: grid (heads, ceil(headdim / warps), R);
//! block (h, t, r) runs request r's rows through ssm_scan_row when its
//! check passed (request_status[r], written by ssm_batch_check_kernel
//! earlier on the stream), with its h0 slice.
template <class T>
SPECDEC_KERNEL void tree_scan_batch_kernel(tree_scan_batch_params<T> bp, view4d<T> states) {
  const auto r = static_cast<std::int32_t>(blockIdx.z);
  const std::int64_t h = blockIdx.x;
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const std::int64_t p = static_cast<std::int64_t>(blockIdx.y) * ssm_scan_warps + warp;
  if (h >= bp.in.x.extent[1] || p >= bp.in.x.extent[2] || bp.request_status[r] != 0) return;
  const std::int64_t b = bp.offsets[r];
  const view3d<const T> h0 = bp.h0.data != nullptr ? bp.h0.slice(r) : view3d<const T>{};
  (void)ssm_scan_row<false>(bp.parent, b, bp.offsets[r + 1] - b, bp.in, h0, bp.opt, bp.y, states, h, p, lane);
}

//! Output channel c of tree node i (row base + i of x and out, local parent
//! ids): the window walks parent links (CheckParents: false at the first
//! link that is not topological, nothing written) and then the newest
//! columns of conv_state ([channels, L]), like the host tree_conv1d.
template <bool CheckParents, class T>
SPECDEC_DEVICE bool ssm_conv1d_at(const node_id* parent, std::int64_t base, std::int64_t i, std::int64_t c,
                                  const tree_conv1d_inputs<T>& in, const view2d<const T>& conv_state,
                                  const view2d<T>& out) {
  const std::int64_t w = in.weight.extent[1];
  const std::int64_t len = conv_state.data != nullptr ? conv_state.extent[1] : 0;
  T acc = in.bias.data != nullptr ? in.bias(c) : T(0);
  std::int64_t u = i, r = 0;
  for (std::int64_t m = 0; m < w; ++m) {
    T v;
    if (u >= 0) {
      v = in.x(base + u, c);
      const node_id par = parent[base + u];
      if (CheckParents && !ssm_parent_ok(static_cast<std::int32_t>(u), par)) return false;
      u = par;
    } else {
      v = conv_state(c, len - 1 - r);
      ++r;
    }
    acc += in.weight(c, w - 1 - m) * v;
  }
  out(base + i, c) = in.silu ? specdec::detail::ssm_silu(acc) : acc;
  return true;
}

//! Tree conv1d: one thread per (node, channel); grid (ceil(channels /
//! blockDim.x), N).
template <class T>
SPECDEC_KERNEL void tree_conv1d_kernel(const node_id* parent, tree_conv1d_inputs<T> in, view2d<T> out,
                                       std::int32_t* request_status) {
  const std::int64_t c = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::int64_t i = blockIdx.y;
  if (c >= in.x.extent[1] || i >= in.x.extent[0]) return;
  if (!ssm_conv1d_at<true>(parent, 0, i, c, in, view2d<const T>(in.conv_state), out))
    ssm_report(request_status, status_code::not_topological);
}

//! Batched tree conv1d: one thread per (node, channel) of the whole
//! capacity; grid (ceil(channels / blockDim.x), capacity). Node k belongs
//! to the request whose span holds it (a binary search over the checked
//! offsets); nodes outside every span and nodes of requests whose check
//! failed do nothing.
template <class T>
SPECDEC_KERNEL void tree_conv1d_batch_kernel(tree_conv1d_batch_params<T> bp) {
  const std::int64_t c = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const auto k = static_cast<std::int32_t>(blockIdx.y);
  const std::int32_t R = bp.num_requests;
  if (c >= bp.in.x.extent[1] || bp.request_status[0] == static_cast<std::int32_t>(status_code::out_of_range) ||
      bp.request_status[0] == static_cast<std::int32_t>(status_code::not_sorted))
    return;  // the offsets failed: every request has that code, no span is trusted
  if (k < bp.offsets[0] || k >= bp.offsets[R]) return;
  std::int32_t lo = 0, hi = R - 1;  // the last request whose span begins at or before k
  while (lo < hi) {
    const std::int32_t mid = lo + (hi - lo + 1) / 2;
    if (bp.offsets[mid] <= k)
      lo = mid;
    else
      hi = mid - 1;
  }
  if (bp.request_status[lo] != 0) return;
  const std::int64_t b = bp.offsets[lo];
  const view2d<const T> st = bp.conv_state.data != nullptr ? bp.conv_state.slice(lo) : view2d<const T>{};
  (void)ssm_conv1d_at<false>(bp.parent, b, k - b, c, bp.in, st, bp.out);
}

static_assert(32 * ssm_scan_max_per_lane == 256, "tree_scan_can_implement assumes dstate <= 256");
static_assert(ssm_scan_warps == 4, "tree_scan_can_implement assumes 4 headdim rows per block");

namespace detail {
//! The per-node states a scan launch writes and reads back: the caller's
//! `states`, or else N x heads x headdim x dstate scalars carved from the
//! workspace (buffer_too_small with `too_small`, a static string, when it
//! is shorter; invalid_argument when it is not 256-byte aligned).
template <class T>
status scan_states(view4d<T>& states, const tree_ssm_shape& s, void* workspace, std::size_t workspace_bytes,
                   const char* too_small) noexcept {
  if (states.data != nullptr) return status::success();
  workspace_carver c(workspace, workspace_bytes);
  T* buf = c.take<T>(static_cast<std::size_t>(s.nodes * s.heads * s.headdim * s.dstate));
  if (buf == nullptr || c.overflowed()) return make_status(status_code::buffer_too_small, too_small);
  if (!c.base_aligned()) return make_status(status_code::invalid_argument, "workspace must be 256-byte aligned");
  states = make_view(buf, s.nodes, s.heads, s.headdim, s.dstate);
  return status::success();
}
}  // namespace detail

//! Checks (kernels::tree_scan_can_implement, workspace) and launches
//! tree_scan_kernel on `stream`: the kernels API's tree_scan, for engines
//! that compile this header themselves. request_status, when given, is
//! reset on the stream first, so a stale fault is never reported.
template <class T>
status tree_scan(const kernels::tree_scan_params<T>& p, void* workspace, std::size_t workspace_bytes,
                 cudaStream_t stream) noexcept {
  SPECDEC_TRY(kernels::tree_scan_can_implement(p));
  tree_ssm_shape s;
  SPECDEC_TRY(validate_tree_ssm_shapes(p.in, s));
  view4d<T> states = p.states;
  SPECDEC_TRY(detail::scan_states(states, s, workspace, workspace_bytes,
                                  "tree_scan: workspace smaller than tree_scan_workspace_size"));
  const dim3 grid(static_cast<unsigned>(s.heads),
                  static_cast<unsigned>((s.headdim + ssm_scan_warps - 1) / ssm_scan_warps));
  const dim3 block(32 * ssm_scan_warps);
  if (p.request_status != nullptr)
    SPECDEC_TRY(from_cuda(cudaMemsetAsync(p.request_status, 0, sizeof(std::int32_t), stream)));
  tree_scan_kernel<T><<<grid, block, 0, stream>>>(p.parent, p.in, p.opt, p.y, states, p.request_status);
  return last_launch_status();
}

//! Checks (kernels::tree_conv1d_can_implement) and launches
//! tree_conv1d_kernel on `stream`: the kernels API's tree_conv1d. Needs no
//! workspace; resets request_status first like tree_scan.
template <class T>
status tree_conv1d(const kernels::tree_conv1d_params<T>& p, void* /*workspace*/, std::size_t /*workspace_bytes*/,
                   cudaStream_t stream) noexcept {
  SPECDEC_TRY(kernels::tree_conv1d_can_implement(p));
  const std::int64_t n = p.in.x.extent[0], ch = p.in.x.extent[1];
  constexpr int threads = 128;
  const dim3 grid(static_cast<unsigned>((ch + threads - 1) / threads), static_cast<unsigned>(n));
  if (p.request_status != nullptr)
    SPECDEC_TRY(from_cuda(cudaMemsetAsync(p.request_status, 0, sizeof(std::int32_t), stream)));
  tree_conv1d_kernel<T><<<grid, threads, 0, stream>>>(p.parent, p.in, p.out, p.request_status);
  return last_launch_status();
}

//! Threads of ssm_batch_check_kernel's one block.
inline constexpr int ssm_batch_check_threads = 256;

//! Checks (kernels::tree_scan_batch_can_implement, workspace) and launches
//! ssm_batch_check_kernel then tree_scan_batch_kernel on `stream`: the
//! kernels API's tree_scan_batch, for engines that compile this header.
template <class T>
status tree_scan_batch(const tree_scan_batch_params<T>& p, void* workspace, std::size_t workspace_bytes,
                       cudaStream_t stream) noexcept {
  SPECDEC_TRY(kernels::tree_scan_batch_can_implement(p));
  if (p.num_requests == 0) return status::success();
  tree_ssm_shape s;
  SPECDEC_TRY(validate_tree_ssm_shapes(p.in, s));
  view4d<T> states = p.states;
  SPECDEC_TRY(detail::scan_states(states, s, workspace, workspace_bytes,
                                  "tree_scan_batch: workspace smaller than tree_scan_batch_workspace_size"));
  ssm_batch_check_kernel<ssm_batch_check_threads>
      <<<1, ssm_batch_check_threads, 0, stream>>>(p.offsets, p.parent, p.num_requests, s.nodes, p.request_status);
  SPECDEC_TRY(last_launch_status());
  const dim3 grid(static_cast<unsigned>(s.heads),
                  static_cast<unsigned>((s.headdim + ssm_scan_warps - 1) / ssm_scan_warps),
                  static_cast<unsigned>(p.num_requests));
  tree_scan_batch_kernel<T><<<grid, 32 * ssm_scan_warps, 0, stream>>>(p, states);
  return last_launch_status();
}

//! Checks (kernels::tree_conv1d_batch_can_implement) and launches
//! ssm_batch_check_kernel then tree_conv1d_batch_kernel on `stream`: the
//! kernels API's tree_conv1d_batch. Needs no workspace.
template <class T>
status tree_conv1d_batch(const tree_conv1d_batch_params<T>& p, void* /*workspace*/, std::size_t /*workspace_bytes*/,
                         cudaStream_t stream) noexcept {
  SPECDEC_TRY(kernels::tree_conv1d_batch_can_implement(p));
  if (p.num_requests == 0) return status::success();
  const std::int64_t n = p.in.x.extent[0], ch = p.in.x.extent[1];
  ssm_batch_check_kernel<ssm_batch_check_threads>
      <<<1, ssm_batch_check_threads, 0, stream>>>(p.offsets, p.parent, p.num_requests, n, p.request_status);
  SPECDEC_TRY(last_launch_status());
  constexpr int threads = 128;
  const dim3 grid(static_cast<unsigned>((ch + threads - 1) / threads), static_cast<unsigned>(n));
  tree_conv1d_batch_kernel<T><<<grid, threads, 0, stream>>>(p);
  return last_launch_status();
}

}  // namespace specdec::cuda
