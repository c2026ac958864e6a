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

namespace specdec {

//! Options of `topk_tree_builder`.
struct topk_tree_options {
  std::int32_t k = 2;                //!< children per expanded node (>= 1)
  std::int32_t depth = 3;            //!< depth of the deepest nodes (>= 0)
  std::int64_t vocab_size = 0;       //!< > 0: check tokens and k against it (needed for top-k drafters)
  std::int32_t max_nodes = 1 << 20;  //!< refuse trees larger than this (k^depth grows fast)
};

//! Grows the full top-k tree: level by level (node ids in BFS order, so one
//! level's drafter calls can be batched by the caller), children of a node
//! in descending draft probability (ties: lower token id). Nodes with fewer
//! than k positive-probability tokens get fewer children. One drafter call
//! per expanded node; scratch is kept between builds (no allocation once
//! warm). Deterministic.
class topk_tree_builder : public owning_build<topk_tree_builder> {
 public:
  //! A builder with these options.
  explicit topk_tree_builder(topk_tree_options o = {}) : opt_(o) {}

  //! Builds into `out` (cleared first). Errors: invalid_argument (k < 1,
  //! depth < 0, k > vocab or max_nodes, tree would exceed max_nodes), the drafter row
  //! errors (non_finite, negative_probability, zero_mass, size_mismatch).
  //! On error `out` holds a partial tree and must not be verified.
  template <class D>
  requires drafter<D> status build(D& d, token_id root_token, drafted_tree& out) {
    if (opt_.k < 1) return make_status(status_code::invalid_argument, "k must be >= 1");
    if (opt_.depth < 0) return make_status(status_code::invalid_argument, "depth must be >= 0");
    if (opt_.vocab_size > 0 && opt_.k > opt_.vocab_size)
      return make_status(status_code::invalid_argument, "k exceeds the vocabulary size");
    if (opt_.k > opt_.max_nodes) return make_status(status_code::invalid_argument, "k exceeds max_nodes");
    double full = 1.0, level = 1.0;
    // Stops as soon as the bound is passed, so a huge depth is refused at once.
    for (std::int32_t i = 0; i < opt_.depth && full <= static_cast<double>(opt_.max_nodes); ++i)
      full += (level *= opt_.k);
    if (full > static_cast<double>(opt_.max_nodes))
      return make_status(status_code::invalid_argument, "k^depth tree exceeds max_nodes");
    tok_.resize(static_cast<std::size_t>(opt_.k));
    val_.resize(static_cast<std::size_t>(opt_.k));
    out.reset(root_token);
    out.reserve(static_cast<std::size_t>(full));
    std::int32_t begin = 0, end = 1;
    for (std::int32_t lvl = 0; lvl < opt_.depth && begin < end; ++lvl) {
      for (node_id u = begin; u < end; ++u) {
        const draft_context ctx = detail::make_context(out.tree, u, path_);
        std::int32_t n = 0;
        SPECDEC_TRY(detail::drafter_topk(d, ctx, opt_.k, opt_.vocab_size, tok_.data(), val_.data(), n));
        const float base = out.tree.score(u);
        for (std::int32_t j = 0; j < n; ++j)
          out.add(u, tok_[static_cast<std::size_t>(j)], val_[static_cast<std::size_t>(j)],
                  base + detail::log_prob(val_[static_cast<std::size_t>(j)]), draft_mode::deterministic);
      }
      begin = end;
      end = out.size();
    }
    return status::success();
  }

  //! The options it was built with.
  const topk_tree_options& options() const noexcept { return opt_; }

 private:
  topk_tree_options opt_;
  std::vector<token_id> tok_;
  std::vector<float> val_;
  std::vector<token_id> path_;
};

}  // namespace specdec
