//! \file
//! The round planner in the loop: `planned_tree_builder` drafts each round
//! the shape its round_planner chose (through static_tree_builder, with the
//! plan's early-stop thresholds) and learns from the session's feedback;
//! `plan_batch` shares one target pass between the requests of a batch
//! under a node budget. speculative_session and batched_session call them
//! when the builder is a `round_observing_builder`.
#pragma once

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <span>
#include <vector>

#include "specdec/core/status.hpp"
#include "specdec/draft/drafter.hpp"
#include "specdec/draft/static_tree.hpp"
#include "specdec/loop/planner.hpp"

namespace specdec {

//! A tree builder that also learns from each round (the sessions call
//! observe() after the commit and copy last_plan() into round_stats::plan).
template <class B>
concept round_observing_builder = requires(B& b, const B& cb, const round_feedback& f) {
  { b.observe(f) } -> std::same_as<status>;
  { cb.last_plan() } -> std::convertible_to<plan_summary>;
};

//! A round-observing builder whose round_planner the batched session can
//! plan across requests (plan_batch).
template <class B>
concept batch_plannable_builder = round_observing_builder<B> && requires(B& b) {
  { b.planner() } -> std::same_as<round_planner&>;
};

//! Options of planned_tree_builder.
struct planned_tree_options {
  planner_options planner{};                    //!< the round planner's options
  draft_mode mode = draft_mode::deterministic;  //!< how children are drawn (as static_tree_options::mode)
  std::int64_t vocab_size = 0;                  //!< > 0: drafter rows must have this length
};

//! Drafts the planner's shape each round: next() unless a plan is pending
//! (plan_batch set it), then static_tree_builder over that shape with the
//! plan's per-depth thresholds. node_bound() is the planner's max_nodes.
class planned_tree_builder : public owning_build<planned_tree_builder> {
 public:
  //! Builds with options `o`; throws specdec::error for invalid planner options.
  explicit planned_tree_builder(const planned_tree_options& o = {}) : planner_(o.planner) {
    static_tree_options& so = static_.options();
    so.mode = o.mode;
    so.vocab_size = o.vocab_size;
  }

  //! Errors: those of static_tree_builder::build.
  template <any_drafter D>
  status build(D& d, const draft_round& round, drafted_tree& out) {
    const bool batched = planner_.pending();  // plan_batch's plan, sized to the batch's node budget
    const round_plan p = batched ? planner_.plan() : planner_.next();
    // A plain step drafts nothing: the root alone, without the static
    // builder's per-round setup, so that a round the planner makes plain
    // costs close to what a plain decoding loop's step does.
    if (p.shape.size() == 1) {
      out.reset(round.root_token);
      return status::success();
    }
    static_tree_options& so = static_.options();
    so.shape.assign(p.shape.begin(), p.shape.end());
    so.min_path_probability.assign(p.min_path_probability.begin(), p.min_path_probability.end());
    const planner_options& po = planner_.options();
    // Sampled drafts are stopped on a lone chain only (where it was measured).
    const bool sampled = so.mode != draft_mode::deterministic;
    const bool chain = p.summary.kind == plan_kind::chain && !batched;
    if (!po.confidence_stop || p.summary.kind == plan_kind::fixed || (sampled && !chain))
      return static_.build(d, round, out);
    // A chain drafts stop_extend levels past its plan, for the stop to cut
    // where this round's confidences say (within the budget, the depth cap
    // and the request's horizon; not in a batch, whose budget is shared).
    if (chain)
      for (std::int32_t k = 0; k < po.stop_extend; ++k) {
        const auto depth = static_cast<std::int32_t>(so.shape.size());  // a chain's next depth
        if (depth >= po.max_nodes || depth > po.max_depth || planner_.past_horizon(depth)) break;
        so.shape.push_back(depth - 1);
      }
    planner_.start_draft(sampled);
    if (sampled) return static_.build(d, round, out, level_stop{&planner_});
    return static_.build(d, round, out, stop_filter{&planner_});
  }

  //! Feeds the round's measurements to the planner.
  status observe(const round_feedback& f) { return planner_.observe(f); }
  //! A new sequence starts (round_planner::begin_request); the sessions' start() calls it.
  void begin_request() noexcept { planner_.begin_request(); }
  //! The decision and prediction of the last plan.
  [[nodiscard]] plan_summary last_plan() const noexcept { return planner_.plan().summary; }
  //! The most nodes a build produces (the planner's budget).
  [[nodiscard]] std::int32_t node_bound() const noexcept { return planner_.options().max_nodes; }
  //! The planner (inject costs, fix a plan, read estimates).
  [[nodiscard]] round_planner& planner() noexcept { return planner_; }
  //! The planner, read-only.
  [[nodiscard]] const round_planner& planner() const noexcept { return planner_; }

 private:
  // The confidence stop as static_tree_builder's expansion filter.
  struct stop_filter {
    round_planner* p;
    bool operator()(const drafted_tree& t, node_id u, token_id, float q) const {
      return p->keep_child(u, t.tree.depth(u) + 1, q);
    }
    bool expand(const drafted_tree& t, node_id u, std::int32_t depth) const {
      return p->expand_node(u, depth, u == 0 ? 1.0f : t.prob[static_cast<std::size_t>(u)]);
    }
  };

  // Sampled drafts: every drawn child is kept (a refusal that depends on
  // its own token would bias the draft law verification corrects), and
  // the stop only decides, before a level is drawn, which nodes get
  // children, from the confidences of the nodes drawn so far.
  struct level_stop {
    round_planner* p;
    node_id noted = 1;  // the next drafted node whose reach the planner has not recorded
    bool expand(const drafted_tree& t, node_id u, std::int32_t depth) {
      for (; noted <= u && noted < t.size(); ++noted)
        p->note_child(t.tree.parent(noted), t.tree.depth(noted), t.prob[static_cast<std::size_t>(noted)]);
      return p->expand_node(u, depth, u == 0 ? 1.0f : t.prob[static_cast<std::size_t>(u)]);
    }
  };

  round_planner planner_;
  static_tree_builder static_;
};

namespace detail {
inline double cur_draft_of(round_planner& p, const round_planner::candidate& c) {
  return p.drafter_seconds(c.depth, c.expanded, 1.0 + c.value);
}
}  // namespace detail

//! One plan per request for a batch that shares one target pass of at most
//! `node_budget` nodes: starting from a root-only step for every request,
//! repeatedly moves the one request whose next larger candidate most raises
//! the batch's expected tokens per second (total expected tokens over the
//! shared pass time at the total size, plus every request's drafter time,
//! plus the loop's time), and keeps the best allocation seen. The pass and
//! loop times come from planners[0] (every planner is fed the same pass
//! times); acceptance and drafter times are each request's. Hands each
//! planner its plan (pending until observe()). Requests keep their own
//! depth, at most the tokens each may still emit less one
//! (round_feedback::tokens_left). O(R x C x budget) for R requests with C
//! candidates each.
//! Errors: invalid_argument (null planner, budget below one node per request).

inline status plan_batch(std::span<round_planner* const> planners, std::int32_t node_budget) {
  const std::size_t R = planners.size();
  if (R == 0) return status::success();
  for (std::size_t r = 0; r < R; ++r)
    if (planners[r] == nullptr)
      return make_status(status_code::invalid_argument, "null planner", static_cast<std::int64_t>(r));
  if (node_budget < static_cast<std::int32_t>(R))
    return make_status(status_code::invalid_argument, "node budget below one node per request");
  round_planner& lead = *planners[0];
  std::vector<std::size_t> pick(R, 0), best_pick(R, 0);
  double tokens = 0, draft = 0;
  std::int32_t nodes = 0;
  for (std::size_t r = 0; r < R; ++r) {
    planners[r]->prepare();
    const auto cands = planners[r]->candidates();
    while (pick[r] < cands.size() && cands[pick[r]].nodes != 1) ++pick[r];  // the root-only step
    if (pick[r] == cands.size()) return make_status(status_code::invalid_argument, "planner without a root-only step");
    tokens += 1.0;
    nodes += 1;
  }
  const auto rate = [&](double tok, double dr, std::int32_t n) {
    return tok / (lead.target_seconds(n) + dr + lead.loop_seconds(n));
  };
  // Speculation must beat the all-plain batch by the lead's min_gain.
  double best = rate(tokens, draft, nodes) * (1.0 + lead.options().min_gain);
  best_pick = pick;
  for (;;) {
    double step_best = -1.0;
    std::size_t step_r = 0, step_c = 0;
    for (std::size_t r = 0; r < R; ++r) {
      round_planner& p = *planners[r];
      const auto cands = p.candidates();
      const auto& cur = cands[pick[r]];
      const double cur_draft = p.drafter_seconds(cur.depth, cur.expanded, 1.0 + cur.value);
      for (std::size_t c = 0; c < cands.size(); ++c) {
        const auto& x = cands[c];
        if (x.nodes <= cur.nodes || nodes - cur.nodes + x.nodes > node_budget || p.past_horizon(x.depth)) continue;
        const double v = rate(tokens - cur.value + x.value,
                              draft - cur_draft + p.drafter_seconds(x.depth, x.expanded, 1.0 + x.value),
                              nodes - cur.nodes + x.nodes);
        if (v > step_best) step_best = v, step_r = r, step_c = c;
      }
    }
    if (step_best < 0.0) break;
    round_planner& p = *planners[step_r];
    const auto& cur = p.candidates()[pick[step_r]];
    const auto& x = p.candidates()[step_c];
    tokens += x.value - cur.value;
    draft += p.drafter_seconds(x.depth, x.expanded, 1.0 + x.value) - detail::cur_draft_of(p, cur);
    nodes += x.nodes - cur.nodes;
    pick[step_r] = step_c;
    if (step_best > best) best = step_best, best_pick = pick;
  }
  for (std::size_t r = 0; r < R; ++r) {
    round_planner& p = *planners[r];
    p.choose(best_pick[r], p.predict_seconds(p.candidates()[best_pick[r]]));
  }
  return status::success();
}

}  // namespace specdec
