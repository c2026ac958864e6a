//! \file
//! Top-k recursive expansion (the "Tree-Based Speculative Decoding" NanoGPT walkthrough):
//! every node above the depth limit gets its k most probable draft tokens
//! as children. Children are deterministic given q, so verification must
//! use the deterministic (one-hot q) rule; `child_mode` records that.
#pragma once

#include <cstdint>
#include <vector>

#include "specdec/core/error.hpp"
#include "specdec/core/status.hpp"
#include "specdec/draft/detail/candidates.hpp"
#include "specdec/draft/drafter.hpp"
#include "specdec/draft/level_drafter.hpp"

namespace specdec {

//! Options of `topk_tree_builder`.
struct topk_tree_options {
  std::int32_t k = 2;                //!< children per expanded node (>= 1)
  std::int32_t depth = 3;            //!< depth of the deepest nodes (>= 0)
  std::int64_t vocab_size = 0;       //!< > 0: check tokens and k against it (needed for top-k drafters)
  std::int32_t max_nodes = 1 << 20;  //!< refuse trees larger than this (k^depth grows fast)
};

//! Grows the full top-k tree level by level (node ids in BFS order), children
//! of a node in descending draft probability (ties: lower token id). Nodes
//! with fewer than k positive-probability tokens get fewer children. One
//! level-drafter call per depth (a per-node drafter is called once per
//! expanded node through level_adapter); scratch is kept between builds (no
//! allocation once warm). Deterministic.
class topk_tree_builder : public owning_build<topk_tree_builder> {
 public:
  //! A builder with these options.
  explicit topk_tree_builder(topk_tree_options o = {}) : opt_(o) {}

  //! Builds into `out` (cleared first) from any per-node or level drafter:
  //! one level call per depth. Errors: invalid_argument (k < 1, depth < 0,
  //! k > vocab or max_nodes, tree would exceed max_nodes), the drafter row
  //! errors (non_finite, negative_probability, zero_mass, size_mismatch).
  //! On error `out` holds a partial tree and must not be verified.
  //! `round.rng` and `round.q_rows` are not used (the tree is deterministic).
  template <any_drafter D>
  status build(D& d, const draft_round& round, drafted_tree& out) {
    if (opt_.k < 1) return make_status(status_code::invalid_argument, "k must be >= 1");
    if (opt_.depth < 0) return make_status(status_code::invalid_argument, "depth must be >= 0");
    if (opt_.vocab_size > 0 && opt_.k > opt_.vocab_size)
      return make_status(status_code::invalid_argument, "k exceeds the vocabulary size");
    if (opt_.k > opt_.max_nodes) return make_status(status_code::invalid_argument, "k exceeds max_nodes");
    const double full = full_size();
    if (full > static_cast<double>(opt_.max_nodes))
      return make_status(status_code::invalid_argument, "k^depth tree exceeds max_nodes");
    out.reset(round.root_token);
    out.reserve(static_cast<std::size_t>(full));
    return with_level_drafter(d, s_.adapter, [&](auto& ld) -> status {
      std::int32_t begin = 0, end = 1;
      for (std::int32_t lvl = 0; lvl < opt_.depth && begin < end; ++lvl) {
        s_.nodes.clear();
        for (node_id u = begin; u < end; ++u) s_.nodes.push_back(u);
        SPECDEC_TRY(detail::level_topk(ld, out.tree, lvl, round.history, opt_.k, opt_.vocab_size, s_));
        const auto kk = static_cast<std::size_t>(opt_.k);
        for (std::size_t i = 0; i < s_.nodes.size(); ++i) {
          const node_id u = s_.nodes[i];
          const float base = out.tree.score(u);
          for (std::size_t j = 0; j < static_cast<std::size_t>(s_.count[i]); ++j)
            out.add(u, s_.tok[i * kk + j], s_.val[i * kk + j], base + detail::log_prob(s_.val[i * kk + j]),
                    draft_mode::deterministic);
        }
        begin = end;
        end = out.size();
      }
      return status::success();
    });
  }

  //! Shorthand for build(d, draft_round{.root_token = root_token}, out).
  template <any_drafter D>
  status build(D& d, token_id root_token, drafted_tree& out) {
    return build(d, draft_round{.root_token = root_token}, out);
  }

  //! Most nodes a build with these options can produce (the full k-ary tree,
  //! saturated at max_nodes + 1).
  [[nodiscard]] std::int32_t node_bound() const noexcept {
    const double f = full_size();
    return f > static_cast<double>(opt_.max_nodes) ? opt_.max_nodes + (opt_.max_nodes < INT32_MAX ? 1 : 0)
                                                   : static_cast<std::int32_t>(f);
  }

  //! The options it was built with.
  const topk_tree_options& options() const noexcept { return opt_; }

 private:
  double full_size() const noexcept {
    double full = 1.0, level = 1.0;
    // Stops as soon as the bound is passed, so a huge depth is refused at once.
    for (std::int32_t i = 0; i < opt_.depth && full <= static_cast<double>(opt_.max_nodes); ++i)
      full += (level *= opt_.k);
    return full;
  }

  topk_tree_options opt_;
  detail::level_scratch s_;
};

}  // namespace specdec
