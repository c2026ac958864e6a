//! \file
//! Dual (attention-like) form of the tree-masked selective scan (STree,
//! corrected for dt'):
//!   y_i = exp(A_tree[i]) (C_i . h0) + sum over ancestors-or-self j of i of
//!         exp(A_tree[i] - A_tree[j]) dt'_j (C_i . B_j) x_j  + D x_i.
//! This version visits only the (node, ancestor) pairs (sum of depths + N of
//! them, not N^2), computes C_i . B_j once per group and exponentiates only
//! ancestor differences, which are <= 0, so nothing can overflow. It keeps
//! no state, so it cannot return per-node states (use the recurrent scan).
//! For the dense GEMM formulation see tree_scan_dual_eigen.hpp.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>

#include "specdec/core/status.hpp"
#include "specdec/core/view.hpp"
#include "specdec/core/workspace.hpp"
#include "specdec/ssm/detail/ssm_step.hpp"
#include "specdec/ssm/tree_decay.hpp"
#include "specdec/ssm/tree_ssm_inputs.hpp"
#include "specdec/tree/structure.hpp"
#include "specdec/tree/token_tree.hpp"

namespace specdec {

namespace detail {

//! Scratch of tree_scan_dual, carved by one routine for sizing and running.
template <class T>
struct tree_scan_dual_scratch {
  std::int64_t* pair_begin = nullptr;  // pair offsets (N + 1)
  node_id* pair_node = nullptr;        // pair ancestor ids
  T* cb = nullptr;                     // C.B per pair, then the weight per pair
  T* dt_eff = nullptr;                 // dt', then A_tree of one head (2 N)
  T* bc = nullptr;                     // B and C of one group (strided B/C only), [N, dstate] each
  T* ct = nullptr;                     // C^T of one group [dstate, Npad], Npad: N up to whole GEMM tiles
  T* acc = nullptr;                    // output accumulators of one head [N, headdim]
  T* acct = nullptr;                   // h0 C^T of one head [headdim, Npad]
  T* xh = nullptr;                     // x of one head (strided x) or h0 of one head (strided h0)
  T* rows = nullptr;                   // D and z rows of one head (2 headdim)
};

//! N rounded up to whole tiles of ssm_gemm_nn: the node axis of the h0 C^T product.
template <class T>
constexpr std::size_t dual_padded_nodes(std::int64_t nodes) noexcept {
  constexpr auto cols = static_cast<std::size_t>(gemm_nn_columns<T>);
  return (static_cast<std::size_t>(nodes) + cols - 1) / cols * cols;
}

template <class T>
tree_scan_dual_scratch<T> carve_tree_scan_dual(workspace_carver& c, std::int64_t pairs,
                                               const tree_ssm_shape& s) noexcept {
  const auto n = static_cast<std::size_t>(s.nodes);
  const auto np = static_cast<std::size_t>(pairs);
  const auto P = static_cast<std::size_t>(s.headdim), S = static_cast<std::size_t>(s.dstate);
  tree_scan_dual_scratch<T> r;
  r.pair_begin = c.take<std::int64_t>(n + 1);
  r.pair_node = c.take<node_id>(np);
  r.cb = c.take<T>(2 * np);
  r.dt_eff = c.take<T>(2 * n);
  r.bc = c.take<T>(2 * n * S);
  const std::size_t npad = dual_padded_nodes<T>(s.nodes);
  r.ct = c.take<T>(S * npad);
  r.acc = c.take<T>(n * P);
  r.acct = c.take<T>(npad * P);
  r.xh = c.take<T>((n > S ? n : S) * P);
  r.rows = c.take<T>(2 * P);
  return r;
}

}  // namespace detail

//! Bytes of workspace `tree_scan_dual` needs: 2 scalars and 1 int per
//! (node, ancestor-or-self) pair, 2 N (dstate + 1) scalars, N' (dstate +
//! headdim) scalars for the h0 C^T product (N' = N rounded up to whole
//! GEMM tiles, detail::gemm_nn_columns; counted with or without h0), N
//! headdim accumulators, max(N, dstate) headdim scalars (x or h0 rows of a
//! strided layout) and 2 headdim. `parent` must be valid (0 otherwise).
//! O(N * depth).
template <ssm_scalar T>
std::size_t tree_scan_dual_workspace_size(std::span<const node_id> parent, const tree_ssm_shape& shape) noexcept {
  if (!validate_topological_parents(parent).ok()) return 0;
  workspace_carver c;
  (void)detail::carve_tree_scan_dual<T>(c, ancestor_pair_count(parent.data(), static_cast<std::int32_t>(parent.size())),
                                        shape);
  return c.bytes_used() + unaligned_workspace_slack;
}

//! Tree-masked selective scan, dual form restricted to ancestor pairs.
//! Same contract and results (up to rounding) as tree_scan_recurrent,
//! without per-node states. Cost O(pairs * (groups * dstate + heads *
//! headdim) + [h0 given] N * heads * headdim * dstate), pairs = sum of
//! (depth + 1). No allocation; deterministic; outputs must not overlap inputs.
template <ssm_scalar T>
status tree_scan_dual(std::span<const node_id> parent, const tree_ssm_inputs<T>& in, const tree_ssm_options<T>& opt,
                      view3d<T> y, std::span<std::byte> workspace) noexcept {
  tree_ssm_shape s;
  SPECDEC_TRY(validate_tree_ssm(parent, in, opt, s));
  SPECDEC_TRY(validate_tree_ssm_output(y, s));
  const std::int64_t pairs = ancestor_pair_count(parent.data(), static_cast<std::int32_t>(s.nodes));
  if (workspace.data() == nullptr)
    return make_status(status_code::buffer_too_small, "tree_scan_dual: workspace is required");
  workspace_carver c = unaligned_carver(workspace.data(), workspace.size());
  const auto ws = detail::carve_tree_scan_dual<T>(c, pairs, s);
  if (c.overflowed()) return make_status(status_code::buffer_too_small, "tree_scan_dual: workspace too small");

  const auto n = static_cast<std::size_t>(s.nodes);
  const std::int64_t N = s.nodes, P = s.headdim, S = s.dstate;
  std::int64_t* pair_begin = ws.pair_begin;
  node_id* pair_node = ws.pair_node;
  T* cb = ws.cb;
  T* weight = cb + pairs;
  T* dt_eff = ws.dt_eff;
  T* a_tree = dt_eff + n;
  T* bg = ws.bc;
  T* cg = bg + N * S;
  T* acc = ws.acc;
  T* acct = ws.acct;
  T* ct = ws.ct;
  const auto npad = static_cast<std::int64_t>(detail::dual_padded_nodes<T>(N));
  T* xh = ws.xh;
  T* drow = ws.rows;
  T* zrow = drow + P;

  // Ancestor lists, self first then up to the root: the mask L, stored sparsely.
  std::int64_t k = 0;
  for (std::size_t i = 0; i < n; ++i) {
    pair_begin[i] = k;
    for (node_id u = static_cast<node_id>(i); u >= 0; u = parent[static_cast<std::size_t>(u)]) pair_node[k++] = u;
  }
  pair_begin[n] = k;

  const std::int64_t hpg = s.heads_per_group();
  const bool bc_direct = in.B.stride[2] == 1 && in.C.stride[2] == 1;
  const bool x_direct = in.x.stride[2] == 1;
  for (std::int64_t g = 0; g < s.groups; ++g) {
    // B and C rows of the group: in place when contiguous along dstate, else copied.
    const T* brows = bg;
    const T* crows = cg;
    std::int64_t bld = S, cld = S;
    if (bc_direct) {
      brows = in.B.data + g * in.B.stride[1];
      crows = in.C.data + g * in.C.stride[1];
      bld = in.B.stride[0];
      cld = in.C.stride[0];
    } else {
      for (std::int64_t i = 0; i < N; ++i)
        for (std::int64_t q = 0; q < S; ++q) {
          bg[i * S + q] = in.B(i, g, q);
          cg[i * S + q] = in.C(i, g, q);
        }
    }
    // C_i . B_j depends only on the group: computed once for its heads.
    for (std::size_t i = 0; i < n; ++i)
      for (std::int64_t e = pair_begin[i]; e < pair_begin[i + 1]; ++e)
        cb[e] = detail::ssm_dot_row(crows + static_cast<std::int64_t>(i) * cld, brows + pair_node[e] * bld, S);
    // C^T [dstate, N'] for the initial-state term, zero-padded to whole GEMM tiles.
    if (in.h0.data != nullptr)
      for (std::int64_t q = 0; q < S; ++q)
        for (std::int64_t i = 0; i < npad; ++i) ct[q * npad + i] = i < N ? crows[i * cld + q] : T(0);
    for (std::int64_t h = g * hpg; h < (g + 1) * hpg; ++h) {
      tree_cumulative_decay_head(parent, in, opt, h, dt_eff, a_tree);
      for (std::int64_t p = 0; p < P; ++p) drow[p] = tree_ssm_d(in, h, p);
      // Select before exp: only ancestor differences (<= 0) are exponentiated,
      // all pairs of the head in one vector pass.
      for (std::size_t i = 0; i < n; ++i)
        for (std::int64_t e = pair_begin[i]; e < pair_begin[i + 1]; ++e) weight[e] = a_tree[i] - a_tree[pair_node[e]];
      detail::ssm_exp_inplace(weight, pairs);
      for (std::int64_t e = 0; e < pairs; ++e) weight[e] *= dt_eff[pair_node[e]] * cb[e];
      // Initial-state term: exp(A_tree[i]) (C_i . h0) for all nodes, the
      // GEMM h0 C^T (vectors along the nodes), transposed on the way out.
      if (in.h0.data != nullptr) {
        const T* h0p = in.h0.data + h * in.h0.stride[0];
        std::int64_t h0ld = in.h0.stride[1];
        if (in.h0.stride[2] != 1) {
          // A strided h0 is copied into the (still unused) x rows of this head.
          for (std::int64_t p = 0; p < P; ++p)
            for (std::int64_t q = 0; q < S; ++q) xh[p * S + q] = in.h0(h, p, q);
          h0p = xh;
          h0ld = S;
        }
        detail::ssm_gemm_nn(h0p, h0ld, ct, npad, acct, npad, P, npad, S);
        for (std::int64_t i = 0; i < N; ++i) {
          const T e0 = detail::vec_ops<T, false>::exp(a_tree[i]);
          for (std::int64_t p = 0; p < P; ++p) acc[i * P + p] = e0 * acct[p * npad + i];
        }
      } else {
        for (std::int64_t i = 0; i < N * P; ++i) acc[i] = T(0);
      }
      // x rows of the head: in place when contiguous along headdim.
      const T* xrows = x_direct ? in.x.data + h * in.x.stride[1] : xh;
      const std::int64_t xld = x_direct ? in.x.stride[0] : P;
      if (!x_direct)
        for (std::int64_t i = 0; i < N; ++i)
          for (std::int64_t p = 0; p < P; ++p) xh[i * P + p] = in.x(i, h, p);
      for (std::size_t i = 0; i < n; ++i) {
        const auto ii = static_cast<std::int64_t>(i);
        T* arow = acc + ii * P;
        detail::ssm_weighted_rows(weight + pair_begin[i], pair_node + pair_begin[i], pair_begin[i + 1] - pair_begin[i],
                                  xrows, xld, arow, P);
        const T* z = nullptr;
        if (in.z.data != nullptr) {
          if (in.z.stride[2] == 1) {
            z = &in.z(ii, h, 0);
          } else {
            for (std::int64_t p = 0; p < P; ++p) zrow[p] = in.z(ii, h, p);
            z = zrow;
          }
        }
        if (y.stride[2] == 1) {
          detail::ssm_output_row(arow, xrows + ii * xld, drow, z, &y(ii, h, 0), P);
        } else {
          detail::ssm_output_row(arow, xrows + ii * xld, drow, z, arow, P);
          for (std::int64_t p = 0; p < P; ++p) y(ii, h, p) = arow[p];
        }
      }
    }
  }
  return status::success();
}

}  // namespace specdec
