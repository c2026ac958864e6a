//! \file
//! Internal: drawing the children of one node from its draft row, shared by
//! the sampled and the static-shape builders.
#pragma once

#include <cmath>
#include <cstdint>

#include "specdec/core/philox.hpp"
#include "specdec/core/status.hpp"
#include "specdec/core/view.hpp"
#include "specdec/draft/detail/topk.hpp"
#include "specdec/draft/drafter.hpp"
#include "specdec/sample/detail/host_rows.hpp"
#include "specdec/sample/row.hpp"
#include "specdec/sample/uniforms.hpp"

namespace specdec::detail {

//! The uniforms of a build: the caller's buffer when `caller.u` is set,
//! else the 53-bit draws of the builder's Philox stream (draft_round::uniforms).
struct draft_uniforms {
  rng_stream r;            // for_purpose(round.rng, rng_purpose::draft)
  caller_uniforms caller;  // round.uniforms
  //! Uniform `draw` of `node`; a caller's value outside [0, 1) (or past its
  //! buffer: -1) is returned as is for take() to refuse.
  double operator()(std::uint32_t node, std::uint32_t draw) const noexcept {
    return caller.u != nullptr ? caller(node, draw) : r.uniform_double(node, draw);
  }
  //! The uniform, or invalid_argument with the node as index.
  status take(node_id u, std::int64_t draw, double& out) const noexcept {
    out = (*this)(static_cast<std::uint32_t>(u), static_cast<std::uint32_t>(draw));
    if (!(out >= 0.0 && out < 1.0))
      return make_status(status_code::invalid_argument, "draft uniform outside [0, 1) or past draws_per_node", u);
    return status::success();
  }
};

//! Draws up to w children of node u from `row` (validated, mass `total`)
//! into tok/val (w entries; val = normalized probability); `key` is w
//! doubles of scratch; `n` receives how many were drawn.
//! - iid: child j = inverse-CDF sample (sample_row) with uniform (u, j)
//!   (w children, repeats kept);
//! - without_replacement: Gumbel-top-w with U_t = uniform (u, t), key
//!   log q(t) - log(-log(1 - U_t)) (U_t = 0 gives +inf: ranked first, ties
//!   lower id), descending key (ties: lower id);
//! - deterministic: the w most probable tokens (ties: lower id).
//! Tokens of probability 0 are never drawn (fewer children then). `tiles`,
//! when given, holds the row's tile sums (take_level_row). Errors:
//! invalid_argument for a caller's uniform outside [0, 1).
inline status draw_children(draft_mode mode, view1d<const float> row, double total, const draft_uniforms& uni,
                            node_id u, std::int32_t w, token_id* tok, float* val, double* key, std::int32_t& n,
                            const double* tiles = nullptr) noexcept {
  const std::int64_t V = row.extent[0];
  n = 0;
  if (mode == draft_mode::iid) {
    for (std::int32_t j = 0; j < w; ++j) {
      double x = 0.0;
      SPECDEC_TRY(uni.take(u, j, x));
      // With the tile sums a draw reads one tile, not the row up to the sample (the same token).
      tok[j] = tiles != nullptr ? sample_from_tiles(row_ref{row.data, row.stride[0]}, V, tiles, x * total)
                                : sample_row(row, x, total);
      val[j] = static_cast<float>(row(tok[j]) / total);
    }
    n = w;
    return status::success();
  }
  if (mode == draft_mode::deterministic) {
    // The row is validated (no NaN): a block whose largest entry cannot
    // enter the w best so far is skipped after a branch-free max, instead
    // of an insertion test per entry (a 41-node static tree at V = 32000 to
    // 128256: 1.25-1.4x faster, bench_draft BM_static_tree_41).
    constexpr std::int64_t block = 16;
    const float* r = row.data;
    const std::int64_t s = row.stride[0];
    for (std::int64_t b = 0; b < V; b += block) {
      const std::int64_t e = b + block < V ? b + block : V;
      float m = 0.0f;
      if (s == 1) {  // contiguous (the usual row): vectorized
        for (std::int64_t t = b; t < e; ++t) m = r[t] > m ? r[t] : m;
      } else {
        for (std::int64_t t = b; t < e; ++t) m = r[t * s] > m ? r[t * s] : m;
      }
      if (!(m > 0.0f) || (n == w && !(static_cast<double>(m) > key[n - 1]))) continue;
      for (std::int64_t t = b; t < e; ++t)
        if (r[t * s] > 0.0f) topk_offer(static_cast<double>(r[t * s]), static_cast<token_id>(t), tok, key, n, w);
    }
  } else {
    for (std::int64_t t = 0; t < V; ++t) {
      const float q = row(t);
      if (!(q > 0.0f)) continue;
      double uu = 0.0;
      SPECDEC_TRY(uni.take(u, t, uu));
      const double e = -std::log1p(-uu);  // Exp(1); 0 only when uu == 0
      topk_offer(std::log(static_cast<double>(q)) - std::log(e), static_cast<token_id>(t), tok, key, n, w);
    }
  }
  for (std::int32_t j = 0; j < n; ++j) val[j] = static_cast<float>(row(tok[j]) / total);
  return status::success();
}

}  // namespace specdec::detail
