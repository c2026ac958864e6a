//! \file
//! Speculative Streaming tree drafts ("Speculative Streaming: Fast LLM Inference without Auxiliary Models",
//! sections 3.2.2-3.2.3): the top-k tokens of each of gamma stream distributions form the levels of a tree in which
//! every token of stream n is a parent of every token of stream n+1 (1 + sum_g k^g nodes unpruned). Paths whose
//! parent-to-child transition probability falls below a threshold are pruned with their subtrees (the paper's
//! early-exit pruning layer).
//!
//! Two entry points: a builder that asks a transition model while growing
//! (so pruned subtrees are never created), and `prune_by_transition` for a
//! tree already flattened, given one transition probability per node (the
//! early-exit logits of the pass that verifies it). Children are
//! deterministic: verify with the one-hot q rule. The builder also has the
//! `tree_builder` signature (loop/concepts.hpp), drafting from a
//! `stream_source` (the round's stream rows, e.g. the stream heads of the
//! previous target pass), so a speculative_session can run it.
#pragma once

#include <cmath>
#include <concepts>
#include <cstdint>
#include <span>
#include <vector>

#include "specdec/core/error.hpp"
#include "specdec/core/status.hpp"
#include "specdec/core/view.hpp"
#include "specdec/draft/detail/topk.hpp"
#include "specdec/draft/drafter.hpp"
#include "specdec/tree/validate.hpp"

namespace specdec {

//! A parent-to-child transition model: the probability of `child_token`
//! following `parent_token` at tree node `parent` (SS approximates it with
//! low-rank early-exit logits).
template <class T>
concept transition_model = requires(T& t, node_id parent, token_id parent_token, token_id child_token) {
  { t(parent, parent_token, child_token) } -> std::convertible_to<float>;
};

//! The transition model that keeps every edge (the unpruned tree).
struct keep_all_transitions {
  //! Every transition has probability 1.
  constexpr float operator()(node_id, token_id, token_id) const noexcept { return 1.0f; }
};

//! What a stream tree drafts from in a round: `stream_rows(round, rows)`
//! sets `rows` to gamma x V stream probabilities (row g = the distribution
//! of the (g+1)-th future token after round.root_token; unit column stride,
//! valid until the next call) and returns a status. A source may also have
//! a member `transition(parent, parent_token, child_token)` (a
//! transition_model); without one every edge is kept.
template <class S>
concept stream_source = requires(S& s, const draft_round& r, view2d<const float>& rows) {
  { s.stream_rows(r, rows) } -> std::same_as<status>;
};

//! The simplest stream_source: rows the caller refreshes before each round
//! (e.g. written by its target's stream heads), and a transition model.
template <transition_model Transition = keep_all_transitions>
struct stream_rows_source {
  view2d<const float> streams{};  //!< gamma x V stream probabilities of the coming round
  Transition transition{};        //!< edge pruning model (keep_all_transitions: none)
  //! Sets rows to `streams`.
  status stream_rows(const draft_round&, view2d<const float>& rows) const noexcept {
    rows = streams;
    return status::success();
  }
};

//! Options of `stream_tree_builder`.
struct stream_tree_options {
  std::int32_t k = 2;             //!< tokens taken from each stream (>= 1)
  float threshold = 0.0f;         //!< keep an edge when transition prob >= threshold (in [0, 1])
  std::int32_t max_nodes = 4096;  //!< refuse (invalid_argument) when the tree would exceed this
  //! > 0: use at most this many stream rows (tree depth); also bounds
  //! node_bound() by 1 + k + ... + k^max_depth. 0: every row given.
  std::int32_t max_depth = 0;
};

//! Builds SS trees level by level (BFS ids). Level g holds, under each
//! surviving node of level g-1, the top-k tokens of stream g (descending
//! stream probability, ties lower id) whose transition probability from the
//! parent is >= threshold. Node prob = stream probability; score = sum of
//! log stream probabilities along the path. O(gamma * V * k) for the top-k
//! plus one transition call per candidate edge.
class stream_tree_builder {
 public:
  //! A builder with these options.
  explicit stream_tree_builder(stream_tree_options o = {}) : opt_(o) {}

  //! `streams` is gamma x V probabilities (unit column stride); row g is
  //! the distribution of the (g+1)-th future token. Errors: invalid_argument
  //! (k < 1, k > V, threshold outside [0, 1], tree > max_nodes, strides),
  //! row errors, non_finite (a NaN transition probability).
  template <class Transition = keep_all_transitions>
  requires transition_model<Transition> status build(view2d<const float> streams, token_id root_token,
                                                     drafted_tree& out, Transition&& tr = {}) {
    if (opt_.k < 1) return make_status(status_code::invalid_argument, "k must be >= 1");
    if (!(opt_.threshold >= 0.0f && opt_.threshold <= 1.0f))
      return make_status(status_code::invalid_argument, "threshold must be in [0, 1]");
    if (opt_.max_depth < 0) return make_status(status_code::invalid_argument, "max_depth must be >= 0");
    const std::int64_t V = streams.extent[1];
    const std::int64_t gamma =
        opt_.max_depth > 0 && streams.extent[0] > opt_.max_depth ? opt_.max_depth : streams.extent[0];
    if (gamma > 0 && (V <= 0 || streams.data == nullptr))
      return make_status(status_code::empty_input, "stream rows are empty");
    if (gamma > 0 && streams.stride[1] != 1)
      return make_status(status_code::invalid_argument, "stream rows need unit column stride");
    if (gamma > 0 && opt_.k > V) return make_status(status_code::invalid_argument, "k exceeds the vocabulary size");
    const auto kk = static_cast<std::size_t>(opt_.k);
    tok_.resize(static_cast<std::size_t>(gamma) * kk);
    val_.resize(static_cast<std::size_t>(gamma) * kk);
    cnt_.resize(static_cast<std::size_t>(gamma));
    for (std::int64_t g = 0; g < gamma; ++g) {
      const std::span<const float> row(streams.data + g * streams.stride[0], static_cast<std::size_t>(V));
      std::int32_t n = 0;
      double mass = 0.0;
      SPECDEC_TRY(
          detail::topk_probabilities(row, opt_.k, tok_.data() + g * opt_.k, val_.data() + g * opt_.k, n, &mass));
      for (std::int32_t j = 0; j < n; ++j) val_[static_cast<std::size_t>(g * opt_.k + j)] /= static_cast<float>(mass);
      cnt_[static_cast<std::size_t>(g)] = n;
    }
    out.reset(root_token);
    std::int32_t begin = 0, end = 1;
    for (std::int64_t g = 0; g < gamma && begin < end; ++g) {
      for (node_id u = begin; u < end; ++u) {
        for (std::int32_t j = 0; j < cnt_[static_cast<std::size_t>(g)]; ++j) {
          const auto idx = static_cast<std::size_t>(g * opt_.k + j);
          const float p = static_cast<float>(tr(u, out.tree.token(u), tok_[idx]));
          if (std::isnan(p)) return make_status(status_code::non_finite, "transition probability is NaN", u);
          if (!(p >= opt_.threshold)) continue;
          if (out.size() >= opt_.max_nodes) return make_status(status_code::invalid_argument, "tree exceeds max_nodes");
          out.add(u, tok_[idx], val_[idx], out.tree.score(u) + detail::log_prob(val_[idx]), draft_mode::deterministic);
        }
      }
      begin = end;
      end = out.size();
    }
    return status::success();
  }

  //! The tree_builder signature: the rows (and the transition model, when
  //! the source has one) of `src.stream_rows(round)`, rooted at
  //! round.root_token. The rng and q_rows of `round` are not used (the
  //! children are deterministic). Errors: the source's, then as above.
  template <stream_source S>
  status build(S& src, const draft_round& round, drafted_tree& out) {
    view2d<const float> rows{};
    SPECDEC_TRY(src.stream_rows(round, rows));
    if constexpr (requires { src.transition(node_id{}, token_id{}, token_id{}); })
      return build(rows, round.root_token, out, src.transition);
    else
      return build(rows, round.root_token, out);
  }

  //! Largest tree the options allow: max_nodes, or 1 + k + ... + k^max_depth
  //! when that is smaller (set max_depth for a session: it sizes its
  //! per-node buffers with this).
  [[nodiscard]] std::int32_t node_bound() const noexcept {
    if (opt_.max_depth <= 0 || opt_.k < 1) return opt_.max_nodes;
    double n = 1.0, level = 1.0;
    for (std::int32_t g = 0; g < opt_.max_depth && n < opt_.max_nodes; ++g) n += (level *= opt_.k);
    return n < opt_.max_nodes ? static_cast<std::int32_t>(n) : opt_.max_nodes;
  }

  //! The options it was built with.
  const stream_tree_options& options() const noexcept { return opt_; }

 private:
  stream_tree_options opt_;
  std::vector<token_id> tok_;
  std::vector<float> val_;
  std::vector<std::int32_t> cnt_;
};

//! Prunes an existing (flattened) tree by transition probability: node i
//! (i > 0) survives when transition[i] >= threshold and its parent survives;
//! the root always survives. Writes new ids (or -1) into `new_index` in id
//! order, and the survivor count into `kept`. Errors: tree validation,
//! size_mismatch, buffer_too_small, non_finite (NaN), invalid_argument
//! (threshold outside [0, 1]). O(N), no allocation.
inline status prune_by_transition(const tree_view& t, std::span<const float> transition, float threshold,
                                  std::span<node_id> new_index, std::int32_t& kept) noexcept {
  SPECDEC_TRY(validate_topological_parents(t.parent, t.size));
  if (transition.size() != static_cast<std::size_t>(t.size))
    return make_status(status_code::size_mismatch, "one transition probability per node");
  if (new_index.size() < static_cast<std::size_t>(t.size))
    return make_status(status_code::buffer_too_small, "new_index must hold N entries");
  if (!(threshold >= 0.0f && threshold <= 1.0f))
    return make_status(status_code::invalid_argument, "threshold must be in [0, 1]");
  for (std::int32_t i = 1; i < t.size; ++i)
    if (std::isnan(transition[static_cast<std::size_t>(i)]))
      return make_status(status_code::non_finite, "transition probability is NaN", i);
  std::int32_t next = 0;
  new_index[0] = next++;
  for (std::int32_t i = 1; i < t.size; ++i) {
    const bool keep =
        new_index[static_cast<std::size_t>(t.parent[i])] >= 0 && transition[static_cast<std::size_t>(i)] >= threshold;
    new_index[static_cast<std::size_t>(i)] = keep ? next++ : -1;
  }
  kept = next;
  return status::success();
}

}  // namespace specdec
