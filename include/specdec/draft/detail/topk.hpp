//! \file
//! Internal: one-pass validation and top-k selection over a probability or
//! logit row, with the library-wide tie rule (value descending, then token
//! id ascending), so every builder and the CUDA twins agree on ties.
#pragma once

#include <cmath>
#include <cstdint>
#include <span>

#include "specdec/core/status.hpp"
#include "specdec/tree/token_tree.hpp"

namespace specdec::detail {

//! log(p) as float, -inf for p == 0.
inline float log_prob(float p) noexcept { return p > 0.0f ? std::log(p) : -INFINITY; }

//! Offers (v, t) to a running top-k list (val descending, n <= k entries).
//! Callers offer tokens in increasing id, so the strict `>` keeps the lower
//! id first on ties: the library-wide tie rule. O(k) worst case.
template <class V>
inline void topk_offer(V v, token_id t, token_id* tok, V* val, std::int32_t& n, std::int32_t k) noexcept {
  if (n == k && !(v > val[n - 1])) return;
  std::int32_t j = n < k ? n++ : k - 1;
  while (j > 0 && v > val[j - 1]) {
    val[j] = val[j - 1];
    tok[j] = tok[j - 1];
    --j;
  }
  val[j] = v;
  tok[j] = t;
}

//! Validates a probability row (finite, >= 0, positive mass) and writes the
//! `k` most probable tokens with positive probability into tok/val
//! (descending, ties by lower token id). Returns the number written in
//! `count` (< k when fewer tokens have positive probability). O(V * k) worst
//! case, O(V) typical: a value is compared with the current k-th best first.
inline status topk_probabilities(std::span<const float> row, std::int32_t k, token_id* tok, float* val,
                                 std::int32_t& count, double* mass = nullptr) noexcept {
  count = 0;
  if (row.empty()) return make_status(status_code::empty_input, "probability row is empty");
  if (k <= 0) return make_status(status_code::invalid_argument, "k must be positive");
  if (static_cast<std::size_t>(k) > row.size())
    return make_status(status_code::invalid_argument, "k exceeds the vocabulary size");
  double sum = 0.0;
  std::int32_t n = 0;
  const auto V = static_cast<std::int64_t>(row.size());
  const float* r = row.data();
  // Blocks of 16: a branch-free pass (validity, block max, block sum) that
  // the compiler vectorizes, then the scalar insertion only for blocks that
  // can change the top-k. Errors are re-found element by element, in order.
  constexpr std::int64_t kBlock = 16;
  float lane_sum[kBlock] = {};  // per-lane partial sums: lets the compiler vectorize without reassociating
  for (std::int64_t b = 0; b < V; b += kBlock) {
    const std::int64_t e = b + kBlock < V ? b + kBlock : V;
    bool bad = false;
    float bmax = 0.0f;
    if (e - b == kBlock) {
      float lane_max[kBlock];
      int lane_bad = 0;
      // Keep this loop rolled for the vectorizer: GCC at -O3 unrolls it
      // completely first and its SLP code then runs 2-3x slower than -O2's.
#if defined(__GNUC__) && !defined(__clang__) && !defined(__CUDACC__)
#pragma GCC unroll 1
#endif
      for (std::int64_t j = 0; j < kBlock; ++j) {
        const float v = r[b + j];
        lane_bad |= static_cast<int>(!(v >= 0.0f)) | static_cast<int>(v == INFINITY);  // NaN fails v >= 0
        lane_max[j] = v;
        lane_sum[j] += v;
      }
      for (std::int64_t j = 0; j < kBlock; ++j) bmax = lane_max[j] > bmax ? lane_max[j] : bmax;
      bad = lane_bad != 0;
    } else {
      for (std::int64_t t = b; t < e; ++t) {
        const float v = r[t];
        bad |= !(v >= 0.0f) || v == INFINITY;
        bmax = v > bmax ? v : bmax;
        lane_sum[t - b] += v;
      }
    }
    if (bad) {
      for (std::int64_t t = b; t < e; ++t) {
        if (!std::isfinite(r[t])) return make_status(status_code::non_finite, "probability row has NaN or inf", t);
        if (r[t] < 0.0f)
          return make_status(status_code::negative_probability, "probability row has a negative entry", t);
      }
    }
    if (!(bmax > 0.0f) || (n == k && !(bmax > val[n - 1]))) continue;
    for (std::int64_t t = b; t < e; ++t)
      if (r[t] > 0.0f) topk_offer(r[t], static_cast<token_id>(t), tok, val, n, k);
  }
  for (const float x : lane_sum) sum += static_cast<double>(x);
  if (!(sum > 0.0)) return make_status(status_code::zero_mass, "probability row has zero mass");
  count = n;
  if (mass != nullptr) *mass = sum;
  return status::success();
}

//! Validates a logit row (finite) and writes the top-k tokens by logit
//! (ties by lower id) plus the row's max and log-sum-exp, so probabilities
//! are exp(l - lse). Two passes over the row. -inf logits are allowed (a
//! masked token), +inf and NaN are not.
inline status topk_logits(std::span<const float> row, std::span<const float> bias, std::int32_t k, token_id* tok,
                          float* val, double& lse) noexcept {
  if (row.empty()) return make_status(status_code::empty_input, "logit row is empty");
  if (k <= 0) return make_status(status_code::invalid_argument, "k must be positive");
  if (static_cast<std::size_t>(k) > row.size())
    return make_status(status_code::invalid_argument, "k exceeds the vocabulary size");
  if (!bias.empty() && bias.size() != row.size())
    return make_status(status_code::size_mismatch, "bias row must match the logit row");
  const auto V = static_cast<std::int64_t>(row.size());
  std::int32_t n = 0;
  float mx = -INFINITY;
  for (std::int64_t t = 0; t < V; ++t) {
    const float v = bias.empty() ? row[static_cast<std::size_t>(t)]
                                 : row[static_cast<std::size_t>(t)] + bias[static_cast<std::size_t>(t)];
    if (std::isnan(v) || v == INFINITY) return make_status(status_code::non_finite, "logit row has NaN or +inf", t);
    mx = v > mx ? v : mx;
    topk_offer(v, static_cast<token_id>(t), tok, val, n, k);
  }
  if (mx == -INFINITY) return make_status(status_code::zero_mass, "every logit is -inf");
  double s = 0.0;
  for (std::int64_t t = 0; t < V; ++t) {
    const float v = bias.empty() ? row[static_cast<std::size_t>(t)]
                                 : row[static_cast<std::size_t>(t)] + bias[static_cast<std::size_t>(t)];
    s += static_cast<double>(std::exp(v - mx));  // float exp: each term <= 1, summed in double
  }
  lse = static_cast<double>(mx) + std::log(s);
  return status::success();
}

}  // namespace specdec::detail
