// Small-batch matrix products for the example engine (model.hpp): y = x W^T
// for n = 1..~128 rows against weights packed once at load time, and the
// same micro-kernel for attention's per-page products.
//
// Why a packed panel layout: a forward over n tree nodes reads every weight
// once, and for n <= 32 a general GEMM (Eigen) spends much of its time
// repacking the [out, in] matrix each call. Packed here as panels of 16
// output columns, [in][16] each, a weight matrix streams through the cache
// exactly once per call and every load feeds 16 (one AVX-512, two AVX2, four
// SSE vectors) multiply-adds per row of x. The kernel is plain C++ written
// with GCC/Clang vector types so that the accumulators stay in registers on
// any x86-64 or ARM target (the vector width follows -march; nothing here
// needs AVX-512 or AVX2 to be correct). benchmarks/bench_engine.cpp compares
// it with Eigen and libxsmm; examples/models/README.md has the numbers.
//
// Weights that are exactly f16 values (every shipped model stores f16) stay
// f16 in the panels where the CPU converts in hardware (F16C): the products
// are bit for bit those of the f32 panels, and a pass reads half the bytes.
// That matters more than the conversion's cost: a pass over a few nodes
// streams the weights from L3 or memory, and between the passes of a
// speculative round (the drafter runs in between) other work evicts part of
// them, so the pass re-reads them from memory (README, "Pass cost and the
// caches").
//
// precision::bf16 (CPUs with AVX512-BF16) rounds the weights and the rows
// that meet them to bfloat16 and sums the products in f32 (VDPBF16PS), as
// engines serving bf16 models do. That instruction does 32 multiply-adds
// where an f32 FMA does 16, and on the Zen 4 core measured it also issues
// faster (381 against 114 GFLOP/s in a register-only loop): a pass over a
// few nodes is compute-bound from N = 2 (README, "bf16 products"), so each
// extra node costs about a third of what it does in f32. The logits then differ from the f32 forward by bf16's rounding
// (tests/models/test_engine.cpp states the tolerance); a row's result is
// the same whatever the number of rows and the register blocking, so a
// tree pass still gives each node the logits of a one-node pass.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string_view>
#include <utility>
#include <vector>

#if defined(__F16C__) || defined(__AVX512BF16__)
#include <immintrin.h>
#endif

namespace models::kernel {

//! Output columns per panel (and keys per KV page: attention reuses the kernel).
inline constexpr std::int64_t panel_width = 16;

// 8 floats: one AVX2 register, two SSE registers (half a zmm with AVX-512).
// Loaded and stored with memcpy (no alignment assumed); never passed by
// value between functions that are not inlined.
typedef float v8 __attribute__((vector_size(32)));
inline constexpr int v8_per_panel = static_cast<int>(panel_width / 8);

// Keeps a loaded vector in a register. Without it GCC folds the load of B
// into each multiply-add that uses it when a block has fewer than six rows,
// which makes a 4-row block issue three loads per two multiply-adds and run
// at half the speed of the 6-row block (measured: 44 vs 90 GFLOP/s).
inline void pin([[maybe_unused]] v8& v) {
#if defined(__GNUC__) && defined(__AVX__)  // one ymm register; SSE-only builds split v8 in two
  asm("" : "+x"(v));
#endif
}

//! Whether this build stores exactly-f16 weights as f16 (F16C conversions).
#if defined(__F16C__)
inline constexpr bool f16_panels = true;
#else
inline constexpr bool f16_panels = false;
#endif

//! An IEEE half, as stored in f16 panels.
struct half_bits {
  std::uint16_t bits;
};

// One row of eight B values as floats (a vector of 8 f32 or 8 f16).
inline void load8(v8& out, const float* p) { std::memcpy(&out, p, sizeof(v8)); }
inline void load8(v8& out, const half_bits* p) {
#if defined(__F16C__)
  const __m256 f = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  std::memcpy(&out, &f, sizeof(v8));
#else  // never reached (pack keeps f32 panels without F16C); kept correct anyway
  for (int i = 0; i < 8; ++i) {
    const std::uint32_t h = p[i].bits, sign = (h & 0x8000u) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff;
    float v = e == 0 ? std::ldexp(static_cast<float>(m), -24)
                     : (e == 31 ? (m != 0 ? NAN : INFINITY) : std::ldexp(static_cast<float>(m | 0x400u), e - 25));
    out[i] = sign != 0 ? -v : v;
  }
#endif
}

// f32 -> f16 -> f32 is the identity for v (F16C builds only).
inline bool exact_half([[maybe_unused]] float v, [[maybe_unused]] half_bits& h) {
#if defined(__F16C__)
  h.bits = static_cast<std::uint16_t>(_cvtss_sh(v, _MM_FROUND_TO_NEAREST_INT));
  return _cvtsh_ss(h.bits) == v;
#else
  return false;
#endif
}

//! How the engine multiplies by its weight matrices.
enum class precision {
  f32,   //!< f32 products (f16 weights widened exactly): the reference forward's logits
  bf16,  //!< weights and the rows that meet them rounded to bf16, products summed in f32
};

//! Whether this build has precision::bf16 (compiled for AVX512-BF16).
#if defined(__AVX512BF16__) && defined(__AVX512F__)
inline constexpr bool bf16_products = true;
#else
inline constexpr bool bf16_products = false;
#endif

//! The products a command line names: "f32", "bf16", or "auto" (bf16 where
//! the build has it, as the demo runs); false for any other name.
inline bool parse_precision(std::string_view name, precision& out) {
  if (name == "f32" || (name == "auto" && !bf16_products)) {
    out = precision::f32;
  } else if (name == "bf16" || name == "auto") {
    out = precision::bf16;
  } else {
    return false;
  }
  return true;
}
//! The name parse_precision takes for `p`.
inline const char* precision_name(precision p) { return p == precision::bf16 ? "bf16" : "f32"; }

//! f32 -> bf16, rounding to nearest even (NaN stays a quiet NaN): the
//! rounding of VCVTNE2PS2BF16 for normal numbers.
inline std::uint16_t to_bf16(float v) {
  std::uint32_t u = 0;
  std::memcpy(&u, &v, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40u);
  return static_cast<std::uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
inline float from_bf16(std::uint16_t h) {
  const std::uint32_t u = static_cast<std::uint32_t>(h) << 16;
  float v = 0;
  std::memcpy(&v, &u, sizeof v);
  return v;
}

//! A weight matrix W [rows = out, cols = in] for y = x W^T, packed as
//! ceil(rows / 16) panels of [cols][16] (the last panel zero-padded), in f32
//! or, when every value is exactly an f16 and the CPU converts, in f16; or,
//! for precision::bf16, as panels of [ceil(cols / 2)][16] bf16 pairs (the
//! two input columns 2k and 2k + 1 of one output in one 32-bit word, the
//! even one in the low half), the layout VDPBF16PS multiplies.
struct packed_matrix {
  std::int64_t rows = 0, cols = 0;
  std::vector<float> data;                //!< f32 panels (empty when another form holds them)
  std::vector<half_bits> half;            //!< f16 panels
  std::vector<std::uint32_t> bf16_pairs;  //!< bf16 pair panels
  std::int64_t panels() const { return (rows + panel_width - 1) / panel_width; }
  std::int64_t pairs() const { return (cols + 1) / 2; }
  bool is_half() const { return !half.empty(); }
  bool is_bf16() const { return !bf16_pairs.empty(); }
};

//! Packs row-major blocks [rows_i, cols] stacked on top of each other (one
//! fused product for q/k/v or gate/up); in f16 when every value is one, in
//! bf16 pairs for precision::bf16 (std::invalid_argument where the build
//! lacks it).
inline packed_matrix pack(const std::vector<std::pair<const float*, std::int64_t>>& blocks, std::int64_t cols,
                          precision prec = precision::f32) {
  packed_matrix m;
  m.cols = cols;
  for (const auto& b : blocks) m.rows += b.second;
  if (prec == precision::bf16) {
    if (!bf16_products) throw std::invalid_argument("bf16 products need a build for a CPU with AVX512-BF16");
    const std::int64_t kp = m.pairs();
    m.bf16_pairs.assign(static_cast<std::size_t>(m.panels() * kp * panel_width), 0u);
    std::int64_t row = 0;
    for (const auto& [w, n] : blocks)
      for (std::int64_t i = 0; i < n; ++i, ++row)
        for (std::int64_t k = 0; k < cols; ++k)
          m.bf16_pairs[static_cast<std::size_t>(((row / panel_width) * kp + k / 2) * panel_width +
                                                row % panel_width)] |=
              static_cast<std::uint32_t>(to_bf16(w[i * cols + k])) << (16 * (k % 2));
    return m;
  }
  m.data.assign(static_cast<std::size_t>(m.panels() * cols * panel_width), 0.0f);
  std::int64_t row = 0;
  for (const auto& [w, n] : blocks)
    for (std::int64_t i = 0; i < n; ++i, ++row)
      for (std::int64_t k = 0; k < cols; ++k)
        m.data[static_cast<std::size_t>(((row / panel_width) * cols + k) * panel_width + row % panel_width)] =
            w[i * cols + k];
  if constexpr (f16_panels) {
    std::vector<half_bits> h(m.data.size());
    for (std::size_t i = 0; i < h.size(); ++i)
      if (!exact_half(m.data[i], h[i])) return m;
    m.half = std::move(h);
    m.data = {};
  }
  return m;
}

//! C[R rows][P * 16 cols] (+)= A[R][K] * B, with B(k, p * 16 + j) at
//! b[p * pstride + k * kstride + j] (f32 or f16). Only the first `cols`
//! columns of C are written (a partial last panel). The accumulators are
//! R * P vectors.
template <int R, int P, class B>
inline void micro(const float* a, std::int64_t lda, const B* b, std::int64_t kstride, std::int64_t pstride,
                  std::int64_t K, float* c, std::int64_t ldc, std::int64_t cols, bool accumulate) {
  constexpr int V = P * v8_per_panel;
  v8 acc[R][V];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (int v = 0; v < V; ++v) acc[r][v] = v8{};
  for (std::int64_t k = 0; k < K; ++k) {
    if constexpr (R * V + V < 16) {
      // Few accumulators: load the row of B once, then one broadcast per row of A.
      v8 bk[V];
#pragma GCC unroll 16
      for (int v = 0; v < V; ++v) {
        load8(bk[v], b + (v / v8_per_panel) * pstride + k * kstride + (v % v8_per_panel) * 8);
        pin(bk[v]);
      }
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        const float av = a[r * lda + k];
#pragma GCC unroll 16
        for (int v = 0; v < V; ++v) acc[r][v] += av * bk[v];
      }
    } else {
      // Many accumulators (the one-row case): broadcast A first, stream B.
      float av[R];
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) av[r] = a[r * lda + k];
#pragma GCC unroll 16
      for (int v = 0; v < V; ++v) {
        v8 bv;
        load8(bv, b + (v / v8_per_panel) * pstride + k * kstride + (v % v8_per_panel) * 8);
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) acc[r][v] += av[r] * bv;
      }
    }
  }
  if (cols == P * panel_width) {
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
      for (int v = 0; v < V; ++v) {
        float* out = c + r * ldc + v * 8;
        if (accumulate) {
          v8 old;
          std::memcpy(&old, out, sizeof(v8));
          acc[r][v] += old;
        }
        std::memcpy(out, &acc[r][v], sizeof(v8));
      }
    return;
  }
  // A partial panel: through memory (indexing `acc` at run time would keep
  // the accumulators out of registers for the whole loop).
  float tmp[R][V * 8];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (int v = 0; v < V; ++v) std::memcpy(&tmp[r][v * 8], &acc[r][v], sizeof(v8));
  for (int r = 0; r < R; ++r)
    for (std::int64_t j = 0; j < cols; ++j) {
      float& out = c[r * ldc + j];
      out = accumulate ? out + tmp[r][j] : tmp[r][j];
    }
}

//! Rows [0, n) against one 16-column panel, in blocks of four rows (eight
//! AVX2 accumulators; measured faster than blocks of six once B stays in
//! registers, see pin); five or six remaining rows run as one block.
template <class B>
inline void panel_rows(std::int64_t n, const float* a, std::int64_t lda, const B* b, std::int64_t kstride,
                       std::int64_t K, float* c, std::int64_t ldc, std::int64_t cols, bool accumulate) {
  while (n > 0) {
    const std::int64_t rows = n == 5 || n == 6 ? n : std::min<std::int64_t>(n, 4);
    switch (rows) {
      case 6:
        micro<6, 1>(a, lda, b, kstride, 0, K, c, ldc, cols, accumulate);
        break;
      case 5:
        micro<5, 1>(a, lda, b, kstride, 0, K, c, ldc, cols, accumulate);
        break;
      case 4:
        micro<4, 1>(a, lda, b, kstride, 0, K, c, ldc, cols, accumulate);
        break;
      case 3:
        micro<3, 1>(a, lda, b, kstride, 0, K, c, ldc, cols, accumulate);
        break;
      case 2:
        micro<2, 1>(a, lda, b, kstride, 0, K, c, ldc, cols, accumulate);
        break;
      default:
        micro<1, 1>(a, lda, b, kstride, 0, K, c, ldc, cols, accumulate);
        break;
    }
    a += rows * lda;
    c += rows * ldc;
    n -= rows;
  }
}

namespace detail {
template <class B>
inline void matmul_panels(std::int64_t n, const float* x, std::int64_t ldx, const packed_matrix& w, const B* panels0,
                          float* y, std::int64_t ldy, bool accumulate) {
  const std::int64_t K = w.cols, ps = K * panel_width, panels = w.panels();
  std::int64_t p = 0;
  if (n == 1) {
    for (; p + 4 <= panels && (p + 4) * panel_width <= w.rows; p += 4)
      micro<1, 4>(x, ldx, panels0 + p * ps, panel_width, ps, K, y + p * panel_width, ldy, 4 * panel_width, accumulate);
    // Two or three full panels left: still several accumulators per step
    // (one panel alone waits on the multiply-add latency).
    if (p + 3 <= panels && (p + 3) * panel_width <= w.rows) {
      micro<1, 3>(x, ldx, panels0 + p * ps, panel_width, ps, K, y + p * panel_width, ldy, 3 * panel_width, accumulate);
      p += 3;
    } else if (p + 2 <= panels && (p + 2) * panel_width <= w.rows) {
      micro<1, 2>(x, ldx, panels0 + p * ps, panel_width, ps, K, y + p * panel_width, ldy, 2 * panel_width, accumulate);
      p += 2;
    }
  } else if (n == 2) {
    for (; p + 2 <= panels && (p + 2) * panel_width <= w.rows; p += 2)
      micro<2, 2>(x, ldx, panels0 + p * ps, panel_width, ps, K, y + p * panel_width, ldy, 2 * panel_width, accumulate);
  } else if (n % 4 == 3) {
    // The last three rows take two panels: twelve accumulators instead of
    // six, whose multiply-add latency made a 3-node pass cost about as much
    // as a 4-node one (demo models: t(3) 204 -> 176 us, t(7) 433 -> 403).
    const std::int64_t head = n - 3;
    for (; p + 2 <= panels && (p + 2) * panel_width <= w.rows; p += 2) {
      for (std::int64_t q = p; q < p + 2; ++q)
        panel_rows(head, x, ldx, panels0 + q * ps, panel_width, K, y + q * panel_width, ldy, panel_width, accumulate);
      micro<3, 2>(x + head * ldx, ldx, panels0 + p * ps, panel_width, ps, K, y + head * ldy + p * panel_width, ldy,
                  2 * panel_width, accumulate);
    }
  }
  for (; p < panels; ++p)
    panel_rows(n, x, ldx, panels0 + p * ps, panel_width, K, y + p * panel_width, ldy,
               std::min(panel_width, w.rows - p * panel_width), accumulate);
}
}  // namespace detail

#if defined(__AVX512BF16__) && defined(__AVX512F__)
//! C[R rows][up to P * 16 cols] (+)= A B over bf16 pairs: A[r] is row r's
//! `kp` pairs (a[r * lda + k]), B's panel p is b[p * pstride + k * 16 + j].
//! Each output column sums its pairs in k order into one accumulator, so
//! its value does not depend on R, P or the caller's blocking.
template <int R, int P>
inline void micro_bf16(const std::uint32_t* a, std::int64_t lda, const std::uint32_t* b, std::int64_t pstride,
                       std::int64_t kp, float* c, std::int64_t ldc, std::int64_t cols, bool accumulate) {
  __m512 acc[R][P];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
    for (int p = 0; p < P; ++p) acc[r][p] = _mm512_setzero_ps();
  for (std::int64_t k = 0; k < kp; ++k) {
    __m512i bk[P];
#pragma GCC unroll 16
    for (int p = 0; p < P; ++p) {
      bk[p] = _mm512_loadu_si512(b + p * pstride + k * panel_width);
      // In a register for every row: without this GCC reloads the panel
      // for each row of a three-row block, which then ran at half the
      // speed of a four-row one (gemm 1024x192, N = 3: 10.1 -> 5.7 us).
      asm("" : "+v"(bk[p]));
    }
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const __m512i ak = _mm512_set1_epi32(static_cast<int>(a[r * lda + k]));
#pragma GCC unroll 16
      for (int p = 0; p < P; ++p) acc[r][p] = _mm512_dpbf16_ps(acc[r][p], (__m512bh)ak, (__m512bh)bk[p]);
    }
  }
#pragma GCC unroll 16
  for (int p = 0; p < P; ++p) {
    const std::int64_t valid = std::min<std::int64_t>(panel_width, cols - p * panel_width);
    if (valid <= 0) break;
    const auto m = static_cast<__mmask16>((1u << valid) - 1u);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      float* out = c + r * ldc + p * panel_width;
      const __m512 v = accumulate ? _mm512_add_ps(acc[r][p], _mm512_maskz_loadu_ps(m, out)) : acc[r][p];
      _mm512_mask_storeu_ps(out, m, v);
    }
  }
}

namespace detail {
// x[n][K] f32 -> [n][ceil(K / 2)] bf16 pairs (rounded to nearest even, the
// odd K's last high half zero), 32 values per instruction.
inline void rows_to_bf16(std::int64_t n, const float* x, std::int64_t ldx, std::int64_t K, std::uint32_t* out) {
  const std::int64_t kp = (K + 1) / 2;
  for (std::int64_t r = 0; r < n; ++r) {
    const float* row = x + r * ldx;
    std::uint32_t* dst = out + r * kp;
    for (std::int64_t k = 0; k < K; k += 32) {
      const std::int64_t left = K - k;
      const auto lo = static_cast<__mmask16>(left >= 16 ? 0xffffu : (1u << left) - 1u);
      const auto hi = static_cast<__mmask16>(left >= 32 ? 0xffffu : left <= 16 ? 0u : (1u << (left - 16)) - 1u);
      const __m512bh h =
          _mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(hi, row + k + 16), _mm512_maskz_loadu_ps(lo, row + k));
      const std::int64_t words = std::min<std::int64_t>(16, (left + 1) / 2);
      _mm512_mask_storeu_epi32(dst + k / 2, static_cast<__mmask16>((1u << words) - 1u), (__m512i)h);
    }
  }
}

using bf16_kernel = void (*)(const std::uint32_t*, std::int64_t, const std::uint32_t*, std::int64_t, std::int64_t,
                             float*, std::int64_t, std::int64_t, bool);
template <int R>
constexpr bf16_kernel bf16_for_panels(int p) {
  return p == 1 ? &micro_bf16<R, 1> : p == 2 ? &micro_bf16<R, 2> : p == 3 ? &micro_bf16<R, 3> : &micro_bf16<R, 4>;
}
inline bf16_kernel bf16_block(int rows, int p) {
  switch (rows) {
    case 1:
      return bf16_for_panels<1>(p);
    case 2:
      return bf16_for_panels<2>(p);
    case 3:
      return bf16_for_panels<3>(p);
    case 4:
      return bf16_for_panels<4>(p);
    case 5:
      return bf16_for_panels<5>(p);
    default:
      return bf16_for_panels<6>(p);
  }
}

// Row blocks of at most six (6 x 4 accumulators + 4 panel loads + one
// broadcast fit AVX-512's 32 registers), as even as possible; four panels
// per step, eight for one row (a matrix-vector product needs many
// independent accumulators to hide VDPBF16PS's latency). Panels outer, so
// a step's panels stay in L1 while every row block uses them. Measured on
// Zen 4 (1024 x 192 and 192 x 512, 24 rows): 4 or 6 rows by 4 panels
// 179-233 GFLOP/s, 8 or 12 rows by 2 panels 193-229, 2 to 4 rows by 6 or 8
// panels 71-111.
inline void matmul_bf16(std::int64_t n, const float* x, std::int64_t ldx, const packed_matrix& w, float* y,
                        std::int64_t ldy, bool accumulate) {
  const std::int64_t kp = w.pairs(), ps = kp * panel_width, panels = w.panels();
  thread_local std::vector<std::uint32_t> a;
  a.resize(static_cast<std::size_t>(n * kp));
  rows_to_bf16(n, x, ldx, w.cols, a.data());
  const std::uint32_t* b = w.bf16_pairs.data();
  const std::int64_t blocks = (n + 5) / 6;
  for (std::int64_t p = 0; p < panels;) {
    const std::int64_t step = std::min<std::int64_t>(panels - p, n == 1 && panels - p >= 8 ? 8 : 4);
    const std::int64_t cols = std::min(step * panel_width, w.rows - p * panel_width);
    for (std::int64_t blk = 0, r0 = 0; blk < blocks; ++blk) {
      const std::int64_t rows = (n - r0) / (blocks - blk);
      const std::uint32_t* ab = a.data() + r0 * kp;
      float* yb = y + r0 * ldy + p * panel_width;
      if (step == 8)
        micro_bf16<1, 8>(ab, kp, b + p * ps, ps, kp, yb, ldy, cols, accumulate);
      else
        bf16_block(static_cast<int>(rows), static_cast<int>(step))(ab, kp, b + p * ps, ps, kp, yb, ldy, cols,
                                                                   accumulate);
      r0 += rows;
    }
    p += step;
  }
}
}  // namespace detail
#endif

//! y[n, W.rows] (+)= x[n, W.cols] W^T; x rows `ldx` apart, y rows `ldy` apart.
//! Register blocks (rows x 16-column panels) chosen by measurement on AVX2
//! (README): one row takes four panels per step (a matrix-vector product
//! needs independent accumulators to hide the multiply-add latency; the
//! last two or three panels go together for the same reason), two rows
//! take two panels, more rows take one panel in blocks of four (each
//! loaded panel row feeds all of them), and a last block of three rows
//! takes two panels. The outer loop runs over panels, so
//! each panel of W is read from memory once and stays in L1 while every
//! row block uses it. bf16 matrices take matmul_bf16's blocks (six rows by
//! four panels; one row, eight panels).
inline void matmul(std::int64_t n, const float* x, std::int64_t ldx, const packed_matrix& w, float* y, std::int64_t ldy,
                   bool accumulate = false) {
#if defined(__AVX512BF16__) && defined(__AVX512F__)
  if (w.is_bf16()) return detail::matmul_bf16(n, x, ldx, w, y, ldy, accumulate);
#endif
  if (w.is_half())
    detail::matmul_panels(n, x, ldx, w, w.half.data(), y, ldy, accumulate);
  else
    detail::matmul_panels(n, x, ldx, w, w.data.data(), y, ldy, accumulate);
}

}  // namespace models::kernel
