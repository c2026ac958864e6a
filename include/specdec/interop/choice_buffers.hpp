//! \file
//! The buffers Medusa and EAGLE-1 derive from a static choice list, on a
//! specdec tree built by from_choices (tree/build.hpp; node order = the
//! choices sorted by (length, ranks), as both peers sort them):
//! - `tree_indices`: where each node's token sits in the peer's flat
//!   candidate vector [root token, then rows of topk candidates]. Medusa:
//!   row = depth - 1 (one row per head). EAGLE-1: one row per expanded
//!   parent, numbered in node order.
//! - `retrieve_indices`: one row per leaf (root-to-leaf node ids, padded
//!   with -1). Medusa lists the leaves in reverse node order; EAGLE-1 then
//!   sorts the rows lexicographically with padding ranked last.
//! gather_candidate_tokens turns a flat candidate vector into node tokens.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>

#include "specdec/core/status.hpp"
#include "specdec/core/view.hpp"
#include "specdec/tree/token_tree.hpp"
#include "specdec/tree/validate.hpp"

namespace specdec {

//! Which peer's layout.
enum class choice_layout : std::uint8_t { medusa = 0, eagle1 = 1 };

//! The child rank of every node (node_rank[0] = -1) from a CSR choice list
//! and from_choices' node_choice output. Errors: size_mismatch, out_of_range.
inline status choice_node_ranks(std::span<const std::int32_t> ranks, std::span<const std::int32_t> offsets,
                                std::span<const std::int32_t> node_choice, std::span<std::int32_t> node_rank) noexcept {
  if (node_rank.size() < node_choice.size() || node_choice.empty())
    return make_status(status_code::size_mismatch, "node_rank needs one entry per node");
  node_rank[0] = -1;
  for (std::size_t i = 1; i < node_choice.size(); ++i) {
    const std::int32_t c = node_choice[i];
    if (c < 0 || static_cast<std::size_t>(c) + 1 >= offsets.size() || offsets[static_cast<std::size_t>(c) + 1] < 1 ||
        static_cast<std::size_t>(offsets[static_cast<std::size_t>(c) + 1]) > ranks.size())
      return make_status(status_code::out_of_range, "node_choice outside the choice list",
                         static_cast<std::int64_t>(i));
    node_rank[i] = ranks[static_cast<std::size_t>(offsets[static_cast<std::size_t>(c) + 1] - 1)];
  }
  return status::success();
}

//! tree_indices of a choice tree in the peer's layout. parent: node order of
//! from_choices (sorted); node_rank: each node's child rank, < topk.
//! Errors: empty_input, size_mismatch, not_topological (via validation),
//! out_of_range (a rank outside [0, topk), index = node),
//! invalid_argument (topk < 1, or nodes not in sorted order: a node whose
//! depth is smaller than its predecessor's). O(N).
inline status choice_tree_indices(std::span<const node_id> parent, std::span<const std::int32_t> node_rank,
                                  std::int32_t topk, choice_layout layout,
                                  std::span<std::int32_t> tree_indices) noexcept {
  const auto n = static_cast<std::int32_t>(parent.size());
  if (n < 1) return make_status(status_code::empty_input, "the tree needs a root");
  if (topk < 1) return make_status(status_code::invalid_argument, "topk must be >= 1");
  if (node_rank.size() < parent.size() || tree_indices.size() < parent.size())
    return make_status(status_code::size_mismatch, "node_rank and tree_indices need one entry per node");
  SPECDEC_TRY(validate_topological_parents(parent.data(), n));
  tree_indices[0] = 0;
  std::int32_t depth_prev = 0, group = -1;
  node_id parent_prev = -2;
  // Depth of node i = depth of its parent + 1; parents precede children, so
  // a running array is not needed: recompute by walking up (depth is small).
  for (std::int32_t i = 1; i < n; ++i) {
    const std::int32_t r = node_rank[static_cast<std::size_t>(i)];
    if (r < 0 || r >= topk) return make_status(status_code::out_of_range, "rank outside [0, topk)", i);
    std::int32_t d = 0;
    for (node_id u = i; u > 0; u = parent[static_cast<std::size_t>(u)]) ++d;
    if (d < depth_prev) return make_status(status_code::invalid_argument, "nodes must be in (depth, ranks) order", i);
    depth_prev = d;
    const node_id p = parent[static_cast<std::size_t>(i)];
    if (p != parent_prev) ++group;
    parent_prev = p;
    const std::int64_t row = layout == choice_layout::medusa ? d - 1 : group;
    const std::int64_t idx = static_cast<std::int64_t>(r) + static_cast<std::int64_t>(topk) * row + 1;
    if (idx > INT32_MAX) return make_status(status_code::invalid_argument, "tree index overflows int32", i);
    tree_indices[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(idx);
  }
  return status::success();
}

//! Node tokens from the peer's flat candidate vector: token[i] =
//! flat[tree_indices[i]]. Errors: size_mismatch, out_of_range (index = node).
inline status gather_candidate_tokens(std::span<const std::int32_t> tree_indices, std::span<const token_id> flat,
                                      std::span<token_id> token) noexcept {
  if (token.size() < tree_indices.size()) return make_status(status_code::size_mismatch, "token too small");
  for (std::size_t i = 0; i < tree_indices.size(); ++i) {
    const std::int32_t k = tree_indices[i];
    if (k < 0 || static_cast<std::size_t>(k) >= flat.size())
      return make_status(status_code::out_of_range, "tree index outside the candidate vector",
                         static_cast<std::int64_t>(i));
    token[i] = flat[static_cast<std::size_t>(k)];
  }
  return status::success();
}

//! Number of leaves and the deepest depth (retrieve_indices is leaves x
//! (depth + 1)). Errors: tree validation.
inline status retrieve_shape(std::span<const node_id> parent, std::int32_t& leaves, std::int32_t& width) noexcept {
  const auto n = static_cast<std::int32_t>(parent.size());
  if (n < 1) return make_status(status_code::empty_input, "the tree needs a root");
  SPECDEC_TRY(validate_topological_parents(parent.data(), n));
  leaves = 0;
  width = 1;
  for (std::int32_t i = 0; i < n; ++i) {
    bool leaf = true;
    for (std::int32_t j = i + 1; j < n && leaf; ++j) leaf = parent[static_cast<std::size_t>(j)] != i;
    if (leaf) ++leaves;
    std::int32_t d = 1;
    for (node_id u = i; u > 0; u = parent[static_cast<std::size_t>(u)]) ++d;
    width = std::max(width, d);
  }
  return status::success();
}

//! retrieve_indices in the peer's row order (see the file comment) into
//! `out` (retrieve_shape rows x width, unit column stride). Errors:
//! size_mismatch, tree validation. O(N^2) (a static tree, built once).
inline status retrieve_indices(std::span<const node_id> parent, choice_layout layout,
                               view2d<std::int32_t> out) noexcept {
  std::int32_t leaves = 0, width = 0;
  SPECDEC_TRY(retrieve_shape(parent, leaves, width));
  if (out.extent[0] != leaves || out.extent[1] != width || (width > 1 && out.stride[1] != 1))
    return make_status(status_code::size_mismatch, "out must be leaves x width with unit column stride");
  const auto n = static_cast<std::int32_t>(parent.size());
  std::int32_t row = 0;
  for (std::int32_t i = n - 1; i >= 0; --i) {  // reverse node order
    bool leaf = true;
    for (std::int32_t j = i + 1; j < n && leaf; ++j) leaf = parent[static_cast<std::size_t>(j)] != i;
    if (!leaf) continue;
    std::int32_t d = 0;
    for (node_id u = i; u > 0; u = parent[static_cast<std::size_t>(u)]) ++d;
    for (std::int32_t k = 0; k < width; ++k) out(row, k) = -1;
    for (node_id u = i; u >= 0; u = parent[static_cast<std::size_t>(u)]) out(row, d--) = u;
    ++row;
  }
  if (layout == choice_layout::eagle1) {
    // Insertion sort of the rows; -1 ranks after every node id.
    auto less = [&](std::int64_t a, std::int64_t b) {
      for (std::int32_t k = 0; k < width; ++k) {
        const std::int64_t x = out(a, k) < 0 ? INT64_MAX : out(a, k), y = out(b, k) < 0 ? INT64_MAX : out(b, k);
        if (x != y) return x < y;
      }
      return false;
    };
    for (std::int64_t a = 1; a < leaves; ++a)
      for (std::int64_t b = a; b > 0 && less(b, b - 1); --b)
        for (std::int32_t k = 0; k < width; ++k) std::swap(out(b, k), out(b - 1, k));
  }
  return status::success();
}

}  // namespace specdec
