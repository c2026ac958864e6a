//! \file
//! Level-batched drafters: a drafter that is handed every frontier node of
//! one depth at once and answers for all of them in one call, the way a real
//! draft model or an EAGLE head runs (one batched forward per tree level, not
//! one call per node). Every builder in draft/ grows its tree level by level
//! through these concepts; per-node drafters (drafter.hpp) go through
//! `level_adapter`, which calls them once per node.
#pragma once

#include <algorithm>
#include <concepts>
#include <cstdint>
#include <span>
#include <vector>

#include "specdec/core/status.hpp"
#include "specdec/core/view.hpp"
#include "specdec/draft/drafter.hpp"
#include "specdec/tree/token_tree.hpp"

namespace specdec {

//! One level of a tree being grown: the frontier nodes of depth `depth`
//! (ascending ids) whose children are drafted next. `tree` is the tree grown
//! so far (paths are read through its parent links); `history` holds the
//! committed tokens before the root. Valid only during the call.
struct draft_level {
  std::int32_t depth = 0;               //!< Depth of the frontier nodes (the root is depth 0).
  std::span<const node_id> nodes{};     //!< Frontier node ids, ascending.
  const token_tree* tree = nullptr;     //!< The tree grown so far.
  std::span<const token_id> history{};  //!< Committed tokens before the root.
};

//! A level drafter that returns one probability row per frontier node:
//! `level_probabilities(level, rows)` sets `rows` to a view of
//! `level.nodes.size()` rows of V probabilities (row i = q of nodes[i],
//! non-negative, finite, mass ~1, unit column stride) owned by the drafter and
//! valid until its next call, and returns a status.
template <class D>
concept level_probability_drafter = requires(D& d, const draft_level& l, view2d<const float>& rows) {
  { d.level_probabilities(l, rows) } -> std::same_as<status>;
};

//! A level drafter that returns top-k candidates: row i of `tokens` and
//! `probs` (nodes.size() x k, caller-owned, unit column stride) receives up
//! to k distinct tokens of nodes[i] with their probabilities (descending,
//! ties lower id) and counts[i] how many were written.
template <class D>
concept level_topk_drafter = requires(D& d, const draft_level& l, view2d<token_id> tokens, view2d<float> probs,
                                      std::span<std::int32_t> counts) {
  { d.level_top_candidates(l, tokens, probs, counts) } -> std::same_as<status>;
};

//! Any level-batched drafter.
template <class D>
concept level_drafter = level_probability_drafter<D> || level_topk_drafter<D>;

//! Anything a builder can draft from: a per-node or a level-batched drafter.
template <class D>
concept any_drafter = drafter<D> || level_drafter<D>;

//! Scratch of a level_adapter (kept between calls: no allocation once warm).
struct level_adapter_scratch {
  std::vector<token_id> path;  //!< Root-to-node token path handed to the per-node drafter.
  std::vector<float> rows;     //!< Copied probability rows, one per frontier node.
};

//! Presents a per-node drafter as a level drafter: one per-node call for each
//! frontier node, in ascending node order. A probability drafter's rows are
//! copied into the scratch (the per-node row is only valid until the next
//! call); a top-k drafter writes straight into the caller's candidate rows.
template <drafter D>
class level_adapter {
 public:
  //! Wraps `d`, using `s` as scratch; both must outlive the adapter.
  level_adapter(D& d, level_adapter_scratch& s) noexcept : d_(&d), s_(&s) {}

  //! Errors: size_mismatch (rows of different lengths), empty_input.
  status level_probabilities(const draft_level& l, view2d<const float>& rows) requires probability_drafter<D> {
    std::int64_t V = 0;
    for (std::size_t i = 0; i < l.nodes.size(); ++i) {
      const std::span<const float> row = d_->probabilities(context(l, i));
      if (row.empty()) return make_status(status_code::empty_input, "drafter returned an empty row", l.nodes[i]);
      if (i == 0) {
        V = static_cast<std::int64_t>(row.size());
        s_->rows.resize(l.nodes.size() * row.size());
      } else if (static_cast<std::int64_t>(row.size()) != V) {
        return make_status(status_code::size_mismatch, "drafter rows differ in length", l.nodes[i]);
      }
      std::copy(row.begin(), row.end(), s_->rows.begin() + static_cast<std::ptrdiff_t>(i * row.size()));
    }
    rows = make_view<const float>(s_->rows.data(), static_cast<std::int64_t>(l.nodes.size()), V);
    return status::success();
  }

  //! Errors: invalid_argument (a per-node call returned a bad count).
  status level_top_candidates(const draft_level& l, view2d<token_id> tokens, view2d<float> probs,
                              std::span<std::int32_t> counts) requires(!probability_drafter<D> && topk_drafter<D>) {
    const auto k = static_cast<std::size_t>(tokens.extent[1]);
    for (std::size_t i = 0; i < l.nodes.size(); ++i) {
      const auto ii = static_cast<std::int64_t>(i);
      counts[i] = static_cast<std::int32_t>(d_->top_candidates(context(l, i), std::span<token_id>(&tokens(ii, 0), k),
                                                               std::span<float>(&probs(ii, 0), k)));
    }
    return status::success();
  }

 private:
  draft_context context(const draft_level& l, std::size_t i) {
    const node_id node = l.nodes[i];
    const std::int32_t d = l.tree->depth(node);
    s_->path.resize(static_cast<std::size_t>(d) + 1);
    node_id u = node;
    for (std::int32_t j = d; j >= 0; --j) {
      s_->path[static_cast<std::size_t>(j)] = l.tree->token(u);
      u = l.tree->parent(u);
    }
    return draft_context{node, d, std::span<const token_id>(s_->path), l.history};
  }

  D* d_;
  level_adapter_scratch* s_;
};

//! Calls `f` with a level drafter for `d`: `d` itself when it is one, else a
//! level_adapter over it using `s`.
template <any_drafter D, class F>
decltype(auto) with_level_drafter(D& d, level_adapter_scratch& s, F&& f) {
  if constexpr (level_drafter<D>) {
    return f(d);
  } else {
    level_adapter<D> a(d, s);
    return f(a);
  }
}

}  // namespace specdec
