//! \file
//! SpecMemo's tree shaping for memory budgets ("SpecMemo: Speculative Decoding is in Your Pocket", section 3.2):
//! per-level pruning rates from a scaled logistic function (low on the first
//! levels to keep token variety, high on deep levels so the tree stays
//! small), applied to an assumed full k-ary tree or in place to an existing
//! tree with Medusa's right-to-left rule (the rightmost, lowest-ranked
//! nodes of each level go first), and a tree with exactly given
//! (nodes, leaves) features. The seed gives the logistic only as a figure;
//! the parametrization below is ours and documented in docs/draft.md.
//!
//! Shapes are plain parent arrays plus a per-node child rank (the top-k
//! index of the head that drafts it), the form Medusa-style engines consume.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include "specdec/core/status.hpp"
#include "specdec/tree/shape.hpp"
#include "specdec/tree/token_tree.hpp"
#include "specdec/tree/validate.hpp"

namespace specdec {

//! The scaled logistic pruning schedule: the fraction of a level's nodes
//! removed at level i (1-based; the root level 0 is never pruned) is
//! rate(i) = max_rate / (1 + exp(-steepness * (i - midpoint))).
struct logistic_pruning {
  float max_rate = 0.9f;         //!< asymptotic pruning rate, in [0, 1]
  float steepness = 1.5f;        //!< > 0
  float midpoint = 2.5f;         //!< level at which half of max_rate is reached
  bool keep_first_level = true;  //!< SpecMemo keeps all k first-level tokens (rate(1) = 0)

  //! Pruning rate of level i (>= 1). O(1).
  double rate(std::int32_t level) const noexcept {
    if (level <= 0 || (keep_first_level && level == 1)) return 0.0;
    return static_cast<double>(max_rate) /
           (1.0 + std::exp(-static_cast<double>(steepness) * (level - static_cast<double>(midpoint))));
  }
  //! invalid_argument for parameters outside their domains.
  status validate() const noexcept {
    if (!(max_rate >= 0.0f && max_rate <= 1.0f))
      return make_status(status_code::invalid_argument, "max_rate must be in [0, 1]");
    if (!(steepness > 0.0f) || !std::isfinite(steepness))
      return make_status(status_code::invalid_argument, "steepness must be positive and finite");
    if (!std::isfinite(midpoint)) return make_status(status_code::invalid_argument, "midpoint must be finite");
    return status::success();
  }
};

//! Node counts per level of a full k-ary tree of `levels` levels pruned by
//! `rates`: kept_0 = 1, kept_i = clamp(round(k^i (1 - rate(i))), 1,
//! k * kept_{i-1}). Writes levels + 1 counts. Errors: invalid_argument
//! (k < 1, levels < 0, bad schedule, counts above 2^31), buffer_too_small.
inline status logistic_level_counts(std::int32_t k, std::int32_t levels, const logistic_pruning& rates,
                                    std::span<std::int64_t> counts) noexcept {
  if (k < 1 || levels < 0) return make_status(status_code::invalid_argument, "need k >= 1 and levels >= 0");
  SPECDEC_TRY(rates.validate());
  if (counts.size() < static_cast<std::size_t>(levels) + 1)
    return make_status(status_code::buffer_too_small, "counts must hold levels + 1 entries");
  counts[0] = 1;
  double full = 1.0;
  for (std::int32_t i = 1; i <= levels; ++i) {
    full *= k;
    const double want = std::round(full * (1.0 - rates.rate(i)));
    const double cap = static_cast<double>(counts[static_cast<std::size_t>(i) - 1]) * k;
    const double c = std::clamp(want, 1.0, cap);
    if (c > 2147483647.0) return make_status(status_code::invalid_argument, "level too large", i);
    counts[static_cast<std::size_t>(i)] = static_cast<std::int64_t>(c);
  }
  return status::success();
}

//! The pruned full tree: level i keeps the leftmost kept_i of the children
//! (in parent order, then rank) of the kept level-(i-1) nodes, so high-rank
//! tokens of high-rank parents survive. BFS ids. Errors as
//! logistic_level_counts, invalid_argument for trees above `max_nodes`.
inline status logistic_pruned_tree(std::int32_t k, std::int32_t levels, const logistic_pruning& rates, tree_shape& out,
                                   std::int64_t max_nodes = 1 << 20) {
  // Every level keeps >= 1 node: reject before allocating levels + 1 counts.
  if (levels >= 0 && static_cast<std::int64_t>(levels) + 1 > max_nodes)
    return make_status(status_code::invalid_argument, "tree exceeds max_nodes");
  std::vector<std::int64_t> counts(static_cast<std::size_t>(levels < 0 ? 0 : levels) + 1);
  SPECDEC_TRY(logistic_level_counts(k, levels, rates, counts));
  std::int64_t total = 0;
  for (auto c : counts) total += c;
  if (total > max_nodes) return make_status(status_code::invalid_argument, "tree exceeds max_nodes");
  out.parent.assign(1, -1);
  out.rank.assign(1, -1);
  std::int64_t begin = 0;
  for (std::int32_t i = 1; i <= levels; ++i) {
    const std::int64_t want = counts[static_cast<std::size_t>(i)];
    for (std::int64_t j = 0; j < want; ++j) {
      out.parent.push_back(static_cast<node_id>(begin + j / k));
      out.rank.push_back(static_cast<std::int32_t>(j % k));
    }
    begin += counts[static_cast<std::size_t>(i) - 1];
  }
  return status::success();
}

//! Right-to-left pruning of an existing tree (Medusa's rule, refined by
//! SpecMemo): level i (>= 1) keeps round(n_i (1 - rate(i))) of its n_i
//! nodes, or fewer when pruned parents removed more; a level's nodes are
//! ordered left to right by (their parent's position, node id), i.e.
//! siblings in id order are assumed to be in rank order, and the rightmost
//! go first. Ancestor-closed: a node survives only under a surviving parent.
//! Writes new ids (-1 = pruned, survivors renumbered in id order) and the
//! survivor count. O(N log N); allocates O(N).
inline status right_to_left_prune(const tree_view& t, const logistic_pruning& rates, std::span<node_id> new_index,
                                  std::int32_t& kept) {
  SPECDEC_TRY(validate_topological_parents(t.parent, t.size));
  SPECDEC_TRY(rates.validate());
  if (new_index.size() < static_cast<std::size_t>(t.size))
    return make_status(status_code::buffer_too_small, "new_index must hold N entries");
  const auto n = static_cast<std::size_t>(t.size);
  std::vector<std::int32_t> depth(n, 0), pos(n, 0);
  std::int32_t maxd = 0;
  for (std::size_t i = 1; i < n; ++i) {
    depth[i] = depth[static_cast<std::size_t>(t.parent[i])] + 1;
    maxd = std::max(maxd, depth[i]);
  }
  std::vector<std::vector<node_id>> level(static_cast<std::size_t>(maxd) + 1);
  for (std::size_t i = 0; i < n; ++i) level[static_cast<std::size_t>(depth[i])].push_back(static_cast<node_id>(i));
  std::vector<char> alive(n, 0);
  alive[0] = 1;
  for (std::int32_t d = 1; d <= maxd; ++d) {
    auto& L = level[static_cast<std::size_t>(d)];
    std::sort(L.begin(), L.end(), [&](node_id a, node_id b) {
      const auto pa = pos[static_cast<std::size_t>(t.parent[a])], pb = pos[static_cast<std::size_t>(t.parent[b])];
      return pa < pb || (pa == pb && a < b);
    });
    for (std::size_t j = 0; j < L.size(); ++j) pos[static_cast<std::size_t>(L[j])] = static_cast<std::int32_t>(j);
    const auto target = static_cast<std::int64_t>(std::round(static_cast<double>(L.size()) * (1.0 - rates.rate(d))));
    std::int64_t taken = 0;
    for (const node_id v : L) {
      if (taken >= target) break;
      if (!alive[static_cast<std::size_t>(t.parent[v])]) continue;
      alive[static_cast<std::size_t>(v)] = 1;
      ++taken;
    }
  }
  std::int32_t next = 0;
  for (std::size_t i = 0; i < n; ++i) new_index[i] = alive[i] ? next++ : -1;
  kept = next;
  return status::success();
}

//! A tree with exactly `nodes` nodes (root included), `leaves` leaves,
//! depth <= max_depth and at most `max_children` children per node (the
//! heads' top-k arity; 0 = unlimited): SpecMemo's "(#nodes, #leaves)
//! features" (SpecMemo, section 3.2 and Table 2).
//!
//! Construction: the I = nodes - leaves internal nodes form a skeleton of
//! depth <= max_depth - 1 with as few skeleton leaves as possible (extend
//! the current branch while it is shorter than the bound, else start a new
//! branch at the shallowest node with spare arity, so each new branch is as
//! long as possible); every skeleton leaf gets one leaf child, and the
//! remaining leaves fill spare arity shallowest first (the root's first
//! level is widest, as SpecMemo prefers). Children are ordered internal
//! first, so the most probable ranks carry the deep branches. BFS ids.
//! Feasible iff the skeleton fits and min-skeleton-leaves <= leaves <=
//! I (k - 1) + 1 (the test checks this against exhaustive enumeration).
//! Errors: invalid_argument (infeasible features). O(nodes).
inline status tree_with_features(std::int32_t nodes, std::int32_t leaves, std::int32_t max_depth, tree_shape& out,
                                 std::int32_t max_children = 0) {
  if (nodes < 1 || leaves < 1 || max_depth < 0 || max_children < 0)
    return make_status(status_code::invalid_argument,
                       "need nodes >= 1, leaves >= 1, max_depth >= 0, max_children >= 0");
  if (nodes == 1) {
    if (leaves != 1) return make_status(status_code::invalid_argument, "a 1-node tree has exactly 1 leaf");
    out.parent.assign(1, -1);
    out.rank.assign(1, -1);
    return status::success();
  }
  if (leaves > nodes - 1 || max_depth < 1)
    return make_status(status_code::invalid_argument, "more leaves than non-root nodes, or depth bound 0");
  const std::int64_t k = max_children == 0 ? nodes : max_children;
  const std::int32_t internal = nodes - leaves, h = max_depth - 1;
  struct sk {
    std::int32_t depth;
    std::vector<std::int32_t> kids;  // internal children, in creation order
    std::int64_t leaf_kids;
  };
  std::vector<sk> t;
  t.reserve(static_cast<std::size_t>(internal));
  t.push_back({0, {}, 0});
  std::int32_t tip = 0;
  for (std::int32_t m = 1; m < internal; ++m) {
    std::int32_t at = -1;
    if (t[static_cast<std::size_t>(tip)].depth < h) {
      at = tip;  // extending the current branch adds no skeleton leaf
    } else {
      // Nodes are created in DFS order along branches; scan for the shallowest with spare arity.
      for (std::size_t u = 0; u < t.size(); ++u)
        if (t[u].depth < h && static_cast<std::int64_t>(t[u].kids.size()) < k &&
            (at < 0 || t[u].depth < t[static_cast<std::size_t>(at)].depth))
          at = static_cast<std::int32_t>(u);
    }
    if (at < 0)
      return make_status(status_code::invalid_argument, "too many internal nodes for the depth and arity bounds");
    t.push_back({t[static_cast<std::size_t>(at)].depth + 1, {}, 0});
    tip = static_cast<std::int32_t>(t.size() - 1);
    t[static_cast<std::size_t>(at)].kids.push_back(tip);
  }
  std::int64_t need = 0, spare = 0;
  for (auto& u : t) {
    if (u.kids.empty()) u.leaf_kids = 1, ++need;
    spare += k - static_cast<std::int64_t>(u.kids.size()) - u.leaf_kids;
  }
  if (leaves < need || leaves - need > spare)
    return make_status(status_code::invalid_argument, "leaf count infeasible for the depth and arity bounds");
  // Remaining leaves: shallowest first, then lowest id.
  std::vector<std::int32_t> by_depth(t.size());
  for (std::size_t u = 0; u < t.size(); ++u) by_depth[u] = static_cast<std::int32_t>(u);
  std::stable_sort(by_depth.begin(), by_depth.end(), [&](std::int32_t a, std::int32_t b) {
    return t[static_cast<std::size_t>(a)].depth < t[static_cast<std::size_t>(b)].depth;
  });
  std::int64_t rest = leaves - need;
  for (const std::int32_t u : by_depth) {
    auto& x = t[static_cast<std::size_t>(u)];
    const std::int64_t add = std::min<std::int64_t>(rest, k - static_cast<std::int64_t>(x.kids.size()) - x.leaf_kids);
    x.leaf_kids += add;
    rest -= add;
  }
  // BFS emission: skeleton children first, then leaf children.
  out.parent.assign(1, -1);
  out.rank.assign(1, -1);
  std::vector<std::int32_t> queue = {0};  // skeleton ids in BFS order; queue[i] has output id q_id[i]
  std::vector<node_id> q_id = {0};
  struct pending {
    node_id parent;
    std::int32_t first_rank;
    std::int64_t count;
  };
  std::vector<pending> leaf_level;  // leaf children of a level, emitted after its skeleton children
  for (std::size_t head = 0; head < queue.size();) {
    const std::size_t level_end = queue.size();
    leaf_level.clear();
    for (; head < level_end; ++head) {
      const auto& x = t[static_cast<std::size_t>(queue[head])];
      std::int32_t r = 0;
      for (const std::int32_t c : x.kids) {
        out.parent.push_back(q_id[head]);
        out.rank.push_back(r++);
        queue.push_back(c);
        q_id.push_back(static_cast<node_id>(out.parent.size() - 1));
      }
      leaf_level.push_back({q_id[head], static_cast<std::int32_t>(x.kids.size()), x.leaf_kids});
    }
    // Leaf children of this level's nodes, after all skeleton children (BFS ids stay grouped by depth).
    for (const auto& p : leaf_level) {
      std::int32_t r = p.first_rank;
      for (std::int64_t j = 0; j < p.count; ++j) {
        out.parent.push_back(p.parent);
        out.rank.push_back(r++);
      }
    }
  }
  return status::success();
}

}  // namespace specdec
