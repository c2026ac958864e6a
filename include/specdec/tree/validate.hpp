//! \file
//! Validation of tree inputs. Every entry point that takes a tree from a
//! caller runs (or documents that it trusts) one of these checks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "specdec/core/config.hpp"
#include "specdec/core/status.hpp"
#include "specdec/core/workspace.hpp"
#include "specdec/tree/token_tree.hpp"

namespace specdec {

//! Checks that `parent` describes one tree in topological order: non-empty,
//! parent[0] == -1, and 0 <= parent[i] < i for i > 0. O(N), no allocation.
//! Returns: empty_input, no_root, multiple_roots, parent_out_of_range or
//! not_topological, with the offending node as index.
SPECDEC_HD constexpr status validate_topological_parents(const node_id* parent, std::int32_t n) noexcept {
  if (n <= 0 || parent == nullptr) return make_status(status_code::empty_input, "tree has no nodes");
  if (parent[0] != -1) {
    // Distinguish "no root at all" from "root not first" so callers get the precise fault.
    bool any_root = false;
    for (std::int32_t i = 0; i < n; ++i) any_root = any_root || parent[i] == -1;
    if (!any_root) return make_status(status_code::no_root, "no node has parent -1");
    return make_status(status_code::not_topological, "node 0 must be the root (parent -1)", 0);
  }
  for (std::int32_t i = 1; i < n; ++i) {
    const node_id p = parent[i];
    if (p == -1) return make_status(status_code::multiple_roots, "more than one node has parent -1", i);
    if (p < -1 || p >= n) return make_status(status_code::parent_out_of_range, "parent id out of range", i);
    if (p >= i) return make_status(status_code::not_topological, "parent[i] must be < i", i);
  }
  return status::success();
}

//! Span overload of validate_topological_parents.
inline status validate_topological_parents(std::span<const node_id> parent) noexcept {
  if (parent.size() > static_cast<std::size_t>(INT32_MAX))
    return make_status(status_code::invalid_argument, "tree too large for 32-bit node ids");
  return validate_topological_parents(parent.data(), static_cast<std::int32_t>(parent.size()));
}

namespace detail {
//! validate_parents_any_order with `scratch` (n ints) already provided.
inline status parents_any_order(std::span<const node_id> parent, std::int32_t* scratch) noexcept {
  const auto n = static_cast<std::int64_t>(parent.size());
  if (n == 0) return make_status(status_code::empty_input, "tree has no nodes");
  std::int64_t root = -1;
  for (std::int64_t i = 0; i < n; ++i) {
    const node_id p = parent[static_cast<std::size_t>(i)];
    if (p == -1) {
      if (root >= 0) return make_status(status_code::multiple_roots, "more than one node has parent -1", i);
      root = i;
    } else if (p < -1 || p >= n || p == i) {
      return p == i ? make_status(status_code::cycle, "node is its own parent", i)
                    : make_status(status_code::parent_out_of_range, "parent id out of range", i);
    }
  }
  if (root < 0) return make_status(status_code::no_root, "no node has parent -1");
  // Colour walk: 0 = unseen, 1 = on the current walk, 2 = known to reach the root.
  for (std::int64_t i = 0; i < n; ++i) scratch[i] = 0;
  scratch[static_cast<std::size_t>(root)] = 2;
  for (std::int64_t i = 0; i < n; ++i) {
    std::int64_t u = i;
    while (scratch[static_cast<std::size_t>(u)] == 0) {
      scratch[static_cast<std::size_t>(u)] = 1;
      u = parent[static_cast<std::size_t>(u)];
    }
    if (scratch[static_cast<std::size_t>(u)] == 1)
      return make_status(status_code::cycle, "parent links form a cycle", i);
    for (std::int64_t v = i; scratch[static_cast<std::size_t>(v)] == 1; v = parent[static_cast<std::size_t>(v)])
      scratch[static_cast<std::size_t>(v)] = 2;
  }
  return status::success();
}

}  // namespace detail

//! Bytes of workspace validate_parents_any_order needs for `n` nodes (n
//! ints, plus unaligned_workspace_slack: any address works).
constexpr std::size_t parents_any_order_workspace_size(std::size_t n) noexcept {
  workspace_carver c;
  (void)c.take<std::int32_t>(n);
  return c.bytes_used() + unaligned_workspace_slack;
}

//! Checks a parent array in any order: one root, every parent in range, no
//! cycle. Needs parents_any_order_workspace_size(N) bytes of workspace.
//! Returns empty_input, no_root, multiple_roots, parent_out_of_range, cycle
//! or buffer_too_small. O(N).
inline status validate_parents_any_order(std::span<const node_id> parent, std::span<std::byte> workspace) noexcept {
  if (parent.empty()) return make_status(status_code::empty_input, "tree has no nodes");
  workspace_carver c = unaligned_carver(workspace.data(), workspace.size());
  auto* scratch = c.take<std::int32_t>(parent.size());
  if (workspace.data() == nullptr || c.overflowed())
    return make_status(status_code::buffer_too_small, "workspace smaller than parents_any_order_workspace_size(N)");
  return detail::parents_any_order(parent, scratch);
}

//! Checks that every token is in [0, vocab_size). Returns token_out_of_range
//! with the node as index, or invalid_argument for vocab_size <= 0.
SPECDEC_HD constexpr status validate_tokens(const token_id* token, std::int32_t n, std::int64_t vocab_size) noexcept {
  if (vocab_size <= 0) return make_status(status_code::invalid_argument, "vocab_size must be positive");
  for (std::int32_t i = 0; i < n; ++i)
    if (token[i] < 0 || token[i] >= vocab_size)
      return make_status(status_code::token_out_of_range, "token id out of range", i);
  return status::success();
}

//! Full check of a tree view: topological parents, depth[i] ==
//! depth[parent[i]] + 1 with depth[0] == 0 (when depth is given), and
//! tokens in range (when vocab_size > 0; pass 0 to skip the token check).
SPECDEC_HD constexpr status validate_tree(const tree_view& t, std::int64_t vocab_size = 0) noexcept {
  if (t.size > 0 && t.token == nullptr)
    return make_status(status_code::invalid_argument, "tree_view has no token array");
  SPECDEC_TRY(validate_topological_parents(t.parent, t.size));
  if (t.depth != nullptr) {
    if (t.depth[0] != 0) return make_status(status_code::invalid_argument, "root depth must be 0", 0);
    for (std::int32_t i = 1; i < t.size; ++i)
      if (t.depth[i] != t.depth[t.parent[i]] + 1)
        return make_status(status_code::invalid_argument, "depth[i] must equal depth[parent[i]] + 1", i);
  }
  if (vocab_size > 0) SPECDEC_TRY(validate_tokens(t.token, t.size, vocab_size));
  return status::success();
}

//! Sizes of parallel arrays must agree: a helper for entry points taking
//! several spans.
SPECDEC_HD constexpr status check_same_size(std::int64_t a, std::int64_t b, const char* what) noexcept {
  return a == b ? status::success() : make_status(status_code::size_mismatch, what);
}

}  // namespace specdec
