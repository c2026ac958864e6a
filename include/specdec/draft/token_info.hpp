//! \file
//! Lyanna's token-info sampling and re-sampling ("Make Every Draft Count", Algorithms 1-2).
//!
//! The drafter runs once per round and yields a chain of N logit rows
//! l_1..l_N (its hidden-state trajectory does not depend on the sampled
//! tokens). Token information enters only at sampling time: the children of
//! a node carrying token t at depth d-1 are the top-k tokens of
//! softmax(l_d + r(t)), where r(t) is t's row of the collapsed token-info
//! table (the already RMS-normalized E'(t)). Per level the k candidates of
//! highest joint probability form the next frontier (every candidate stays
//! in the tree); the tree is then pruned to a verification budget B by
//! cumulative probability (ancestor-closed). After a rejection, the
//! verified token t_gt at depth j roots a new tree grown from the remaining
//! rows l_{j+1}..l_N without re-running the drafter, if more than r rows
//! remain (threshold r), else the new tree is t_gt alone.
//!
//! Hot-token sparsity: the table stores rows only for frequent ("hot")
//! tokens; `slot[t]` maps a token to its row or -1, and non-hot tokens use a
//! shared fallback row (or no bias). Children are deterministic given the
//! rows: verify with the one-hot q rule (`child_mode == deterministic`).
#pragma once

#include <algorithm>
#include <climits>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <numeric>
#include <span>
#include <vector>

#include "specdec/core/error.hpp"
#include "specdec/core/status.hpp"
#include "specdec/core/view.hpp"
#include "specdec/draft/detail/beam.hpp"
#include "specdec/draft/detail/topk.hpp"
#include "specdec/draft/drafter.hpp"

namespace specdec {

//! The (sparse) token-info table. `rows` is H x V with unit column stride;
//! `slot` has V entries in [-1, H); `fallback` has V entries or is empty
//! (zero bias). A dense table is H = V with slot[t] = t.
struct token_info_table {
  view2d<const float> rows{};          //!< H x V bias rows, unit column stride
  std::span<const std::int32_t> slot;  //!< V entries: the row of token t, or -1 (use `fallback`)
  std::span<const float> fallback;     //!< V entries, or empty for a zero bias

  //! Bias row of token t (empty span = no bias). Precondition: validated table, t < V.
  std::span<const float> bias(token_id t) const noexcept {
    const std::int32_t s = slot[static_cast<std::size_t>(t)];
    if (s >= 0)
      return {rows.data + static_cast<std::int64_t>(s) * rows.stride[0], static_cast<std::size_t>(rows.extent[1])};
    return fallback;
  }
};

//! Checks shapes and slot ranges of a table for vocabulary V (O(V); the bias
//! values themselves are checked when used). Errors: size_mismatch,
//! out_of_range (a slot >= H or < -1), invalid_argument (column stride != 1).
inline status validate_token_info_table(const token_info_table& t, std::int64_t vocab_size) noexcept {
  if (vocab_size <= 0) return make_status(status_code::invalid_argument, "vocab_size must be positive");
  if (static_cast<std::int64_t>(t.slot.size()) != vocab_size)
    return make_status(status_code::size_mismatch, "slot map must have V entries");
  if (!t.fallback.empty() && static_cast<std::int64_t>(t.fallback.size()) != vocab_size)
    return make_status(status_code::size_mismatch, "fallback row must have V entries or be empty");
  if (t.rows.extent[0] > 0) {
    if (t.rows.extent[1] != vocab_size)
      return make_status(status_code::size_mismatch, "table rows must have V columns");
    if (t.rows.stride[1] != 1 || t.rows.data == nullptr)
      return make_status(status_code::invalid_argument, "table rows need unit column stride");
  }
  for (std::int64_t v = 0; v < vocab_size; ++v) {
    const std::int32_t s = t.slot[static_cast<std::size_t>(v)];
    if (s < -1 || s >= t.rows.extent[0]) return make_status(status_code::out_of_range, "slot out of range", v);
  }
  return status::success();
}

//! Hot-token selection: writes slot[t] = rank of t among the `hot` most
//! frequent tokens (count desc, ties lower id), -1 for the rest. `slot` must
//! have counts.size() entries. Deterministic, O(V log V), allocates V ints.
inline status select_hot_tokens(std::span<const std::uint64_t> counts, std::int32_t hot, std::span<std::int32_t> slot) {
  if (hot < 0) return make_status(status_code::invalid_argument, "hot token count must be >= 0");
  if (slot.size() != counts.size()) return make_status(status_code::size_mismatch, "slot must have V entries");
  std::vector<std::int32_t> order(counts.size());
  std::iota(order.begin(), order.end(), 0);
  const auto h = std::min<std::size_t>(static_cast<std::size_t>(hot), counts.size());
  std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(h), order.end(),
                    [&](std::int32_t a, std::int32_t b) {
                      const auto ca = counts[static_cast<std::size_t>(a)], cb = counts[static_cast<std::size_t>(b)];
                      return ca > cb || (ca == cb && a < b);
                    });
  std::fill(slot.begin(), slot.end(), -1);
  for (std::size_t i = 0; i < h; ++i) slot[static_cast<std::size_t>(order[i])] = static_cast<std::int32_t>(i);
  return status::success();
}

//! What a token-info tree drafts from in a round:
//! `token_info_rows(round, logits, info)` sets `logits` to the drafter's N x
//! V logit rows l_1..l_N for the tree rooted at round.root_token (unit
//! column stride, valid until the next call) and `info` to the token-info
//! table, and returns a status.
template <class S>
concept token_info_source = requires(S& s, const draft_round& r, view2d<const float>& logits, token_info_table& info) {
  { s.token_info_rows(r, logits, info) } -> std::same_as<status>;
};

//! The simplest token_info_source: rows the caller refreshes before each
//! round (its drafter's one pass) and the table.
struct token_info_rows_source {
  view2d<const float> logits{};  //!< N x V drafter logit rows of the coming round
  token_info_table info{};       //!< the (sparse) token-info table
  //! Sets logits and info to the members.
  status token_info_rows(const draft_round&, view2d<const float>& l, token_info_table& t) const noexcept {
    l = logits;
    t = info;
    return status::success();
  }
};

//! Options of `token_info_builder`.
struct token_info_options {
  std::int32_t k = 4;       //!< branch number: top-k per node and frontier size (>= 1)
  std::int32_t budget = 0;  //!< verification budget B (root included); 0 keeps the whole tree
  //! > 0: the most logit rows a round may bring (bounds node_bound()
  //! without a budget); 0: no bound (then node_bound() is the budget).
  std::int32_t max_rows = 0;
};

//! Token-info sampling (Algorithm 1) and re-sampling (Algorithm 2). At
//! most k drafter-free softmaxes of one V-row per level (two passes over
//! l_d + r(t) each); scratch reused between calls. Deterministic.
class token_info_builder {
 public:
  //! A builder with these options.
  explicit token_info_builder(token_info_options o = {}) : opt_(o) {}

  //! Grows the tree rooted at `root_token` (the last verified token t_0)
  //! from all N rows of `logits` (N x V, unit column stride), then prunes to
  //! the budget. Errors: invalid_argument (k < 1, budget < 0, k > V, bad
  //! strides), table errors, token_out_of_range (root), non_finite (NaN or
  //! +inf in l + r), zero_mass (a row that is all -inf).
  status build(view2d<const float> logits, const token_info_table& info, token_id root_token, drafted_tree& out) {
    return grow(logits, 0, info, root_token, out);
  }

  //! The tree_builder signature: grows from the logits and table of
  //! `src.token_info_rows(round)`, rooted at round.root_token, then prunes
  //! to the budget. The rng and q_rows of `round` are not used (the children
  //! are deterministic). Errors: the source's, invalid_argument (more rows
  //! than max_rows), then as above.
  template <token_info_source S>
  status build(S& src, const draft_round& round, drafted_tree& out) {
    view2d<const float> logits{};
    token_info_table info{};
    SPECDEC_TRY(src.token_info_rows(round, logits, info));
    if (opt_.max_rows > 0 && logits.extent[0] > opt_.max_rows)
      return make_status(status_code::invalid_argument, "the source gave more logit rows than max_rows");
    return grow(logits, 0, info, round.root_token, out);
  }

  //! Largest tree the options allow: the budget when set, else the grown
  //! tree of max_rows rows (1 + k + (max_rows - 1) k^2), else 0 (no bound
  //! known: a session refuses the builder's first tree).
  [[nodiscard]] std::int32_t node_bound() const noexcept {
    if (opt_.budget > 0) return opt_.budget;
    if (opt_.max_rows <= 0 || opt_.k < 1) return 0;
    const double k = opt_.k;
    const double n = 1.0 + k + (opt_.max_rows - 1.0) * k * k;
    return n < static_cast<double>(INT32_MAX) ? static_cast<std::int32_t>(n) : INT32_MAX;
  }

  //! Re-sampling after a rejection: `verified_token` is the target's token at
  //! depth `reject_depth` (1-based: accepted length + 1) of the previous
  //! tree. If N - reject_depth > r, grows a tree rooted at it from rows
  //! reject_depth..N-1 (l_{j+1}..l_N), else writes the root alone.
  //! Errors: invalid_argument (reject_depth outside [1, N], r < 0), as build.
  status resample(view2d<const float> logits, const token_info_table& info, std::int32_t reject_depth,
                  token_id verified_token, std::int32_t r, drafted_tree& out) {
    if (r < 0) return make_status(status_code::invalid_argument, "resample threshold r must be >= 0");
    if (reject_depth < 1 || reject_depth > logits.extent[0])
      return make_status(status_code::invalid_argument, "reject_depth must be in [1, N]");
    const std::int64_t remain = logits.extent[0] - reject_depth;
    if (remain > r) return grow(logits, reject_depth, info, verified_token, out);
    SPECDEC_TRY(check(logits, info, verified_token));
    out.reset(verified_token);
    return status::success();
  }

  //! The options it was built with.
  const token_info_options& options() const noexcept { return opt_; }

 private:
  status check(view2d<const float> logits, const token_info_table& info, token_id root) const {
    if (opt_.k < 1) return make_status(status_code::invalid_argument, "k must be >= 1");
    if (opt_.budget < 0) return make_status(status_code::invalid_argument, "budget must be >= 0");
    const std::int64_t V = logits.extent[1];
    if (V <= 0 || logits.data == nullptr) return make_status(status_code::empty_input, "logit rows are empty");
    if (logits.stride[1] != 1) return make_status(status_code::invalid_argument, "logit rows need unit column stride");
    if (opt_.k > V) return make_status(status_code::invalid_argument, "k exceeds the vocabulary size");
    SPECDEC_TRY(validate_token_info_table(info, V));
    if (root < 0 || root >= V) return make_status(status_code::token_out_of_range, "root token out of range");
    return status::success();
  }

  status grow(view2d<const float> logits, std::int64_t first_row, const token_info_table& info, token_id root,
              drafted_tree& out) {
    SPECDEC_TRY(check(logits, info, root));
    const std::int64_t V = logits.extent[1];
    const auto depth = static_cast<std::int32_t>(logits.extent[0] - first_row);
    // Grown tree: k children of the root, then k * k per level; node ids are 32-bit.
    const double grown =
        depth == 0 ? 1.0 : 1.0 + opt_.k + (depth - 1.0) * static_cast<double>(opt_.k) * static_cast<double>(opt_.k);
    if (grown > static_cast<double>(INT32_MAX))
      return make_status(status_code::invalid_argument, "k * k * rows exceeds 32-bit node ids");
    out.reset(root);
    out.reserve(static_cast<std::size_t>(grown < double(1 << 16) ? grown : double(1 << 16)));
    auto candidates = [&](std::int32_t lvl) -> status {
      const std::span<const float> row(logits.data + (first_row + lvl) * logits.stride[0], static_cast<std::size_t>(V));
      auto& lv = s_.level;
      const auto kk = static_cast<std::size_t>(opt_.k);
      lv.tok.resize(lv.nodes.size() * kk);
      lv.val.resize(lv.nodes.size() * kk);
      lv.count.assign(lv.nodes.size(), 0);
      for (std::size_t i = 0; i < lv.nodes.size(); ++i) {
        token_id* tok = lv.tok.data() + i * kk;
        float* val = lv.val.data() + i * kk;
        double lse = 0.0;
        SPECDEC_TRY(detail::topk_logits(row, info.bias(out.tree.token(lv.nodes[i])), opt_.k, tok, val, lse));
        for (std::int32_t j = 0; j < opt_.k; ++j) {
          const float p = static_cast<float>(std::exp(static_cast<double>(val[j]) - lse));
          if (!(p > 0.0f)) break;  // masked (-inf) or underflowed: not a useful draft
          val[j] = p;
          lv.count[i] = j + 1;
        }
      }
      return status::success();
    };
    SPECDEC_TRY(detail::beam_grow(out, depth, opt_.k, opt_.k, s_, candidates));
    return detail::prune_in_place(out, opt_.budget, s_);
  }

  token_info_options opt_;
  detail::beam_scratch s_;
};

}  // namespace specdec
