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
  T* h0row = nullptr;                  // h0 of one head, then B and C of one group for all nodes
  T* acc = nullptr;                    // row accumulator (headdim)
};

template <class T>
tree_scan_dual_scratch<T> carve_tree_scan_dual(workspace_carver& c, std::int64_t pairs,
                                               const tree_ssm_shape& s) noexcept {
  const auto n = static_cast<std::size_t>(s.nodes);
  const auto np = static_cast<std::size_t>(pairs);
  tree_scan_dual_scratch<T> r;
  r.pair_begin = c.take<std::int64_t>(n + 1);
  r.pair_node = c.take<node_id>(np);
  r.cb = c.take<T>(2 * np);
  r.dt_eff = c.take<T>(2 * n);
  r.h0row = c.take<T>(static_cast<std::size_t>(s.headdim * s.dstate + 2 * s.nodes * s.dstate));
  r.acc = c.take<T>(static_cast<std::size_t>(s.headdim));
  return r;
}

}  // namespace detail

//! Bytes of workspace `tree_scan_dual` needs: 2 scalars and 1 int per
//! (node, ancestor-or-self) pair, 2 N (dstate + 1) scalars and
//! headdim * (dstate + 1) scalars. `parent` must be valid (0 otherwise). O(N * depth).
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
  std::int64_t* pair_begin = ws.pair_begin;
  node_id* pair_node = ws.pair_node;
  T* cb = ws.cb;
  T* weight = cb + pairs;
  T* dt_eff = ws.dt_eff;
  T* a_tree = dt_eff + n;
  T* h0row = ws.h0row;
  T* bg = h0row + s.headdim * s.dstate;
  T* cg = bg + s.nodes * s.dstate;
  T* acc = ws.acc;

  // Ancestor lists, self first then up to the root: the mask L, stored sparsely.
  std::int64_t k = 0;
  for (std::size_t i = 0; i < n; ++i) {
    pair_begin[i] = k;
    for (node_id u = static_cast<node_id>(i); u >= 0; u = parent[static_cast<std::size_t>(u)]) pair_node[k++] = u;
  }
  pair_begin[n] = k;

  const std::int64_t hpg = s.heads_per_group();
  for (std::int64_t g = 0; g < s.groups; ++g) {
    // C_i . B_j depends only on the group: computed once for its heads.
    for (std::int64_t i = 0; i < s.nodes; ++i)
      for (std::int64_t q = 0; q < s.dstate; ++q) {
        bg[i * s.dstate + q] = in.B(i, g, q);
        cg[i * s.dstate + q] = in.C(i, g, q);
      }
    for (std::size_t i = 0; i < n; ++i)
      for (std::int64_t e = pair_begin[i]; e < pair_begin[i + 1]; ++e)
        cb[e] =
            detail::ssm_dot_row(cg + static_cast<std::int64_t>(i) * s.dstate, bg + pair_node[e] * s.dstate, s.dstate);
    for (std::int64_t h = g * hpg; h < (g + 1) * hpg; ++h) {
      tree_cumulative_decay_head(parent, in, opt, h, dt_eff, a_tree);
      if (in.h0.data != nullptr)
        for (std::int64_t p = 0; p < s.headdim; ++p)
          for (std::int64_t q = 0; q < s.dstate; ++q) h0row[p * s.dstate + q] = in.h0(h, p, q);
      for (std::size_t i = 0; i < n; ++i) {
        const auto ii = static_cast<std::int64_t>(i);
        // Select before exp: only ancestor differences (<= 0) are exponentiated.
        for (std::int64_t e = pair_begin[i]; e < pair_begin[i + 1]; ++e) {
          const node_id j = pair_node[e];
          weight[e] = std::exp(a_tree[i] - a_tree[j]) * dt_eff[j] * cb[e];
        }
        if (in.h0.data != nullptr) {
          const T* crow = cg + ii * s.dstate;
          const T e0 = std::exp(a_tree[i]);
          for (std::int64_t p = 0; p < s.headdim; ++p)
            acc[p] = e0 * detail::ssm_dot_row(h0row + p * s.dstate, crow, s.dstate);
        } else {
          for (std::int64_t p = 0; p < s.headdim; ++p) acc[p] = T(0);
        }
        for (std::int64_t e = pair_begin[i]; e < pair_begin[i + 1]; ++e) {
          const node_id j = pair_node[e];
          const T w = weight[e];
          for (std::int64_t p = 0; p < s.headdim; ++p) acc[p] += w * in.x(j, h, p);
        }
        for (std::int64_t p = 0; p < s.headdim; ++p) {
          T out = acc[p] + tree_ssm_d(in, h, p) * in.x(ii, h, p);
          if (in.z.data != nullptr) out *= detail::ssm_silu(in.z(ii, h, p));
          y(ii, h, p) = out;
        }
      }
    }
  }
  return status::success();
}

}  // namespace specdec
