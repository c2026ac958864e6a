//! \file
//! Internal helpers shared by the tree builders: "ask any level drafter for
//! the top-k candidates of every node of one level", with the checks every
//! builder applies to what a drafter returns.
#pragma once

#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include "specdec/core/status.hpp"
#include "specdec/core/view.hpp"
#include "specdec/draft/detail/topk.hpp"
#include "specdec/draft/drafter.hpp"
#include "specdec/draft/level_drafter.hpp"
#include "specdec/sample/detail/host_rows.hpp"
#include "specdec/sample/row.hpp"
#include "specdec/tree/token_tree.hpp"

namespace specdec::detail {

//! Scratch of level_topk (kept by the builders between builds).
struct level_scratch {
  std::vector<node_id> nodes;
  std::vector<token_id> tok;
  std::vector<float> val;
  std::vector<std::int32_t> count;
  level_adapter_scratch adapter;
};

//! Checks the `n` candidates a top-k drafter returned for `node` and
//! compacts them to the positive-probability ones (count = kept).
inline status check_candidates(token_id* tok, float* val, std::int32_t n, std::int32_t k, std::int64_t vocab_size,
                               node_id node, std::int32_t& count) noexcept {
  count = 0;
  if (n < 0 || n > k) return make_status(status_code::invalid_argument, "drafter returned a bad candidate count", node);
  std::int32_t m = 0;
  for (std::int32_t j = 0; j < n; ++j) {
    if (!std::isfinite(val[j]))
      return make_status(status_code::non_finite, "drafter candidate probability is not finite", node);
    if (val[j] < 0.0f) return make_status(status_code::negative_probability, "drafter candidate probability < 0", node);
    if (tok[j] < 0 || (vocab_size > 0 && tok[j] >= vocab_size))
      return make_status(status_code::token_out_of_range, "drafter candidate token out of range", node);
    if (j > 0 && !ranks_before(val[j - 1], tok[j - 1], val[j], tok[j]))
      return make_status(status_code::not_sorted,
                         "drafter candidates must be sorted (prob desc, token asc) and distinct", node);
    // Sorted by probability does not make tokens distinct; a repeated sibling
    // token would be verified twice. O(k^2) over the kept few candidates.
    for (std::int32_t l = 0; l < m; ++l)
      if (tok[l] == tok[j])
        return make_status(status_code::not_sorted, "drafter candidates must be distinct tokens", node);
    if (val[j] > 0.0f) {
      tok[m] = tok[j];
      val[m] = val[j];
      ++m;
    }
  }
  count = m;
  return status::success();
}

//! The rows a level probability drafter returned: one per node, V columns
//! (vocab_size when > 0), unit column stride.
inline status check_level_rows(const view2d<const float>& rows, std::size_t nodes, std::int64_t vocab_size) noexcept {
  if (rows.extent[0] != static_cast<std::int64_t>(nodes) || rows.data == nullptr)
    return make_status(status_code::size_mismatch, "level drafter must return one row per frontier node");
  if (rows.extent[1] <= 0) return make_status(status_code::empty_input, "drafter returned empty rows");
  if (vocab_size > 0 && rows.extent[1] != vocab_size)
    return make_status(status_code::size_mismatch, "drafter row length differs from vocab_size");
  if (rows.extent[1] > 1 && rows.stride[1] != 1)
    return make_status(status_code::invalid_argument, "drafter rows need unit column stride");
  return status::success();
}

//! Row i of a level's rows, for node u: validates it (the status carries
//! u as index), returns its mass in `total` and its tile sums in `tiles`
//! (sum_tile_count(V) entries, sample/order.hpp: what draw_children's
//! i.i.d. draws walk) and, when q_rows is set, writes the normalized row to
//! q_rows row u (what sampled and static trees hand the verifier as q_u).
inline status take_level_row(const view2d<const float>& rows, std::size_t i, node_id u, const view2d<float>& q_rows,
                             view1d<const float>& rv, double& total, double* tiles) noexcept {
  rv = rows.slice(static_cast<std::int64_t>(i));
  total = 0.0;
  const std::int64_t V = rv.extent[0];
  // The vector tile sums give validate_probability_row's mass bit for bit;
  // a bad row goes through it for its status (the code of its first bad entry).
  if (!row_tiles(row_ref{rv.data, rv.stride[0]}, V, tiles, total) || !(total > 0.0)) {
    const status st = validate_probability_row(rv, &total);
    if (!st.ok()) return make_status(st.code(), st.message(), u);
  }
  if (q_rows.data != nullptr) {
    if (q_rows.extent[1] != V)
      return make_status(status_code::size_mismatch, "q_rows width differs from the drafter row", u);
    if (q_rows.stride[1] == 1 && rv.stride[0] == 1) {
      float* q = &q_rows(u, 0);  // a contiguous loop the compiler can vectorise (the same division)
      const float* r = rv.data;
      for (std::int64_t t = 0; t < V; ++t) q[t] = static_cast<float>(static_cast<double>(r[t]) / total);
    } else {
      for (std::int64_t t = 0; t < V; ++t) q_rows(u, t) = static_cast<float>(rv(t) / total);
    }
  }
  return status::success();
}

//! Top-k candidates (token, probability; descending, ties by lower id;
//! positive probabilities only) of every node of `s.nodes` at depth `depth`,
//! in one call of the level drafter `d`. Node i's candidates are
//! s.tok/s.val[i * k ...], s.count[i] of them. `vocab_size` > 0 enables the
//! token range check for top-k drafters (a probability drafter defines the
//! vocabulary by its row length).
template <level_drafter D>
status level_topk(D& d, const token_tree& tree, std::int32_t depth, std::span<const token_id> history, std::int32_t k,
                  std::int64_t vocab_size, level_scratch& s) {
  if (k <= 0) return make_status(status_code::invalid_argument, "k must be positive");
  if (vocab_size > 0 && k > vocab_size)
    return make_status(status_code::invalid_argument, "k exceeds the vocabulary size");
  const std::size_t n = s.nodes.size();
  const auto kk = static_cast<std::size_t>(k);
  s.tok.resize(n * kk);
  s.val.resize(n * kk);
  s.count.assign(n, 0);
  const draft_level level{depth, std::span<const node_id>(s.nodes), &tree, history};
  if constexpr (level_topk_drafter<D>) {
    const auto rows = static_cast<std::int64_t>(n);
    SPECDEC_TRY(d.level_top_candidates(level, make_view(s.tok.data(), rows, std::int64_t{k}),
                                       make_view(s.val.data(), rows, std::int64_t{k}),
                                       std::span<std::int32_t>(s.count)));
    for (std::size_t i = 0; i < n; ++i)
      SPECDEC_TRY(check_candidates(s.tok.data() + i * kk, s.val.data() + i * kk, s.count[i], k, vocab_size, s.nodes[i],
                                   s.count[i]));
  } else {
    view2d<const float> rows{};
    SPECDEC_TRY(d.level_probabilities(level, rows));
    SPECDEC_TRY(check_level_rows(rows, n, vocab_size));
    if (k > rows.extent[1]) return make_status(status_code::invalid_argument, "k exceeds the vocabulary size");
    for (std::size_t i = 0; i < n; ++i) {
      const std::span<const float> row(&rows(static_cast<std::int64_t>(i), 0),
                                       static_cast<std::size_t>(rows.extent[1]));
      const status st = topk_probabilities(row, k, s.tok.data() + i * kk, s.val.data() + i * kk, s.count[i]);
      if (!st.ok()) return make_status(st.code(), st.message(), s.nodes[i]);
    }
  }
  return status::success();
}

}  // namespace specdec::detail
