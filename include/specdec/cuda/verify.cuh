//! \file
//! Device side of batched verification: the CUDA row-operations policy of
//! the one verification walk (verify/walk.hpp) and the kernel shell
//! around it. No walk lives here: the kernel runs the host's walk and the
//! host's request checks (verify/request_checks.hpp), one thread block per
//! request.
//!
//! The policy computes tile sums in the fixed order of sample/order.hpp:
//! one warp per tile, lane l holding the halving-tree nodes l + 32 m
//! (m = 0..7) in registers, the last five levels by warp shuffles; row
//! masses add the tile sums left to right. The inverse-CDF scan inside the
//! crossing tile is the shared detail::scan_tile, run by one thread on the
//! tile staged in shared memory. Residual updates use non-contracted float
//! operations (__fsub_rn, __fmul_rn), as the host does.
#pragma once

#include <cuda_runtime.h>

#include <cfloat>
#include <climits>
#include <cstdint>
#include <cub/block/block_reduce.cuh>
#include <type_traits>

#include "specdec/core/config.hpp"
#include "specdec/core/philox.hpp"
#include "specdec/core/status.hpp"
#include "specdec/core/workspace.hpp"
#include "specdec/cuda/check.cuh"
#include "specdec/kernels/verify.hpp"
#include "specdec/sample/order.hpp"
#include "specdec/sample/split_transform.hpp"
#include "specdec/tree/token_tree.hpp"
#include "specdec/verify/policy.hpp"
#include "specdec/verify/request_checks.hpp"
#include "specdec/verify/verify_params.hpp"
#include "specdec/verify/walk.hpp"

namespace specdec::cuda {

namespace detail {

using specdec::detail::row_ref;

struct argmax_item {
  float v;
  std::int64_t i;
};
struct argmax_op {
  SPECDEC_DEVICE argmax_item operator()(const argmax_item& a, const argmax_item& b) const {
    return specdec::detail::argmax_beats(a.v, a.i, b.v, b.i) ? a : b;
  }
};
struct max_i64_op {
  SPECDEC_DEVICE std::int64_t operator()(std::int64_t a, std::int64_t b) const { return a > b ? a : b; }
};
struct max_u64_op {
  SPECDEC_DEVICE unsigned long long operator()(unsigned long long a, unsigned long long b) const {
    return a > b ? a : b;
  }
};

//! Loads in flight per thread in an argmax scan: one block reads a whole
//! row (or chunk), so its bandwidth is what the loads in flight allow (one
//! at a time read 11 GB/s on an H200; benchmarks/results/gpu-h200-2026-11-26.md).
inline constexpr int argmax_loads = 16;

//! Merges (x, i) into this thread's argmax and NaN flag.
SPECDEC_DEVICE void argmax_take(float x, std::int64_t i, argmax_item& best, bool& nan) {
  nan |= x != x;
  if (specdec::detail::argmax_beats(x, i, best.v, best.i)) best = argmax_item{x, i};
}

//! A thread's running argmax over one stretch of a row, with 32-bit
//! indices relative to the stretch (a row is shorter than 2^31): fewer
//! registers in the scan loops, so more blocks per SM. Merged into the
//! 64-bit argmax_item once at the end.
struct argmax_local {
  float v = -INFINITY;
  std::int32_t i = INT_MAX;
  bool nan = false;
  SPECDEC_DEVICE void take(float x, std::int32_t j) {
    nan |= x != x;
    if (x > v || (x == v && j < i)) {
      v = x;
      i = j;
    }
  }
  SPECDEC_DEVICE void merge_into(std::int64_t origin, argmax_item& best, bool& any_nan) const {
    any_nan |= nan;
    if (i != INT_MAX && specdec::detail::argmax_beats(v, origin + i, best.v, best.i)) best = argmax_item{v, origin + i};
  }
};

//! Visits elements [0, n) of a row split over the block (element i0 +
//! k Block for k < K), K loads in flight per thread: load(i) -> T for all
//! K first, then take(x, i) for each. T is float or float4.
template <int Block, int K, class T, class Load, class Take>
SPECDEC_DEVICE void scan_in_flight(std::int32_t n, Load&& load, Take&& take) {
  for (std::int32_t i0 = static_cast<std::int32_t>(threadIdx.x); i0 < n; i0 += Block * K) {
    T x[K];
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const std::int32_t i = i0 + k * Block;
      x[k] = i < n ? load(i) : T{};
    }
#pragma unroll
    for (int k = 0; k < K; ++k) {
      if (i0 + k * Block >= n) break;
      take(x[k], i0 + k * Block);
    }
  }
}

//! thread_argmax one element at a time (any column stride).
template <int Block>
SPECDEC_DEVICE void thread_argmax_strided(row_ref r, std::int64_t lo, std::int64_t hi, argmax_item& best, bool& nan) {
  const row_ref d = r.shifted(lo);
  argmax_local loc;
  scan_in_flight<Block, argmax_loads, float>(
      static_cast<std::int32_t>(hi - lo), [&](std::int32_t i) { return d[i]; },
      [&](float x, std::int32_t i) { loc.take(x, i); });
  loc.merge_into(lo, best, nan);
}

//! thread_argmax over contiguous elements of type E (float, or the bits of
//! bf16 / fp16 widened exactly by `widen`), read as 16-byte vectors from
//! the first aligned element, the unaligned ends one element at a time.
//! Needs hi - lo >= 16 / sizeof(E).
template <int Block, class E, class Widen>
SPECDEC_DEVICE void thread_argmax_vectors(const E* f, std::int64_t lo, std::int64_t hi, Widen widen, argmax_item& best,
                                          bool& nan) {
  constexpr int per = 16 / static_cast<int>(sizeof(E));  // elements per vector
  using vec = std::conditional_t<sizeof(E) == 4, float4, uint4>;
  const auto addr = reinterpret_cast<std::uintptr_t>(f + lo);
  const auto skew = static_cast<std::int64_t>((addr / sizeof(E)) % per);
  const std::int64_t a = lo + (skew == 0 ? 0 : per - skew);  // first 16-byte aligned element
  const auto m = static_cast<std::int32_t>((hi - a) / per);
  const std::int64_t b = a + per * static_cast<std::int64_t>(m);
  // The unaligned ends: at most per - 1 elements each.
  if (threadIdx.x < a - lo) argmax_take(widen(f[lo + threadIdx.x]), lo + threadIdx.x, best, nan);
  if (threadIdx.x < hi - b) argmax_take(widen(f[b + threadIdx.x]), b + threadIdx.x, best, nan);
  const auto* v = reinterpret_cast<const vec*>(f + a);
  argmax_local loc;
  // The same bytes in flight per thread for every element type.
  scan_in_flight<Block, argmax_loads * 4 / 16, vec>(
      m, [&](std::int32_t j) { return v[j]; },
      [&](const vec& x, std::int32_t j) {
        if constexpr (sizeof(E) == 4) {
          loc.take(x.x, 4 * j);
          loc.take(x.y, 4 * j + 1);
          loc.take(x.z, 4 * j + 2);
          loc.take(x.w, 4 * j + 3);
        } else {
          // Little-endian: element 2k is the low half of word k.
          const unsigned w[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
          for (int k = 0; k < 4; ++k) {
            loc.take(widen(static_cast<std::uint16_t>(w[k] & 0xffffu)), 8 * j + 2 * k);
            loc.take(widen(static_cast<std::uint16_t>(w[k] >> 16)), 8 * j + 2 * k + 1);
          }
        }
      });
  loc.merge_into(a, best, nan);
}

//! This thread's share of the argmax of r[lo, hi), merged into best, NaNs
//! into nan. The merge is a total order, so any split of a row (and any
//! order within a thread) merges to the row's argmax. Contiguous rows read
//! as stored are read as 16-byte vectors (fp32 rows with scalar loads read
//! 1.74 TB/s at batch 64, V 128256, 64 nodes on an H100, against 2.75 for a
//! copy; bf16 rows with scalar loads 0.56 TB/s against 3.8 on an H200,
//! benchmarks/results/gpu-h200-2026-11-30.md); strided and logits rows
//! one element at a time.
template <int Block>
SPECDEC_DEVICE void thread_argmax(row_ref r, std::int64_t lo, std::int64_t hi, argmax_item& best, bool& nan) {
  if (r.s == 1 && r.x == nullptr) {
    if (r.t == row_dtype::f32 && hi - lo >= 8 && reinterpret_cast<std::uintptr_t>(r.d) % sizeof(float) == 0) {
      thread_argmax_vectors<Block>(
          static_cast<const float*>(r.d), lo, hi, [](float x) { return x; }, best, nan);
      return;
    }
    const auto* h = static_cast<const std::uint16_t*>(r.d);
    if (r.t != row_dtype::f32 && hi - lo >= 16 && reinterpret_cast<std::uintptr_t>(h) % sizeof(std::uint16_t) == 0) {
      if (r.t == row_dtype::bf16)
        thread_argmax_vectors<Block>(
            h, lo, hi, [](std::uint16_t x) { return specdec::detail::widen_bf16(x); }, best, nan);
      else
        thread_argmax_vectors<Block>(
            h, lo, hi, [](std::uint16_t x) { return specdec::detail::widen_f16(x); }, best, nan);
      return;
    }
  }
  thread_argmax_strided<Block>(r, lo, hi, best, nan);
}

//! The CUDA row-operations policy: every pass is called by all Block
//! threads of the block with the same arguments, returns the same value to
//! all of them, and ends with a barrier (its writes are then visible).
template <int Block>
struct block_row_ops {
  static_assert(Block % 32 == 0 && Block >= 32, "whole warps");
  static constexpr int warps = Block / 32;
  using reduce_d = cub::BlockReduce<double, Block>;
  using reduce_a = cub::BlockReduce<argmax_item, Block>;
  using reduce_l = cub::BlockReduce<std::int64_t, Block>;
  struct storage {
    union {
      typename reduce_d::TempStorage rd;
      typename reduce_a::TempStorage ra;
      typename reduce_l::TempStorage rl;
      float tile[sum_tile];  // the crossing tile of a sample
    } tmp;
    double d;
    std::int64_t l;
    std::int32_t code;
  };
  storage& sh;
  //! The greedy pre-pass's partials of this request (null: argmax scans the
  //! row): `splits` per row, rows of p at base + u * rs (column stride cs).
  const kernels::verify_argmax_partial* table = nullptr;
  const void* base = nullptr;
  std::int64_t rs = 0, cs = 1;
  row_dtype p_type = row_dtype::f32;
  std::int32_t rows = 0, splits = 0;
  //! The tile pre-pass's entries of this request (null: masses scan the
  //! row): rows u of p (k = 0) and q (k = 1) at entry 2 u + k; q's rows at
  //! q_base as p's are at base.
  const unsigned char* tile_table = nullptr;
  const void* q_base = nullptr;
  std::int64_t q_rs = 0, q_cs = 1;
  row_dtype q_type = row_dtype::f32;
  //! Logits rows: the transforms of p's and q's rows (walk_rows::p_x,
  //! q_x). A row's entry is used only when it reads through its own
  //! transform, so a q aliasing p's storage under other settings scans.
  const row_transform* p_x = nullptr;
  const row_transform* q_x = nullptr;

  //! One warp's sum of tile t of K element streams (valid in lane 0).
  template <int K, class Elem>
  SPECDEC_DEVICE static void warp_tile(std::int64_t V, Elem& elem, std::int64_t t, int lane, double (&v)[K],
                                       bool (&ng)[K]) {
    const std::int64_t base = t * sum_tile;
    double b[K][8];
#pragma unroll
    for (int mm = 0; mm < 8; ++mm) {
      const std::int64_t j = base + lane + 32 * mm;
      const std::int64_t idx[4] = {j, j + 512, j + 256, j + 768};
      float w[4][K];
#pragma unroll
      for (int a = 0; a < 4; ++a) {
        float x[K];
        for (int k = 0; k < K; ++k) x[k] = 0.0f;
        if (idx[a] < V) elem(idx[a], x);
        for (int k = 0; k < K; ++k) {
          ng[k] |= x[k] < 0.0f;
          w[a][k] = x[k];
        }
      }
      for (int k = 0; k < K; ++k)
        b[k][mm] = static_cast<double>(__fadd_rn(__fadd_rn(w[0][k], w[1][k]), __fadd_rn(w[2][k], w[3][k])));
    }
    for (int k = 0; k < K; ++k) {
      // Halving levels 128, 64, 32 in registers, 16..1 across lanes.
      for (int mm = 0; mm < 4; ++mm) b[k][mm] = __dadd_rn(b[k][mm], b[k][mm + 4]);
      for (int mm = 0; mm < 2; ++mm) b[k][mm] = __dadd_rn(b[k][mm], b[k][mm + 2]);
      double x = __dadd_rn(b[k][0], b[k][1]);
      for (int off = 16; off >= 1; off /= 2) x = __dadd_rn(x, __shfl_down_sync(0xFFFFFFFFu, x, off));
      v[k] = x;
    }
  }

  //! Tile sums of K element streams: elem(i, x) fills x[0..K) for element
  //! i < V (it may write R[i]; each element is visited by one thread once).
  //! Writes tiles[k][t], returns the masses in m[k]; neg[k]: some x < 0.
  template <int K, class Elem>
  SPECDEC_DEVICE void tile_pass(std::int64_t V, Elem elem, double* const (&tiles)[K], double (&m)[K],
                                bool (&neg)[K]) const {
    const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
    const std::int64_t nt = sum_tile_count(V);
    bool ng[K];
    for (int k = 0; k < K; ++k) ng[k] = false;
    for (std::int64_t t = warp; t < nt; t += warps) {
      double v[K];
      warp_tile<K>(V, elem, t, lane, v, ng);
      if (lane == 0)
        for (int k = 0; k < K; ++k) tiles[k][t] = v[k];
    }
    for (int k = 0; k < K; ++k) neg[k] = __syncthreads_or(ng[k]) != 0;  // also publishes tiles and R
    for (int k = 0; k < K; ++k) m[k] = specdec::detail::sum_tiles(tiles[k], nt);
  }

  SPECDEC_DEVICE static bool finite(double x) { return x - x == 0.0; }

  //! Calls f with a reader of each row: plain fp32 loads when both rows are
  //! contiguous fp32 read as stored, else row_ref's reads (any type, stride
  //! or transform). One dispatch per pass, not branches per element: with
  //! row_ref's transform branch, sm_90 code issued each element's q load
  //! only after its p load had arrived (two memory round trips per element
  //! in the residual pass; sampled verification measured 1.4-4x slower than
  //! before the transform existed, benchmarks/results/gpu-h200-2026-11-30.md).
  //! Only the common case gets its own loop: a raw() loop for every type
  //! kept 64-bit offsets of all 32 elements of a tile live and doubled the
  //! walk kernel's registers.
  template <class F>
  SPECDEC_DEVICE static void with_readers(row_ref p, row_ref q, F&& f) {
    const float* pf = p.contiguous_f32();
    const float* qf = q.contiguous_f32();
    if (pf != nullptr && qf != nullptr)
      f([pf](std::int64_t i) { return pf[i]; }, [qf](std::int64_t i) { return qf[i]; });
    else
      f([&](std::int64_t i) { return p[i]; }, [&](std::int64_t i) { return q[i]; });
  }

  SPECDEC_DEVICE_OUTLINED bool mass(row_ref r, std::int64_t V, double* tiles, double& m) const {
    if (const unsigned char* e = tiles_entry(r, V); e != nullptr) {
      // The pre-pass summed this row's tiles: copy them, no row read.
      const std::int64_t nt = sum_tile_count(V);
      const auto* sums = reinterpret_cast<const double*>(e);
      const auto* negative = reinterpret_cast<const std::int32_t*>(e + nt * static_cast<std::int64_t>(sizeof(double)));
      bool ng = false;
      for (std::int64_t i = threadIdx.x; i < nt; i += Block) {
        tiles[i] = sums[i];
        ng |= negative[i] != 0;
      }
      const bool neg = __syncthreads_or(ng) != 0;  // also publishes tiles
      m = specdec::detail::sum_tiles(tiles, nt);
      return finite(m) && !neg;
    }
    double* const t[1] = {tiles};
    double mm[1];
    bool ng[1];
    tile_pass<1>(
        V, [&](std::int64_t i, float(&x)[1]) { x[0] = r[i]; }, t, mm, ng);
    m = mm[0];
    return finite(m) && !ng[0];
  }

  SPECDEC_DEVICE_OUTLINED void first_residual(row_ref p, row_ref q, float* R, std::int64_t V, double* tp, double* tq,
                                              double* tr, double& mp, double& mq, double& mr, bool& okp,
                                              bool& okq) const {
    double* const t[3] = {tp, tq, tr};
    double mm[3];
    bool ng[3];
    with_readers(p, q, [&](auto rp, auto rq) {
      tile_pass<3>(
          V,
          [&](std::int64_t i, float(&x)[3]) {
            x[0] = rp(i);
            x[1] = rq(i);
            const float d = __fsub_rn(x[0], x[1]);
            x[2] = d > 0.0f ? d : 0.0f;
            R[i] = x[2];
          },
          t, mm, ng);
    });
    mp = mm[0];
    mq = mm[1];
    mr = mm[2];
    okp = finite(mp) && !ng[0];
    okq = finite(mq) && !ng[1];
  }

  SPECDEC_DEVICE_OUTLINED double update_residual(row_ref q, float* R, float s, std::int64_t V, double* tr) const {
    double* const t[1] = {tr};
    double mm[1];
    bool ng[1];
    with_readers(q, q, [&](auto, auto rq) {
      tile_pass<1>(
          V,
          [&](std::int64_t i, float(&x)[1]) {
            const float d = __fsub_rn(R[i], __fmul_rn(s, rq(i)));
            x[0] = d > 0.0f ? d : 0.0f;
            R[i] = x[0];
          },
          t, mm, ng);
    });
    return mm[0];
  }

  //! Largest index with a positive entry, or -1.
  SPECDEC_DEVICE_OUTLINED token_id last_positive(row_ref r, std::int64_t V) const {
    std::int64_t lp = -1;
    for (std::int64_t i = threadIdx.x; i < V; i += Block)
      if (r[i] > 0.0f) lp = i;
    const std::int64_t a = reduce_l(sh.tmp.rl).Reduce(lp, max_i64_op{});
    if (threadIdx.x == 0) sh.l = a;
    __syncthreads();
    const std::int64_t out = sh.l;
    __syncthreads();
    return static_cast<token_id>(out);
  }

  //! The scan of sample/order.hpp inside tile t: the tile staged in
  //! shared memory, scanned by thread 0 with the shared detail::scan_tile.
  SPECDEC_DEVICE_OUTLINED token_id scan_tile(row_ref r, std::int64_t V, std::int64_t t, double c, double target) const {
    const std::int64_t begin = t * sum_tile;
    const std::int64_t n = V - begin < sum_tile ? V - begin : sum_tile;
    for (std::int64_t i = threadIdx.x; i < n; i += Block) sh.tmp.tile[i] = r[begin + i];
    __syncthreads();
    if (threadIdx.x == 0)
      sh.l = specdec::detail::scan_tile([&](std::int64_t i) { return sh.tmp.tile[i]; }, begin, n, c, target);
    __syncthreads();
    const std::int64_t y = sh.l;
    __syncthreads();
    return static_cast<token_id>(y);
  }

  //! The sample of sample/order.hpp: tiles located by every thread, the
  //! crossing tile scanned by scan_tile.
  SPECDEC_DEVICE_OUTLINED token_id sample(row_ref r, std::int64_t V, const double* tiles, double target) const {
    const std::int64_t count = sum_tile_count(V);
    std::int64_t t = 0;
    double c = 0.0;
    while (specdec::detail::locate_tile(tiles, count, target, t, c)) {
      const token_id y = scan_tile(r, V, t, c, target);
      if (y >= 0) return y;
      c = __dadd_rn(c, tiles[t++]);
    }
    return last_positive(r, V);
  }

  //! Sum of tile t of a row (fixed order), computed by warp 0.
  SPECDEC_DEVICE_OUTLINED double tile_sum(row_ref r, std::int64_t V, std::int64_t t) const {
    if (threadIdx.x < 32) {
      double v[1];
      bool ng[1] = {false};
      auto elem = [&](std::int64_t i, float(&x)[1]) { x[0] = r[i]; };
      warp_tile<1>(V, elem, t, static_cast<int>(threadIdx.x), v, ng);
      if (threadIdx.x == 0) sh.d = v[0];
    }
    __syncthreads();
    const double out = sh.d;
    __syncthreads();
    return out;
  }

  //! Row u of the argmax table when r is row u of this request's p, else -1.
  SPECDEC_DEVICE std::int64_t table_row(row_ref r) const {
    return table == nullptr ? -1 : kernels::verify_row_index(r, base, rs, cs, p_type, rows);
  }

  //! The tile table's entry of r (row u of p: 2 u, of q: 2 u + 1), or null.
  SPECDEC_DEVICE const unsigned char* tiles_entry(row_ref r, std::int64_t V) const {
    if (tile_table == nullptr) return nullptr;
    std::int64_t k = 0, u = kernels::verify_row_index(r, base, rs, cs, p_type, rows);
    if (u < 0) {
      k = 1;
      u = kernels::verify_row_index(r, q_base, q_rs, q_cs, q_type, rows);
    }
    if (u < 0) return nullptr;
    const row_transform* x = k == 0 ? p_x : q_x;
    if (r.x != (x == nullptr ? nullptr : x + u)) return nullptr;
    return tile_table + (2 * u + k) * kernels::verify_tiles_row_bytes(static_cast<std::int32_t>(V));
  }

  //! Merges each row's `splits` partials into its first (a warp per row,
  //! all rows at once), so that a walk step reads one entry instead of
  //! merging while the block waits. Call once, by all threads, before the
  //! walk; the merge is a total order, so the result is the row's argmax.
  SPECDEC_DEVICE void merge_table(kernels::verify_argmax_partial* t) const {
    const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
    for (std::int32_t u = warp; u < rows; u += warps) {
      kernels::verify_argmax_partial* row = t + static_cast<std::int64_t>(u) * splits;
      argmax_item best{-INFINITY, LLONG_MAX};
      bool nan = false;
      for (std::int32_t c = lane; c < splits; c += 32) {
        const kernels::verify_argmax_partial e = row[c];
        nan |= e.nan != 0;
        if (e.i >= 0 && specdec::detail::argmax_beats(e.v, e.i, best.v, best.i)) best = argmax_item{e.v, e.i};
      }
      for (int off = 16; off > 0; off /= 2) {
        const float ov = __shfl_down_sync(0xffffffffu, best.v, off);
        const auto oi = static_cast<std::int64_t>(__shfl_down_sync(0xffffffffu, static_cast<long long>(best.i), off));
        if (specdec::detail::argmax_beats(ov, oi, best.v, best.i)) best = argmax_item{ov, oi};
      }
      const bool any_nan = __any_sync(0xffffffffu, nan) != 0;
      if (lane == 0)
        row[0] = kernels::verify_argmax_partial{best.v, best.i == LLONG_MAX ? -1 : static_cast<std::int32_t>(best.i),
                                                any_nan ? 1 : 0, 0};
    }
    __syncthreads();
  }

  SPECDEC_DEVICE_OUTLINED bool argmax(row_ref r, std::int64_t V, token_id& a) const {
    if (const std::int64_t u = table_row(r); u >= 0) {
      // merge_table left the row's argmax in its first partial.
      const kernels::verify_argmax_partial e = table[u * splits];
      a = static_cast<token_id>(e.i < 0 ? 0 : e.i);
      __syncthreads();  // every pass ends with a barrier
      return e.nan == 0;
    }
    argmax_item best{-INFINITY, LLONG_MAX};
    bool nan = false;
    thread_argmax<Block>(r, 0, V, best, nan);
    const bool any_nan = __syncthreads_or(nan) != 0;
    const argmax_item b = reduce_a(sh.tmp.ra).Reduce(best, argmax_op{});
    if (threadIdx.x == 0) sh.l = b.i;
    __syncthreads();
    a = static_cast<token_id>(sh.l);
    __syncthreads();
    return !any_nan;
  }

  SPECDEC_DEVICE_OUTLINED bool entropy(row_ref r, std::int64_t V, double* tiles, double& m, double& plogp) const {
    if (!mass(r, V, tiles, m)) return false;
    double h = 0.0;
    for (std::int64_t i = threadIdx.x; i < V; i += Block) {
      const float x = r[i];
      if (x > 0.0f) h += static_cast<double>(x) * log(static_cast<double>(x));
    }
    const double s = reduce_d(sh.tmp.rd).Sum(h);
    if (threadIdx.x == 0) sh.d = s;
    __syncthreads();
    plogp = sh.d;
    __syncthreads();
    return true;
  }

  SPECDEC_DEVICE_OUTLINED status_code classify(row_ref r, std::int64_t V) const {
    bool nf = false, ng = false;
    for (std::int64_t i = threadIdx.x; i < V; i += Block) {
      const float x = r[i];
      nf |= !(x - x == x - x);
      ng |= x < 0.0f;
    }
    const bool any_nf = __syncthreads_or(nf) != 0, any_ng = __syncthreads_or(ng) != 0;
    return any_nf   ? status_code::non_finite
           : any_ng ? status_code::negative_probability
                    : status_code::invalid_argument;
  }

  SPECDEC_DEVICE_OUTLINED void copy_range(row_ref r, float* R, std::int64_t begin, std::int64_t end) const {
    for (std::int64_t i = begin + threadIdx.x; i < end; i += Block) R[i] = r[i];
    __syncthreads();
  }
  SPECDEC_DEVICE void copy(row_ref r, float* R, std::int64_t V) const { copy_range(r, R, 0, V); }
  template <class T>
  SPECDEC_DEVICE void put(T* a, std::int64_t i, T v) const {
    if (threadIdx.x == 0) a[i] = v;
  }
  SPECDEC_DEVICE void sync() const { __syncthreads(); }
};

//! The logits pre-pass of one row (sample/row_transform.hpp), by a whole
//! block: the steps of the host twin make_row_transform (sample/
//! logits_rows.hpp), each pass split over the threads. Maxima and the
//! radix histograms are integer or order-free reductions; Z is the walk's
//! own tile sum (warp_tile) of the kept weights, added left to right. So
//! the constants equal the host's.
template <int Block>
struct block_transform {
  using reduce_a = cub::BlockReduce<argmax_item, Block>;
  using reduce_u = cub::BlockReduce<unsigned long long, Block>;
  struct storage {
    union {
      typename reduce_a::TempStorage ra;
      typename reduce_u::TempStorage ru;
    } tmp;
    unsigned long long hist[256];
    double tiles[kernels::verify_logits_max_vocab / sum_tile];
    unsigned long long u;
    std::int64_t i;
    float v;
    int pick;
  };

  //! Sum of f(w) over the tokens t keeps, to every thread.
  template <class F>
  SPECDEC_DEVICE static unsigned long long kept_sum(storage& sh, row_ref r, std::int64_t V, const row_transform& t,
                                                    F f) {
    unsigned long long s = 0;
    for (std::int64_t i = threadIdx.x; i < V; i += Block) {
      const float w = t.weight(r.raw(i));
      if (t.keeps(w, i)) s += f(w);
    }
    s = reduce_u(sh.tmp.ru).Sum(s);
    if (threadIdx.x == 0) sh.u = s;
    __syncthreads();
    s = sh.u;
    __syncthreads();
    return s;
  }

  //! The radix select of specdec::detail::radix_select_key: a shared
  //! histogram per digit (integer atomics: any order gives the same bins).
  template <class Weight>
  SPECDEC_DEVICE static std::uint64_t radix_select_key(storage& sh, row_ref r, std::int64_t V, const row_transform& t,
                                                       Weight wt, std::uint64_t need) {
    std::uint64_t prefix = 0;
    for (int d = 7; d >= 0; --d) {
      for (int b = static_cast<int>(threadIdx.x); b < 256; b += Block) sh.hist[b] = 0;
      __syncthreads();
      const std::uint64_t high = specdec::detail::radix_high_mask(d);
      for (std::int64_t i = threadIdx.x; i < V; i += Block) {
        const float w = t.weight(r.raw(i));
        if (!t.keeps(w, i)) continue;
        const std::uint64_t k = specdec::detail::rank_key(specdec::detail::bits_of(w), i);
        const std::uint64_t x = wt(w);
        if ((k & high) == prefix && x != 0)
          atomicAdd(&sh.hist[(k >> (8 * d)) & 255u], static_cast<unsigned long long>(x));
      }
      __syncthreads();
      if (threadIdx.x == 0) {
        std::uint64_t left = need;
        sh.pick = specdec::detail::radix_pick(reinterpret_cast<const std::uint64_t*>(sh.hist), left);
        sh.u = left;
      }
      __syncthreads();
      const int b = sh.pick;
      need = sh.u;
      __syncthreads();
      if (b < 0) return 0;
      prefix |= static_cast<std::uint64_t>(b) << (8 * d);
    }
    return prefix;
  }

  //! The transform of logits row r under sp (the same value in every thread).
  SPECDEC_DEVICE_OUTLINED static row_transform run(storage& sh, row_ref r, std::int64_t V, const sampling_params& sp) {
    row_transform t = specdec::detail::start_transform(sp);
    if (t.code != 0) return t;
    argmax_item best{-INFINITY, LLONG_MAX};
    bool bad = false;
    for (std::int64_t i = threadIdx.x; i < V; i += Block) {
      const float x = r.raw(i);
      bad |= x != x || x == INFINITY;
      if (x > -INFINITY && specdec::detail::argmax_beats(x, i, best.v, best.i)) best = argmax_item{x, i};
    }
    const bool any_bad = __syncthreads_or(bad) != 0;
    const argmax_item m = reduce_a(sh.tmp.ra).Reduce(best, argmax_op{});
    if (threadIdx.x == 0) {
      sh.v = m.v;
      sh.i = m.i;
    }
    __syncthreads();
    best = argmax_item{sh.v, sh.i};
    __syncthreads();
    if (any_bad || best.i == LLONG_MAX) {
      t.code = static_cast<std::int32_t>(any_bad ? status_code::non_finite : status_code::zero_mass);
      return t;
    }
    t.m = best.v;
    t.arg = static_cast<std::int32_t>(best.i);
    if (t.greedy != 0) return t;
    if (sp.top_k > 0 && sp.top_k < V) {
      const unsigned long long c = kept_sum(sh, r, V, t, [](float) { return 1ull; });
      if (static_cast<unsigned long long>(sp.top_k) < c)
        t.cut = radix_select_key(
            sh, r, V, t, [](float) { return std::uint64_t{1}; }, static_cast<std::uint64_t>(sp.top_k));
    }
    if (sp.top_p < 1.0f) {
      const unsigned long long q =
          kept_sum(sh, r, V, t, [](float w) { return static_cast<unsigned long long>(specdec::detail::grid_mass(w)); });
      t.cut = radix_select_key(
          sh, r, V, t, [](float w) { return specdec::detail::grid_mass(w); }, specdec::detail::top_p_goal(sp.top_p, q));
    }
    // Z: the walk's warp tile sums of the kept weights, left to right.
    const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
    const std::int64_t nt = sum_tile_count(V);
    for (std::int64_t k = warp; k < nt; k += Block / 32) {
      double v[1];
      bool ng[1] = {false};
      auto elem = [&](std::int64_t i, float(&x)[1]) { x[0] = t.kept_weight(r.raw(i), i); };
      block_row_ops<Block>::template warp_tile<1>(V, elem, k, lane, v, ng);
      if (lane == 0) sh.tiles[k] = v[0];
    }
    __syncthreads();
    t.inv_z = 1.0 / specdec::detail::sum_tiles(sh.tiles, nt);
    __syncthreads();
    return t;
  }
};

}  // namespace detail

//! Row j of request r's p (k = 0) or q (k = 1) in the logits pre-pass's
//! table (kernels::verify_transform_table_bytes).
SPECDEC_DEVICE std::size_t transform_slot(const kernels::verify_batch_params& P, std::int32_t r, std::int32_t j,
                                          int k) {
  return (static_cast<std::size_t>(k) * static_cast<std::size_t>(P.num_requests) + static_cast<std::size_t>(r)) *
             static_cast<std::size_t>(P.max_nodes) +
         static_cast<std::size_t>(j);
}

//! Request r's logits rows read through their transforms in `table`
//! (nothing without a table).
SPECDEC_DEVICE void attach_transforms(const kernels::verify_batch_params& P, std::int32_t r, const row_transform* table,
                                      specdec::walk_rows& rows) {
  if (table == nullptr) return;
  if (P.p_sampling != nullptr) rows.p_x = table + transform_slot(P, r, 0, 0);
  if (P.q_sampling != nullptr) rows.q_x = table + transform_slot(P, r, 0, 1);
}

//! The greedy pre-pass: block (c, j, r) writes the argmax of chunk c of
//! row j of request r to table[(r * max_nodes + j) * splits + c], for
//! greedy requests whose node count is in (0, max_nodes] (the others are
//! the walk's to report; their blocks return at once). Logits rows are
//! read through their transforms (`transforms`, written by the logits
//! pre-pass before this launch), so the partials are the probabilities'
//! maxima the walk would find.
template <int Block>
SPECDEC_KERNEL void __launch_bounds__(Block)
    verify_argmax_kernel(const kernels::verify_batch_params P, kernels::verify_argmax_partial* table,
                         std::int32_t splits, std::int64_t chunk, const row_transform* transforms) {
  using reduce_a = cub::BlockReduce<detail::argmax_item, Block>;
  __shared__ typename reduce_a::TempStorage tmp;
  const auto r = static_cast<std::int64_t>(blockIdx.z);
  const auto j = static_cast<std::int32_t>(blockIdx.y);
  std::int32_t b = 0, n = 0;
  if (kernels::verify_request_span(P, static_cast<std::int32_t>(r), b, n) != status_code::ok || j >= n ||
      kernels::verify_request_params(P, static_cast<std::int32_t>(r)).mode != verify_mode::greedy)
    return;
  specdec::walk_rows rows = kernels::verify_request_rows(P, b);
  attach_transforms(P, static_cast<std::int32_t>(r), transforms, rows);
  const detail::row_ref row = rows.prow(j);
  const std::int64_t lo = static_cast<std::int64_t>(blockIdx.x) * chunk;
  const std::int64_t hi = lo + chunk < P.vocab ? lo + chunk : P.vocab;
  detail::argmax_item best{-INFINITY, LLONG_MAX};
  bool nan = false;
  detail::thread_argmax<Block>(row, lo, hi, best, nan);
  const bool any_nan = __syncthreads_or(nan) != 0;
  const detail::argmax_item m = reduce_a(tmp).Reduce(best, detail::argmax_op{});
  if (threadIdx.x == 0)
    table[(r * P.max_nodes + j) * splits + blockIdx.x] =
        kernels::verify_argmax_partial{m.v, m.i < hi ? static_cast<std::int32_t>(m.i) : -1, any_nan ? 1 : 0, 0};
}

//! The tile pre-pass (kernels::verify_tiles_prepass): block (c, j, r)
//! sums tiles [c W, c W + W) of row j of request r's p (and of its q when
//! the mode reads q), W = Block / 32, one tile per warp with the walk's own
//! warp_tile, into entry (r * max_nodes + j) * 2 + k of the table, with a
//! flag per tile for an entry below zero. Logits rows (`transforms` not
//! null, after the logits pre-pass) are summed through their transforms.
//! Requests outside verify_tiles_mode, or whose span fails, are the
//! walk's to handle.
template <int Block>
SPECDEC_KERNEL void __launch_bounds__(Block)
    verify_tiles_kernel(const kernels::verify_batch_params P, unsigned char* table, const row_transform* transforms) {
  const auto r = static_cast<std::int32_t>(blockIdx.z);
  const auto j = static_cast<std::int32_t>(blockIdx.y);
  std::int32_t b = 0, n = 0;
  if (kernels::verify_request_span(P, r, b, n) != status_code::ok || j >= n) return;
  const verify_mode mode = kernels::verify_request_params(P, r).mode;
  if (!kernels::verify_tiles_mode(mode)) return;
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const std::int64_t t = static_cast<std::int64_t>(blockIdx.x) * (Block / 32) + (static_cast<int>(threadIdx.x) >> 5);
  const std::int64_t nt = sum_tile_count(P.vocab);
  if (t >= nt) return;  // whole warps
  specdec::walk_rows rows = kernels::verify_request_rows(P, b);
  attach_transforms(P, r, transforms, rows);  // logits rows: the sums of their probabilities
  const std::size_t entry = kernels::verify_tiles_row_bytes(P.vocab);
  const int kinds = P.q != nullptr && uses_draft_probs(mode) ? 2 : 1;
  for (int k = 0; k < kinds; ++k) {
    const detail::row_ref row = k == 0 ? rows.prow(j) : rows.qrow(j);
    double v[1];
    bool ng[1] = {false};
    auto elem = [&](std::int64_t i, float(&x)[1]) { x[0] = row[i]; };
    detail::block_row_ops<Block>::template warp_tile<1>(P.vocab, elem, t, lane, v, ng);
    const bool neg = __any_sync(0xFFFFFFFFu, ng[0]) != 0;
    if (lane == 0) {
      unsigned char* e = table + ((static_cast<std::size_t>(r) * P.max_nodes + j) * 2 + k) * entry;
      reinterpret_cast<double*>(e)[t] = v[0];
      reinterpret_cast<std::int32_t*>(e + nt * static_cast<std::int64_t>(sizeof(double)))[t] = neg ? 1 : 0;
    }
  }
}

//! The logits pre-pass: block (j, y) finds the row transforms of row j of
//! requests y, y + gridDim.y, ... (p under p_sampling, q under q_sampling
//! when the request's mode reads q) into the table laid out as
//! kernels::verify_transform_table_bytes says. Requests whose span fails,
//! or rows past their node count, are skipped (the walk reports them).
template <int Block>
SPECDEC_KERNEL void __launch_bounds__(Block)
    verify_transform_kernel(const kernels::verify_batch_params P, row_transform* table) {
  using bt = detail::block_transform<Block>;
  __shared__ typename bt::storage sh;
  const auto j = static_cast<std::int32_t>(blockIdx.x);
  for (auto r = static_cast<std::int32_t>(blockIdx.y); r < P.num_requests; r += static_cast<std::int32_t>(gridDim.y)) {
    std::int32_t b = 0, n = 0;
    if (kernels::verify_request_span(P, r, b, n) != status_code::ok || j >= n) continue;
    const specdec::walk_rows rows = kernels::verify_request_rows(P, b);
    if (P.p_sampling != nullptr) {
      const row_transform t = bt::run(sh, rows.prow(j), P.vocab, P.p_sampling[r]);
      if (threadIdx.x == 0) table[transform_slot(P, r, j, 0)] = t;
    }
    if (P.q_sampling != nullptr && P.q != nullptr && uses_draft_probs(kernels::verify_request_params(P, r).mode)) {
      const row_transform t = bt::run(sh, rows.qrow(j), P.vocab, P.q_sampling[r]);
      if (threadIdx.x == 0) table[transform_slot(P, r, j, 1)] = t;
    }
  }
}

//! One phase of the split logits pre-pass (sample/split_transform.hpp):
//! block (c, j, 2 r + k) reads chunk c (chunk_tiles tiles) of row j of
//! request r's p (k = 0) or q (k = 1, when its mode reads q) and adds its
//! part to the row's sums; the last block of the row to arrive (a
//! counter after a fence) takes the phase's decision with
//! finish_split_phase, clears the sums and, after the last phase, writes
//! the transform to the table. Launched once per phase in order, the sums
//! cleared before phase 0; buffers as kernels::verify_transform_split_bytes.
template <int Block>
SPECDEC_KERNEL void __launch_bounds__(Block)
    verify_transform_split_kernel(const kernels::verify_batch_params P, split_transform_sums* sums,
                                  split_transform_state* states, double* tiles, row_transform* table, int phase,
                                  std::int64_t chunk_tiles) {
  using reduce_u = cub::BlockReduce<unsigned long long, Block>;
  __shared__ typename reduce_u::TempStorage tmp;
  __shared__ unsigned long long hist[256];
  __shared__ split_transform_sums done;
  __shared__ double done_tiles[kernels::verify_logits_max_vocab / sum_tile];
  __shared__ int last;
  const auto j = static_cast<std::int32_t>(blockIdx.y);
  const auto r = static_cast<std::int32_t>(blockIdx.z >> 1);
  const int k = static_cast<int>(blockIdx.z & 1u);
  std::int32_t b = 0, n = 0;
  if (kernels::verify_request_span(P, r, b, n) != status_code::ok || j >= n) return;
  const sampling_params* sps = k == 0 ? P.p_sampling : P.q_sampling;
  if (sps == nullptr || (k == 1 && (P.q == nullptr || !uses_draft_probs(kernels::verify_request_params(P, r).mode))))
    return;
  const sampling_params sp = sps[r];
  const std::size_t row = (static_cast<std::size_t>(r) * static_cast<std::size_t>(P.max_nodes) + j) * 2 + k;
  const split_transform_state s = phase == 0 ? split_transform_state{} : states[row];
  const std::int64_t V = P.vocab;
  if (!split_phase_runs(s, sp, phase, V)) return;
  const specdec::walk_rows rows = kernels::verify_request_rows(P, b);
  const detail::row_ref x = k == 0 ? rows.prow(j) : rows.qrow(j);
  const std::int64_t nt = sum_tile_count(V);
  const std::int64_t t0 = static_cast<std::int64_t>(blockIdx.x) * chunk_tiles;
  const std::int64_t t1 = t0 + chunk_tiles < nt ? t0 + chunk_tiles : nt;
  const std::int64_t lo = t0 * sum_tile, hi = t1 * sum_tile < V ? t1 * sum_tile : V;
  split_transform_sums* acc = sums + row;
  auto* const acc_hist = reinterpret_cast<unsigned long long*>(acc->hist);
  double* const row_tiles = tiles + row * static_cast<std::size_t>(nt);
  if (split_phase_reads(s, sp, phase)) {
    if (phase == 0) {
      unsigned long long best = 0;
      bool bad = false;
      for (std::int64_t i = lo + threadIdx.x; i < hi; i += Block) {
        const float v = x.raw(i);
        const unsigned long long key = specdec::detail::split_argmax_key(v, i);
        best = key > best ? key : best;
        bad |= specdec::detail::split_bad_entry(v);
      }
      const bool any_bad = __syncthreads_or(bad) != 0;
      best = reduce_u(tmp).Reduce(best, detail::max_u64_op{});
      if (threadIdx.x == 0) {
        if (best != 0) atomicMax(reinterpret_cast<unsigned long long*>(&acc->best), best);
        if (any_bad) atomicOr(&acc->bad, 1u);
      }
    } else if (phase < split_transform_phases - 1) {
      for (int h = static_cast<int>(threadIdx.x); h < 256; h += Block) hist[h] = 0;
      __syncthreads();
      for (std::int64_t i = lo + threadIdx.x; i < hi; i += Block) {
        int bin = 0;
        const std::uint64_t a = split_hist_amount(s, phase, s.t.weight(x.raw(i)), i, bin);
        if (a != 0) atomicAdd(&hist[bin], static_cast<unsigned long long>(a));
      }
      __syncthreads();
      for (int h = static_cast<int>(threadIdx.x); h < 256; h += Block)
        if (hist[h] != 0) atomicAdd(acc_hist + h, hist[h]);
    } else {  // the tile sums of the kept weights, one warp a tile (the walk's order)
      const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
      for (std::int64_t t = t0 + warp; t < t1; t += Block / 32) {
        double v[1];
        bool ng[1] = {false};
        auto elem = [&](std::int64_t i, float(&w)[1]) { w[0] = s.t.kept_weight(x.raw(i), i); };
        detail::block_row_ops<Block>::template warp_tile<1>(V, elem, t, lane, v, ng);
        if (lane == 0) row_tiles[t] = v[0];
      }
    }
  }
  // Arrive; the last block of the row reads every block's part.
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(&acc->arrived, 1u) + 1u == gridDim.x ? 1 : 0;
  __syncthreads();
  if (last == 0) return;
  __threadfence();
  for (int h = static_cast<int>(threadIdx.x); h < 256; h += Block) done.hist[h] = __ldcg(acc_hist + h);
  if (phase == split_transform_phases - 1)
    for (std::int64_t t = threadIdx.x; t < nt; t += Block) done_tiles[t] = __ldcg(row_tiles + t);
  if (threadIdx.x == 0) {
    done.best = __ldcg(reinterpret_cast<const unsigned long long*>(&acc->best));
    done.bad = __ldcg(&acc->bad);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    split_transform_state next = s;
    finish_split_phase(next, sp, phase, V, done, done_tiles, x);
    states[row] = next;
    if (phase == split_transform_phases - 1) table[transform_slot(P, r, j, k)] = next.t;
    acc->best = 0;
    acc->bad = 0;
    acc->arrived = 0;
  }
  for (int h = static_cast<int>(threadIdx.x); h < 256; h += Block) acc_hist[h] = 0;
}

//! Trees of up to this many nodes are staged in shared memory.
inline constexpr std::int32_t verify_staged_nodes = 512;

//! The kernel: block r verifies request r (launch with Block threads and
//! grid = num_requests; workspace as kernels::verify_batch_workspace_bytes:
//! num_requests slices of kernels::verify_request_workspace_bytes, then the
//! pre-pass's table, read by greedy requests when `splits` > 0).
template <int Block>
SPECDEC_KERNEL void __launch_bounds__(Block)
    verify_batch_kernel(kernels::verify_batch_params P, unsigned char* workspace, std::int32_t splits,
                        const unsigned char* tiles, const row_transform* transforms) {
  using ops_t = detail::block_row_ops<Block>;
  static_assert(verify_row_ops<ops_t>);
  __shared__ typename ops_t::storage sh;
  const int r = static_cast<int>(blockIdx.x);
  const verify_params vp = kernels::verify_request_params(P, r);
  const std::int64_t V = P.vocab;
  auto fail = [&](status_code code) {
    if (threadIdx.x == 0) P.results[r] = verify_result{0, 0, -1, code};
  };
  // Batch-shape faults of this request (the host reports them for the
  // whole batch), before any of its nodes is read.
  std::int32_t b = 0, n = 0;
  if (const status_code span = kernels::verify_request_span(P, r, b, n); span != status_code::ok) return fail(span);
  const status params = validate_verify_params(vp);  // validated once per request
  if (params.ok() && !runs_on_device(vp.mode)) return fail(status_code::unsupported);
  if (const status_code sc = kernels::verify_request_sampling(P, r, vp.mode, n); params.ok() && sc != status_code::ok)
    return fail(sc);

  const std::size_t slice = kernels::verify_request_workspace_bytes(P.vocab, P.max_nodes);
  workspace_carver w(workspace + slice * static_cast<std::size_t>(r), slice);
  const specdec::walk_scratch s = specdec::carve_walk_scratch(w, V, n);
  // Trees of up to verify_staged_nodes nodes are checked and walked from
  // shared memory: the checks (one thread) and the walk's child searches
  // read the parent array one node at a time.
  __shared__ node_id staged_parent[verify_staged_nodes];
  __shared__ token_id staged_token[verify_staged_nodes];
  __shared__ std::int32_t staged_depth[verify_staged_nodes];
  const bool staged = n <= verify_staged_nodes;
  if (staged) {
    for (std::int32_t i = static_cast<std::int32_t>(threadIdx.x); i < n; i += Block) {
      staged_parent[i] = P.parent[b + i];
      staged_token[i] = P.token[b + i];
    }
    __syncthreads();
  }
  const token_id* tok = staged ? staged_token : P.token + b;
  const node_id* par = staged ? staged_parent : P.parent + b;
  if (threadIdx.x == 0)
    sh.code = static_cast<std::int32_t>(
        (params.ok() ? specdec::detail::check_request_tree(par, tok, n, V, vp, P.q != nullptr, P.out_stride,
                                                           staged ? staged_depth : s.depth)
                     : params)
            .code());
  __syncthreads();
  const auto pre = static_cast<status_code>(sh.code);
  if (pre != status_code::ok) return fail(pre);
  if (staged)
    for (std::int32_t i = static_cast<std::int32_t>(threadIdx.x); i < n; i += Block) s.depth[i] = staged_depth[i];
  __syncthreads();

  specdec::walk_rows rows = kernels::verify_request_rows(P, b);
  attach_transforms(P, r, transforms, rows);
  const parent_topology topo{tok, par, n};
  specdec::walk_out o{s.path, n, 0, 0, -1};
  const bool use_table = splits > 0 && vp.mode == verify_mode::greedy;
  const std::size_t slices = slice * static_cast<std::size_t>(P.num_requests);
  auto* const table = use_table ? reinterpret_cast<kernels::verify_argmax_partial*>(workspace + slices) +
                                      static_cast<std::int64_t>(r) * P.max_nodes * splits
                                : nullptr;
  const unsigned char* own_tiles =
      tiles != nullptr && kernels::verify_tiles_mode(vp.mode)
          ? tiles + static_cast<std::size_t>(r) * P.max_nodes * 2 * kernels::verify_tiles_row_bytes(P.vocab)
          : nullptr;
  const ops_t ops{sh,        table,  rows.p,         P.p_row_stride, P.p_col_stride, P.p_dtype, n,       splits,
                  own_tiles, rows.q, P.q_row_stride, P.q_col_stride, P.q_dtype,      rows.p_x,  rows.q_x};
  if (table != nullptr) ops.merge_table(table);
  const status st =
      P.uniforms != nullptr
          ? specdec::verify_walk(
                topo, ops,
                caller_uniforms{P.uniforms + static_cast<std::int64_t>(b) * P.draws_per_node, n, P.draws_per_node}, vp,
                rows, s, o)
          : specdec::verify_walk(topo, ops, philox_uniforms{rng_stream{vp.seed, vp.request, vp.round}}, vp, rows, s, o);
  if (!st.ok()) return fail(st.code());
  __syncthreads();  // the path written by thread 0
  if (threadIdx.x == 0) {
    node_id* path = P.paths + static_cast<std::int64_t>(r) * P.out_stride;
    token_id* out = P.tokens + static_cast<std::int64_t>(r) * P.out_stride;
    for (std::int32_t k = 0; k <= o.accepted; ++k) {
      path[k] = s.path[k];
      if (k > 0) out[k - 1] = tok[s.path[k]];
    }
    out[o.accepted] = o.next;
    P.results[r] = verify_result{o.accepted, o.last, o.next, status_code::ok};
    if (P.accepted_per_depth != nullptr)
      for (std::int32_t d = 1; d <= o.accepted && d <= P.depth_counters; ++d)
        atomicAdd(P.accepted_per_depth + (d - 1), 1ull);
  }
}

//! Threads per block of the verification kernel.
inline constexpr int verify_block_threads = 256;

//! Checks (kernels::verify_batch_can_implement, workspace size and
//! alignment) and launches verify_batch_kernel on `stream`. The entry point
//! for engines that compile this header themselves.
inline status verify_batch(const kernels::verify_batch_params& P, void* workspace, std::size_t workspace_bytes,
                           cudaStream_t stream) noexcept {
  SPECDEC_TRY(kernels::verify_batch_can_implement(P));
  if (P.num_requests == 0) return status::success();
  SPECDEC_TRY(check_workspace(workspace, workspace_bytes, kernels::verify_batch_workspace_size(P),
                              "workspace smaller than verify_batch_workspace_size"));
  auto* ws = static_cast<unsigned char*>(workspace);
  // Logits rows: the transform pre-pass runs first, so that the greedy and
  // tile pre-passes read the rows through their transforms.
  const bool logits = kernels::verify_logits_rows(P);
  row_transform* transforms = nullptr;
  if (logits) {
    transforms = reinterpret_cast<row_transform*>(
        ws + kernels::verify_request_workspace_bytes(P.vocab, P.max_nodes) * static_cast<std::size_t>(P.num_requests) +
        kernels::verify_argmax_table_bytes(P.num_requests, P.vocab, P.max_nodes) +
        kernels::verify_tiles_table_bytes(P.num_requests, P.vocab, P.max_nodes));
    if (const std::int64_t ct = kernels::verify_transform_chunk_tiles(P.num_requests, P.vocab, P.max_nodes); ct > 0) {
      // Small launches: the pre-pass split over blocks, a launch per phase.
      const std::size_t rows = static_cast<std::size_t>(P.num_requests) * static_cast<std::size_t>(P.max_nodes) * 2;
      unsigned char* at = reinterpret_cast<unsigned char*>(transforms) +
                          kernels::verify_transform_table_bytes(P.num_requests, P.max_nodes, true);
      auto* sums = reinterpret_cast<split_transform_sums*>(at);
      at += align_up(rows * sizeof(split_transform_sums));
      auto* states = reinterpret_cast<split_transform_state*>(at);
      at += align_up(rows * sizeof(split_transform_state));
      SPECDEC_TRY(from_cuda(cudaMemsetAsync(sums, 0, rows * sizeof(split_transform_sums), stream)));
      const dim3 grid(static_cast<unsigned>(split_chunk_count(P.vocab, ct)), static_cast<unsigned>(P.max_nodes),
                      static_cast<unsigned>(P.num_requests) * 2u);
      for (int phase = 0; phase < split_transform_phases; ++phase) {
        verify_transform_split_kernel<verify_block_threads><<<grid, verify_block_threads, 0, stream>>>(
            P, sums, states, reinterpret_cast<double*>(at), transforms, phase, ct);
        SPECDEC_TRY(last_launch_status());
      }
    } else {
      const unsigned ys = P.num_requests < 65535 ? static_cast<unsigned>(P.num_requests) : 65535u;
      verify_transform_kernel<verify_block_threads>
          <<<dim3(static_cast<unsigned>(P.max_nodes), ys), verify_block_threads, 0, stream>>>(P, transforms);
      SPECDEC_TRY(last_launch_status());
    }
  }
  // The greedy pre-pass (grid: chunk, node, request; CUDA's y and z limits).
  std::int32_t splits = kernels::verify_argmax_splits(P.num_requests, P.vocab, P.max_nodes);
  if (P.max_nodes > 65535 || P.num_requests > 65535) splits = 0;
  if (splits > 0) {
    const std::int64_t chunk = (static_cast<std::int64_t>(P.vocab) + splits - 1) / splits;
    auto* table = reinterpret_cast<kernels::verify_argmax_partial*>(
        ws + kernels::verify_request_workspace_bytes(P.vocab, P.max_nodes) * static_cast<std::size_t>(P.num_requests));
    verify_argmax_kernel<verify_block_threads>
        <<<dim3(static_cast<unsigned>(splits), static_cast<unsigned>(P.max_nodes),
                static_cast<unsigned>(P.num_requests)),
           verify_block_threads, 0, stream>>>(P, table, splits, chunk, transforms);
    SPECDEC_TRY(last_launch_status());
  }
  // The tile pre-pass of small launches (grid: tile chunk, node, request),
  // after the logits pre-pass: logits rows are summed as probabilities.
  unsigned char* tiles = nullptr;
  if (kernels::verify_tiles_prepass(P.num_requests, P.vocab, P.max_nodes)) {
    tiles = ws +
            kernels::verify_request_workspace_bytes(P.vocab, P.max_nodes) * static_cast<std::size_t>(P.num_requests) +
            kernels::verify_argmax_table_bytes(P.num_requests, P.vocab, P.max_nodes);
    constexpr std::int64_t per_block = verify_block_threads / 32;
    const std::int64_t chunks = (sum_tile_count(P.vocab) + per_block - 1) / per_block;
    verify_tiles_kernel<verify_block_threads><<<dim3(static_cast<unsigned>(chunks), static_cast<unsigned>(P.max_nodes),
                                                     static_cast<unsigned>(P.num_requests)),
                                                verify_block_threads, 0, stream>>>(P, tiles, transforms);
    SPECDEC_TRY(last_launch_status());
  }
  verify_batch_kernel<verify_block_threads>
      <<<static_cast<unsigned>(P.num_requests), verify_block_threads, 0, stream>>>(P, ws, splits, tiles, transforms);
  return last_launch_status();
}

}  // namespace specdec::cuda
