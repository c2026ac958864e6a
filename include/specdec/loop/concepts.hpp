//! \file
//! What the round loop plugs together: a target model that scores a whole
//! flattened tree in one forward pass, and a tree builder with one signature
//! for every way of drafting. The drafter concepts (per node and level
//! batched) live in draft/drafter.hpp and draft/level_drafter.hpp.
#pragma once

#include <concepts>
#include <cstdint>
#include <span>

#include "specdec/core/status.hpp"
#include "specdec/core/view.hpp"
#include "specdec/draft/drafter.hpp"
#include "specdec/draft/level_drafter.hpp"
#include "specdec/tree/token_tree.hpp"

namespace specdec {

//! One target forward pass over one flattened tree (one sequence).
//! - history: the committed tokens before the root, whose KV is in the
//!   caller's cache (cache_len = history.size()); the root (tree token 0, the
//!   last committed token) is scored in this pass, so node i's context is
//!   history followed by node i's root-to-node path.
//! - tree: N nodes in topological order; node i is verification slot
//!   cache_len + i (its KV goes there).
//! - positions: N entries, cache_len + depth (rotary positions).
//! - mask: N rows of mask_words 64-bit words, bit j of row i set when node j
//!   is an ancestor of node i or i itself (tree/mask.hpp).
//! - logits: N x V, caller of forward() owns it; row i must receive the
//!   target's next-token logits after node i's root path (any finite values,
//!   -inf for masked tokens).
//! Valid only during the call.
struct tree_forward {
  std::span<const token_id> history{};  //!< Committed tokens before the root (their KV is cached).
  position_id cache_len = 0;            //!< Cached KV entries, = history.size(); node i goes to slot cache_len + i.
  tree_view tree{};                     //!< The N tree nodes in topological order; node 0 is the root.
  std::span<const position_id> positions{};  //!< N rotary positions, cache_len + depth.
  std::span<const std::uint64_t> mask{};     //!< N rows of mask_words ancestor-bit words (tree/mask.hpp).
  std::int64_t mask_words = 0;               //!< 64-bit words per mask row.
  view2d<float> logits{};                    //!< N x V output: row i receives the logits after node i's path.
};

//! A target model: `forward(tree_forward)` runs one pass over the whole tree
//! and writes one logits row per node; a non-ok status aborts the round.
template <class T>
concept target_model = requires(T& t, const tree_forward& f) {
  { t.forward(f) } -> std::same_as<status>;
};

//! What a target's KV commit is told after verification: keep the entries at
//! absolute positions keep[0..) (strictly increasing, keep[0] = cache_len,
//! the root) and move the k-th to cache_len + k, e.g. with commit_kv
//! (cache/kv_commit.hpp). The cache then holds new_len entries.
struct kv_commit_request {
  position_id cache_len = 0;            //!< Cache length before the round (the root's position).
  std::span<const position_id> keep{};  //!< Absolute positions to keep, strictly increasing, keep[0] = cache_len.
  position_id new_len = 0;              //!< Entries the cache holds after the commit.
};

//! A target model that also owns a KV cache: the session calls
//! `commit(kv_commit_request)` after every round.
template <class T>
concept kv_committing_target = target_model<T> && requires(T& t, const kv_commit_request& c) {
  { t.commit(c) } -> std::same_as<status>;
};

//! A tree builder: one signature for every way of drafting, with the
//! round's key, root, history and optional q-row output in `draft_round`
//! (no setters between rounds). `Source` is what the builder drafts from
//! (a drafter, or for logits-driven builders a source struct), and
//! `node_bound()` the largest tree the current options can produce (so a
//! caller sizes its buffers once).
template <class B, class Source>
concept tree_builder = requires(B& b, const B& cb, Source& src, const draft_round& r, drafted_tree& out) {
  { b.build(src, r, out) } -> std::same_as<status>;
  { cb.node_bound() } -> std::convertible_to<std::int32_t>;
};

}  // namespace specdec
