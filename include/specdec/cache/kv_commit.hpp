//! \file
//! In-place KV commit on the host: every request of a batch keeps the
//! positions of its accepted path and moves the k-th of them to
//! cache_len + k, in every layer and head of every tensor, for contiguous
//! and paged caches. See kv_layout.hpp for the cache description and
//! docs/cache.md for the layouts table.
//!
//! Why in place is safe: keep lists are strictly
//! increasing with keep[0] >= cache_len, so keep[k] >= cache_len + k: each
//! destination is at or before its own source and strictly before every
//! later source. Copying the entries of one (layer, head) row in increasing
//! k therefore never overwrites a source before it is read.
#pragma once

#include <cstdint>
#include <cstring>
#include <ranges>
#include <span>
#include <type_traits>

#include "specdec/cache/kv_layout.hpp"
#include "specdec/core/config.hpp"
#include "specdec/core/status.hpp"

namespace specdec {

namespace detail {

//! Moves `n` consecutive positions of one (layer, head) row from src to
//! dst (element offsets of position 0 of each run, dst <= src in logical
//! order). Chooses one memmove when the run is one contiguous block, a
//! memcpy per position when only head_dim (or the collapsed head block) is
//! contiguous, and an element loop otherwise; all copy in increasing
//! position order, which is what makes overlapping runs safe.
template <kv_element T>
inline void kv_move_run(T* data, std::int64_t dst, std::int64_t src, std::int64_t n, std::int64_t row_elems,
                        std::int64_t stride_pos, std::int64_t stride_elem) noexcept {
  if (dst == src) return;
  if (stride_elem == 1 && stride_pos == row_elems) {
    // The run is one block; memmove because a short shift overlaps it.
    std::memmove(data + dst, data + src, static_cast<std::size_t>(n * row_elems) * sizeof(T));
    return;
  }
  if (stride_elem == 1) {
    // Distinct positions never overlap, so each row is a plain memcpy.
    for (std::int64_t i = 0; i < n; ++i)
      std::memcpy(data + dst + i * stride_pos, data + src + i * stride_pos,
                  static_cast<std::size_t>(row_elems) * sizeof(T));
    return;
  }
  for (std::int64_t i = 0; i < n; ++i) {
    T* d = data + dst + i * stride_pos;
    const T* s = data + src + i * stride_pos;
    for (std::int64_t e = 0; e < row_elems; ++e) d[e * stride_elem] = s[e * stride_elem];
  }
}

//! Commits one request in one tensor. Runs of consecutive kept positions
//! become one move (split at page boundaries of source and destination in
//! paged caches); heads collapse into one row when they are adjacent in
//! memory ([..][pos][H][D] layouts), so a position is moved with one copy.
template <kv_element T>
inline void kv_commit_one(const kv_tensor<T>& t, const kv_position_map& map, std::int64_t r, std::int64_t c,
                          const position_id* keep, std::int64_t count) noexcept {
  const bool collapse = t.heads > 1 && t.stride_head == t.head_dim * t.stride_dim;
  const std::int64_t heads = collapse ? 1 : t.heads;
  const std::int64_t row_elems = collapse ? t.heads * t.head_dim : t.head_dim;
  const std::int64_t page = map.paged() ? map.page_size : INT64_MAX;
  for (std::int64_t layer = 0; layer < t.layers; ++layer) {
    for (std::int64_t head = 0; head < heads; ++head) {
      std::int64_t k = 0;
      while (k < count) {
        const std::int64_t src = keep[k];
        const std::int64_t dst = c + k;
        // Extend the run while sources stay consecutive and neither side leaves its page.
        std::int64_t n = 1;
        const std::int64_t room = page == INT64_MAX
                                      ? INT64_MAX
                                      : (page - src % page < page - dst % page ? page - src % page : page - dst % page);
        while (k + n < count && n < room && keep[k + n] == src + n) ++n;
        if (src != dst) {
          kv_move_run(t.data, kv_offset(t, map, r, layer, head, dst), kv_offset(t, map, r, layer, head, src), n,
                      row_elems, t.stride_pos, t.stride_dim);
        }
        k += n;
      }
    }
  }
}

}  // namespace detail

//! Validates a whole commit without writing: the map, every tensor, the
//! batch header and every request. `keep.size()` must equal
//! `keep_offsets[num_requests]`; spans must have num_requests (+1) entries.
//! O(total keep + tensors). Returned index: the offending request or tensor.
template <kv_element T>
status validate_kv_commit(std::span<const kv_tensor<T>> tensors, const kv_position_map& map,
                          std::span<const position_id> cache_len, std::span<const std::int32_t> keep_offsets,
                          std::span<const position_id> keep) noexcept {
  if (keep_offsets.size() != cache_len.size() + 1)
    return make_status(status_code::size_mismatch, "keep_offsets must have num_requests + 1 entries");
  if (cache_len.size() > static_cast<std::size_t>(INT32_MAX))
    return make_status(status_code::invalid_argument, "too many requests");
  const kv_commit_batch b{static_cast<std::int32_t>(cache_len.size()), cache_len.data(), keep_offsets.data(),
                          keep.data()};
  SPECDEC_TRY(validate_kv_commit_header(b, map));
  if (b.num_requests > 0 && static_cast<std::size_t>(keep_offsets.back()) != keep.size())
    return make_status(status_code::size_mismatch, "keep.size() must equal keep_offsets[num_requests]");
  // Request by request, the CSR range before its keep entries are read (so a
  // bad CSR never reads out of bounds); the lowest failing request wins,
  // exactly as in the CUDA validation kernel.
  for (std::int32_t r = 0; r < b.num_requests; ++r) {
    const std::int32_t lo = keep_offsets[static_cast<std::size_t>(r)];
    const std::int32_t hi = keep_offsets[static_cast<std::size_t>(r) + 1];
    if (lo < 0 || hi < lo || static_cast<std::size_t>(hi) > keep.size())
      return make_status(status_code::not_sorted, "keep_offsets must be non-decreasing and within keep", r);
    SPECDEC_TRY(validate_kv_commit_request(b, map, r));
  }
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const status s = validate_kv_tensor(tensors[i], map, b.num_requests);
    if (!s.ok()) return make_status(s.code(), s.message(), static_cast<std::int64_t>(i));
  }
  return status::success();
}

//! In-place KV commit for a batch of requests over any number of tensors
//! (K and V, interleaved halves, per-layer pools), contiguous or paged.
//! Request r keeps the positions keep[keep_offsets[r]..keep_offsets[r+1])
//! (absolute positions, e.g. from keep_indices_from_path) and the k-th moves
//! to cache_len[r] + k; positions before cache_len and entries past the new
//! length are left as they are. Everything is validated before the first
//! write: on error the caches are byte-identical to the input.
//! Element bits are moved, never interpreted. Cost: moved bytes plus
//! O(tensors * layers * heads * keep) index work; no allocation;
//! deterministic. Not thread-safe with respect to the same caches.
template <kv_element T>
status commit_kv(std::span<const kv_tensor<T>> tensors, const kv_position_map& map,
                 std::span<const position_id> cache_len, std::span<const std::int32_t> keep_offsets,
                 std::span<const position_id> keep) noexcept {
  SPECDEC_TRY(validate_kv_commit(tensors, map, cache_len, keep_offsets, keep));
  for (const auto& t : tensors) {
    for (std::size_t r = 0; r < cache_len.size(); ++r) {
      const std::int32_t lo = keep_offsets[r];
      detail::kv_commit_one(t, map, static_cast<std::int64_t>(r), cache_len[r], keep.data() + lo,
                            keep_offsets[r + 1] - lo);
    }
  }
  return status::success();
}

//! Single-request convenience: request 0 of a one-request batch (its row 0 /
//! block-table row 0). Same guarantees as the batched form.
template <kv_element T>
status commit_kv(std::span<const kv_tensor<T>> tensors, const kv_position_map& map, position_id cache_len,
                 std::span<const position_id> keep) noexcept {
  if (keep.size() > static_cast<std::size_t>(INT32_MAX))
    return make_status(status_code::invalid_argument, "keep list too long");
  const position_id len[1] = {cache_len};
  const std::int32_t off[2] = {0, static_cast<std::int32_t>(keep.size())};
  return commit_kv<T>(tensors, map, len, off, keep);
}

namespace detail {
template <class T>
struct kv_tensor_element {};
template <class T>
struct kv_tensor_element<kv_tensor<T>> {
  using type = T;
};
}  // namespace detail

//! Any contiguous range of kv_tensor<T> (std::vector, std::array, a C array):
//! the element type is deduced, so no explicit `commit_kv<T>` is needed.
template <class Tensors>
concept kv_tensor_range =
    std::ranges::contiguous_range<const Tensors&> && std::ranges::sized_range<const Tensors&> && requires {
  typename detail::kv_tensor_element<std::remove_cv_t<std::ranges::range_value_t<const Tensors&>>>::type;
};

//! commit_kv (batched) over a deduced kv_tensor range.
template <kv_tensor_range Tensors>
status commit_kv(const Tensors& tensors, const kv_position_map& map, std::span<const position_id> cache_len,
                 std::span<const std::int32_t> keep_offsets, std::span<const position_id> keep) noexcept {
  using T = typename detail::kv_tensor_element<std::remove_cv_t<std::ranges::range_value_t<const Tensors&>>>::type;
  return commit_kv<T>(std::span<const kv_tensor<T>>(std::ranges::data(tensors), std::ranges::size(tensors)), map,
                      cache_len, keep_offsets, keep);
}

//! commit_kv (single request) over a deduced kv_tensor range.
template <kv_tensor_range Tensors>
status commit_kv(const Tensors& tensors, const kv_position_map& map, position_id cache_len,
                 std::span<const position_id> keep) noexcept {
  using T = typename detail::kv_tensor_element<std::remove_cv_t<std::ranges::range_value_t<const Tensors&>>>::type;
  return commit_kv<T>(std::span<const kv_tensor<T>>(std::ranges::data(tensors), std::ranges::size(tensors)), map,
                      cache_len, keep);
}

}  // namespace specdec
