//! \file
//! Masks and positions for a batch of ragged trees in one call: the host
//! twin of the CUDA kernel in specdec::kernels (kernels/tree.hpp), with the
//! same parameter struct, the same per-tree status codes and bit-identical
//! outputs.
//!
//! Layout: tree b owns the global rows [offsets[b], offsets[b + 1]); its
//! parent ids are local to the tree (0 = its root). Row r of the mask
//! buffer starts at masks + r * row_stride_words and the tree writes the
//! first ceil(n_b / W) words of each of its rows (bit order as in
//! tree/mask.hpp); positions[r] = cache_len[b] + depth. Words past a tree's
//! own width, and every row of a tree that fails, are left untouched.
#pragma once

#include <cstdint>
#include <type_traits>

#include "specdec/core/config.hpp"
#include "specdec/core/status.hpp"
#include "specdec/tree/mask.hpp"
#include "specdec/tree/token_tree.hpp"
#include "specdec/tree/validate.hpp"

namespace specdec {

//! Arguments of a batched mask build. Plain pointers (host memory for the
//! host twin, device memory for the kernel); trivially copyable so it can
//! be passed to a kernel by value.
template <mask_word Word>
struct tree_masks_params {
  const node_id* parents = nullptr;        //!< capacity_nodes entries, local ids per tree
  const std::int32_t* offsets = nullptr;   //!< num_requests + 1 row offsets (CSR)
  const position_id* cache_len = nullptr;  //!< num_requests committed lengths; null = all 0
  Word* masks = nullptr;                   //!< capacity_nodes rows of row_stride_words words
  position_id* positions = nullptr;        //!< capacity_nodes entries; null = not written
  std::int32_t* request_status = nullptr;  //!< num_requests status codes (status_code values)
  std::int32_t num_requests = 0;           //!< number of trees (requests) in the batch
  std::int32_t max_nodes = 0;              //!< upper bound on every tree's node count (sizes the rows)
  std::int32_t capacity_nodes = 0;         //!< rows in masks / entries in parents and positions
  std::int64_t row_stride_words = 0;       //!< >= ceil(max_nodes / W); 0 means exactly that
};

static_assert(std::is_trivially_copyable_v<tree_masks_params<std::uint32_t>>);
static_assert(std::is_trivially_copyable_v<tree_masks_params<std::uint64_t>>);

//! Row stride in words that a batch uses (resolves the 0 default).
template <mask_word Word>
SPECDEC_HD constexpr std::int64_t batch_row_stride(const tree_masks_params<Word>& b) noexcept {
  return b.row_stride_words == 0 ? mask_words_per_row<Word>(b.max_nodes) : b.row_stride_words;
}

//! Whole-call checks, done before any work (the kernel's can_implement):
//! non-negative counts, required pointers present, row stride large enough
//! (and small enough that row offsets fit in int64).
//! Per-tree problems are not errors here: they land in request_status.
template <mask_word Word>
SPECDEC_HD constexpr status check_tree_masks_params(const tree_masks_params<Word>& b) noexcept {
  if (b.num_requests < 0 || b.max_nodes < 0 || b.capacity_nodes < 0 || b.row_stride_words < 0)
    return make_status(status_code::invalid_argument, "counts and stride must be >= 0");
  if (b.offsets == nullptr || b.request_status == nullptr)
    return make_status(status_code::invalid_argument, "offsets and request_status are required");
  if (b.capacity_nodes > 0 && (b.parents == nullptr || b.masks == nullptr))
    return make_status(status_code::invalid_argument, "parents and masks are required");
  if (batch_row_stride(b) < mask_words_per_row<Word>(b.max_nodes))
    return make_status(status_code::invalid_argument, "row stride smaller than ceil(max_nodes / W)");
  if (b.capacity_nodes > 0 && batch_row_stride(b) > INT64_MAX / b.capacity_nodes)
    return make_status(status_code::invalid_argument, "row stride too large: mask offsets overflow int64");
  return status::success();
}

//! Status code of tree `t` before any of its rows is written: the
//! structural checks shared by host and device, in a fixed order so both
//! report the same code (offsets, then size, then cache_len, then the
//! parent checks of validate_topological_parents at the smallest bad node).
template <mask_word Word>
SPECDEC_HD constexpr status_code batch_tree_precheck(const tree_masks_params<Word>& b, std::int32_t t,
                                                     std::int32_t& begin, std::int32_t& n) noexcept {
  begin = b.offsets[t];
  const std::int32_t end = b.offsets[t + 1];
  n = 0;
  if (begin < 0 || end < begin || end > b.capacity_nodes) return status_code::invalid_argument;
  n = end - begin;
  if (n == 0) return status_code::empty_input;
  if (n > b.max_nodes) return status_code::buffer_too_small;
  const std::int64_t cl = b.cache_len == nullptr ? 0 : b.cache_len[t];
  if (cl < 0 || cl > INT64_MAX - n) return status_code::invalid_argument;  // macro: usable in device code
  return status_code::ok;
}

//! Host twin of specdec::kernels::build_tree_masks_batched: for every tree, checks
//! it, then writes its packed mask rows and positions (or only its status).
//! Returns the whole-call status of check_tree_masks_params; per-tree results
//! are in request_status. O(sum n_b * ceil(n_b / W)), no allocation,
//! deterministic.
template <mask_word Word>
status build_tree_masks_batched(const tree_masks_params<Word>& b) noexcept {
  SPECDEC_TRY(check_tree_masks_params(b));
  const std::int64_t stride = batch_row_stride(b);
  for (std::int32_t t = 0; t < b.num_requests; ++t) {
    std::int32_t begin = 0, n = 0;
    status_code code = batch_tree_precheck(b, t, begin, n);
    // begin is only known to lie inside the buffer once the precheck passed.
    if (code == status_code::ok) code = validate_topological_parents(b.parents + begin, n).code();
    b.request_status[t] = static_cast<std::int32_t>(code);
    if (code != status_code::ok) continue;
    const node_id* parent = b.parents + begin;
    detail::packed_mask_rows<Word>(parent, n, b.masks + static_cast<std::int64_t>(begin) * stride, stride);
    if (b.positions != nullptr) {
      std::int64_t* pos = b.positions + begin;
      pos[0] = b.cache_len == nullptr ? 0 : b.cache_len[t];
      for (std::int32_t i = 1; i < n; ++i) pos[i] = pos[parent[i]] + 1;
    }
  }
  return status::success();
}

}  // namespace specdec
