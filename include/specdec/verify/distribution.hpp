//! \file
//! Target/draft distributions for verification: logits to probabilities
//! (temperature, top-k, top-p, min-p) in the specdec tie order. Row
//! validation, argmax and inverse-CDF sampling live in sample/row.hpp
//! (included here).
//!
//! Numerics. Sums are accumulated in double; outputs are float.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <type_traits>

#include "specdec/core/config.hpp"
#include "specdec/core/detail/simd.hpp"
#include "specdec/core/status.hpp"
#include "specdec/core/view.hpp"
#include "specdec/sample/row.hpp"
#include "specdec/sample/sampling_params.hpp"
#include "specdec/tree/token_tree.hpp"

namespace specdec {

//! One (value, token) pair of the filtering workspace.
struct prob_candidate {
  float value;  //!< unnormalized weight exp((logit - max) / temperature), in (0, 1]
  token_id id;  //!< the token
};

namespace detail {

struct candidate_rank {
  constexpr bool operator()(const prob_candidate& a, const prob_candidate& b) const noexcept {
    return ranks_before(a.value, a.id, b.value, b.id);
  }
};

}  // namespace detail

//! True when `params` needs the candidate workspace for a row of `vocab`
//! tokens (top-k, top-p or min-p active and not greedy).
SPECDEC_HD constexpr bool needs_filter_workspace(const sampling_params& params, std::int64_t vocab) noexcept {
  if (params.is_greedy()) return false;
  return (params.top_k > 0 && params.top_k < vocab) || params.top_p < 1.0f || params.min_p > 0.0f;
}

//! Bytes of workspace `logits_to_probs` needs for rows of `vocab` tokens
//! under `params`: 0 for plain softmax or greedy, otherwise one
//! `prob_candidate` (8 bytes) per token. The same buffer serves every row
//! of a batched call.
SPECDEC_HD constexpr std::size_t logits_to_probs_workspace_size(std::int64_t vocab,
                                                                const sampling_params& params) noexcept {
  if (vocab <= 0 || !needs_filter_workspace(params, vocab)) return 0;
  return static_cast<std::size_t>(vocab) * sizeof(prob_candidate);
}

//! Workspace for a batched call where rows may use different params.
inline std::size_t logits_to_probs_workspace_size(std::int64_t vocab,
                                                  std::span<const sampling_params> params) noexcept {
  std::size_t w = 0;
  for (const auto& p : params) w = std::max(w, logits_to_probs_workspace_size(vocab, p));
  return w;
}

namespace detail {

//! exp(z) for a softmax weight, z <= 0: the vector exp of core/detail/
//! simd.hpp on one lane (a few ulp from std::exp; 0 below -87.3, i.e. for
//! weights under 2^-126, and for z = -inf).
inline float weight_exp(float z) noexcept { return vec_ops<float, false>::exp(z); }

//! Sum of softmax weights in a fixed order whatever the row's layout: four
//! partial sums in double (entry i goes to sum i mod 4; independent chains,
//! so the adds pipeline), then (s0 + s1) + (s2 + s3).
struct weight_sum {
  double part[4] = {0.0, 0.0, 0.0, 0.0};
  void add(std::int64_t i, float e) noexcept { part[i & 3] += static_cast<double>(e); }
  double total() const noexcept { return (part[0] + part[1]) + (part[2] + part[3]); }
};

//! e[i] = weight_exp((x[i] - m) * inv_t) for a contiguous float row, on
//! vectors; returns their weight_sum total. x may hold -inf (weight 0);
//! x <= m everywhere.
inline double softmax_weights(const float* x, float* e, std::int64_t n, float m, float inv_t) noexcept {
  using S = vec_ops<float>;
  const S::vec mv = S::splat(m), tv = S::splat(inv_t);
  std::int64_t i = 0;
  for (; i + S::lanes <= n; i += S::lanes) S::store(e + i, S::exp((S::load(x + i) - mv) * tv));
  for (; i < n; ++i) e[i] = weight_exp((x[i] - m) * inv_t);
  weight_sum sum;
  for (i = 0; i + 4 <= n; i += 4)
    for (int l = 0; l < 4; ++l) sum.part[l] += static_cast<double>(e[i + l]);
  for (; i < n; ++i) sum.add(i, e[i]);
  return sum.total();
}

//! Pass 1 of logits_to_probs_row on a contiguous float row: the largest
//! logit `m` and its lowest index `arg`; false when an entry is NaN or +inf
//! or every entry is -inf (the scalar pass then gives the status). The max
//! is taken over integer keys in the float order (-0 below +0), which
//! vectorise where a float max does not (its NaN rules); `arg` is the first
//! entry equal to it as a float, the scalar pass's rule (-0 == +0).
inline bool row_max(const float* x, std::int64_t n, float& m, token_id& arg) noexcept {
  std::int32_t best = INT32_MIN;
  std::uint32_t bad = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    std::uint32_t b = 0;
    std::memcpy(&b, x + i, sizeof b);
    bad |= static_cast<std::uint32_t>((b & 0x7fffffffu) > 0x7f800000u) | static_cast<std::uint32_t>(b == 0x7f800000u);
    const std::uint32_t flip = static_cast<std::uint32_t>(static_cast<std::int32_t>(b) >> 31) & 0x7fffffffu;
    const auto k = static_cast<std::int32_t>(b ^ flip);
    best = k > best ? k : best;
  }
  if (bad != 0) return false;
  const auto bits = static_cast<std::uint32_t>(best < 0 ? best ^ 0x7fffffff : best);
  float mv = 0.0f;
  std::memcpy(&mv, &bits, sizeof mv);
  if (mv == -INFINITY) return false;
  // The first entry equal to it: a branch-free test per block of 64, then the block in order.
  constexpr std::int64_t block = 64;
  for (std::int64_t b = 0; b < n; b += block) {
    const std::int64_t e = b + block < n ? b + block : n;
    int hit = 0;
    for (std::int64_t i = b; i < e; ++i) hit |= static_cast<int>(x[i] == mv);
    if (hit == 0) continue;
    for (std::int64_t i = b; i < e; ++i)
      if (x[i] == mv) {
        m = x[i];
        arg = static_cast<token_id>(i);
        return true;
      }
  }
  return false;  // not reached: the max is an entry
}

}  // namespace detail

//! Converts one row of logits to probabilities under `params`, writing
//! `probs` (same extent). Logits may contain -inf (a masked token,
//! probability 0); NaN or +inf gives non_finite, an all -inf row gives
//! zero_mass, and on any error `probs` is untouched.
//!
//! Passes: (1) one read of the logits validates them and finds the max;
//! (2) without filters, one more read writes the weights exp((x - max) / T)
//! (one float exp per entry, summed in double) and (3) a pass over `probs`
//! normalises them. With filters, pass 2 writes zeros and collects the min-p
//! survivors into `workspace` (size logits_to_probs_workspace_size); top-k
//! selects in O(C) (nth element), top-p sorts only the surviving candidates
//! (O(C log C), C = top_k when top-k is active), and the kept tokens are
//! scattered back. Greedy (temperature 0) is pass 1 plus a one-hot write.
//! Deterministic; no allocation. Returns buffer_too_small if the workspace is short.
template <score_value T>
status logits_to_probs_row(view1d<const T> logits, view1d<float> probs, const sampling_params& params,
                           std::span<std::byte> workspace) noexcept {
  SPECDEC_TRY(validate_sampling_params(params));
  const std::int64_t V = logits.extent[0];
  if (V <= 0) return make_status(status_code::empty_input, "logits row is empty");
  if (probs.extent[0] != V) return make_status(status_code::size_mismatch, "probs row must have the logits' extent");
  if (V > INT32_MAX) return make_status(status_code::invalid_argument, "vocabulary too large for 32-bit token ids");
  const bool filtered = needs_filter_workspace(params, V);
  if (filtered && workspace.size() < logits_to_probs_workspace_size(V, params))
    return make_status(status_code::buffer_too_small, "workspace smaller than logits_to_probs_workspace_size");

  // Pass 1: validate, max (lowest id on ties).
  const bool greedy = params.is_greedy();
  const float inv_t = greedy ? 1.0f : 1.0f / params.temperature;
  // A denormal temperature overflows 1/T, and 0 * inf would make every probability NaN.
  if (!(inv_t < INFINITY))
    return make_status(status_code::invalid_argument, "temperature too small (1/T overflows); use 0 for greedy");
  float m = -INFINITY;
  token_id arg = -1;
  bool found = false;
  if constexpr (std::is_same_v<T, float>)
    if (logits.stride[0] == 1) found = detail::row_max(logits.data, V, m, arg);
  if (!found) {
    m = -INFINITY;
    arg = -1;
    for (std::int64_t i = 0; i < V; ++i) {
      const float x = detail::to_float(logits(i));
      if (x != x || x == INFINITY) return make_status(status_code::non_finite, "logit is NaN or +inf", i);
      if (x > m) {
        m = x;
        arg = static_cast<token_id>(i);
      }
    }
    if (arg < 0) return make_status(status_code::zero_mass, "every logit is -inf");
  }

  if (greedy) {
    for (std::int64_t i = 0; i < V; ++i) probs(i) = 0.0f;
    probs(arg) = 1.0f;
    return status::success();
  }
  if (!filtered) {
    // Pass 2: weights exp((x - m) / T) in [0, 1] (one exp per entry) and
    // their sum in double (detail::weight_sum's order); pass 3 normalises.
    // Contiguous float rows run on vectors, other rows one entry at a time,
    // with the same exp and the same sum: the same probabilities either way.
    double s = 0.0;
    bool done = false;
    if constexpr (std::is_same_v<T, float>) {
      if (logits.stride[0] == 1 && probs.stride[0] == 1) {
        s = detail::softmax_weights(logits.data, probs.data, V, m, inv_t);
        done = true;
      }
    }
    if (!done) {
      detail::weight_sum sum;
      for (std::int64_t i = 0; i < V; ++i) {
        const float e = detail::weight_exp((detail::to_float(logits(i)) - m) * inv_t);
        probs(i) = e;
        sum.add(i, e);
      }
      s = sum.total();
    }
    const double inv_s = 1.0 / s;
    if (probs.stride[0] == 1) {  // contiguous: a loop the compiler vectorises (the same products)
      float* p = probs.data;
      for (std::int64_t i = 0; i < V; ++i) p[i] = static_cast<float>(static_cast<double>(p[i]) * inv_s);
    } else {
      for (std::int64_t i = 0; i < V; ++i) probs(i) = static_cast<float>(static_cast<double>(probs(i)) * inv_s);
    }
    return status::success();
  }

  // Pass 2 (filtered): unnormalized weights e = exp((x - m) / T) in (0, 1];
  // min-p keeps e >= min_p (the max has e = 1, so this is p >= min_p * p_max).
  auto* cand = reinterpret_cast<prob_candidate*>(workspace.data());
  std::int64_t c = 0;
  for (std::int64_t i = 0; i < V; ++i) {
    probs(i) = 0.0f;
    const float x = detail::to_float(logits(i));
    if (x == -INFINITY) continue;
    const float e = detail::weight_exp((x - m) * inv_t);
    if (e > 0.0f && e >= params.min_p) cand[c++] = prob_candidate{e, static_cast<token_id>(i)};
  }
  // The argmax always survives (e == 1 >= min_p); c >= 1.
  const detail::candidate_rank rank{};
  if (params.top_k > 0 && params.top_k < c) {
    std::nth_element(cand, cand + params.top_k, cand + c, rank);
    c = params.top_k;
  }
  if (params.top_p < 1.0f) {
    std::sort(cand, cand + c, rank);
    double mass = 0.0;
    for (std::int64_t j = 0; j < c; ++j) mass += static_cast<double>(cand[j].value);
    const double goal = static_cast<double>(params.top_p) * mass;
    double cum = 0.0;
    std::int64_t keep = 0;
    while (keep < c && (keep == 0 || cum < goal)) cum += static_cast<double>(cand[keep++].value);
    c = keep;
  }
  double kept = 0.0;
  for (std::int64_t j = 0; j < c; ++j) kept += static_cast<double>(cand[j].value);
  const double inv_k = 1.0 / kept;
  for (std::int64_t j = 0; j < c; ++j)
    probs(cand[j].id) = static_cast<float>(static_cast<double>(cand[j].value) * inv_k);
  return status::success();
}

//! Batched logits_to_probs_row: row r of `logits` (R x V, any strides) to
//! row r of `probs` (R x V). `params` has one entry (shared) or R entries.
//! Rows are processed in order; on an error the status index is the row
//! (rows before it are written, the failing row and those after are not).
//! Workspace: logits_to_probs_workspace_size(V, params) bytes, reused by
//! every row. Deterministic; no allocation.
template <score_value T>
status logits_to_probs(view2d<const T> logits, view2d<float> probs, std::span<const sampling_params> params,
                       std::span<std::byte> workspace) noexcept {
  const std::int64_t R = logits.extent[0];
  if (probs.extent[0] != R || probs.extent[1] != logits.extent[1])
    return make_status(status_code::size_mismatch, "probs must have the logits' extents");
  if (params.size() != 1 && params.size() != static_cast<std::size_t>(R))
    return make_status(status_code::size_mismatch, "params must have 1 or R entries");
  for (std::int64_t r = 0; r < R; ++r) {
    const sampling_params& pr = params[params.size() == 1 ? 0 : static_cast<std::size_t>(r)];
    const status st = logits_to_probs_row(logits.slice(r), probs.slice(r), pr, workspace);
    if (!st.ok()) return make_status(st.code(), st.message(), r);
  }
  return status::success();
}

}  // namespace specdec
