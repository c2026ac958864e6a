//! \file
//! Acceptance models for planning: the probability that the rank-r child
//! (0-based, siblings in node id order = draft rank order) of a node at depth
//! d-1 is the one verification accepts, given that node was reached
//! (Sequoia's positional acceptance assumption, refined per depth). Under
//! it, node v is reached with probability f(v) = product of p(depth, rank)
//! along its root path, and the expected number of accepted draft tokens of
//! a tree is sum_{v != root} f(v) (one more token, the bonus, comes free).
//! The same statistics are estimated from verification results by counting,
//! per (depth, rank), how often such a child was offered and accepted.
#pragma once

#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include "specdec/core/status.hpp"
#include "specdec/tree/token_tree.hpp"
#include "specdec/tree/validate.hpp"

namespace specdec {

//! Per-depth, per-rank acceptance probabilities: p[(d - 1) * ranks + r] for
//! a rank-r child at depth d (1-based). Depths beyond `depths` use the last
//! row; ranks >= `ranks` have probability 0. Owning, small.
struct acceptance_model {
  std::int32_t depths = 0;  //!< depth rows (depth 1 .. depths)
  std::int32_t ranks = 0;   //!< sibling ranks per row
  std::vector<double> p;    //!< depths x ranks probabilities, row d - 1 for depth d

  //! A depth-independent (Sequoia) model from a per-rank vector.
  static acceptance_model positional(std::span<const double> per_rank) {
    acceptance_model m;
    m.depths = 1;
    m.ranks = static_cast<std::int32_t>(per_rank.size());
    m.p.assign(per_rank.begin(), per_rank.end());
    return m;
  }

  //! Probability for a child at `depth` (>= 1) with sibling rank `rank` (>= 0).
  double at(std::int32_t depth, std::int32_t rank) const noexcept {
    if (rank < 0 || rank >= ranks || depths <= 0) return 0.0;
    const std::int32_t d = depth < 1 ? 1 : (depth > depths ? depths : depth);
    return p[static_cast<std::size_t>(d - 1) * static_cast<std::size_t>(ranks) + static_cast<std::size_t>(rank)];
  }

  //! Entries finite and in [0, 1], each depth's row summing to <= 1 (at most
  //! one child is accepted), sizes consistent. O(depths * ranks).
  status validate() const noexcept {
    if (depths < 0 || ranks < 0) return make_status(status_code::invalid_argument, "negative model dimensions");
    if (p.size() != static_cast<std::size_t>(depths) * static_cast<std::size_t>(ranks))
      return make_status(status_code::size_mismatch, "p must hold depths * ranks entries");
    for (std::int32_t d = 0; d < depths; ++d) {
      double s = 0.0;
      for (std::int32_t r = 0; r < ranks; ++r) {
        const double x = p[static_cast<std::size_t>(d) * static_cast<std::size_t>(ranks) + static_cast<std::size_t>(r)];
        if (!std::isfinite(x)) return make_status(status_code::non_finite, "acceptance probability is not finite", r);
        if (x < 0.0 || x > 1.0)
          return make_status(status_code::invalid_argument, "acceptance probability outside [0, 1]", r);
        s += x;
      }
      if (s > 1.0 + 1e-9)
        return make_status(status_code::invalid_argument, "a depth's acceptance probabilities sum above 1", d);
    }
    return status::success();
  }
};

//! Sibling rank of every node (children numbered 0, 1, ... in id order;
//! the root gets -1). `rank` and `scratch` need N entries each. O(N).
inline status sibling_ranks(const tree_view& t, std::span<std::int32_t> rank,
                            std::span<std::int32_t> scratch) noexcept {
  SPECDEC_TRY(validate_topological_parents(t.parent, t.size));
  if (rank.size() < static_cast<std::size_t>(t.size) || scratch.size() < static_cast<std::size_t>(t.size))
    return make_status(status_code::buffer_too_small, "rank and scratch need N entries");
  for (std::int32_t i = 0; i < t.size; ++i) scratch[static_cast<std::size_t>(i)] = 0;
  rank[0] = -1;
  for (std::int32_t i = 1; i < t.size; ++i)
    rank[static_cast<std::size_t>(i)] = scratch[static_cast<std::size_t>(t.parent[i])]++;
  return status::success();
}

//! Expected number of accepted draft tokens of tree `t` under `m` (add 1 for
//! the tokens produced per round); `reach` receives f(v) per node (N
//! doubles), `scratch` needs 2N ints. O(N), no allocation.
inline status expected_accepted_length(const tree_view& t, const acceptance_model& m, std::span<double> reach,
                                       std::span<std::int32_t> scratch, double& out) noexcept {
  SPECDEC_TRY(m.validate());
  SPECDEC_TRY(validate_topological_parents(t.parent, t.size));
  const auto n = static_cast<std::size_t>(t.size);
  if (scratch.size() < 2 * n || reach.size() < n)
    return make_status(status_code::buffer_too_small, "reach needs N doubles and scratch 2N ints");
  const auto rank = scratch.first(n), depth = scratch.subspan(n, n);
  SPECDEC_TRY(sibling_ranks(t, rank, depth));  // depth doubles as the child counter first
  depth[0] = 0;
  reach[0] = 1.0;
  double sum = 0.0;
  for (std::size_t i = 1; i < n; ++i) {
    const auto p = static_cast<std::size_t>(t.parent[i]);
    depth[i] = depth[p] + 1;
    reach[i] = reach[p] * m.at(depth[i], rank[i]);
    sum += reach[i];
  }
  out = sum;
  return status::success();
}

//! Convenience overload that allocates its scratch.
inline status expected_accepted_length(const tree_view& t, const acceptance_model& m, double& out) {
  const auto n = static_cast<std::size_t>(t.size > 0 ? t.size : 0);
  std::vector<double> reach(n);
  std::vector<std::int32_t> scratch(2 * n);
  return expected_accepted_length(t, m, reach, scratch, out);
}

//! Counts gathered from verification results: for a child at depth d
//! (1-based, d <= depths; deeper children are pooled into depth `depths`)
//! and sibling rank r < ranks, how many times such a child was offered
//! (its parent was reached) and how many times it was the accepted one.
struct acceptance_counts {
  std::int32_t depths = 0;              //!< depth rows (deeper children pool into the last)
  std::int32_t ranks = 0;               //!< sibling ranks per row
  std::vector<std::uint64_t> offered;   //!< depths x ranks: times a child was offered (its parent reached)
  std::vector<std::uint64_t> accepted;  //!< depths x ranks: times that child was the accepted one
  std::uint64_t rounds = 0;             //!< verification rounds recorded
  std::uint64_t accepted_tokens = 0;    //!< draft tokens accepted over all rounds

  //! Empty counts (no rows).
  acceptance_counts() = default;
  //! Zero counts for `d` depths and `r` ranks (each at least 1).
  acceptance_counts(std::int32_t d, std::int32_t r)
      : depths(d < 1 ? 1 : d),
        ranks(r < 1 ? 1 : r),
        offered(static_cast<std::size_t>(depths) * static_cast<std::size_t>(ranks), 0),
        accepted(offered.size(), 0) {}

  //! Records one verified round: `path` is the accepted root-to-node path
  //! (path[0] == 0, each entry a child of the previous). Every node on the
  //! path offered all its children; each step of the path accepted one.
  //! Errors: tree validation, invalid_argument (malformed path). O(N).
  status record(const tree_view& t, std::span<const node_id> path) {
    if (depths < 1 || ranks < 1 ||
        offered.size() != static_cast<std::size_t>(depths) * static_cast<std::size_t>(ranks) ||
        accepted.size() != offered.size())
      return make_status(status_code::invalid_argument,
                         "acceptance_counts needs depths, ranks >= 1 and matching arrays");
    SPECDEC_TRY(validate_topological_parents(t.parent, t.size));
    if (path.empty() || path[0] != 0) return make_status(status_code::invalid_argument, "path must start at the root");
    for (std::size_t i = 1; i < path.size(); ++i)
      if (path[i] <= 0 || path[i] >= t.size || t.parent[path[i]] != path[i - 1])
        return make_status(status_code::invalid_argument, "path entries must be parent-linked node ids",
                           static_cast<std::int64_t>(i));
    scratch_.assign(static_cast<std::size_t>(t.size), 0);
    rank_.assign(static_cast<std::size_t>(t.size), -1);
    for (std::int32_t i = 1; i < t.size; ++i)
      rank_[static_cast<std::size_t>(i)] = scratch_[static_cast<std::size_t>(t.parent[i])]++;
    for (std::size_t i = 0; i < path.size(); ++i) {
      const auto u = static_cast<std::size_t>(path[i]);
      const std::int32_t d = static_cast<std::int32_t>(i) + 1;  // depth of u's children
      const std::int32_t row = d > depths ? depths - 1 : d - 1;
      const std::int32_t nchild = scratch_[u];
      for (std::int32_t r = 0; r < nchild && r < ranks; ++r)
        ++offered[static_cast<std::size_t>(row) * static_cast<std::size_t>(ranks) + static_cast<std::size_t>(r)];
      if (i + 1 < path.size()) {
        const std::int32_t r = rank_[static_cast<std::size_t>(path[i + 1])];
        if (r < ranks)
          ++accepted[static_cast<std::size_t>(row) * static_cast<std::size_t>(ranks) + static_cast<std::size_t>(r)];
      }
    }
    ++rounds;
    accepted_tokens += path.size() - 1;
    return status::success();
  }

  //! The estimated model: p = (accepted + alpha) / (offered + alpha + beta)
  //! per (depth, rank) (alpha = beta = 0: plain frequencies, 0 when never
  //! offered). Rows are then scaled down if they sum above 1, which only
  //! smoothing can cause.
  acceptance_model estimate(double alpha = 0.0, double beta = 0.0) const {
    acceptance_model m;
    m.depths = depths;
    m.ranks = ranks;
    m.p.assign(offered.size(), 0.0);
    for (std::size_t i = 0; i < offered.size(); ++i) {
      const double den = static_cast<double>(offered[i]) + alpha + beta;
      m.p[i] = den > 0.0 ? (static_cast<double>(accepted[i]) + alpha) / den : 0.0;
    }
    for (std::int32_t d = 0; d < depths; ++d) {
      double s = 0.0;
      for (std::int32_t r = 0; r < ranks; ++r) s += m.p[static_cast<std::size_t>(d * ranks + r)];
      if (s > 1.0)
        for (std::int32_t r = 0; r < ranks; ++r) m.p[static_cast<std::size_t>(d * ranks + r)] /= s;
    }
    return m;
  }

  //! Depth-pooled per-rank estimate (Sequoia's acceptance vector).
  std::vector<double> positional_estimate() const {
    std::vector<double> v(static_cast<std::size_t>(ranks), 0.0);
    for (std::int32_t r = 0; r < ranks; ++r) {
      std::uint64_t o = 0, a = 0;
      for (std::int32_t d = 0; d < depths; ++d) {
        o += offered[static_cast<std::size_t>(d * ranks + r)];
        a += accepted[static_cast<std::size_t>(d * ranks + r)];
      }
      v[static_cast<std::size_t>(r)] = o > 0 ? static_cast<double>(a) / static_cast<double>(o) : 0.0;
    }
    return v;
  }

  //! Mean accepted draft tokens per recorded round (0 before any round).
  double mean_accepted() const noexcept {
    return rounds > 0 ? static_cast<double>(accepted_tokens) / static_cast<double>(rounds) : 0.0;
  }

 private:
  std::vector<std::int32_t> scratch_;
  std::vector<std::int32_t> rank_;
};

}  // namespace specdec
