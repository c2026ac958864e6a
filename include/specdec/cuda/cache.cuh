//! \file
//! Device side of the KV commit: a validation kernel and one copy kernel
//! for strided and paged caches, one warp per (request, tensor, layer,
//! head) row. The copy is a chain of dependent loads per row (keep list,
//! block table, data), so rows are spread thin: a warp each, few warps per
//! block, the keep list's in-place prefix found by one ballot (one block
//! per layer moving every head was slower on an H100,
//! benchmarks/results/gpu-h100-2026-11-26.md). Engines
//! compiling with nvcc may launch these templates directly;
//! specdec::kernels::commit_kv wraps them (kernels/cache.cu).
//!
//! Parallel safety. Within one (tensor, request,
//! layer, head) row, entry k reads position s_k = keep[k] and writes
//! position d_k = cache_len + k. Keep lists are strictly increasing with
//! s_0 >= cache_len, so the shift t_k = s_k - d_k is >= 0 and
//! non-decreasing in k. A write to d_k can destroy a value still needed
//! only if d_k = s_j for some entry j, i.e. j + t_j = k: that requires
//! j <= k, and j = k only when t_k = 0 (entry k is a no-op, skipped). So
//! the only hazard is a LATER entry writing the source of an EARLIER one;
//! never the other way round. A warp therefore processes its row in waves
//! of consecutive entries: every thread loads its share of the wave into
//! registers, the warp synchronizes, then every thread stores. A wave's
//! stores can only hit sources of the same wave (already loaded before the
//! barrier) or of earlier waves (finished); a later wave's sources lie
//! strictly above every store of this one. Different rows never share
//! memory (kv_tensor precondition; paged: the touched pages of a request
//! are distinct and belong to it), so warps need no coordination.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>
#include <cub/block/block_scan.cuh>

#include "specdec/cache/detail/kv_wave.hpp"
#include "specdec/cache/kv_layout.hpp"
#include "specdec/core/config.hpp"
#include "specdec/core/status.hpp"
#include "specdec/cuda/check.cuh"
#include "specdec/kernels/cache.hpp"

namespace specdec::cuda {

//! Validation, one block of at most Threads threads, the twin of
//! validate_kv_commit_requests (cache/kv_commit.hpp): thread 0 checks the
//! header and keep_offsets[R] against total_keep, the threads then check
//! the tensors (validate_kv_tensor, then that the copy grid's max_layers x
//! max_heads covers each: a device-only argument, invalid_argument
//! otherwise; the lowest failing tensor wins, by atomicMin in shared
//! memory, so the result does not depend on scheduling) and finally write
//! request_status[r]: the batch's fault when there is one, else request
//! r's own code (kv_commit_request_code). A template (on the block size)
//! so that an engine including this header from several translation units
//! gets one weak definition instead of duplicate strong symbols.
template <int Threads>
SPECDEC_KERNEL void __launch_bounds__(Threads) kv_commit_validate_kernel(const kernels::kv_commit_params p) {
  __shared__ unsigned long long worst;  // (tensor << 32) | code of the lowest failing tensor, or ~0
  __shared__ std::int32_t batch_code;
  const kv_commit_batch& batch = p.batch;
  const std::int32_t R = batch.num_requests;
  if (threadIdx.x == 0) {
    worst = ~0ull;
    status_code c = validate_kv_commit_header(batch, p.map).code();
    if (c == status_code::ok && R > 0 && batch.keep_offsets[R] > p.total_keep) c = status_code::size_mismatch;
    batch_code = static_cast<std::int32_t>(c);
  }
  __syncthreads();
  if (batch_code == 0)
    for (std::int32_t i = static_cast<std::int32_t>(threadIdx.x); i < p.num_tensors;
         i += static_cast<std::int32_t>(blockDim.x)) {
      const kv_tensor<void>& t = p.tensors[i];
      status_code c = validate_kv_tensor(t, p.map, R).code();
      if (c == status_code::ok && (t.layers > p.max_layers || t.heads > p.max_heads))
        c = status_code::invalid_argument;  // the copy grid would skip layers or heads
      if (c != status_code::ok)
        atomicMin(&worst, (static_cast<unsigned long long>(i) << 32) | static_cast<std::uint32_t>(c));
    }
  __syncthreads();
  const std::int32_t fault =
      batch_code != 0 ? batch_code : (worst == ~0ull ? 0 : static_cast<std::int32_t>(worst & 0xffffffffu));
  for (std::int32_t r = static_cast<std::int32_t>(threadIdx.x); r < R; r += static_cast<std::int32_t>(blockDim.x))
    p.request_status[r] =
        fault != 0 ? fault : static_cast<std::int32_t>(kv_commit_request_code(batch, p.map, p.total_keep, r));
}

namespace detail {

//! First entry of keep[0, count) not already in place, found by one warp a
//! ballot of 32 entries at a time (the in-place entries form a prefix, see
//! kv_first_moved), so the loads do not wait for each other.
SPECDEC_DEVICE std::int64_t kv_first_moved_warp(const position_id* keep, std::int64_t count, std::int64_t c,
                                                unsigned lane) {
  for (std::int64_t k1 = 0; k1 < count; k1 += 32) {
    const std::int64_t k = k1 + lane;
    const unsigned moved = __ballot_sync(0xffffffffu, k < count && keep[k] != c + k);
    if (moved != 0) return k1 + __ffs(static_cast<int>(moved)) - 1;
  }
  return count;
}

//! Copies the kept entries [k0, count) of one (tensor, request, layer,
//! head) row with one warp, in waves (see the file comment): every lane
//! loads its share of a wave into registers, the warp synchronizes, every
//! lane stores. Units of one entry are U words laid out by `plan`
//! (kv_plan_row); each lane stages at most Regs units per wave.
template <class U, int Regs>
SPECDEC_DEVICE void kv_copy_row(unsigned char* base, const kv_tensor<void>& t, const kv_position_map& map,
                                std::int64_t r, std::int64_t layer, std::int64_t head, std::int64_t c,
                                const position_id* keep, std::int64_t k0, std::int64_t count,
                                const ::specdec::detail::kv_copy_plan& plan, std::int64_t elem_bytes, unsigned lane) {
  namespace sd = ::specdec::detail;
  const std::int64_t units = plan.units;
  constexpr std::int64_t capacity = 32 * Regs;
  const std::int64_t per_wave = sd::kv_wave_entries(units, capacity);
  auto offset = [&](std::int64_t pos) { return sd::kv_offset(t, map, r, layer, head, pos) * elem_bytes; };
  for (std::int64_t w0 = k0; w0 < count; w0 += per_wave) {
    const std::int64_t we = w0 + per_wave < count ? per_wave : count - w0;
    const std::int64_t total = we * units;
    if (total > capacity) {
      // One oversized entry: straight copy (its source and destination differ).
      const std::int64_t so = offset(keep[w0]), dof = offset(c + w0);
      for (std::int64_t u = lane; u < units; u += 32) {
        const std::int64_t uo = sd::kv_unit_offset(plan, u);
        *reinterpret_cast<U*>(base + dof + uo) = *reinterpret_cast<const U*>(base + so + uo);
      }
    } else {
      U reg[Regs];
      std::int64_t dst[Regs];
#pragma unroll
      for (int j = 0; j < Regs; ++j) {
        const std::int64_t g = lane + 32 * j;
        dst[j] = -1;
        if (g < total) {
          std::int64_t k = 0, u = 0;
          sd::kv_wave_unit(g, units, w0, k, u);
          const std::int64_t uo = sd::kv_unit_offset(plan, u);
          dst[j] = offset(c + k) + uo;
          reg[j] = *reinterpret_cast<const U*>(base + offset(keep[k]) + uo);
        }
      }
      __syncwarp();  // every load of the wave before any store of it
#pragma unroll
      for (int j = 0; j < Regs; ++j)
        if (dst[j] >= 0) *reinterpret_cast<U*>(base + dst[j]) = reg[j];
    }
    __syncwarp();  // this wave's stores before the next wave's loads
  }
}

}  // namespace detail

//! Threads of the copy kernel (its most): four rows per block, so that a
//! small batch still spreads over many SMs.
inline constexpr int kv_copy_threads = 32 * kernels::kv_commit_rows_per_block;
//! 16-byte registers per lane per wave: a wave moves up to 2 KiB of a row
//! (eight entries of a 128-dim fp16 head).
inline constexpr int kv_copy_regs = 4;
//! Threads of the validation kernel.
inline constexpr int kv_validate_threads = 256;

//! The copy kernel: one warp per (request, tensor, layer, head) row, row
//! index ((request * num_tensors + tensor) * max_layers + layer) *
//! max_heads + head = blockIdx.x * warps per block + warp; blocks of at
//! most kv_copy_threads threads, grid x = ceil(rows / warps per block).
//! Commits only requests whose request_status is ok
//! (kv_commit_validate_kernel ran first on the same stream). Units as in
//! kv_plan_row: 16 bytes when the tensor's base pointer, every byte stride
//! and the entry size allow it, narrower (never misaligned) otherwise.
template <int Regs = 4>
SPECDEC_KERNEL void __launch_bounds__(kv_copy_threads) kv_commit_kernel(const kernels::kv_commit_params p) {
  const unsigned lane = threadIdx.x % 32;
  std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const std::int64_t head = row % p.max_heads;
  row /= p.max_heads;
  const std::int64_t layer = row % p.max_layers;
  row /= p.max_layers;
  const std::int64_t ti = row % p.num_tensors;
  const std::int64_t r = row / p.num_tensors;
  if (r >= p.batch.num_requests || p.request_status[r] != 0) return;  // whole warps: the row index is the warp's
  const kv_tensor<void> t = p.tensors[ti];
  if (layer >= t.layers || head >= t.heads) return;
  const std::int64_t c = p.batch.cache_len[r];
  const position_id* keep = p.batch.keep + p.batch.keep_offsets[r];
  const std::int64_t count = p.batch.keep_offsets[r + 1] - p.batch.keep_offsets[r];
  const std::int64_t k0 = detail::kv_first_moved_warp(keep, count, c, lane);
  if (k0 == count) return;
  auto* base = static_cast<unsigned char*>(t.data);
  const std::int64_t eb = p.elem_bytes;
  const auto plan = ::specdec::detail::kv_plan_row(reinterpret_cast<std::uintptr_t>(t.data), eb, t);
  switch (plan.unit) {
    case 16:
      detail::kv_copy_row<uint4, Regs>(base, t, p.map, r, layer, head, c, keep, k0, count, plan, eb, lane);
      break;
    case 8:
      detail::kv_copy_row<uint2, Regs>(base, t, p.map, r, layer, head, c, keep, k0, count, plan, eb, lane);
      break;
    case 4:
      detail::kv_copy_row<std::uint32_t, Regs>(base, t, p.map, r, layer, head, c, keep, k0, count, plan, eb, lane);
      break;
    case 2:
      detail::kv_copy_row<std::uint16_t, Regs>(base, t, p.map, r, layer, head, c, keep, k0, count, plan, eb, lane);
      break;
    default:
      detail::kv_copy_row<std::uint8_t, Regs>(base, t, p.map, r, layer, head, c, keep, k0, count, plan, eb, lane);
      break;
  }
}

//! Checks (kernels::kv_commit_can_implement) and enqueues the validation
//! and copy kernels on `stream`: the kernels API's commit_kv, for engines
//! that compile this header themselves. Needs no workspace.
inline status commit_kv(const kernels::kv_commit_params& p, void* /*workspace*/, std::size_t /*workspace_bytes*/,
                        cudaStream_t stream) noexcept {
  SPECDEC_TRY(kernels::kv_commit_can_implement(p));  // the grid's size included
  if (p.batch.num_requests == 0) return status::success();
  kv_commit_validate_kernel<kv_validate_threads><<<1, kv_validate_threads, 0, stream>>>(p);
  SPECDEC_TRY(last_launch_status());
  if (p.num_tensors == 0) return status::success();  // statuses written, nothing to move
  const std::int64_t rows =
      static_cast<std::int64_t>(p.batch.num_requests) * p.num_tensors * p.max_layers * p.max_heads;
  const std::int64_t warps = kernels::kv_commit_rows_per_block;
  kv_commit_kernel<kv_copy_regs><<<static_cast<unsigned>((rows + warps - 1) / warps), kv_copy_threads, 0, stream>>>(p);
  return last_launch_status();
}

//! Threads of the keep-lists kernel (one block for the whole batch).
inline constexpr int keep_threads = 256;

//! keep_indices_from_results in one block. The threads check the offsets
//! (strided), then thread t takes the contiguous requests [t c, (t + 1) c),
//! c = ceil(R / Threads): their codes and counts, an exclusive block scan
//! of the per-thread totals for its first keep entry, then their keep
//! lists and offsets. The host loop's codes, counts and order.
template <int Threads>
SPECDEC_KERNEL void __launch_bounds__(Threads) keep_from_results_kernel(const keep_from_results_batch b) {
  using scan_t = cub::BlockScan<std::int32_t, Threads>;
  __shared__ typename scan_t::TempStorage scan;
  const std::int32_t R = b.num_requests;
  bool bad = false;
  for (std::int32_t i = static_cast<std::int32_t>(threadIdx.x); i <= R; i += Threads)
    bad = bad || !specdec::detail::keep_offset_ok(b, i);
  const bool spans_ok = __syncthreads_or(bad ? 1 : 0) == 0;
  const std::int64_t chunk = (std::int64_t{R} + Threads - 1) / Threads;
  const auto r0 = static_cast<std::int32_t>(min(std::int64_t{R}, threadIdx.x * chunk));
  const auto r1 = static_cast<std::int32_t>(min(std::int64_t{R}, r0 + chunk));
  std::int32_t mine = 0;
  for (std::int32_t r = r0; r < r1; ++r) {
    std::int32_t count = 0;
    const status st = spans_ok ? specdec::detail::keep_from_result(b, r, count)
                               : make_status(status_code::not_sorted, "tree_offsets out of place");
    b.request_status[r] = static_cast<std::int32_t>(st.code());
    mine += count;
  }
  std::int32_t start = 0;
  scan_t(scan).ExclusiveSum(mine, start);
  if (threadIdx.x == 0) b.keep_offsets[0] = 0;
  for (std::int32_t r = r0; r < r1; ++r) {
    const std::int32_t count =
        b.request_status[r] == static_cast<std::int32_t>(status_code::ok) ? b.results[r].accepted + 1 : 0;
    if (count > 0) specdec::detail::write_keep(b, r, count, start);
    start += count;
    b.keep_offsets[r + 1] = start;
  }
}

//! Checks (kernels::keep_indices_from_results_can_implement) and launches
//! keep_from_results_kernel on `stream`: the kernels API's
//! keep_indices_from_results, for engines compiling this header. No
//! workspace.
inline status keep_indices_from_results(const keep_from_results_batch& b, void* /*workspace*/,
                                        std::size_t /*workspace_bytes*/, cudaStream_t stream) noexcept {
  SPECDEC_TRY(kernels::keep_indices_from_results_can_implement(b));
  if (b.num_requests == 0) return status::success();
  keep_from_results_kernel<keep_threads><<<1, keep_threads, 0, stream>>>(b);
  return last_launch_status();
}

}  // namespace specdec::cuda
