//! \file
//! Sampled draft trees: every node above the depth limit gets w_d children
//! drawn from its draft distribution q, either i.i.d. (SpecInfer; verify
//! with multi-step speculative sampling) or without replacement
//! (Gumbel-top-k; verify with recursive rejection sampling). All randomness
//! comes from Philox keyed by (seed, request, round, parent node, draw), so
//! the same options give the same tree on any machine.
#pragma once

#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include "specdec/core/error.hpp"
#include "specdec/core/philox.hpp"
#include "specdec/core/status.hpp"
#include "specdec/core/view.hpp"
#include "specdec/draft/detail/candidates.hpp"
#include "specdec/draft/detail/children.hpp"
#include "specdec/draft/detail/topk.hpp"
#include "specdec/draft/drafter.hpp"
#include "specdec/draft/level_drafter.hpp"
#include "specdec/sample/row.hpp"

namespace specdec {

//! Options of `sampled_tree_builder`.
struct sampled_tree_options {
  //! `iid` or `without_replacement`.
  draft_mode mode = draft_mode::iid;
  //! Children per expanded node at each depth: widths[d] for nodes at depth
  //! d; the tree depth is widths.size(). Each entry >= 1 (copied by the builder).
  std::vector<std::int32_t> widths = {2, 2, 2};
  //! > 0: drafter rows must have exactly this length.
  std::int64_t vocab_size = 0;
  //! Refuse trees larger than this.
  std::int32_t max_nodes = 1 << 20;
};

//! Builds sampled trees from a probability drafter (per node or per level).
//! - iid: child j of node u is the inverse-CDF sample of q_u with the
//!   53-bit uniform r.uniform_double(u, j), r = for_purpose(round.rng,
//!   rng_purpose::draft); repeated tokens among siblings are kept (merging
//!   them would change the distribution the MSS verifier assumes).
//! - without_replacement: Gumbel-top-k. Token t gets key log q_u(t) + G_t,
//!   G_t = -log(-log(1 - U_t)), U_t = r.uniform_double(u, t); the w largest keys
//!   (ties: lower id) are the children, in descending key order, which is
//!   the order a sequential sampler without replacement would draw them (the
//!   order the verifier must visit them). Needs V uniforms per node.
//! Node probabilities are q normalized by the row mass; scores are log joint.
//! One level-drafter call per depth; O(V) per expanded node; scratch reused
//! between builds (no allocation once warm).
class sampled_tree_builder : public owning_build<sampled_tree_builder> {
 public:
  //! A builder with these options.
  explicit sampled_tree_builder(sampled_tree_options o = {}) : opt_(std::move(o)) {}

  //! Builds into `out`. The random stream is round.rng, or the caller's
  //! round.uniforms when set (layout in draft_round::uniforms);
  //! when round.q_rows is not empty, row u receives the normalized q_u of
  //! every expanded node u: exactly the draft rows the sampled verifiers read
  //! (row u = the distribution that produced u's children); leaf rows are
  //! left untouched. Errors: invalid_argument (mode not iid /
  //! without_replacement, a width < 1, tree > max_nodes), row errors
  //! (non_finite, negative_probability, zero_mass, size_mismatch, also when
  //! q_rows is too small for the full tree). On error `out` is partial.
  template <any_drafter D>
  requires probability_drafter<D> || level_probability_drafter<D> status build(D& d, const draft_round& round,
                                                                               drafted_tree& out) {
    if (opt_.mode != draft_mode::iid && opt_.mode != draft_mode::without_replacement)
      return make_status(status_code::invalid_argument, "sampled trees are iid or without_replacement");
    std::int32_t wmax = 0;
    for (const auto w : opt_.widths) {
      if (w < 1) return make_status(status_code::invalid_argument, "every width must be >= 1");
      wmax = w > wmax ? w : wmax;
    }
    const double full = full_size();
    if (full > static_cast<double>(opt_.max_nodes))
      return make_status(status_code::invalid_argument, "tree exceeds max_nodes");
    const view2d<float> q_rows = round.q_rows;
    if (q_rows.data != nullptr && (q_rows.extent[0] < static_cast<std::int64_t>(full) ||
                                   (opt_.vocab_size > 0 && q_rows.extent[1] != opt_.vocab_size)))
      return make_status(status_code::size_mismatch, "q_rows must hold one V-row per node of the full tree");
    const detail::draft_uniforms uni{for_purpose(round.rng, rng_purpose::draft), round.uniforms};
    tok_.resize(static_cast<std::size_t>(wmax));
    val_.resize(static_cast<std::size_t>(wmax));
    key_.resize(static_cast<std::size_t>(wmax));
    out.reset(round.root_token);
    out.reserve(static_cast<std::size_t>(full));
    return with_level_drafter(d, lv_.adapter, [&](auto& ld) -> status {
      std::int32_t begin = 0, end = 1;
      for (std::size_t lvl = 0; lvl < opt_.widths.size() && begin < end; ++lvl) {
        const std::int32_t w = opt_.widths[lvl];
        lv_.nodes.clear();
        for (node_id u = begin; u < end; ++u) lv_.nodes.push_back(u);
        view2d<const float> rows{};
        SPECDEC_TRY(ld.level_probabilities(
            draft_level{static_cast<std::int32_t>(lvl), std::span<const node_id>(lv_.nodes), &out.tree, round.history},
            rows));
        SPECDEC_TRY(detail::check_level_rows(rows, lv_.nodes.size(), opt_.vocab_size));
        tiles_.resize(static_cast<std::size_t>(sum_tile_count(rows.extent[1])));
        for (std::size_t i = 0; i < lv_.nodes.size(); ++i) {
          const node_id u = lv_.nodes[i];
          view1d<const float> rv{};
          double total = 0.0;
          SPECDEC_TRY(detail::take_level_row(rows, i, u, q_rows, rv, total, tiles_.data()));
          std::int32_t n = 0;
          SPECDEC_TRY(detail::draw_children(opt_.mode, rv, total, uni, u, w, tok_.data(), val_.data(), key_.data(), n,
                                            tiles_.data()));
          const float base = out.tree.score(u);
          for (std::int32_t j = 0; j < n; ++j)
            out.add(u, tok_[static_cast<std::size_t>(j)], val_[static_cast<std::size_t>(j)],
                    base + detail::log_prob(val_[static_cast<std::size_t>(j)]), opt_.mode);
        }
        begin = end;
        end = out.size();
      }
      return status::success();
    });
  }

  //! Most nodes a build can produce (the full tree; saturates at INT32_MAX).
  [[nodiscard]] std::int32_t node_bound() const noexcept {
    const double f = full_size();
    return f > static_cast<double>(INT32_MAX) ? INT32_MAX : static_cast<std::int32_t>(f);
  }

  //! The options it was built with.
  const sampled_tree_options& options() const noexcept { return opt_; }

 private:
  double full_size() const noexcept {
    double full = 1.0, level = 1.0;
    for (const auto w : opt_.widths) full += (level *= (w > 0 ? w : 0));
    return full;
  }

  sampled_tree_options opt_;
  std::vector<token_id> tok_;
  std::vector<float> val_;
  std::vector<double> key_, tiles_;  // tiles_: the tile sums of the row being drawn from
  detail::level_scratch lv_;
};

}  // namespace specdec
