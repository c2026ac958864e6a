//! \file
//! STree's runtime-versus-acceptance analysis ("STree: Speculative Tree Decoding for Hybrid State-Space Models",
//! section 4). A verification call on N tree tokens costs t(N): linear t = kN + C for SSMs (C = weight loading, kN =
//! inputs and compute), quadratic t = aN^2 + bN + c for hybrids with attention layers. Wall time per token is t(N) /
//! tau(N) (tau = tokens produced per round), so moving from (N1, tau1) to (N2, tau2) pays off iff tau2 / tau1 >= t2(N2)
//! / t1(N1) (eq. 7-8). The fits are ordinary least squares on measured (N, t) pairs.
#pragma once

#include <cmath>
#include <concepts>
#include <cstdint>
#include <span>

#include "specdec/core/status.hpp"

namespace specdec {

//! t(N) = k N + C.
struct linear_cost {
  double k = 0.0;  //!< cost per tree node
  double C = 0.0;  //!< fixed cost of a forward pass
  //! Cost of a forward pass over `n` tree nodes.
  constexpr double operator()(double n) const noexcept { return k * n + C; }
};

//! t(N) = a N^2 + b N + c.
struct quadratic_cost {
  double a = 0.0;  //!< quadratic coefficient
  double b = 0.0;  //!< linear coefficient
  double c = 0.0;  //!< constant term
  //! Cost of a forward pass over `n` tree nodes.
  constexpr double operator()(double n) const noexcept { return (a * n + b) * n + c; }
};

//! Anything mapping a token count to a runtime.
template <class T>
concept cost_model = requires(const T& t, double n) {
  { t(n) } -> std::convertible_to<double>;
};

namespace detail {
inline status check_pairs(std::span<const double> n, std::span<const double> t, std::size_t need_distinct) noexcept {
  if (n.size() != t.size()) return make_status(status_code::size_mismatch, "need one runtime per token count");
  for (std::size_t i = 0; i < n.size(); ++i)
    if (!std::isfinite(n[i]) || !std::isfinite(t[i]))
      return make_status(status_code::non_finite, "measurement is not finite", static_cast<std::int64_t>(i));
  std::size_t distinct = 0;
  for (std::size_t i = 0; i < n.size() && distinct < need_distinct; ++i) {
    bool seen = false;
    for (std::size_t j = 0; j < i && !seen; ++j) seen = n[j] == n[i];
    distinct += seen ? 0 : 1;
  }
  if (distinct < need_distinct)
    return make_status(status_code::invalid_argument, "too few distinct token counts to fit");
  return status::success();
}
}  // namespace detail

//! Least-squares fit of t = kN + C (needs >= 2 distinct N). Centered sums in
//! long double for conditioning. Errors: size_mismatch, non_finite,
//! invalid_argument. O(M).
inline status fit_linear_cost(std::span<const double> n, std::span<const double> t, linear_cost& out) noexcept {
  SPECDEC_TRY(detail::check_pairs(n, t, 2));
  long double mn = 0, mt = 0;
  for (std::size_t i = 0; i < n.size(); ++i) mn += n[i], mt += t[i];
  mn /= static_cast<long double>(n.size());
  mt /= static_cast<long double>(n.size());
  long double sxx = 0, sxy = 0;
  for (std::size_t i = 0; i < n.size(); ++i) {
    sxx += (n[i] - mn) * (n[i] - mn);
    sxy += (n[i] - mn) * (t[i] - mt);
  }
  out.k = static_cast<double>(sxy / sxx);
  out.C = static_cast<double>(mt - sxy / sxx * mn);
  return status::success();
}

//! Least-squares fit of t = aN^2 + bN + c (needs >= 3 distinct N): normal
//! equations in x = (N - mean) / scale, solved by Gaussian elimination with
//! partial pivoting in long double, then mapped back. O(M).
inline status fit_quadratic_cost(std::span<const double> n, std::span<const double> t, quadratic_cost& out) noexcept {
  SPECDEC_TRY(detail::check_pairs(n, t, 3));
  long double m = 0, s = 0;
  for (double v : n) m += v;
  m /= static_cast<long double>(n.size());
  for (double v : n) s = std::fmax(static_cast<double>(s), std::fabs(v - static_cast<double>(m)));
  long double A[3][4] = {};
  for (std::size_t i = 0; i < n.size(); ++i) {
    const long double x = (n[i] - m) / s, pw[3] = {x * x, x, 1.0L};
    for (int r = 0; r < 3; ++r) {
      for (int c = 0; c < 3; ++c) A[r][c] += pw[r] * pw[c];
      A[r][3] += pw[r] * t[i];
    }
  }
  for (int col = 0; col < 3; ++col) {
    int piv = col;
    for (int r = col + 1; r < 3; ++r)
      if (std::fabs(static_cast<double>(A[r][col])) > std::fabs(static_cast<double>(A[piv][col]))) piv = r;
    for (int c = 0; c < 4; ++c) std::swap(A[col][c], A[piv][c]);
    if (A[col][col] == 0) return make_status(status_code::invalid_argument, "singular fit");
    for (int r = 0; r < 3; ++r) {
      if (r == col) continue;
      const long double f = A[r][col] / A[col][col];
      for (int c = col; c < 4; ++c) A[r][c] -= f * A[col][c];
    }
  }
  const long double a2 = A[0][3] / A[0][0], b1 = A[1][3] / A[1][1], c0 = A[2][3] / A[2][2];
  // t = a2 ((N-m)/s)^2 + b1 (N-m)/s + c0, expanded in N.
  const long double a = a2 / (s * s), b = b1 / s - 2 * a2 * m / (s * s), c = a2 * m * m / (s * s) - b1 * m / s + c0;
  out = {static_cast<double>(a), static_cast<double>(b), static_cast<double>(c)};
  return status::success();
}

//! STree eq. 7/8: the acceptance-length ratio tau2 / tau1 that a tree of N2
//! tokens under cost t2 needs to beat N1 tokens under cost t1:
//! t2(N2) / t1(N1). Returns +inf when t1(N1) <= 0.
template <class T1, class T2>
requires cost_model<T1> && cost_model<T2>
double required_acceptance_ratio(const T1& t1, double n1, const T2& t2, double n2) noexcept {
  const double base = t1(n1);
  return base > 0.0 ? t2(n2) / base : INFINITY;
}

//! The tree size minimizing time per token: tau[i] is the expected tokens
//! per round (>= 1 in practice, e.g. sequoia_plan::value) of the best tree
//! with N = i + 1 tokens; time per token = (t(N) + draft_time) / tau. Writes
//! the best N (smallest on ties) and its time per token. Errors: empty_input,
//! non_finite, invalid_argument (every tau <= 0). O(|tau|).
template <class T>
requires cost_model<T> status best_tree_size(const T& t, std::span<const double> tau, double draft_time,
                                             std::int32_t& best_n, double& time_per_token)
noexcept {
  if (tau.empty()) return make_status(status_code::empty_input, "no candidate sizes");
  if (!std::isfinite(draft_time)) return make_status(status_code::non_finite, "draft time is not finite");
  double best = INFINITY;
  std::int32_t arg = 0;
  for (std::size_t i = 0; i < tau.size(); ++i) {
    if (std::isnan(tau[i])) return make_status(status_code::non_finite, "tau is NaN", static_cast<std::int64_t>(i));
    if (!(tau[i] > 0.0) || tau[i] == INFINITY) continue;  // -inf marks an infeasible size
    const double v = (t(static_cast<double>(i + 1)) + draft_time) / tau[i];
    if (v < best) best = v, arg = static_cast<std::int32_t>(i + 1);
  }
  if (arg == 0) return make_status(status_code::invalid_argument, "no size with positive tau");
  best_n = arg;
  time_per_token = best;
  return status::success();
}

}  // namespace specdec
