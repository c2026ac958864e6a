//! \file
//! Forest layout for verification fusion (Lyanna: "Make Every Draft Count: Hidden State based Speculative Decoding",
//! section 6.2): several trees share one verification sequence, e.g. the tree re-sampled from the previous round's
//! hidden states next to this round's draft tree. Each tree (one per root, numbered in order of appearance) has its own
//! mask block (a node sees only its own ancestors-or-self), its own base
//! position, and its own visible cache prefix.
#pragma once

#include <cstdint>
#include <limits>
#include <span>

#include "specdec/cache/batch_layout.hpp"
#include "specdec/core/config.hpp"
#include "specdec/core/status.hpp"
#include "specdec/tree/mask.hpp"
#include "specdec/tree/token_tree.hpp"

namespace specdec {

//! Checks a forest in topological order: non-empty, parent[0] == -1, and
//! parent[i] == -1 or 0 <= parent[i] < i. Writes the number of trees.
//! O(N). Index of an error: the node.
inline status validate_forest(std::span<const node_id> parent, std::int32_t& num_trees) noexcept {
  if (parent.empty()) return make_status(status_code::empty_input, "forest has no nodes");
  if (parent.size() > static_cast<std::size_t>(INT32_MAX))
    return make_status(status_code::invalid_argument, "forest too large for 32-bit node ids");
  if (parent[0] != -1) return make_status(status_code::not_topological, "node 0 must be a root", 0);
  std::int32_t roots = 0;
  for (std::size_t i = 0; i < parent.size(); ++i) {
    const node_id p = parent[i];
    const auto ii = static_cast<std::int64_t>(i);
    if (p == -1) {
      ++roots;
      continue;
    }
    if (p < -1 || p >= static_cast<std::int64_t>(parent.size()))
      return make_status(status_code::parent_out_of_range, "parent id out of range", ii);
    if (p >= ii) return make_status(status_code::not_topological, "parent[i] must be < i", ii);
  }
  num_trees = roots;
  return status::success();
}

//! Concatenates trees given in CSR form (local parent ids, one root first
//! each) into one forest parent array with global ids: parent ids are
//! shifted by the tree's offset, roots stay -1. `out.size()` must equal
//! `parent.size()`. Validates every tree first. O(N).
inline status fuse_trees(std::span<const node_id> parent, std::span<const std::int32_t> tree_offsets,
                         std::span<node_id> out) noexcept {
  if (tree_offsets.empty() || tree_offsets[0] != 0 || static_cast<std::size_t>(tree_offsets.back()) != parent.size())
    return make_status(status_code::size_mismatch, "tree_offsets must span parent from 0");
  if (out.size() != parent.size()) return make_status(status_code::size_mismatch, "out must match parent");
  for (std::size_t t = 0; t + 1 < tree_offsets.size(); ++t) {
    // Bounded by parent.size() before the tree is read: the last offset
    // alone does not bound the ones before it.
    if (tree_offsets[t + 1] < tree_offsets[t] || static_cast<std::size_t>(tree_offsets[t + 1]) > parent.size())
      return make_status(status_code::not_sorted, "tree_offsets must be non-decreasing and within parent",
                         static_cast<std::int64_t>(t));
    const std::int32_t n = tree_offsets[t + 1] - tree_offsets[t];
    if (n == 0) return make_status(status_code::empty_input, "empty tree in a forest", static_cast<std::int64_t>(t));
    const node_id* p = parent.data() + tree_offsets[t];
    if (p[0] != -1) return make_status(status_code::not_topological, "tree must start at its root", tree_offsets[t]);
    for (std::int32_t i = 1; i < n; ++i)
      if (p[i] < 0 || p[i] >= i)
        return make_status(status_code::not_topological, "tree parent must be in [0, i)", tree_offsets[t] + i);
  }
  for (std::size_t t = 0; t + 1 < tree_offsets.size(); ++t)
    for (std::int32_t i = tree_offsets[t]; i < tree_offsets[t + 1]; ++i)
      out[static_cast<std::size_t>(i)] =
          parent[static_cast<std::size_t>(i)] < 0 ? -1 : parent[static_cast<std::size_t>(i)] + tree_offsets[t];
  return status::success();
}

//! Per-node tree ordinal and position of a forest: tree_id[i] = index of
//! the root above i (roots numbered in order), positions[i] =
//! root_position[tree_id[i]] + depth(i). root_position has one entry per
//! tree. Nothing written on error. O(N).
inline status forest_layout(std::span<const node_id> parent, std::span<const position_id> root_position,
                            std::span<std::int32_t> tree_id, std::span<position_id> positions) noexcept {
  std::int32_t trees = 0;
  SPECDEC_TRY(validate_forest(parent, trees));
  if (root_position.size() != static_cast<std::size_t>(trees))
    return make_status(status_code::size_mismatch, "root_position needs one entry per tree");
  if (tree_id.size() < parent.size() || positions.size() < parent.size())
    return make_status(status_code::buffer_too_small, "tree_id and positions need one entry per node");
  for (std::int32_t t = 0; t < trees; ++t)
    if (root_position[static_cast<std::size_t>(t)] < 0 ||
        root_position[static_cast<std::size_t>(t)] >
            std::numeric_limits<position_id>::max() - static_cast<position_id>(parent.size()))
      return make_status(status_code::out_of_range, "root position negative or too large", t);
  std::int32_t next = 0;
  for (std::size_t i = 0; i < parent.size(); ++i) {
    const node_id p = parent[i];
    if (p == -1) {
      tree_id[i] = next;
      positions[i] = root_position[static_cast<std::size_t>(next)];
      ++next;
    } else {
      tree_id[i] = tree_id[static_cast<std::size_t>(p)];
      positions[i] = positions[static_cast<std::size_t>(p)] + 1;
    }
  }
  return status::success();
}

//! Dense forest mask [N][prefix_width + N]: node i of tree t allows cache
//! slots j < prefix_len[t] (<= prefix_width) and its ancestors-or-self in
//! the sequence; everything else (other trees included) is `deny`. M is
//! std::uint8_t/bool (1/0) or float (0/-inf). O(N * (prefix_width + N)).
template <batch_mask_element M>
status forest_mask(std::span<const node_id> parent, std::span<const position_id> prefix_len, std::int32_t prefix_width,
                   std::span<M> mask, M allow, M deny) noexcept {
  std::int32_t trees = 0;
  SPECDEC_TRY(validate_forest(parent, trees));
  if (prefix_len.size() != static_cast<std::size_t>(trees))
    return make_status(status_code::size_mismatch, "prefix_len needs one entry per tree");
  if (prefix_width < 0) return make_status(status_code::invalid_argument, "prefix_width must be >= 0");
  for (std::int32_t t = 0; t < trees; ++t)
    if (prefix_len[static_cast<std::size_t>(t)] < 0 || prefix_len[static_cast<std::size_t>(t)] > prefix_width)
      return make_status(status_code::out_of_range, "prefix_len outside [0, prefix_width]", t);
  const std::size_t n = parent.size();
  const std::size_t kv = static_cast<std::size_t>(prefix_width) + n;
  if (mask.size() < n * kv) return make_status(status_code::buffer_too_small, "mask needs N * (prefix_width + N)");
  std::int32_t tree = -1;
  for (std::size_t i = 0; i < n; ++i) {
    if (parent[i] == -1) ++tree;
    M* row = mask.data() + i * kv;
    const position_id visible = prefix_len[static_cast<std::size_t>(tree)];
    for (std::int32_t j = 0; j < prefix_width; ++j) row[j] = j < visible ? allow : deny;
    M* block = row + prefix_width;
    for (std::size_t j = 0; j < n; ++j) block[j] = deny;
    for (node_id u = static_cast<node_id>(i); u >= 0; u = parent[static_cast<std::size_t>(u)])
      block[static_cast<std::size_t>(u)] = allow;
  }
  return status::success();
}

//! Packed ancestor-or-self bits of a forest, in the bit order of
//! tree/mask.hpp (bit j of row i: word j / W, bit j % W from the least
//! significant): row i (words_per_row words of Word) is its parent's row
//! plus its own bit (a root's row is its own bit), so distinct trees never
//! share a bit; for a single tree this equals build_packed_mask.
//! words_per_row >= ceil(N / W). O(N * words_per_row).
template <mask_word Word>
status forest_mask_bits(std::span<const node_id> parent, std::int32_t words_per_row, std::span<Word> bits) noexcept {
  std::int32_t trees = 0;
  SPECDEC_TRY(validate_forest(parent, trees));
  constexpr std::size_t W = sizeof(Word) * 8;
  const std::size_t n = parent.size();
  if (words_per_row < 0 || static_cast<std::size_t>(words_per_row) * W < n)
    return make_status(status_code::buffer_too_small, "words_per_row must be >= ceil(N / W)");
  const auto w = static_cast<std::size_t>(words_per_row);
  if (bits.size() < n * w) return make_status(status_code::buffer_too_small, "bits needs N * words_per_row words");
  for (std::size_t i = 0; i < n; ++i) {
    Word* row = bits.data() + i * w;
    const node_id p = parent[i];
    if (p == -1) {
      for (std::size_t k = 0; k < w; ++k) row[k] = 0;
    } else {
      const Word* prow = bits.data() + static_cast<std::size_t>(p) * w;
      for (std::size_t k = 0; k < w; ++k) row[k] = prow[k];
    }
    row[i / W] |= static_cast<Word>(Word{1} << (i % W));
  }
  return status::success();
}

}  // namespace specdec
