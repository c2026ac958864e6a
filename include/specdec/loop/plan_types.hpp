//! \file
//! The round planner's value types (loop/planner.hpp): its options, what a
//! plan decided and predicted, the plan handed to the drafting side and the
//! feedback the caller reports after each round. Small and dependency-light,
//! so that code that only passes plans around (round_stats::plan, an
//! engine's bookkeeping) needs no planner.
#pragma once

#include <cmath>
#include <cstdint>
#include <span>

#include "specdec/core/status.hpp"
#include "specdec/tree/token_tree.hpp"

namespace specdec {

//! Options of a round_planner (checked by round_planner::reset).
struct planner_options {
  std::int32_t max_nodes = 32;    //!< node budget of one round, root included (1 .. 1024)
  std::int32_t max_depth = 8;     //!< deepest drafted level (0 .. 64; 0 = never speculate)
  std::int32_t max_children = 4;  //!< children per node, i.e. sibling ranks planned (1 .. 16)
  //! Decay in (0, 1] of the acceptance counts by depth (per drafted round), by confidence (per offer of
  //! their cell; also per plain round while no skipped draft is reported) and of the time fits (per sample).
  double forget = 0.97;
  double prior_weight = 2.0;       //!< pseudo-observations behind the acceptance prior (> 0)
  double prior_accept = 0.5;       //!< prior acceptance of a rank-0 child (rank r: halved r times), in [0, 1]
  std::int32_t replan_every = 32;  //!< drafted rounds between valuations of the shapes, once past 1, 2, 4, ... (>= 1)
  std::int32_t cost_window = 8;    //!< pass times kept per tree size (>= 1); see cost_quantile
  //! Quantile of the window of a size of two nodes or more read as its pass time, in [0, 1] (0.5:
  //! the lower median; one-node passes keep their lower quartile). The median, not the lower
  //! quartile (before 2026-11-28): a pass right after the drafter ran meets caches it evicted, and the
  //! quartile priced such passes at their luckiest: on the demo models a cold planner read 2-node
  //! passes at 1.00-1.10x a plain step (their mean: 1.2-1.6x) and speculated at T = 1 where plain
  //! decoding won (benchmarks/results/planner-quantile_2026-11-28.md).
  double cost_quantile = 0.5;
  double explore = 0.05;          //!< optimism for rarely measured sizes: time x (1 - explore / sqrt(1 + seen))
  double prior_node_cost = 0.25;  //!< before two sizes are measured, each further node costs this share of one
  //! After this many root-only rounds, a speculative probe of six rounds (0 = never); doubles per probe that
  //! loses, up to 8 x its value. Shorter while few speculative rounds were measured (as many as there
  //! were, at least an eighth of it; not once observe_skipped reports skipped drafts): a verdict from one
  //! early rejection is checked again soon.
  std::int32_t probe_every = 64;
  //! Probes are also held back (each counted as one that lost) while the drafted rounds lost more than
  //! this share of the decode's time against plain steps: a drafted round's measured time less that of
  //! plain steps emitting its tokens (the planner's prices where the target's cost is injected), over
  //! about the last 200 rounds, once two probes' worth of rounds drafted (>= 0; a large value: probes at
  //! every gap). Where drafting loses, each probe pays a switch (the drafter catches up, about 100 us
  //! on the demo's models) and rounds that lose again: a cold demo request at T = 1 probed up to three
  //! times (benchmarks/results/planner-probe-budget_2026-11-29.md).
  double probe_budget = 0.01;
  //! Rounds between full scorings of the candidates (>= 1); the last choice is kept in between.
  std::int32_t rescore_every = 4;
  //! Per-depth early-stop thresholds (draft probability below marginal cost). Off by default:
  //! the reach they price, kappa^d x path draft probability with one kappa for every depth, cut
  //! greedy chains that the target accepted almost always (demo models, T = 0: 2.0 tokens per
  //! round instead of 4.7, 12-20% slower; T = 1: 3% slower).
  bool prune = false;
  //! The confidence stop (planned_tree_builder): a planned chain is drafted up to stop_extend levels
  //! deeper than planned, and a level past the planned depth is drafted, and a deterministic child
  //! there kept, only while its path's chance of acceptance, from the drafter's confidences as past
  //! rounds calibrated them, pays for one more node at the plan's predicted tokens per second; the
  //! first child refused ends its branch (round_planner::expand_node, keep_child). Sampled chains
  //! keep every child drawn and are also stopped within the planned depth.
  bool confidence_stop = true;
  std::int32_t stop_extend = 2;  //!< levels a planned chain is drafted past its depth with confidence_stop (0 .. 64)
  //! Root-only rounds timed (after the first, dropped) before any speculation (>= 0): every
  //! shape is priced against the plain step, so it is measured rather than extrapolated. Six,
  //! not two: a request's first steps run on caches its prefill evicted (140-270 us against
  //! 80-115 steady on the example target, an AVX2 CPU), and the lower quartile of two of them
  //! priced every size for the whole request (benchmarks/results/planner-cold-level_2026-11-28.md;
  //! the quantile is over min(plain_first, cost_window) of them).
  std::int32_t plain_first = 6;
  //! Share by which a speculative shape's predicted tokens per second must beat the plain
  //! step's to be chosen (>= 0): near break-even the prediction's error decides, and a
  //! speculative round also pays what the fit leaves out (switching the drafter back in).
  double min_gain = 0.0;
  //! plan_drafted: optimism added to the calibrated acceptance of a confidence bin rarely
  //! offered, draft_bonus / (1 + offers), in [0, 1]. It makes the planner try drafts whose
  //! confidences understate them; a caller that reports the drafts it skipped
  //! (round_planner::observe_skipped) learns that for free and can set 0.
  double draft_bonus = 0.5;
  //! Count round_feedback::accept_prob (a child's chance of acceptance, the sessions fill it in)
  //! instead of the accepted / rejected indicator where the feedback carries it; false: the
  //! indicators only (the estimates before 0.4.0, for comparisons).
  bool expected_acceptance = true;
};

//! Where a round's shape came from.
enum class plan_kind : std::uint8_t {
  none = 0,            //!< no planner (fixed builder)
  autoregressive = 1,  //!< root only: one target step, no drafting
  chain = 2,           //!< one child per level
  widths = 3,          //!< the same number of children for every node of a level
  optimal = 4,         //!< the acceptance-optimal tree for its size and depth
  fixed = 5,           //!< the caller's fixed shape (round_planner::fix_plan)
  drafted = 6,         //!< a prefix of this round's drafted tree (round_planner::plan_drafted)
};

//! Checks planner options (the ranges documented on each field).
//! Errors: invalid_argument, naming the first field out of range.
inline status validate_planner_options(const planner_options& o) noexcept {
  if (o.max_nodes < 1 || o.max_nodes > 1024) return make_status(status_code::invalid_argument, "max_nodes in 1..1024");
  if (o.max_depth < 0 || o.max_depth > 64) return make_status(status_code::invalid_argument, "max_depth in 0..64");
  if (o.max_children < 1 || o.max_children > 16)
    return make_status(status_code::invalid_argument, "max_children in 1..16");
  if (!(o.forget > 0.0 && o.forget <= 1.0)) return make_status(status_code::invalid_argument, "forget in (0, 1]");
  if (!(o.prior_weight > 0.0) || !std::isfinite(o.prior_weight))
    return make_status(status_code::invalid_argument, "prior_weight must be > 0");
  if (!(o.prior_accept >= 0.0 && o.prior_accept <= 1.0))
    return make_status(status_code::invalid_argument, "prior_accept in [0, 1]");
  if (o.replan_every < 1 || o.cost_window < 1)
    return make_status(status_code::invalid_argument, "replan_every and cost_window must be >= 1");
  if (!(o.explore >= 0.0 && o.explore < 1.0)) return make_status(status_code::invalid_argument, "explore in [0, 1)");
  if (!(o.min_gain >= 0.0 && o.min_gain <= 10.0))
    return make_status(status_code::invalid_argument, "min_gain in [0, 10]");
  if (!(o.draft_bonus >= 0.0 && o.draft_bonus <= 1.0))
    return make_status(status_code::invalid_argument, "draft_bonus in [0, 1]");
  if (!(o.prior_node_cost >= 0.0) || !std::isfinite(o.prior_node_cost))
    return make_status(status_code::invalid_argument, "prior_node_cost must be >= 0");
  if (o.probe_every < 0) return make_status(status_code::invalid_argument, "probe_every must be >= 0");
  if (!(o.probe_budget >= 0.0)) return make_status(status_code::invalid_argument, "probe_budget must be >= 0");
  if (o.rescore_every < 1) return make_status(status_code::invalid_argument, "rescore_every must be >= 1");
  if (!(o.cost_quantile >= 0.0 && o.cost_quantile <= 1.0))
    return make_status(status_code::invalid_argument, "cost_quantile in [0, 1]");
  if (o.plain_first < 0) return make_status(status_code::invalid_argument, "plain_first must be >= 0");
  if (o.stop_extend < 0 || o.stop_extend > 64)
    return make_status(status_code::invalid_argument, "stop_extend in 0..64");
  return status::success();
}

//! Short stable name of a plan kind.
constexpr const char* plan_kind_name(plan_kind k) noexcept {
  switch (k) {
    case plan_kind::autoregressive:
      return "autoregressive";
    case plan_kind::chain:
      return "chain";
    case plan_kind::widths:
      return "widths";
    case plan_kind::optimal:
      return "optimal";
    case plan_kind::fixed:
      return "fixed";
    case plan_kind::drafted:
      return "drafted";
    default:
      return "none";
  }
}

//! What a plan decided and predicted (copied into round_stats::plan).
struct plan_summary {
  plan_kind kind = plan_kind::none;  //!< where the shape came from
  std::int32_t nodes = 0;            //!< planned nodes, root included (pruning may draft fewer; the stop, more)
  std::int32_t depth = 0;            //!< planned depth
  double expected_tokens = 0;        //!< predicted tokens of the round (accepted drafts + 1)
  double predicted_seconds = 0;      //!< predicted round time (target + drafter + loop); 0 before any pass time
};

//! One round's plan: the shape to draft and per-depth early-stop thresholds.
//! Spans point into the planner and stay valid until its next non-const call.
struct round_plan {
  std::span<const node_id> shape{};                //!< parent array, root first (-1)
  std::span<const double> min_path_probability{};  //!< static_tree_options::min_path_probability
  plan_summary summary{};                          //!< decision and prediction
};

//! What the caller measured in one round, for round_planner::observe.
struct round_feedback {
  tree_view tree{};                     //!< the drafted tree (parents; tokens unused)
  std::span<const float> draft_prob{};  //!< q_parent(token) per node (drafted_tree::prob), may be empty
  std::span<const node_id> path{};      //!< accepted path from the root, accepted drafts + 1 entries
  //! Per node, may be empty: the chance that verification accepts it given that its parent was
  //! reached (child_acceptance, verify/child_acceptance.hpp), -1 where unknown. Counted in place
  //! of the accepted / rejected indicator for the children of path nodes: the same expectation,
  //! less variance (a chain's first draft at temperature 1: 0.03 against 0.15 on the demo models).
  std::span<const float> accept_prob{};
  std::int32_t forward_nodes = 0;  //!< nodes the target pass ran (a batch's total)
  double forward_seconds = 0;      //!< target pass time
  std::int32_t drafter_calls = 0;  //!< drafter (level) calls this round
  std::int32_t drafted_nodes = 0;  //!< nodes the drafter expanded
  double drafter_seconds = 0;      //!< time inside the drafter
  double other_seconds = 0;        //!< the rest of the round (masks, verification, commit)
  //! Tokens the request may still emit after this round (its token limit less those emitted; -1,
  //! or any negative value: unknown). The planner then drafts no deeper than can be emitted, and runs a probe only
  //! while at least its probe gap of tokens is left to use what the probe finds.
  std::int64_t tokens_left = -1;
};

}  // namespace specdec
