//! \file
//! The KV commit for per-node side buffers a drafter keeps next to the
//! cache: hidden states [N x hidden] (EAGLE / Lyanna-style drafters reuse
//! the accepted nodes' states), draft probability rows [N x vocab], token
//! info rows. Rows of the accepted nodes move to the front, in order, in
//! place; the same keep list that drives commit_kv can be reused by passing
//! its cache_len as `offset`.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>

#include "specdec/cache/kv_layout.hpp"
#include "specdec/core/config.hpp"
#include "specdec/core/status.hpp"
#include "specdec/core/view.hpp"

namespace specdec {

namespace detail {

//! Rows must not alias: a row's elements are distinct and rows do not
//! interleave (row stride covers a whole row). Conservative but O(1).
template <class T>
inline status check_rows_layout(const view2d<T>& v) noexcept {
  if (v.extent[0] < 0 || v.extent[1] < 0 || v.stride[0] < 0 || v.stride[1] < 0)
    return make_status(status_code::invalid_argument, "rows extents and strides must be non-negative");
  if (v.data == nullptr && v.size() > 0) return make_status(status_code::invalid_argument, "rows has no data");
  if (v.extent[1] > 1 && v.stride[1] == 0)
    return make_status(status_code::invalid_argument, "row elements alias (stride 0)");
  if (v.extent[0] > 1 && v.extent[1] > 0 && v.stride[0] < (v.extent[1] - 1) * v.stride[1] + 1)
    return make_status(status_code::invalid_argument, "rows overlap (row stride shorter than a row)");
  return status::success();
}

inline status check_row_keep(std::span<const position_id> keep, std::int64_t offset, std::int64_t dst_row,
                             std::int64_t rows) noexcept {
  std::int64_t prev = -1;
  for (std::size_t k = 0; k < keep.size(); ++k) {
    const std::int64_t src = static_cast<std::int64_t>(keep[k]) - offset;
    const auto ki = static_cast<std::int64_t>(k);
    if (src < 0 || src >= rows) return make_status(status_code::out_of_range, "kept row out of range", ki);
    if (src <= prev) return make_status(status_code::not_sorted, "keep list must be strictly increasing", ki);
    if (dst_row + ki > src) return make_status(status_code::out_of_range, "kept row lies before its destination", ki);
    prev = src;
  }
  return status::success();
}

template <kv_element T>
inline void move_rows(const view2d<T>& v, std::span<const position_id> keep, std::int64_t offset,
                      std::int64_t dst_row) noexcept {
  const std::int64_t width = v.extent[1];
  const std::int64_t count = static_cast<std::int64_t>(keep.size());
  std::int64_t k = 0;
  while (k < count) {
    const std::int64_t src = keep[static_cast<std::size_t>(k)] - offset;
    std::int64_t n = 1;
    while (k + n < count && keep[static_cast<std::size_t>(k + n)] - offset == src + n) ++n;
    const std::int64_t dst = dst_row + k;
    if (dst != src) {
      if (v.stride[1] == 1 && v.stride[0] == width) {
        std::memmove(v.data + dst * width, v.data + src * width, static_cast<std::size_t>(n * width) * sizeof(T));
      } else {
        for (std::int64_t i = 0; i < n; ++i) {
          T* d = v.data + (dst + i) * v.stride[0];
          const T* s = v.data + (src + i) * v.stride[0];
          if (v.stride[1] == 1)
            std::memmove(d, s, static_cast<std::size_t>(width) * sizeof(T));
          else
            for (std::int64_t e = 0; e < width; ++e) d[e * v.stride[1]] = s[e * v.stride[1]];
        }
      }
    }
    k += n;
  }
}

}  // namespace detail

//! In-place row commit of one buffer: row `keep[k] - offset` moves to row
//! `dst_row + k`. keep must be strictly increasing, in range, and
//! keep[k] - offset >= dst_row + k (true for keep lists from
//! keep_indices_from_path with offset = cache_len and dst_row = 0).
//! Rows not kept are left as they are. Validated before any write.
//! O(moved elements); no allocation; deterministic.
template <kv_element T>
status commit_rows(const view2d<T>& rows, std::span<const position_id> keep, std::int64_t offset = 0,
                   std::int64_t dst_row = 0) noexcept {
  SPECDEC_TRY(detail::check_rows_layout(rows));
  if (dst_row < 0) return make_status(status_code::invalid_argument, "dst_row must be non-negative");
  SPECDEC_TRY(detail::check_row_keep(keep, offset, dst_row, rows.extent[0]));
  detail::move_rows(rows, keep, offset, dst_row);
  return status::success();
}

//! Batched row commit: request r owns rows [row_offsets[r], row_offsets[r+1])
//! of `rows` and keeps keep[keep_offsets[r] .. keep_offsets[r+1]) (indices
//! relative to its first row after subtracting offset[r]; empty `offset`
//! means 0 for every request, pass the cache_len array to reuse KV keep
//! lists). Kept rows move to the front of the request's own range. All
//! requests are validated before any write; an error's index is the request.
template <kv_element T>
status commit_rows_batch(const view2d<T>& rows, std::span<const std::int32_t> row_offsets,
                         std::span<const std::int32_t> keep_offsets, std::span<const position_id> keep,
                         std::span<const position_id> offset = {}) noexcept {
  if (row_offsets.size() != keep_offsets.size() || row_offsets.empty())
    return make_status(status_code::size_mismatch, "row_offsets and keep_offsets need num_requests + 1 entries");
  const std::size_t R = row_offsets.size() - 1;
  if (!offset.empty() && offset.size() != R) return make_status(status_code::size_mismatch, "offset size");
  if (row_offsets[0] != 0 || keep_offsets[0] != 0)
    return make_status(status_code::invalid_argument, "CSR offsets must start at 0");
  if (static_cast<std::size_t>(keep_offsets[R]) != keep.size())
    return make_status(status_code::size_mismatch, "keep.size() must equal keep_offsets[R]");
  if (row_offsets[R] > rows.extent[0]) return make_status(status_code::out_of_range, "row_offsets past the rows");
  SPECDEC_TRY(detail::check_rows_layout(rows));
  for (std::size_t r = 0; r < R; ++r) {
    const auto ri = static_cast<std::int64_t>(r);
    if (row_offsets[r + 1] < row_offsets[r] || keep_offsets[r + 1] < keep_offsets[r] ||
        static_cast<std::size_t>(keep_offsets[r + 1]) > keep.size())
      return make_status(status_code::not_sorted, "CSR offsets must be non-decreasing", ri);
    const auto ks = keep.subspan(static_cast<std::size_t>(keep_offsets[r]),
                                 static_cast<std::size_t>(keep_offsets[r + 1] - keep_offsets[r]));
    const status s = detail::check_row_keep(ks, offset.empty() ? 0 : offset[r], 0, row_offsets[r + 1] - row_offsets[r]);
    if (!s.ok()) return make_status(s.code(), s.message(), ri);
  }
  for (std::size_t r = 0; r < R; ++r) {
    const auto ks = keep.subspan(static_cast<std::size_t>(keep_offsets[r]),
                                 static_cast<std::size_t>(keep_offsets[r + 1] - keep_offsets[r]));
    const std::int64_t base = row_offsets[r];
    // Shifting the offset by -base addresses the request's rows in the whole buffer.
    detail::move_rows(rows, ks, (offset.empty() ? 0 : offset[r]) - base, base);
  }
  return status::success();
}

}  // namespace specdec
