//! \file
//! Navigating a tree in topological order: children CSR, first-child /
//! next-sibling lists, ancestor walks.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "specdec/core/config.hpp"
#include "specdec/core/error.hpp"
#include "specdec/core/status.hpp"
#include "specdec/tree/detail/tree_common.hpp"
#include "specdec/tree/token_tree.hpp"
#include "specdec/tree/validate.hpp"

namespace specdec {

//! Children of every node as CSR: the children of u are
//! children[k] for offsets[u] <= k < offsets[u + 1], in ascending id (rank order).
//! `offsets` holds N + 1 entries, `children` N - 1 (every node but the
//! root). O(N), no allocation.
//! Errors: those of validate_topological_parents, buffer_too_small.
inline status build_children_csr(std::span<const node_id> parent, std::span<std::int32_t> offsets,
                                 std::span<node_id> children) noexcept {
  std::int32_t n = 0;
  SPECDEC_TRY(detail::node_count(parent.size(), n));
  SPECDEC_TRY(validate_topological_parents(parent.data(), n));
  if (offsets.size() < parent.size() + 1 || children.size() + 1 < parent.size())
    return make_status(status_code::buffer_too_small, "offsets must hold N+1 and children N-1 entries");
  // A topological tree has exactly N - 1 nodes with a parent, so the
  // helper writes N - 1 children.
  detail::build_children_csr(parent.data(), n, offsets.data(), children.data());
  return status::success();
}

//! First-child / next-sibling lists (-1 = none), siblings in ascending id:
//! the children of u are first_child[u], next_sibling[first_child[u]], ...
//! O(N), no allocation. Errors as build_children_csr.
inline status build_first_child_next_sibling(std::span<const node_id> parent, std::span<node_id> first_child,
                                             std::span<node_id> next_sibling) noexcept {
  std::int32_t n = 0;
  SPECDEC_TRY(detail::node_count(parent.size(), n));
  SPECDEC_TRY(validate_topological_parents(parent.data(), n));
  if (first_child.size() < parent.size() || next_sibling.size() < parent.size())
    return make_status(status_code::buffer_too_small, "outputs must hold N entries");
  for (std::size_t i = 0; i < parent.size(); ++i) first_child[i] = next_sibling[i] = -1;
  // Prepending from the highest id down leaves each list in ascending order.
  for (std::int32_t i = n - 1; i > 0; --i) {
    const auto p = static_cast<std::size_t>(parent[static_cast<std::size_t>(i)]);
    next_sibling[static_cast<std::size_t>(i)] = first_child[p];
    first_child[p] = i;
  }
  return status::success();
}

//! Depth of one node by walking to the root; trusts a validated
//! topological parent array (parent[i] < i bounds the walk). O(depth).
SPECDEC_HD constexpr std::int32_t node_depth(const node_id* parent, node_id node) noexcept {
  std::int32_t d = 0;
  for (node_id u = node; parent[u] >= 0; u = parent[u]) ++d;
  return d;
}

//! Largest node depth of a validated topological parent array, without
//! scratch (for size queries that must not need a workspace). O(N * depth).
SPECDEC_HD constexpr std::int32_t max_node_depth(const node_id* parent, std::int32_t n) noexcept {
  std::int32_t best = 0;
  for (node_id i = 0; i < n; ++i) {
    const std::int32_t d = node_depth(parent, i);
    best = d > best ? d : best;
  }
  return best;
}

//! Number of (node, ancestor-or-self) pairs of a validated topological
//! parent array: the set bits of its ancestor mask, sum of (depth + 1).
//! No scratch. O(N * depth).
SPECDEC_HD constexpr std::int64_t ancestor_pair_count(const node_id* parent, std::int32_t n) noexcept {
  std::int64_t pairs = 0;
  for (node_id i = 0; i < n; ++i) pairs += node_depth(parent, i) + 1;
  return pairs;
}

//! True when `a` is an ancestor of `b` or b itself; trusts a validated
//! topological parent array and in-range ids. O(depth(b) - depth(a)):
//! ancestors have smaller ids, so the walk stops once it passes below a.
SPECDEC_HD constexpr bool is_ancestor_or_self(const node_id* parent, node_id a, node_id b) noexcept {
  node_id u = b;
  while (u > a) u = parent[u];
  return u == a;
}

//! The root-to-node path of `node` (root first, node last) into `out`;
//! `length` receives depth(node) + 1. O(depth).
//! Errors: those of validate_topological_parents, out_of_range for the
//! node, buffer_too_small when `out` is shorter than the path (nothing is
//! written then; `length` still tells the size needed).
inline status ancestor_path(std::span<const node_id> parent, node_id node, std::span<node_id> out,
                            std::int32_t& length) noexcept {
  std::int32_t n = 0;
  SPECDEC_TRY(detail::node_count(parent.size(), n));
  SPECDEC_TRY(validate_topological_parents(parent.data(), n));
  if (node < 0 || node >= n) return make_status(status_code::out_of_range, "node id out of range", node);
  length = node_depth(parent.data(), node) + 1;
  if (out.size() < static_cast<std::size_t>(length))
    return make_status(status_code::buffer_too_small, "out shorter than the path");
  std::int32_t k = length;
  for (node_id u = node; u >= 0; u = parent[static_cast<std::size_t>(u)]) out[static_cast<std::size_t>(--k)] = u;
  return status::success();
}

//! Owning children CSR.
struct children_lists {
  std::vector<std::int32_t> offsets;  //!< N + 1 entries
  std::vector<node_id> children;      //!< N - 1 entries, grouped by parent
  //! Children of u in ascending id. Throws `specdec::error` (out_of_range)
  //! for a node id outside the tree.
  std::span<const node_id> of(node_id u) const {
    if (u < 0 || static_cast<std::size_t>(u) + 1 >= offsets.size())
      throw_if_error(make_status(status_code::out_of_range, "node id out of range", u));
    const auto b = static_cast<std::size_t>(offsets[static_cast<std::size_t>(u)]);
    const auto e = static_cast<std::size_t>(offsets[static_cast<std::size_t>(u) + 1]);
    return std::span<const node_id>(children).subspan(b, e - b);
  }
};

//! Owning children CSR (throws specdec::error).
inline children_lists children_csr(std::span<const node_id> parent) {
  children_lists c{std::vector<std::int32_t>(parent.size() + 1),
                   std::vector<node_id>(parent.empty() ? 0 : parent.size() - 1)};
  throw_if_error(build_children_csr(parent, c.offsets, c.children));
  return c;
}

//! Owning root-to-node path (throws specdec::error).
inline std::vector<node_id> ancestor_path(std::span<const node_id> parent, node_id node) {
  std::int32_t len = 0;
  std::vector<node_id> out(parent.size());
  throw_if_error(ancestor_path(parent, node, out, len));
  out.resize(static_cast<std::size_t>(len));
  return out;
}

}  // namespace specdec
