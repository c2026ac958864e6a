//! \file
//! The chance that verification accepts each child of the nodes on a
//! round's accepted path, given that its parent was reached: the indicator
//! "verification moved to this child" averaged over the round's uniforms
//! (and, for the first child of an i.i.d.- or Gumbel-drafted node, over its
//! draw from q as well). Read after the round, it estimates acceptance with
//! less variance than the indicator it averages (Rao-Blackwell): a chain's
//! first draft on the demo models at temperature 1 is accepted with
//! variance 0.15 as an indicator, 0.09 as min(1, p(x) / q(x)) and 0.03 as
//! sum_x min(p(x), q(x)) (docs/loop.md). The planner takes it through
//! round_feedback::accept_prob; the sessions fill it in.
//!
//! Lossless to use for planning later rounds: it is a function of this
//! round's rows, which a later round's plan may read (docs/loop.md).
#pragma once

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <span>

#include "specdec/core/rows_view.hpp"
#include "specdec/core/status.hpp"
#include "specdec/sample/order.hpp"
#include "specdec/tree/token_tree.hpp"
#include "specdec/tree/validate.hpp"
#include "specdec/verify/verify_params.hpp"

namespace specdec {

namespace detail {

inline detail::row_ref row_of(const rows_view& r, std::int64_t i) noexcept {
  return {static_cast<const char*>(r.data) + i * r.stride[0] * row_dtype_bytes(r.dtype), r.stride[1], r.dtype};
}

// sum_x min(p(x), q(x)) over one row pair (both checked finite and >= 0).
inline status row_overlap(const row_ref& p, const row_ref& q, std::int64_t V, double& out) noexcept {
  double s = 0.0;
  bool ok = true;
  if (const float* pf = p.contiguous_f32(), *qf = q.contiguous_f32(); pf != nullptr && qf != nullptr) {
    int bad = 0;  // branch-free checks (NaN compares false)
    for (std::int64_t x = 0; x < V; ++x) {
      s += static_cast<double>(std::fmin(pf[x], qf[x]));
      bad |= static_cast<int>(!(pf[x] >= 0.0f && pf[x] <= FLT_MAX && qf[x] >= 0.0f && qf[x] <= FLT_MAX));
    }
    ok = bad == 0;
  } else {
    for (std::int64_t x = 0; x < V && ok; ++x) {
      const float a = p[x], b = q[x];
      ok = a >= 0.0f && b >= 0.0f && std::isfinite(a) && std::isfinite(b);
      s += std::fmin(a, b);
    }
  }
  if (!ok) return make_status(status_code::non_finite, "p or q row holds a NaN, infinite or negative entry");
  out = s;
  return status::success();
}

// Mass of one row (checked finite and >= 0).
inline status row_mass(const row_ref& p, std::int64_t V, double& out) noexcept {
  double s = 0.0;
  for (std::int64_t x = 0; x < V; ++x) {
    const float a = p[x];
    if (!(a >= 0.0f) || !std::isfinite(a))
      return make_status(status_code::non_finite, "p row holds a NaN, infinite or negative entry", x);
    s += a;
  }
  out = s;
  return status::success();
}

}  // namespace detail

//! Writes out[c], for every child c of a node u on `path` (the accepted
//! root-to-node path, root first), the probability that verification in
//! `mode` accepts c given that u was reached:
//! - sampled_iid, sampled_without_replacement: for u's first child, the
//!   first draw from q_u, sum_x min(p_u(x), q_u(x)) (its chance marginal
//!   over that draw; rows read as verification reads them, unnormalized);
//!   for later children -1, since their chance depends on the residual the
//!   earlier ones leave.
//! - deterministic, naive_matching: p_u(x_c) / |p_u| (verification accepts
//!   the child carrying a draw from p_u), 0 for a token an earlier sibling
//!   carries.
//! - greedy (the indicator is already its own expectation), typical_lossy,
//!   block and traversal: -1.
//! Every other entry (the root, children of nodes off the path) is -1: a
//! caller counts the indicator there. Rows: p row u of every path node with
//! children (probabilities, not logits), and q row u too for the sampled
//! modes; no other row is read, so a lazily converted buffer serves.
//! O(V) per path node with children. Errors: invalid_argument (malformed
//! tree, a path that does not start at the root or is not parent-linked,
//! an unknown mode), size_mismatch (out or the rows shorter than the tree,
//! rows of different vocabularies), non_finite (a NaN, infinite or negative
//! entry in a row read); out is then left unspecified.
inline status child_acceptance(const tree_view& tree, std::span<const node_id> path, verify_mode mode,
                               const rows_view& p, const rows_view& q, std::span<float> out) noexcept {
  if (!is_valid_mode(mode)) return make_status(status_code::invalid_argument, "unknown verify_mode");
  SPECDEC_TRY(validate_topological_parents(tree.parent, tree.size));
  const auto n = static_cast<std::size_t>(tree.size);
  if (out.size() < n) return make_status(status_code::size_mismatch, "out needs one entry per node");
  if (path.empty() || path[0] != 0) return make_status(status_code::invalid_argument, "path must start at the root");
  for (std::size_t i = 1; i < path.size(); ++i)
    if (path[i] <= 0 || path[i] >= tree.size || tree.parent[path[i]] != path[i - 1])
      return make_status(status_code::invalid_argument, "path entries must be parent-linked node ids",
                         static_cast<std::int64_t>(i));
  for (std::size_t c = 0; c < n; ++c) out[c] = -1.0f;
  const bool sampled = mode == verify_mode::sampled_iid || mode == verify_mode::sampled_without_replacement;
  const bool one_hot = mode == verify_mode::deterministic || mode == verify_mode::naive_matching;
  if (!sampled && !one_hot) return status::success();
  if (tree.token == nullptr && one_hot) return make_status(status_code::invalid_argument, "tree has no tokens");
  const std::int64_t V = p.extent[1];
  if (p.data == nullptr || p.extent[0] < tree.size || V < 1)
    return make_status(status_code::size_mismatch, "p needs one row per node");
  if (sampled && (q.data == nullptr || q.extent[0] < tree.size || q.extent[1] != V))
    return make_status(status_code::size_mismatch, "q needs one row per node, of p's vocabulary");
  for (const node_id u : path) {
    node_id first = -1;
    for (node_id c = u + 1; c < tree.size && first < 0; ++c)
      if (tree.parent[c] == u) first = c;
    if (first < 0) continue;  // a leaf: nothing offered
    const detail::row_ref pu = detail::row_of(p, u);
    if (sampled) {
      double s = 0.0;
      SPECDEC_TRY(detail::row_overlap(pu, detail::row_of(q, u), V, s));
      out[static_cast<std::size_t>(first)] = static_cast<float>(std::fmin(s, 1.0));
      continue;
    }
    double mass = 0.0;
    SPECDEC_TRY(detail::row_mass(pu, V, mass));
    for (node_id c = first; c < tree.size; ++c) {
      if (tree.parent[c] != u) continue;
      const token_id x = tree.token[c];
      if (x < 0 || x >= V) return make_status(status_code::invalid_argument, "token out of range", c);
      bool earlier = false;
      for (node_id s = first; s < c && !earlier; ++s) earlier = tree.parent[s] == u && tree.token[s] == x;
      out[static_cast<std::size_t>(c)] = earlier || !(mass > 0.0) ? 0.0f : static_cast<float>(pu[x] / mass);
    }
  }
  return status::success();
}

}  // namespace specdec
