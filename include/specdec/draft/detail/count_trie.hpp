//! \file
//! Internal: a trie of counted continuations (first-child / next-sibling
//! links) and the best-first growth of a drafted tree from one of its
//! nodes, shared by the model-free builders (prompt_lookup.hpp,
//! suffix_index.hpp). A node's count is how often its token followed its
//! parent's string; the confidence of a child c of u is
//! count(c) / (sum of u's child counts + prior).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include "specdec/core/status.hpp"
#include "specdec/draft/drafter.hpp"
#include "specdec/tree/token_tree.hpp"

namespace specdec::detail {

//! One trie node: its token, how often it occurred, first child and next
//! sibling (-1 = none). Children are kept in insertion order.
struct count_node {
  token_id token = 0;              //!< token of the edge into this node
  std::uint32_t count = 0;         //!< occurrences of the root-to-node string
  std::int32_t first_child = -1;   //!< first child, -1 = none
  std::int32_t next_sibling = -1;  //!< next sibling, -1 = none
};

//! Limits of one best-first growth (validated by the builders).
struct growth_limits {
  std::int32_t max_nodes = 1;  //!< nodes of the drafted tree, root included
  std::int32_t max_depth = 0;  //!< deepest drafted node
  float min_prob = 0.0f;       //!< joint confidence below which nothing is drafted
  float prior = 1.0f;          //!< pseudo-count added to every node's child total
};

//! One candidate of the growth heap.
struct growth_candidate {
  double joint = 0.0;      //!< joint confidence of the root-to-candidate path
  float cond = 0.0f;       //!< confidence of its own token given its parent
  node_id parent = 0;      //!< drafted-tree parent
  std::int32_t trie = 0;   //!< trie node
  std::int32_t depth = 0;  //!< depth in the drafted tree
  token_id token = 0;      //!< its token
};

//! Heap order: joint descending, then token ascending, then trie node
//! ascending (the library's tie rule; a strict total order).
inline bool growth_before(const growth_candidate& a, const growth_candidate& b) noexcept {
  if (a.joint != b.joint) return a.joint > b.joint;
  if (a.token != b.token) return a.token < b.token;
  return a.trie < b.trie;
}

//! Pushes the children of trie node `t` (drafted-tree node `u` of depth
//! `depth`, joint `joint`) onto the heap.
inline void push_children(std::span<const count_node> trie, std::int32_t t, node_id u, std::int32_t depth, double joint,
                          const growth_limits& lim, std::vector<growth_candidate>& heap) {
  if (depth >= lim.max_depth) return;
  double total = 0.0;
  for (std::int32_t c = trie[static_cast<std::size_t>(t)].first_child; c >= 0;
       c = trie[static_cast<std::size_t>(c)].next_sibling)
    total += trie[static_cast<std::size_t>(c)].count;
  total += static_cast<double>(lim.prior);
  if (!(total > 0.0)) return;
  const auto after = [](const growth_candidate& a, const growth_candidate& b) { return growth_before(b, a); };
  for (std::int32_t c = trie[static_cast<std::size_t>(t)].first_child; c >= 0;
       c = trie[static_cast<std::size_t>(c)].next_sibling) {
    const count_node& n = trie[static_cast<std::size_t>(c)];
    if (n.count == 0) continue;
    const double cond = n.count / total;
    const double j = joint * cond;
    if (j < static_cast<double>(lim.min_prob)) continue;
    heap.push_back(growth_candidate{j, static_cast<float>(cond), u, c, depth + 1, n.token});
    std::push_heap(heap.begin(), heap.end(), after);  // max-heap on growth_before
  }
}

//! Grows `out` (already reset to the root) best-first from trie node
//! `start`: the candidate of highest joint confidence is added next (its
//! parent is always in the tree already, so ids stay topological and
//! siblings come out in descending confidence), until max_nodes nodes, no
//! candidate at or above min_prob, or nothing left within max_depth.
//! Every node is `deterministic` (a function of the counts only); `prob`
//! is its confidence, the tree score its log joint confidence. Because a
//! child's joint never exceeds its parent's, the result is the top
//! max_nodes - 1 continuations by joint confidence (ancestor-closed).
inline void grow_best_first(std::span<const count_node> trie, std::int32_t start, const growth_limits& lim,
                            drafted_tree& out, std::vector<growth_candidate>& heap) {
  heap.clear();
  if (start < 0 || lim.max_nodes <= out.size()) return;
  push_children(trie, start, 0, 0, 1.0, lim, heap);
  const auto after = [](const growth_candidate& a, const growth_candidate& b) { return growth_before(b, a); };
  while (!heap.empty() && out.size() < lim.max_nodes) {
    std::pop_heap(heap.begin(), heap.end(), after);
    const growth_candidate c = heap.back();
    heap.pop_back();
    const node_id id =
        out.add(c.parent, c.token, c.cond, static_cast<float>(std::log(c.joint)), draft_mode::deterministic);
    push_children(trie, c.trie, id, c.depth, c.joint, lim, heap);
  }
}

//! Validates the limits shared by the model-free builders.
inline status check_growth(std::int32_t max_nodes, std::int32_t max_depth, float min_prob, float prior,
                           float depth_per_match) noexcept {
  if (max_nodes < 1) return make_status(status_code::invalid_argument, "max_nodes must be >= 1 (the root)");
  if (max_depth < 0) return make_status(status_code::invalid_argument, "max_depth must be >= 0");
  if (!(min_prob >= 0.0f && min_prob <= 1.0f))
    return make_status(status_code::invalid_argument, "min_prob must be in [0, 1]");
  if (!(prior >= 0.0f) || !std::isfinite(prior))
    return make_status(status_code::invalid_argument, "prior must be finite and >= 0");
  if (!(depth_per_match >= 0.0f) || !std::isfinite(depth_per_match))
    return make_status(status_code::invalid_argument, "depth_per_match must be finite and >= 0");
  return status::success();
}

//! The depth limit of one build: max_depth, also at most
//! ceil(depth_per_match * match length) when depth_per_match > 0.
inline std::int32_t depth_limit(std::int32_t max_depth, float depth_per_match, std::int32_t match_len) noexcept {
  if (depth_per_match <= 0.0f) return max_depth;
  const double d = std::ceil(static_cast<double>(depth_per_match) * match_len);
  return d < static_cast<double>(max_depth) ? static_cast<std::int32_t>(d) : max_depth;
}

}  // namespace specdec::detail
