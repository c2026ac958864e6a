//! \file
//! Internal helpers shared by the tree builders: root-path extraction and
//! "ask any drafter for its top-k candidates".
#pragma once

#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include "specdec/core/status.hpp"
#include "specdec/draft/detail/topk.hpp"
#include "specdec/draft/drafter.hpp"
#include "specdec/sample/row.hpp"
#include "specdec/tree/token_tree.hpp"

namespace specdec::detail {

//! Writes the root-to-node token path of `node` into `path` (resized to
//! depth + 1; keeps capacity) and returns the drafter context for it.
inline draft_context make_context(const token_tree& t, node_id node, std::vector<token_id>& path) {
  const std::int32_t d = t.depth(node);
  path.resize(static_cast<std::size_t>(d) + 1);
  node_id u = node;
  for (std::int32_t i = d; i >= 0; --i) {
    path[static_cast<std::size_t>(i)] = t.token(u);
    u = t.parent(u);
  }
  return draft_context{node, d, std::span<const token_id>(path.data(), path.size())};
}

//! Top-k candidates (token, probability; descending, ties by lower id;
//! positive probabilities only) of any drafter at `ctx`. `vocab_size` > 0
//! enables the token range check for top-k drafters (a probability drafter
//! defines the vocabulary by its row length).
template <class D>
requires drafter<D> status drafter_topk(D& d, const draft_context& ctx, std::int32_t k, std::int64_t vocab_size,
                                        token_id* tok, float* val, std::int32_t& count) {
  count = 0;
  if (k <= 0) return make_status(status_code::invalid_argument, "k must be positive");
  if (vocab_size > 0 && k > vocab_size)
    return make_status(status_code::invalid_argument, "k exceeds the vocabulary size");
  if constexpr (probability_drafter<D>) {
    const std::span<const float> row = d.probabilities(ctx);
    if (vocab_size > 0 && static_cast<std::int64_t>(row.size()) != vocab_size)
      return make_status(status_code::size_mismatch, "drafter row length differs from vocab_size", ctx.node);
    return topk_probabilities(row, k, tok, val, count);
  } else {
    const std::int32_t n =
        static_cast<std::int32_t>(d.top_candidates(ctx, std::span<token_id>(tok, static_cast<std::size_t>(k)),
                                                   std::span<float>(val, static_cast<std::size_t>(k))));
    if (n < 0 || n > k)
      return make_status(status_code::invalid_argument, "drafter returned a bad candidate count", ctx.node);
    std::int32_t m = 0;
    for (std::int32_t j = 0; j < n; ++j) {
      if (!std::isfinite(val[j]))
        return make_status(status_code::non_finite, "drafter candidate probability is not finite", ctx.node);
      if (val[j] < 0.0f)
        return make_status(status_code::negative_probability, "drafter candidate probability < 0", ctx.node);
      if (tok[j] < 0 || (vocab_size > 0 && tok[j] >= vocab_size))
        return make_status(status_code::token_out_of_range, "drafter candidate token out of range", ctx.node);
      if (j > 0 && !ranks_before(val[j - 1], tok[j - 1], val[j], tok[j]))
        return make_status(status_code::not_sorted,
                           "drafter candidates must be sorted (prob desc, token asc) and distinct", ctx.node);
      // Sorted by probability does not make tokens distinct; a repeated sibling
      // token would be verified twice. O(k^2) over the kept few candidates.
      for (std::int32_t l = 0; l < m; ++l)
        if (tok[l] == tok[j])
          return make_status(status_code::not_sorted, "drafter candidates must be distinct tokens", ctx.node);
      if (val[j] > 0.0f) {
        tok[m] = tok[j];
        val[m] = val[j];
        ++m;
      }
    }
    count = m;
    return status::success();
  }
}

}  // namespace specdec::detail
