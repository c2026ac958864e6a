//! \file
//! The fixed summation order of every probability-row mass and every
//! inverse-CDF prefix sum in specdec, on host and device alike, and the
//! scalar reference of it. Host and GPU code compute the same blocks (the
//! host with vector instructions, a GPU warp per tile) and combine them in
//! the same order, so the same row and the same uniform give the same token
//! on both sides, bit for bit.
//!
//! The order:
//! - the row is cut into tiles of `sum_tile` = 1024 elements (the last one
//!   padded with zeros);
//! - a tile's sum is a halving tree: s[j] = (x[j] + x[j + 512]) +
//!   (x[j + 256] + x[j + 768]) for j < 256, these three additions in float
//!   (so four entries take one widening; the same rounding as the old
//!   4-element float partial sums), then, in double, s[j] += s[j + h] for
//!   h = 128, 64, ..., 1 (j < h); the sum is s[0];
//! - the row mass is the tile sums added left to right, from 0.
//!
//! Inverse-CDF sampling of `target` (= u * mass) walks the tile sums left
//! to right (c = sum of the tiles before) to the first tile with target <
//! c + tile sum; inside it, segments of `sum_segment` = 32 elements are
//! summed left to right from 0 and walked the same way; inside the crossing
//! segment the positive entries are added one by one to the running value
//! and the first token with target < running value is returned (strict <,
//! so a zero entry is never returned). A level that rounding lets `target`
//! pass moves on to the next tile or segment; when the whole row is passed
//! the last positive token is returned (-1 only for an all-zero row).
//!
//! NaN rule: sampling reads validated rows only (finite, >= 0); argmax
//! never selects a NaN entry and reports whether the row held one.
#pragma once

#include <cstdint>

#include "specdec/core/config.hpp"
#include "specdec/core/float16.hpp"
#include "specdec/sample/row_transform.hpp"
#include "specdec/tree/token_tree.hpp"

namespace specdec {

//! Elements per tile of the fixed summation order.
inline constexpr std::int64_t sum_tile = 1024;
//! Elements per segment inside a tile (the inverse-CDF scan).
inline constexpr std::int64_t sum_segment = 32;

//! Number of tiles of a row of `vocab` elements.
SPECDEC_HD constexpr std::int64_t sum_tile_count(std::int64_t vocab) noexcept {
  return vocab <= 0 ? 0 : (vocab + sum_tile - 1) / sum_tile;
}

namespace detail {

//! A row of fp32, bf16 or fp16 values: element i at element offset i * s
//! of d (any stride), read as float (widened exactly, core/float16.hpp).
//! With a transform `x`, the values are logits and element i reads as
//! its probability (*x)(value, xo + i) (sample/row_transform.hpp).
struct row_ref {
  const void* d;
  std::int64_t s;
  row_dtype t = row_dtype::f32;
  const row_transform* x = nullptr;  //!< logits: the row's transform; null: the values are read as they are
  std::int64_t xo = 0;               //!< token id of element 0 (rows shifted from a transformed row)
  //! Element i as stored (the logit, for a transformed row).
  SPECDEC_HD float raw(std::int64_t i) const noexcept {
    if (t == row_dtype::f32) return static_cast<const float*>(d)[i * s];
    const std::uint16_t b = static_cast<const std::uint16_t*>(d)[i * s];
    return t == row_dtype::bf16 ? widen_bf16(b) : widen_f16(b);
  }
  SPECDEC_HD float operator[](std::int64_t i) const noexcept { return x == nullptr ? raw(i) : (*x)(raw(i), xo + i); }
  //! The row's floats when it is contiguous fp32 read as stored (the vector paths), else null.
  SPECDEC_HD const float* contiguous_f32() const noexcept {
    return t == row_dtype::f32 && s == 1 && x == nullptr ? static_cast<const float*>(d) : nullptr;
  }
  //! The fp32 row's data (callers have checked t == f32).
  SPECDEC_HD const float* f32() const noexcept { return static_cast<const float*>(d); }
  //! The row starting at element k of this one.
  SPECDEC_HD row_ref shifted(std::int64_t k) const noexcept {
    return row_ref{static_cast<const char*>(d) + k * s * row_dtype_bytes(t), s, t, x, xo + k};
  }
};

//! out[k] = r[begin + k] for k < n, with one type dispatch for the range
//! (the loops are then plain loads and exact widenings, then the
//! transform of a logits row).
SPECDEC_HD void widen_range(row_ref r, std::int64_t begin, std::int64_t n, float* out) noexcept {
  const std::int64_t s = r.s;
  if (r.t == row_dtype::f32) {
    const float* d = static_cast<const float*>(r.d) + begin * s;
    for (std::int64_t k = 0; k < n; ++k) out[k] = d[k * s];
  } else {
    const std::uint16_t* d = static_cast<const std::uint16_t*>(r.d) + begin * s;
    if (r.t == row_dtype::bf16)
      for (std::int64_t k = 0; k < n; ++k) out[k] = widen_bf16(d[k * s]);
    else
      for (std::int64_t k = 0; k < n; ++k) out[k] = widen_f16(d[k * s]);
  }
  if (r.x != nullptr)
    for (std::int64_t k = 0; k < n; ++k) out[k] = (*r.x)(out[k], r.xo + begin + k);
}

//! Sum of one tile in the fixed halving-tree order; `ld(i)` for i < n
//! (n <= sum_tile) returns element i as float, missing elements are 0.
//! The scalar reference of every vectorised or parallel tile sum.
template <class L>
SPECDEC_HD double tile_tree_sum(L ld, std::int64_t n) noexcept {
  double s[256];
  auto at = [&](std::int64_t i) { return i < n ? static_cast<float>(ld(i)) : 0.0f; };
  for (std::int64_t j = 0; j < 256; ++j) {
    const float a = at(j) + at(j + 512), b = at(j + 256) + at(j + 768);
    s[j] = static_cast<double>(a + b);
  }
  for (std::int64_t h = 128; h >= 1; h /= 2)
    for (std::int64_t j = 0; j < h; ++j) s[j] += s[j + h];
  return s[0];
}

//! Row mass from its tile sums (left to right, from 0).
SPECDEC_HD constexpr double sum_tiles(const double* tiles, std::int64_t count) noexcept {
  double m = 0.0;
  for (std::int64_t t = 0; t < count; ++t) m += tiles[t];
  return m;
}

//! The scan inside one tile: `ld(i)` for i < n returns element begin + i;
//! `c` is the cumulative mass before the tile. Returns the token or -1 when
//! rounding lets `target` pass the whole tile.
template <class L>
SPECDEC_HD token_id scan_tile(L ld, std::int64_t begin, std::int64_t n, double c, double target) noexcept {
  for (std::int64_t g = 0; g < n; g += sum_segment) {
    const std::int64_t m = n - g < sum_segment ? n - g : sum_segment;
    double gs = 0.0;
    for (std::int64_t k = 0; k < m; ++k) gs += static_cast<double>(ld(g + k));
    if (target < c + gs) {
      double cc = c;
      for (std::int64_t k = 0; k < m; ++k) {
        const float x = ld(g + k);
        if (x > 0.0f) {
          cc += static_cast<double>(x);
          if (target < cc) return static_cast<token_id>(begin + g + k);
        }
      }
    }
    c += gs;
  }
  return -1;
}

//! Index of the tile holding the sample of `target` and the cumulative
//! mass before it, from the tile sums; false when rounding lets `target`
//! pass every tile starting at `from`.
SPECDEC_HD constexpr bool locate_tile(const double* tiles, std::int64_t count, double target, std::int64_t& from,
                                      double& c) noexcept {
  for (; from < count; ++from) {
    const double next = c + tiles[from];
    if (target < next) return true;
    c = next;
  }
  return false;
}

//! Inverse-CDF sample of a validated row whose tile sums are known. `ld(i)`
//! returns element i; `last_positive()` is called only in the fallback.
template <class L, class LastPositive>
SPECDEC_HD token_id sample_tiled(L ld, std::int64_t V, const double* tiles, double target,
                                 LastPositive last_positive) noexcept {
  const std::int64_t count = sum_tile_count(V);
  std::int64_t t = 0;
  double c = 0.0;
  while (locate_tile(tiles, count, target, t, c)) {
    const std::int64_t begin = t * sum_tile;
    const std::int64_t n = V - begin < sum_tile ? V - begin : sum_tile;
    const token_id y = scan_tile([&](std::int64_t i) { return ld(begin + i); }, begin, n, c, target);
    if (y >= 0) return y;
    c += tiles[t++];
  }
  return last_positive();
}

//! The argmax merge rule: (va, ia) beats (vb, ib) when larger, or equal
//! with a lower id (the specdec tie order). NaN never beats anything.
SPECDEC_HD constexpr bool argmax_beats(float va, std::int64_t ia, float vb, std::int64_t ib) noexcept {
  return va > vb || (va == vb && ia < ib);
}

}  // namespace detail

}  // namespace specdec
