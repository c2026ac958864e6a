//! \file
//! Short vectors for host kernels (the SSM scans, the softmax weights of
//! logits_to_probs): GNU vector extensions (SPECDEC_VEC_BYTES: 32 bytes
//! with AVX, else 16: SSE2 on x86-64, NEON on AArch64) under GCC and Clang, plain
//! scalars (one lane) elsewhere, under nvcc or with SPECDEC_NO_SIMD, so
//! every kernel is written once. The vector code does not depend on the
//! optimisation level or on the auto-vectoriser (GCC's -O2 "very cheap"
//! model neither vectorises float reductions nor loops whose stores may
//! alias their loads). Also a branch-free exp (Cephes polynomials, a few
//! ulp) and SiLU on these vectors, and a finiteness test of a row.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>

#if (defined(__GNUC__) || defined(__clang__)) && !defined(__CUDACC__) && !defined(SPECDEC_NO_SIMD)
#define SPECDEC_HOST_VEC 1
#else
#define SPECDEC_HOST_VEC 0
#endif

// Whether the target has a fused multiply-add instruction (vec_ops::fma
// then rounds once, everywhere: compilers may contract a * b + c there).
#if (defined(__GNUC__) || defined(__clang__)) && !defined(__CUDACC__) && \
    (defined(__FMA__) || defined(__FP_FAST_FMA) || defined(__FP_FAST_FMAF) || defined(__ARM_FEATURE_FMA))
#define SPECDEC_HOST_FMA 1
#else
#define SPECDEC_HOST_FMA 0
#endif
#if SPECDEC_HOST_FMA && SPECDEC_HOST_VEC && defined(__FMA__)
#include <immintrin.h>
#define SPECDEC_HOST_X86_FMA 1
#else
#define SPECDEC_HOST_X86_FMA 0
#endif

//! Bytes per host vector: 32 where the target has AVX (also with AVX-512:
//! on Zen 4 the SSM scans ran slower with 64-byte vectors than with 32,
//! benchmarks/results/ssm-vectors_2026-11-27.md), else 16. May be set to
//! 16, 32 or 64 before the first specdec include, the same in every
//! translation unit of a program.
#ifndef SPECDEC_VEC_BYTES
#if defined(__AVX__)
#define SPECDEC_VEC_BYTES 32
#else
#define SPECDEC_VEC_BYTES 16
#endif
#endif
static_assert(SPECDEC_VEC_BYTES == 16 || SPECDEC_VEC_BYTES == 32 || SPECDEC_VEC_BYTES == 64,
              "SPECDEC_VEC_BYTES must be 16, 32 or 64");

//! Vector registers of the target (register tiles size themselves by it):
//! 32 with AVX-512 (VL: also for 16- and 32-byte vectors) and on AArch64,
//! else 16. It changes tilings only, never results; like SPECDEC_VEC_BYTES
//! it may be defined first, the same in every translation unit.
#ifndef SPECDEC_HOST_VEC_REGS
#if defined(__AVX512VL__) || defined(__aarch64__)
#define SPECDEC_HOST_VEC_REGS 32
#else
#define SPECDEC_HOST_VEC_REGS 16
#endif
#endif

#if defined(__GNUC__) || defined(__clang__)
//! Fully unrolls the next short fixed-count loop (register tiles; GCC's -O2
//! keeps small arrays of vectors in memory otherwise).
#define SPECDEC_VEC_UNROLL _Pragma("GCC unroll 8")
//! Inlines a small host-kernel driver into its caller, so that the lambdas
//! it calls see the caller's locals, not a closure behind a pointer.
#define SPECDEC_HOST_INLINE [[gnu::always_inline]] inline
#else
//! Other compilers: no hint.
#define SPECDEC_VEC_UNROLL
//! Other compilers: a plain inline function.
#define SPECDEC_HOST_INLINE inline
#endif

namespace specdec::detail {

//! Bit layout of a scalar type.
template <class T>
struct float_bits;
template <>
struct float_bits<float> {
  using uint = std::uint32_t;
  static constexpr int mantissa = 23;
  static constexpr uint bias = 127;
};
template <>
struct float_bits<double> {
  using uint = std::uint64_t;
  static constexpr int mantissa = 52;
  static constexpr uint bias = 1023;
};

//! The vector types of T: `vec` (`lanes` values of T) and `uvec` (as
//! unsigned integers). Wide = false: plain scalars (one lane).
template <class T, bool Wide>
struct vec_types {
  using uint = typename float_bits<T>::uint;
  static constexpr int lanes = 1;
  using vec = T;
  using uvec = uint;
};
#if SPECDEC_HOST_VEC
template <class T>
struct vec_types<T, true> {
  using uint = typename float_bits<T>::uint;
  static constexpr int lanes = static_cast<int>(SPECDEC_VEC_BYTES / sizeof(T));
  typedef T vec __attribute__((vector_size(SPECDEC_VEC_BYTES)));
  typedef uint uvec __attribute__((vector_size(SPECDEC_VEC_BYTES)));
};
#endif

//! Operations on vec_types<T, Wide>; vec_ops<T, false> runs the same
//! code on one scalar (loop tails), so tails and vectors round alike.
template <class T, bool Wide = SPECDEC_HOST_VEC != 0>
struct vec_ops : vec_types<T, Wide> {
  using base = vec_types<T, Wide>;
  using base::lanes;
  using typename base::uint;
  using typename base::uvec;
  using typename base::vec;

  static vec load(const T* p) noexcept {
    vec v;
    std::memcpy(&v, p, sizeof v);
    return v;
  }
  static void store(T* p, vec v) noexcept { std::memcpy(p, &v, sizeof v); }
  // x - 0 is x for every x (-0 included), so this folds to one broadcast;
  // 0 + x does not fold (0 + -0 is +0) and cost an add before every
  // broadcast (the dual scan's h0 GEMM ran at 64 instead of 98 GFLOP/s).
  static vec splat(T x) noexcept { return x - vec{}; }
  //! a * b + c, rounded once where the target has fused multiply-add
  //! (SPECDEC_HOST_FMA: x86 FMA, AArch64, any target whose compiler says
  //! fma is fast), else twice (no contraction possible there). Explicit so
  //! that the compiler's contraction choices (which product of `a * b + c *
  //! d` it fuses, and whether it fuses at all) cannot differ between two
  //! kernels that must give the same bits, nor lengthen a dependency chain
  //! (a recurrence h = d h + t fuses d h, not t).
  static vec fma(vec a, vec b, vec c) noexcept {
#if SPECDEC_HOST_FMA
    constexpr bool f = sizeof(T) == 4;
    if constexpr (lanes == 1) {
      if constexpr (f)
        return __builtin_fmaf(a, b, c);
      else
        return __builtin_fma(a, b, c);
    } else {
#if SPECDEC_HOST_X86_FMA
      if constexpr (sizeof(vec) == 16) {
        if constexpr (f)
          return std::bit_cast<vec>(
              _mm_fmadd_ps(std::bit_cast<__m128>(a), std::bit_cast<__m128>(b), std::bit_cast<__m128>(c)));
        else
          return std::bit_cast<vec>(
              _mm_fmadd_pd(std::bit_cast<__m128d>(a), std::bit_cast<__m128d>(b), std::bit_cast<__m128d>(c)));
      } else if constexpr (sizeof(vec) == 32) {
        if constexpr (f)
          return std::bit_cast<vec>(
              _mm256_fmadd_ps(std::bit_cast<__m256>(a), std::bit_cast<__m256>(b), std::bit_cast<__m256>(c)));
        else
          return std::bit_cast<vec>(
              _mm256_fmadd_pd(std::bit_cast<__m256d>(a), std::bit_cast<__m256d>(b), std::bit_cast<__m256d>(c)));
#if defined(__AVX512F__)
      } else if constexpr (sizeof(vec) == 64) {
        if constexpr (f)
          return std::bit_cast<vec>(
              _mm512_fmadd_ps(std::bit_cast<__m512>(a), std::bit_cast<__m512>(b), std::bit_cast<__m512>(c)));
        else
          return std::bit_cast<vec>(
              _mm512_fmadd_pd(std::bit_cast<__m512d>(a), std::bit_cast<__m512d>(b), std::bit_cast<__m512d>(c)));
#endif
      } else
#endif
      {  // other widths and targets: lane by lane
        vec r{};
        for (int l = 0; l < lanes; ++l) r[l] = vec_ops<T, false>::fma(a[l], b[l], c[l]);
        return r;
      }
    }
#else
    return a * b + c;
#endif
  }
  //! Sum of the lanes, lane 0 first (a fixed order).
  static T hsum(vec v) noexcept {
    if constexpr (lanes == 1) {
      return v;
    } else {
      T s = v[0];
      for (int l = 1; l < lanes; ++l) s += v[l];
      return s;
    }
  }
  //! All-ones lanes where x < y (x - y has its sign bit set; no compare,
  //! which GCC would turn into control flow for scalars).
  static uvec less(vec x, vec y) noexcept {
    constexpr int top = static_cast<int>(8 * sizeof(T)) - 1;
    return uvec{} - (std::bit_cast<uvec>(x - y) >> top);
  }
  //! Lanes of a where m is set, else b.
  static vec select(uvec m, vec a, vec b) noexcept {
    return std::bit_cast<vec>((std::bit_cast<uvec>(a) & m) | (std::bit_cast<uvec>(b) & ~m));
  }

  //! exp(x): Cody-Waite reduction, x = n ln2 + r with |r| <= ln2 / 2, a
  //! polynomial for exp(r) (Cephes expf / degree-13 Taylor for double) and
  //! 2^n built in the exponent bits. Relative error a few ulp; 0 below the
  //! smallest normal result; above 88.3 (float) / 709 (double) it returns
  //! exp of that bound (finite).
  static vec exp(vec x) noexcept {
    constexpr bool f = sizeof(T) == 4;
    const vec lo = splat(f ? T(-87.33) : T(-708.39)), hi = splat(f ? T(88.3) : T(709.0));
    const uvec under = less(x, lo);
    vec xc = select(under, lo, x);
    xc = select(less(hi, xc), hi, xc);
    // Round to nearest with the 1.5 * 2^mantissa trick: t's low bits hold n.
    const vec magic = splat(f ? T(12582912.0) : T(6755399441055744.0));
    const vec t = xc * splat(T(1.44269504088896340736)) + magic;
    const vec n = t - magic;
    vec r = xc - n * splat(f ? T(0.693359375) : T(6.93145751953125E-1));
    r = r - n * splat(f ? T(-2.12194440e-4) : T(1.42860682030941723212E-6));
    vec p;
    if constexpr (f) {
      p = splat(T(1.9875691500E-4));
      p = p * r + splat(T(1.3981999507E-3));
      p = p * r + splat(T(8.3334519073E-3));
      p = p * r + splat(T(4.1665795894E-2));
      p = p * r + splat(T(1.6666665459E-1));
      p = p * r + splat(T(5.0000001201E-1));
      p = p * r * r + r + splat(T(1));
    } else {
      constexpr double inv_fact[] = {1.0 / 6227020800.0, 1.0 / 479001600.0, 1.0 / 39916800.0, 1.0 / 3628800.0,
                                     1.0 / 362880.0,     1.0 / 40320.0,     1.0 / 5040.0,     1.0 / 720.0,
                                     1.0 / 120.0,        1.0 / 24.0,        1.0 / 6.0,        0.5};
      p = splat(T(inv_fact[0]));
      for (int k = 1; k < 12; ++k) p = p * r + splat(T(inv_fact[k]));
      p = p * r * r + r + splat(T(1));
    }
    constexpr int mant = float_bits<T>::mantissa;
    const uvec scale = (std::bit_cast<uvec>(t) + float_bits<T>::bias) << mant;
    const vec res = p * std::bit_cast<vec>(scale);
    return std::bit_cast<vec>(std::bit_cast<uvec>(res) & ~under);
  }
  //! softplus(v) = max(v, 0) + log1p(exp(-|v|)) (no overflow for huge v).
  //! log1p(e), e in (0, 1], as k ln2 + 2 atanh(w / (2 + w)) with w = e
  //! (k = 0) or (e - 1) / 2 (k = 1, e > sqrt(2) - 1), so |atanh's argument|
  //! <= 0.172 and an odd series (to s^13 for float, s^23 for double) is exact
  //! to about an ulp, also for tiny e.
  static vec softplus(vec v) noexcept {
    const vec zero{};
    const uvec neg = less(v, zero);
    const vec pos = select(neg, zero, v);
    const vec e = exp(select(neg, v, zero - v));  // exp(-|v|)
    const uvec big = less(splat(T(0.41421356237309504880)), e);
    const vec w = select(big, (e - splat(T(1))) * splat(T(0.5)), e);
    const vec k = select(big, splat(T(0.69314718055994530942)), zero);
    const vec sv = w / (splat(T(2)) + w);
    const vec s2 = sv * sv;
    constexpr int terms = sizeof(T) == 4 ? 6 : 11;  // 1/3, 1/5, ... 1/(2 terms + 1)
    vec q = splat(T(1) / T(2 * terms + 1));
    for (int t = terms - 1; t >= 1; --t) q = q * s2 + splat(T(1) / T(2 * t + 1));
    return pos + (k + splat(T(2)) * (sv + sv * s2 * q));
  }
  //! silu(v) = v / (1 + exp(-v)); finite for every finite v.
  static vec silu(vec v) noexcept { return v / (splat(T(1)) + exp(vec{} - v)); }
};

//! True when every entry of the contiguous row p[0, n) is finite: ORs
//! "exponent all ones" over the row as integers (no branch per entry,
//! unaffected by -ffinite-math-only).
template <class T>
bool row_finite(const T* p, std::int64_t n) noexcept {
  using S = vec_ops<T>;
  using U = typename S::uint;
  constexpr int mant = float_bits<T>::mantissa;
  constexpr U expo = ((U(1) << (8 * sizeof(T) - 1)) - 1) & ~((U(1) << mant) - 1);  // exponent field
  constexpr U one = U(1) << mant;
  constexpr int top = static_cast<int>(8 * sizeof(T)) - 1;
  // (bits & expo) + one carries into the sign bit exactly when the exponent is all ones.
  typename S::uvec bad{};
  std::int64_t i = 0;
  for (; i + 2 * S::lanes <= n; i += 2 * S::lanes) {
    const typename S::uvec a = std::bit_cast<typename S::uvec>(S::load(p + i));
    const typename S::uvec b = std::bit_cast<typename S::uvec>(S::load(p + i + S::lanes));
    bad |= (a & expo) + one;
    bad |= (b & expo) + one;
  }
  U tail = 0;
  for (; i < n; ++i) tail |= (std::bit_cast<U>(p[i]) & expo) + one;
  U all = tail;
  if constexpr (S::lanes == 1) {
    all |= bad;
  } else {
    for (int l = 0; l < S::lanes; ++l) all |= bad[l];
  }
  return (all >> top) == 0;
}

//! dst[0, n) = src[0, n) through vector registers, ascending (so also a
//! move to a lower address). Not memcpy: glibc 2.36's on Zen 3 ran 20x
//! slower when dst - src is 8 or 16 bytes modulo 4096 (7.2-7.6 us against
//! 0.4 for 21 KB), which tree_conv1d_commit_state's column moves hit (a
//! 5376-channel commit of three columns: 21 us instead of 1.3).
template <class T>
void copy_vectors(const T* src, std::int64_t n, T* dst) noexcept {
  using S = vec_ops<T>;
  std::int64_t i = 0;
  for (; i + 4 * S::lanes <= n; i += 4 * S::lanes) {
    const auto a = S::load(src + i), b = S::load(src + i + S::lanes);
    const auto c = S::load(src + i + 2 * S::lanes), d = S::load(src + i + 3 * S::lanes);
    S::store(dst + i, a);
    S::store(dst + i + S::lanes, b);
    S::store(dst + i + 2 * S::lanes, c);
    S::store(dst + i + 3 * S::lanes, d);
#if defined(__GNUC__)
    asm volatile("" ::: "memory");  // keeps GCC and Clang from turning the loop back into memcpy
#endif
  }
  for (; i + S::lanes <= n; i += S::lanes) S::store(dst + i, S::load(src + i));
  for (; i < n; ++i) dst[i] = src[i];
}

}  // namespace specdec::detail
