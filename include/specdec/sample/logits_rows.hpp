//! \file
//! Host twin of the CUDA logits pre-pass: the sampling transform of one
//! logits row (sample/row_transform.hpp) found with the same steps, so a
//! host verification of logits rows gives the kernel's tokens.
//! make_row_transform reads the row 2 times without filters, 3 + 8 with
//! top-k, 3 + 8 with top-p, 4 + 16 with both (each radix digit is a pass);
//! given scratch for the weights, the row itself is read twice and the
//! later passes read the weights.
#pragma once

#include <cmath>
#include <cstdint>
#include <span>

#include "specdec/sample/detail/host_rows.hpp"
#include "specdec/sample/order.hpp"
#include "specdec/sample/row_transform.hpp"
#include "specdec/sample/sampling_params.hpp"

namespace specdec {

namespace detail {

//! Calls f(w, i) for every token i of `r` whose weight w the transform
//! `t` keeps so far (min-p and the current cut); the weights come from
//! `weights` when given (computed once), else from the row.
template <class F>
void each_kept(row_ref r, const float* weights, std::int64_t V, const row_transform& t, F f) noexcept {
  for (std::int64_t i = 0; i < V; ++i) {
    const float w = weights != nullptr ? weights[i] : t.weight(r.raw(i));
    if (t.keeps(w, i)) f(w, i);
  }
}

//! w[i] = t.weight(r.raw(i)), i < V: on vectors (simd::weight_exp_rn, the
//! same floats) a tile at a time, 16-bit or strided rows widened first.
inline void fill_weights(row_ref r, std::int64_t V, const row_transform& t, float* w) noexcept {
  const row_ref raw{r.d, r.s, r.t};
#ifdef SPECDEC_SAMPLE_SIMD
  const simd::fv mv = simd::fv{} + t.m, tv = simd::fv{} + t.inv_t;
  alignas(64) float buf[sum_tile];
  for (std::int64_t b = 0; b < V; b += sum_tile) {
    const std::int64_t n = V - b < sum_tile ? V - b : sum_tile;
    const float* x = raw.contiguous_f32();
    if (x != nullptr) {
      x += b;
    } else {
      widen_range(raw, b, n, buf);
      x = buf;
    }
    std::int64_t i = 0;
    for (; i + simd::fw <= n; i += simd::fw)
      simd::storev(w + b + i, simd::weight_exp_rn(simd::opaque((simd::loadv(x + i) - mv) * tv)));
    for (; i < n; ++i) w[b + i] = t.weight(x[i]);
  }
#else
  for (std::int64_t i = 0; i < V; ++i) w[i] = t.weight(raw.raw(i));
#endif
}

//! The rank key of the kept token where the weight wt(w), counted in rank
//! order, reaches `need` (0 if it never does): eight histogram passes, one
//! per 8-bit digit of the key, top digit first.
template <class Weight>
std::uint64_t radix_select_key(row_ref r, const float* weights, std::int64_t V, const row_transform& t, Weight wt,
                               std::uint64_t need) noexcept {
  std::uint64_t prefix = 0;
  std::uint64_t hist[256];
  for (int d = 7; d >= 0; --d) {
    for (auto& h : hist) h = 0;
    const std::uint64_t high = radix_high_mask(d);
    each_kept(r, weights, V, t, [&](float w, std::int64_t i) {
      const std::uint64_t k = rank_key(bits_of(w), i);
      if ((k & high) == prefix) hist[(k >> (8 * d)) & 255u] += wt(w);
    });
    const int b = radix_pick(hist, need);
    if (b < 0) return 0;
    prefix |= static_cast<std::uint64_t>(b) << (8 * d);
  }
  return prefix;
}

}  // namespace detail

//! The transform of logits row `r` (V entries, read as stored; r.x is
//! ignored) under `sp`: the same constants as the CUDA pre-pass. A bad
//! row or bad params give a transform whose code says so (see
//! row_transform::code). With `weights` (V floats of scratch) every weight
//! is computed once and the filter passes read it there (one exp per
//! entry instead of one per entry and pass); the constants are the same.
//! O(V) per pass; no allocation.
inline row_transform make_row_transform(detail::row_ref r, std::int64_t V, const sampling_params& sp,
                                        std::span<float> weights = {}) noexcept {
  row_transform t = detail::start_transform(sp);
  if (t.code != 0) return t;
  float m = -INFINITY;
  std::int64_t arg = -1;
  bool bad = false;
  for (std::int64_t i = 0; i < V; ++i) {
    const float x = r.raw(i);
    bad |= x != x || x == INFINITY;
    if (x > m) {
      m = x;
      arg = i;
    }
  }
  if (bad || arg < 0) {
    t.code = static_cast<std::int32_t>(bad ? status_code::non_finite : status_code::zero_mass);
    return t;
  }
  t.m = m;
  t.arg = static_cast<std::int32_t>(arg);
  if (t.greedy != 0) return t;
  float* w = static_cast<std::int64_t>(weights.size()) >= V ? weights.data() : nullptr;
  if (w != nullptr) detail::fill_weights(r, V, t, w);
  if (sp.top_k > 0 && sp.top_k < V) {
    std::uint64_t c = 0;
    detail::each_kept(r, w, V, t, [&](float, std::int64_t) { ++c; });
    if (static_cast<std::uint64_t>(sp.top_k) < c)
      t.cut = detail::radix_select_key(
          r, w, V, t, [](float) { return std::uint64_t{1}; }, static_cast<std::uint64_t>(sp.top_k));
  }
  if (sp.top_p < 1.0f) {
    std::uint64_t q = 0;
    detail::each_kept(r, w, V, t, [&](float x, std::int64_t) { q += detail::grid_mass(x); });
    t.cut = detail::radix_select_key(
        r, w, V, t, [](float x) { return detail::grid_mass(x); }, detail::top_p_goal(sp.top_p, q));
  }
  // Z: the kept weights' sum in the fixed tile order (inv_z = 1 reads them
  // as they are; from the scratch, the dropped ones zeroed first).
  if (w != nullptr)
    for (std::int64_t i = 0; i < V; ++i) w[i] = t.keeps(w[i], i) ? w[i] : 0.0f;
  const detail::row_ref kept = w != nullptr ? detail::row_ref{w, 1} : detail::row_ref{r.d, r.s, r.t, &t, 0};
  double z = 0.0;
  std::uint32_t signs = 0;
  for (std::int64_t k = 0; k < sum_tile_count(V); ++k) z += detail::tile_sum(kept, V, k, signs);
  t.inv_z = 1.0 / z;
  return t;
}

}  // namespace specdec
