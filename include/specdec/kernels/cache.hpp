//! \file
//! Host API of the CUDA KV commit (specdec::kernels): the device twin of
//! specdec::commit_kv (cache/kv_commit.hpp) for contiguous and paged caches,
//! all requests, layers, heads and tensors in one launch pair. Plain C++.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <type_traits>

#include "specdec/cache/keep_indices.hpp"
#include "specdec/cache/kv_layout.hpp"
#include "specdec/core/config.hpp"
#include "specdec/core/status.hpp"

namespace specdec::kernels {

//! Arguments of commit_kv. Every pointer is DEVICE memory: `tensors`
//! (num_tensors descriptions, data pointers untyped), the block table and
//! blocks_used inside `map`, the CSR arrays inside `batch`, and
//! `request_status` (num_requests int32 codes the device fills).
//! `max_layers` / `max_heads` size the grid and must be >= every tensor's
//! layers / heads (extra warps exit at once; a tensor that does not fit is
//! reported as invalid_argument for every request and nothing is written).
//! `total_keep` is the capacity of batch.keep (entries): the device reads
//! keep_offsets[num_requests] <= total_keep of them, so a CUDA graph
//! captured once serves rounds that keep different numbers of positions.
struct kv_commit_params {
  const kv_tensor<void>* tensors = nullptr;  //!< device array of num_tensors tensor descriptions
  std::int32_t num_tensors = 0;              //!< tensors committed in this call (K, V, per-layer pieces...)
  std::int32_t elem_bytes = 0;               //!< 1, 2, 4, 8 or 16: bits are moved, never converted
  std::int32_t max_layers = 0;               //!< grid size: >= every tensor's layers
  std::int32_t max_heads = 0;                //!< grid size: >= every tensor's heads
  kv_position_map map{};                     //!< contiguous or paged positions (block table in device memory)
  kv_commit_batch batch{};                   //!< cache lengths and keep lists (device memory)
  std::int64_t total_keep = 0;               //!< entries batch.keep holds; keep_offsets[R] must not exceed it
  //! Device array of num_requests: request r's status_code (ok = 0),
  //! written by the call; a request that is not ok is left untouched.
  std::int32_t* request_status = nullptr;
};
static_assert(std::is_trivially_copyable_v<kv_commit_params>);

//! Rows (request, tensor, layer, head) the copy kernel gives each block,
//! one warp each.
inline constexpr std::int32_t kv_commit_rows_per_block = 4;

//! Host-side checks of the scalar arguments (no device memory is read):
//! element size, counts, the copy grid (num_requests x num_tensors x
//! max_layers x max_heads rows, kv_commit_rows_per_block per block, at most
//! 2^31 - 1 blocks), non-null pointers, page size / capacity.
inline status kv_commit_can_implement(const kv_commit_params& p) noexcept {
  const auto eb = p.elem_bytes;
  if (eb != 1 && eb != 2 && eb != 4 && eb != 8 && eb != 16)
    return make_status(status_code::invalid_argument, "elem_bytes must be 1, 2, 4, 8 or 16");
  if (p.num_tensors < 0 || p.batch.num_requests < 0 || p.total_keep < 0)
    return make_status(status_code::invalid_argument, "counts must be non-negative");
  if (p.batch.num_requests == 0) return status::success();
  if (p.request_status == nullptr || p.batch.cache_len == nullptr || p.batch.keep_offsets == nullptr ||
      (p.total_keep > 0 && p.batch.keep == nullptr) || (p.num_tensors > 0 && p.tensors == nullptr))
    return make_status(status_code::invalid_argument, "a required device pointer is null");
  if (p.num_tensors == 0) return status::success();
  if (p.max_layers <= 0 || p.max_heads <= 0)
    return make_status(status_code::invalid_argument, "max_layers and max_heads must be positive");
  // The product checked factor by factor, so that it never overflows.
  const std::int64_t max_rows = std::int64_t{0x7fffffff} * kv_commit_rows_per_block;
  std::int64_t rows = p.batch.num_requests;
  for (const std::int64_t f : {std::int64_t{p.num_tensors}, std::int64_t{p.max_layers}, std::int64_t{p.max_heads}}) {
    if (rows > max_rows / f)
      return make_status(status_code::unsupported,
                         "requests x tensors x max_layers x max_heads too large for one grid");
    rows *= f;
  }
  if (p.map.paged()) {
    if (p.map.page_size <= 0 || p.map.num_pages <= 0)
      return make_status(status_code::invalid_argument, "page_size and num_pages must be positive");
  } else if (p.map.capacity < 0) {
    return make_status(status_code::invalid_argument, "capacity must be non-negative");
  }
  return status::success();
}

//! Workspace bytes commit_kv needs: none (each block stages its wave in
//! registers), so any pointer, null included, may be passed.
constexpr std::size_t kv_commit_workspace_size(const kv_commit_params&) noexcept { return 0; }

//! Enqueues the commit on `stream` (a cudaStream_t; null = default):
//! a one-block validation kernel that writes every request's status (the
//! checks and codes of the host twin validate_kv_commit_requests: a fault
//! of the batch or of a tensor stops every request, otherwise each request
//! gets its own), then the copy kernel, which commits the requests that
//! are ok and leaves the others' caches untouched. Asynchronous: the
//! returned status covers argument checks and launch errors; the statuses
//! stay on the device until the caller reads them (kv_commit_result turns
//! the copied-back array into a status). Deterministic.
status commit_kv(const kv_commit_params& p, void* workspace, std::size_t workspace_bytes, void* stream) noexcept;

//! Turns the request statuses (copied to the host) into a status: ok, or
//! the lowest failing request's code with that request as its index.
inline status kv_commit_result(std::span<const std::int32_t> request_status) noexcept {
  for (std::size_t r = 0; r < request_status.size(); ++r)
    if (request_status[r] != 0) {
      const auto code = static_cast<status_code>(request_status[r]);
      return make_status(code, status_code_name(code), static_cast<std::int64_t>(r));
    }
  return status::success();
}

//! Host checks of keep_indices_from_results (the host twin's whole-call
//! checks; no device memory is read).
inline status keep_indices_from_results_can_implement(const keep_from_results_batch& b) noexcept {
  return specdec::detail::check_keep_from_results(b);
}

//! Workspace keep_indices_from_results needs: none.
constexpr std::size_t keep_indices_from_results_workspace_size(const keep_from_results_batch&) noexcept { return 0; }

//! Enqueues specdec::keep_indices_from_results (cache/keep_indices.hpp) on
//! `stream`: one block for the batch, every pointer in `b` device memory
//! (verify_batch's paths and results as they are), so the keep lists feed
//! commit_kv without a host round trip. Same codes, counts and positions
//! as the host twin; asynchronous (request_status valid once the stream
//! gets there). Deterministic.
status keep_indices_from_results(const keep_from_results_batch& b, void* workspace, std::size_t workspace_bytes,
                                 void* stream) noexcept;

}  // namespace specdec::kernels
