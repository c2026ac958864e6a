//! \file
//! The leaves-to-root walk of block verification (Sun et al., ICLR 2025)
//! and traversal verification (Weng et al., 2025); docs/verify.md derives
//! it. Every node c on the current root path carries a measure
//! m_c = max(alpha * p_c - beta * q_c, 0) over its next token, of mass M_c:
//! - entering child c (token x) of u: m_c = w * p_c with
//!   w = min(1, m_u(x) / q_j(x)), q_j = the law child j was drafted from
//!   (q_u, or q_u without the rejected tokens, renormalized);
//! - once c's subtree is exhausted, c is accepted with probability M_c
//!   (the whole root path up to c; its next token is a sample of m_c);
//! - when c is rejected, m_u <- max(m_u - q_j, 0) / rho with
//!   rho = 1 - M_u + mass(max(m_u - q_j, 0)), the probability of that
//!   rejection averaged over c's drafted subtree.
//! The root starts with m = p_0 (mass 1) and is accepted when every child
//! is rejected. On a chain this is block verification step for step.
#pragma once

#include <cstddef>
#include <cstdint>

#include "specdec/core/status.hpp"
#include "specdec/core/view.hpp"
#include "specdec/tree/token_tree.hpp"
#include "specdec/verify/detail/row_ops.hpp"
#include "specdec/verify/detail/topology.hpp"
#include "specdec/verify/verify_params.hpp"

namespace specdec::detail {

//! One node of the walk's current root path.
struct traversal_frame {
  double alpha;          // measure coefficient of p
  double beta;           // measure coefficient of q
  double rejected_q;     // q mass of the distinct tokens rejected so far (without replacement)
  double mass;           // M, the measure's mass
  double last_residual;  // mass of R after the node's latest rejection update (R / that is the measure's law)
  node_id node;          // the node
  node_id last_child;    // last child tried (-1: none yet)
  std::uint32_t tried;   // children tried so far
  std::uint32_t draw;    // 1 + the node's index among its siblings (its acceptance draw at the parent)
  bool validated;        // p and q rows checked
};

//! Bytes of scratch the walk needs per node (one frame per tree level).
inline constexpr std::size_t traversal_frame_bytes = sizeof(traversal_frame);

//! Applies the rejection of u's latest child to u's measure; R receives
//! max(m_u - q_j, 0) (the unnormalized new measure).
template <class Topo>
void reject_child(const Topo& t, traversal_frame& f, prow pu, prow qu, std::int64_t V, bool wor, float* R) noexcept {
  const node_id c = f.last_child;
  const token_id x = t.token_of(c);
  const bool dup = wor && earlier_sibling_has(t, f.node, c, x);
  const double keep = 1.0 - f.rejected_q;  // q_j = q_u / keep outside the rejected tokens
  if (keep > 0.0) {
    const double b = f.beta + 1.0 / keep;
    const double s = with_load2(pu, qu, [&](auto lp, auto lq) {
      return scaled_residual_pass(lp, lq, static_cast<float>(f.alpha), static_cast<float>(b), R, V);
    });
    const double rho = 1.0 - f.mass + s;
    if (rho > 0.0 && s > 0.0) {
      f.alpha /= rho;
      f.beta = b / rho;
      f.mass = s / rho;
      f.last_residual = s;
    } else {  // nothing left to deliver at u (exact arithmetic: only when rho = 0)
      f.mass = 0.0;
      f.last_residual = 0.0;
    }
  } else {
    // q_j would be all zero (the drafts exhausted q): the measure is unchanged,
    // but R must hold it for a possible emission at u.
    f.last_residual = with_load2(pu, qu, [&](auto lp, auto lq) {
      return scaled_residual_pass(lp, lq, static_cast<float>(f.alpha), static_cast<float>(f.beta), R, V);
    });
  }
  if (wor && !dup) f.rejected_q += static_cast<double>(qu[x]);
}

//! block / traversal / traversal_without_replacement. `rng.uniform(node,
//! draw)` supplies the uniforms (the keys of verify_params.hpp); `frames`
//! holds max depth + 1 frames; R holds V floats. Rows are validated when
//! first read: p_u and q_u (normalized within the tolerance) when u's
//! first child is tried, p_u of an accepted leaf when it is sampled.
template <class Topo, class Rng>
status walk_traversal(const Topo& t, const view2d<const float>& p, const view2d<const float>& q, std::int64_t V,
                      verify_mode mode, float tol, const Rng& rng, float* R, traversal_frame* frames, node_id& last,
                      token_id& next) noexcept {
  const bool wor = mode == verify_mode::traversal_without_replacement;
  std::int32_t d = 0;
  frames[0] = traversal_frame{1.0, 0.0, 0.0, 1.0, 0.0, 0, -1, 0, 0, false};
  for (;;) {
    traversal_frame& f = frames[d];
    const node_id u = f.node;
    const prow pu = row_of(p, u);
    const node_id c = f.mass > 0.0 ? t.next_child(u, f.last_child) : -1;
    if (c >= 0) {
      const prow qu = row_of(q, u);
      if (!f.validated) {
        SPECDEC_TRY(check_pq(pu, qu, V, u, tol));
        f.validated = true;
      }
      const token_id x = t.token_of(c);
      const bool dup = wor && earlier_sibling_has(t, u, c, x);
      const double keep = 1.0 - f.rejected_q;
      const double qj = dup || !(keep > 0.0) ? 0.0 : static_cast<double>(qu[x]) / keep;
      const double mx =
          static_cast<double>(scaled_residual(pu[x], qu[x], static_cast<float>(f.alpha), static_cast<float>(f.beta)));
      f.last_child = c;
      const std::uint32_t draw = 1u + f.tried++;
      if (qj > 0.0 && mx > 0.0) {  // q_j(x) = 0 or m_u(x) = 0: weight 0, rejected without a draw
        const double w = mx < qj ? mx / qj : 1.0;
        frames[++d] = traversal_frame{w, 0.0, 0.0, w, 0.0, c, -1, 0, draw, false};
        continue;
      }
      reject_child(t, f, pu, qu, V, wor, R);
      continue;
    }
    // Every child of u is rejected (or u is a leaf): decide u itself.
    bool accept = d == 0;
    if (!accept) {
      const auto parent = static_cast<std::uint32_t>(frames[d - 1].node);
      accept = static_cast<double>(rng.uniform(parent, f.draw)) < f.mass;
    }
    if (!accept) {
      --d;
      traversal_frame& g = frames[d];
      reject_child(t, g, row_of(p, g.node), row_of(q, g.node), V, wor, R);
      continue;
    }
    last = u;
    const float un = rng.uniform(static_cast<std::uint32_t>(u), 0);
    if (f.tried == 0) return sample_checked(pu, V, u, un, tol, true, next);  // a leaf: m_u = w * p_u
    token_id y = -1;
    if (f.last_residual > 0.0) y = sample_pass(contig_load{R}, V, static_cast<double>(un) * f.last_residual);
    // Residual mass rounded to zero (only the root can get here): a valid token.
    if (y < 0) (void)with_load(pu, [&](auto ld) { return argmax_pass(ld, V, y); });
    next = y;
    return status::success();
  }
}

}  // namespace specdec::detail
