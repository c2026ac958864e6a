//! \file
//! SGLang's EAGLE tree builder (`build_tree_kernel_efficient`) on the host:
//! from the draft steps' `parent_list` and the `selected_index` of the
//! draft tokens kept for verification to the tree attention mask, the
//! positions and the linked lists (`retrive_index`, `retrive_next_token`,
//! `retrive_next_sibling`) that SGLang's verification kernels read.
//!
//! Per request b, with topk, depth and n = draft_token_num:
//! - selected_index[b] holds n - 1 flattened candidate indices (draft
//!   token i sits in slot i + 1; slot 0 is the verified root). Candidate f
//!   came from top-k block f / topk; block 0 is the root's, block k >= 1 is
//!   the expansion of the candidate whose flattened index is
//!   parent_list[b][k] (parent_list has topk * (depth - 1) + 1 entries).
//! - The parent of slot i + 1 is slot 0 for block 0, else slot j + 1 of the
//!   first j with selected_index[b][j] == parent_list[b][block].
//! - Children lists are ascending in slot (SGLang pushes slots n-1..1 at the
//!   head of their parent's list), positions are verified_seq_len[b] + depth.
//! - Mask rows (1 = may attend), one byte per entry except in bit-packed mode:
//!   full_mask: request b's n rows of (seq_len + n) entries start at
//!   n * n * b + n * sum_{i<b} verified_seq_len[i]; columns [0, seq_len)
//!   (the prefix) are written 1 (SGLang relies on a buffer pre-filled with
//!   True and leaves them), column seq_len is the root, seq_len + s slot s.
//!   qlen_only: rows of n entries at (b * n + s) * n, column s = slot s.
//!   qlen_only_bitpacking: rows of 1, 2 or 4 bytes (n <= 8, 16, 32) at
//!   (b * n + s) * bytes, bit s of the little-endian row = slot s.
//! Unlike SGLang's kernel, which prints a warning and leaves a slot whose
//! parent was not selected unlinked (its mask row and position then depend
//! on memory past the request), this builder refuses such a request with
//! invalid_argument (index = slot) and writes none of its outputs; parent
//! chains that cycle are refused with `cycle`. The per-request code is
//! SPECDEC_HD: the CUDA twin (kernels::sglang_build_tree) runs it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "specdec/core/config.hpp"
#include "specdec/core/status.hpp"
#include "specdec/core/workspace.hpp"
#include "specdec/interop/detail/request_status.hpp"

namespace specdec {

//! SGLang's TreeMaskMode values.
enum class sglang_tree_mask_mode : std::int32_t {
  full_mask = 0,             //!< prefix plus tree columns, one byte per entry
  qlen_only = 1,             //!< tree columns only, one byte per entry
  qlen_only_bitpacking = 2,  //!< tree columns only, one bit per entry (n <= 32)
};

//! Inputs of sglang_build_tree (host memory; device memory for the CUDA
//! twin). Trivially copyable.
struct sglang_build_tree_inputs {
  std::int32_t num_requests = 0;                                  //!< requests
  std::int32_t topk = 0;                                          //!< candidates per expanded token (>= 1)
  std::int32_t depth = 0;                                         //!< draft steps (>= 1)
  std::int32_t draft_token_num = 0;                               //!< n: slots per request, root included (>= 1)
  const std::int64_t* parent_list = nullptr;                      //!< [batch][topk * (depth - 1) + 1]
  const std::int64_t* selected_index = nullptr;                   //!< [batch][n - 1] (may be null when n = 1)
  const std::int64_t* verified_seq_len = nullptr;                 //!< [batch], each >= 0
  sglang_tree_mask_mode mode = sglang_tree_mask_mode::full_mask;  //!< mask layout
};

//! Outputs of sglang_build_tree. All [batch * n] except the mask.
struct sglang_build_tree_outputs {
  std::uint8_t* tree_mask = nullptr;             //!< the mask bytes (a torch.bool or uint8 buffer)
  std::int64_t tree_mask_bytes = 0;              //!< bytes at tree_mask (requests past it get buffer_too_small)
  std::int64_t* positions = nullptr;             //!< per slot: seq_len + depth
  std::int64_t* retrive_index = nullptr;         //!< per slot: b * n + slot
  std::int64_t* retrive_next_token = nullptr;    //!< per slot: first child slot, or -1
  std::int64_t* retrive_next_sibling = nullptr;  //!< per slot: next sibling slot, or -1
};

namespace detail {

//! Bytes of one mask row in bit-packed mode (SGLang: 1, 2 or 4).
SPECDEC_HD constexpr std::int64_t sglang_packed_row_bytes(std::int32_t n) noexcept {
  return n > 16 ? 4 : (n > 8 ? 2 : 1);
}

//! Bytes of a mask row's tree columns for n slots: n, or
//! sglang_packed_row_bytes(n) bit-packed. In the qlen modes a request's
//! mask is n such rows, so the mask's size follows from the arguments
//! alone; full_mask rows also hold verified_seq_len prefix columns.
SPECDEC_HD constexpr std::int64_t sglang_tree_row_bytes(sglang_tree_mask_mode m, std::int32_t n) noexcept {
  return m == sglang_tree_mask_mode::qlen_only_bitpacking ? sglang_packed_row_bytes(n) : std::int64_t{n};
}

//! Whole-call checks (no element read).
SPECDEC_HD constexpr status check_sglang_build_tree(const sglang_build_tree_inputs& in,
                                                    const sglang_build_tree_outputs& out) noexcept {
  if (in.num_requests < 0) return make_status(status_code::invalid_argument, "num_requests must be >= 0");
  if (in.topk < 1 || in.depth < 1 || in.draft_token_num < 1)
    return make_status(status_code::invalid_argument, "topk, depth and draft_token_num must be >= 1");
  if (in.mode != sglang_tree_mask_mode::full_mask && in.mode != sglang_tree_mask_mode::qlen_only &&
      in.mode != sglang_tree_mask_mode::qlen_only_bitpacking)
    return make_status(status_code::invalid_argument, "unknown tree mask mode");
  if (in.mode == sglang_tree_mask_mode::qlen_only_bitpacking && in.draft_token_num > 32)
    return make_status(status_code::unsupported, "bit-packed masks hold at most 32 slots");
  if (in.num_requests == 0) return status::success();
  if (in.parent_list == nullptr || (in.selected_index == nullptr && in.draft_token_num > 1) ||
      in.verified_seq_len == nullptr || out.tree_mask == nullptr || out.positions == nullptr ||
      out.retrive_index == nullptr || out.retrive_next_token == nullptr || out.retrive_next_sibling == nullptr)
    return make_status(status_code::invalid_argument, "arrays must not be null");
  if (out.tree_mask_bytes < 0) return make_status(status_code::invalid_argument, "tree_mask_bytes must be >= 0");
  return status::success();
}

//! Bytes of one request's scratch (parent and depth per slot).
SPECDEC_HD std::size_t sglang_build_tree_request_bytes(std::int32_t n) noexcept {
  if (n < 1) return 0;
  return 2 * align_up(static_cast<std::size_t>(n) * sizeof(std::int32_t));
}

//! Request r (one thread): validates everything first, then writes.
//! `scratch`: sglang_build_tree_request_bytes(n) bytes, 4-byte aligned.
SPECDEC_HD status sglang_build_tree_request(const sglang_build_tree_inputs& in, std::int32_t r,
                                            const sglang_build_tree_outputs& out, void* scratch) noexcept {
  const std::int32_t n = in.draft_token_num, k = in.topk;
  const std::int64_t blocks = static_cast<std::int64_t>(k) * (in.depth - 1) + 1;
  const std::int64_t* sel = in.selected_index + static_cast<std::int64_t>(r) * (n - 1);
  const std::int64_t* plist = in.parent_list + static_cast<std::int64_t>(r) * blocks;
  workspace_carver w(scratch, sglang_build_tree_request_bytes(n));
  std::int32_t* parent = w.take<std::int32_t>(static_cast<std::size_t>(n));
  std::int32_t* depth = w.take<std::int32_t>(static_cast<std::size_t>(n));
  const std::int64_t seq_len = in.verified_seq_len[r];
  if (seq_len < 0) return make_status(status_code::invalid_argument, "verified_seq_len must be >= 0");
  // Parents of the slots (first matching selected entry, as SGLang).
  parent[0] = -1;
  for (std::int32_t s = 1; s < n; ++s) {
    const std::int64_t f = sel[s - 1];
    if (f < 0 || f / k >= blocks)
      return make_status(status_code::out_of_range, "selected_index outside the candidate blocks", s);
    const std::int64_t block = f / k;
    if (block == 0) {
      parent[s] = 0;
      continue;
    }
    const std::int64_t want = plist[block];
    parent[s] = -1;
    for (std::int32_t j = 0; j < n - 1 && parent[s] < 0; ++j)
      if (sel[j] == want) parent[s] = j + 1;
    if (parent[s] < 0)
      return make_status(status_code::invalid_argument, "a selected token's parent is not selected", s);
  }
  // Depths by climbing (a chain longer than n means a cycle).
  depth[0] = 0;
  for (std::int32_t s = 1; s < n; ++s) {
    std::int32_t d = 0;
    for (std::int32_t u = s; u != 0; u = parent[u])
      if (++d >= n) return make_status(status_code::cycle, "parent chain of a slot does not reach the root", s);
    depth[s] = d;
  }
  // Mask placement and size.
  std::int64_t row_bytes = sglang_tree_row_bytes(in.mode, n), prefix = 0;
  std::int64_t base = static_cast<std::int64_t>(r) * n * row_bytes;
  if (in.mode == sglang_tree_mask_mode::full_mask) {
    for (std::int32_t i = 0; i < r; ++i) base += in.verified_seq_len[i] * n;
    row_bytes = seq_len + n;
    prefix = seq_len;
  }
  if (base < 0 || base + row_bytes * n > out.tree_mask_bytes)
    return make_status(status_code::buffer_too_small, "tree_mask too small for this request");
  // Writes.
  const std::int64_t o = static_cast<std::int64_t>(r) * n;
  for (std::int32_t s = 0; s < n; ++s) {
    out.positions[o + s] = seq_len + depth[s];
    out.retrive_index[o + s] = o + s;
    out.retrive_next_token[o + s] = -1;
    out.retrive_next_sibling[o + s] = -1;
  }
  for (std::int32_t s = n - 1; s >= 1; --s) {  // head insertion leaves every list ascending
    out.retrive_next_sibling[o + s] = out.retrive_next_token[o + parent[s]];
    out.retrive_next_token[o + parent[s]] = s;
  }
  for (std::int32_t s = 0; s < n; ++s) {
    std::uint8_t* row = out.tree_mask + base + static_cast<std::int64_t>(s) * row_bytes;
    if (in.mode == sglang_tree_mask_mode::qlen_only_bitpacking) {
      std::uint32_t bits = 0;
      for (std::int32_t u = s; u != -1; u = parent[u]) bits |= 1u << u;
      for (std::int64_t b = 0; b < row_bytes; ++b) row[b] = static_cast<std::uint8_t>(bits >> (8 * b));
      continue;
    }
    for (std::int64_t c = 0; c < prefix; ++c) row[c] = 1;
    for (std::int32_t c = 0; c < n; ++c) row[prefix + c] = 0;
    for (std::int32_t u = s; u != -1; u = parent[u]) row[prefix + u] = 1;
  }
  return status::success();
}

}  // namespace detail

//! Host workspace of sglang_build_tree (one request's scratch, reused).
inline std::size_t sglang_build_tree_workspace_size(const sglang_build_tree_inputs& in) noexcept {
  return detail::sglang_build_tree_request_bytes(in.draft_token_num);
}

//! Builds every request's mask, positions and linked lists (see the file
//! comment). Errors: the whole-call checks; per request (index = slot, the
//! request's outputs untouched, earlier requests written) out_of_range,
//! invalid_argument (parent not selected, negative seq_len), cycle,
//! buffer_too_small (mask). request_status: empty = stop at the first
//! failing request and return its status (index = request); else
//! num_requests entries receive each request's code and the call goes on (as
//! the CUDA twin does). O(batch * n^2).
inline status sglang_build_tree(const sglang_build_tree_inputs& in, const sglang_build_tree_outputs& out,
                                std::span<status_code> request_status, std::span<std::byte> workspace) noexcept {
  SPECDEC_TRY(detail::check_sglang_build_tree(in, out));
  SPECDEC_TRY(detail::check_request_status(request_status, in.num_requests));
  if (in.num_requests == 0) return status::success();
  workspace_carver w(workspace.data(), workspace.size());
  if (workspace.size() < sglang_build_tree_workspace_size(in))
    return make_status(status_code::buffer_too_small, "workspace smaller than sglang_build_tree_workspace_size");
  if (!w.base_aligned()) return make_status(status_code::invalid_argument, "workspace must be 256-byte aligned");
  return detail::raise_or_record(in.num_requests, request_status, [&](std::int32_t r) {
    return detail::sglang_build_tree_request(in, r, out, workspace.data());
  });
}

}  // namespace specdec
