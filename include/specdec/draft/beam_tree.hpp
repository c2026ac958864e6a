//! \file
//! Joint-probability beam tree (EAGLE-2's dynamic draft tree; Lyanna's
//! Algorithm 1 with a plain drafter, "Make Every Draft Count"): per level, expand every
//! frontier node by its top-k draft tokens, keep every candidate in the
//! tree, take the `width` candidates of highest joint probability as the
//! next frontier, and finally rerank all nodes and keep the best `budget`
//! (ancestor-closed, see prune.hpp). Deterministic drafts: verify with the
//! one-hot q rule (`child_mode == deterministic`).
#pragma once

#include <cstdint>

#include "specdec/core/error.hpp"
#include "specdec/core/status.hpp"
#include "specdec/draft/detail/beam.hpp"
#include "specdec/draft/detail/candidates.hpp"
#include "specdec/draft/drafter.hpp"
#include "specdec/draft/level_drafter.hpp"

namespace specdec {

//! Options of `beam_tree_builder`.
struct beam_tree_options {
  std::int32_t k = 8;                //!< candidates per expanded node (top-k), >= 1
  std::int32_t width = 8;            //!< frontier size per level, >= 1 (EAGLE-2 and Lyanna use k)
  std::int32_t depth = 6;            //!< levels to grow, >= 0
  std::int32_t budget = 60;          //!< nodes kept after the rerank (root included); 0 keeps all
  std::int64_t vocab_size = 0;       //!< > 0: check tokens and k against it
  std::int32_t max_nodes = 1 << 20;  //!< refuse options whose grown tree could exceed this (before the rerank)
};

//! Builds EAGLE-2 / Lyanna beam trees. At most width * k candidates per
//! level, width * depth drafter calls. Scores are log joint draft
//! probabilities; ties everywhere are broken by lower node id (and lower
//! token id among one node's candidates), so the result is deterministic.
//! Keeps its scratch between builds: no allocation once warm.
class beam_tree_builder : public owning_build<beam_tree_builder> {
 public:
  //! A builder with these options.
  explicit beam_tree_builder(beam_tree_options o = {}) : opt_(o) {}

  //! Builds into `out` from any per-node or level drafter (one level call
  //! per depth, over the frontier). Errors: invalid_argument (k, width < 1,
  //! depth < 0, budget < 0, k > vocab, 1 + k + (depth - 1) k width >
  //! max_nodes), drafter row errors. On error `out` is partial.
  //! `round.rng` and `round.q_rows` are not used (the tree is deterministic).
  template <any_drafter D>
  status build(D& d, const draft_round& round, drafted_tree& out) {
    if (opt_.k < 1 || opt_.width < 1) return make_status(status_code::invalid_argument, "k and width must be >= 1");
    if (opt_.depth < 0) return make_status(status_code::invalid_argument, "depth must be >= 0");
    if (opt_.budget < 0) return make_status(status_code::invalid_argument, "budget must be >= 0");
    if (opt_.vocab_size > 0 && opt_.k > opt_.vocab_size)
      return make_status(status_code::invalid_argument, "k exceeds the vocabulary size");
    const double grown = grown_size();
    if (grown > static_cast<double>(opt_.max_nodes))
      return make_status(status_code::invalid_argument, "k, width and depth can grow a tree above max_nodes");
    out.reset(round.root_token);
    out.reserve(static_cast<std::size_t>(grown));
    SPECDEC_TRY(with_level_drafter(d, s_.level.adapter, [&](auto& ld) {
      return detail::beam_grow(out, opt_.depth, opt_.k, opt_.width, s_, [&](std::int32_t lvl) {
        return detail::level_topk(ld, out.tree, lvl, round.history, opt_.k, opt_.vocab_size, s_.level);
      });
    }));
    return detail::prune_in_place(out, opt_.budget, s_);
  }

  //! Shorthand for build(d, draft_round{.root_token = root_token}, out).
  template <any_drafter D>
  status build(D& d, token_id root_token, drafted_tree& out) {
    return build(d, draft_round{.root_token = root_token}, out);
  }

  //! Most nodes a build can produce: the budget when set, else the grown tree.
  [[nodiscard]] std::int32_t node_bound() const noexcept {
    const double g = grown_size();
    const double b = opt_.budget > 0 && opt_.budget < g ? opt_.budget : g;
    return b > static_cast<double>(INT32_MAX) ? INT32_MAX : static_cast<std::int32_t>(b);
  }

  //! The options it was built with.
  const beam_tree_options& options() const noexcept { return opt_; }

 private:
  // Largest grown tree: the root's k children, then width * k per level.
  double grown_size() const noexcept {
    return opt_.depth == 0
               ? 1.0
               : 1.0 + opt_.k + (opt_.depth - 1.0) * static_cast<double>(opt_.k) * static_cast<double>(opt_.width);
  }

  beam_tree_options opt_;
  detail::beam_scratch s_;
};

}  // namespace specdec
