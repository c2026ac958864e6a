//! \file
//! Probability rows: validation, argmax and inverse-CDF sampling, for any
//! element type convertible to float. The one implementation used by
//! draft/ and verify/ (the verifiers' vectorised passes and the CUDA
//! policy compute exactly these results, in the order of sample/order.hpp).
//!
//! Tie order. Everywhere in specdec a "ranking" of tokens means probability
//! descending, then token id ascending: a strict total order, so top-k,
//! top-p and argmax are exactly defined even with equal values.
#pragma once

#include <cstdint>

#include "specdec/core/config.hpp"
#include "specdec/core/status.hpp"
#include "specdec/core/view.hpp"
#include "specdec/sample/order.hpp"
#include "specdec/tree/token_tree.hpp"

namespace specdec {

//! An element type a logits or probability row may have: anything
//! explicitly convertible to float (float, double, integers, a caller's
//! half/bfloat16 type with `explicit operator float`). Values are read
//! through `static_cast<float>`.
template <class T>
concept score_value = requires(const T& x) {
  static_cast<float>(x);
};

namespace detail {

//! Finite test that survives being compiled for the device and needs no
//! <cmath> overloads: inf - inf and NaN - NaN are NaN, which compares unequal.
SPECDEC_HD constexpr bool is_finite_value(float x) noexcept { return (x - x) == (x - x); }
SPECDEC_HD constexpr bool is_finite_value(double x) noexcept { return (x - x) == (x - x); }

//! The specdec tie order: a ranks before b.
SPECDEC_HD constexpr bool ranks_before(float va, token_id ia, float vb, token_id ib) noexcept {
  return va > vb || (va == vb && ia < ib);
}

template <class T>
SPECDEC_HD constexpr float to_float(T x) noexcept {
  return static_cast<float>(x);
}

}  // namespace detail

//! Validates one probability row: every entry finite (non_finite) and >= 0
//! (negative_probability), total mass > 0 (zero_mass); the offending token
//! is the status index. Writes the mass, summed in the fixed order of
//! sample/order.hpp, to `*total` when given. Rows need not be normalized.
//! O(V), one pass over the row (each tile read twice, from cache).
template <score_value T>
SPECDEC_HD constexpr status validate_probability_row(view1d<const T> row, double* total = nullptr) noexcept {
  const std::int64_t V = row.extent[0];
  if (V <= 0) return make_status(status_code::empty_input, "probability row is empty");
  double s = 0.0;
  for (std::int64_t b = 0; b < V; b += sum_tile) {
    const std::int64_t n = V - b < sum_tile ? V - b : sum_tile;
    for (std::int64_t i = b; i < b + n; ++i) {
      const float x = detail::to_float(row(i));
      if (!detail::is_finite_value(x)) return make_status(status_code::non_finite, "probability is NaN or infinite", i);
      if (x < 0.0f) return make_status(status_code::negative_probability, "probability is negative", i);
    }
    s += detail::tile_tree_sum([&](std::int64_t i) { return detail::to_float(row(b + i)); }, n);
  }
  if (!(s > 0.0)) return make_status(status_code::zero_mass, "probability row has zero total mass");
  if (total != nullptr) *total = s;
  return status::success();
}

//! Index of the largest entry, lowest id among equal maxima (the specdec
//! tie order). NaN entries are never chosen (an all-NaN or all -inf row
//! gives 0); `*has_nan`, when given, reports whether the row held a NaN.
//! Precondition: row.extent[0] > 0. O(V), one read, deterministic.
template <score_value T>
SPECDEC_HD constexpr token_id argmax_row(view1d<const T> row, bool* has_nan = nullptr) noexcept {
  std::int64_t best = -1;
  float bv = 0.0f;
  bool nan = false;
  for (std::int64_t i = 0; i < row.extent[0]; ++i) {
    const float x = detail::to_float(row(i));
    nan = nan || x != x;
    if (x == x && (best < 0 || detail::argmax_beats(x, i, bv, best))) {
      bv = x;
      best = i;
    }
  }
  if (has_nan != nullptr) *has_nan = nan;
  // An all -inf row keeps token 0 (first comparable entry).
  return best < 0 ? 0 : static_cast<token_id>(best);
}

//! Inverse-CDF sample from a validated row with mass `total` (as returned
//! by validate_probability_row), in the order of sample/order.hpp: the
//! first token whose cumulative sum exceeds u * total (strict, so a token
//! with zero mass is never returned); the last positive token when
//! rounding passes the row; -1 only if no entry is positive.
//! Precondition: u in [0, 1). O(V) worst case, reads until the sample.
template <score_value T>
SPECDEC_HD constexpr token_id sample_row(view1d<const T> row, double u, double total) noexcept {
  const std::int64_t V = row.extent[0];
  const double target = u * total;
  double c = 0.0;
  for (std::int64_t b = 0; b < V; b += sum_tile) {
    const std::int64_t n = V - b < sum_tile ? V - b : sum_tile;
    auto ld = [&](std::int64_t i) { return detail::to_float(row(b + i)); };
    const double s = detail::tile_tree_sum(ld, n);
    if (target < c + s) {
      const token_id y = detail::scan_tile(ld, b, n, c, target);
      if (y >= 0) return y;
    }
    c += s;
  }
  for (std::int64_t i = V - 1; i >= 0; --i)
    if (detail::to_float(row(i)) > 0.0f) return static_cast<token_id>(i);
  return -1;
}

//! sample_row with a float uniform (widened exactly).
template <score_value T>
SPECDEC_HD constexpr token_id sample_row(view1d<const T> row, float u, double total) noexcept {
  return sample_row(row, static_cast<double>(u), total);
}

//! Validates `row` and samples it with uniform `u` in [0, 1). Writes the
//! token to `*out` only on success; errors as validate_probability_row,
//! invalid_argument for u outside [0, 1).
template <score_value T>
SPECDEC_HD constexpr status sample_row_checked(view1d<const T> row, double u, token_id* out) noexcept {
  if (!(u >= 0.0 && u < 1.0)) return make_status(status_code::invalid_argument, "uniform must be in [0, 1)");
  double total = 0.0;
  SPECDEC_TRY(validate_probability_row(row, &total));
  *out = sample_row(row, u, total);
  return status::success();
}

}  // namespace specdec
