//! \file
//! 16-bit floating-point storage for probability rows: bfloat16 and IEEE
//! binary16 (float16), and the tag that says which element type a row of
//! verification has (row_dtype). specdec never computes in these formats:
//! it widens each element to float when it reads it. Widening is exact for
//! both, so a row verified in bf16 or fp16 gives, bit for bit, the result
//! of the same row widened to fp32 first, on the host and on the device.
//! The types are plain 16-bit words (layout-compatible with CUDA's
//! __nv_bfloat16 / __half and torch's bfloat16 / float16 tensors).
#pragma once

#include <bit>
#include <cstdint>
#include <type_traits>

#include "specdec/core/config.hpp"

namespace specdec {

namespace detail {

//! The float whose bits are `b`.
SPECDEC_HD float float_from_bits(std::uint32_t b) noexcept {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(b);
#else
  return std::bit_cast<float>(b);
#endif
}

//! The bits of float `x`.
SPECDEC_HD std::uint32_t bits_of_float(float x) noexcept {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  return std::bit_cast<std::uint32_t>(x);
#endif
}

//! bfloat16 bits to float: the upper half of a float's bits.
SPECDEC_HD float widen_bf16(std::uint16_t b) noexcept { return float_from_bits(static_cast<std::uint32_t>(b) << 16); }

//! IEEE binary16 bits to float, exactly (subnormals, infinities and NaN
//! payloads included).
SPECDEC_HD float widen_f16(std::uint16_t b) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(b & 0x8000u) << 16;
  const std::uint32_t e = (b >> 10) & 0x1Fu, m = b & 0x3FFu;
  if (e == 0x1Fu) return float_from_bits(sign | 0x7F800000u | (m << 13));  // inf, NaN
  if (e != 0) return float_from_bits(sign | ((e + 112u) << 23) | (m << 13));
  // Zero or subnormal: m * 2^-24, exact in float (a power-of-two scale).
  const float mag = static_cast<float>(m) * 5.9604644775390625e-8f;
  return float_from_bits(sign | bits_of_float(mag));
}

}  // namespace detail

//! A bfloat16 value (1 sign, 8 exponent, 7 mantissa bits), as stored.
struct bfloat16 {
  std::uint16_t bits;  //!< the raw encoding
  //! The value, widened exactly.
  SPECDEC_HD explicit operator float() const noexcept { return detail::widen_bf16(bits); }
};

//! An IEEE 754 binary16 value (1 sign, 5 exponent, 10 mantissa bits), as stored.
struct float16 {
  std::uint16_t bits;  //!< the raw encoding
  //! The value, widened exactly.
  SPECDEC_HD explicit operator float() const noexcept { return detail::widen_f16(bits); }
};

static_assert(sizeof(bfloat16) == 2 && std::is_trivially_copyable_v<bfloat16>);
static_assert(sizeof(float16) == 2 && std::is_trivially_copyable_v<float16>);

//! Element type of a row of probabilities: fp32, bf16 or fp16.
enum class row_dtype : std::int32_t {
  f32 = 0,   //!< float
  bf16 = 1,  //!< bfloat16
  f16 = 2,   //!< float16 (IEEE binary16)
};

//! Whether `t` is one of the row_dtype values.
SPECDEC_HD constexpr bool valid_row_dtype(row_dtype t) noexcept {
  return t == row_dtype::f32 || t == row_dtype::bf16 || t == row_dtype::f16;
}

//! Bytes of one element of type `t` (0 for an invalid tag).
SPECDEC_HD constexpr std::int64_t row_dtype_bytes(row_dtype t) noexcept {
  return t == row_dtype::f32 ? 4 : (t == row_dtype::bf16 || t == row_dtype::f16) ? 2 : 0;
}

//! Whether T is an element type rows may have (float, bfloat16, float16).
template <class T>
concept row_element = std::is_same_v<T, float> || std::is_same_v<T, bfloat16> || std::is_same_v<T, float16>;

//! The tag of a row element type.
template <row_element T>
inline constexpr row_dtype row_dtype_of = std::is_same_v<T, float>      ? row_dtype::f32
                                          : std::is_same_v<T, bfloat16> ? row_dtype::bf16
                                                                        : row_dtype::f16;

static_assert(row_element<bfloat16> && !row_element<double> && !row_element<std::uint16_t>);

}  // namespace specdec
