//! \file
//! Device side of batched ancestor-closed top-B pruning (host twin:
//! specdec/draft/batch_prune.hpp). Three steps per batch:
//!  1. one block per request validates the tree and the budget exactly as
//!     the host does (same status codes), and writes one unique 64-bit key
//!     per node: the order-preserving bits of the effective score
//!     e_i = min(s_i, e_parent) (-0 folded into +0) in the high word and
//!     0xFFFFFFFF - id in the low word, so a descending sort of the keys is
//!     exactly the host's (e desc, id asc) order without relying on
//!     sort stability;
//!  2. cub::DeviceSegmentedRadixSort::SortKeysDescending over the requests;
//!  3. one block per request marks the first B sorted ids and renumbers the
//!     survivors in id order with a block-wide scan.
//! Status words report per-request errors; nothing traps.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>
#include <cub/cub.cuh>

#include "specdec/core/status.hpp"
#include "specdec/core/workspace.hpp"
#include "specdec/cuda/check.cuh"
#include "specdec/kernels/draft.hpp"
#include "specdec/tree/token_tree.hpp"

namespace specdec::cuda {

//! Device pointers of one batched pruning call (see kernels/draft.hpp).
struct prune_batch_args {
  const node_id* parent;         //!< concatenated local parent ids
  const float* score;            //!< node scores
  const std::int32_t* offsets;   //!< R + 1 node offsets (CSR)
  const std::int32_t* budget;    //!< R budgets, or null: use uniform_budget
  std::int32_t uniform_budget;   //!< the budget of every request when `budget` is null
  std::int32_t num_requests;     //!< R
  node_id* new_index;            //!< output: new local id of each node, or -1
  std::int32_t* kept;            //!< output: nodes kept per request
  std::int32_t* request_status;  //!< output: status_code per request
};

namespace detail {

//! Unique descending-sortable key of (effective score e, local id).
__device__ inline std::uint64_t prune_key(float e, std::int32_t id) {
  std::uint32_t b = __float_as_uint(e);
  b = (b & 0x80000000u) ? ~b : (b | 0x80000000u);  // monotone float -> uint map
  return (static_cast<std::uint64_t>(b) << 32) | (0xFFFFFFFFu - static_cast<std::uint32_t>(id));
}

// Step 0 (one block): every request's span against the batch's bounds.
// seg[r], seg[R + r]: the span to use (empty for all when any is
// malformed, so that nothing past the caller's arrays is read, written or
// sorted); seg[2R]: 1 when the batch's offsets are malformed.
template <int BlockSize>
__global__ void __launch_bounds__(BlockSize) prune_spans_kernel(const std::int32_t* offsets, std::int32_t num_requests,
                                                                std::int32_t total_nodes, std::int32_t* seg) {
  __shared__ int bad;
  if (threadIdx.x == 0) bad = 0;
  __syncthreads();
  for (std::int32_t r = threadIdx.x; r < num_requests; r += BlockSize)
    if (!kernels::prune_span_ok(offsets[r], offsets[r + 1], total_nodes)) atomicOr(&bad, 1);
  __syncthreads();
  const bool any = bad != 0;
  for (std::int32_t r = threadIdx.x; r < num_requests; r += BlockSize) {
    seg[r] = any ? 0 : offsets[r];
    seg[num_requests + r] = any ? 0 : offsets[r + 1];
  }
  if (threadIdx.x == 0) seg[2 * num_requests] = any ? 1 : 0;
}

// Step 1: validation and keys. Effective scores need the parent's value
// first; ids are topological, so one thread walks the (short) request in
// order while the block validates in parallel.
template <int BlockSize>
__global__ void __launch_bounds__(BlockSize)
    prune_keys_kernel(prune_batch_args a, const std::int32_t* seg, float* eff, std::uint64_t* keys) {
  const int r = blockIdx.x;
  if (seg[2 * a.num_requests] != 0) {  // malformed offsets: nothing of the batch is read
    if (threadIdx.x == 0) a.request_status[r] = static_cast<std::int32_t>(status_code::out_of_range);
    return;
  }
  const std::int32_t off = seg[r], n = seg[a.num_requests + r] - off;
  const node_id* par = a.parent + off;
  const float* sc = a.score + off;
  __shared__ int first_bad;  // smallest failing node index (tree check)
  __shared__ int any_root;
  __shared__ int bad_score;
  if (threadIdx.x == 0) {
    first_bad = INT32_MAX;
    any_root = 0;
    bad_score = 0;
  }
  __syncthreads();
  for (std::int32_t i = threadIdx.x; i < n; i += BlockSize) {
    const node_id p = par[i];
    if (p == -1) atomicOr(&any_root, 1);
    const bool bad = i == 0 ? p != -1 : (p == -1 || p < -1 || p >= n || p >= i);
    if (bad) atomicMin(&first_bad, i);
    const float s = sc[i];
    if (s != s || s == INFINITY) atomicOr(&bad_score, 1);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    const std::int32_t b = a.budget != nullptr ? a.budget[r] : a.uniform_budget;
    status_code code = status_code::ok;
    if (b < 1) {
      code = status_code::invalid_argument;
    } else if (n < 1) {
      code = status_code::empty_input;  // the host's validate_topological_parents says the same
    } else if (first_bad != INT32_MAX) {
      const std::int32_t i = first_bad;
      const node_id p = par[i];
      if (i == 0)
        code = any_root ? status_code::not_topological : status_code::no_root;
      else if (p == -1)
        code = status_code::multiple_roots;
      else if (p < -1 || p >= n)
        code = status_code::parent_out_of_range;
      else
        code = status_code::not_topological;
    } else if (bad_score) {
      code = status_code::non_finite;
    }
    a.request_status[r] = static_cast<std::int32_t>(code);
    float* k = eff + off;
    if (code == status_code::ok) {
      for (std::int32_t i = 0; i < n; ++i) {
        float e = sc[i] + 0.0f;
        if (i > 0 && k[par[i]] < e) e = k[par[i]];
        k[i] = e;
      }
    } else {
      for (std::int32_t i = 0; i < n; ++i) k[i] = 0.0f;  // defined keys; the request is skipped later
    }
  }
  __syncthreads();
  for (std::int32_t i = threadIdx.x; i < n; i += BlockSize) keys[off + i] = prune_key(eff[off + i], i);
}

// Step 3: keep the first B sorted ids, renumber survivors in id order.
template <int BlockSize>
__global__ void __launch_bounds__(BlockSize)
    prune_select_kernel(prune_batch_args a, const std::int32_t* seg, const std::uint64_t* sorted_keys) {
  using scan_t = cub::BlockScan<std::int32_t, BlockSize>;
  __shared__ typename scan_t::TempStorage tmp;
  __shared__ std::int32_t carry;
  const int r = blockIdx.x;
  if (a.request_status[r] != 0) {
    if (threadIdx.x == 0) a.kept[r] = 0;
    return;
  }
  const std::int32_t off = seg[r], n = seg[a.num_requests + r] - off;
  const std::int32_t b0 = a.budget != nullptr ? a.budget[r] : a.uniform_budget;
  const std::int32_t b = b0 < n ? b0 : n;
  node_id* out = a.new_index + off;
  for (std::int32_t i = threadIdx.x; i < n; i += BlockSize) out[i] = -1;
  __syncthreads();
  for (std::int32_t j = threadIdx.x; j < b; j += BlockSize)
    out[0xFFFFFFFFu - static_cast<std::uint32_t>(sorted_keys[off + j])] = 0;
  if (threadIdx.x == 0) carry = 0;
  __syncthreads();
  for (std::int32_t base = 0; base < n; base += BlockSize) {
    const std::int32_t i = base + static_cast<std::int32_t>(threadIdx.x);
    const std::int32_t flag = (i < n && out[i] == 0) ? 1 : 0;
    std::int32_t pos = 0, total = 0;
    scan_t(tmp).ExclusiveSum(flag, pos, total);
    if (flag) out[i] = carry + pos;
    __syncthreads();
    if (threadIdx.x == 0) carry += total;
    __syncthreads();
  }
  if (threadIdx.x == 0) a.kept[r] = carry;
}

}  // namespace detail

//! Scratch of one call, carved by one routine for sizing and running:
//! effective scores (N floats), sort keys in and out (2 x N uint64) and
//! CUB's temporary storage, each 256-byte aligned.
struct prune_batch_scratch {
  std::int32_t* seg = nullptr;        //!< checked span begins (R), ends (R), malformed flag (1)
  float* eff = nullptr;               //!< effective scores (N)
  std::uint64_t* keys_in = nullptr;   //!< sort keys (N)
  std::uint64_t* keys_out = nullptr;  //!< sorted keys (N)
  void* cub_tmp = nullptr;            //!< CUB's temporary storage
  std::size_t cub_bytes = 0;          //!< its size in bytes
};

//! Carves the scratch from `c` (a counting carver when sizing). Asks CUB
//! for its temporary size (no device work); cuda_error when that fails.
inline status carve_prune_batch(workspace_carver& c, std::int32_t num_requests, std::int32_t total_nodes,
                                prune_batch_scratch& w) noexcept {
  SPECDEC_TRY(from_cuda(cub::DeviceSegmentedRadixSort::SortKeysDescending(
      nullptr, w.cub_bytes, static_cast<const std::uint64_t*>(nullptr), static_cast<std::uint64_t*>(nullptr),
      total_nodes, num_requests, static_cast<const std::int32_t*>(nullptr),
      static_cast<const std::int32_t*>(nullptr))));
  const auto n = static_cast<std::size_t>(total_nodes);
  w.seg = c.take<std::int32_t>(2 * static_cast<std::size_t>(num_requests) + 1);
  w.eff = c.take<float>(n);
  w.keys_in = c.take<std::uint64_t>(n);
  w.keys_out = c.take<std::uint64_t>(n);
  w.cub_tmp = c.take<unsigned char>(w.cub_bytes);
  return status::success();
}

//! Workspace bytes of batch_prune_to_budget (see kernels/draft.hpp).
inline std::size_t batch_prune_workspace_size(const kernels::batch_prune_params& p) noexcept {
  if (p.num_requests < 0 || p.total_nodes < 0) return 0;
  workspace_carver c;
  prune_batch_scratch w;
  if (!carve_prune_batch(c, p.num_requests, p.total_nodes, w).ok()) return 0;
  return c.bytes_used();
}

//! Checks (kernels::batch_prune_can_implement, workspace size and
//! alignment) and enqueues the three steps on `stream`: the kernels API's
//! batch_prune_to_budget, for engines that compile this header themselves.
template <int BlockSize = 256>
status batch_prune_to_budget(const kernels::batch_prune_params& p, void* workspace, std::size_t workspace_bytes,
                             cudaStream_t stream) noexcept {
  SPECDEC_TRY(kernels::batch_prune_can_implement(p));
  if (p.num_requests == 0) return status::success();
  workspace_carver c(workspace, workspace_bytes);
  prune_batch_scratch w;
  SPECDEC_TRY(carve_prune_batch(c, p.num_requests, p.total_nodes, w));
  if (workspace == nullptr || c.overflowed())
    return make_status(status_code::buffer_too_small, "workspace smaller than batch_prune_workspace_size");
  if (!c.base_aligned()) return make_status(status_code::invalid_argument, "workspace must be 256-byte aligned");
  const prune_batch_args a{p.parent,       p.score,     p.offsets, p.budget,        p.uniform_budget,
                           p.num_requests, p.new_index, p.kept,    p.request_status};
  detail::prune_spans_kernel<BlockSize><<<1, BlockSize, 0, stream>>>(a.offsets, a.num_requests, p.total_nodes, w.seg);
  SPECDEC_TRY(last_launch_status());
  detail::prune_keys_kernel<BlockSize><<<a.num_requests, BlockSize, 0, stream>>>(a, w.seg, w.eff, w.keys_in);
  SPECDEC_TRY(last_launch_status());
  std::size_t cub_bytes = w.cub_bytes;
  SPECDEC_TRY(from_cuda(cub::DeviceSegmentedRadixSort::SortKeysDescending(w.cub_tmp, cub_bytes, w.keys_in, w.keys_out,
                                                                          p.total_nodes, a.num_requests, w.seg,
                                                                          w.seg + a.num_requests, 0, 64, stream)));
  detail::prune_select_kernel<BlockSize><<<a.num_requests, BlockSize, 0, stream>>>(a, w.seg, w.keys_out);
  return last_launch_status();
}

}  // namespace specdec::cuda
