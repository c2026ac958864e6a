// 16-bit rows for tests: fp16 by its definition, and round-to-nearest
// narrowing of non-negative floats to bf16 and fp16 (the inputs of the typed
// row tests, host and GPU).
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "specdec/core/float16.hpp"

namespace specdec_test {

// IEEE binary16 by its definition, in double (independent of widen_f16).
inline double f16_reference(std::uint16_t b) {
  const int sign = b >> 15, e = (b >> 10) & 0x1F, m = b & 0x3FF;
  double v = 0;
  if (e == 0x1F)
    v = m == 0 ? std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
  else if (e == 0)
    v = std::ldexp(static_cast<double>(m), -24);
  else
    v = std::ldexp(1.0 + m / 1024.0, e - 15);
  return sign ? -v : v;
}

// Round-to-nearest-even narrowing of a finite float (the test's inputs).
inline std::uint16_t to_bf16(float x) {
  const auto u = std::bit_cast<std::uint32_t>(x);
  return static_cast<std::uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}
inline std::uint16_t to_f16(float x) {
  // The nearest of the finite non-negative fp16 values (increasing in their bits).
  static const std::vector<double> table = [] {
    std::vector<double> t;
    for (std::uint32_t b = 0; b <= 0x7BFF; ++b) t.push_back(f16_reference(static_cast<std::uint16_t>(b)));
    return t;
  }();
  const auto it = std::lower_bound(table.begin(), table.end(), static_cast<double>(x));
  auto i = static_cast<std::size_t>(it - table.begin());
  if (i == table.size() || (i > 0 && x - table[i - 1] <= table[i] - x)) --i;
  return static_cast<std::uint16_t>(i);
}

//! x's entries (finite, >= 0) narrowed to `t` (bf16 or f16) as raw words.
inline std::vector<std::uint16_t> narrow(const std::vector<float>& x, specdec::row_dtype t) {
  std::vector<std::uint16_t> y(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const float v = x[i];
    y[i] = v != v ? std::uint16_t{0x7FFF} : t == specdec::row_dtype::bf16 ? to_bf16(v) : to_f16(v);
  }
  return y;
}

}  // namespace specdec_test
