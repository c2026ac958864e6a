//! \file
//! Tree-masked selective scan with a choice of algorithm by shape: the
//! recurrent depth-first walk (tree_scan_recurrent.hpp) or the dual form
//! over ancestor pairs (tree_scan_dual.hpp). Both give the same results up
//! to rounding; only the recurrent scan can return per-node states.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>

#include "specdec/core/status.hpp"
#include "specdec/core/view.hpp"
#include "specdec/ssm/tree_scan_dual.hpp"
#include "specdec/ssm/tree_scan_recurrent.hpp"
#include "specdec/ssm/tree_ssm_inputs.hpp"
#include "specdec/tree/structure.hpp"
#include "specdec/tree/token_tree.hpp"

namespace specdec {

//! Which scan tree_scan runs.
enum class tree_scan_method {
  automatic,  //!< pick by the cost model of tree_scan_choose
  recurrent,  //!< depth-first walk with a stack of states
  dual,       //!< ancestor-pair dual form (no per-node states)
};

//! The algorithm `automatic` resolves to. Recurrent when states are wanted;
//! otherwise compares multiply-adds: recurrent 2 N H P S (state update +
//! output) against dual pairs * (G S + H P) + [h0] N H P S, where pairs =
//! sum of (depth + 1). The dual form wins for shallow trees and many heads
//! per group; deep chains favour the recurrence. O(N * depth).
inline tree_scan_method tree_scan_choose(std::span<const node_id> parent, const tree_ssm_shape& s, bool want_states,
                                         bool has_h0) noexcept {
  if (want_states) return tree_scan_method::recurrent;
  const double pairs =
      static_cast<double>(ancestor_pair_count(parent.data(), static_cast<std::int32_t>(parent.size())));
  const double n = static_cast<double>(s.nodes), h = static_cast<double>(s.heads);
  const double p = static_cast<double>(s.headdim), st = static_cast<double>(s.dstate);
  const double g = static_cast<double>(s.groups);
  const double recurrent = 2.0 * n * h * p * st;
  const double dual = pairs * (g * st + h * p) + (has_h0 ? n * h * p * st : 0.0);
  return dual < recurrent ? tree_scan_method::dual : tree_scan_method::recurrent;
}

//! Bytes of workspace tree_scan needs for `method` (for `automatic`: enough
//! for either algorithm, so the choice can depend on the call). `parent`
//! must be valid (0 otherwise).
template <ssm_scalar T>
std::size_t tree_scan_workspace_size(std::span<const node_id> parent, const tree_ssm_shape& shape,
                                     tree_scan_method method = tree_scan_method::automatic) noexcept {
  switch (method) {
    case tree_scan_method::recurrent:
      return tree_scan_recurrent_workspace_size<T>(parent, shape);
    case tree_scan_method::dual:
      return tree_scan_dual_workspace_size<T>(parent, shape);
    case tree_scan_method::automatic:
      break;
  }
  return std::max(tree_scan_recurrent_workspace_size<T>(parent, shape),
                  tree_scan_dual_workspace_size<T>(parent, shape));
}

//! Workspace bytes that serve ANY tree of at most `nodes` nodes and depth at
//! most `max_depth` (default: a chain, the worst case), for `method`: no
//! tree and no validation needed, so an engine can size the buffer once at
//! start-up. Pairs are bounded by nodes * (max_depth + 1). Never smaller
//! than the exact *_workspace_size of such a tree. O(1).
template <ssm_scalar T>
std::size_t tree_scan_workspace_bound(std::int64_t nodes, const tree_ssm_shape& shape,
                                      tree_scan_method method = tree_scan_method::automatic,
                                      std::int64_t max_depth = -1) noexcept {
  if (nodes <= 0) return 0;
  const std::int64_t depth = max_depth < 0 || max_depth > nodes - 1 ? nodes - 1 : max_depth;
  tree_ssm_shape s = shape;
  s.nodes = nodes;
  workspace_carver r, d;
  (void)detail::carve_tree_scan_recurrent_walk<T>(r, s);
  (void)detail::carve_tree_scan_recurrent_slots<T>(r, depth, s);
  (void)detail::carve_tree_scan_dual<T>(d, nodes * (depth + 1), s);
  const std::size_t rec = r.bytes_used() + unaligned_workspace_slack;
  const std::size_t dual = d.bytes_used() + unaligned_workspace_slack;
  switch (method) {
    case tree_scan_method::recurrent:
      return rec;
    case tree_scan_method::dual:
      return dual;
    case tree_scan_method::automatic:
      break;
  }
  return std::max(rec, dual);
}

//! Tree-masked selective scan: y [N, heads, headdim] and, when
//! `states.data` is set, per-node states [N, heads, headdim, dstate]
//! (forces the recurrent form; asking `dual` for states is
//! invalid_argument). Any topological order (parent[i] < i). No allocation;
//! deterministic for a given method.
template <ssm_scalar T>
status tree_scan(std::span<const node_id> parent, const tree_ssm_inputs<T>& in, const tree_ssm_options<T>& opt,
                 view3d<T> y, view4d<T> states, std::span<std::byte> workspace,
                 tree_scan_method method = tree_scan_method::automatic) noexcept {
  if (method == tree_scan_method::automatic) {
    tree_ssm_shape s;
    SPECDEC_TRY(validate_tree_ssm_shapes(in, s));
    if (static_cast<std::int64_t>(parent.size()) != s.nodes)
      return make_status(status_code::size_mismatch, "parent must have one entry per node");
    SPECDEC_TRY(validate_topological_parents(parent));
    method = tree_scan_choose(parent, s, states.data != nullptr, in.h0.data != nullptr);
  }
  if (method == tree_scan_method::dual) {
    if (states.data != nullptr)
      return make_status(status_code::invalid_argument, "the dual scan cannot return per-node states");
    return tree_scan_dual(parent, in, opt, y, workspace);
  }
  return tree_scan_recurrent(parent, in, opt, y, states, workspace);
}

}  // namespace specdec
