//! \file
//! The inner step of every SSM recurrence in specdec: one state row update
//! h[n] = decay * h_in[n] + xdt * B[n], fused with the output dot C . h,
//! on short vectors (ssm_simd.hpp), several rows at a time so B and C are
//! loaded once for all of them.
#pragma once

#include <cstdint>

#include "specdec/core/config.hpp"
#include "specdec/ssm/detail/ssm_simd.hpp"

namespace specdec::detail {

//! Updates R rows of dstate `s` entries (row r at h_in + r * in_ld, written
//! to h_out + r * out_ld; `h_in` null: the zero state) with xdt[r], and
//! writes out[r] = C . h_out row r (nothing when `c` is null). Each vector
//! is loaded before it is stored, so h_in may equal h_out (same rows).
//! Fixed summation order (vector lanes, then the scalar tail): results are
//! deterministic for a given build and dstate.
template <int R, bool HasIn, class T>
inline void ssm_step_rows(const T* h_in, std::int64_t in_ld, T* h_out, std::int64_t out_ld, const T* b, const T* c,
                          T decay, const T* xdt, T* out, std::int64_t s) noexcept {
  using S = ssm_simd<T>;
  using V = typename S::vec;
  constexpr int lanes = S::lanes;
  V acc[R];
  V xv[R];
  for (int r = 0; r < R; ++r) {
    acc[r] = V{};
    xv[r] = S::splat(xdt[r]);
  }
  const V dv = S::splat(decay);
  const std::int64_t full = s - s % lanes;
  for (std::int64_t n = 0; n < full; n += lanes) {
    const V bv = S::load(b + n);
    const V cv = c != nullptr ? S::load(c + n) : V{};
    for (int r = 0; r < R; ++r) {
      V v = xv[r] * bv;
      if constexpr (HasIn) v = dv * S::load(h_in + r * in_ld + n) + v;
      S::store(h_out + r * out_ld + n, v);
      acc[r] += v * cv;
    }
  }
  for (int r = 0; r < R; ++r) {
    T tail = T(0);
    for (std::int64_t k = full; k < s; ++k) {
      T v = xdt[r] * b[k];
      if constexpr (HasIn) v = decay * h_in[r * in_ld + k] + v;
      h_out[r * out_ld + k] = v;
      if (c != nullptr) tail += v * c[k];
    }
    if (c != nullptr) out[r] = S::hsum(acc[r]) + tail;
  }
}

//! ssm_step_rows over all P rows of one head's state (pairs of rows, then
//! a last single row); `h_in` null: the zero state. out[p] = C . row p.
template <class T>
inline void ssm_step_row_block(const T* h_in, std::int64_t in_ld, T* h_out, std::int64_t out_ld, const T* b, const T* c,
                               T decay, const T* xdt, T* out, std::int64_t P, std::int64_t s) noexcept {
  std::int64_t p = 0;
  if (h_in != nullptr) {
    for (; p + 2 <= P; p += 2)
      ssm_step_rows<2, true>(h_in + p * in_ld, in_ld, h_out + p * out_ld, out_ld, b, c, decay, xdt + p, out + p, s);
    if (p < P)
      ssm_step_rows<1, true>(h_in + p * in_ld, in_ld, h_out + p * out_ld, out_ld, b, c, decay, xdt + p, out + p, s);
  } else {
    const T* none = nullptr;
    for (; p + 2 <= P; p += 2)
      ssm_step_rows<2, false>(none, 0, h_out + p * out_ld, out_ld, b, c, decay, xdt + p, out + p, s);
    if (p < P) ssm_step_rows<1, false>(none, 0, h_out + p * out_ld, out_ld, b, c, decay, xdt + p, out + p, s);
  }
}

//! One row (R = 1) of ssm_step_rows; returns C . h_out (0 when `c` is null).
template <class T>
inline T ssm_step_row(const T* h_in, T* h_out, const T* b, const T* c, T decay, T xdt, std::int64_t s) noexcept {
  T out = T(0);
  ssm_step_rows<1, true>(h_in, 0, h_out, 0, b, c, decay, &xdt, &out, s);
  return out;
}

//! y[p] = (acc[p] + d[p] x[p]) silu(z[p]) over P contiguous entries (no
//! gate when `z` is null): the epilogue of every scan, SiLU on vectors.
template <class T>
inline void ssm_output_row(const T* acc, const T* x, const T* d, const T* z, T* y, std::int64_t P) noexcept {
  using S = ssm_simd<T>;
  const std::int64_t full = P - P % S::lanes;
  for (std::int64_t p = 0; p < full; p += S::lanes) {
    auto v = S::load(acc + p) + S::load(d + p) * S::load(x + p);
    if (z != nullptr) v *= S::silu(S::load(z + p));
    S::store(y + p, v);
  }
  for (std::int64_t p = full; p < P; ++p) {
    T v = acc[p] + d[p] * x[p];
    if (z != nullptr) v *= ssm_simd<T, false>::silu(z[p]);
    y[p] = v;
  }
}

//! C . h for one contiguous row (vector lanes, then the scalar tail).
template <class T>
inline T ssm_dot_row(const T* h, const T* c, std::int64_t s) noexcept {
  using S = ssm_simd<T>;
  using V = typename S::vec;
  V acc0{}, acc1{};
  const std::int64_t full2 = s - s % (2 * S::lanes), full = s - s % S::lanes;
  for (std::int64_t n = 0; n < full2; n += 2 * S::lanes) {
    acc0 += S::load(h + n) * S::load(c + n);
    acc1 += S::load(h + n + S::lanes) * S::load(c + n + S::lanes);
  }
  if (full > full2) acc0 += S::load(h + full2) * S::load(c + full2);
  T tail = T(0);
  for (std::int64_t n = full; n < s; ++n) tail += h[n] * c[n];
  return S::hsum(acc0 + acc1) + tail;
}

}  // namespace specdec::detail
