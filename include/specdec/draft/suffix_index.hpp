//! \file
//! A suffix structure over tokens for model-free drafting in the manner of
//! SuffixDecoding (Oliaro et al. 2024, arXiv 2411.04975): a bounded-depth
//! suffix trie over the prompt and everything generated so far (optionally
//! kept across requests), in which every substring of up to `depth` tokens
//! has a node counting its occurrences. Appending a token costs O(depth)
//! hash lookups, independent of how much text is indexed. A draft matches
//! the longest suffix of the current sequence that occurred before and
//! grows a tree from that node greedily by empirical continuation
//! probability under a node budget (`suffix_tree_builder`); each drafted
//! token carries its count-based confidence. Drafts are a function of the
//! indexed text only: `draft_mode::deterministic`, verified exactly by the
//! one-hot rule (or greedy at temperature 0).
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <span>
#include <vector>

#include "specdec/core/error.hpp"
#include "specdec/core/status.hpp"
#include "specdec/draft/detail/count_trie.hpp"
#include "specdec/draft/drafter.hpp"
#include "specdec/tree/token_tree.hpp"

namespace specdec {

//! Options of a `suffix_index` (fixed at construction).
struct suffix_index_options {
  //! Longest indexed substring: a match of length m leaves depth - m tokens
  //! of continuation (>= 2).
  std::int32_t depth = 24;
  //! Trie nodes, allocated once at construction (>= depth + 1). Each
  //! appended token creates at most `depth` nodes; memory is about 48 bytes
  //! per node.
  std::int32_t capacity = 1 << 18;
  //! > 0: appended tokens must lie in [0, vocab_size).
  std::int64_t vocab_size = 0;
};

//! Bounded-depth suffix trie over one or more token sequences. Node 0 is
//! the empty string (its count: tokens appended); a node's children are the
//! tokens that followed its string, each with its own count. Sequences are
//! separated by `begin_sequence()` (no substring spans two sequences);
//! everything appended stays indexed until `clear()`, so drafts of a new
//! request also find earlier requests' text. Not thread-safe.
class suffix_index {
 public:
  //! An empty index. Throws specdec::error (invalid_argument) for bad options.
  explicit suffix_index(suffix_index_options o = {}) : opt_(o) {
    if (opt_.depth < 2) throw_if_error(make_status(status_code::invalid_argument, "suffix_index depth must be >= 2"));
    if (opt_.capacity < opt_.depth + 1 || opt_.capacity > (1 << 30))
      throw_if_error(make_status(status_code::invalid_argument, "suffix_index capacity must be in [depth + 1, 2^30]"));
    nodes_.reserve(static_cast<std::size_t>(opt_.capacity));
    table_.assign(std::bit_ceil(2 * static_cast<std::size_t>(opt_.capacity)), slot{});
    active_.assign(static_cast<std::size_t>(opt_.depth), -1);
    next_.assign(static_cast<std::size_t>(opt_.depth), -1);
    clear();
  }

  //! Forgets every sequence (capacity is kept).
  void clear() noexcept {
    nodes_.clear();
    nodes_.push_back(detail::count_node{-1, 0, -1, -1});
    std::fill(table_.begin(), table_.end(), slot{});
    begin_sequence();
  }

  //! Starts a new sequence: the next appended token is its first, and no
  //! indexed substring spans the boundary. The trie is kept.
  void begin_sequence() noexcept {
    active_len_ = 0;
    seq_len_ = 0;
    last_ = -1;
  }

  //! Appends one token to the current sequence: counts the substrings of up
  //! to `depth` tokens ending at it (O(depth)). Errors (the index is then
  //! unchanged): token_out_of_range (vocab_size > 0 and t outside [0,
  //! vocab_size), or t < 0), buffer_too_small (fewer than `depth` free nodes:
  //! clear() or use a larger capacity).
  status append(token_id t) noexcept {
    if (t < 0 || (opt_.vocab_size > 0 && t >= opt_.vocab_size))
      return make_status(status_code::token_out_of_range, "appended token out of range");
    if (static_cast<std::int64_t>(nodes_.size()) + opt_.depth > opt_.capacity)
      return make_status(status_code::buffer_too_small, "suffix_index is full (capacity)");
    // Suffix of length j + 1 ending at t = (suffix of length j before) + t.
    const std::int32_t len = std::min(active_len_ + 1, opt_.depth);
    next_[0] = child_or_add(0, t);
    for (std::int32_t j = 1; j < len; ++j)
      next_[static_cast<std::size_t>(j)] = child_or_add(active_[static_cast<std::size_t>(j) - 1], t);
    std::copy_n(next_.begin(), len, active_.begin());
    active_len_ = len;
    ++nodes_[0].count;
    ++seq_len_;
    last_ = t;
    return status::success();
  }

  //! Appends every token of `ts` (stops at the first error, which names the
  //! failing token's index in `ts`).
  status append(std::span<const token_id> ts) noexcept {
    for (std::size_t i = 0; i < ts.size(); ++i) {
      const status s = append(ts[i]);
      if (!s.ok()) return make_status(s.code(), s.message(), static_cast<std::int64_t>(i));
    }
    return status::success();
  }

  //! Makes the current sequence equal `history` followed by `root` by
  //! appending what it lacks (what a tree builder sees each round). Errors:
  //! invalid_argument (the sequence is longer than that context or its last
  //! token differs: a new request needs begin_sequence() first), and
  //! append's errors (the index keeps what was appended before the error).
  status sync(std::span<const token_id> history, token_id root) noexcept {
    const auto n = static_cast<std::int64_t>(history.size()) + 1;
    const auto at = [&](std::int64_t i) { return i + 1 < n ? history[static_cast<std::size_t>(i)] : root; };
    if (seq_len_ > n || (seq_len_ > 0 && at(seq_len_ - 1) != last_))
      return make_status(status_code::invalid_argument,
                         "the context does not extend the indexed sequence (begin_sequence() for a new request)");
    for (std::int64_t i = seq_len_; i < n; ++i) SPECDEC_TRY(append(at(i)));
    return status::success();
  }

  //! The longest suffix of the current sequence, of length min_len to
  //! max_len, that occurred before with at least one continuation: returns
  //! its length (0 = none) and sets `node` to its node (-1 = none). O(max_len).
  std::int32_t longest_match(std::int32_t max_len, std::int32_t min_len, std::int32_t& node) const noexcept {
    node = -1;
    for (std::int32_t k = std::min(max_len, active_len_); k >= std::max(min_len, 1); --k) {
      const std::int32_t u = active_[static_cast<std::size_t>(k) - 1];
      if (nodes_[static_cast<std::size_t>(u)].first_child >= 0) {
        node = u;
        return k;
      }
    }
    return 0;
  }

  //! The node of substring `s` (|s| <= depth), -1 when it never occurred
  //! (or is longer than depth). The empty string is node 0. O(|s|).
  [[nodiscard]] std::int32_t find(std::span<const token_id> s) const noexcept {
    if (s.size() > static_cast<std::size_t>(opt_.depth)) return -1;
    std::int32_t u = 0;
    for (const token_id t : s) {
      u = lookup(u, t);
      if (u < 0) return -1;
    }
    return u;
  }

  //! Occurrences of node u's string (node 0: tokens appended). Precondition:
  //! 0 <= u < size().
  [[nodiscard]] std::uint32_t count(std::int32_t u) const noexcept { return nodes_[static_cast<std::size_t>(u)].count; }
  //! Token of the edge into node u (-1 for node 0).
  [[nodiscard]] token_id token(std::int32_t u) const noexcept { return nodes_[static_cast<std::size_t>(u)].token; }
  //! First child of node u (-1 = none); children in first-seen order.
  [[nodiscard]] std::int32_t first_child(std::int32_t u) const noexcept {
    return nodes_[static_cast<std::size_t>(u)].first_child;
  }
  //! Next sibling of node u (-1 = none).
  [[nodiscard]] std::int32_t next_sibling(std::int32_t u) const noexcept {
    return nodes_[static_cast<std::size_t>(u)].next_sibling;
  }
  //! The trie nodes (for builders).
  [[nodiscard]] std::span<const detail::count_node> nodes() const noexcept { return nodes_; }

  //! Trie nodes in use (node 0 included).
  [[nodiscard]] std::int32_t size() const noexcept { return static_cast<std::int32_t>(nodes_.size()); }
  //! Largest number of nodes.
  [[nodiscard]] std::int32_t capacity() const noexcept { return opt_.capacity; }
  //! Newest token of the current sequence (-1 when it is empty).
  [[nodiscard]] token_id last_token() const noexcept { return last_; }
  //! Tokens of the current sequence.
  [[nodiscard]] std::int64_t sequence_length() const noexcept { return seq_len_; }
  //! The options it was built with.
  [[nodiscard]] const suffix_index_options& options() const noexcept { return opt_; }

 private:
  struct slot {
    std::uint64_t key = 0;
    std::int32_t node = -1;  // -1 = empty
  };
  static std::uint64_t key_of(std::int32_t parent, token_id t) noexcept {
    return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(parent)) << 32) | static_cast<std::uint32_t>(t);
  }
  std::size_t home(std::uint64_t key) const noexcept {
    // splitmix64's finalizer: every key bit reaches the low bits kept by the mask.
    std::uint64_t x = key + 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    x ^= x >> 31;
    return static_cast<std::size_t>(x) & (table_.size() - 1);
  }
  std::int32_t lookup(std::int32_t parent, token_id t) const noexcept {
    const std::uint64_t key = key_of(parent, t);
    for (std::size_t i = home(key);; i = (i + 1) & (table_.size() - 1)) {
      if (table_[i].node < 0) return -1;
      if (table_[i].key == key) return table_[i].node;
    }
  }
  // The child of `parent` carrying t, counted once more (added when new;
  // the table has room: at most capacity nodes in 2 * capacity slots).
  std::int32_t child_or_add(std::int32_t parent, token_id t) noexcept {
    const std::uint64_t key = key_of(parent, t);
    std::size_t i = home(key);
    for (; table_[i].node >= 0; i = (i + 1) & (table_.size() - 1))
      if (table_[i].key == key) {
        ++nodes_[static_cast<std::size_t>(table_[i].node)].count;
        return table_[i].node;
      }
    const auto id = static_cast<std::int32_t>(nodes_.size());
    detail::count_node& p = nodes_[static_cast<std::size_t>(parent)];
    nodes_.push_back(detail::count_node{t, 1, -1, p.first_child});  // within the reserved capacity
    // Newest first in the sibling list (O(1)); builders order by count.
    nodes_[static_cast<std::size_t>(parent)].first_child = id;
    table_[i] = slot{key, id};
    return id;
  }

  suffix_index_options opt_;
  std::vector<detail::count_node> nodes_;
  std::vector<slot> table_;
  std::vector<std::int32_t> active_;  // active_[j]: node of the suffix of length j + 1
  std::vector<std::int32_t> next_;
  std::int32_t active_len_ = 0;
  std::int64_t seq_len_ = 0;
  token_id last_ = -1;
};

//! Options of `suffix_tree_builder`.
struct suffix_tree_options {
  std::int32_t max_pattern = 8;  //!< longest suffix matched (1 .. index depth - 1)
  std::int32_t min_pattern = 1;  //!< shortest suffix matched (>= 1)
  std::int32_t max_depth = 16;   //!< deepest drafted token (>= 0; also <= index depth - match length)
  std::int32_t max_nodes = 32;   //!< node budget of the tree, root included (>= 1)
  //! > 0: the depth limit is also ceil(depth_per_match * match length)
  //! (SuffixDecoding's MAX_SPEC = alpha * p).
  float depth_per_match = 0.0f;
  //! Nodes whose joint confidence is below this are not drafted ([0, 1]).
  float min_prob = 0.0f;
  //! Pseudo-count: a child seen c times among n continuations has
  //! confidence c / (n + prior) (>= 0).
  float prior = 1.0f;
};

//! What the last build of a suffix_tree_builder matched.
struct suffix_match {
  std::int32_t length = 0;          //!< matched suffix length (0 = none: root-only tree)
  std::uint32_t continuations = 0;  //!< earlier occurrences of it that were continued
};

//! Drafts a tree from a suffix_index: match the longest suffix of the
//! current sequence (max_pattern down to min_pattern) that was continued
//! before, then grow best-first from its node by joint empirical
//! continuation probability (children's count over the sum of siblings'
//! counts plus `prior`) under the node budget. O(max_pattern + B log B)
//! for a tree of B nodes; scratch is kept (no allocation once warm). Has
//! the loop layer's `tree_builder` signature with the index as source:
//! each round the index is first synced with the round's context.
class suffix_tree_builder : public owning_build<suffix_tree_builder> {
 public:
  //! A builder with these options.
  explicit suffix_tree_builder(suffix_tree_options o = {}) : opt_(o) {}

  //! Syncs `index` with round.history + round.root_token (suffix_index::sync)
  //! and drafts into `out` (cleared first). Errors: invalid_argument (bad
  //! options, a context that does not extend the indexed sequence), the
  //! index's append errors. On error `out` holds at most the root.
  status build(suffix_index& index, const draft_round& round, drafted_tree& out) {
    out.clear();
    last_ = {};
    SPECDEC_TRY(validate(index));
    SPECDEC_TRY(index.sync(round.history, round.root_token));
    return draft(index, round.root_token, out);
  }

  //! Drafts from the index as it is (the caller appended the context, root
  //! last). Errors: invalid_argument (bad options, or the current sequence is
  //! empty or does not end with root_token).
  status draft(const suffix_index& index, token_id root_token, drafted_tree& out) {
    out.clear();
    last_ = {};
    SPECDEC_TRY(validate(index));
    if (index.sequence_length() < 1 || index.nodes().empty())
      return make_status(status_code::invalid_argument, "the index holds no token of the current sequence");
    if (index.last_token() != root_token)
      return make_status(status_code::invalid_argument, "the indexed sequence does not end with the root token");
    out.reset(root_token);
    std::int32_t node = -1;
    const std::int32_t m = index.longest_match(opt_.max_pattern, opt_.min_pattern, node);
    if (m == 0) return status::success();
    std::uint32_t cont = 0;
    for (std::int32_t c = index.first_child(node); c >= 0; c = index.next_sibling(c)) cont += index.count(c);
    last_ = {m, cont};
    const std::int32_t depth =
        std::min(detail::depth_limit(opt_.max_depth, opt_.depth_per_match, m), index.options().depth - m);
    detail::grow_best_first(index.nodes(), node,
                            detail::growth_limits{opt_.max_nodes, depth, opt_.min_prob, opt_.prior}, out, heap_);
    return status::success();
  }

  //! Most nodes a build can produce (max_nodes, at least 1).
  [[nodiscard]] std::int32_t node_bound() const noexcept { return std::max(opt_.max_nodes, 1); }
  //! What the last build matched.
  [[nodiscard]] const suffix_match& last_match() const noexcept { return last_; }
  //! The options it was built with.
  [[nodiscard]] const suffix_tree_options& options() const noexcept { return opt_; }
  //! Replaces the options (checked by the next build).
  void set_options(const suffix_tree_options& o) noexcept { opt_ = o; }

 private:
  status validate(const suffix_index& index) const noexcept {
    if (opt_.min_pattern < 1 || opt_.max_pattern < opt_.min_pattern)
      return make_status(status_code::invalid_argument, "need 1 <= min_pattern <= max_pattern");
    if (opt_.max_pattern >= index.options().depth)
      return make_status(status_code::invalid_argument, "max_pattern must be below the index depth");
    return detail::check_growth(opt_.max_nodes, opt_.max_depth, opt_.min_prob, opt_.prior, opt_.depth_per_match);
  }

  suffix_tree_options opt_;
  suffix_match last_{};
  std::vector<detail::growth_candidate> heap_;
};

}  // namespace specdec
