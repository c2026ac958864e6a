// Compile test: the umbrella header first, then a system header that
// re-enters the SIMD intrinsics headers. A header that includes a system
// header inside a namespace breaks this translation unit.
#include <specdec/specdec.hpp>

#if defined(__SSE2__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#endif

#include <catch2/catch.hpp>

TEST_CASE("specdec.hpp followed by <immintrin.h> compiles") {
#if defined(__SSE2__) && (defined(__GNUC__) || defined(__clang__))
  const __m128 x = _mm_set1_ps(1.0f);
  CHECK(_mm_cvtss_f32(x) == 1.0f);
#endif
  CHECK(specdec::sum_tile_count(1025) == 2);
}
