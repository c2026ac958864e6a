//! \file
//! Building trees from the formats engines and papers use: parent arrays
//! in any order (relabelled to a topological order), Medusa / vLLM choice
//! lists, and path matrices (retrieve-index rows).
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "specdec/core/error.hpp"
#include "specdec/core/status.hpp"
#include "specdec/core/view.hpp"
#include "specdec/tree/detail/tree_common.hpp"
#include "specdec/tree/order.hpp"
#include "specdec/tree/token_tree.hpp"
#include "specdec/tree/validate.hpp"

namespace specdec {

// ---------------------------------------------------------------------------
// Parent arrays in any order
// ---------------------------------------------------------------------------

//! Bytes of workspace relabel_topological needs for n nodes: a children
//! CSR and a stack (3n + 1 ints; the validation reuses the first n), plus
//! unaligned_workspace_slack (any address works).
constexpr std::size_t relabel_workspace_size(std::size_t n) noexcept { return order_workspace_size(n); }

//! Relabels a tree given as a parent array in any order (one root with
//! parent -1, anywhere) into DFS pre-order from the root, children visited
//! in ascending original index. Writes the new parent array and both
//! permutations (N entries each; new_parent[i] < i afterwards). O(N).
//! Errors (outputs untouched): those of validate_parents_any_order
//! (empty_input, no_root, multiple_roots, parent_out_of_range, cycle),
//! buffer_too_small.
inline status relabel_topological(std::span<const node_id> parent, std::span<node_id> new_parent,
                                  std::span<node_id> new_to_old, std::span<node_id> old_to_new,
                                  std::span<std::byte> workspace) noexcept {
  std::int32_t n = 0;
  SPECDEC_TRY(detail::node_count(parent.size(), n));
  workspace_carver c = unaligned_carver(workspace.data(), workspace.size());
  const detail::tree_walk_scratch w = detail::carve_tree_walk(c, parent.size());
  if (workspace.data() == nullptr || c.overflowed())
    return make_status(status_code::buffer_too_small, "workspace smaller than relabel_workspace_size(N)");
  SPECDEC_TRY(detail::parents_any_order(parent, w.offsets));
  if (new_parent.size() < parent.size() || new_to_old.size() < parent.size() || old_to_new.size() < parent.size())
    return make_status(status_code::buffer_too_small, "outputs must hold N entries");
  node_id root = 0;
  while (parent[static_cast<std::size_t>(root)] != -1) ++root;
  detail::build_children_csr(parent.data(), n, w.offsets, w.kids);
  if (detail::dfs_preorder(w.offsets, w.kids, root, w.stack, new_to_old.data()) != n)
    return make_status(status_code::internal_error, "tree walk missed nodes");
  for (std::int32_t i = 0; i < n; ++i)
    old_to_new[static_cast<std::size_t>(new_to_old[static_cast<std::size_t>(i)])] = i;
  for (std::int32_t i = 0; i < n; ++i) {
    const node_id p = parent[static_cast<std::size_t>(new_to_old[static_cast<std::size_t>(i)])];
    new_parent[static_cast<std::size_t>(i)] = p < 0 ? -1 : old_to_new[static_cast<std::size_t>(p)];
  }
  return status::success();
}

//! Result of an owning relabel: the topological parent array and both
//! permutations.
struct relabelled_tree {
  std::vector<node_id> parent;  //!< the relabelled, topological parent array
  tree_permutation perm;        //!< old and new ids both ways
};

//! Owning relabel_topological (throws specdec::error).
inline relabelled_tree relabel_topological(std::span<const node_id> parent) {
  relabelled_tree r{std::vector<node_id>(parent.size()),
                    {std::vector<node_id>(parent.size()), std::vector<node_id>(parent.size())}};
  std::vector<std::byte> ws(relabel_workspace_size(parent.size()));
  throw_if_error(relabel_topological(parent, r.parent, r.perm.new_to_old, r.perm.old_to_new, ws));
  return r;
}

//! An owning token_tree from a topological parent array and optional
//! tokens / scores (empty spans: token 0, score 0). Throws specdec::error
//! for an invalid tree or mismatched sizes.
inline token_tree tree_from_parents(std::span<const node_id> parent, std::span<const token_id> tokens = {},
                                    std::span<const float> scores = {}) {
  std::int32_t n = 0;
  throw_if_error(detail::node_count(parent.size(), n));
  throw_if_error(validate_topological_parents(parent.data(), n));
  if (!tokens.empty()) throw_if_error(check_same_size(tokens.size(), parent.size(), "tokens and parents differ"));
  if (!scores.empty()) throw_if_error(check_same_size(scores.size(), parent.size(), "scores and parents differ"));
  token_tree t;
  t.reserve(parent.size());
  for (std::size_t i = 0; i < parent.size(); ++i) {
    const token_id tok = tokens.empty() ? 0 : tokens[i];
    const float sc = scores.empty() ? 0.0f : scores[i];
    if (i == 0)
      t.add_root(tok, sc);
    else
      t.add_child(parent[i], tok, sc);
  }
  return t;
}

// ---------------------------------------------------------------------------
// Medusa / vLLM choice lists
// ---------------------------------------------------------------------------
//
// A choice is a tuple of child ranks from the root: (0,) is the root's
// top-1 child, (0, 1) that child's top-2 child. The root is implicit. Node
// order follows Medusa's generate_medusa_buffers: node 0 is the root, then
// the choices sorted by (length, lexicographic ranks), so the order is
// breadth-first and siblings appear in rank order; node k + 1 is the k-th
// choice in that sorted order.

//! Bytes of workspace from_choices needs for `num_choices` choices (one
//! int each, plus unaligned_workspace_slack: any address works).
constexpr std::size_t choices_workspace_size(std::size_t num_choices) noexcept {
  workspace_carver c;
  (void)c.take<std::int32_t>(num_choices);
  return c.bytes_used() + unaligned_workspace_slack;
}

//! Tree of a choice list given as CSR: choice c is
//! ranks[k] for offsets[c] <= k < offsets[c + 1]. Writes `parent` (num_choices + 1
//! entries, root first, topological) and, when `node_choice` is non-empty,
//! the input index of each node's choice (-1 for the root). O(C log C * L)
//! for C choices of length <= L; allocation-free (std::sort in place on the
//! workspace).
//! Errors (outputs untouched): size_mismatch / invalid_argument for bad
//! offsets, empty_input for an empty choice (the root is implicit),
//! out_of_range for a negative rank (index = choice), invalid_argument for
//! a duplicate choice or one whose prefix is missing (index = choice),
//! buffer_too_small.
inline status from_choices(std::span<const std::int32_t> ranks, std::span<const std::int32_t> offsets,
                           std::span<node_id> parent, std::span<std::byte> workspace,
                           std::span<std::int32_t> node_choice = {}) noexcept {
  if (offsets.empty()) return make_status(status_code::size_mismatch, "offsets must hold num_choices + 1 entries");
  const std::size_t c = offsets.size() - 1;
  std::int32_t nodes = 0;
  SPECDEC_TRY(detail::node_count(c + 1, nodes));  // the root plus one node per choice must fit int32
  const std::int32_t n_choices = nodes - 1;
  if (offsets[0] != 0 || static_cast<std::size_t>(offsets[c]) != ranks.size())
    return make_status(status_code::size_mismatch, "offsets must start at 0 and end at ranks.size()");
  for (std::size_t k = 0; k < c; ++k) {
    // Each offset is bounded before its choice is read: offsets[c] alone
    // does not bound the ones before it.
    if (offsets[k + 1] < offsets[k] || static_cast<std::size_t>(offsets[k + 1]) > ranks.size())
      return make_status(status_code::invalid_argument, "offsets must be non-decreasing and within ranks",
                         static_cast<std::int64_t>(k));
    if (offsets[k + 1] == offsets[k])
      return make_status(status_code::empty_input, "empty choice (the root is implicit)", static_cast<std::int64_t>(k));
    for (std::int32_t j = offsets[k]; j < offsets[k + 1]; ++j)
      if (ranks[static_cast<std::size_t>(j)] < 0)
        return make_status(status_code::out_of_range, "negative child rank", static_cast<std::int64_t>(k));
  }
  if (parent.size() < c + 1) return make_status(status_code::buffer_too_small, "parent must hold num_choices + 1");
  if (!node_choice.empty() && node_choice.size() < c + 1)
    return make_status(status_code::buffer_too_small, "node_choice must hold num_choices + 1");
  workspace_carver carver = unaligned_carver(workspace.data(), workspace.size());
  std::int32_t* order = carver.take<std::int32_t>(c);
  if (workspace.data() == nullptr || carver.overflowed())
    return make_status(status_code::buffer_too_small, "workspace smaller than choices_workspace_size(num_choices)");

  auto choice = [&](std::int32_t k) {
    const auto b = static_cast<std::size_t>(offsets[static_cast<std::size_t>(k)]);
    const auto e = static_cast<std::size_t>(offsets[static_cast<std::size_t>(k) + 1]);
    return ranks.subspan(b, e - b);
  };
  // Medusa's key: (length, ranks lexicographically).
  auto less = [](std::span<const std::int32_t> a, std::span<const std::int32_t> b) {
    if (a.size() != b.size()) return a.size() < b.size();
    return std::lexicographical_compare(a.begin(), a.end(), b.begin(), b.end());
  };
  for (std::int32_t k = 0; k < n_choices; ++k) order[k] = k;
  std::sort(order, order + n_choices, [&](std::int32_t a, std::int32_t b) {
    const auto ca = choice(a), cb = choice(b);
    return less(ca, cb) || (!less(cb, ca) && a < b);
  });
  // Validate everything before writing: duplicates are adjacent after the
  // sort; a prefix is found by binary search among the sorted choices.
  auto find = [&](std::span<const std::int32_t> key) -> std::int32_t {
    const std::int32_t* it =
        std::lower_bound(order, order + n_choices, key, [&](std::int32_t k, auto v) { return less(choice(k), v); });
    if (it == order + n_choices) return -1;
    const auto ck = choice(*it);
    return std::equal(ck.begin(), ck.end(), key.begin(), key.end()) ? static_cast<std::int32_t>(it - order) : -1;
  };
  for (std::int32_t s = 0; s < n_choices; ++s) {
    const auto cur = choice(order[s]);
    if (s > 0) {
      const auto prev = choice(order[s - 1]);
      if (std::equal(cur.begin(), cur.end(), prev.begin(), prev.end()))
        return make_status(status_code::invalid_argument, "duplicate choice", order[s]);
    }
    if (cur.size() > 1 && find(cur.first(cur.size() - 1)) < 0)
      return make_status(status_code::invalid_argument, "choice whose prefix is not in the list", order[s]);
  }
  parent[0] = -1;
  if (!node_choice.empty()) node_choice[0] = -1;
  for (std::int32_t s = 0; s < n_choices; ++s) {
    const auto cur = choice(order[s]);
    parent[static_cast<std::size_t>(s) + 1] = cur.size() == 1 ? 0 : find(cur.first(cur.size() - 1)) + 1;
    if (!node_choice.empty()) node_choice[static_cast<std::size_t>(s) + 1] = order[s];
  }
  return status::success();
}

//! A choice list as nested vectors (the form Python configs take).
using choice_list = std::vector<std::vector<std::int32_t>>;

//! Owning from_choices: the parent array (num_choices + 1 nodes, root
//! first) in Medusa's node order. Throws specdec::error.
inline std::vector<node_id> parents_from_choices(const choice_list& choices,
                                                 std::vector<std::int32_t>* node_choice = nullptr) {
  std::vector<std::int32_t> offsets(1, 0), ranks;
  for (const auto& ch : choices) {
    ranks.insert(ranks.end(), ch.begin(), ch.end());
    offsets.push_back(static_cast<std::int32_t>(ranks.size()));
  }
  std::vector<node_id> parent(choices.size() + 1);
  std::vector<std::byte> ws(choices_workspace_size(choices.size()));
  std::vector<std::int32_t> nc(node_choice ? choices.size() + 1 : 0);
  throw_if_error(from_choices(ranks, offsets, parent, ws, nc));
  if (node_choice) *node_choice = std::move(nc);
  return parent;
}

// ---------------------------------------------------------------------------
// Path matrices (retrieve-index rows)
// ---------------------------------------------------------------------------

//! Bytes of workspace from_paths needs for `n` nodes (n ints, plus
//! unaligned_workspace_slack: any address works).
constexpr std::size_t from_paths_workspace_size(std::size_t n) noexcept {
  workspace_carver c;
  (void)c.take<std::int32_t>(n);
  return c.bytes_used() + unaligned_workspace_slack;
}

//! Tree of a path matrix: each row lists node ids from the root (column 0,
//! id 0) down a path, then -1 padding to the row's end. Every id in
//! [0, N) (N = parent.size()) must appear, and every appearance of a node
//! must name the same parent. Writes `parent` in the given ids (any order;
//! run relabel_topological when they are not topological). O(rows * width),
//! workspace from_paths_workspace_size(N) bytes.
//! Errors (parent untouched): empty_input (no rows or N == 0),
//! invalid_argument (a row not starting at the root, -1 followed by an id,
//! a node with two different parents (index = node), a node that appears in
//! no row (index = node)), out_of_range (an id outside [-1, N)),
//! buffer_too_small.
inline status from_paths(strided_view<const node_id, 2> paths, std::span<node_id> parent,
                         std::span<std::byte> workspace) noexcept {
  std::int32_t n = 0;
  SPECDEC_TRY(detail::node_count(parent.size(), n));
  if (n == 0 || paths.extent[0] <= 0 || paths.extent[1] <= 0)
    return make_status(status_code::empty_input, "no paths or no nodes");
  workspace_carver carver = unaligned_carver(workspace.data(), workspace.size());
  std::int32_t* p = carver.take<std::int32_t>(parent.size());
  if (workspace.data() == nullptr || carver.overflowed())
    return make_status(status_code::buffer_too_small, "workspace smaller than from_paths_workspace_size(N)");
  constexpr std::int32_t unseen = -2;
  for (std::int32_t i = 0; i < n; ++i) p[i] = unseen;
  for (std::int64_t r = 0; r < paths.extent[0]; ++r) {
    if (paths(r, 0) != 0) return make_status(status_code::invalid_argument, "path does not start at the root", r);
    bool ended = false;
    node_id prev = -1;
    for (std::int64_t c = 0; c < paths.extent[1]; ++c) {
      const node_id u = paths(r, c);
      if (u < -1 || u >= n) return make_status(status_code::out_of_range, "node id out of range", r);
      if (u == -1) {
        ended = true;
        continue;
      }
      if (ended) return make_status(status_code::invalid_argument, "node id after -1 padding", r);
      if (p[u] != unseen && p[u] != prev)
        return make_status(status_code::invalid_argument, "node reached through two different parents", u);
      p[u] = prev;
      prev = u;
    }
  }
  for (std::int32_t i = 0; i < n; ++i)
    if (p[i] == unseen) return make_status(status_code::invalid_argument, "node appears in no path", i);
  for (std::int32_t i = 0; i < n; ++i) parent[static_cast<std::size_t>(i)] = p[i];
  return status::success();
}

//! from_paths over a mutable view (same contract).
inline status from_paths(strided_view<node_id, 2> paths, std::span<node_id> parent,
                         std::span<std::byte> workspace) noexcept {
  return from_paths(paths.as_const(), parent, workspace);
}

//! Owning from_paths over a row-major rows x width matrix; the node count
//! is the largest id + 1. Throws specdec::error.
inline std::vector<node_id> parents_from_paths(std::span<const node_id> matrix, std::int64_t width) {
  if (width <= 0 || matrix.size() % static_cast<std::size_t>(width) != 0)
    throw_if_error(make_status(status_code::size_mismatch, "matrix size is not a multiple of the width"));
  node_id max_id = -1;
  for (auto v : matrix) max_id = v > max_id ? v : max_id;
  std::vector<node_id> parent(static_cast<std::size_t>(max_id + 1));
  std::vector<std::byte> ws(from_paths_workspace_size(parent.size()));
  const auto rows = static_cast<std::int64_t>(matrix.size()) / width;
  throw_if_error(from_paths(make_view(matrix.data(), rows, width), parent, ws));
  return parent;
}

}  // namespace specdec
