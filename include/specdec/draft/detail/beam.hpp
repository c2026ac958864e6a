//! \file
//! Internal: the joint-probability beam shared by the EAGLE-2 style beam
//! builder and Lyanna's token-info sampling, plus pruning in place.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "specdec/core/status.hpp"
#include "specdec/draft/detail/candidates.hpp"
#include "specdec/draft/drafter.hpp"
#include "specdec/draft/prune.hpp"

namespace specdec::detail {

//! Reusable scratch of the beam (kept between builds).
struct beam_scratch {
  level_scratch level;  // the frontier is level.nodes
  std::vector<node_id> next;
  std::vector<node_id> new_index;
  std::vector<std::byte> workspace;
  drafted_tree pruned;
};

//! Grows `out` (which holds at least the root, the first frontier) for
//! `depth` levels: every frontier node gets its top-k candidates as children
//! (all are kept in the tree), and the `width` new nodes of highest joint
//! probability (ties: lower node id) form the next frontier, expanded in
//! node id order. `cand(level)` fills the candidates of every node of
//! s.level.nodes at depth `level` into s.level (tok/val rows of k, count).
template <class Candidates>
status beam_grow(drafted_tree& out, std::int32_t depth, std::int32_t k, std::int32_t width, beam_scratch& s,
                 Candidates&& cand) {
  const auto kk = static_cast<std::size_t>(k);
  s.level.nodes.assign(1, 0);
  for (std::int32_t lvl = 0; lvl < depth && !s.level.nodes.empty(); ++lvl) {
    const node_id first_new = out.size();
    SPECDEC_TRY(cand(lvl));
    for (std::size_t i = 0; i < s.level.nodes.size(); ++i) {
      const node_id u = s.level.nodes[i];
      const float base = out.tree.score(u);
      for (std::size_t j = 0; j < static_cast<std::size_t>(s.level.count[i]); ++j)
        out.add(u, s.level.tok[i * kk + j], s.level.val[i * kk + j], base + log_prob(s.level.val[i * kk + j]),
                draft_mode::deterministic);
    }
    const node_id end = out.size();
    s.next.clear();
    for (node_id v = first_new; v < end; ++v) s.next.push_back(v);
    const auto keep = std::min<std::size_t>(static_cast<std::size_t>(width), s.next.size());
    const auto sc = out.tree.scores();
    std::partial_sort(s.next.begin(), s.next.begin() + static_cast<std::ptrdiff_t>(keep), s.next.end(),
                      [sc](node_id a, node_id b) {
                        const float x = sc[static_cast<std::size_t>(a)], y = sc[static_cast<std::size_t>(b)];
                        return x > y || (x == y && a < b);
                      });
    s.next.resize(keep);
    std::sort(s.next.begin(), s.next.end());
    s.level.nodes.swap(s.next);
  }
  return status::success();
}

//! Prunes `t` in place to `budget` nodes with prune_to_budget (no-op when it
//! already fits or budget == 0).
inline status prune_in_place(drafted_tree& t, std::int32_t budget, beam_scratch& s) {
  if (budget <= 0 || t.size() <= budget) return status::success();
  s.new_index.resize(static_cast<std::size_t>(t.size()));
  s.workspace.resize(prune_workspace_size(t.size()) + alignof(float));
  // std::vector<std::byte> storage comes from operator new: suitably aligned for float.
  std::int32_t kept = 0;
  SPECDEC_TRY(prune_to_budget(t.tree.view(), budget, s.new_index, s.workspace, kept));
  SPECDEC_TRY(compact_drafted_tree(t, s.new_index, s.pruned));
  std::swap(t, s.pruned);
  return status::success();
}

}  // namespace specdec::detail
