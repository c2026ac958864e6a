//! \file
//! Sequoia's dynamic program: the tree shape that maximizes the expected
//! number of tokens per round (accepted drafts + 1) under the positional
//! acceptance model p_0 >= ... (any vector works), for a node budget and a
//! depth bound. A node reached with probability f contributes f; its rank-r
//! child is reached with probability f * p_r. Children of a node take ranks
//! 0, 1, 2, ... (a node cannot skip a rank: its children are its top-k).
//!
//! Recurrences (n nodes including the subtree root, depth allowance d):
//!   c(d, 1) = 1;  c(0, n > 1) = -inf;
//!   c(d, n) = 1 + g_d(0, n - 1),
//!   g_d(j, 0) = 0,  g_d(K, m > 0) = -inf,
//!   g_d(j, m) = max_{1 <= a <= m} p_j c(d - 1, a) + g_d(j + 1, m - a).
//! O(D * K * B^2) time, O(D * K * B) memory (bounded by
//! sequoia_plan::max_table_entries). Planning code: allocates.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "specdec/core/error.hpp"
#include "specdec/core/status.hpp"
#include "specdec/tree/shape.hpp"

namespace specdec {

//! The solved program: best value for every exact node count and depth
//! allowance, and the choices to rebuild the trees.
class sequoia_plan {
 public:
  //! Largest DP table solve() accepts, (max_depth + 1)(ranks + 1)max_nodes
  //! entries (192 MiB of values and choices; the solve would take hours before that).
  static constexpr std::int64_t max_table_entries = std::int64_t{1} << 24;

  //! Solves for budgets up to `max_nodes` (>= 1) and depth <= max_depth (>= 0)
  //! with acceptance vector `p` (entries finite in [0, 1], at least one).
  //! Errors: invalid_argument, non_finite.
  status solve(std::span<const double> p, std::int32_t max_nodes, std::int32_t max_depth) {
    if (max_nodes < 1) return make_status(status_code::invalid_argument, "node budget must be >= 1");
    if (max_depth < 0) return make_status(status_code::invalid_argument, "depth bound must be >= 0");
    if (p.empty()) return make_status(status_code::empty_input, "acceptance vector is empty");
    // The tables hold (D + 1)(K + 1)B entries and the solve costs B times that:
    // refuse sizes that could only end in bad_alloc (or int overflow of B + 1).
    if (static_cast<double>(max_depth + 1.0) * static_cast<double>(p.size() + 1) * static_cast<double>(max_nodes) >
        static_cast<double>(max_table_entries))
      return make_status(status_code::invalid_argument, "plan too large: (depth + 1)(ranks + 1)budget > 2^24");
    for (std::size_t r = 0; r < p.size(); ++r) {
      if (!std::isfinite(p[r]))
        return make_status(status_code::non_finite, "acceptance probability is not finite",
                           static_cast<std::int64_t>(r));
      if (p[r] < 0.0 || p[r] > 1.0)
        return make_status(status_code::invalid_argument, "acceptance probability outside [0, 1]",
                           static_cast<std::int64_t>(r));
    }
    p_.assign(p.begin(), p.end());
    B_ = max_nodes;
    D_ = max_depth;
    K_ = static_cast<std::int32_t>(p.size());
    const double ninf = -std::numeric_limits<double>::infinity();
    c_.assign(static_cast<std::size_t>(D_ + 1) * static_cast<std::size_t>(B_ + 1), ninf);
    g_.assign(static_cast<std::size_t>(D_ + 1) * static_cast<std::size_t>(K_ + 1) * static_cast<std::size_t>(B_), ninf);
    choice_.assign(g_.size(), 0);
    for (std::int32_t d = 0; d <= D_; ++d) {
      c(d, 1) = 1.0;
      if (d == 0) continue;
      // g_d(j, m) for j = K..0, m = 0..B-1
      for (std::int32_t j = K_; j >= 0; --j) {
        g(d, j, 0) = 0.0;
        if (j == K_) continue;
        for (std::int32_t m = 1; m < B_; ++m) {
          double best = ninf;
          std::int32_t arg = 0;
          for (std::int32_t a = 1; a <= m; ++a) {
            const double ca = c(d - 1, a), rest = g(d, j + 1, m - a);
            if (ca == ninf || rest == ninf) continue;
            const double v = p_[static_cast<std::size_t>(j)] * ca + rest;
            if (v > best) best = v, arg = a;  // strict: ties keep the smallest first subtree
          }
          g(d, j, m) = best;
          choice_[gi(d, j, m)] = arg;
        }
      }
      for (std::int32_t n = 2; n <= B_; ++n) {
        const double v = g(d, 0, n - 1);
        c(d, n) = v == ninf ? ninf : 1.0 + v;
      }
    }
    return status::success();
  }

  //! Largest node budget the plan covers.
  std::int32_t max_nodes() const noexcept { return B_; }
  //! Largest depth the plan covers.
  std::int32_t max_depth() const noexcept { return D_; }

  //! Best expected tokens per round with exactly n nodes (-inf if no tree
  //! with n nodes fits the depth bound and the rank count). Precondition: solved, 1 <= n <= max_nodes.
  double value_exact(std::int32_t n) const noexcept {
    return n >= 1 && n <= B_ ? cc(D_, n) : -std::numeric_limits<double>::infinity();
  }

  //! Best over at most n nodes, and the node count achieving it (smallest on ties).
  double value(std::int32_t n, std::int32_t* argmax = nullptr) const noexcept {
    double best = -std::numeric_limits<double>::infinity();
    std::int32_t arg = 0;
    for (std::int32_t m = 1; m <= n && m <= B_; ++m)
      if (cc(D_, m) > best) best = cc(D_, m), arg = m;
    if (argmax != nullptr) *argmax = arg;
    return best;
  }

  //! The optimal tree with exactly n nodes (DFS pre-order ids, children in
  //! rank order). Errors: invalid_argument (n out of range or infeasible).
  status tree(std::int32_t n, tree_shape& out) const {
    if (n < 1 || n > B_ || cc(D_, n) == -std::numeric_limits<double>::infinity())
      return make_status(status_code::invalid_argument, "no tree with this node count fits the bounds");
    out.parent.clear();
    out.rank.clear();
    emit(D_, n, -1, -1, out);
    return status::success();
  }

 private:
  void emit(std::int32_t d, std::int32_t n, node_id parent, std::int32_t rank, tree_shape& out) const {
    const auto self = static_cast<node_id>(out.parent.size());
    out.parent.push_back(parent);
    out.rank.push_back(rank);
    std::int32_t m = n - 1;
    for (std::int32_t j = 0; m > 0; ++j) {
      const std::int32_t a = choice_[gi(d, j, m)];
      emit(d - 1, a, self, j, out);
      m -= a;
    }
  }
  std::size_t ci(std::int32_t d, std::int32_t n) const noexcept {
    return static_cast<std::size_t>(d) * static_cast<std::size_t>(B_ + 1) + static_cast<std::size_t>(n);
  }
  std::size_t gi(std::int32_t d, std::int32_t j, std::int32_t m) const noexcept {
    return (static_cast<std::size_t>(d) * static_cast<std::size_t>(K_ + 1) + static_cast<std::size_t>(j)) *
               static_cast<std::size_t>(B_) +
           static_cast<std::size_t>(m);
  }
  double& c(std::int32_t d, std::int32_t n) noexcept { return c_[ci(d, n)]; }
  double cc(std::int32_t d, std::int32_t n) const noexcept { return c_[ci(d, n)]; }
  double& g(std::int32_t d, std::int32_t j, std::int32_t m) noexcept { return g_[gi(d, j, m)]; }

  std::vector<double> p_;
  std::int32_t B_ = 0, D_ = 0, K_ = 0;
  std::vector<double> c_, g_;
  std::vector<std::int32_t> choice_;
};

//! Convenience: the best tree with at most `budget` nodes and depth <=
//! `max_depth` for acceptance vector `p`; writes its expected tokens per
//! round (accepted drafts + 1) to `value`. Throws specdec::error on bad input.
inline tree_shape sequoia_tree(std::span<const double> p, std::int32_t budget, std::int32_t max_depth,
                               double* value = nullptr) {
  sequoia_plan plan;
  throw_if_error(plan.solve(p, budget, max_depth));
  std::int32_t n = 0;
  const double v = plan.value(budget, &n);
  tree_shape s;
  throw_if_error(plan.tree(n, s));
  if (value != nullptr) *value = v;
  return s;
}

}  // namespace specdec
