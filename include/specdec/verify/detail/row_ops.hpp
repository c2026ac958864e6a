//! \file
//! Host row passes used by the verifiers: each is one streaming pass over a
//! vocabulary row (or two rows read in lockstep), with fixed-order 8-lane
//! double accumulation (deterministic, and independent enough for the
//! compiler to keep several adds in flight).
#pragma once

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "specdec/core/status.hpp"
#include "specdec/core/view.hpp"
#include "specdec/tree/token_tree.hpp"

namespace specdec::detail {

//! A probability row: element i at d[i * s].
struct prow {
  const float* d;
  std::int64_t s;
  float operator[](std::int64_t i) const noexcept { return d[i * s]; }
};

inline prow row_of(const view2d<const float>& v, std::int64_t r) noexcept {
  return prow{v.data + r * v.stride[0], v.stride[1]};
}

struct contig_load {
  const float* d;
  float operator()(std::int64_t i) const noexcept { return d[i]; }
};
struct strided_load {
  const float* d;
  std::int64_t s;
  float operator()(std::int64_t i) const noexcept { return d[i * s]; }
};

//! Calls f with a loader specialised for unit stride (the vectorisable case).
template <class F>
decltype(auto) with_load(prow r, F&& f) {
  if (r.s == 1) return f(contig_load{r.d});
  return f(strided_load{r.d, r.s});
}
template <class F>
decltype(auto) with_load2(prow a, prow b, F&& f) {
  return with_load(a, [&](auto la) { return with_load(b, [&](auto lb) { return f(la, lb); }); });
}

//! 8 partial sums combined in a fixed tree: the summation order of every
//! row mass in specdec's host code.
inline double combine8(const double* a) noexcept {
  return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

//! A valid probability: finite and >= 0 (false for NaN).
inline bool prob_ok(float x) noexcept { return x >= 0.0f && x <= FLT_MAX; }

//! Classifies the first invalid entry of a row (after a pass flagged one).
inline status classify_row(prow r, std::int64_t V, std::int64_t node, bool is_q) noexcept {
  // Non-finite entries take precedence over negative ones (the device
  // kernel reports the same code for a row holding both).
  for (std::int64_t i = 0; i < V; ++i) {
    const float x = r[i];
    if (!(x - x == x - x))
      return make_status(status_code::non_finite,
                         is_q ? "draft row q has a NaN or infinite entry" : "target row p has a NaN or infinite entry",
                         node);
  }
  for (std::int64_t i = 0; i < V; ++i)
    if (r[i] < 0.0f)
      return make_status(status_code::negative_probability,
                         is_q ? "draft row q has a negative entry" : "target row p has a negative entry", node);
  // Every entry is finite and >= 0, but partial sums overflowed float:
  // entries near FLT_MAX are not probabilities.
  return make_status(status_code::invalid_argument,
                     is_q ? "draft row q has entries too large to sum" : "target row p has entries too large to sum",
                     node);
}

//! Checks a validated row's mass: zero_mass, or invalid_argument when
//! `tolerance` >= 0 and |mass - 1| > tolerance.
inline status check_mass(double mass, float tolerance, std::int64_t node, bool is_q) noexcept {
  if (!(mass > 0.0))
    return make_status(status_code::zero_mass, is_q ? "draft row q has zero mass" : "target row p has zero mass", node);
  if (tolerance >= 0.0f && (mass - 1.0 > tolerance || 1.0 - mass > tolerance))
    return make_status(status_code::invalid_argument,
                       is_q ? "draft row q is not normalized (see normalization_tolerance)"
                            : "target row p is not normalized (see normalization_tolerance)",
                       node);
  return status::success();
}

#if (defined(__GNUC__) || defined(__clang__)) && !defined(SPECDEC_NO_SIMD)
#define SPECDEC_VERIFY_SIMD 1
#if defined(__SSE2__)
#include <emmintrin.h>
#endif
//! 128-bit GCC/Clang vector types: the contiguous passes are written with
//! them so they vectorise at any optimisation level. Lane l of the double
//! accumulators always holds elements i with i % 8 == l, exactly as in the
//! scalar code, so both paths give bit-identical sums.
namespace simd {
typedef float f4 __attribute__((vector_size(16)));
typedef double d2 __attribute__((vector_size(16)));
typedef std::int32_t i4 __attribute__((vector_size(16)));
inline f4 load(const float* p) noexcept {
  f4 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store(float* p, f4 v) noexcept { std::memcpy(p, &v, sizeof v); }
#if defined(__SSE2__)
// GCC lowers the generic half-vector conversions below through scalar
// registers; the SSE2 conversions are the single instructions we want.
inline d2 lo(f4 v) noexcept { return reinterpret_cast<d2>(_mm_cvtps_pd(reinterpret_cast<__m128>(v))); }
inline d2 hi(f4 v) noexcept {
  const __m128 x = reinterpret_cast<__m128>(v);
  return reinterpret_cast<d2>(_mm_cvtps_pd(_mm_movehl_ps(x, x)));
}
inline f4 join(d2 a, d2 b) noexcept {
  return reinterpret_cast<f4>(
      _mm_movelh_ps(_mm_cvtpd_ps(reinterpret_cast<__m128d>(a)), _mm_cvtpd_ps(reinterpret_cast<__m128d>(b))));
}
#else
inline d2 lo(f4 v) noexcept { return __builtin_convertvector(__builtin_shufflevector(v, v, 0, 1), d2); }
inline d2 hi(f4 v) noexcept { return __builtin_convertvector(__builtin_shufflevector(v, v, 2, 3), d2); }
inline f4 join(d2 a, d2 b) noexcept {
  typedef float f2 __attribute__((vector_size(8)));
  const f2 x = __builtin_convertvector(a, f2), y = __builtin_convertvector(b, f2);
  return __builtin_shufflevector(x, y, 0, 1, 2, 3);
}
#endif
//! max(x, 0) with NaN -> 0 (the scalar `x > 0 ? x : 0`).
inline f4 relu(f4 x) noexcept {
  const f4 zero = {0.0f, 0.0f, 0.0f, 0.0f};
  return reinterpret_cast<f4>(reinterpret_cast<i4>(x) & (x > zero));
}
inline bool any(i4 m) noexcept { return (m[0] | m[1] | m[2] | m[3]) != 0; }
inline void spill(d2 a0, d2 a1, d2 a2, d2 a3, double* acc) noexcept {
  acc[0] = a0[0];
  acc[1] = a0[1];
  acc[2] = a1[0];
  acc[3] = a1[1];
  acc[4] = a2[0];
  acc[5] = a2[1];
  acc[6] = a3[0];
  acc[7] = a3[1];
}
}  // namespace simd
#endif

//! Validity from a pass's summary: the double sum of finite floats cannot
//! overflow, so it is finite exactly when every entry is (NaN and +-inf
//! propagate), and a negative flag (x < 0, so -0.0 is fine) catches the
//! rest. No per-element branch, so the passes stay vectorisable.
inline bool row_valid(double sum, bool negative) noexcept { return sum - sum == 0.0 && !negative; }

//! The canonical summation order of every row mass in specdec's host code
//! (deterministic, and cheap enough to run at memory speed): element i goes
//! to lane i % 8; within each aligned block of 32 elements a lane adds its
//! 4 elements in float, and the block's lane total is then added to the
//! lane's double accumulator; the 8 lanes are combined by combine8. The
//! float partial sums cost at most ~4 ulp of a block, far below anything a
//! decision depends on. The SIMD paths below reproduce it bit for bit.
struct block_sum8 {
  double acc[8] = {};
  float f[8] = {};
  void add(std::int64_t i, float x) noexcept {
    const auto l = static_cast<int>(i & 7);
    f[l] += x;
    if ((i & 31) >= 24) {  // the lane's last element of the block
      acc[l] += static_cast<double>(f[l]);
      f[l] = 0.0f;
    }
  }
  double finish() noexcept {
    for (int l = 0; l < 8; ++l) acc[l] += static_cast<double>(f[l]);
    return combine8(acc);
  }
};

#ifdef SPECDEC_VERIFY_SIMD
namespace simd {
//! block_sum8 for whole 32-element blocks: x[k] holds elements 4k..4k+3.
struct vblock_sum {
  d2 a0 = {}, a1 = {}, a2 = {}, a3 = {};
  void add_block(const f4 (&x)[8]) noexcept {
    const f4 fa = ((x[0] + x[2]) + x[4]) + x[6];
    const f4 fb = ((x[1] + x[3]) + x[5]) + x[7];
    a0 += lo(fa);
    a1 += hi(fa);
    a2 += lo(fb);
    a3 += hi(fb);
  }
  void spill(block_sum8& b) const noexcept { simd::spill(a0, a1, a2, a3, b.acc); }
};
inline void load_block(const float* p, f4 (&x)[8]) noexcept {
#pragma GCC unroll 8
  for (int k = 0; k < 8; ++k) x[k] = load(p + 4 * k);
}
inline i4 negative_mask(const f4 (&x)[8]) noexcept {
  const f4 zero = {};
  i4 n = x[0] < zero;
#pragma GCC unroll 8
  for (int k = 1; k < 8; ++k) n |= x[k] < zero;
  return n;
}
}  // namespace simd
#endif

//! Mass of one probability row; false when an entry is invalid.
template <class L>
bool mass_pass(L ld, std::int64_t V, double& mass) noexcept {
  block_sum8 sum;
  bool neg = false;
  std::int64_t i = 0;
#ifdef SPECDEC_VERIFY_SIMD
  if constexpr (std::is_same_v<L, contig_load>) {
    using namespace simd;
    vblock_sum vs;
    i4 n = {};
    f4 xv[8];
    for (; i + 32 <= V; i += 32) {
      load_block(ld.d + i, xv);
      vs.add_block(xv);
      n |= negative_mask(xv);
    }
    vs.spill(sum);
    neg = any(n);
    // The tail (< 32 elements) in scalar code, with the same lanes.
    for (int tail = 0; tail < 32 && i < V; ++tail, ++i) {
      const float x = ld(i);
      sum.add(i, x);
      neg |= x < 0.0f;
    }
  } else
#endif
  {
    for (; i < V; ++i) {
      const float x = ld(i);
      sum.add(i, x);
      neg |= x < 0.0f;
    }
  }
  mass = sum.finish();
  return row_valid(mass, neg);
}

//! Masses of p and q read in lockstep.
template <class LP, class LQ>
void mass2_pass(LP lp, LQ lq, std::int64_t V, double& mp, double& mq, bool& okp, bool& okq) noexcept {
  block_sum8 sp, sq;
  bool np = false, nq = false;
  std::int64_t i = 0;
#ifdef SPECDEC_VERIFY_SIMD
  if constexpr (std::is_same_v<LP, contig_load> && std::is_same_v<LQ, contig_load>) {
    using namespace simd;
    vblock_sum vp, vq;
    i4 n1 = {}, n2 = {};
    f4 xv[8], yv[8];
    for (; i + 32 <= V; i += 32) {
      load_block(lp.d + i, xv);
      load_block(lq.d + i, yv);
      vp.add_block(xv);
      vq.add_block(yv);
      n1 |= negative_mask(xv);
      n2 |= negative_mask(yv);
    }
    vp.spill(sp);
    vq.spill(sq);
    np = any(n1);
    nq = any(n2);
    // The tail (< 32 elements) in scalar code, with the same lanes.
    for (int tail = 0; tail < 32 && i < V; ++tail, ++i) {
      const float x = lp(i), y = lq(i);
      sp.add(i, x);
      sq.add(i, y);
      np |= x < 0.0f;
      nq |= y < 0.0f;
    }
  } else
#endif
  {
    for (; i < V; ++i) {
      const float x = lp(i), y = lq(i);
      sp.add(i, x);
      sq.add(i, y);
      np |= x < 0.0f;
      nq |= y < 0.0f;
    }
  }
  mp = sp.finish();
  mq = sq.finish();
  okp = row_valid(mp, np);
  okq = row_valid(mq, nq);
}

//! First residual: validates p and q, R = max(p - q, 0) (one float
//! subtraction per entry), and the masses of p, q and R.
template <class LP, class LQ>
void first_residual_pass(LP lp, LQ lq, float* R, std::int64_t V, double& mp, double& mq, double& mr, bool& okp,
                         bool& okq) noexcept {
  block_sum8 sp, sq, sr;
  bool np = false, nq = false;
  std::int64_t i = 0;
#ifdef SPECDEC_VERIFY_SIMD
  if constexpr (std::is_same_v<LP, contig_load> && std::is_same_v<LQ, contig_load>) {
    using namespace simd;
    vblock_sum vp, vq, vr;
    i4 n1 = {}, n2 = {};
    f4 xv[8], yv[8], rv[8];
    for (; i + 32 <= V; i += 32) {
      load_block(lp.d + i, xv);
      load_block(lq.d + i, yv);
#pragma GCC unroll 8
      for (int k = 0; k < 8; ++k) {
        rv[k] = relu(xv[k] - yv[k]);
        store(R + i + 4 * k, rv[k]);
      }
      vp.add_block(xv);
      vq.add_block(yv);
      vr.add_block(rv);
      n1 |= negative_mask(xv);
      n2 |= negative_mask(yv);
    }
    vp.spill(sp);
    vq.spill(sq);
    vr.spill(sr);
    np = any(n1);
    nq = any(n2);
    // The tail (< 32 elements) in scalar code, with the same lanes.
    for (int tail = 0; tail < 32 && i < V; ++tail, ++i) {
      const float x = lp(i), y = lq(i);
      sp.add(i, x);
      sq.add(i, y);
      np |= x < 0.0f;
      nq |= y < 0.0f;
      const float d = x - y;
      const float r = d > 0.0f ? d : 0.0f;
      R[i] = r;
      sr.add(i, r);
    }
  } else
#endif
  {
    for (; i < V; ++i) {
      const float x = lp(i), y = lq(i);
      sp.add(i, x);
      sq.add(i, y);
      np |= x < 0.0f;
      nq |= y < 0.0f;
      const float d = x - y;
      const float r = d > 0.0f ? d : 0.0f;
      R[i] = r;
      sr.add(i, r);
    }
  }
  mp = sp.finish();
  mq = sq.finish();
  mr = sr.finish();
  okp = row_valid(mp, np);
  okq = row_valid(mq, nq);
}

//! Later residuals: R = max(R - s * q, 0) in float with s rounded to float
//! once (a product then a difference, each rounded; the CUDA kernel uses
//! the same non-contracted operations); returns the mass.
template <class LQ>
double update_residual_pass(LQ lq, float* R, double s, std::int64_t V) noexcept {
  block_sum8 sr;
  const auto sf = static_cast<float>(s);
  std::int64_t i = 0;
#ifdef SPECDEC_VERIFY_SIMD
  if constexpr (std::is_same_v<LQ, contig_load>) {
    using namespace simd;
    vblock_sum vr;
    const f4 sv = {sf, sf, sf, sf};
    f4 yv[8], rv[8];
    for (; i + 32 <= V; i += 32) {
      load_block(lq.d + i, yv);
      load_block(R + i, rv);
#pragma GCC unroll 8
      for (int k = 0; k < 8; ++k) {
        const f4 t = sv * yv[k];
        rv[k] = relu(rv[k] - t);
        store(R + i + 4 * k, rv[k]);
      }
      vr.add_block(rv);
    }
    vr.spill(sr);
    // The tail (< 32 elements) in scalar code, with the same lanes.
    for (int tail = 0; tail < 32 && i < V; ++tail, ++i) {
      const float t = sf * lq(i);
      const float d = R[i] - t;
      const float r = d > 0.0f ? d : 0.0f;
      R[i] = r;
      sr.add(i, r);
    }
  } else
#endif
  {
    for (; i < V; ++i) {
      const float t = sf * lq(i);
      const float d = R[i] - t;
      const float r = d > 0.0f ? d : 0.0f;
      R[i] = r;
      sr.add(i, r);
    }
  }
  return sr.finish();
}

//! Copies a row into R (used to exclude a few tokens before sampling).
template <class L>
void copy_pass(L ld, float* R, std::int64_t V) noexcept {
  for (std::int64_t i = 0; i < V; ++i) R[i] = ld(i);
}

//! Mass of a contiguous non-negative row with the same 8-lane order.
inline double sum_pass(const float* R, std::int64_t V) noexcept {
  double m = 0.0;
  (void)mass_pass(contig_load{R}, V, m);
  return m;
}

//! Last token with a positive entry, or -1.
template <class L>
token_id last_positive(L ld, std::int64_t V) noexcept {
  for (std::int64_t i = V - 1; i >= 0; --i)
    if (ld(i) > 0.0f) return static_cast<token_id>(i);
  return -1;
}

//! Inverse-CDF sample with cumulative sums formed block by block: the row
//! is cut into blocks of 16; a block's mass is 4 interleaved partial sums
//! combined as (b0 + b1) + (b2 + b3); the running total c advances by
//! whole blocks, and inside the block that crosses `target` the entries
//! are added one by one from c. Returns the first token i with
//! target < (c + prefix up to i) and a positive entry (strict <, so zero
//! entries are never returned). If rounding lets `target` pass the whole
//! row, the last positive token is returned; -1 only for an all-zero row.
template <class L>
token_id sample_pass(L ld, std::int64_t V, double target) noexcept {
  double c = 0.0;
  std::int64_t i = 0;
  for (; i + 16 <= V; i += 16) {
    double b[4] = {};
#ifdef SPECDEC_VERIFY_SIMD
    if constexpr (std::is_same_v<L, contig_load>) {
      using namespace simd;
      d2 b01 = {}, b23 = {};
      for (int k = 0; k < 16; k += 4) {
        const f4 x = load(ld.d + i + k);
        b01 += lo(x);
        b23 += hi(x);
      }
      b[0] = b01[0];
      b[1] = b01[1];
      b[2] = b23[0];
      b[3] = b23[1];
    } else
#endif
    {
      for (int l = 0; l < 16; ++l) b[l & 3] += static_cast<double>(ld(i + l));
    }
    const double bs = (b[0] + b[1]) + (b[2] + b[3]);
    if (target < c + bs) {
      double cc = c;
      for (int l = 0; l < 16; ++l) {
        const float x = ld(i + l);
        if (x > 0.0f) {
          cc += static_cast<double>(x);
          if (target < cc) return static_cast<token_id>(i + l);
        }
      }
    }
    c += bs;
  }
  for (; i < V; ++i) {
    const float x = ld(i);
    if (x > 0.0f) {
      c += static_cast<double>(x);
      if (target < c) return static_cast<token_id>(i);
    }
  }
  return last_positive(ld, V);
}

//! Argmax (lowest id on ties) of a score row that must hold no NaN (+-inf
//! allowed, so logits work too). False on a NaN entry. 8 lanes keep their
//! own best (strict >, so each lane keeps its lowest id) and are merged
//! with the tie rule.
template <class L>
bool argmax_pass(L ld, std::int64_t V, token_id& arg) noexcept {
  float bv[8];
  std::int32_t bi[8];
  std::int32_t nan[8] = {};
  for (int l = 0; l < 8; ++l) {
    bv[l] = -INFINITY;
    bi[l] = -1;
  }
  std::int64_t i = 0;
#if defined(SPECDEC_VERIFY_SIMD) && defined(__SSE2__)
  if constexpr (std::is_same_v<L, contig_load>) {
    // Block maxima with maxps; a block is rescanned in scalar code only when
    // it beats the running best (rare), so ties keep the lowest id.
    using namespace simd;
    float best = -INFINITY;
    std::int32_t bidx = -1;
    i4 n = {};
    f4 xv[8];
    for (; i + 32 <= V; i += 32) {
      load_block(ld.d + i, xv);
      __m128 m4[4];
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) {
        const __m128 a = reinterpret_cast<__m128>(xv[2 * k]), b = reinterpret_cast<__m128>(xv[2 * k + 1]);
        n |= reinterpret_cast<i4>(_mm_cmpunord_ps(a, b));  // a NaN in either
        m4[k] = _mm_max_ps(a, b);
      }
      const __m128 m = _mm_max_ps(_mm_max_ps(m4[0], m4[1]), _mm_max_ps(m4[2], m4[3]));  // a tree: no long chain
      const f4 bv4 = {best, best, best, best};
      if (any(reinterpret_cast<f4>(m) > bv4))
        for (int k = 0; k < 32; ++k) {
          const float x = ld.d[i + k];
          if (x > best) {
            best = x;
            bidx = static_cast<std::int32_t>(i + k);
          }
        }
    }
    for (int l = 0; l < 8; ++l) nan[l] = n[l & 3];
    bv[0] = best;
    bi[0] = bidx;
  }
#endif
  auto step = [&](std::int64_t k, int l) {
    const float x = ld(k);
    nan[l] |= x != x;
    if (x > bv[l]) {
      bv[l] = x;
      bi[l] = static_cast<std::int32_t>(k);
    }
  };
  for (; i + 8 <= V; i += 8)
    for (int l = 0; l < 8; ++l) step(i + l, l);
  for (int l = 0; l < 8 && i < V; ++i, ++l) step(i, l);
  float best = 0.0f;
  std::int32_t a = -1;
  std::int32_t any_nan = 0;
  for (int l = 0; l < 8; ++l) {
    any_nan |= nan[l];
    if (bi[l] < 0) continue;
    if (a < 0 || bv[l] > best || (bv[l] == best && bi[l] < a)) {
      best = bv[l];
      a = bi[l];
    }
  }
  arg = a < 0 ? 0 : a;  // an all -inf row: token 0, as argmax_row
  return any_nan == 0;
}

//! Mass and sum of p log p (0 log 0 = 0) of a probability row.
template <class L>
bool entropy_pass(L ld, std::int64_t V, double& mass, double& plogp) noexcept {
  double m = 0.0, h = 0.0;
  bool ok = true;
  for (std::int64_t i = 0; i < V; ++i) {
    const float x = ld(i);
    ok &= prob_ok(x);
    if (x > 0.0f) {
      const double d = static_cast<double>(x);
      m += d;
      h += d * std::log(d);
    }
  }
  mass = m;
  plogp = h;
  return ok;
}

//! One entry of a scaled residual max(a * p - b * q, 0), rounded exactly as
//! scaled_residual_pass rounds it (two products, then a difference).
inline float scaled_residual(float p, float q, float a, float b) noexcept {
  const float d = a * p - b * q;
  return d > 0.0f ? d : 0.0f;
}

//! R = max(a * p - b * q, 0) element-wise in float (a, b >= 0 given in
//! float); returns the mass of R. Reads p and q once; used by traversal
//! verification, whose residuals are always of this form.
template <class LP, class LQ>
double scaled_residual_pass(LP lp, LQ lq, float a, float b, float* R, std::int64_t V) noexcept {
  block_sum8 sr;
  std::int64_t i = 0;
#ifdef SPECDEC_VERIFY_SIMD
  if constexpr (std::is_same_v<LP, contig_load> && std::is_same_v<LQ, contig_load>) {
    using namespace simd;
    vblock_sum vr;
    const f4 av = {a, a, a, a}, bv = {b, b, b, b};
    f4 xv[8], yv[8], rv[8];
    for (; i + 32 <= V; i += 32) {
      load_block(lp.d + i, xv);
      load_block(lq.d + i, yv);
#pragma GCC unroll 8
      for (int k = 0; k < 8; ++k) {
        const f4 s = av * xv[k];
        const f4 t = bv * yv[k];
        rv[k] = relu(s - t);
        store(R + i + 4 * k, rv[k]);
      }
      vr.add_block(rv);
    }
    vr.spill(sr);
    // The tail (< 32 elements) in scalar code, with the same lanes.
    for (int tail = 0; tail < 32 && i < V; ++tail, ++i) {
      const float r = scaled_residual(lp(i), lq(i), a, b);
      R[i] = r;
      sr.add(i, r);
    }
  } else
#endif
  {
    for (; i < V; ++i) {
      const float r = scaled_residual(lp(i), lq(i), a, b);
      R[i] = r;
      sr.add(i, r);
    }
  }
  return sr.finish();
}

//! Validates p_u and q_u in one lockstep read: finite, >= 0, and each mass
//! within `tol` of 1 (statuses name the node u).
inline status check_pq(prow pu, prow qu, std::int64_t V, std::int64_t u, float tol) noexcept {
  double mp = 0.0, mq = 0.0;
  bool okp = true, okq = true;
  with_load2(pu, qu, [&](auto lp, auto lq) { mass2_pass(lp, lq, V, mp, mq, okp, okq); });
  if (!okp) return classify_row(pu, V, u, false);
  if (!okq) return classify_row(qu, V, u, true);
  SPECDEC_TRY(check_mass(mp, tol, u, false));
  return check_mass(mq, tol, u, true);
}

//! Validates p_u (probabilities) and returns its mass (checked against the
//! tolerance when `check_norm`).
inline status p_mass(prow pu, std::int64_t V, std::int64_t u, float tol, bool check_norm, double& mass) noexcept {
  const bool ok = with_load(pu, [&](auto ld) { return mass_pass(ld, V, mass); });
  if (!ok) return classify_row(pu, V, u, false);
  return check_mass(mass, check_norm ? tol : -1.0f, u, false);
}

//! Validates p_u and samples it with the uniform `un` in [0, 1).
inline status sample_checked(prow pu, std::int64_t V, std::int64_t u, float un, float tol, bool check_norm,
                             token_id& out) noexcept {
  double mass = 0.0;
  SPECDEC_TRY(p_mass(pu, V, u, tol, check_norm, mass));
  const double target = static_cast<double>(un) * mass;
  out = with_load(pu, [&](auto ld) { return sample_pass(ld, V, target); });
  return status::success();
}

}  // namespace specdec::detail
