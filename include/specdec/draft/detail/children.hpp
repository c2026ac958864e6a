//! \file
//! Internal: drawing the children of one node from its draft row, shared by
//! the sampled and the static-shape builders.
#pragma once

#include <cmath>
#include <cstdint>

#include "specdec/core/philox.hpp"
#include "specdec/core/view.hpp"
#include "specdec/draft/detail/topk.hpp"
#include "specdec/draft/drafter.hpp"
#include "specdec/sample/row.hpp"

namespace specdec::detail {

//! Draws up to w children of node u from `row` (validated, mass `total`)
//! into tok/val (w entries; val = normalized probability); `key` is w
//! doubles of scratch. Returns how many were drawn.
//! - iid: child j = inverse-CDF sample with r.uniform(u, j) (w children,
//!   repeats kept);
//! - without_replacement: Gumbel-top-w with U_t = r.uniform_double(u, t),
//!   key log q(t) - log(-log(1 - U_t)), descending key (ties: lower id);
//! - deterministic: the w most probable tokens (ties: lower id).
//! Tokens of probability 0 are never drawn (fewer children then).
inline std::int32_t draw_children(draft_mode mode, view1d<const float> row, double total, const rng_stream& r,
                                  node_id u, std::int32_t w, token_id* tok, float* val, double* key) noexcept {
  const std::int64_t V = row.extent[0];
  std::int32_t n = 0;
  if (mode == draft_mode::iid) {
    for (std::int32_t j = 0; j < w; ++j) {
      tok[j] = sample_row(row, r.uniform(static_cast<std::uint32_t>(u), static_cast<std::uint32_t>(j)), total);
      val[j] = static_cast<float>(row(tok[j]) / total);
    }
    return w;
  }
  for (std::int64_t t = 0; t < V; ++t) {
    const float q = row(t);
    if (!(q > 0.0f)) continue;
    double k = q;
    if (mode == draft_mode::without_replacement) {
      const double uu = r.uniform_double(static_cast<std::uint32_t>(u), static_cast<std::uint32_t>(t));
      const double e = -std::log1p(-uu);  // Exp(1); 0 only when uu == 0
      k = std::log(static_cast<double>(q)) - std::log(e);
    }
    topk_offer(k, static_cast<token_id>(t), tok, key, n, w);
  }
  for (std::int32_t j = 0; j < n; ++j) val[j] = static_cast<float>(row(tok[j]) / total);
  return n;
}

}  // namespace specdec::detail
