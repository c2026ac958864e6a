//! \file
//! Host passes over probability rows in the fixed order of
//! sample/order.hpp: tile sums with vector instructions (bit-identical to
//! detail::tile_tree_sum), argmax, and the sample from known tile sums.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "specdec/core/config.hpp"
#include "specdec/sample/order.hpp"
#include "specdec/tree/token_tree.hpp"

// System headers at global scope, before any namespace is opened.
#if (defined(__GNUC__) || defined(__clang__)) && defined(__SSE2__) && !defined(SPECDEC_NO_SIMD)
#define SPECDEC_SAMPLE_SIMD 1
#include <emmintrin.h>
#endif

namespace specdec::detail {

#ifdef SPECDEC_SAMPLE_SIMD
namespace simd {
typedef float f4 __attribute__((vector_size(16)));
typedef std::int32_t i4 __attribute__((vector_size(16)));
inline f4 load(const float* p) noexcept {
  f4 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store(float* p, f4 v) noexcept { std::memcpy(p, &v, sizeof v); }
inline bool any(i4 m) noexcept { return (m[0] | m[1] | m[2] | m[3]) != 0; }
//! max(x, 0) with NaN -> 0 (the scalar `x > 0 ? x : 0`).
inline f4 relu(f4 x) noexcept {
  const f4 zero = {0.0f, 0.0f, 0.0f, 0.0f};
  return reinterpret_cast<f4>(reinterpret_cast<i4>(x) & (x > zero));
}
#ifdef __AVX__
// 8 floats, widened to two halves of 4 doubles.
typedef float fv __attribute__((vector_size(32)));
typedef std::int32_t iv __attribute__((vector_size(32)));
typedef double dv __attribute__((vector_size(32)));
inline constexpr int fw = 8, dw = 4;
inline void widen(fv x, dv* out) noexcept {
  out[0] = __builtin_convertvector(__builtin_shufflevector(x, x, 0, 1, 2, 3), dv);
  out[1] = __builtin_convertvector(__builtin_shufflevector(x, x, 4, 5, 6, 7), dv);
}
#else
typedef f4 fv;
typedef i4 iv;
typedef double dv __attribute__((vector_size(16)));
inline constexpr int fw = 4, dw = 2;
inline void widen(fv v, dv* out) noexcept {
  const __m128 x = reinterpret_cast<__m128>(v);
  out[0] = reinterpret_cast<dv>(_mm_cvtps_pd(x));
  out[1] = reinterpret_cast<dv>(_mm_cvtps_pd(_mm_movehl_ps(x, x)));
}
#endif
inline fv loadv(const float* p) noexcept {
  fv v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void storev(float* p, fv v) noexcept { std::memcpy(p, &v, sizeof v); }
//! max(x, 0) with NaN -> 0 (the scalar `x > 0 ? x : 0`).
inline fv reluv(fv x) noexcept {
  const fv zero = {};
  return reinterpret_cast<fv>(reinterpret_cast<iv>(x) & (x > zero));
}
//! A vector the compiler must materialise (no fused multiply-add across
//! it): products rounded on their own, as detail::mul_rn does for scalars.
inline fv opaque(fv x) noexcept {
  __asm__("" : "+x"(x));
  return x;
}
//! detail::weight_exp_rn on every lane, bit for bit (the same steps, each
//! product rounded on its own; lanes below -87.33 give 0).
inline fv weight_exp_rn(fv z) noexcept {
  const fv lo = fv{} - 87.33f, magic = fv{} + 12582912.0f;
  const iv under = z < lo;
  const fv zc = reinterpret_cast<fv>((reinterpret_cast<iv>(z) & ~under) | (reinterpret_cast<iv>(lo) & under));
  const fv t = opaque(zc * 1.44269504088896340736f) + magic;
  const fv n = t - magic;
  fv r = zc - opaque(n * 0.693359375f);
  r = r - opaque(n * -2.12194440e-4f);
  fv q = fv{} + 1.9875691500E-4f;
  q = opaque(q * r) + 1.3981999507E-3f;
  q = opaque(q * r) + 8.3334519073E-3f;
  q = opaque(q * r) + 4.1665795894E-2f;
  q = opaque(q * r) + 1.6666665459E-1f;
  q = opaque(q * r) + 5.0000001201E-1f;
  q = (opaque(opaque(q * r) * r) + r) + 1.0f;
  const iv scale = (reinterpret_cast<iv>(t) + 127) << 23;
  const fv e = opaque(q * reinterpret_cast<fv>(scale));
  return reinterpret_cast<fv>(reinterpret_cast<iv>(e) & ~under);
}
}  // namespace simd
#endif

//! Sum of a full contiguous tile (sum_tile floats) in the halving-tree
//! order; `signs` gets the OR of the entries' bit patterns (its sign bit is
//! set when some entry has its sign bit set: a negative value or -0.0).
inline double tile_sum_full(const float* x, std::uint32_t& signs) noexcept {
#ifdef SPECDEC_SAMPLE_SIMD
  using namespace simd;
  dv v[256 / dw];
  iv sg = {};
  for (int j = 0; j < 256; j += fw) {
    const fv a = loadv(x + j), b = loadv(x + j + 512), c = loadv(x + j + 256), d = loadv(x + j + 768);
    sg |= (reinterpret_cast<iv>(a) | reinterpret_cast<iv>(b)) | (reinterpret_cast<iv>(c) | reinterpret_cast<iv>(d));
    widen((a + b) + (c + d), v + j / dw);
  }
  for (int h = 128 / dw; h >= 1; h /= 2)
    for (int k = 0; k < h; ++k) v[k] += v[k + h];
  for (int k = 4; k < fw; ++k) sg[k & 3] |= sg[k];
  signs |= static_cast<std::uint32_t>(sg[0] | sg[1] | sg[2] | sg[3]);
  double s[dw];
  std::memcpy(s, &v[0], sizeof s);
  for (int h = dw / 2; h >= 1; h /= 2)
    for (int k = 0; k < h; ++k) s[k] += s[k + h];
  return s[0];
#else
  for (int i = 0; i < sum_tile; ++i) {
    std::uint32_t b;
    std::memcpy(&b, x + i, sizeof b);
    signs |= b;
  }
  return tile_tree_sum([&](std::int64_t i) { return x[i]; }, sum_tile);
#endif
}

//! Sum of tile `t` of any row (partial or strided tiles go through a
//! zero-padded copy), with the sign bits as tile_sum_full.
inline double tile_sum(row_ref r, std::int64_t V, std::int64_t t, std::uint32_t& signs) noexcept {
  const std::int64_t b = t * sum_tile;
  const std::int64_t n = V - b < sum_tile ? V - b : sum_tile;
  if (const float* f = r.contiguous_f32(); f != nullptr && n == sum_tile) return tile_sum_full(f + b, signs);
  alignas(64) float buf[sum_tile];
  widen_range(r, b, n, buf);
  for (std::int64_t i = n; i < sum_tile; ++i) buf[i] = 0.0f;
  return tile_sum_full(buf, signs);
}

//! Whether a row has an entry below zero (-0.0 is fine).
inline bool has_negative(row_ref r, std::int64_t V) noexcept {
  bool neg = false;
  for (std::int64_t i = 0; i < V; ++i) neg |= r[i] < 0.0f;
  return neg;
}

//! Tile sums of a row into `tiles` and its mass (left to right from 0: bit
//! for bit validate_probability_row's); false when an entry is NaN,
//! infinite or negative. One streaming read.
inline bool row_tiles(row_ref r, std::int64_t V, double* tiles, double& mass) noexcept {
  std::uint32_t signs = 0;
  const std::int64_t nt = sum_tile_count(V);
  for (std::int64_t t = 0; t < nt; ++t) tiles[t] = tile_sum(r, V, t, signs);
  mass = sum_tiles(tiles, nt);
  // The double sum of finite floats cannot overflow: it is finite exactly
  // when every entry is. A set sign bit is checked exactly (it may be -0.0).
  if (!(mass - mass == 0.0)) return false;
  return (signs >> 31) == 0 || !has_negative(r, V);
}

//! Last token with a positive entry, or -1.
inline token_id last_positive(row_ref r, std::int64_t V) noexcept {
  for (std::int64_t i = V - 1; i >= 0; --i)
    if (r[i] > 0.0f) return static_cast<token_id>(i);
  return -1;
}

//! Inverse-CDF sample of a validated row from its tile sums (reads one tile
//! plus the fallback's tail in the rare rounding case).
inline token_id sample_from_tiles(row_ref r, std::int64_t V, const double* tiles, double target) noexcept {
  return sample_tiled([&](std::int64_t i) { return r[i]; }, V, tiles, target, [&] { return last_positive(r, V); });
}

//! Argmax (lowest id on ties) and NaN test of a contiguous bf16 or fp16
//! row, on the raw words: key(b) = +-magnitude bits (-0 folded onto +0) is
//! a signed 16-bit integer in the order of the values, and a NaN is a
//! magnitude above the format's infinity (`inf_bits`), so the scan never
//! widens. Blocks of 64 words give their maximum key first; a block is
//! rescanned in order only when it beats the running best (strict >, so
//! the lowest id among equal maxima stays).
inline bool argmax_16(const std::uint16_t* w, std::int64_t V, std::uint16_t inf_bits, token_id& arg) noexcept {
  constexpr std::int64_t block = 64;
  auto key = [](std::uint16_t b) {
    const int mag = b & 0x7FFF;
    return static_cast<std::int16_t>((b & 0x8000) != 0 ? -mag : mag);
  };
  // -inf never wins (an all -inf row gives token 0), as in the fp32 scan.
  std::int32_t best = -static_cast<std::int32_t>(inf_bits);
  std::int64_t bi = -1;
  bool nan = false;
  auto rescan = [&](std::int64_t b, std::int64_t n) {
    for (std::int64_t i = b; i < b + n; ++i) {
      const bool is_nan = (w[i] & 0x7FFF) > inf_bits;
      nan |= is_nan;
      if (!is_nan && key(w[i]) > best) {
        best = key(w[i]);
        bi = i;
      }
    }
  };
  std::int64_t b = 0;
  for (; b + block <= V; b += block) {
    bool beats = false;
#ifdef SPECDEC_SAMPLE_SIMD
    const __m128i mag_mask = _mm_set1_epi16(0x7FFF), inf = _mm_set1_epi16(static_cast<short>(inf_bits));
    __m128i mx = _mm_set1_epi16(INT16_MIN), nn = _mm_setzero_si128();
    for (std::int64_t i = 0; i < block; i += 8) {
      const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + b + i));
      const __m128i sign = _mm_srai_epi16(x, 15), mag = _mm_and_si128(x, mag_mask);
      nn = _mm_or_si128(nn, _mm_cmpgt_epi16(mag, inf));
      // (mag ^ sign) - sign negates the negatives. A NaN's key is above
      // every number's: its block is rescanned, which skips it.
      mx = _mm_max_epi16(mx, _mm_sub_epi16(_mm_xor_si128(mag, sign), sign));
    }
    nan |= _mm_movemask_epi8(nn) != 0;
    beats = _mm_movemask_epi8(_mm_cmpgt_epi16(mx, _mm_set1_epi16(static_cast<short>(best)))) != 0;
#else
    std::int16_t m = INT16_MIN;
    for (std::int64_t i = 0; i < block; ++i) {
      nan |= (w[b + i] & 0x7FFF) > inf_bits;
      const std::int16_t k = key(w[b + i]);  // a NaN's is above every number's (rescan skips it)
      m = k > m ? k : m;
    }
    beats = m > best;
#endif
    if (beats) rescan(b, block);
  }
  rescan(b, V - b);
  arg = bi < 0 ? 0 : static_cast<token_id>(bi);
  return !nan;
}

//! Argmax (lowest id on ties) of a score row; NaN entries are never
//! chosen and make it return false (+-inf allowed, so logits work too; an
//! all -inf row gives token 0).
inline bool argmax_pass(row_ref r, std::int64_t V, token_id& arg) noexcept {
  if (r.t != row_dtype::f32 && r.s == 1 && r.x == nullptr)
    return argmax_16(static_cast<const std::uint16_t*>(r.d), V,
                     r.t == row_dtype::bf16 ? std::uint16_t{0x7F80} : std::uint16_t{0x7C00}, arg);
  if (r.t != row_dtype::f32 || r.x != nullptr) {
    // Strided 16-bit rows and logits rows: widened a tile at a time and scanned as fp32; an
    // earlier tile wins ties (strict >), so the lowest id among equal maxima stays.
    alignas(64) float buf[sum_tile];
    float best = -INFINITY;
    std::int64_t bi = -1;
    bool ok = true;
    for (std::int64_t b = 0; b < V; b += sum_tile) {
      const std::int64_t n = V - b < sum_tile ? V - b : sum_tile;
      widen_range(r, b, n, buf);
      token_id a = 0;
      ok = argmax_pass(row_ref{buf, 1}, n, a) && ok;
      if (buf[a] > best) {
        best = buf[a];
        bi = b + a;
      }
    }
    arg = bi < 0 ? 0 : static_cast<token_id>(bi);
    return ok;
  }
  float best = -INFINITY;
  std::int64_t bi = -1;
  bool nan = false;
  std::int64_t i = 0;
#ifdef SPECDEC_SAMPLE_SIMD
  if (const float* d = r.contiguous_f32(); d != nullptr) {
    // Block maxima; a block is rescanned in scalar code only when it beats
    // the running best (rare), so ties keep the lowest id.
    using namespace simd;
    i4 n = {};
    for (; i + 32 <= V; i += 32) {
      __m128 m4[4];
      for (int k = 0; k < 4; ++k) {
        const __m128 a = _mm_loadu_ps(d + i + 8 * k), b = _mm_loadu_ps(d + i + 8 * k + 4);
        n |= reinterpret_cast<i4>(_mm_cmpunord_ps(a, b));
        m4[k] = _mm_max_ps(a, b);
      }
      const __m128 m = _mm_max_ps(_mm_max_ps(m4[0], m4[1]), _mm_max_ps(m4[2], m4[3]));
      const f4 bv4 = {best, best, best, best};
      if (any(reinterpret_cast<f4>(m) > bv4))
        for (int k = 0; k < 32; ++k) {
          const float x = d[i + k];
          if (x > best) {
            best = x;
            bi = i + k;
          }
        }
    }
    nan = any(n);
  }
#endif
  for (; i < V; ++i) {
    const float x = r[i];
    nan |= x != x;
    if (x > best) {
      best = x;
      bi = i;
    }
  }
  arg = bi < 0 ? 0 : static_cast<token_id>(bi);
  return !nan;
}

}  // namespace specdec::detail
