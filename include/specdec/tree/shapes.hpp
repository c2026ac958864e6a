//! \file
//! Static tree shapes from the literature, as parent arrays (structure
//! only; tokens are the caller's, or placeholder 0 in the owning helpers).
//!
//! Every shape is laid out breadth-first: node 0 is the root, then depth 1,
//! depth 2, ...; within a depth, children are grouped by parent in parent
//! order and appear in rank order. So parent[i] < i, and the children of a
//! node are contiguous.
//!
//! - chain(n): n nodes, each the child of the previous (plain speculative
//!   decoding with n - 1 drafted tokens).
//! - k-ary(k, d): the full k-ary tree of depth d, 1 + k + ... + k^d nodes;
//!   parent[i] = (i - 1) / k.
//! - SpecMemo (arity, levels) full trees (SpecMemo): k-ary(arity, levels).
//! - Speculative Streaming ("Speculative Streaming: Fast LLM Inference without Auxiliary Models"): gamma streams each
//! proposing top-k
//!   tokens, every token of stream g a child of every token of stream g - 1:
//!   structure k-ary(k, gamma), 1 + sum_g k^g nodes; the node at depth g
//!   with sibling rank r carries stream g's rank-r token.
//! - per-level widths w_1..w_L: level l has w_l nodes, split over the
//!   w_{l-1} nodes of the level above in contiguous blocks as evenly as
//!   possible, earlier parents taking the remainder: parent p (0-based in
//!   its level) gets floor(w_l / w_{l-1}) + (p < w_l mod w_{l-1}) children.
//!   Equal widths give w parallel chains below a root with w children.
//! - STree static trees (STree, Table 4): the text fixes per-depth node
//!   counts for configurations A (depth 4, width 3, 13 tokens including the
//!   root: widths 3,3,3,3) and E (depth 5, width 3, 16 tokens: 3,3,3,3,3);
//!   both are encoded with the per-level rule above. B, C and D are only
//!   drawn in the paper's Fig. 5 (their width/depth/token counts do not
//!   determine the per-level widths), so they are not provided. STree's
//!   beam-search tree (N steps keeping M beams) is level widths M x N.
#pragma once

#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "specdec/core/error.hpp"
#include "specdec/core/status.hpp"
#include "specdec/tree/build.hpp"
#include "specdec/tree/token_tree.hpp"

namespace specdec {

namespace detail {
inline constexpr std::int64_t max_tree_nodes = std::numeric_limits<std::int32_t>::max();

inline status check_parent_size(std::span<node_id> parent, std::int64_t n) noexcept {
  if (static_cast<std::int64_t>(parent.size()) != n)
    return make_status(status_code::size_mismatch, "parent must hold exactly the shape's node count");
  return status::success();
}
}  // namespace detail

//! Node count of a full k-ary tree of depth `depth` (1 + k + ... + k^depth).
//! Errors: invalid_argument for k < 1 or depth < 0, or a count above
//! INT32_MAX.
inline status kary_tree_size(std::int32_t k, std::int32_t depth, std::int32_t& n) noexcept {
  if (k < 1 || depth < 0) return make_status(status_code::invalid_argument, "k-ary tree needs k >= 1, depth >= 0");
  std::int64_t total = 1, level = 1;
  for (std::int32_t d = 0; d < depth; ++d) {
    level *= k;
    total += level;
    if (total > detail::max_tree_nodes)
      return make_status(status_code::invalid_argument, "tree larger than INT32_MAX nodes");
  }
  n = static_cast<std::int32_t>(total);
  return status::success();
}

//! A chain: parent[i] = i - 1 over parent.size() nodes. Errors: empty_input.
inline status build_chain(std::span<node_id> parent) noexcept {
  if (parent.empty()) return make_status(status_code::empty_input, "a chain needs at least the root");
  if (parent.size() > static_cast<std::size_t>(detail::max_tree_nodes))
    return make_status(status_code::invalid_argument, "tree larger than INT32_MAX nodes");
  for (std::size_t i = 0; i < parent.size(); ++i) parent[i] = static_cast<node_id>(i) - 1;
  return status::success();
}

//! The full k-ary tree of depth `depth` in breadth-first order;
//! `parent.size()` must equal kary_tree_size. O(N).
inline status build_kary_tree(std::int32_t k, std::int32_t depth, std::span<node_id> parent) noexcept {
  std::int32_t n = 0;
  SPECDEC_TRY(kary_tree_size(k, depth, n));
  SPECDEC_TRY(detail::check_parent_size(parent, n));
  parent[0] = -1;
  for (std::int32_t i = 1; i < n; ++i) parent[static_cast<std::size_t>(i)] = (i - 1) / k;
  return status::success();
}

//! Node count of a per-level-widths tree: 1 + sum of widths.
//! Errors: invalid_argument for a width < 1 or a count above INT32_MAX.
inline status level_widths_tree_size(std::span<const std::int32_t> widths, std::int32_t& n) noexcept {
  std::int64_t total = 1;
  for (std::size_t l = 0; l < widths.size(); ++l) {
    if (widths[l] < 1)
      return make_status(status_code::invalid_argument, "level width must be >= 1", static_cast<std::int64_t>(l));
    total += widths[l];
    if (total > detail::max_tree_nodes)
      return make_status(status_code::invalid_argument, "tree larger than INT32_MAX nodes");
  }
  n = static_cast<std::int32_t>(total);
  return status::success();
}

//! Per-level-widths tree (distribution rule in the file comment);
//! `parent.size()` must equal level_widths_tree_size. O(N).
inline status build_level_widths_tree(std::span<const std::int32_t> widths, std::span<node_id> parent) noexcept {
  std::int32_t n = 0;
  SPECDEC_TRY(level_widths_tree_size(widths, n));
  SPECDEC_TRY(detail::check_parent_size(parent, n));
  parent[0] = -1;
  std::int32_t prev_start = 0, prev_width = 1, next = 1;
  for (const std::int32_t w : widths) {
    const std::int32_t base = w / prev_width, extra = w % prev_width;
    for (std::int32_t p = 0; p < prev_width; ++p) {
      const std::int32_t count = base + (p < extra ? 1 : 0);
      for (std::int32_t c = 0; c < count; ++c) parent[static_cast<std::size_t>(next++)] = prev_start + p;
    }
    prev_start += prev_width;
    prev_width = w;
  }
  return status::success();
}

//! SpecMemo's full attention tree with `arity` children per node over
//! `levels` decoding heads (SpecMemo): the full k-ary tree.
inline status specmemo_tree_size(std::int32_t arity, std::int32_t levels, std::int32_t& n) noexcept {
  return kary_tree_size(arity, levels, n);
}
//! See specmemo_tree_size.
inline status build_specmemo_tree(std::int32_t arity, std::int32_t levels, std::span<node_id> parent) noexcept {
  return build_kary_tree(arity, levels, parent);
}

//! Node count of a Speculative Streaming tree: 1 + sum_{g=1..gamma} k^g.
inline status stream_tree_size(std::int32_t gamma, std::int32_t k, std::int32_t& n) noexcept {
  return kary_tree_size(k, gamma, n);
}

//! Speculative Streaming tree draft ("Speculative Streaming: Fast LLM Inference without Auxiliary Models"): structure
//! of build_kary_tree(k, gamma), and tokens: the root carries `root_token`, the node at depth g with sibling rank r
//! carries `stream_topk[(g - 1) * k + r]` (stream g's top-k, best first). `stream_topk` holds gamma * k tokens;
//! `parent` and `tokens` hold exactly stream_tree_size nodes. O(N).
inline status build_stream_tree(std::int32_t gamma, std::int32_t k, std::span<const token_id> stream_topk,
                                token_id root_token, std::span<node_id> parent, std::span<token_id> tokens) noexcept {
  std::int32_t n = 0;
  SPECDEC_TRY(stream_tree_size(gamma, k, n));
  if (static_cast<std::int64_t>(stream_topk.size()) != static_cast<std::int64_t>(gamma) * k)
    return make_status(status_code::size_mismatch, "stream_topk must hold gamma * k tokens");
  if (static_cast<std::int64_t>(tokens.size()) != n)
    return make_status(status_code::size_mismatch, "tokens must hold exactly the tree's node count");
  SPECDEC_TRY(build_kary_tree(k, gamma, parent));
  tokens[0] = root_token;
  // Level g occupies ids [start_g, start_g + k^g); rank = (i - 1) % k.
  std::int64_t start = 1, width = 1;
  for (std::int32_t g = 1; g <= gamma; ++g) {
    width *= k;
    for (std::int64_t i = start; i < start + width; ++i)
      tokens[static_cast<std::size_t>(i)] = stream_topk[static_cast<std::size_t>((g - 1) * k + (i - 1) % k)];
    start += width;
  }
  return status::success();
}

//! STree's static tree configurations whose per-depth widths the paper's
//! text determines (STree, Table 4).
enum class stree_config : std::int32_t {
  a = 0,  //!< 4 drafting steps x 3 tokens per level (13 nodes with the root); Fig. 4a's tree
  e = 4,  //!< 5 drafting steps x 3 tokens per level (16 nodes)
};

//! Per-level widths of an STree configuration (a view of static storage).
inline std::span<const std::int32_t> stree_level_widths(stree_config c) noexcept {
  static constexpr std::int32_t a[] = {3, 3, 3, 3};
  static constexpr std::int32_t e[] = {3, 3, 3, 3, 3};
  return c == stree_config::e ? std::span<const std::int32_t>(e) : std::span<const std::int32_t>(a);
}

//! Owning chain of n nodes; tokens empty (placeholder 0) or one per node.
inline token_tree make_chain_tree(std::int32_t n, std::span<const token_id> tokens = {}) {
  std::vector<node_id> p(static_cast<std::size_t>(n < 0 ? 0 : n));
  throw_if_error(build_chain(p));
  return tree_from_parents(p, tokens);
}

//! Owning full k-ary tree of depth `depth`.
inline token_tree make_kary_tree(std::int32_t k, std::int32_t depth, std::span<const token_id> tokens = {}) {
  std::int32_t n = 0;
  throw_if_error(kary_tree_size(k, depth, n));
  std::vector<node_id> p(static_cast<std::size_t>(n));
  throw_if_error(build_kary_tree(k, depth, p));
  return tree_from_parents(p, tokens);
}

//! Owning per-level-widths tree.
inline token_tree make_level_widths_tree(std::span<const std::int32_t> widths, std::span<const token_id> tokens = {}) {
  std::int32_t n = 0;
  throw_if_error(level_widths_tree_size(widths, n));
  std::vector<node_id> p(static_cast<std::size_t>(n));
  throw_if_error(build_level_widths_tree(widths, p));
  return tree_from_parents(p, tokens);
}

//! Owning SpecMemo (arity, levels) full tree.
inline token_tree make_specmemo_tree(std::int32_t arity, std::int32_t levels, std::span<const token_id> tokens = {}) {
  return make_kary_tree(arity, levels, tokens);
}

//! Owning Speculative Streaming tree (tokens from the streams' top-k).
inline token_tree make_stream_tree(std::int32_t gamma, std::int32_t k, std::span<const token_id> stream_topk,
                                   token_id root_token) {
  std::int32_t n = 0;
  throw_if_error(stream_tree_size(gamma, k, n));
  std::vector<node_id> p(static_cast<std::size_t>(n));
  std::vector<token_id> tok(static_cast<std::size_t>(n));
  throw_if_error(build_stream_tree(gamma, k, stream_topk, root_token, p, tok));
  return tree_from_parents(p, tok);
}

//! Owning STree static tree.
inline token_tree make_stree_tree(stree_config c, std::span<const token_id> tokens = {}) {
  return make_level_widths_tree(stree_level_widths(c), tokens);
}

}  // namespace specdec
