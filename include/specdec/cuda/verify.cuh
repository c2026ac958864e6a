//! \file
//! Device template of batched tree verification: one thread block per
//! request, vocabulary-parallel row passes (16-byte loads when a row is
//! 16-byte aligned and V % 4 == 0), CUB block reductions and scans in
//! double. The walk, the decisions and the Philox keys mirror the host
//! implementation (verify/tree_verify.hpp) line for line; see
//! kernels/verify.hpp for the equality contract.
#pragma once

#include <cuda_runtime.h>

#include <cfloat>
#include <climits>
#include <cstdint>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include "specdec/core/config.hpp"
#include "specdec/core/philox.hpp"
#include "specdec/kernels/verify.hpp"
#include "specdec/tree/token_tree.hpp"
#include "specdec/verify/verify_params.hpp"

namespace specdec::cuda {

namespace detail {

struct argmax_item {
  float v;
  int i;
};
struct argmax_op {
  SPECDEC_DEVICE argmax_item operator()(const argmax_item& a, const argmax_item& b) const {
    return (a.v > b.v || (a.v == b.v && a.i < b.i)) ? a : b;
  }
};
struct min_int_op {
  SPECDEC_DEVICE int operator()(int a, int b) const { return a < b ? a : b; }
};
struct max_int_op {
  SPECDEC_DEVICE int operator()(int a, int b) const { return a > b ? a : b; }
};

SPECDEC_DEVICE bool prob_ok(float x) { return x >= 0.0f && x <= FLT_MAX; }

SPECDEC_DEVICE bool aligned16(const void* p) { return (reinterpret_cast<std::uintptr_t>(p) & 15u) == 0; }

//! Block-wide row passes. Every function is called by all threads of the
//! block with identical arguments and returns the same value to all of them
//! (so the walk's control flow stays block-uniform).
template <int Block>
struct block_ops {
  using reduce_d = cub::BlockReduce<double, Block>;
  using reduce_i = cub::BlockReduce<int, Block>;
  using reduce_a = cub::BlockReduce<argmax_item, Block>;
  using scan_d = cub::BlockScan<double, Block>;
  struct storage {
    union {
      typename reduce_d::TempStorage rd;
      typename reduce_i::TempStorage ri;
      typename reduce_a::TempStorage ra;
      typename scan_d::TempStorage sd;
    } tmp;
    double d;
    int i;
  };
  storage& sh;

  SPECDEC_DEVICE double sum(double v) {
    const double r = reduce_d(sh.tmp.rd).Sum(v);
    if (threadIdx.x == 0) sh.d = r;
    __syncthreads();
    const double out = sh.d;
    __syncthreads();
    return out;
  }
  template <class Op>
  SPECDEC_DEVICE int reduce_int(int v, Op op) {
    const int r = reduce_i(sh.tmp.ri).Reduce(v, op);
    if (threadIdx.x == 0) sh.i = r;
    __syncthreads();
    const int out = sh.i;
    __syncthreads();
    return out;
  }

  //! f(i, x) for every element of a row, each element visited by one thread.
  template <class F>
  SPECDEC_DEVICE void each(const float* row, int V, F&& f) {
    if (aligned16(row) && (V & 3) == 0) {
      const float4* r4 = reinterpret_cast<const float4*>(row);
      for (int k = threadIdx.x; k < V / 4; k += Block) {
        const float4 v = r4[k];
        f(4 * k, v.x);
        f(4 * k + 1, v.y);
        f(4 * k + 2, v.z);
        f(4 * k + 3, v.w);
      }
    } else {
      for (int i = threadIdx.x; i < V; i += Block) f(i, row[i]);
    }
  }
  //! f(i, a[i], b[i]) with both rows read in lockstep.
  template <class F>
  SPECDEC_DEVICE void each2(const float* a, const float* b, int V, F&& f) {
    if (aligned16(a) && aligned16(b) && (V & 3) == 0) {
      const float4* a4 = reinterpret_cast<const float4*>(a);
      const float4* b4 = reinterpret_cast<const float4*>(b);
      for (int k = threadIdx.x; k < V / 4; k += Block) {
        const float4 x = a4[k], y = b4[k];
        f(4 * k, x.x, y.x);
        f(4 * k + 1, x.y, y.y);
        f(4 * k + 2, x.z, y.z);
        f(4 * k + 3, x.w, y.w);
      }
    } else {
      for (int i = threadIdx.x; i < V; i += Block) f(i, a[i], b[i]);
    }
  }

  //! Validates a probability row and returns its mass; false on a bad entry.
  SPECDEC_DEVICE bool mass(const float* row, int V, double& m) {
    double a = 0.0;
    bool ok = true;
    each(row, V, [&](int, float x) {
      ok &= prob_ok(x);
      a += static_cast<double>(x);
    });
    const bool all = __syncthreads_and(ok) != 0;
    m = sum(a);
    return all;
  }
  SPECDEC_DEVICE void mass2(const float* p, const float* q, int V, double& mp, double& mq, bool& okp, bool& okq) {
    double ap = 0.0, aq = 0.0;
    bool op = true, oq = true;
    each2(p, q, V, [&](int, float x, float y) {
      op &= prob_ok(x);
      oq &= prob_ok(y);
      ap += static_cast<double>(x);
      aq += static_cast<double>(y);
    });
    okp = __syncthreads_and(op) != 0;
    okq = __syncthreads_and(oq) != 0;
    mp = sum(ap);
    mq = sum(aq);
  }
  //! R = max(p - q, 0) (one float subtraction, as on the host).
  SPECDEC_DEVICE void first_residual(const float* p, const float* q, float* R, int V, double& mp, double& mq,
                                     double& mr, bool& okp, bool& okq) {
    double ap = 0.0, aq = 0.0, ar = 0.0;
    bool op = true, oq = true;
    each2(p, q, V, [&](int i, float x, float y) {
      op &= prob_ok(x);
      oq &= prob_ok(y);
      ap += static_cast<double>(x);
      aq += static_cast<double>(y);
      const float d = __fsub_rn(x, y);
      const float r = d > 0.0f ? d : 0.0f;
      R[i] = r;
      ar += static_cast<double>(r);
    });
    okp = __syncthreads_and(op) != 0;
    okq = __syncthreads_and(oq) != 0;
    mp = sum(ap);
    mq = sum(aq);
    mr = sum(ar);
  }
  //! R = max(R - s q, 0) in float with s rounded to float once, product and
  //! difference rounded separately (no FMA), as on the host.
  SPECDEC_DEVICE double update_residual(const float* q, float* R, double s, int V) {
    double ar = 0.0;
    const float sf = __double2float_rn(s);
    each2(R, q, V, [&](int i, float r0, float y) {
      const float d = __fsub_rn(r0, __fmul_rn(sf, y));
      const float r = d > 0.0f ? d : 0.0f;
      R[i] = r;
      ar += static_cast<double>(r);
    });
    __syncthreads();
    return sum(ar);
  }
  //! Argmax, lowest id on ties; false when the row holds a NaN.
  SPECDEC_DEVICE bool argmax(const float* row, int V, int& arg) {
    argmax_item best{-INFINITY, INT_MAX};
    bool ok = true;
    each(row, V, [&](int i, float x) {
      ok &= x == x;
      if (x > best.v || (x == best.v && i < best.i)) best = argmax_item{x, i};
    });
    const bool all = __syncthreads_and(ok) != 0;
    const argmax_item r = reduce_a(sh.tmp.ra).Reduce(best, argmax_op{});
    if (threadIdx.x == 0) sh.i = r.i;
    __syncthreads();
    arg = sh.i;
    __syncthreads();
    return all;
  }
  //! Mass and sum of p log p.
  SPECDEC_DEVICE bool entropy(const float* row, int V, double& m, double& plogp) {
    double a = 0.0, h = 0.0;
    bool ok = true;
    each(row, V, [&](int, float x) {
      ok &= prob_ok(x);
      if (x > 0.0f) {
        const double d = static_cast<double>(x);
        a += d;
        h += d * log(d);
      }
    });
    const bool all = __syncthreads_and(ok) != 0;
    m = sum(a);
    plogp = sum(h);
    return all;
  }
  //! Last index with a positive entry, or -1.
  SPECDEC_DEVICE int last_positive(const float* row, int V) {
    int lp = -1;
    each(row, V, [&](int i, float x) {
      if (x > 0.0f && i > lp) lp = i;
    });
    return reduce_int(lp, max_int_op{});
  }
  //! Inverse CDF: tiles of Block * 4 elements, 4 contiguous per thread;
  //! an exclusive block scan of the per-thread sums locates the thread whose
  //! range crosses `target`, which then walks its 4 entries (strict <,
  //! zero entries skipped). Falls back to the last positive entry.
  SPECDEC_DEVICE int sample(const float* row, int V, double target) {
    const bool vec = aligned16(row) && (V & 3) == 0;
    double c = 0.0;
    for (int base = 0; base < V; base += Block * 4) {
      const int i0 = base + static_cast<int>(threadIdx.x) * 4;
      float x[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      if (vec && i0 < V) {
        const float4 v = *reinterpret_cast<const float4*>(row + i0);
        x[0] = v.x;
        x[1] = v.y;
        x[2] = v.z;
        x[3] = v.w;
      } else {
        for (int k = 0; k < 4; ++k)
          if (i0 + k < V) x[k] = row[i0 + k];
      }
      double own = 0.0;
      for (int k = 0; k < 4; ++k)
        if (x[k] > 0.0f) own += static_cast<double>(x[k]);
      double prefix = 0.0, total = 0.0;
      scan_d(sh.tmp.sd).ExclusiveSum(own, prefix, total);
      __syncthreads();
      const bool hit = own > 0.0 && target < c + prefix + own;
      const int w = reduce_int(hit ? static_cast<int>(threadIdx.x) : INT_MAX, min_int_op{});
      if (w != INT_MAX) {
        if (static_cast<int>(threadIdx.x) == w) {
          double cc = c + prefix;
          int tok = -1, lp = -1;
          for (int k = 0; k < 4; ++k)
            if (x[k] > 0.0f) {
              cc += static_cast<double>(x[k]);
              lp = i0 + k;
              if (tok < 0 && target < cc) tok = i0 + k;
            }
          sh.i = tok >= 0 ? tok : lp;
        }
        __syncthreads();
        const int t = sh.i;
        __syncthreads();
        return t;
      }
      c += total;
    }
    return last_positive(row, V);
  }
};

//! One request's inputs, as the walk sees them.
struct request_view {
  const token_id* token;
  const node_id* parent;
  int n;
  const float* p;
  std::int64_t ps;
  const float* q;
  std::int64_t qs;
  int V;
  float* R;
  double* thr;
  SPECDEC_DEVICE const float* prow(int u) const { return p + static_cast<std::int64_t>(u) * ps; }
  SPECDEC_DEVICE const float* qrow(int u) const { return q + static_cast<std::int64_t>(u) * qs; }
  SPECDEC_DEVICE int next_child(int u, int after) const {
    for (int c = (after < 0 ? u : after) + 1; c < n; ++c)
      if (parent[c] == u) return c;
    return -1;
  }
  SPECDEC_DEVICE bool earlier_sibling_has(int u, int c, token_id x) const {
    for (int s = next_child(u, -1); s >= 0 && s != c; s = next_child(u, s))
      if (token[s] == x) return true;
    return false;
  }
  SPECDEC_DEVICE int depth_of(int v) const {
    int d = 0;
    for (; v > 0; v = parent[v]) ++d;
    return d;
  }
};

SPECDEC_DEVICE bool mass_bad(double m, float tol) {
  return !(m > 0.0) || (tol >= 0.0f && (m - 1.0 > tol || 1.0 - m > tol));
}
SPECDEC_DEVICE status_code mass_code(double m) {
  return !(m > 0.0) ? status_code::zero_mass : status_code::invalid_argument;
}

//! Validates p_u and samples it with draw 0 of node u (host: sample_p).
template <int Block>
SPECDEC_DEVICE status_code sample_p(block_ops<Block>& ops, const request_view& rq, int u, const rng_stream& rng,
                                    float tol, int& out) {
  double m = 0.0;
  if (!ops.mass(rq.prow(u), rq.V, m)) return status_code::non_finite;  // refined by the caller's classifier
  if (mass_bad(m, tol)) return mass_code(m);
  const double target = static_cast<double>(rng.uniform(static_cast<std::uint32_t>(u), 0)) * m;
  out = ops.sample(rq.prow(u), rq.V, target);
  return status_code::ok;
}

//! non_finite vs negative_probability for a row a pass flagged.
template <int Block>
SPECDEC_DEVICE status_code classify(block_ops<Block>& ops, const float* row, int V) {
  bool nonfinite = false;
  ops.each(row, V, [&](int, float x) { nonfinite |= !(x - x == x - x); });
  return __syncthreads_or(nonfinite) ? status_code::non_finite : status_code::negative_probability;
}

template <int Block>
SPECDEC_DEVICE status_code walk(block_ops<Block>& ops, const request_view& rq, const verify_params& vp, int& last,
                                int& next) {
  const rng_stream rng{vp.seed, vp.request, vp.round};
  const int V = rq.V;
  const float tol = vp.normalization_tolerance;
  switch (vp.mode) {
    case verify_mode::sampled_iid:
    case verify_mode::sampled_without_replacement: {
      const bool wor = vp.mode == verify_mode::sampled_without_replacement;
      int u = 0;
      for (;;) {
        const float* pu = rq.prow(u);
        int c = rq.next_child(u, -1);
        if (c < 0) {
          last = u;
          const status_code sc = sample_p(ops, rq, u, rng, tol, next);
          return sc == status_code::non_finite ? classify(ops, pu, V) : sc;
        }
        const float* qu = rq.qrow(u);
        bool have_r = false;
        double M = 1.0, Z = 0.0;
        int accepted = -1;
        for (unsigned j = 0; c >= 0; ++j, c = rq.next_child(u, c)) {
          const token_id x = rq.token[c];
          const bool dup = wor && rq.earlier_sibling_has(u, c, x);
          const double qx = dup ? 0.0 : static_cast<double>(qu[x]);
          const double rx = have_r ? static_cast<double>(rq.R[x]) : static_cast<double>(pu[x]);
          const double denom = 1.0 - Z;
          const double un = static_cast<double>(rng.uniform(static_cast<std::uint32_t>(u), 1u + j));
          if (qx > 0.0 && rx > 0.0 && denom > 0.0 && __dmul_rn(__dmul_rn(un, qx), M) < __dmul_rn(rx, denom)) {
            accepted = c;
            break;
          }
          if (!have_r) {
            double mp = 0.0, mq = 0.0;
            bool okp = true, okq = true;
            ops.first_residual(pu, qu, rq.R, V, mp, mq, M, okp, okq);
            if (!okp) return classify(ops, pu, V);
            if (!okq) return classify(ops, qu, V);
            if (mass_bad(mp, tol)) return mass_code(mp);
            if (mass_bad(mq, tol)) return mass_code(mq);
            have_r = true;
          } else if (denom > 0.0) {
            M = ops.update_residual(qu, rq.R, M / denom, V);
          }
          if (wor && !dup) Z += qx;
          __syncthreads();  // R[x] of the next sibling is read after every thread wrote it
        }
        if (accepted >= 0) {
          if (!have_r) {
            double mp = 0.0, mq = 0.0;
            bool okp = true, okq = true;
            ops.mass2(pu, qu, V, mp, mq, okp, okq);
            if (!okp) return classify(ops, pu, V);
            if (!okq) return classify(ops, qu, V);
            if (mass_bad(mp, tol)) return mass_code(mp);
            if (mass_bad(mq, tol)) return mass_code(mq);
          }
          u = accepted;
          continue;
        }
        last = u;
        int y = -1;
        if (M > 0.0) {
          const double target = static_cast<double>(rng.uniform(static_cast<std::uint32_t>(u), 0)) * M;
          y = ops.sample(rq.R, V, target);
        }
        if (y < 0) (void)ops.argmax(pu, V, y);
        next = y;
        return status_code::ok;
      }
    }
    case verify_mode::deterministic: {
      int u = 0;
      for (;;) {
        const float* pu = rq.prow(u);
        int c = rq.next_child(u, -1);
        if (c < 0) {
          last = u;
          const status_code sc = sample_p(ops, rq, u, rng, -1.0f, next);
          return sc == status_code::non_finite ? classify(ops, pu, V) : sc;
        }
        double M = 0.0;
        if (!ops.mass(pu, V, M)) return classify(ops, pu, V);
        if (!(M > 0.0)) return status_code::zero_mass;
        int accepted = -1;
        for (unsigned j = 0; c >= 0; ++j, c = rq.next_child(u, c)) {
          const token_id x = rq.token[c];
          const double rx = rq.earlier_sibling_has(u, c, x) ? 0.0 : static_cast<double>(pu[x]);
          const double un = static_cast<double>(rng.uniform(static_cast<std::uint32_t>(u), 1u + j));
          if (rx > 0.0 && __dmul_rn(un, M) < rx) {
            accepted = c;
            break;
          }
          M = __dsub_rn(M, rx);
        }
        if (accepted >= 0) {
          u = accepted;
          continue;
        }
        last = u;
        ops.each(pu, V, [&](int i, float x) { rq.R[i] = x; });
        __syncthreads();
        if (threadIdx.x == 0)
          for (int s = rq.next_child(u, -1); s >= 0; s = rq.next_child(u, s)) rq.R[rq.token[s]] = 0.0f;
        __syncthreads();
        double mr = 0.0;
        (void)ops.mass(rq.R, V, mr);
        int y = -1;
        if (mr > 0.0) {
          const double target = static_cast<double>(rng.uniform(static_cast<std::uint32_t>(u), 0)) * mr;
          y = ops.sample(rq.R, V, target);
        }
        if (y < 0) (void)ops.argmax(pu, V, y);
        next = y;
        return status_code::ok;
      }
    }
    case verify_mode::greedy:
    case verify_mode::naive_matching: {
      const bool greedy = vp.mode == verify_mode::greedy;
      int u = 0;
      for (;;) {
        int y = 0;
        if (greedy) {
          if (!ops.argmax(rq.prow(u), V, y)) return status_code::non_finite;
        } else {
          const status_code sc = sample_p(ops, rq, u, rng, -1.0f, y);
          if (sc != status_code::ok) return sc == status_code::non_finite ? classify(ops, rq.prow(u), V) : sc;
        }
        int hit = -1;
        for (int c = rq.next_child(u, -1); c >= 0; c = rq.next_child(u, c))
          if (rq.token[c] == y) {
            hit = c;
            break;
          }
        if (hit < 0) {
          last = u;
          next = y;
          return status_code::ok;
        }
        u = hit;
      }
    }
    case verify_mode::typical_lossy: {
      constexpr double unreachable = -2.0, pending = -1.0;
      if (threadIdx.x == 0) rq.thr[0] = pending;
      __syncthreads();
      int best = 0, best_depth = 0;
      for (int c = 1; c < rq.n; ++c) {
        const int pu = rq.parent[c];
        double tp = rq.thr[pu];
        __syncthreads();
        if (threadIdx.x == 0) rq.thr[c] = unreachable;
        if (tp == unreachable) {
          __syncthreads();
          continue;
        }
        const float* row = rq.prow(pu);
        if (tp == pending) {
          double m = 0.0, h = 0.0;
          if (!ops.entropy(row, V, m, h)) return classify(ops, row, V);
          if (!(m > 0.0)) return status_code::zero_mass;
          const double ent = log(m) - h / m;
          const double tau =
              fmin(static_cast<double>(vp.typical_epsilon), static_cast<double>(vp.typical_delta) * exp(-ent));
          tp = tau * m;
          if (threadIdx.x == 0) rq.thr[pu] = tp;
        }
        if (static_cast<double>(row[rq.token[c]]) > tp) {
          if (threadIdx.x == 0) rq.thr[c] = pending;
          const int d = rq.depth_of(c);
          if (d > best_depth) {
            best = c;
            best_depth = d;
          }
        }
        __syncthreads();
      }
      last = best;
      const status_code sc = sample_p(ops, rq, best, rng, -1.0f, next);
      return sc == status_code::non_finite ? classify(ops, rq.prow(best), V) : sc;
    }
  }
  return status_code::invalid_argument;
}

}  // namespace detail

//! The kernel: block r verifies request r. Launch with Block threads and
//! grid = num_requests.
template <int Block>
SPECDEC_KERNEL void __launch_bounds__(Block) verify_batch_kernel(kernels::verify_batch_params P) {
  using ops_t = detail::block_ops<Block>;
  __shared__ typename ops_t::storage sh;
  ops_t ops{sh};
  const int r = static_cast<int>(blockIdx.x);
  const int b = P.offsets[r];
  const int n = P.offsets[r + 1] - b;
  const verify_params vp = P.params[r];
  const int V = P.vocab;
  auto fail = [&](status_code code) {
    if (threadIdx.x == 0) P.results[r] = verify_result{0, 0, -1, code};
  };
  if (n <= 0 || n > P.max_nodes) return fail(n <= 0 ? status_code::not_sorted : status_code::size_mismatch);
  if (!is_valid_mode(vp.mode) || !validate_verify_params(vp).ok()) return fail(status_code::invalid_argument);
  // Block and traversal verification run on the host only for now.
  if (is_traversal(vp.mode)) return fail(status_code::unsupported);
  if (uses_draft_probs(vp.mode) && P.q == nullptr) return fail(status_code::invalid_argument);
  const token_id* tok = P.token + b;
  const node_id* par = P.parent + b;
  // Tree checks (the same as validate_tree, reported as one code each).
  bool topo_ok = true, tok_ok = true;
  int max_depth = 0;
  for (int i = static_cast<int>(threadIdx.x); i < n; i += Block) {
    topo_ok &= i == 0 ? par[0] == -1 : (par[i] >= 0 && par[i] < i);
    tok_ok &= tok[i] >= 0 && tok[i] < V;
  }
  if (!__syncthreads_and(topo_ok)) return fail(status_code::not_topological);
  if (!__syncthreads_and(tok_ok)) return fail(status_code::token_out_of_range);
  for (int i = static_cast<int>(threadIdx.x); i < n; i += Block) {
    int d = 0;
    for (int v = i; v > 0; v = par[v]) ++d;
    max_depth = d > max_depth ? d : max_depth;
  }
  max_depth = ops.reduce_int(max_depth, detail::max_int_op{});
  if (max_depth + 1 > P.out_stride) return fail(status_code::buffer_too_small);

  const std::size_t per_req = ((static_cast<std::size_t>(V) * sizeof(float) + 15u) & ~std::size_t{15}) +
                              static_cast<std::size_t>(P.max_nodes) * sizeof(double);
  auto* base = static_cast<unsigned char*>(P.workspace) + per_req * static_cast<std::size_t>(r);
  detail::request_view rq{
      tok,
      par,
      n,
      P.p + static_cast<std::int64_t>(b) * P.p_row_stride,
      P.p_row_stride,
      P.q ? P.q + static_cast<std::int64_t>(b) * P.q_row_stride : nullptr,
      P.q_row_stride,
      V,
      reinterpret_cast<float*>(base),
      reinterpret_cast<double*>(base + ((static_cast<std::size_t>(V) * sizeof(float) + 15u) & ~std::size_t{15}))};
  int last = 0, next = -1;
  const status_code sc = detail::walk(ops, rq, vp, last, next);
  if (sc != status_code::ok) return fail(sc);
  if (threadIdx.x == 0) {
    node_id* path = P.paths + static_cast<std::int64_t>(r) * P.out_stride;
    token_id* out = P.tokens + static_cast<std::int64_t>(r) * P.out_stride;
    const int d = rq.depth_of(last);
    int v = last;
    for (int k = d; k >= 1; --k) {
      path[k] = v;
      out[k - 1] = tok[v];
      v = par[v];
    }
    path[0] = 0;
    out[d] = next;
    P.results[r] = verify_result{d, last, next, status_code::ok};
  }
}

}  // namespace specdec::cuda
