#include <catch2/catch.hpp>

#include <cstdint>
#include <numeric>
#include <type_traits>
#include <vector>

#include "specdec/core/view.hpp"

TEST_CASE("make_view is row-major") {
  std::vector<int> buf(2 * 3 * 4);
  std::iota(buf.begin(), buf.end(), 0);
  auto v = specdec::make_view(buf.data(), 2, 3, 4);
  CHECK(v.size() == 24);
  CHECK(v.stride[0] == 12);
  CHECK(v.stride[1] == 4);
  CHECK(v.stride[2] == 1);
  CHECK(v(1, 2, 3) == 23);
  CHECK(v(0, 1, 0) == 4);
  CHECK(v.is_row_major_contiguous());
  CHECK(v.required_span() == 24);
  CHECK(v.in_bounds(1, 2, 3));
  CHECK_FALSE(v.in_bounds(2, 0, 0));
  CHECK_FALSE(v.in_bounds(0, -1, 0));
  auto s = v.slice(1);
  CHECK(s(2, 3) == 23);
  CHECK(s.extent[0] == 3);
}

TEST_CASE("strided views address transposed and broadcast layouts") {
  std::vector<float> buf(6);
  std::iota(buf.begin(), buf.end(), 0.0f);
  // [2][3] stored column-major.
  auto t = specdec::make_strided_view<float, 2>(buf.data(), {2, 3}, {1, 2});
  CHECK(t(1, 2) == 5.0f);
  CHECK(t(0, 1) == 2.0f);
  CHECK_FALSE(t.is_row_major_contiguous());
  CHECK(t.required_span() == 6);
  // Broadcast along the first dimension.
  auto b = specdec::make_strided_view<float, 2>(buf.data(), {4, 3}, {0, 1});
  CHECK(b(3, 2) == 2.0f);
  CHECK(b.required_span() == 3);
  auto c = b.as_const();
  CHECK(c(2, 1) == 1.0f);
  specdec::view2d<float> empty;
  CHECK(empty.empty());
  CHECK(empty.required_span() == 0);
}

namespace {
float sum_view(specdec::view2d<const float> v) {
  float s = 0;
  for (std::int64_t i = 0; i < v.extent[0]; ++i)
    for (std::int64_t j = 0; j < v.extent[1]; ++j) s += v(i, j);
  return s;
}
}  // namespace

// A mutable view passes where a const view is read; never the other way round.
static_assert(std::is_convertible_v<specdec::view2d<float>, specdec::view2d<const float>>);
static_assert(std::is_convertible_v<specdec::view1d<int>, specdec::view1d<const int>>);
static_assert(!std::is_convertible_v<specdec::view2d<const float>, specdec::view2d<float>>);
static_assert(!std::is_convertible_v<specdec::view2d<float>, specdec::view2d<const double>>);
static_assert(!std::is_convertible_v<specdec::view2d<float>, specdec::view1d<const float>>);
static_assert(std::is_aggregate_v<specdec::view2d<float>>);  // designated/brace init keeps working

TEST_CASE("a mutable view converts implicitly to the const view of the same memory") {
  std::vector<float> buf = {1, 2, 3, 4, 5, 6};
  const specdec::view2d<float> m = specdec::make_view(buf.data(), 2, 3);
  CHECK(sum_view(m) == 21.0f);
  const specdec::view2d<const float> c = m;
  CHECK(c.data == buf.data());
  CHECK(c.stride[0] == 3);
  CHECK(c.extent[1] == 3);
}
