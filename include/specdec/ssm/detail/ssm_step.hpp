//! \file
//! The inner step of every SSM recurrence in specdec: one state row update
//! h[n] = decay * h_in[n] + xdt * B[n], fused with the output dot C . h,
//! on short vectors (core/detail/simd.hpp), several rows at a time so B and C are
//! loaded once for all of them.
#pragma once

#include <cstdint>
#include <type_traits>

#include "specdec/core/config.hpp"
#include "specdec/core/detail/simd.hpp"

namespace specdec::detail {

//! Calls f(std::integral_constant<int, R>{}, p) over the P rows of a
//! head's state in blocks of R = 4 rows, then one of 2, then one of 1: the
//! row blocking of the state kernels (one loaded B vector feeds R rows).
//! Always inlined: called out of line, it kept ssm_run_row_block's large
//! block behind a closure pointer and the folded scan ran 9% slower.
template <class F>
SPECDEC_HOST_INLINE void ssm_row_blocks(std::int64_t P, const F& f) {
  std::int64_t p = 0;
  for (; p + 4 <= P; p += 4) f(std::integral_constant<int, 4>{}, p);
  if (p + 2 <= P) {
    f(std::integral_constant<int, 2>{}, p);
    p += 2;
  }
  if (p < P) f(std::integral_constant<int, 1>{}, p);
}

//! Updates R rows of dstate `s` entries (row r at h_in + r * in_ld, written
//! to h_out + r * out_ld; `h_in` null: the zero state) with xdt[r], and
//! writes out[r] = C . h_out row r (nothing when `c` is null). Each vector
//! is loaded before it is stored, so h_in may equal h_out (same rows).
//! Fixed summation order (vector lanes, then the scalar tail): results are
//! deterministic for a given build and dstate.
//! Fold: the folded step of ssm_run_row_block instead, h_out = h_in +
//! xdt[r] B (no decay: `decay` is then the output scale, out[r] = decay x
//! (C . h_out)), one fused multiply-add per entry.
template <int R, bool HasIn, class T, bool Fold = false>
inline void ssm_step_rows(const T* h_in, std::int64_t in_ld, T* h_out, std::int64_t out_ld, const T* b, const T* c,
                          T decay, const T* xdt, T* out, std::int64_t s) noexcept {
  using S = vec_ops<T>;
  using V = typename S::vec;
  constexpr int lanes = S::lanes;
  V acc[R];
  V xv[R];
  SPECDEC_VEC_UNROLL
  for (int r = 0; r < R; ++r) {
    acc[r] = V{};
    xv[r] = S::splat(xdt[r]);
  }
  const V dv = S::splat(decay);
  const std::int64_t full = s - s % lanes;
  for (std::int64_t n = 0; n < full; n += lanes) {
    const V bv = S::load(b + n);
    const V cv = c != nullptr ? S::load(c + n) : V{};
    SPECDEC_VEC_UNROLL
    for (int r = 0; r < R; ++r) {
      V v = xv[r] * bv;
      if constexpr (HasIn && Fold) v = S::fma(xv[r], bv, S::load(h_in + r * in_ld + n));
      if constexpr (HasIn && !Fold) v = S::fma(dv, S::load(h_in + r * in_ld + n), v);
      S::store(h_out + r * out_ld + n, v);
      acc[r] += v * cv;
    }
  }
  for (int r = 0; r < R; ++r) {
    T tail = T(0);
    for (std::int64_t k = full; k < s; ++k) {
      T v = xdt[r] * b[k];
      if constexpr (HasIn && Fold) v = vec_ops<T, false>::fma(xdt[r], b[k], h_in[r * in_ld + k]);
      if constexpr (HasIn && !Fold) v = vec_ops<T, false>::fma(decay, h_in[r * in_ld + k], v);
      h_out[r * out_ld + k] = v;
      if (c != nullptr) tail += v * c[k];
    }
    if (c != nullptr) out[r] = Fold ? decay * (S::hsum(acc[r]) + tail) : S::hsum(acc[r]) + tail;
  }
}

//! ssm_step_rows over all P rows of one head's state (4 rows at a time,
//! then 2, then 1); `h_in` null: the zero state. out[p] = C . row p.
template <class T>
inline void ssm_step_row_block(const T* h_in, std::int64_t in_ld, T* h_out, std::int64_t out_ld, const T* b, const T* c,
                               T decay, const T* xdt, T* out, std::int64_t P, std::int64_t s) noexcept {
  auto rows = [&]<bool HasIn>(std::bool_constant<HasIn>) {
    ssm_row_blocks(P, [&]<int R>(std::integral_constant<int, R>, std::int64_t p) {
      // h_in + p * in_ld only when h_in is set (no arithmetic on a null pointer).
      ssm_step_rows<R, HasIn>(HasIn ? h_in + p * in_ld : h_in, in_ld, h_out + p * out_ld, out_ld, b, c, decay, xdt + p,
                              out + p, s);
    });
  };
  if (h_in != nullptr)
    rows(std::true_type{});
  else
    rows(std::false_type{});
}

//! A run of L nodes of a recurrent scan in the folded form, each node's
//! input state the previous node's output, for all P rows of one head:
//!   h_j = decay[j] h_{j-1} + xdt[j * xld + p] B_j,  out[j * xld + p] = C_j . h_j
//! (no dots when c is null). Node 0 reads the rows at h_in (row p at h_in
//! + p * in_ld; null: the zero state); node j writes its state to
//! store[j] + p * st_ld where store[j] is not null.
//!
//! The rows hold g_j = h_j / D_j, D_j the product of the decays since the
//! last renormalisation, so that g_j = g_{j-1} + (xdt / D_j) B_j and
//! C . h_j = D_j (C . g_j): one fused multiply-add per state entry and
//! node for the update instead of a multiply and one (the scan is bound by
//! them: 33 -> 40 GFLOP/s on an AVX-512 core). Row block by row block (4
//! rows, then 2, then 1) through all L nodes: nodes with no store write
//! the block to `blk` (4 x dstate scalars of scratch, in L1). Before D
//! would leave [2^-b, 2^b] (b = 30 for float, 60 for double), the block is
//! renormalised (into blk: g = h, D = 1); a decay outside that range on its
//! own takes a plain step. h_in holds g at scale D[0] (h when D[0] = 1);
//! node j's stored g has scale D[j + 1]. Every step depends on the node's
//! root path only, so any topological order of a tree gives the same bits.
template <class T>
inline void ssm_run_row_block(const T* h_in, std::int64_t in_ld, T* const* store, std::int64_t st_ld, const T* const* b,
                              const T* const* c, const T* decay, const T* xdt, std::int64_t xld, T* out, std::int64_t L,
                              std::int64_t P, std::int64_t s, T* blk, T* D) noexcept {
  // Float keeps 2^30 of headroom for g = h / D and x / D (its range ends at
  // 3e38); double 2^60.
  const T tiny = T(1) / T(std::uint64_t{1} << (sizeof(T) == 4 ? 30 : 60));
  const auto fits = [&](T v) { return v >= tiny && v <= T(1) / tiny; };
  auto block = [&]<int R>(std::integral_constant<int, R>, std::int64_t p) {
    const T* cur = h_in != nullptr ? h_in + p * in_ld : nullptr;
    std::int64_t cur_ld = in_ld;
    T scale = D[0];
    for (std::int64_t j = 0; j < L; ++j) {
      T next = scale * decay[j];
      if (!fits(next)) {  // renormalise: g = h in blk (a stored block stays as its scale says)
        if (cur != nullptr && scale != T(1)) {
          for (int r = 0; r < R; ++r)
            for (std::int64_t k = 0; k < s; ++k) blk[r * s + k] = scale * cur[r * cur_ld + k];
          cur = blk;
          cur_ld = s;
        }
        scale = T(1);
        next = decay[j];
      }
      T* dst = store[j] != nullptr ? store[j] + p * st_ld : blk;
      const std::int64_t dst_ld = store[j] != nullptr ? st_ld : s;
      T* o = out + j * xld + p;
      if (fits(next)) {
        scale = next;
        const T inv = T(1) / scale;
        T xs[R];
        for (int r = 0; r < R; ++r) xs[r] = xdt[j * xld + p + r] * inv;
        if (cur != nullptr)
          ssm_step_rows<R, true, T, true>(cur, cur_ld, dst, dst_ld, b[j], c[j], scale, xs, o, s);
        else
          ssm_step_rows<R, false, T, true>(cur, cur_ld, dst, dst_ld, b[j], c[j], scale, xs, o, s);
      } else if (cur != nullptr) {  // a decay out of range on its own: one plain step, g = h
        ssm_step_rows<R, true>(cur, cur_ld, dst, dst_ld, b[j], c[j], decay[j], xdt + j * xld + p, o, s);
      } else {
        ssm_step_rows<R, false>(cur, cur_ld, dst, dst_ld, b[j], c[j], decay[j], xdt + j * xld + p, o, s);
      }
      cur = dst;
      cur_ld = dst_ld;
      D[j + 1] = scale;
    }
  };
  ssm_row_blocks(P, block);
}

//! R rows x NV vectors of a state held in registers through L steps of a
//! commit: h = decay[j] h + xdt[j * xld + r] B_j (B_j from b[j] + col), with
//! the operations of ssm_step_rows in its order, so the same bits as L
//! calls of it; one load and one store per entry instead of L of each.
//! Rows at h_in + r * in_ld (HasIn = false: the zero state), written to
//! h_out + r * out_ld; h_in may equal h_out.
template <int R, int NV, bool HasIn, class T>
inline void ssm_commit_tile(const T* h_in, std::int64_t in_ld, T* h_out, std::int64_t out_ld, const T* const* b,
                            std::int64_t col, const T* decay, const T* xdt, std::int64_t xld, std::int64_t L) noexcept {
  using S = vec_ops<T>;
  using V = typename S::vec;
  V h[R][NV];
  SPECDEC_VEC_UNROLL
  for (int r = 0; r < R; ++r) SPECDEC_VEC_UNROLL
  for (int v = 0; v < NV; ++v) h[r][v] = HasIn ? S::load(h_in + r * in_ld + v * S::lanes) : V{};
  for (std::int64_t j = 0; j < L; ++j) {
    const V dv = S::splat(decay[j]);
    V bv[NV];
    SPECDEC_VEC_UNROLL
    for (int v = 0; v < NV; ++v) bv[v] = S::load(b[j] + col + v * S::lanes);
    SPECDEC_VEC_UNROLL
    for (int r = 0; r < R; ++r) {
      const V xv = S::splat(xdt[j * xld + r]);
      SPECDEC_VEC_UNROLL
      for (int v = 0; v < NV; ++v) {
        const V t = xv * bv[v];
        h[r][v] = HasIn || j > 0 ? S::fma(dv, h[r][v], t) : t;
      }
    }
  }
  SPECDEC_VEC_UNROLL
  for (int r = 0; r < R; ++r) SPECDEC_VEC_UNROLL
  for (int v = 0; v < NV; ++v) S::store(h_out + r * out_ld + v * S::lanes, h[r][v]);
}

//! L commit steps over all P rows of one head's state (rows at h_in + p *
//! in_ld, h_in null: the zero state; written to h_out + p * out_ld): row
//! blocks of 4, 2, 1, each through the dstate `s` entries as tiles of 2
//! vectors, then 1, then scalars, every tile through all L steps.
template <class T>
inline void ssm_commit_rows(const T* h_in, std::int64_t in_ld, T* h_out, std::int64_t out_ld, const T* const* b,
                            const T* decay, const T* xdt, std::int64_t xld, std::int64_t L, std::int64_t P,
                            std::int64_t s) noexcept {
  constexpr std::int64_t lanes = vec_ops<T>::lanes;
  auto block = [&]<int R, bool HasIn>(std::integral_constant<int, R>, std::bool_constant<HasIn>, std::int64_t p) {
    const T* in = HasIn ? h_in + p * in_ld : h_in;
    T* out = h_out + p * out_ld;
    std::int64_t k = 0;
    for (; k + 2 * lanes <= s; k += 2 * lanes)
      ssm_commit_tile<R, 2, HasIn>(HasIn ? in + k : in, in_ld, out + k, out_ld, b, k, decay, xdt + p, xld, L);
    for (; k + lanes <= s; k += lanes)
      ssm_commit_tile<R, 1, HasIn>(HasIn ? in + k : in, in_ld, out + k, out_ld, b, k, decay, xdt + p, xld, L);
    for (; k < s; ++k)
      for (int r = 0; r < R; ++r) {
        T v = HasIn ? in[r * in_ld + k] : T(0);
        for (std::int64_t j = 0; j < L; ++j) {
          const T t = xdt[j * xld + p + r] * b[j][k];
          v = HasIn || j > 0 ? vec_ops<T, false>::fma(decay[j], v, t) : t;
        }
        out[r * out_ld + k] = v;
      }
  };
  auto rows = [&]<bool HasIn>(std::bool_constant<HasIn> has) {
    ssm_row_blocks(P, [&]<int R>(std::integral_constant<int, R> r, std::int64_t p) { block(r, has, p); });
  };
  if (h_in != nullptr)
    rows(std::true_type{});
  else
    rows(std::false_type{});
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
  using S = vec_ops<T>;
  const std::int64_t full = P - P % S::lanes;
  for (std::int64_t p = 0; p < full; p += S::lanes) {
    auto v = S::load(acc + p) + S::load(d + p) * S::load(x + p);
    if (z != nullptr) v *= S::silu(S::load(z + p));
    S::store(y + p, v);
  }
  for (std::int64_t p = full; p < P; ++p) {
    T v = acc[p] + d[p] * x[p];
    if (z != nullptr) v *= vec_ops<T, false>::silu(z[p]);
    y[p] = v;
  }
}

//! C . h for one contiguous row (vector lanes, then the scalar tail).
template <class T>
inline T ssm_dot_row(const T* h, const T* c, std::int64_t s) noexcept {
  using S = vec_ops<T>;
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

//! One MI-row x NV-vector tile of c = a b (a [m, k] row-major at lda, b
//! [k, n] row-major at ldb): NV vectors of a row of b per k, each entry
//! of a broadcast to all of them, MI x NV register accumulators (no
//! horizontal sums). Columns j .. j + NV * lanes of c.
template <int MI, int NV, class T>
inline void ssm_gemm_nn_tile(const T* a, std::int64_t lda, const T* b, std::int64_t ldb, T* c, std::int64_t ldc,
                             std::int64_t k) noexcept {
  using S = vec_ops<T>;
  using V = typename S::vec;
  V acc[MI][NV];
  SPECDEC_VEC_UNROLL
  for (int i = 0; i < MI; ++i) SPECDEC_VEC_UNROLL
  for (int v = 0; v < NV; ++v) acc[i][v] = V{};
  for (std::int64_t q = 0; q < k; ++q) {
    V bv[NV];
    SPECDEC_VEC_UNROLL
    for (int v = 0; v < NV; ++v) bv[v] = S::load(b + q * ldb + v * S::lanes);
    SPECDEC_VEC_UNROLL
    for (int i = 0; i < MI; ++i) {
      const V av = S::splat(a[i * lda + q]);
      SPECDEC_VEC_UNROLL
      for (int v = 0; v < NV; ++v) acc[i][v] = S::fma(av, bv[v], acc[i][v]);
    }
  }
  SPECDEC_VEC_UNROLL
  for (int i = 0; i < MI; ++i) SPECDEC_VEC_UNROLL
  for (int v = 0; v < NV; ++v) S::store(c + i * ldc + v * S::lanes, acc[i][v]);
}

//! Vectors per tile of ssm_gemm_nn: 32 bytes of columns or one vector if
//! wider (one vector of 32 or 64 bytes, two of 16, 32 / sizeof(T) scalars
//! without host vectors), so that 8 / NV rows give eight accumulators.
template <class T>
inline constexpr int gemm_nn_vectors = sizeof(typename vec_ops<T>::vec) >= 32
                                           ? 1
                                           : static_cast<int>(32 / sizeof(typename vec_ops<T>::vec));

//! Columns ssm_gemm_nn takes at a time: n must be a multiple (pad).
template <class T>
inline constexpr std::int64_t gemm_nn_columns = gemm_nn_vectors<T>* vec_ops<T>::lanes;

//! c [m, n] = a [m, k] b [k, n] (row-major, unit stride along rows), n a
//! multiple of gemm_nn_columns (pad b and c): the initial-state term h0
//! C^T of the dual scan, nodes along the vectors. Tiles of 8 / NV rows x NV
//! vectors (NV = gemm_nn_vectors), twice as wide where the target has 32
//! vector registers (16 accumulators: the dual form's eight h0 GEMMs at N =
//! 64 went 86 -> 73 us on a Zen 4 core), then single
//! rows. Every output entry is one chain of fused multiply-adds over k in
//! order whatever its tile, so a column's values do not depend on its
//! position (a tree's node order) or on the tiling.
template <class T>
inline void ssm_gemm_nn(const T* a, std::int64_t lda, const T* b, std::int64_t ldb, T* c, std::int64_t ldc,
                        std::int64_t m, std::int64_t n, std::int64_t k) noexcept {
  constexpr int NV = gemm_nn_vectors<T>;
  constexpr int MI = 8 / NV > 0 ? 8 / NV : 1;
  constexpr std::int64_t cols = gemm_nn_columns<T>;
  auto rows = [&]<int R>(std::integral_constant<int, R>, std::int64_t i) {
    std::int64_t j = 0;
    if constexpr (SPECDEC_HOST_VEC_REGS >= 32)
      for (; j + 2 * cols <= n; j += 2 * cols)
        ssm_gemm_nn_tile<R, 2 * NV>(a + i * lda, lda, b + j, ldb, c + i * ldc + j, ldc, k);
    for (; j < n; j += cols) ssm_gemm_nn_tile<R, NV>(a + i * lda, lda, b + j, ldb, c + i * ldc + j, ldc, k);
  };
  std::int64_t i = 0;
  for (; i + MI <= m; i += MI) rows(std::integral_constant<int, MI>{}, i);
  for (; i < m; ++i) rows(std::integral_constant<int, 1>{}, i);
}

//! y[p] += sum over e < count of w[e] * x[node[e] * ld + p], p < P: the
//! pair sums of the dual scan, up to eight vectors of y held in registers
//! through all the terms (each term one load and one fused multiply-add
//! per vector, eight independent chains); per entry the terms are added in
//! order e = 0, 1, ...
template <class T, class Index>
inline void ssm_weighted_rows(const T* w, const Index* node, std::int64_t count, const T* x, std::int64_t ld, T* y,
                              std::int64_t P) noexcept {
  using S = vec_ops<T>;
  using V = typename S::vec;
  constexpr std::int64_t L = S::lanes;
  auto chunk = [&]<int NV>(std::integral_constant<int, NV>, std::int64_t p) {
    V acc[NV];
    SPECDEC_VEC_UNROLL
    for (int v = 0; v < NV; ++v) acc[v] = S::load(y + p + v * L);
    for (std::int64_t e = 0; e < count; ++e) {
      const V wv = S::splat(w[e]);
      const T* xr = x + static_cast<std::int64_t>(node[e]) * ld + p;
      SPECDEC_VEC_UNROLL
      for (int v = 0; v < NV; ++v) acc[v] = S::fma(wv, S::load(xr + v * L), acc[v]);
    }
    SPECDEC_VEC_UNROLL
    for (int v = 0; v < NV; ++v) S::store(y + p + v * L, acc[v]);
  };
  std::int64_t p = 0;
  for (; p + 8 * L <= P; p += 8 * L) chunk(std::integral_constant<int, 8>{}, p);
  for (; p + 4 * L <= P; p += 4 * L) chunk(std::integral_constant<int, 4>{}, p);
  for (; p + L <= P; p += L) chunk(std::integral_constant<int, 1>{}, p);
  for (; p < P; ++p) {
    T acc = y[p];
    for (std::int64_t e = 0; e < count; ++e)
      acc = vec_ops<T, false>::fma(w[e], x[static_cast<std::int64_t>(node[e]) * ld + p], acc);
    y[p] = acc;
  }
}

//! v[i] = exp(v[i]) over a contiguous array (vector exp, scalar tail).
template <class T>
inline void ssm_exp_inplace(T* v, std::int64_t n) noexcept {
  using S = vec_ops<T>;
  const std::int64_t full = n - n % S::lanes;
  for (std::int64_t i = 0; i < full; i += S::lanes) S::store(v + i, S::exp(S::load(v + i)));
  for (std::int64_t i = full; i < n; ++i) v[i] = vec_ops<T, false>::exp(v[i]);
}

//! y[p] += w * x[p] over P contiguous entries.
template <class T>
inline void ssm_axpy_row(T w, const T* x, T* y, std::int64_t P) noexcept {
  using S = vec_ops<T>;
  const auto wv = S::splat(w);
  const std::int64_t full = P - P % S::lanes;
  for (std::int64_t p = 0; p < full; p += S::lanes) S::store(y + p, S::fma(wv, S::load(x + p), S::load(y + p)));
  for (std::int64_t p = full; p < P; ++p) y[p] = vec_ops<T, false>::fma(w, x[p], y[p]);
}

}  // namespace specdec::detail
