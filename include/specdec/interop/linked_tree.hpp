//! \file
//! Trees in the SGLang / EAGLE linked-list format, in and out.
//!
//! SGLang's EAGLE worker describes each request's draft tree by slots
//! 0..n-1 (slot 0 is the root: the last verified token, whose own token is
//! never checked) and three arrays per slot: `retrive_next_token` (first
//! child slot or -1), `retrive_next_sibling` (next sibling slot or -1) and
//! `retrive_index` (the slot's row in the batch-flattened target rows and in
//! `predicts`). Children are visited in list order. specdec trees store nodes
//! in a topological order and visit a node's children in ascending id; the
//! conversion numbers slots in depth-first preorder with siblings in list
//! order, so both visit orders coincide, and returns the maps both ways.
//! docs/interop.md lists every format with the test that proves it.
#pragma once

#include <concepts>
#include <cstdint>
#include <span>

#include "specdec/core/config.hpp"
#include "specdec/core/status.hpp"
#include "specdec/tree/token_tree.hpp"

namespace specdec {

//! One request's linked-list tree over n slots (any integer index type;
//! SGLang uses int64). Arrays have n entries.
template <std::integral I>
struct linked_tree {
  const I* candidates = nullptr;    //!< token of each slot (slot 0's may be unused)
  const I* next_token = nullptr;    //!< first child slot, or -1
  const I* next_sibling = nullptr;  //!< next sibling slot, or -1
  std::int32_t n = 0;               //!< number of slots (length of each array)
};

//! Options of tree_from_linked_list.
struct linked_tree_options {
  //! The root's token is not a real token (SGLang never reads it): the
  //! converted root gets `root_token` instead of candidates[0].
  bool unused_root = false;
  token_id root_token = 0;  //!< token the converted root gets when unused_root is set
  //! Refuse slots the root does not reach (SGLang's tree builder leaves a
  //! slot unlinked when its parent is missing); false maps them to -1.
  bool require_all = false;
};

//! Converts a linked-list tree to a specdec tree: `parent`/`token` receive
//! `count` nodes in DFS preorder (children of a node in list order, so
//! ascending ids visit them in the peer's order); old_to_new[slot] is the
//! node of each slot (-1 when unreached) and new_to_old[node] its slot.
//! All four outputs need n entries. Errors (outputs partially written):
//! empty_input (n < 1), size_mismatch (short outputs), out_of_range (a link
//! outside [-1, n), index = slot), cycle (a slot reached twice: shared
//! child, loop or the root as a child), invalid_argument (the root has a
//! sibling; unreached slots with require_all), token_out_of_range (negative
//! candidate). O(n); no allocation. Host and device (one thread).
template <std::integral I>
SPECDEC_HD status tree_from_linked_list(const linked_tree<I>& t, const linked_tree_options& o,
                                        std::span<node_id> parent, std::span<token_id> token,
                                        std::span<std::int32_t> old_to_new, std::span<std::int32_t> new_to_old,
                                        std::int32_t& count) noexcept {
  const std::int32_t n = t.n;
  if (n < 1) return make_status(status_code::empty_input, "a linked tree needs at least its root slot");
  const auto un = static_cast<std::size_t>(n);
  if (parent.size() < un || token.size() < un || old_to_new.size() < un || new_to_old.size() < un)
    return make_status(status_code::size_mismatch, "outputs need n entries");
  if (t.candidates == nullptr || t.next_token == nullptr || t.next_sibling == nullptr)
    return make_status(status_code::invalid_argument, "linked tree arrays must not be null");
  for (std::int32_t s = 0; s < n; ++s) {
    if (t.next_token[s] < -1 || t.next_token[s] >= n || t.next_sibling[s] < -1 || t.next_sibling[s] >= n)
      return make_status(status_code::out_of_range, "linked-list index outside [-1, n)", s);
    old_to_new[static_cast<std::size_t>(s)] = -1;
  }
  if (t.next_sibling[0] != -1) return make_status(status_code::invalid_argument, "the root slot cannot have a sibling");
  // Preorder without a stack: descend to the first child, else move to the
  // next sibling of the nearest ancestor that has one.
  std::int32_t c = 0;
  std::int32_t slot = 0;
  node_id par = -1;
  for (;;) {
    if (old_to_new[static_cast<std::size_t>(slot)] != -1 || c >= n)
      return make_status(status_code::cycle, "a slot is reached twice", slot);
    const I tok = slot == 0 && o.unused_root ? static_cast<I>(o.root_token) : t.candidates[slot];
    if (tok < 0 || tok > static_cast<I>(INT32_MAX))
      return make_status(status_code::token_out_of_range, "candidate token out of range", slot);
    old_to_new[static_cast<std::size_t>(slot)] = c;
    new_to_old[static_cast<std::size_t>(c)] = slot;
    parent[static_cast<std::size_t>(c)] = par;
    token[static_cast<std::size_t>(c)] = static_cast<token_id>(tok);
    const node_id me = c++;
    if (t.next_token[slot] != -1) {
      par = me;
      slot = static_cast<std::int32_t>(t.next_token[slot]);
      continue;
    }
    node_id u = me;  // climb until a node with a next sibling
    while (u != 0 && t.next_sibling[new_to_old[static_cast<std::size_t>(u)]] == -1)
      u = parent[static_cast<std::size_t>(u)];
    if (u == 0) break;
    par = parent[static_cast<std::size_t>(u)];
    slot = static_cast<std::int32_t>(t.next_sibling[new_to_old[static_cast<std::size_t>(u)]]);
  }
  count = c;
  if (o.require_all && c != n)
    return make_status(status_code::invalid_argument, "some slots are not reached from the root");
  return status::success();
}

//! The other way: a specdec tree (topological, children in ascending id) as
//! first-child / next-sibling arrays over the same node ids (slot = node).
//! Outputs need tree.size entries. Errors: size_mismatch; the tree is
//! assumed valid (validate_tree). O(n); no allocation.
template <std::integral I>
status linked_list_from_tree(const tree_view& tree, std::span<I> next_token, std::span<I> next_sibling) noexcept {
  const auto n = static_cast<std::size_t>(tree.size);
  if (next_token.size() < n || next_sibling.size() < n)
    return make_status(status_code::size_mismatch, "outputs need tree.size entries");
  for (std::size_t i = 0; i < n; ++i) next_token[i] = next_sibling[i] = -1;
  // Walking ids downwards and pushing each node at the head of its parent's
  // list leaves every list in ascending id.
  for (std::int32_t i = tree.size - 1; i >= 1; --i) {
    const auto p = static_cast<std::size_t>(tree.parent[i]);
    next_sibling[static_cast<std::size_t>(i)] = next_token[p];
    next_token[p] = static_cast<I>(i);
  }
  return status::success();
}

}  // namespace specdec
