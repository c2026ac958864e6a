//! \file
//! Descriptions of caller-owned KV caches: one strided tensor per K, V (or
//! interleaved piece, or per-layer allocation), the position map
//! (contiguous rows or a paged block table), and a batch of commits (CSR
//! keep lists). Everything here is trivially copyable and usable on the
//! device, so the host commit and the CUDA kernel share the same checks and
//! the same address arithmetic.
#pragma once

#include <cstdint>
#include <type_traits>

#include "specdec/core/config.hpp"
#include "specdec/core/status.hpp"
#include "specdec/tree/token_tree.hpp"

namespace specdec {

//! What the KV commit can move: any trivially copyable type of 1, 2, 4, 8 or
//! 16 bytes. Values are moved as raw bits, never converted, so fp16/bf16/fp8
//! caches are passed as `std::uint16_t` / `std::uint8_t` (or the engine's own
//! half type) and NaN payloads survive unchanged.
template <class T>
concept kv_element = std::is_trivially_copyable_v<T> && !std::is_const_v<T> &&
                     (sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4 || sizeof(T) == 8 || sizeof(T) == 16);

//! One KV tensor over (layer, kv-head, position, head-dim) with element
//! strides. `stride_seq` is the distance between requests' rows in a
//! contiguous cache, or between physical pages in a paged cache (then
//! `stride_pos` is the distance between slots of a page). Examples (in
//! elements, C = capacity, P = page size):
//!   [B][L][H][C][D]: seq = L*H*C*D, layer = H*C*D, head = C*D, pos = D, dim = 1
//!   [B][L][C][H][D]: seq = L*C*H*D, layer = C*H*D, head = D, pos = H*D, dim = 1
//!   paged [pages][L][P][H][D]: seq = L*P*H*D, layer = P*H*D, head = D, pos = H*D
//! K and V interleaved in one buffer are two tensors whose `data` differ by
//! the K/V offset (or, when the K/V axis sits next to the head axis, one
//! tensor with 2H heads). Separate per-layer allocations are one tensor each
//! with `layers == 1`. `size` is the number of elements addressable from
//! `data` (every address the layout can form is checked against it).
//! Precondition (not checked): distinct (seq, layer, head, pos, dim) tuples
//! address distinct elements, and distinct tensors do not overlap.
template <class T>
struct kv_tensor {
  T* data = nullptr;              //!< element (0, 0, 0, 0, 0)
  std::int64_t size = 0;          //!< elements addressable from `data`
  std::int64_t layers = 0;        //!< L
  std::int64_t heads = 0;         //!< H (KV heads)
  std::int64_t head_dim = 0;      //!< D
  std::int64_t stride_seq = 0;    //!< between requests' rows (contiguous) or physical pages (paged)
  std::int64_t stride_layer = 0;  //!< between layers
  std::int64_t stride_head = 0;   //!< between heads
  std::int64_t stride_pos = 0;    //!< between positions (slots of a page when paged)
  std::int64_t stride_dim = 0;    //!< between head-dim elements
};

//! Element strides of a kv_tensor, in the order of its stride fields.
struct kv_strides {
  std::int64_t seq = 0;    //!< between requests' rows (contiguous) or physical pages (paged)
  std::int64_t layer = 0;  //!< between layers
  std::int64_t head = 0;   //!< between heads
  std::int64_t pos = 0;    //!< between positions (slots of a page when paged)
  std::int64_t dim = 0;    //!< between head-dim elements
};

//! A tensor of any layout: `size` elements addressable from `data`, L
//! layers, H heads of `head_dim` elements, strides in elements. The named
//! makers below cover the common dense layouts; this one covers the rest
//! (K and V interleaved in one buffer, head-dim-strided keys, ...).
template <class T>
SPECDEC_HD constexpr kv_tensor<T> make_kv_tensor(T* data, std::int64_t size, std::int64_t layers, std::int64_t heads,
                                                 std::int64_t head_dim, const kv_strides& s) noexcept {
  return kv_tensor<T>{data, size, layers, heads, head_dim, s.seq, s.layer, s.head, s.pos, s.dim};
}

//! A dense [rows][L][H][C][D] tensor (the "heads before positions" layout).
template <class T>
SPECDEC_HD constexpr kv_tensor<T> make_kv_tensor_lhsd(T* data, std::int64_t rows, std::int64_t layers,
                                                      std::int64_t heads, std::int64_t capacity,
                                                      std::int64_t head_dim) noexcept {
  const std::int64_t head = capacity * head_dim, layer = heads * head, seq = layers * layer;
  return make_kv_tensor(data, rows * seq, layers, heads, head_dim, kv_strides{seq, layer, head, head_dim, 1});
}

//! A dense [rows][L][C][H][D] tensor (the "positions before heads" layout).
template <class T>
SPECDEC_HD constexpr kv_tensor<T> make_kv_tensor_lshd(T* data, std::int64_t rows, std::int64_t layers,
                                                      std::int64_t heads, std::int64_t capacity,
                                                      std::int64_t head_dim) noexcept {
  const std::int64_t pos = heads * head_dim, layer = capacity * pos, seq = layers * layer;
  return make_kv_tensor(data, rows * seq, layers, heads, head_dim, kv_strides{seq, layer, head_dim, pos, 1});
}

//! A dense paged pool [pages][L][P][H][D] (vLLM/FlashInfer "NHD" pages with
//! the layer axis inside the page; for one pool per layer pass layers = 1).
template <class T>
SPECDEC_HD constexpr kv_tensor<T> make_kv_tensor_paged_nhd(T* data, std::int64_t pages, std::int64_t layers,
                                                           std::int64_t page_size, std::int64_t heads,
                                                           std::int64_t head_dim) noexcept {
  // A page plays the part of a contiguous row with capacity page_size.
  return make_kv_tensor_lshd(data, pages, layers, heads, page_size, head_dim);
}

//! A dense paged pool [pages][L][H][P][D] (FlashInfer's "HND" pages).
template <class T>
SPECDEC_HD constexpr kv_tensor<T> make_kv_tensor_paged_hnd(T* data, std::int64_t pages, std::int64_t layers,
                                                           std::int64_t page_size, std::int64_t heads,
                                                           std::int64_t head_dim) noexcept {
  return make_kv_tensor_lhsd(data, pages, layers, heads, page_size, head_dim);
}

//! The same tensor description with an untyped pointer (what the CUDA API takes).
template <class T>
SPECDEC_HD constexpr kv_tensor<void> erase_kv_tensor(const kv_tensor<T>& t) noexcept {
  return kv_tensor<void>{static_cast<void*>(t.data),
                         t.size,
                         t.layers,
                         t.heads,
                         t.head_dim,
                         t.stride_seq,
                         t.stride_layer,
                         t.stride_head,
                         t.stride_pos,
                         t.stride_dim};
}

//! Where a request's logical positions live. Contiguous (block_table null):
//! request r owns row r, positions [0, capacity). Paged: logical position p
//! of request r lives in physical page `block_table[r * block_table_stride +
//! p / page_size]`, slot `p % page_size`; a request may use the first
//! `blocks_used[r]` entries of its row (all `blocks_per_row` when
//! blocks_used is null). Every page index read is checked against
//! `num_pages`. Precondition for paged caches (not checked across requests):
//! the pages a commit touches (those covering [cache_len, last kept
//! position]) belong to one request only; within a request they are checked
//! to be distinct.
struct kv_position_map {
  std::int64_t capacity = 0;                  //!< contiguous: positions per row
  const std::int32_t* block_table = nullptr;  //!< paged: physical page of each (request, block); null: contiguous
  std::int64_t block_table_stride = 0;        //!< paged: entries between requests' rows of the table
  std::int64_t blocks_per_row = 0;            //!< paged: blocks a request may address
  const std::int32_t* blocks_used = nullptr;  //!< paged, optional: blocks in use per request (null: blocks_per_row)
  std::int64_t page_size = 0;                 //!< paged: positions per page
  std::int64_t num_pages = 0;                 //!< paged: physical pages (every page index read is checked against it)

  //! Whether the cache is paged (a block table is set).
  SPECDEC_HD constexpr bool paged() const noexcept { return block_table != nullptr; }
};

//! Contiguous rows of `capacity` positions each.
SPECDEC_HD constexpr kv_position_map contiguous_positions(std::int64_t capacity) noexcept {
  kv_position_map m;
  m.capacity = capacity;
  return m;
}

//! A paged map: a row-major block table [requests][blocks_per_row].
SPECDEC_HD constexpr kv_position_map paged_positions(const std::int32_t* block_table, std::int64_t blocks_per_row,
                                                     std::int64_t page_size, std::int64_t num_pages,
                                                     const std::int32_t* blocks_used = nullptr) noexcept {
  kv_position_map m;
  m.block_table = block_table;
  m.block_table_stride = blocks_per_row;
  m.blocks_per_row = blocks_per_row;
  m.blocks_used = blocks_used;
  m.page_size = page_size;
  m.num_pages = num_pages;
  return m;
}

//! A batch of commits. Request r keeps the logical positions
//! `keep[keep_offsets[r] .. keep_offsets[r+1])` (strictly increasing, all
//! >= cache_len[r]); the k-th kept entry moves to position cache_len[r] + k,
//! so the request's new length is cache_len[r] + its keep count.
struct kv_commit_batch {
  std::int32_t num_requests = 0;               //!< R
  const position_id* cache_len = nullptr;      //!< [num_requests]
  const std::int32_t* keep_offsets = nullptr;  //!< [num_requests + 1], CSR
  const position_id* keep = nullptr;           //!< [keep_offsets[num_requests]]
};

static_assert(std::is_trivially_copyable_v<kv_tensor<void>>);
static_assert(std::is_trivially_copyable_v<kv_position_map>);
static_assert(std::is_trivially_copyable_v<kv_commit_batch>);

//! Checks one tensor description against the position map: positive
//! extents, non-negative strides, non-null data, and every address the
//! layout can form (rows `num_rows` for contiguous caches, all physical
//! pages for paged ones) below `size`. O(1).
template <class T>
SPECDEC_HD constexpr status validate_kv_tensor(const kv_tensor<T>& t, const kv_position_map& map,
                                               std::int64_t num_rows) noexcept {
  if (t.data == nullptr) return make_status(status_code::invalid_argument, "kv tensor has no data");
  if (t.layers <= 0 || t.heads <= 0 || t.head_dim <= 0)
    return make_status(status_code::invalid_argument, "kv tensor extents must be positive");
  if (t.stride_seq < 0 || t.stride_layer < 0 || t.stride_head < 0 || t.stride_pos < 0 || t.stride_dim < 0)
    return make_status(status_code::invalid_argument, "kv tensor strides must be non-negative");
  const std::int64_t seqs = map.paged() ? map.num_pages : num_rows;
  const std::int64_t positions = map.paged() ? map.page_size : map.capacity;
  if (seqs <= 0 || positions <= 0) return status::success();  // nothing addressable, nothing to bound
  // Largest offset, computed in unsigned 128-bit-free steps: each term is
  // checked against the remaining room so a huge stride cannot wrap.
  const std::int64_t ext[5] = {seqs, t.layers, t.heads, positions, t.head_dim};
  const std::int64_t str[5] = {t.stride_seq, t.stride_layer, t.stride_head, t.stride_pos, t.stride_dim};
  std::int64_t last = 0;
  for (int d = 0; d < 5; ++d) {
    const std::int64_t n = ext[d] - 1;
    if (n > 0 && str[d] > 0) {
      if (str[d] > (INT64_MAX - last) / n)
        return make_status(status_code::buffer_too_small, "kv tensor layout exceeds 64-bit offsets");
      last += n * str[d];
    }
  }
  if (last >= t.size) return make_status(status_code::buffer_too_small, "kv tensor layout addresses past size");
  return status::success();
}

//! Checks the position map itself: capacity (contiguous) or page size,
//! block-table shape and page count (paged). O(1).
SPECDEC_HD constexpr status validate_kv_position_map(const kv_position_map& map) noexcept {
  if (!map.paged()) {
    if (map.capacity < 0) return make_status(status_code::invalid_argument, "capacity must be non-negative");
    return status::success();
  }
  if (map.page_size <= 0) return make_status(status_code::invalid_argument, "page_size must be positive");
  if (map.num_pages <= 0) return make_status(status_code::invalid_argument, "num_pages must be positive");
  if (map.blocks_per_row < 0) return make_status(status_code::invalid_argument, "blocks_per_row must be >= 0");
  if (map.block_table_stride < map.blocks_per_row)
    return make_status(status_code::invalid_argument, "block_table_stride must be >= blocks_per_row");
  return status::success();
}

//! Checks request r of a batch against the map: cache_len >= 0, keep list
//! strictly increasing with keep[0] >= cache_len (so destination
//! cache_len + k never passes its source), every kept position inside the
//! request's capacity / block-table row, every touched page index in
//! [0, num_pages) and (paged) the touched pages pairwise distinct. Reads
//! only request r's entries. O(count + m^2) for m touched pages (a handful).
//! Index of the returned status: the offending request.
SPECDEC_HD constexpr status validate_kv_commit_request(const kv_commit_batch& b, const kv_position_map& map,
                                                       std::int32_t r) noexcept {
  const std::int64_t c = b.cache_len[r];
  const std::int64_t lo = b.keep_offsets[r];
  const std::int64_t hi = b.keep_offsets[r + 1];
  if (c < 0) return make_status(status_code::invalid_argument, "cache_len must be non-negative", r);
  if (hi < lo) return make_status(status_code::not_sorted, "keep_offsets must be non-decreasing", r);
  if (hi == lo) return status::success();
  std::int64_t prev = -1;
  for (std::int64_t j = lo; j < hi; ++j) {
    const std::int64_t p = b.keep[j];
    if (j == lo && p < c) return make_status(status_code::out_of_range, "kept position below cache_len", r);
    if (p <= prev) return make_status(status_code::not_sorted, "keep list must be strictly increasing", r);
    prev = p;
  }
  const std::int64_t last = prev;  // the largest position read or written
  if (!map.paged()) {
    if (last >= map.capacity) return make_status(status_code::out_of_range, "kept position >= capacity", r);
    return status::success();
  }
  const std::int64_t avail = map.blocks_used != nullptr ? map.blocks_used[r] : map.blocks_per_row;
  if (avail < 0 || avail > map.blocks_per_row)
    return make_status(status_code::out_of_range, "blocks_used outside [0, blocks_per_row]", r);
  const std::int64_t first_block = c / map.page_size;
  const std::int64_t last_block = last / map.page_size;
  if (last_block >= avail) return make_status(status_code::out_of_range, "block table too short for kept position", r);
  const std::int32_t* row = map.block_table + static_cast<std::int64_t>(r) * map.block_table_stride;
  for (std::int64_t i = first_block; i <= last_block; ++i) {
    if (row[i] < 0 || row[i] >= map.num_pages)
      return make_status(status_code::out_of_range, "block table entry outside [0, num_pages)", r);
    // Two logical blocks on one physical page would let a write clobber a later source.
    for (std::int64_t j = first_block; j < i; ++j)
      if (row[j] == row[i]) return make_status(status_code::invalid_argument, "block table repeats a page", r);
  }
  return status::success();
}

//! Request r's own code in a per-request commit (cache/kv_commit.hpp's
//! validate_kv_commit_requests and the CUDA validation kernel): its CSR
//! range inside [0, total_keep] first, so that a bad range reads no keep
//! entry (not_sorted), then validate_kv_commit_request. The header must
//! have passed.
SPECDEC_HD constexpr status_code kv_commit_request_code(const kv_commit_batch& b, const kv_position_map& map,
                                                        std::int64_t total_keep, std::int32_t r) noexcept {
  const std::int64_t lo = b.keep_offsets[r], hi = b.keep_offsets[r + 1];
  if (lo < 0 || hi < lo || hi > total_keep) return status_code::not_sorted;
  return validate_kv_commit_request(b, map, r).code();
}

//! Checks the batch header (counts, CSR offsets start at 0, the map, the
//! block-table extent) before any per-request check. O(1).
SPECDEC_HD constexpr status validate_kv_commit_header(const kv_commit_batch& b, const kv_position_map& map) noexcept {
  if (b.num_requests < 0) return make_status(status_code::invalid_argument, "num_requests must be >= 0");
  if (b.num_requests == 0) return status::success();
  if (b.cache_len == nullptr || b.keep_offsets == nullptr)
    return make_status(status_code::invalid_argument, "kv_commit_batch arrays are null");
  if (b.keep_offsets[0] != 0) return make_status(status_code::invalid_argument, "keep_offsets[0] must be 0");
  if (b.keep_offsets[b.num_requests] > 0 && b.keep == nullptr)
    return make_status(status_code::invalid_argument, "keep is null");
  SPECDEC_TRY(validate_kv_position_map(map));
  // Block-table row starts r * block_table_stride must fit in 64 bits.
  if (map.paged() && map.block_table_stride > INT64_MAX / b.num_requests)
    return make_status(status_code::invalid_argument, "block table too large");
  return status::success();
}

namespace detail {

//! Element offset of (layer, head, dim 0) at logical position p of request
//! r. Preconditions: validated inputs.
template <class T>
SPECDEC_HD constexpr std::int64_t kv_offset(const kv_tensor<T>& t, const kv_position_map& map, std::int64_t r,
                                            std::int64_t layer, std::int64_t head, std::int64_t p) noexcept {
  const std::int64_t base = layer * t.stride_layer + head * t.stride_head;
  if (!map.paged()) return r * t.stride_seq + base + p * t.stride_pos;
  const std::int64_t page = map.block_table[r * map.block_table_stride + p / map.page_size];
  return page * t.stride_seq + base + (p % map.page_size) * t.stride_pos;
}

}  // namespace detail

}  // namespace specdec
