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

//! Recurrent tree scan. Grid (heads, ceil(headdim / ssm_scan_warps)), block
//! 32 * ssm_scan_warps threads. Warp w of block (h, t) owns row
//! p = t * warps + w of head h; lane l owns state entries n = l + 32 r. Nodes
//! are visited in storage order (any topological order); node i starts from
//! its parent's state, read from `states` (written earlier by this very
//! thread, so no synchronisation), or from registers when the parent is
//! node i - 1 (chains, first children in DFS order). Every node's state is
//! written to `states` [N, heads, headdim, dstate] (the caller's per-node
//! output or a workspace). y = warp-reduced C . h + D x, gated.
template <class T>
SPECDEC_KERNEL void tree_scan_kernel(const node_id* parent, tree_ssm_inputs<T> in, tree_ssm_options<T> opt, view3d<T> y,
                                     view4d<T> states, std::int32_t* status_word) {
  const std::int64_t heads = in.x.extent[1], headdim = in.x.extent[2];
  const std::int64_t nodes = in.x.extent[0], dstate = in.B.extent[2];
  const std::int64_t h = blockIdx.x;
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const std::int64_t p = static_cast<std::int64_t>(blockIdx.y) * ssm_scan_warps + warp;
  if (h >= heads || p >= headdim) return;
  const std::int64_t g = h / (heads / in.B.extent[1]);
  const T bias = in.dt_bias.data != nullptr ? in.dt_bias(h) : T(0);
  const T a = in.A(h);
  const T dcoef = tree_ssm_d(in, h, p);
  T reg[ssm_scan_max_per_lane];
#pragma unroll
  for (int r = 0; r < ssm_scan_max_per_lane; ++r) reg[r] = T(0);
  for (std::int64_t i = 0; i < nodes; ++i) {
    const node_id par = parent[i];
    if (!ssm_parent_ok(static_cast<std::int32_t>(i), par)) {
      ssm_report(status_word, status_code::not_topological);
      return;
    }
    const T dt = specdec::detail::ssm_dt_effective(in.dt(i, h), bias, opt);
    const T decay = exp(specdec::detail::ssm_log_decay(dt, a));
    const T xv = in.x(i, h, p);
    const T xdt = dt * xv;
    T acc = T(0);
#pragma unroll
    for (int r = 0; r < ssm_scan_max_per_lane; ++r) {
      const std::int64_t n = lane + 32 * r;
      if (n < dstate) {
        T prev;
        if (par < 0)
          prev = in.h0.data != nullptr ? in.h0(h, p, n) : T(0);
        else if (par == i - 1)
          prev = reg[r];
        else
          prev = states(par, h, p, n);
        const T v = decay * prev + xdt * in.B(i, g, n);
        reg[r] = v;
        states(i, h, p, n) = v;
        acc += v * in.C(i, g, n);
      }
    }
#pragma unroll
    for (int off = 16; off > 0; off /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, off);
    if (lane == 0) {
      T out = acc + dcoef * xv;
      if (in.z.data != nullptr) out *= specdec::detail::ssm_silu(in.z(i, h, p));
      y(i, h, p) = out;
    }
  }
}

//! Tree conv1d: one thread per (node, channel); grid (ceil(channels /
//! blockDim.x), N). The window walks parent links (checked) and then the
//! newest conv-state columns, like the host tree_conv1d.
template <class T>
SPECDEC_KERNEL void tree_conv1d_kernel(const node_id* parent, tree_conv1d_inputs<T> in, view2d<T> out,
                                       std::int32_t* status_word) {
  const std::int64_t c = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::int64_t i = blockIdx.y;
  const std::int64_t ch = in.x.extent[1], w = in.weight.extent[1];
  if (c >= ch || i >= in.x.extent[0]) return;
  const std::int64_t len = in.conv_state.data != nullptr ? in.conv_state.extent[1] : 0;
  T acc = in.bias.data != nullptr ? in.bias(c) : T(0);
  std::int64_t u = i, r = 0;
  for (std::int64_t m = 0; m < w; ++m) {
    T v;
    if (u >= 0) {
      v = in.x(u, c);
      const node_id par = parent[u];
      if (!ssm_parent_ok(static_cast<std::int32_t>(u), par)) {
        ssm_report(status_word, status_code::not_topological);
        return;
      }
      u = par;
    } else {
      v = in.conv_state(c, len - 1 - r);
      ++r;
    }
    acc += in.weight(c, w - 1 - m) * v;
  }
  out(i, c) = in.silu ? specdec::detail::ssm_silu(acc) : acc;
}

static_assert(32 * ssm_scan_max_per_lane == 256, "tree_scan_can_implement assumes dstate <= 256");
static_assert(ssm_scan_warps == 4, "tree_scan_can_implement assumes 4 headdim rows per block");

//! Checks (kernels::tree_scan_can_implement, workspace) and launches
//! tree_scan_kernel on `stream`: the kernels API's tree_scan, for engines
//! that compile this header themselves. The status word, when given, is
//! reset on the stream first, so a stale fault is never reported.
template <class T>
status tree_scan(const kernels::tree_scan_params<T>& p, void* workspace, std::size_t workspace_bytes,
                 cudaStream_t stream) noexcept {
  SPECDEC_TRY(kernels::tree_scan_can_implement(p));
  tree_ssm_shape s;
  SPECDEC_TRY(validate_tree_ssm_shapes(p.in, s));
  view4d<T> states = p.states;
  if (states.data == nullptr) {
    workspace_carver c(workspace, workspace_bytes);
    T* buf = c.take<T>(static_cast<std::size_t>(s.nodes * s.heads * s.headdim * s.dstate));
    if (buf == nullptr || c.overflowed())
      return make_status(status_code::buffer_too_small, "tree_scan: workspace smaller than tree_scan_workspace_size");
    if (!c.base_aligned()) return make_status(status_code::invalid_argument, "workspace must be 256-byte aligned");
    states = make_view(buf, s.nodes, s.heads, s.headdim, s.dstate);
  }
  const dim3 grid(static_cast<unsigned>(s.heads),
                  static_cast<unsigned>((s.headdim + ssm_scan_warps - 1) / ssm_scan_warps));
  const dim3 block(32 * ssm_scan_warps);
  if (p.status_word != nullptr) SPECDEC_TRY(from_cuda(cudaMemsetAsync(p.status_word, 0, sizeof(std::int32_t), stream)));
  tree_scan_kernel<T><<<grid, block, 0, stream>>>(p.parent, p.in, p.opt, p.y, states, p.status_word);
  return last_launch_status();
}

//! Checks (kernels::tree_conv1d_can_implement) and launches
//! tree_conv1d_kernel on `stream`: the kernels API's tree_conv1d. Needs no
//! workspace; resets the status word first like tree_scan.
template <class T>
status tree_conv1d(const kernels::tree_conv1d_params<T>& p, void* /*workspace*/, std::size_t /*workspace_bytes*/,
                   cudaStream_t stream) noexcept {
  SPECDEC_TRY(kernels::tree_conv1d_can_implement(p));
  const std::int64_t n = p.in.x.extent[0], ch = p.in.x.extent[1];
  constexpr int threads = 128;
  const dim3 grid(static_cast<unsigned>((ch + threads - 1) / threads), static_cast<unsigned>(n));
  if (p.status_word != nullptr) SPECDEC_TRY(from_cuda(cudaMemsetAsync(p.status_word, 0, sizeof(std::int32_t), stream)));
  tree_conv1d_kernel<T><<<grid, threads, 0, stream>>>(p.parent, p.in, p.out, p.status_word);
  return last_launch_status();
}

}  // namespace specdec::cuda
