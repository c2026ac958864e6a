//! \file
//! The host row-operations policy of the verification walk
//! (verify/walk.hpp): single-threaded streaming passes with vector
//! instructions, tile sums in the fixed order of sample/order.hpp, so its
//! masses, residuals and samples equal the CUDA policy's bit for bit.
#pragma once

#include <cmath>
#include <cstdint>

#include "specdec/core/status.hpp"
#include "specdec/sample/detail/host_rows.hpp"
#include "specdec/sample/order.hpp"
#include "specdec/tree/token_tree.hpp"

namespace specdec::detail {

//! The host policy. Every pass reads whole rows and writes the tile sums
//! of the row it summed (the walk samples from them without a second read).
struct host_row_ops {
  //! Validity and mass of a probability row (tile sums into `tiles`).
  bool mass(row_ref r, std::int64_t V, double* tiles, double& m) const noexcept { return row_tiles(r, V, tiles, m); }

  //! R[k] = max(p[k] - q[k], 0), k < n (one float subtraction each).
  static void diff_run(const float* p, const float* q, float* R, std::int64_t n) noexcept {
    std::int64_t i = 0;
#ifdef SPECDEC_SAMPLE_SIMD
    for (; i + simd::fw <= n; i += simd::fw) simd::storev(R + i, simd::reluv(simd::loadv(p + i) - simd::loadv(q + i)));
#endif
    for (; i < n; ++i) {
      const float d = p[i] - q[i];
      R[i] = d > 0.0f ? d : 0.0f;
    }
  }
  //! R[k] = max(p[k] - s * q[k], 0), k < n, product and difference rounded
  //! separately (p may be R itself).
  static void scaled_run(const float* p, const float* q, float s, float* R, std::int64_t n) noexcept {
    std::int64_t i = 0;
#ifdef SPECDEC_SAMPLE_SIMD
    const simd::fv sv = simd::fv{} + s;
    for (; i + simd::fw <= n; i += simd::fw) {
      const simd::fv prod = simd::opaque(sv * simd::loadv(q + i));
      simd::storev(R + i, simd::reluv(simd::loadv(p + i) - prod));
    }
#endif
    for (; i < n; ++i) {
      const float d = p[i] - mul_rn(s, q[i]);
      R[i] = d > 0.0f ? d : 0.0f;
    }
  }
  //! f(p tile, q tile) on elements [b, b + n) of rows that are not both
  //! contiguous fp32 (strided or 16-bit), widened into buffers first; out of
  //! line, so the fp32 loops keep a small frame.
  template <class F>
  [[gnu::noinline]] static void on_widened(row_ref p, row_ref q, std::int64_t b, std::int64_t n, F&& f) noexcept {
    alignas(64) float bp[sum_tile], bq[sum_tile];
    widen_range(p, b, n, bp);
    widen_range(q, b, n, bq);
    f(static_cast<const float*>(bp), static_cast<const float*>(bq));
  }

  //! First residual: validates p and q, R = max(p - q, 0) (one float
  //! subtraction per entry), tile sums and masses of p, q and R.
  void first_residual(row_ref p, row_ref q, float* R, std::int64_t V, double* tp, double* tq, double* tr, double& mp,
                      double& mq, double& mr, bool& okp, bool& okq) const noexcept {
    std::uint32_t sp = 0, sq = 0, sr = 0;
    const std::int64_t nt = sum_tile_count(V);
    for (std::int64_t t = 0; t < nt; ++t) {
      const std::int64_t b = t * sum_tile;
      const std::int64_t n = V - b < sum_tile ? V - b : sum_tile;
      if (const float* pf = p.contiguous_f32(), *qf = q.contiguous_f32(); pf != nullptr && qf != nullptr)
        diff_run(pf + b, qf + b, R + b, n);
      else
        on_widened(p, q, b, n, [&](const float* pt, const float* qt) { diff_run(pt, qt, R + b, n); });
      tp[t] = detail::tile_sum(p, V, t, sp);
      tq[t] = detail::tile_sum(q, V, t, sq);
      tr[t] = detail::tile_sum(row_ref{R, 1}, V, t, sr);
    }
    mp = sum_tiles(tp, nt);
    mq = sum_tiles(tq, nt);
    mr = sum_tiles(tr, nt);
    okp = mp - mp == 0.0 && ((sp >> 31) == 0 || !has_negative(p, V));
    okq = mq - mq == 0.0 && ((sq >> 31) == 0 || !has_negative(q, V));
  }

  //! Later residuals: R = max(R - s * q, 0) in float, product and
  //! difference rounded separately (scaled_residual with p = R: the same
  //! operations element by element); tile sums into `tr`, returns the mass.
  double update_residual(row_ref q, float* R, float s, std::int64_t V, double* tr) const noexcept {
    return scaled_residual(row_ref{R, 1}, q, R, s, V, tr);
  }

  //! R = max(p - s * q, 0) in one read of p and q: bit for bit what copy
  //! then update_residual give (the walk falls back to those two passes
  //! for a policy without this one); tile sums into `tr`, returns the mass.
  double scaled_residual(row_ref p, row_ref q, float* R, float s, std::int64_t V, double* tr) const noexcept {
    std::uint32_t sr = 0;
    const std::int64_t nt = sum_tile_count(V);
    for (std::int64_t t = 0; t < nt; ++t) {
      const std::int64_t b = t * sum_tile;
      const std::int64_t n = V - b < sum_tile ? V - b : sum_tile;
      if (const float* pf = p.contiguous_f32(), *qf = q.contiguous_f32(); pf != nullptr && qf != nullptr)
        scaled_run(pf + b, qf + b, s, R + b, n);
      else
        on_widened(p, q, b, n, [&](const float* pt, const float* qt) { scaled_run(pt, qt, s, R + b, n); });
      tr[t] = detail::tile_sum(row_ref{R, 1}, V, t, sr);
    }
    return sum_tiles(tr, nt);
  }

  //! Inverse-CDF sample of a row whose tile sums are `tiles`.
  token_id sample(row_ref r, std::int64_t V, const double* tiles, double target) const noexcept {
    return sample_from_tiles(r, V, tiles, target);
  }

  //! Argmax, lowest id on ties; false when the row holds a NaN.
  bool argmax(row_ref r, std::int64_t V, token_id& a) const noexcept { return argmax_pass(r, V, a); }

  //! Validity, mass (fixed order) and sum of p log p (0 log 0 = 0).
  bool entropy(row_ref r, std::int64_t V, double* tiles, double& m, double& plogp) const noexcept {
    if (!row_tiles(r, V, tiles, m)) return false;
    double h = 0.0;
    for (std::int64_t i = 0; i < V; ++i) {
      const float x = r[i];
      if (x > 0.0f) h += static_cast<double>(x) * std::log(static_cast<double>(x));
    }
    plogp = h;
    return true;
  }

  //! Code of a row a pass flagged: non_finite before negative_probability;
  //! invalid_argument when every entry is a finite non-negative float but
  //! the float partial sums overflowed (entries near FLT_MAX).
  status_code classify(row_ref r, std::int64_t V) const noexcept {
    bool neg = false;
    for (std::int64_t i = 0; i < V; ++i) {
      const float x = r[i];
      if (!(x - x == x - x)) return status_code::non_finite;
      neg |= x < 0.0f;
    }
    return neg ? status_code::negative_probability : status_code::invalid_argument;
  }

  //! Sum of tile t of a row (fixed order).
  double tile_sum(row_ref r, std::int64_t V, std::int64_t t) const noexcept {
    std::uint32_t signs = 0;
    return detail::tile_sum(r, V, t, signs);
  }

  //! The inverse-CDF scan inside tile t (cumulative mass c before it), or -1.
  token_id scan_tile(row_ref r, std::int64_t V, std::int64_t t, double c, double target) const noexcept {
    const std::int64_t b = t * sum_tile;
    const std::int64_t n = V - b < sum_tile ? V - b : sum_tile;
    return detail::scan_tile([&](std::int64_t i) { return r[b + i]; }, b, n, c, target);
  }

  //! Last token with a positive entry, or -1.
  token_id last_positive(row_ref r, std::int64_t V) const noexcept { return detail::last_positive(r, V); }

  //! R[i] = row[i] for i in [begin, end).
  void copy_range(row_ref r, float* R, std::int64_t begin, std::int64_t end) const noexcept {
    for (std::int64_t i = begin; i < end; ++i) R[i] = r[i];
  }
  //! R = row.
  void copy(row_ref r, float* R, std::int64_t V) const noexcept { copy_range(r, R, 0, V); }
  //! One element written by one writer (the device writes from one thread).
  template <class T>
  void put(T* a, std::int64_t i, T v) const noexcept {
    a[i] = v;
  }
  //! Makes earlier writes visible to every participant (nothing on the host).
  void sync() const noexcept {}
};

}  // namespace specdec::detail
