//! \file
//! Linearizations of a tree (DFS and BFS) as permutations both ways, and
//! applying a permutation to a tree's arrays.
//!
//! Conventions: `new_to_old[i]` is the old id of the node placed at new
//! position i; `old_to_new[old]` is its new position. Children are always
//! visited in rank order, which for a tree in topological order means
//! ascending node id among siblings (the order a drafter appended them).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "specdec/core/error.hpp"
#include "specdec/core/status.hpp"
#include "specdec/tree/detail/tree_common.hpp"
#include "specdec/tree/token_tree.hpp"
#include "specdec/tree/validate.hpp"

namespace specdec {

//! Bytes of workspace dfs_order / bfs_order need for `n` nodes: a children
//! CSR and a stack (3n + 1 ints), plus unaligned_workspace_slack (any
//! address works).
constexpr std::size_t order_workspace_size(std::size_t n) noexcept {
  workspace_carver c;
  (void)detail::carve_tree_walk(c, n);
  return c.bytes_used() + unaligned_workspace_slack;
}

namespace detail {
enum class order_kind { dfs, bfs };

inline status tree_order(std::span<const node_id> parent, std::span<node_id> new_to_old, std::span<node_id> old_to_new,
                         std::span<std::byte> workspace, order_kind kind) noexcept {
  std::int32_t n = 0;
  SPECDEC_TRY(node_count(parent.size(), n));
  SPECDEC_TRY(validate_topological_parents(parent.data(), n));
  if (new_to_old.size() < parent.size() || old_to_new.size() < parent.size())
    return make_status(status_code::buffer_too_small, "permutation outputs must hold N entries");
  workspace_carver c = unaligned_carver(workspace.data(), workspace.size());
  const tree_walk_scratch w = carve_tree_walk(c, parent.size());
  if (workspace.data() == nullptr || c.overflowed())
    return make_status(status_code::buffer_too_small, "workspace smaller than order_workspace_size(N)");
  build_children_csr(parent.data(), n, w.offsets, w.kids);
  const std::int32_t reached = kind == order_kind::dfs ? dfs_preorder(w.offsets, w.kids, 0, w.stack, new_to_old.data())
                                                       : bfs_order(w.offsets, w.kids, 0, new_to_old.data());
  if (reached != n) return make_status(status_code::internal_error, "tree walk missed nodes");
  for (std::int32_t i = 0; i < n; ++i)
    old_to_new[static_cast<std::size_t>(new_to_old[static_cast<std::size_t>(i)])] = i;
  return status::success();
}
}  // namespace detail

//! Depth-first (pre-order) linearization of a tree in topological order:
//! every node is followed by its whole subtree, children in ascending id.
//! This keeps each root-to-leaf path's prefix contiguous, which is why it is
//! the default layout. Writes both permutations (N entries each). Needs
//! order_workspace_size(N) bytes of workspace. O(N), deterministic.
//! Errors: those of validate_topological_parents, buffer_too_small.
inline status dfs_order(std::span<const node_id> parent, std::span<node_id> new_to_old, std::span<node_id> old_to_new,
                        std::span<std::byte> workspace) noexcept {
  return detail::tree_order(parent, new_to_old, old_to_new, workspace, detail::order_kind::dfs);
}

//! Breadth-first linearization: nodes by depth; within a depth, in the order
//! their parents were placed, siblings in ascending id. Same contract as
//! dfs_order.
inline status bfs_order(std::span<const node_id> parent, std::span<node_id> new_to_old, std::span<node_id> old_to_new,
                        std::span<std::byte> workspace) noexcept {
  return detail::tree_order(parent, new_to_old, old_to_new, workspace, detail::order_kind::bfs);
}

//! Checks that the two arrays are inverse permutations of [0, n):
//! old_to_new[new_to_old[i]] == i with every entry in range. That alone
//! proves both are bijections, so no scratch is needed. O(N).
inline status check_permutation(std::span<const node_id> new_to_old, std::span<const node_id> old_to_new) noexcept {
  if (new_to_old.size() != old_to_new.size())
    return make_status(status_code::size_mismatch, "permutations differ in size");
  const auto n = static_cast<std::int64_t>(new_to_old.size());
  for (std::int64_t i = 0; i < n; ++i) {
    const node_id o = new_to_old[static_cast<std::size_t>(i)];
    if (o < 0 || o >= n) return make_status(status_code::out_of_range, "new_to_old entry out of range", i);
    if (old_to_new[static_cast<std::size_t>(o)] != i)
      return make_status(status_code::invalid_argument, "old_to_new is not the inverse of new_to_old", i);
  }
  return status::success();
}

//! Parent array of the relabelled tree: new_parent[i] =
//! old_to_new[parent[new_to_old[i]]] (or -1 for the root). The input must be
//! a tree in topological order and the permutation must keep it one
//! (root first, parents before children), as DFS and BFS orders do;
//! otherwise not_topological and `new_parent` is left untouched. O(N).
inline status permute_parents(std::span<const node_id> parent, std::span<const node_id> new_to_old,
                              std::span<const node_id> old_to_new, std::span<node_id> new_parent) noexcept {
  std::int32_t n = 0;
  SPECDEC_TRY(detail::node_count(parent.size(), n));
  SPECDEC_TRY(validate_topological_parents(parent.data(), n));
  if (new_to_old.size() != parent.size())
    return make_status(status_code::size_mismatch, "permutation size differs from the tree's");
  SPECDEC_TRY(check_permutation(new_to_old, old_to_new));
  if (new_parent.size() < parent.size()) return make_status(status_code::buffer_too_small, "new_parent must hold N");
  // Check first, write second: outputs stay untouched on error.
  for (std::int32_t i = 0; i < n; ++i) {
    const node_id p = parent[static_cast<std::size_t>(new_to_old[static_cast<std::size_t>(i)])];
    const node_id np = p < 0 ? -1 : old_to_new[static_cast<std::size_t>(p)];
    if ((i == 0) != (np == -1) || np >= i)
      return make_status(status_code::not_topological, "permutation does not keep parents before children", i);
  }
  for (std::int32_t i = 0; i < n; ++i) {
    const node_id p = parent[static_cast<std::size_t>(new_to_old[static_cast<std::size_t>(i)])];
    new_parent[static_cast<std::size_t>(i)] = p < 0 ? -1 : old_to_new[static_cast<std::size_t>(p)];
  }
  return status::success();
}

//! Gathers per-node values into the new order: dst[i] = src[new_to_old[i]]
//! (tokens, scores, hidden-state row ids...). `new_to_old` entries must be
//! in [0, src.size()); `dst` must hold new_to_old.size() values. O(N).
template <class T>
status permute_values(std::span<const T> src, std::span<const node_id> new_to_old, std::span<T> dst) noexcept {
  if (dst.size() < new_to_old.size()) return make_status(status_code::buffer_too_small, "dst must hold N values");
  for (std::size_t i = 0; i < new_to_old.size(); ++i) {
    const node_id o = new_to_old[i];
    if (o < 0 || static_cast<std::size_t>(o) >= src.size())
      return make_status(status_code::out_of_range, "new_to_old entry out of range", static_cast<std::int64_t>(i));
  }
  for (std::size_t i = 0; i < new_to_old.size(); ++i) dst[i] = src[static_cast<std::size_t>(new_to_old[i])];
  return status::success();
}

//! Both directions of a relabelling (owning).
struct tree_permutation {
  std::vector<node_id> new_to_old;  //!< old id of the node at each new position
  std::vector<node_id> old_to_new;  //!< new position of each old id
};

//! Owning DFS order of a topological parent array (throws specdec::error).
inline tree_permutation dfs_order(std::span<const node_id> parent) {
  tree_permutation p{std::vector<node_id>(parent.size()), std::vector<node_id>(parent.size())};
  std::vector<std::byte> ws(order_workspace_size(parent.size()));
  throw_if_error(dfs_order(parent, p.new_to_old, p.old_to_new, ws));
  return p;
}

//! Owning BFS order of a topological parent array (throws specdec::error).
inline tree_permutation bfs_order(std::span<const node_id> parent) {
  tree_permutation p{std::vector<node_id>(parent.size()), std::vector<node_id>(parent.size())};
  std::vector<std::byte> ws(order_workspace_size(parent.size()));
  throw_if_error(bfs_order(parent, p.new_to_old, p.old_to_new, ws));
  return p;
}

//! The tree relabelled by `perm` (tokens, scores, parents and depths follow
//! their nodes). Throws specdec::error when the permutation does not fit or
//! breaks the topological order.
inline token_tree permuted(const token_tree& t, const tree_permutation& perm) {
  const auto n = static_cast<std::size_t>(t.size());
  std::vector<node_id> np(n);
  throw_if_error(permute_parents(t.parents(), perm.new_to_old, perm.old_to_new, np));
  token_tree out;
  out.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    const node_id o = perm.new_to_old[i];
    if (i == 0)
      out.add_root(t.token(o), t.score(o));
    else
      out.add_child(np[i], t.token(o), t.score(o));
  }
  return out;
}

}  // namespace specdec
