//! \file
//! The sampling transform of a logits row, applied where the row is read.
//! The verification kernels and their host twin take logits (fp32, bf16
//! or fp16) and sampling_params instead of probability rows: a pre-pass
//! finds each row's constants (max, filter cut, normaliser) and every later
//! read of entry i turns the logit into its probability on the fly, so no
//! probability row is ever written.
//!
//! The transform of logits x under (T, top_k, top_p, min_p), T > 0:
//! - weights w_i = exp((x_i - max) / T) (0 for x_i = -inf), with the exp
//!   below (every product and sum rounded on its own, so host and device
//!   compute the same float);
//! - candidates: w_i > 0 and w_i >= min_p;
//! - rank: weight descending, token id ascending (the specdec tie order),
//!   coded as the 64-bit key (bits(w) << 32) | (2^32 - 1 - i);
//! - top-k: keep the k candidates of highest rank;
//! - top-p: keep the shortest rank prefix of those whose mass reaches
//!   top_p of theirs, masses counted exactly on a 2^-40 grid (floor(w 2^40)
//!   as integers: the same sum in every order, on every device; weights
//!   under 2^-40 of the largest add nothing to the nucleus);
//! - p_i = w_i / Z for kept tokens (0 otherwise), Z the kept weights'
//!   sum in the fixed order of sample/order.hpp, p_i = float(double(w_i) / Z)
//!   rounded from 1 / Z in double.
//! T = 0 is greedy: one-hot at the argmax of the logits (lowest id on
//! ties). The equality holds for IEEE arithmetic: compiling this header
//! with -ffast-math (host) or --use_fast_math / -ftz=true (device) voids
//! it. The cuts are found by a radix select over the keys (8 digits of
//! 8 bits, a histogram per digit), the same steps on host and device; the
//! host twin (sample/logits_rows.hpp) and the CUDA pre-pass (cuda/verify.cuh)
//! give identical constants, hence identical tokens.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "specdec/core/config.hpp"
#include "specdec/core/status.hpp"
#include "specdec/sample/sampling_params.hpp"

namespace specdec {

namespace detail {

//! a * b rounded once, never fused into a following add (host: the
//! product is forced through a register; device: __fmul_rn).
SPECDEC_HD float mul_rn(float a, float b) noexcept {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  float p = a * b;
#if (defined(__GNUC__) || defined(__clang__)) && (defined(__x86_64__) || defined(__i386__))
  __asm__("" : "+x"(p));
#elif defined(__GNUC__) || defined(__clang__)
  __asm__("" : "+r"(p));
#endif
  return p;
#endif
}

//! a + b rounded once (device: __fadd_rn, never contracted).
SPECDEC_HD float add_rn(float a, float b) noexcept {
#ifdef __CUDA_ARCH__
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

SPECDEC_HD std::uint32_t bits_of(float x) noexcept {
#ifdef __CUDA_ARCH__
  return __float_as_uint(x);
#else
  std::uint32_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
#endif
}

SPECDEC_HD float float_of(std::uint32_t b) noexcept {
#ifdef __CUDA_ARCH__
  return __uint_as_float(b);
#else
  float x;
  std::memcpy(&x, &b, sizeof x);
  return x;
#endif
}

//! exp(z) for z <= 0, the same float on host and device: Cody-Waite
//! reduction and the Cephes expf polynomial (a few ulp from exp), every
//! step rounded on its own; 0 below -87.33 (and for -inf); exp(0) = 1.
SPECDEC_HD float weight_exp_rn(float z) noexcept {
  if (!(z >= -87.33f)) return 0.0f;
  const float magic = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float t = add_rn(mul_rn(z, 1.44269504088896340736f), magic);
  const float n = t - magic;
  float r = z - mul_rn(n, 0.693359375f);
  r = r - mul_rn(n, -2.12194440e-4f);
  float p = 1.9875691500E-4f;
  p = add_rn(mul_rn(p, r), 1.3981999507E-3f);
  p = add_rn(mul_rn(p, r), 8.3334519073E-3f);
  p = add_rn(mul_rn(p, r), 4.1665795894E-2f);
  p = add_rn(mul_rn(p, r), 1.6666665459E-1f);
  p = add_rn(mul_rn(p, r), 5.0000001201E-1f);
  p = add_rn(add_rn(mul_rn(mul_rn(p, r), r), r), 1.0f);
  // 2^n from the low bits of t (n in [-126, 0]).
  const std::uint32_t scale = (bits_of(t) + 127u) << 23;
  return mul_rn(p, float_of(scale));
}

//! The rank key of weight w at token i: larger keys rank first.
SPECDEC_HD constexpr std::uint64_t rank_key(std::uint32_t w_bits, std::int64_t i) noexcept {
  return (static_cast<std::uint64_t>(w_bits) << 32) | (0xFFFFFFFFull - static_cast<std::uint64_t>(i));
}

//! A weight's mass on the top-p grid: floor(w * 2^40), exact.
SPECDEC_HD constexpr std::uint64_t grid_mass(float w) noexcept {
  return static_cast<std::uint64_t>(static_cast<double>(w) * 1099511627776.0);
}

//! The top-p goal on the grid: ceil(top_p * Q), at least 1 (both roundings
//! to nearest, the same on host and device).
SPECDEC_HD std::uint64_t top_p_goal(float top_p, std::uint64_t q) noexcept {
  const double g = static_cast<double>(top_p) * static_cast<double>(q);
  auto G = static_cast<std::uint64_t>(g);
  if (static_cast<double>(G) < g) ++G;
  return G == 0 ? 1 : G;
}

//! One radix-select step: the digit (255 down to 0) whose histogram bin
//! holds the element where the weight counted from the top reaches `need`;
//! `need` becomes the weight still to count inside that bin. -1 when the
//! histogram holds less than `need`.
SPECDEC_HD int radix_pick(const std::uint64_t* hist, std::uint64_t& need) noexcept {
  for (int b = 255; b >= 0; --b) {
    if (hist[b] >= need) return b;
    need -= hist[b];
  }
  return -1;
}

//! 1 / x rounded to nearest (device: __frcp_rn, whatever -prec-div says).
SPECDEC_HD float recip_rn(float x) noexcept {
#ifdef __CUDA_ARCH__
  return __frcp_rn(x);
#else
  return 1.0f / x;
#endif
}

//! Bits above digit d (8 bits each, d = 7 the top) of a key.
SPECDEC_HD constexpr std::uint64_t radix_high_mask(int d) noexcept { return d == 7 ? 0 : ~0ull << (8 * d + 8); }

}  // namespace detail

//! Largest row a transform takes: the top-p grid masses of a row (at most
//! 2^40 each) must sum within 64 bits. The CUDA pre-pass has a smaller cap
//! (kernels::verify_logits_max_vocab).
inline constexpr std::int64_t logits_rows_max_vocab = std::int64_t{1} << 23;

//! Whether `sp` can transform a row: validate_sampling_params passes and
//! 1 / temperature is finite (else the request gets invalid_argument,
//! on host and device alike).
SPECDEC_HD bool sampling_transformable(const sampling_params& sp) noexcept {
  return validate_sampling_params(sp).ok() && (sp.is_greedy() || detail::recip_rn(sp.temperature) < INFINITY);
}

//! The constants of one row's sampling transform (see the file comment),
//! found by a pre-pass; operator() maps a logit to its probability.
struct row_transform {
  float m = 0.0f;           //!< the row's largest logit
  float inv_t = 1.0f;       //!< 1 / temperature
  float min_p = 0.0f;       //!< the weight floor
  std::int32_t arg = -1;    //!< greedy: the one-hot token; -1 none
  std::uint64_t cut = 0;    //!< tokens whose rank key is below this are dropped (0: no top-k/top-p cut)
  double inv_z = 1.0;       //!< 1 / the kept weights' sum
  std::int32_t greedy = 0;  //!< 1: temperature 0, one-hot at `arg`
  //! status_code of the row: ok, non_finite (a NaN or +inf logit),
  //! zero_mass (every logit -inf) or invalid_argument (bad
  //! sampling_params). A row that is not ok reads NaN everywhere, so every
  //! mode's walk stops on it (non_finite) when it visits it.
  std::int32_t code = 0;

  //! The unnormalized weight of logit x (not greedy).
  SPECDEC_HD float weight(float x) const noexcept {
    return x == -INFINITY ? 0.0f : detail::weight_exp_rn(detail::mul_rn(x - m, inv_t));
  }
  //! Whether weight w at token i survives min-p and the cut.
  SPECDEC_HD bool keeps(float w, std::int64_t i) const noexcept {
    return w > 0.0f && w >= min_p && (cut == 0 || detail::rank_key(detail::bits_of(w), i) >= cut);
  }
  //! The kept weight of logit x at token i (0 when dropped).
  SPECDEC_HD float kept_weight(float x, std::int64_t i) const noexcept {
    const float w = weight(x);
    return keeps(w, i) ? w : 0.0f;
  }
  //! The probability of token i whose logit is x.
  SPECDEC_HD float operator()(float x, std::int64_t i) const noexcept {
    if (code != 0) return NAN;
    if (greedy != 0) return i == arg ? 1.0f : 0.0f;
    const float w = kept_weight(x, i);
    return w > 0.0f ? static_cast<float>(static_cast<double>(w) * inv_z) : 0.0f;
  }
};

namespace detail {

//! The transform's settings before the scan: code invalid_argument when
//! `sp` fails validate_sampling_params or 1 / T overflows.
SPECDEC_HD row_transform start_transform(const sampling_params& sp) noexcept {
  row_transform t{};
  if (!sampling_transformable(sp)) {
    t.code = static_cast<std::int32_t>(status_code::invalid_argument);
    return t;
  }
  t.greedy = sp.is_greedy() ? 1 : 0;
  t.inv_t = t.greedy != 0 ? 1.0f : recip_rn(sp.temperature);
  t.min_p = sp.min_p;
  return t;
}

}  // namespace detail

}  // namespace specdec
