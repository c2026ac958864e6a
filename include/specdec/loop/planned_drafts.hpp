//! \file
//! Planned model-free drafts in the loop: `planned_drafts_builder` lets a
//! builder whose drafts cost next to nothing (prompt lookup, a suffix
//! index) draft first, then has a round_planner keep the part of that draft
//! worth a target pass (round_planner::plan_drafted): the most confident
//! prefix (keep_draft_within), or a plain step. It reports every plain
//! step's skipped draft to the planner (observe_skipped), so acceptance by
//! confidence keeps being learned while speculation is off.
//! speculative_session and batched_session run it like any round-observing
//! builder (docs/loop.md, "Planned rounds").
#pragma once

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <limits>
#include <span>
#include <utility>
#include <vector>

#include "specdec/core/status.hpp"
#include "specdec/draft/drafter.hpp"
#include "specdec/loop/planned_builder.hpp"
#include "specdec/loop/planner.hpp"

namespace specdec {

//! Copies into `out` the nodes of `in`, in id order, whose parent was kept,
//! whose depth is at most `max_depth` and whose parent's path probability
//! reaches min_path_probability[parent depth] (static_tree_builder's
//! expansion rule; depths past the span are not limited), until `out` has
//! `max_nodes` nodes. Ids stay topological, so with no depth or threshold
//! limit this keeps the first max_nodes nodes (the most confident ones of
//! a model-free builder). A node whose children were all cut becomes a
//! leaf. For deterministic drafts, which any cut keeps exact (docs/loop.md).
//! `id` is scratch. Errors (checked before `out` is written):
//! invalid_argument (no root, max_nodes < 1), size_mismatch (fewer
//! probabilities or child modes than nodes).
inline status keep_draft_within(const drafted_tree& in, std::int32_t max_nodes, std::int32_t max_depth,
                                std::span<const double> min_path_probability, drafted_tree& out,
                                std::vector<node_id>& id) {
  if (in.size() < 1) return make_status(status_code::invalid_argument, "the drafted tree needs its root");
  if (max_nodes < 1) return make_status(status_code::invalid_argument, "max_nodes must be >= 1");
  if (in.prob.size() < static_cast<std::size_t>(in.size()) || in.child_mode.size() < in.prob.size())
    return make_status(status_code::size_mismatch, "one draft probability and child mode per drafted node");
  out.reset(in.tree.token(0));
  id.assign(static_cast<std::size_t>(in.size()), -1);
  id[0] = 0;
  for (node_id i = 1; i < in.size() && out.size() < max_nodes; ++i) {
    const node_id u = in.tree.parent(i);
    const node_id p = id[static_cast<std::size_t>(u)];
    if (p < 0 || in.tree.depth(i) > max_depth) continue;
    const auto du = static_cast<std::size_t>(in.tree.depth(u));
    if (du > 0 && du < min_path_probability.size() &&
        std::exp(static_cast<double>(in.tree.score(u))) < min_path_probability[du])
      continue;
    id[static_cast<std::size_t>(i)] = out.add(p, in.tree.token(i), in.prob[static_cast<std::size_t>(i)],
                                              in.tree.score(i), in.child_mode[static_cast<std::size_t>(u)]);
  }
  return status::success();
}

//! Drafts with `Inner` (a builder of deterministic drafts: prompt_lookup_builder,
//! suffix_tree_builder, or any whose children are `draft_mode::deterministic`),
//! then sizes the round with its round_planner:
//!  - a plan that plan_batch set (batched_session) caps the draft at the
//!    plan's nodes, depth and thresholds;
//!  - otherwise plan_drafted keeps the draft's first n nodes for the n with
//!    the most expected tokens per second (n = 1: a plain step);
//!  - a root-only draft is a plain step without planning.
//! After a plain step the next build first reports the skipped draft and the
//! token the step emitted (the new root) to observe_skipped. Plans depend on
//! earlier rounds and this round's draft only, so verification stays exact.
//! node_bound() is the smaller of Inner's and the planner's max_nodes.
template <class Inner>
class planned_drafts_builder : public owning_build<planned_drafts_builder<Inner>> {
 public:
  //! Wraps `inner` with a planner of options `o`; throws specdec::error for invalid options.
  explicit planned_drafts_builder(Inner inner, const planner_options& o = {}) : inner_(std::move(inner)), planner_(o) {}

  //! Errors: Inner's build errors; those of round_planner::plan_drafted
  //! (invalid_argument for sampled drafts), observe_skipped and
  //! keep_draft_within (a draft without its probabilities: size_mismatch).
  template <class D>
  requires requires(Inner& b, D& d, const draft_round& r, drafted_tree& t) {
    { b.build(d, r, t) } -> std::same_as<status>;
  }
  status build(D& d, const draft_round& round, drafted_tree& out) {
    if (skip_pending_) {  // the last round was a plain step that emitted round.root_token
      skip_pending_ = false;
      SPECDEC_TRY(planner_.observe_skipped(skipped_, round.root_token));
    }
    SPECDEC_TRY(inner_.build(d, round, draft_));
    if (draft_.size() <= 1) {
      summary_ = {plan_kind::autoregressive, 1, 0, 1.0, 0.0};
      return plain(round, out);
    }
    round_plan p;
    constexpr std::int32_t any_depth = std::numeric_limits<std::int32_t>::max();
    if (planner_.pending()) {  // plan_batch sized this request's share of the pass
      p = planner_.plan();
    } else {
      SPECDEC_TRY(planner_.plan_drafted(draft_, p));
    }
    summary_ = p.summary;
    if (p.summary.nodes <= 1 || p.summary.depth == 0) return plain(round, out);
    if (p.summary.kind == plan_kind::drafted)
      return keep_draft_within(draft_, p.summary.nodes, any_depth, {}, out, id_);
    return keep_draft_within(draft_, p.summary.nodes, p.summary.depth, p.min_path_probability, out, id_);
  }

  //! Feeds the round's measurements to the planner.
  status observe(const round_feedback& f) { return planner_.observe(f); }
  //! A new sequence starts: the planner's begin_request(), and no skipped draft is pending.
  void begin_request() noexcept {
    planner_.begin_request();
    skip_pending_ = false;
  }
  //! The decision and prediction of the last round.
  [[nodiscard]] plan_summary last_plan() const noexcept { return summary_; }
  //! The most nodes a build produces.
  [[nodiscard]] std::int32_t node_bound() const noexcept {
    return std::max(std::min(inner_.node_bound(), planner_.options().max_nodes), 1);
  }
  //! The planner (inject costs, fix a plan, read estimates).
  [[nodiscard]] round_planner& planner() noexcept { return planner_; }
  //! The planner, read-only.
  [[nodiscard]] const round_planner& planner() const noexcept { return planner_; }
  //! The wrapped builder.
  [[nodiscard]] Inner& inner() noexcept { return inner_; }

 private:
  status plain(const draft_round& round, drafted_tree& out) {
    std::swap(skipped_, draft_);
    skip_pending_ = true;
    out.reset(round.root_token);
    return status::success();
  }

  Inner inner_;
  round_planner planner_;
  drafted_tree draft_, skipped_;
  std::vector<node_id> id_;
  plan_summary summary_{};
  bool skip_pending_ = false;
};

}  // namespace specdec
