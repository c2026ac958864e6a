//! \file
//! The round planner's online estimators (loop/planner.hpp): pass cost per
//! tree size (medians of recent times, interpolated), small decayed
//! least-squares fits for the drafter and the loop's own time, acceptance
//! per (depth, sibling rank) with hierarchical smoothing, and the tree
//! program (Sequoia's dynamic program with depth-dependent acceptance).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "specdec/core/status.hpp"
#include "specdec/tree/token_tree.hpp"

namespace specdec::detail {

//! Pass times per tree size 1..max_n: a ring of the last `window` times per
//! size and a quantile of it (robust to a descheduled pass on a shared
//! machine): planner_options::cost_quantile for sizes of two nodes or more,
//! the lower quartile for one node (see add()); sizes of two nodes or more
//! as ratios to a one-node time measured by plain steps and, during
//! long speculative stretches, implied by the larger passes (see add()).
//! The sizes are pooled: each estimate is shrunk toward a line t = kN + C
//! (STree's linear model) fitted through all of them, weighted by samples,
//! so a size seen once or twice reads mostly the line, not its own few
//! passes; a size with a full window reads its own (with cost_window = 1,
//! every size), and the one-node time is never shrunk (it is the unit).
//! Sizes never seen are interpolated between seen ones and extrapolated
//! with the line's slope.
class pass_cost_table {
 public:
  void reset(std::int32_t max_n, std::int32_t window, double quantile) {
    max_n_ = std::max(max_n, 1);
    window_ = std::max(window, 1);
    quantile_ = std::clamp(quantile, 0.0, 1.0);
    ring_.assign(static_cast<std::size_t>(max_n_) * static_cast<std::size_t>(window_), 0.0);
    count_.assign(static_cast<std::size_t>(max_n_), 0);
    seen_.assign(static_cast<std::size_t>(max_n_), 0.0);
    estimate_.assign(static_cast<std::size_t>(max_n_), 0.0);
    sorted_.assign(static_cast<std::size_t>(window_), 0.0);
    level_ = 1.0;
    level_count_ = plain_steps_ = 0;
    stretch_.assign(static_cast<std::size_t>(max_n_), -1);
    stored_.assign(static_cast<std::size_t>(max_n_), 0);
    fresh_ = shape_fresh_ = false;
  }

  void add(std::int32_t n, double seconds) {
    if (n < 1 || n > max_n_ || !(seconds >= 0.0) || !std::isfinite(seconds)) return;
    const auto i = static_cast<std::size_t>(n - 1);
    seen_[i] += 1.0;
    // The first pass at a size often pays for growing the engine's buffers
    // (allocation, page faults): not a cost of later passes, so it is dropped.
    if (seen_[i] == 1.0) return;
    // The machine's speed drifts (other jobs, clocks, shared caches: 1.5x
    // within minutes on the shared CPU of the example models), and the
    // context grows (the example target: a plain step 50 us at 80
    // positions, 58-60 us at 230). So a pass over n >= 2 nodes is stored as
    // its ratio to the one-node time (the level), and estimated as that
    // ratio times the level now. The level is the lower quartile of a ring
    // of one-node times: measured by plain steps, or implied by a larger
    // pass (its time over its size's ratio) while the planner speculates and
    // no plain step measures it. Without the first, a planner that had gone
    // plain compared fresh one-node times with 2-node times taken when the
    // machine was 1.5x slower, and stayed plain for good; without the
    // second, a one-node time kept from a request's first steps priced the
    // plain step 15-20% cheap and turned greedy chains that paid into plain
    // decoding.
    if (n == 1) {
      if (count_[0]++ == 0) rescale_ratios(seconds);  // times stored raw until t(1) was known
      ++plain_steps_;
      add_level(seconds);
      fresh_ = false;
      if (count_[0] <= window_) shape_fresh_ = false;  // its weight in the pooling grew
      return;
    }
    const bool relative = count_[0] > 0 && estimate_[0] > 0.0;
    // A size's ratio and the level cannot both be learned from that size's
    // passes alone (whichever ring turned over first would absorb the drift:
    // the ratio did, and the level stayed stale). So once a size has a few
    // ratios, it stores at most (window - 1) / 4 of them (at least one)
    // between two plain steps, and its further passes move the level
    // instead, its ratio held: too few ratios taken on a stale level to
    // move its quantile either way (a faster machine as much as a
    // slower one).
    if (relative && count_[i] >= 3 && estimate_[i] > 0.0) {
      if (stretch_[i] != plain_steps_) stretch_[i] = plain_steps_, stored_[i] = 0;
      if (stored_[i] >= std::max<std::int64_t>((window_ - 1) / 4, 1)) {
        add_level(seconds / estimate_[i]);
        fresh_ = false;
        return;
      }
      ++stored_[i];
    }
    if (relative) seconds /= estimate_[0];
    const std::int64_t c = count_[i]++;
    ring_[i * static_cast<std::size_t>(window_) + static_cast<std::size_t>(c % window_)] = seconds;
    // This size's quantile now (a window of a few entries), the curve on
    // demand. Not the mean: one descheduled pass would move it. The median
    // by default, not the lower quartile (before 2026-11-28): a pass right after
    // the drafter ran meets caches it evicted, a cost of every speculative
    // round that the quartile left out (a cold demo planner read 2-node
    // passes at 1.00-1.10x a plain step, their mean 1.2-1.6x). The slow first
    // passes after a switch, which once made medians keep a planner plain,
    // stay out of the window (see round_planner::observe), and a size seen
    // twice leans on the line. The level stays the lower quartile: plain
    // steps run back to back on warm caches and are slowed only now and then
    // (a request's first steps, a descheduled pass), and its median took the
    // cold first steps of a request for the level, so that ratios taken
    // against it read low, the level they then implied high, and plain steps
    // dear: a cold demo planner held chains at T = 1 with the level at
    // 155-187 us where plain steps took 105-120.
    const auto k = static_cast<std::size_t>(std::min<std::int64_t>(count_[i], window_));
    std::copy_n(ring_.begin() + static_cast<std::ptrdiff_t>(i * static_cast<std::size_t>(window_)), k, sorted_.begin());
    std::sort(sorted_.begin(), sorted_.begin() + static_cast<std::ptrdiff_t>(k));
    estimate_[i] = sorted_[pick(k)];
    fresh_ = shape_fresh_ = false;
  }

  //! Samples seen at size n (the exploration bonus shrinks with it).
  [[nodiscard]] double seen(std::int32_t n) const noexcept {
    return n >= 1 && n <= max_n_ ? seen_[static_cast<std::size_t>(n - 1)] : 0.0;
  }
  //! Passes kept at size n (0: not measured yet; its first pass is dropped).
  [[nodiscard]] std::int64_t kept(std::int32_t n) const noexcept {
    return n >= 1 && n <= max_n_ ? count_[static_cast<std::size_t>(n - 1)] : 0;
  }
  //! The largest measured size (0 before any).
  [[nodiscard]] std::int32_t largest() const noexcept {
    for (std::int32_t n = max_n_; n >= 1; --n)
      if (count_[static_cast<std::size_t>(n - 1)] > 0) return n;
    return 0;
  }
  [[nodiscard]] bool empty() const noexcept {
    return std::all_of(count_.begin(), count_.end(), [](std::int64_t c) { return c == 0; });
  }

  //! Recomputes the medians and the extrapolation slope (after add()).
  void refresh(double prior_slope_fraction) {
    const bool same_prior = prior_slope_fraction == prior_;
    if (fresh_ && same_prior) return;
    fresh_ = true;
    // The one-node time scales every other size (see add()).
    level_ = count_[0] > 0 ? estimate_[0] : 1.0;
    // Most passes of steady speculation move only the level (see add()):
    // the pooled ratios stand, rescaled.
    if (shape_fresh_ && same_prior) {
      for (std::size_t j = 0; j < ys_.size(); ++j) seconds_[j] = level_ * ys_[j];
      return;
    }
    shape_fresh_ = true;
    prior_ = prior_slope_fraction;
    xs_.clear();
    ys_.clear();
    ws_.clear();
    for (std::int32_t n = 1; n <= max_n_; ++n) {
      const auto i = static_cast<std::size_t>(n - 1);
      const auto k = static_cast<std::size_t>(std::min<std::int64_t>(count_[i], window_));
      if (k == 0) continue;
      xs_.push_back(n);
      ys_.push_back(n == 1 ? 1.0 : estimate_[i]);
      ws_.push_back(static_cast<double>(k));
    }
    pool_toward_line();
    // A pass over more nodes never costs less on real hardware: pool
    // adjacent violators (weighted by samples), so one slow outlier at a
    // small size cannot make it look dearer than larger ones for long.
    isotonic();
    slope_ = 0.0;
    if (has_line_) {
      slope_ = line_k_;
    } else if (xs_.size() >= 2) {
      slope_ = std::max((ys_.back() - ys_.front()) / (xs_.back() - xs_.front()), 0.0);
    } else if (xs_.size() == 1) {
      // One size seen: assume each further node costs this fraction of it
      // (optimistic on purpose, so that the planner tries the next size).
      slope_ = prior_slope_fraction * ys_[0] / xs_[0];
    }
    seconds_.resize(ys_.size());
    for (std::size_t j = 0; j < ys_.size(); ++j) seconds_[j] = level_ * ys_[j];
  }

  //! Estimated seconds of a pass over n nodes (NaN before any sample).
  [[nodiscard]] double at(std::int32_t n) const noexcept { return level_ * relative(n); }

  //! Sizes with at least one sample and their (pooled, monotone) estimates
  //! in seconds at the current speed level (after refresh()).
  [[nodiscard]] std::span<const double> sizes() const noexcept { return xs_; }
  [[nodiscard]] std::span<const double> estimates() const noexcept { return seconds_; }

 private:
  // The level ring (ring 0): one-node times, measured or implied by larger
  // passes; its lower quartile is the level (see add()).
  void add_level(double t1) {
    const auto slot = static_cast<std::size_t>(level_count_++ % window_);
    ring_[slot] = t1;
    const auto k = static_cast<std::size_t>(std::min<std::int64_t>(level_count_, window_));
    std::copy_n(ring_.begin(), k, sorted_.begin());
    std::sort(sorted_.begin(), sorted_.begin() + static_cast<std::ptrdiff_t>(k));
    estimate_[0] = sorted_[(k - 1) / 4];
  }

  [[nodiscard]] std::size_t pick(std::size_t k) const noexcept {
    return static_cast<std::size_t>(std::floor(static_cast<double>(k - 1) * quantile_));
  }

  // Sizes >= 2 measured before the first one-node time were stored in
  // seconds: from now on they are ratios to it.
  void rescale_ratios(double t1) {
    if (!(t1 > 0.0)) return;
    for (std::size_t k = static_cast<std::size_t>(window_); k < ring_.size(); ++k) ring_[k] /= t1;
    for (std::size_t k = 1; k < estimate_.size(); ++k) estimate_[k] /= t1;
  }

  [[nodiscard]] double relative(std::int32_t n) const noexcept {
    if (xs_.empty()) return std::numeric_limits<double>::quiet_NaN();
    const auto x = static_cast<double>(n);
    if (x <= xs_.front()) return std::max(ys_.front() - slope_ * (xs_.front() - x), 0.5 * ys_.front());
    if (x >= xs_.back()) return ys_.back() + slope_ * (x - xs_.back());
    const auto hi = static_cast<std::size_t>(std::lower_bound(xs_.begin(), xs_.end(), x) - xs_.begin());
    if (xs_[hi] == x) return ys_[hi];
    const double w = (x - xs_[hi - 1]) / (xs_[hi] - xs_[hi - 1]);
    return ys_[hi - 1] + w * (ys_[hi] - ys_[hi - 1]);
  }

  // An estimate from w samples weighs w against line_weight x (1 - w /
  // window) for the line: a size tried once reads mostly the line, a size
  // with a full window its own quantile. On the example models (2-core CPU)
  // per-size medians of planned rounds were off up to 2x where a size was
  // tried once or twice, on caches another size or a pause had just
  // evicted, and that kept the planner off it; but the curve bends, and a
  // full window still pulled a third of the way to the line kept a warm
  // planner on 8-node chains (26.7 tokens/ms measured) where 4-node ones ran
  // 27.3.
  static constexpr double line_weight = 4.0;

  void pool_toward_line() {
    has_line_ = false;
    if (xs_.size() < 2) return;
    // Weighted least squares, then two reweighted passes that scale down a
    // size whose median is more than half off the line (one far size seen
    // once would otherwise tilt it: it has the most leverage).
    fw_.assign(ws_.begin(), ws_.end());
    double c = 0;
    for (int pass = 0; pass < 3; ++pass) {
      double sw = 0, sx = 0, sy = 0;
      for (std::size_t j = 0; j < xs_.size(); ++j) sw += fw_[j], sx += fw_[j] * xs_[j], sy += fw_[j] * ys_[j];
      const double mx = sx / sw, my = sy / sw;
      double sxx = 0, sxy = 0;
      for (std::size_t j = 0; j < xs_.size(); ++j) {
        sxx += fw_[j] * (xs_[j] - mx) * (xs_[j] - mx);
        sxy += fw_[j] * (xs_[j] - mx) * (ys_[j] - my);
      }
      line_k_ = sxx > 0.0 ? std::max(sxy / sxx, 0.0) : 0.0;
      c = my - line_k_ * mx;
      for (std::size_t j = 0; j < xs_.size(); ++j) {
        const double line = c + line_k_ * xs_[j];
        const double off = line > 0.0 ? std::fabs(ys_[j] - line) / line : 0.0;
        fw_[j] = ws_[j] * (off > 0.5 ? 0.5 / off : 1.0);
      }
    }
    has_line_ = true;
    // The one-node time is the unit of the others and the size measured
    // most (every plain step): it stays as measured. Pooled, it leaned on
    // the line's intercept, which the curve's bend at small sizes puts below
    // it (a demo trace: the plain step priced at 34-38 us while plain passes
    // measured 48-57 us, and plain decoding chosen over chains that paid).
    for (std::size_t j = xs_.front() == 1.0 ? 1 : 0; j < xs_.size(); ++j) {
      const double line = std::max(c + line_k_ * xs_[j], 0.0);
      const double lw = line_weight * (1.0 - ws_[j] / static_cast<double>(window_));
      ys_[j] = (ws_[j] * ys_[j] + lw * line) / (ws_[j] + lw);
    }
  }

  void isotonic() {
    // Blocks of (value, weight, count); merge while a block is below its predecessor.
    blk_v_.clear();
    blk_w_.clear();
    blk_n_.clear();
    for (std::size_t j = 0; j < ys_.size(); ++j) {
      blk_v_.push_back(ys_[j]);
      blk_w_.push_back(ws_[j]);
      blk_n_.push_back(1);
      while (blk_v_.size() > 1 && blk_v_[blk_v_.size() - 2] > blk_v_.back()) {
        const std::size_t b = blk_v_.size() - 1;
        const double w = blk_w_[b - 1] + blk_w_[b];
        blk_v_[b - 1] = (blk_v_[b - 1] * blk_w_[b - 1] + blk_v_[b] * blk_w_[b]) / w;
        blk_w_[b - 1] = w;
        blk_n_[b - 1] += blk_n_[b];
        blk_v_.pop_back();
        blk_w_.pop_back();
        blk_n_.pop_back();
      }
    }
    std::size_t j = 0;
    for (std::size_t b = 0; b < blk_v_.size(); ++b)
      for (std::size_t k = 0; k < blk_n_[b]; ++k) ys_[j++] = blk_v_[b];
  }

  std::int32_t max_n_ = 1, window_ = 1;
  std::vector<double> ring_, seen_, estimate_, sorted_, xs_, ys_, ws_, fw_, seconds_, blk_v_, blk_w_;
  std::vector<std::size_t> blk_n_;
  std::vector<std::int64_t> count_;
  // Entries written to the level ring; plain steps measured (the stretch
  // number); per size, the stretch its stored_ ratios were counted in.
  std::int64_t level_count_ = 0, plain_steps_ = 0;
  std::vector<std::int64_t> stretch_, stored_;
  double slope_ = 0.0, line_k_ = 0.0, level_ = 1.0, prior_ = 0.25, quantile_ = 0.5;
  // fresh_: nothing changed since refresh(); shape_fresh_: only the level did.
  bool fresh_ = false, shape_fresh_ = false, has_line_ = false;
};

//! Non-negative least squares y ~ w . x over K features with exponential
//! forgetting (normal equations decayed by `forget` per sample; a small ridge
//! keeps collinear features solvable: a chain has as many levels as expanded
//! nodes). Non-negative for real: the best of the 2^K - 1 feature subsets
//! whose own solution is non-negative (clamping an unconstrained solution
//! instead read a drafter at 245 us per level, ten times its cost, when the
//! per-round weight came out negative). capped() bounds a new sample by
//! `outlier` times the current prediction (a descheduled call on a shared
//! machine, a cache refill after a long pause), once a few are in.
template <int K>
class decayed_regression {
  static_assert(K >= 1 && K <= 6, "subset enumeration is for a handful of features");

 public:
  static constexpr double outlier = 3.0;

  //! y capped at `outlier` times the prediction for x, once 4 samples are
  //! in (the weights of the last solve: at most a few samples old).
  [[nodiscard]] double capped(const double (&x)[K], double y) const {
    if (n_ < 4.0) return y;
    double p = 0;
    for (int r = 0; r < K; ++r) p += w_[r] * x[r];
    return p > 0.0 ? std::min(y, outlier * p) : y;
  }
  void add(const double (&x)[K], double y, double forget) {
    for (int r = 0; r < K; ++r) {
      for (int c = 0; c < K; ++c) xx_[r][c] = forget * xx_[r][c] + x[r] * x[c];
      xy_[r] = forget * xy_[r] + x[r] * y;
    }
    yy_ = forget * yy_ + y * y;
    n_ = forget * n_ + 1.0;
    solved_ = false;
  }
  [[nodiscard]] double samples() const noexcept { return n_; }
  //! The weights (zero before any sample), all >= 0.
  const double* weights() {
    if (solved_) return w_;
    solved_ = true;
    double scale = 0;
    for (int r = 0; r < K; ++r) scale = std::max(scale, xx_[r][r]);
    const double ridge = 1e-6 * (scale > 0 ? scale : 1.0);
    double best = std::numeric_limits<double>::infinity();
    for (double& w : w_) w = 0.0;
    // The last solve's support first (it rarely changes from one sample to
    // the next): when its solution is feasible and no left-out feature would
    // lower the error (gradient >= 0, the KKT conditions of this strictly
    // convex problem) it is the unique optimum. Then all features (a
    // non-negative solution over all is the constrained optimum too), then
    // the best feasible subset. Trying all features first cost a second
    // solve per sample wherever the optimum leaves one out (a chain
    // drafter: levels and nodes move together).
    constexpr unsigned all = (1u << K) - 1;
    if (double w[K] = {}; support_ != 0 && solve(support_, ridge, w) && (support_ == all || optimal(support_, w))) {
      std::copy_n(w, K, w_);
      return w_;
    }
    if (double w[K] = {}; support_ != all && solve(all, ridge, w)) {
      std::copy_n(w, K, w_);
      support_ = all;
      return w_;
    }
    for (unsigned mask = 1; mask < all; ++mask) {
      double w[K] = {};
      if (!solve(mask, ridge, w)) continue;
      // Residual sum of squares from the normal equations: yy - 2 w.xy + w' XX w.
      double sse = yy_;
      for (int r = 0; r < K; ++r) {
        sse -= 2.0 * w[r] * xy_[r];
        for (int c = 0; c < K; ++c) sse += w[r] * xx_[r][c] * w[c];
      }
      if (sse < best) {
        best = sse;
        std::copy_n(w, K, w_);
        support_ = mask;
      }
    }
    return w_;
  }

 private:
  // Least squares over the features in `mask` (Gauss-Jordan with partial
  // pivoting); false when singular or when a weight comes out negative.
  bool solve(unsigned mask, double ridge, double (&w)[K]) const {
    int idx[K];
    int m = 0;
    for (int r = 0; r < K; ++r)
      if (mask & (1u << r)) idx[m++] = r;
    double a[K][K + 1];
    for (int r = 0; r < m; ++r) {
      for (int c = 0; c < m; ++c) a[r][c] = xx_[idx[r]][idx[c]] + (r == c ? ridge : 0.0);
      a[r][m] = xy_[idx[r]];
    }
    for (int col = 0; col < m; ++col) {
      int piv = col;
      for (int r = col + 1; r < m; ++r)
        if (std::fabs(a[r][col]) > std::fabs(a[piv][col])) piv = r;
      for (int c = 0; c <= m; ++c) std::swap(a[col][c], a[piv][c]);
      if (a[col][col] == 0.0) return false;
      for (int r = 0; r < m; ++r) {
        if (r == col) continue;
        const double f = a[r][col] / a[col][col];
        for (int c = col; c <= m; ++c) a[r][c] -= f * a[col][c];
      }
    }
    for (int r = 0; r < m; ++r) {
      const double v = a[r][m] / a[r][r];
      if (!(v >= 0.0)) return false;
      w[idx[r]] = v;
    }
    return true;
  }

  // Whether w (zero outside `mask`, the least squares on it) satisfies the
  // KKT conditions of the non-negative least squares: the error's gradient
  // is >= 0 at every feature outside the support (the ridge term vanishes
  // there, w being 0), up to 1e-5 of its scale sqrt(xx_rr yy) (the
  // Cauchy-Schwarz bound of xy_r). Without the tolerance a feature
  // collinear with one in the support (a chain's levels and nodes) read
  // the ridge's pull, -ridge w, as a descent direction, and every sample
  // searched all subsets again.
  bool optimal(unsigned mask, const double (&w)[K]) const {
    for (int r = 0; r < K; ++r) {
      if (mask & (1u << r)) continue;
      double g = -xy_[r];
      for (int c = 0; c < K; ++c) g += xx_[r][c] * w[c];
      if (g < -1e-5 * std::sqrt(xx_[r][r] * yy_)) return false;
    }
    return true;
  }

  double xx_[K][K] = {};
  double xy_[K] = {};
  double yy_ = 0.0;
  double w_[K] = {};
  double n_ = 0.0;
  unsigned support_ = 0;  // features of the last solve's optimum (0 before any, or none feasible)
  bool solved_ = false;
};

//! An acceptance table (acceptance_estimator::table() of some moment: depth
//! d's ranks at [(d - 1) K, d K)), read as the estimator reads its own:
//! depths past the last share its row, ranks past the last are 0.
struct acceptance_table {
  std::span<const double> p;
  std::int32_t depths = 1, ranks = 1;
  [[nodiscard]] double at(std::int32_t depth, std::int32_t rank) const noexcept {
    if (rank < 0 || rank >= ranks || depth < 1) return 0.0;
    return p[static_cast<std::size_t>((std::min(depth, depths) - 1) * ranks + rank)];
  }
};

//! Acceptance per (depth, sibling rank), decayed counts: p(d, r) is the
//! probability that the rank-r child of a reached node at depth d - 1 is the
//! accepted one. Estimate: the depth's counts shrunk toward the rank's pooled
//! rate, itself shrunk toward a prior (prior_first * 0.5^r).
class acceptance_estimator {
 public:
  void reset(std::int32_t depths, std::int32_t ranks, double prior_weight, double prior_first) {
    D_ = std::max(depths, 1);
    K_ = std::max(ranks, 1);
    w_ = prior_weight;
    prior_ = prior_first;
    off_.assign(static_cast<std::size_t>(D_ * K_), 0.0);
    acc_.assign(off_.size(), 0.0);
    p_.assign(off_.size(), 0.0);
    q_sum_ = acc_sum_ = 0.0;
    refresh();
  }

  //! One verified tree, after ageing every count by `forget` (once per
  //! drafted round): `path` the accepted root-to-node path, `prob` each
  //! node's draft probability (may be empty), `accept` each node's chance
  //! of acceptance given its parent was reached (may be empty; entries < 0
  //! unknown), counted instead of the indicator where known. `nchild`,
  //! `rank` scratch.
  void record(const tree_view& t, std::span<const node_id> path, std::span<const float> prob,
              std::span<const float> accept, double forget, std::vector<std::int32_t>& nchild,
              std::vector<std::int32_t>& rank) {
    for (double& x : off_) x *= forget;
    for (double& x : acc_) x *= forget;
    q_sum_ *= forget;
    acc_sum_ *= forget;
    const auto n = static_cast<std::size_t>(t.size);
    nchild.assign(n, 0);
    rank.assign(n, -1);
    for (std::int32_t i = 1; i < t.size; ++i)
      rank[static_cast<std::size_t>(i)] = nchild[static_cast<std::size_t>(t.parent[i])]++;
    for (std::size_t i = 0; i < path.size(); ++i) {
      const auto u = static_cast<std::size_t>(path[i]);
      const std::int32_t row = std::min(static_cast<std::int32_t>(i), D_ - 1);
      const std::int32_t kids = std::min(nchild[u], K_);
      const node_id next = i + 1 < path.size() ? path[i + 1] : -1;
      for (std::int32_t r = 0; r < kids; ++r) off_[static_cast<std::size_t>(row * K_ + r)] += 1.0;
      if (accept.size() >= n) {
        for (auto c = static_cast<std::int32_t>(u) + 1; c < t.size; ++c) {  // children follow their parent
          const auto ci = static_cast<std::size_t>(c);
          if (t.parent[c] != static_cast<node_id>(u) || rank[ci] >= K_) continue;
          acc_[static_cast<std::size_t>(row * K_ + rank[ci])] +=
              accept[ci] >= 0.0f ? static_cast<double>(accept[ci]) : (c == next ? 1.0 : 0.0);
        }
      } else if (next >= 0 && rank[static_cast<std::size_t>(next)] < K_) {
        acc_[static_cast<std::size_t>(row * K_ + rank[static_cast<std::size_t>(next)])] += 1.0;
      }
      if (prob.size() >= n && nchild[u] > 0) {
        // Calibration: draft probability of the offered children against
        // how often one of them was accepted.
        for (std::int32_t c = 1; c < t.size; ++c)
          if (t.parent[c] == static_cast<node_id>(u)) q_sum_ += static_cast<double>(prob[static_cast<std::size_t>(c)]);
        acc_sum_ += next >= 0 ? 1.0 : 0.0;
      }
    }
    refresh();
  }

  [[nodiscard]] double at(std::int32_t depth, std::int32_t rank) const noexcept {
    return acceptance_table{p_, D_, K_}.at(depth, rank);
  }
  [[nodiscard]] std::int32_t depths() const noexcept { return D_; }
  [[nodiscard]] std::int32_t ranks() const noexcept { return K_; }
  [[nodiscard]] std::span<const double> table() const noexcept { return p_; }
  //! Accepted children per unit of offered draft probability (1 when unknown).
  [[nodiscard]] double calibration() const noexcept { return q_sum_ > 0.5 ? acc_sum_ / q_sum_ : 1.0; }

 private:
  void refresh() {
    for (std::int32_t r = 0; r < K_; ++r) {
      double o = 0, a = 0;
      for (std::int32_t d = 0; d < D_; ++d)
        o += off_[static_cast<std::size_t>(d * K_ + r)], a += acc_[static_cast<std::size_t>(d * K_ + r)];
      const double prior = std::ldexp(prior_, -r);  // rank r: halved r times
      const double pooled = (a + w_ * prior) / (o + w_);
      for (std::int32_t d = 0; d < D_; ++d) {
        const auto i = static_cast<std::size_t>(d * K_ + r);
        p_[i] = (acc_[i] + w_ * pooled) / (off_[i] + w_);
      }
    }
    // At most one child is accepted, so the ranks' rates sum to <= 1. Lower
    // ranks are offered whenever higher ones are (their estimates rest on at
    // least as many rounds): each rank keeps its rate up to what the ranks
    // before it leave. Scaling all ranks alike instead let the prior of
    // never-offered ranks shrink a well-measured rank 0 (a chain accepting
    // 0.95 per level was estimated at 0.68 with four ranks planned).
    for (std::int32_t d = 0; d < D_; ++d) {
      double left = 1.0;
      for (std::int32_t r = 0; r < K_; ++r) {
        double& x = p_[static_cast<std::size_t>(d * K_ + r)];
        x = std::min(x, left);
        left -= x;
      }
    }
  }

  std::int32_t D_ = 1, K_ = 1;
  double w_ = 2.0, prior_ = 0.5, q_sum_ = 0.0, acc_sum_ = 0.0;
  std::vector<double> off_, acc_, p_;
};

//! A target pass-time curve handed in by the caller: seconds[i] for n[i]
//! nodes, linear between points and beyond the last two.
class cost_curve {
 public:
  status set(std::span<const double> n, std::span<const double> seconds) {
    if (n.size() != seconds.size()) return make_status(status_code::size_mismatch, "one time per node count");
    for (std::size_t i = 0; i < n.size(); ++i) {
      if (!(n[i] >= 1.0) || !std::isfinite(n[i]) || (i > 0 && !(n[i] > n[i - 1])))
        return make_status(status_code::invalid_argument, "node counts must increase from 1",
                           static_cast<std::int64_t>(i));
      if (!(seconds[i] > 0.0) || !std::isfinite(seconds[i]))
        return make_status(status_code::invalid_argument, "times must be finite and > 0", static_cast<std::int64_t>(i));
    }
    n_.assign(n.begin(), n.end());
    t_.assign(seconds.begin(), seconds.end());
    return status::success();
  }
  void clear() noexcept {
    n_.clear();
    t_.clear();
  }
  [[nodiscard]] bool empty() const noexcept { return n_.empty(); }
  [[nodiscard]] double at(std::int32_t nodes) const {
    const auto x = static_cast<double>(nodes);
    const std::size_t m = n_.size();
    if (m == 1) return t_[0];
    std::size_t hi = static_cast<std::size_t>(std::lower_bound(n_.begin(), n_.end(), x) - n_.begin());
    hi = std::clamp<std::size_t>(hi, 1, m - 1);
    const double w = (x - n_[hi - 1]) / (n_[hi] - n_[hi - 1]);
    return std::max(t_[hi - 1] + w * (t_[hi] - t_[hi - 1]), 0.0);
  }

 private:
  std::vector<double> n_, t_;
};

//! Keeps the candidates (sorted by decreasing value) that no earlier kept
//! one matches or beats in nodes, depth and expanded nodes (all three no
//! larger): it could never be chosen over that one, whose every cost is no
//! larger. Moves them to the front in order and returns how many.
//! Candidates need nodes in [0, max_nodes], depth in [0, max_depth].
//! `front` scratch: front[n][d] holds the fewest expanded nodes among the
//! kept candidates of at most n nodes and depth at most d (non-increasing in both),
//! so each test is one look-up and each kept candidate lowers only the
//! cells it improves (a scan of the kept ones was most of a valuation).
template <class Candidate>
std::size_t pareto_front(std::span<Candidate> c, std::int32_t max_nodes, std::int32_t max_depth,
                         std::vector<std::int32_t>& front) {
  const auto W = static_cast<std::size_t>(max_depth) + 1;
  const auto N = static_cast<std::size_t>(max_nodes);
  front.assign((N + 1) * W, std::numeric_limits<std::int32_t>::max());
  std::size_t kept = 0;
  for (std::size_t i = 0; i < c.size(); ++i) {
    const auto col = static_cast<std::size_t>(c[i].depth);
    const std::int32_t e = c[i].expanded;
    if (front[static_cast<std::size_t>(c[i].nodes) * W + col] <= e) continue;
    for (auto n = static_cast<std::size_t>(c[i].nodes); n <= N; ++n) {
      std::int32_t* row = &front[n * W];
      if (row[col] <= e) break;  // and every row below: non-increasing in n
      for (std::size_t d = col; d < W && row[d] > e; ++d) row[d] = e;
    }
    c[kept++] = c[i];
  }
  return kept;
}

//! Sequoia's dynamic program with acceptance depending on depth: for a depth
//! bound L and every node count n <= B, the tree of n nodes, depth <= L,
//! children taking ranks 0, 1, ... < K, that maximises the expected accepted
//! drafts sum_v prod_{path} p(depth, rank). c(k, n): best subtree of n nodes
//! rooted at absolute depth k; g_k(j, m): best use of m nodes by the children
//! of rank >= j of such a root. Also tracks each optimum's depth and number
//! of expanded nodes (what the drafter pays for). O(L K B^2) per bound.
class tree_program {
 public:
  template <class P>
  void solve(const P& p, std::int32_t L, std::int32_t K, std::int32_t B) {
    L_ = L;
    K_ = K;
    B_ = B;
    const double ninf = -std::numeric_limits<double>::infinity();
    const auto cells = static_cast<std::size_t>(L + 1) * static_cast<std::size_t>(B + 1);
    c_.assign(cells, ninf);
    e_.assign(cells, 0);
    d_.assign(cells, 0);
    choice_.assign(static_cast<std::size_t>(L + 1) * static_cast<std::size_t>(K + 1) * static_cast<std::size_t>(B), 0);
    const auto gcells = static_cast<std::size_t>(K + 1) * static_cast<std::size_t>(B);
    g_.assign(gcells, ninf);
    ge_.assign(gcells, 0);
    gd_.assign(gcells, 0);
    // The sizes that fit are contiguous: a subtree at depth k takes 1 ..
    // sub_max nodes, children of rank >= j share 0 .. rest_max[j]. The inner
    // loop runs over the a whose both halves fit, in the same order as a
    // scan of every a that skips the rest (same optimum, same ties): 2.4x
    // fewer steps over the depth bounds of a 32-node, depth-8 planner.
    rest_max_.assign(static_cast<std::size_t>(K) + 1, 0);
    std::int32_t sub_max = 1;  // at depth k + 1, starting from k + 1 = L (a lone node)
    for (std::int32_t k = L; k >= 0; --k) {
      c_[cell(k, 1)] = 0.0;  // expected accepted drafts below a lone node
      if (k == L) continue;
      rest_max_[static_cast<std::size_t>(K)] = 0;
      for (std::int32_t j = K; j >= 0; --j) {
        g_[gcell(j, 0)] = 0.0;
        if (j == K) continue;
        const double pj = p.at(k + 1, j);
        const std::int32_t rest_max = rest_max_[static_cast<std::size_t>(j) + 1];
        rest_max_[static_cast<std::size_t>(j)] = std::min(B - 1, sub_max + rest_max);
        for (std::int32_t m = 1; m < B; ++m) {
          double best = ninf;
          std::int32_t arg = 0;
          const std::int32_t hi = std::min(m, sub_max);
          for (std::int32_t a = std::max(1, m - rest_max); a <= hi; ++a) {
            const double v = pj * (1.0 + c_[cell(k + 1, a)]) + g_[gcell(j + 1, m - a)];
            if (v > best) best = v, arg = a;
          }
          const std::size_t gi = gcell(j, m);
          g_[gi] = best;
          choice_[ci(k, j, m)] = arg;
          if (arg > 0) {
            const std::size_t sub = cell(k + 1, arg), rest = gcell(j + 1, m - arg);
            ge_[gi] = e_[sub] + ge_[rest];
            gd_[gi] = std::max(d_[sub] + 1, gd_[rest]);
          }
        }
      }
      for (std::int32_t n = 2; n <= B; ++n) {
        const std::size_t gi = gcell(0, n - 1);
        c_[cell(k, n)] = g_[gi];
        e_[cell(k, n)] = 1 + ge_[gi];
        d_[cell(k, n)] = gd_[gi];
      }
      sub_max = 1 + rest_max_[0];  // for the level above: a root and its children's nodes
    }
  }

  //! Expected accepted drafts of the best n-node tree (-inf when none fits).
  [[nodiscard]] double value(std::int32_t n) const noexcept { return c_[cell(0, n)]; }
  //! Depth of the best n-node tree.
  [[nodiscard]] std::int32_t depth(std::int32_t n) const noexcept { return d_[cell(0, n)]; }
  //! Nodes with children in the best n-node tree.
  [[nodiscard]] std::int32_t expanded(std::int32_t n) const noexcept { return e_[cell(0, n)]; }

  //! Appends the best n-node tree's parent array (pre-order, children in rank order).
  void emit(std::int32_t n, std::vector<node_id>& out) const { emit(0, n, -1, out.size(), out); }

 private:
  void emit(std::int32_t k, std::int32_t n, node_id parent, std::size_t base, std::vector<node_id>& out) const {
    const auto self = static_cast<node_id>(out.size() - base);
    out.push_back(parent);
    std::int32_t m = n - 1;
    for (std::int32_t j = 0; m > 0; ++j) {
      const std::int32_t a = choice_[ci(k, j, m)];
      emit(k + 1, a, self, base, out);
      m -= a;
    }
  }
  [[nodiscard]] std::size_t ci(std::int32_t k, std::int32_t j, std::int32_t m) const noexcept {
    return (static_cast<std::size_t>(k) * static_cast<std::size_t>(K_ + 1) + static_cast<std::size_t>(j)) *
               static_cast<std::size_t>(B_) +
           static_cast<std::size_t>(m);
  }
  [[nodiscard]] std::size_t cell(std::int32_t k, std::int32_t n) const noexcept {
    return static_cast<std::size_t>(k) * static_cast<std::size_t>(B_ + 1) + static_cast<std::size_t>(n);
  }
  [[nodiscard]] std::size_t gcell(std::int32_t j, std::int32_t m) const noexcept {
    return static_cast<std::size_t>(j) * static_cast<std::size_t>(B_) + static_cast<std::size_t>(m);
  }

  std::int32_t L_ = 0, K_ = 0, B_ = 0;
  std::vector<double> c_, g_;
  std::vector<std::int32_t> choice_, e_, d_, ge_, gd_, rest_max_;
};

}  // namespace specdec::detail
