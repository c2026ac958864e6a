//! \file
//! How well a deterministic drafter's drafts are accepted, for
//! round_planner::plan_drafted (loop/planner.hpp): acceptance as a function
//! of the drafter's confidence, the depth and whether the last drafts were
//! right, fed by verified rounds and by plain steps that check the drafts
//! the planner skipped (docs/loop.md, "Planned rounds").
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "specdec/tree/token_tree.hpp"

namespace specdec::detail {

//! Acceptance as a function of the drafter's own confidence, the depth and
//! whether the last round's drafts were right: a child c of a reached node,
//! drafted with q = q_parent(c), is accepted with probability min(kappa q,
//! 1), one calibration factor kappa per (state, depth 1, 2, 3 or deeper):
//! accepted children over the q they were drafted with (decayed sums). A
//! drafter's first token is often right where its later ones are not (a
//! document question copies a phrase's start), so each depth is calibrated
//! apart; copying comes in bursts, so the rate after a round whose drafts
//! were right (the state) is kept apart from the rate after one whose
//! drafts were not. One factor per cell, not one rate per confidence bin:
//! every offer informs it, so few rounds calibrate it. Each factor is shrunk
//! toward the one a level up (depth 1: toward 1, a calibrated drafter),
//! plus an optimism bonus b / (1 + offers in the cell) (an upper confidence
//! bound): a cell rarely tried is tried, so a drafter whose q understates
//! its acceptance (count-based confidences with a prior) is found out
//! without forced probes.
class confidence_estimator {
 public:
  static constexpr int depths = 4;  //!< depths calibrated apart; deeper ones share the last
  //! Sums age with the evidence of their own cell (x forget per offer): a
  //! state or depth seldom met keeps what it learned. decay() ages every
  //! cell, for callers whose plain steps bring no evidence (see
  //! round_planner::observe_skipped).
  void reset(double prior_weight, double bonus, double forget) {
    w_ = prior_weight;
    bonus_ = bonus;
    forget_ = forget;
    state_ = 0;
    for (auto& row : n_)
      for (auto& c : row) c = {};
  }
  void decay() {
    for (auto& row : n_)
      for (auto& c : row) c.off *= forget_, c.q *= forget_, c.acc *= forget_;
  }
  //! The state that at(), offer() and record() read and write: whether the
  //! last round's drafts were right.
  void set_state(bool drafts_hit) noexcept { state_ = drafts_hit ? 1 : 0; }
  //! One offer: a child at `depth` (>= 1) drafted with confidence q, accepted or not.
  void offer(std::int32_t depth, float q, bool accepted) noexcept {
    cell& c = n_[state_][level(depth)];
    c.off = forget_ * c.off + 1.0;
    c.q = forget_ * c.q + std::clamp(static_cast<double>(q), 0.0, 1.0);
    c.acc = forget_ * c.acc + (accepted ? 1.0 : 0.0);
  }
  //! One verified tree (prob: q_parent per node; path: the accepted path).
  void record(const tree_view& t, std::span<const node_id> path, std::span<const float> prob) {
    if (prob.size() < static_cast<std::size_t>(t.size)) return;
    for (std::size_t i = 0; i < path.size(); ++i) {
      const node_id next = i + 1 < path.size() ? path[i + 1] : -1;
      for (node_id c = path[i] + 1; c < t.size; ++c)
        if (t.parent[c] == path[i])
          offer(static_cast<std::int32_t>(i) + 1, prob[static_cast<std::size_t>(c)], c == next);
    }
  }
  //! reach[i]: the chance that the path to node i of `t` (its first n nodes)
  //! is accepted, siblings' estimates scaled to sum to at most 1; depth[i]
  //! its depth. kids: scratch.
  void reach(const tree_view& t, std::span<const float> prob, std::size_t n, std::vector<double>& reach,
             std::vector<std::int32_t>& depth, std::vector<double>& kids) const {
    reach.assign(n, 1.0);
    depth.assign(n, 0);
    kids.assign(n, 0.0);
    for (std::size_t i = 1; i < n; ++i) {
      const auto u = static_cast<std::size_t>(t.parent[i]);
      depth[i] = depth[u] + 1;
      kids[u] += at(prob[i], depth[i]);
    }
    for (std::size_t i = 1; i < n; ++i) {
      const auto u = static_cast<std::size_t>(t.parent[i]);
      reach[i] = reach[u] * at(prob[i], depth[i]) / std::max(kids[u], 1.0);
    }
  }
  //! Estimated probability that a child at `depth` (>= 1) drafted with
  //! confidence q is accepted once its parent is reached.
  [[nodiscard]] double at(float q, std::int32_t depth) const noexcept {
    const int top = level(depth);
    double kappa = 1.0;
    for (int d = 0; d <= top; ++d) {
      const cell& c = n_[state_][d];
      kappa = (c.acc + w_ * kappa * 0.5) / (c.q + w_ * 0.5);  // the prior: w offers at q = 0.5
    }
    const double x = std::clamp(static_cast<double>(q), 0.0, 1.0);
    return std::min(kappa * x + bonus_ / (1.0 + n_[state_][top].off), 1.0);
  }

 private:
  struct cell {
    double off = 0.0, q = 0.0, acc = 0.0;  // offers, their summed q, acceptances (decayed)
  };
  static int level(std::int32_t depth) noexcept { return std::clamp(depth, 1, depths) - 1; }
  double w_ = 2.0, bonus_ = 0.5, forget_ = 0.97;
  int state_ = 0;
  cell n_[2][depths] = {};
};

//! Follows drafts the planner skipped through the plain steps that come
//! after them: each step's emitted token checks the children of the node
//! reached so far (one offer each to the calibration), and the matching
//! child, if it has children, is followed on. A speculative round, or a
//! plain step left unreported, ends the draft followed.
class skipped_draft_follower {
 public:
  void reset() noexcept {
    at_ = -1;
    due_ = false;
  }
  //! Every observed round: a speculative one ends the draft followed; after
  //! a plain one the next step() advances it, and a second round without a
  //! step() in between ends it.
  void round(bool speculative) noexcept {
    if (speculative || due_) at_ = -1;
    due_ = at_ >= 0;
  }
  //! A plain step emitted `emitted` with draft `t` (probabilities `prob`)
  //! skipped: checks the followed draft's next level and `t`'s root children,
  //! and starts following `t` when nothing is followed. Returns whether the
  //! step emitted a drafted token.
  bool step(confidence_estimator& conf, const tree_view& t, std::span<const float> prob, token_id emitted) {
    bool predicted = false;
    if (at_ >= 0 && due_) {
      const tree_view sv{token_.data(), parent_.data(), nullptr, nullptr, static_cast<std::int32_t>(parent_.size())};
      const node_id hit = check(conf, sv, prob_, at_, ++depth_, emitted);
      predicted = hit > 0;
      at_ = hit > 0 && has_children(sv, hit) ? hit : -1;
    }
    due_ = false;
    const node_id hit = check(conf, t, prob, 0, 1, emitted);
    if (at_ < 0 && hit > 0 && has_children(t, hit)) {
      token_.assign(t.token, t.token + t.size);
      parent_.assign(t.parent, t.parent + t.size);
      prob_.assign(prob.begin(), prob.begin() + t.size);
      at_ = hit;
      depth_ = 1;
    }
    return predicted || hit > 0;
  }

 private:
  // The children of node u (at `depth`) checked against the emitted token:
  // one offer each; the matching child or -1.
  static node_id check(confidence_estimator& conf, const tree_view& t, std::span<const float> prob, node_id u,
                       std::int32_t depth, token_id emitted) {
    node_id hit = -1;
    for (node_id c = u + 1; c < t.size; ++c) {
      if (t.parent[c] != u) continue;
      const bool ok = hit < 0 && t.token[c] == emitted;
      conf.offer(depth, prob[static_cast<std::size_t>(c)], ok);
      if (ok) hit = c;
    }
    return hit;
  }
  static bool has_children(const tree_view& t, node_id u) noexcept {
    for (node_id c = u + 1; c < t.size; ++c)  // children follow their parent (topological ids)
      if (t.parent[c] == u) return true;
    return false;
  }

  std::vector<token_id> token_;
  std::vector<node_id> parent_;
  std::vector<float> prob_;
  node_id at_ = -1;         // node of the followed draft reached so far (-1: none)
  std::int32_t depth_ = 0;  // its depth
  bool due_ = false;        // the next step() advances it
};

}  // namespace specdec::detail
