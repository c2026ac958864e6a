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

#include "specdec/core/detail/simd.hpp"
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

// A row entry verification accepts: finite and >= 0 (NaN compares false).
inline bool valid_entry(float a) noexcept { return a >= 0.0f && a <= FLT_MAX; }

// sum_x min(p(x), q(x)) over a row pair, or the mass of p alone (q null),
// every entry read checked valid (finite and >= 0; a tile of 1024 entries
// whose float sum overflows also reads as invalid, which no probability row
// does). Contiguous fp32 rows run in float vectors (core/detail/simd.hpp;
// one double chain ran at 1.3 GB/s against a 20-30 GB/s stream); other rows one
// entry at a time.
inline status checked_sum(const row_ref& p, const row_ref* q, std::int64_t V, double& out) noexcept {
  const float* pf = p.contiguous_f32();
  const float* qf = q != nullptr ? q->contiguous_f32() : pf;
  bool ok = true;
  double s = 0.0;
  if (pf != nullptr && qf != nullptr) {
    // Float vectors per tile of 1024 entries, tiles summed in double.
    // Checks without a branch: NaN and infinities reach `all` (the sum of
    // every entry read), negatives the lowest entry `lo`.
    using S = vec_ops<float>;
    using one = vec_ops<float, false>;
    double total = 0.0;
    for (std::int64_t t0 = 0; t0 < V && ok; t0 += sum_tile) {
      const std::int64_t t1 = t0 + sum_tile < V ? t0 + sum_tile : V;
      S::vec lane = S::splat(0.0f), all = lane, lo = lane;
      std::int64_t x = t0;
      for (; x + S::lanes <= t1; x += S::lanes) {
        const S::vec a = S::load(pf + x), b = S::load(qf + x), m = S::select(S::less(a, b), a, b);
        lane += m;
        all += a + b;
        lo = S::select(S::less(m, lo), m, lo);
      }
      float lane1 = 0.0f, all1 = 0.0f, lo1 = 0.0f;
      for (; x < t1; ++x) {
        const float a = pf[x], b = qf[x], m = one::select(one::less(a, b), a, b);
        lane1 += m;
        all1 += a + b;
        lo1 = one::select(one::less(m, lo1), m, lo1);
      }
      alignas(64) float los[S::lanes];
      S::store(los, lo);
      for (const float v : los) ok = ok && v >= 0.0f;
      s += static_cast<double>(S::hsum(lane)) + static_cast<double>(lane1);
      total += static_cast<double>(S::hsum(all)) + static_cast<double>(all1);
      ok = ok && lo1 >= 0.0f && total - total == 0.0;  // NaN or infinite: never 0
    }
  } else {
    for (std::int64_t x = 0; x < V && ok; ++x) {
      const float a = p[x], b = q != nullptr ? (*q)[x] : a;
      ok = valid_entry(a) && valid_entry(b);
      s += static_cast<double>(a < b ? a : b);
    }
  }
  if (!ok) return make_status(status_code::non_finite, "p or q row holds a NaN, infinite or negative entry");
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
      const detail::row_ref qu = detail::row_of(q, u);
      SPECDEC_TRY(detail::checked_sum(pu, &qu, V, s));
      out[static_cast<std::size_t>(first)] = static_cast<float>(std::fmin(s, 1.0));
      continue;
    }
    double mass = 0.0;
    SPECDEC_TRY(detail::checked_sum(pu, nullptr, V, mass));
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
