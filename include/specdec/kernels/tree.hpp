//! \file
//! specdec::kernels API for token trees: packed ancestor masks and position
//! ids for a batch of ragged trees, built on the GPU. Plain C++ (no CUDA
//! header needed); link specdec::kernels. The host twin with identical
//! results is specdec::build_tree_masks_batched (tree/batch.hpp).
#pragma once

#include <cstddef>
#include <cstdint>

#include "specdec/core/status.hpp"
#include "specdec/tree/batch.hpp"
#include "specdec/tree/mask.hpp"

namespace specdec::kernels {

//! Rows of one tree handled by one thread block (one warp per row).
inline constexpr std::int32_t tree_mask_rows_per_block = 64;
//! Trees up to this many nodes keep their parents in shared memory (the
//! staging buffer plus the kernel's static shared memory stay under the
//! default 48 KiB per block, so no opt-in attribute is needed).
inline constexpr std::int32_t tree_mask_smem_max_nodes = 12000;

//! Whether build_tree_masks_batched can run these arguments, checked on the host
//! without touching device memory: the whole-call checks of
//! check_tree_masks_params, word-aligned buffers, and grid limits
//! (max_nodes <= 65535 * tree_mask_rows_per_block, else unsupported).
//! Per-tree problems (bad parents, offsets, sizes) are reported on the
//! device through request_status instead.
template <mask_word Word>
status build_tree_masks_batched_can_implement(const tree_masks_params<Word>& b) noexcept {
  SPECDEC_TRY(check_tree_masks_params(b));
  if (reinterpret_cast<std::uintptr_t>(b.masks) % alignof(Word) != 0 ||
      reinterpret_cast<std::uintptr_t>(b.positions) % alignof(position_id) != 0 ||
      reinterpret_cast<std::uintptr_t>(b.parents) % alignof(node_id) != 0)
    return make_status(status_code::invalid_argument, "device buffers must be aligned to their element type");
  const std::int64_t chunks =
      (static_cast<std::int64_t>(b.max_nodes) + tree_mask_rows_per_block - 1) / tree_mask_rows_per_block;
  if (chunks > 65535) return make_status(status_code::unsupported, "max_nodes too large for one launch");
  return status::success();
}

//! Workspace bytes build_tree_masks_batched needs: none (the parents are staged in
//! shared memory), so any pointer, null included, may be passed.
template <mask_word Word>
constexpr std::size_t build_tree_masks_batched_workspace_size(const tree_masks_params<Word>&) noexcept {
  return 0;
}

//! Builds the packed masks (32-bit words) and positions of every tree of
//! the batch on `stream` (a cudaStream_t; null = default stream). All
//! pointers in `b` are device pointers; `workspace` holds
//! build_tree_masks_batched_workspace_size(b) bytes (none today). Asynchronous:
//! returns after the launch with the can_implement status or the launch
//! error; per-tree status codes (status_code values, identical to the host
//! twin's) are in b.request_status once the stream reaches this point.
//! Deterministic: the same input gives the same bits as the host twin
//! specdec::build_tree_masks_batched.
status build_tree_masks_batched(const tree_masks_params<std::uint32_t>& b, void* workspace, std::size_t workspace_bytes,
                                void* stream) noexcept;

//! The 64-bit-word variant of build_tree_masks_batched.
status build_tree_masks_batched(const tree_masks_params<std::uint64_t>& b, void* workspace, std::size_t workspace_bytes,
                                void* stream) noexcept;

}  // namespace specdec::kernels
