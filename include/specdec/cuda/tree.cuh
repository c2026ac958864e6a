//! \file
//! Device template for batched tree masks and positions (see
//! kernels/tree.hpp for the contract). Engines compiling with nvcc may
//! launch it directly; others link specdec::kernels.
//!
//! Grid: x = tree, y = chunk of tree_mask_rows_per_block rows. Each block
//! first checks its whole tree (cheap: N reads) so every block agrees on the
//! tree's status before any write; then one warp builds one row. A row is
//! written in passes of 32 words, lane l owning word base + l: the warp
//! walks the row's ancestor chain (ids strictly decrease, so a pass stops
//! below its first column) and each lane sets the bits that fall in its
//! word. Writes are coalesced and each word is written exactly once.
#pragma once

#include <climits>
#include <cstdint>

#include <cuda_runtime.h>

#include "specdec/core/config.hpp"
#include "specdec/core/status.hpp"
#include "specdec/cuda/check.cuh"
#include "specdec/kernels/tree.hpp"
#include "specdec/tree/batch.hpp"

namespace specdec::cuda {

//! Threads per block of tree_mask_kernel (8 warps).
inline constexpr int tree_mask_threads = 256;

//! One block per (tree, row chunk); `parents_in_smem` selects whether the
//! tree's parents are staged in dynamic shared memory (max_nodes ints).
template <class Word>
__global__ void __launch_bounds__(tree_mask_threads)
    tree_mask_kernel(const tree_masks_params<Word> b, const bool parents_in_smem) {
  extern __shared__ __align__(8) unsigned char tree_mask_smem[];
  __shared__ int s_first_bad;
  __shared__ int s_any_root;
  constexpr int W = static_cast<int>(sizeof(Word) * 8);
  const int t = static_cast<int>(blockIdx.x);
  const int chunk = static_cast<int>(blockIdx.y);
  const bool reporter = chunk == 0 && threadIdx.x == 0;

  std::int32_t begin = 0, n = 0;
  const status_code pre = batch_tree_precheck(b, t, begin, n);
  if (pre != status_code::ok) {
    if (reporter) b.request_status[t] = static_cast<std::int32_t>(pre);
    return;
  }
  const int row_begin = chunk * kernels::tree_mask_rows_per_block;
  if (row_begin >= n) return;  // chunk 0 always has row 0, so the reporter stays

  const node_id* gp = b.parents + begin;
  node_id* sp = reinterpret_cast<node_id*>(tree_mask_smem);
  if (threadIdx.x == 0) {
    s_first_bad = INT_MAX;
    s_any_root = 0;
  }
  __syncthreads();
  // Same checks as validate_topological_parents; the smallest bad index
  // decides, so host and device report the same code.
  for (int i = static_cast<int>(threadIdx.x); i < n; i += blockDim.x) {
    const node_id p = gp[i];
    if (parents_in_smem) sp[i] = p;
    if (p == -1) atomicOr(&s_any_root, 1);
    const bool bad = i == 0 ? p != -1 : (p < 0 || p >= i);
    if (bad) atomicMin(&s_first_bad, i);
  }
  __syncthreads();
  const int fb = s_first_bad;
  if (fb != INT_MAX) {
    if (reporter) {
      status_code code = status_code::not_topological;
      if (fb == 0) {
        code = s_any_root ? status_code::not_topological : status_code::no_root;
      } else {
        const node_id p = gp[fb];
        code = p == -1 ? status_code::multiple_roots
                       : ((p < -1 || p >= n) ? status_code::parent_out_of_range : status_code::not_topological);
      }
      b.request_status[t] = static_cast<std::int32_t>(code);
    }
    return;
  }
  if (reporter) b.request_status[t] = static_cast<std::int32_t>(status_code::ok);

  const node_id* P = parents_in_smem ? sp : gp;
  const std::int64_t stride = batch_row_stride(b);
  const int words = (n + W - 1) / W;
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int warps = static_cast<int>(blockDim.x) / 32;
  const int row_end = min(n, row_begin + kernels::tree_mask_rows_per_block);
  const position_id cache_len = b.cache_len == nullptr ? 0 : b.cache_len[t];
  for (int i = row_begin + warp; i < row_end; i += warps) {
    Word* row = b.masks + (static_cast<std::int64_t>(begin) + i) * stride;
    int steps = 0;
    for (int base = 0; base < words; base += 32) {
      const int w = base + lane;
      const int lo = base * W;  // first column this pass covers
      Word acc = 0;
      // Ancestor ids strictly decrease, so stop below the pass; -1 < lo ends it at the root.
      for (node_id j = i; j >= lo; j = P[j]) {
        if (j / W == w) acc |= Word{1} << (j % W);
        if (base == 0) ++steps;
      }
      if (w < words) row[w] = acc;
    }
    if (lane == 0 && b.positions != nullptr) b.positions[begin + i] = cache_len + (steps - 1);
  }
}

//! Validates (kernels::build_tree_masks_batched_can_implement) and launches
//! tree_mask_kernel on `stream`: the kernels API's build_tree_masks_batched, for
//! engines that compile this header themselves. Needs no workspace.
template <class Word>
status build_tree_masks_batched(const tree_masks_params<Word>& b, void* /*workspace*/, std::size_t /*workspace_bytes*/,
                                cudaStream_t stream) noexcept {
  SPECDEC_TRY(kernels::build_tree_masks_batched_can_implement(b));
  if (b.num_requests == 0) return status::success();
  const int max_nodes = b.max_nodes > 0 ? b.max_nodes : 1;
  const unsigned chunks =
      static_cast<unsigned>((max_nodes + kernels::tree_mask_rows_per_block - 1) / kernels::tree_mask_rows_per_block);
  const bool smem = b.max_nodes <= kernels::tree_mask_smem_max_nodes;
  const std::size_t smem_bytes = smem ? static_cast<std::size_t>(max_nodes) * sizeof(node_id) : 0;
  const dim3 grid(static_cast<unsigned>(b.num_requests), chunks);
  tree_mask_kernel<Word><<<grid, tree_mask_threads, smem_bytes, stream>>>(b, smem);
  return last_launch_status();
}

}  // namespace specdec::cuda
