//! \file
//! SpecMemo's memory model ("SpecMemo: Speculative Decoding is in Your Pocket", section 3.1, eq. 1-6) and the
//! budgeting it drives: the largest tree, head count and KV allocation that
//! fit a device byte budget for a number of chat turns.
//!
//!   KV(x)        = 2 * h * b * k * x * d * p_kv          (x = tokens kept)
//!   buffers(N,S,l) = (b N w + b S l w + b S l^2 w) * p_buf (eq. 3)
//!   heads(l)     = head_bytes * l                         (eq. 4)
//!   model        = params * p_model                       (eq. 5)
//!   total        = model + heads + KV(n m) + buffers      (eq. 6)
//! with h layers, b batch, k KV heads, d head dim, w vocabulary, N tree
//! nodes, S leaves (candidate sequences), l heads = tree levels, n turns of
//! at most m tokens. Eq. 1 omits d from the product although it defines it;
//! the KV cache stores d values per head, so it is included here.
//! All byte counts are doubles (precisions like 0.5 byte for FP4).
#pragma once

#include <cmath>
#include <cstdint>

#include "specdec/core/status.hpp"

namespace specdec {

//! Model and deployment constants of the memory model.
struct memory_config {
  std::int64_t layers = 32;                //!< h
  std::int64_t batch = 1;                  //!< b
  std::int64_t kv_heads = 32;              //!< k
  std::int64_t head_dim = 128;             //!< d
  double kv_bytes_per_element = 2.0;       //!< p (KV precision)
  std::int64_t tokens_per_turn = 128;      //!< m (max tokens of one query + answer)
  std::int64_t vocab_size = 32000;         //!< w
  double buffer_bytes_per_element = 2.0;   //!< precision of the sampling buffers
  double head_bytes = 0.6e9;               //!< one decoding head (the seed: 0.6 GB per Medusa head)
  double model_parameters = 7e9;           //!< B
  double model_bytes_per_parameter = 2.0;  //!< precision of the model weights

  //! invalid_argument when any count is < 0, or a precision or size is negative or not finite.
  status validate() const noexcept {
    if (layers < 0 || batch < 0 || kv_heads < 0 || head_dim < 0 || tokens_per_turn < 0 || vocab_size < 0)
      return make_status(status_code::invalid_argument, "memory_config counts must be >= 0");
    const double f[] = {kv_bytes_per_element, buffer_bytes_per_element, head_bytes, model_parameters,
                        model_bytes_per_parameter};
    for (double x : f)
      if (!std::isfinite(x) || x < 0.0)
        return make_status(status_code::invalid_argument, "memory_config sizes must be finite and >= 0");
    return status::success();
  }
};

//! Eq. 1: KV cache bytes for `tokens` cached tokens (per sequence in the batch).
constexpr double kv_cache_bytes(const memory_config& c, double tokens) noexcept {
  return 2.0 * static_cast<double>(c.layers) * static_cast<double>(c.batch) * static_cast<double>(c.kv_heads) * tokens *
         static_cast<double>(c.head_dim) * c.kv_bytes_per_element;
}

//! Eq. 3: sampling/verification buffers of a tree with N nodes, S leaves and l levels.
constexpr double buffer_bytes(const memory_config& c, double nodes, double leaves, double levels) noexcept {
  const double bw = static_cast<double>(c.batch) * static_cast<double>(c.vocab_size);
  return (bw * nodes + bw * leaves * levels + bw * leaves * levels * levels) * c.buffer_bytes_per_element;
}

//! Eq. 4: decoding heads.
constexpr double heads_bytes(const memory_config& c, double heads) noexcept { return c.head_bytes * heads; }

//! Eq. 5: base model weights.
constexpr double model_bytes(const memory_config& c) noexcept {
  return c.model_parameters * c.model_bytes_per_parameter;
}

//! Eq. 6: everything for `turns` turns with an (N, S) tree and l heads.
constexpr double total_bytes(const memory_config& c, double turns, double nodes, double leaves, double heads) noexcept {
  return model_bytes(c) + heads_bytes(c, heads) + kv_cache_bytes(c, turns * static_cast<double>(c.tokens_per_turn)) +
         buffer_bytes(c, nodes, leaves, heads);
}

//! Leaves assumed for an N-node tree with l levels: ceil(leaf_fraction *
//! (N - 1)), clamped to the feasible range [ceil((N - 1) / l), N - 1]
//! (1 for N == 1). SpecMemo's custom 44-node mask has 37 leaves (0.86).
constexpr std::int64_t assumed_leaves(std::int64_t nodes, std::int64_t levels, double leaf_fraction) noexcept {
  if (nodes <= 1) return 1;
  const std::int64_t lo = levels > 0 ? (nodes - 1 + levels - 1) / levels : nodes - 1;
  auto s = static_cast<std::int64_t>(std::ceil(leaf_fraction * static_cast<double>(nodes - 1)));
  s = s < lo ? lo : s;
  return s > nodes - 1 ? nodes - 1 : s;
}

//! What `plan_memory` chose.
struct memory_plan {
  std::int64_t heads = 0;   //!< decoding heads = tree levels
  std::int64_t nodes = 0;   //!< tree nodes (root included)
  std::int64_t leaves = 0;  //!< assumed leaves of that tree
  double kv_bytes = 0.0;    //!< KV allocation for the requested turns
  double total = 0.0;       //!< eq. 6 at the chosen point
};

//! Options of `plan_memory`.
struct memory_plan_options {
  std::int64_t turns = 20;        //!< chat turns to serve (n)
  std::int64_t max_heads = 5;     //!< try this many heads first ...
  std::int64_t min_heads = 2;     //!< ... down to this many (SpecMemo uses >= 2)
  std::int64_t arity = 10;        //!< top-k per head: minimum tree = arity * heads nodes + root
  double leaf_fraction = 0.86;    //!< see assumed_leaves
  std::int64_t max_nodes = 4096;  //!< never plan trees larger than this
};

//! SpecMemo budgeting: reserve the model and an exact KV allocation for
//! `turns` turns, then, from max_heads down (fewer heads before anything
//! coarser, as the seed prescribes), take the first head count whose
//! largest affordable tree has at least arity * heads + 1 nodes; the tree
//! is the largest N <= max_nodes with total <= budget. Errors:
//! invalid_argument (bad config/options), buffer_too_small (nothing fits).
//! O((max_heads - min_heads) * log max_nodes).
inline status plan_memory(const memory_config& c, double budget, const memory_plan_options& o,
                          memory_plan& out) noexcept {
  SPECDEC_TRY(c.validate());
  if (!std::isfinite(budget) || budget < 0)
    return make_status(status_code::invalid_argument, "budget must be finite and >= 0");
  if (o.turns < 0 || o.min_heads < 1 || o.max_heads < o.min_heads || o.arity < 1 || o.max_nodes < 1 ||
      !(o.leaf_fraction > 0.0 && o.leaf_fraction <= 1.0))
    return make_status(status_code::invalid_argument, "bad memory_plan_options");
  const double kv = kv_cache_bytes(c, static_cast<double>(o.turns) * static_cast<double>(c.tokens_per_turn));
  for (std::int64_t l = o.max_heads; l >= o.min_heads; --l) {
    auto fits = [&](std::int64_t n) {
      const auto s = assumed_leaves(n, l, o.leaf_fraction);
      return total_bytes(c, static_cast<double>(o.turns), static_cast<double>(n), static_cast<double>(s),
                         static_cast<double>(l)) <= budget;
    };
    const std::int64_t need = o.arity * l + 1;
    if (need > o.max_nodes || !fits(need)) continue;
    // Total is non-decreasing in N (leaves never decrease), so binary search.
    std::int64_t lo = need, hi = o.max_nodes;
    while (lo < hi) {
      const std::int64_t mid = lo + (hi - lo + 1) / 2;
      if (fits(mid))
        lo = mid;
      else
        hi = mid - 1;
    }
    out.heads = l;
    out.nodes = lo;
    out.leaves = assumed_leaves(lo, l, o.leaf_fraction);
    out.kv_bytes = kv;
    out.total = total_bytes(c, static_cast<double>(o.turns), static_cast<double>(lo), static_cast<double>(out.leaves),
                            static_cast<double>(l));
    return status::success();
  }
  return make_status(status_code::buffer_too_small, "budget cannot hold the model, the KV cache and a minimal tree");
}

//! Largest KV allocation (in cached tokens) that fits `budget` next to the
//! model, l heads and an (N, S) tree; divide by tokens_per_turn for turns.
//! Errors: invalid_argument, buffer_too_small (not even 0 tokens fit).
inline status max_kv_tokens(const memory_config& c, double budget, double nodes, double leaves, double heads,
                            std::int64_t& tokens) noexcept {
  SPECDEC_TRY(c.validate());
  if (!std::isfinite(budget) || !(nodes >= 0) || !(leaves >= 0) || !(heads >= 0))
    return make_status(status_code::invalid_argument, "budget, nodes, leaves and heads must be finite and >= 0");
  const double rest = budget - model_bytes(c) - heads_bytes(c, heads) - buffer_bytes(c, nodes, leaves, heads);
  if (rest < 0) return make_status(status_code::buffer_too_small, "model, heads and buffers alone exceed the budget");
  const double per = kv_cache_bytes(c, 1.0);
  // Clamp before converting: a double above INT64_MAX (tiny KV precision, huge budget) is UB to cast.
  const double q = per > 0 ? std::floor(rest / per) : INFINITY;
  tokens = q >= 9.2e18 ? INT64_MAX : static_cast<std::int64_t>(q);
  return status::success();
}

//! Largest arity k of a full k-ary tree with l levels (N = sum_{i<=l} k^i,
//! S = k^l) that fits the budget for `turns` turns; 0 when even k = 1 does
//! not fit. Errors: invalid_argument.
inline status max_full_tree_arity(const memory_config& c, double budget, std::int64_t turns, std::int64_t levels,
                                  std::int64_t& arity) noexcept {
  SPECDEC_TRY(c.validate());
  if (turns < 0 || levels < 0 || !std::isfinite(budget))
    return make_status(status_code::invalid_argument, "bad arguments");
  arity = 0;
  for (std::int64_t k = 1; k <= 1 << 16; ++k) {
    // k == 1 in closed form, and stop once k^i overflows (the total is then +inf
    // and cannot fit): a huge `levels` never turns into a long loop.
    double n = static_cast<double>(levels) + 1.0, s = 1.0;
    if (k > 1) {
      double pw = 1;
      n = 0;
      for (std::int64_t i = 0; i <= levels && std::isfinite(n); ++i, pw *= static_cast<double>(k)) n += pw;
      s = pw / static_cast<double>(k);
    }
    if (total_bytes(c, static_cast<double>(turns), n, s, static_cast<double>(levels)) > budget) break;
    arity = k;
  }
  return status::success();
}

}  // namespace specdec
