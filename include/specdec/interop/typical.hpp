//! \file
//! LOSSY: Medusa's typical acceptance over retrieve rows, with Medusa's own
//! choice among equally long accepted paths (the highest likelihood, i.e.
//! the largest sum of log target probabilities of the accepted drafts) or
//! the first such row. Its output is NOT distributed as the target model;
//! engines that ship Medusa's rule opt into it by calling this. (The tree
//! verifier's verify_mode::typical_lossy applies the same acceptance test
//! and breaks ties by the lowest node id.)
//!
//! Per retrieve row r (root, then drafts, -1 padded) and position k, the
//! draft at k + 1 is accepted when p_{node k}(token) > min(epsilon,
//! delta * exp(-H(p_{node k}))), with H(p) = -sum p log(p + 1e-5) as Medusa
//! computes it; the row's accept length is the number of leading accepted
//! drafts. Padding is never accepted (Medusa pads with a real token 0 read
//! under the last node's row, which can accept a padded position; the rows of
//! a tree whose leaves all have the same depth carry no padding).
#pragma once

#include <cmath>
#include <cstdint>
#include <span>

#include "specdec/core/status.hpp"
#include "specdec/core/view.hpp"
#include "specdec/tree/token_tree.hpp"

namespace specdec {

//! Which row wins among rows of the longest accept length.
enum class typical_tie_break : std::uint8_t {
  highest_likelihood = 0,  //!< Medusa: largest sum of log p of the accepted drafts (first on exact ties)
  first_row = 1,           //!< the first such row
};

//! Medusa's posterior_threshold (epsilon) and posterior_alpha (delta).
struct typical_params {
  float epsilon = 0.09f;  //!< posterior_threshold: cap on the acceptance threshold (> 0, finite)
  float delta = 0.3f;     //!< posterior_alpha: scale of exp(-entropy) in the threshold (> 0, finite)
  typical_tie_break tie_break =
      typical_tie_break::highest_likelihood;  //!< which row wins among rows of the longest accept length
};

//! Chooses the row and accept length. retrieve: R x L node ids (column 0 the
//! root, -1 padding); tokens: one per node; p: N x V target probabilities
//! (at the sampling temperature); scratch: N floats (per-node thresholds).
//! best_row = 0 and accept_length = 0 when nothing is accepted (Medusa).
//! Errors: invalid_argument (epsilon, delta), size_mismatch, out_of_range
//! (a node id or token outside the tree / vocabulary, index = row),
//! non_finite / negative_probability for a visited p row. O(R L + N V).
inline status medusa_typical_select(view2d<const std::int32_t> retrieve, std::span<const token_id> tokens,
                                    view2d<const float> p, const typical_params& tp, std::span<float> scratch,
                                    std::int32_t& best_row, std::int32_t& accept_length) noexcept {
  if (!(tp.epsilon > 0.0f) || !(tp.delta > 0.0f) || !std::isfinite(tp.epsilon) || !std::isfinite(tp.delta))
    return make_status(status_code::invalid_argument, "epsilon and delta must be positive and finite");
  const std::int64_t R = retrieve.extent[0], L = retrieve.extent[1], N = p.extent[0], V = p.extent[1];
  if (R < 1 || L < 1) return make_status(status_code::empty_input, "no retrieve rows");
  if (static_cast<std::int64_t>(tokens.size()) < N || static_cast<std::int64_t>(scratch.size()) < N)
    return make_status(status_code::size_mismatch, "tokens and scratch need one entry per node");
  for (std::int64_t i = 0; i < N; ++i) scratch[static_cast<std::size_t>(i)] = -1.0f;  // not computed
  auto threshold = [&](std::int32_t u, float& t) -> status {
    if (scratch[static_cast<std::size_t>(u)] >= 0.0f) {
      t = scratch[static_cast<std::size_t>(u)];
      return status::success();
    }
    float h = 0.0f;
    for (std::int64_t x = 0; x < V; ++x) {
      const float v = p(u, x);
      if (v != v || std::isinf(v)) return make_status(status_code::non_finite, "target row is not finite", u);
      if (v < 0.0f) return make_status(status_code::negative_probability, "target row has a negative entry", u);
      h -= v * std::log(v + 1e-5f);
    }
    const float a = tp.delta * std::exp(-h);
    t = scratch[static_cast<std::size_t>(u)] = a < tp.epsilon ? a : tp.epsilon;
    return status::success();
  };
  best_row = 0;
  accept_length = 0;
  float best_like = 0.0f;
  for (std::int64_t r = 0; r < R; ++r) {
    std::int32_t len = 0;
    float like = 0.0f;
    for (std::int64_t k = 0; k + 1 < L; ++k) {
      const std::int32_t u = retrieve(r, k), c = retrieve(r, k + 1);
      if (c < 0) break;  // padding
      if (u < 0 || u >= N || c >= N) return make_status(status_code::out_of_range, "retrieve node outside the tree", r);
      const token_id x = tokens[static_cast<std::size_t>(c)];
      if (x < 0 || x >= V) return make_status(status_code::out_of_range, "token outside the vocabulary", r);
      float t = 0.0f;
      SPECDEC_TRY(threshold(u, t));
      const float px = p(u, x);
      if (!(px > t)) break;
      like += std::log(px);
      ++len;
    }
    const bool better =
        len > accept_length ||
        (len == accept_length && len > 0 && tp.tie_break == typical_tie_break::highest_likelihood && like > best_like);
    if (better) {
      best_row = static_cast<std::int32_t>(r);
      accept_length = len;
      best_like = like;
    }
  }
  return status::success();
}

}  // namespace specdec
