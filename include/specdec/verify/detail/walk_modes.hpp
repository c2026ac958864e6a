//! \file
//! The modes of the one verification walk (verify/walk.hpp dispatches to
//! them): token-wise sampled, deterministic, matching (greedy, naive),
//! typical, and the leaves-to-root block/traversal walk, with the helpers
//! they share. Internal: call verify_walk.
#pragma once

#include <cmath>
#include <cstdint>

#include "specdec/core/config.hpp"
#include "specdec/core/status.hpp"
#include "specdec/sample/order.hpp"
#include "specdec/tree/token_tree.hpp"
#include "specdec/verify/policy.hpp"
#include "specdec/verify/verify_params.hpp"
#include "specdec/verify/walk_state.hpp"

namespace specdec::detail {

//! The status of a row pass that failed with code c at node u.
SPECDEC_HD constexpr status row_status(status_code c, node_id u, bool is_q) noexcept {
  if (c == status_code::non_finite)
    return make_status(c, is_q ? "draft row q has a NaN or infinite entry" : "target row p has a NaN or infinite entry",
                       u);
  if (c == status_code::negative_probability)
    return make_status(c, is_q ? "draft row q has a negative entry" : "target row p has a negative entry", u);
  return make_status(c, is_q ? "draft row q has entries too large to sum" : "target row p has entries too large to sum",
                     u);
}

//! zero_mass, or invalid_argument when tol >= 0 and |m - 1| > tol.
SPECDEC_HD constexpr status mass_status(double m, float tol, node_id u, bool is_q) noexcept {
  if (!(m > 0.0))
    return make_status(status_code::zero_mass, is_q ? "draft row q has zero mass" : "target row p has zero mass", u);
  if (tol >= 0.0f && (m - 1.0 > tol || 1.0 - m > tol))
    return make_status(status_code::invalid_argument,
                       is_q ? "draft row q is not normalized (see normalization_tolerance)"
                            : "target row p is not normalized (see normalization_tolerance)",
                       u);
  return status::success();
}

//! Entry x of row r as the walk reads single entries (a drafted token's
//! probability, a residual entry). A policy with a `value(row, x)` member
//! serves it (a vocabulary-sharded policy fetches it from the rank owning
//! x); otherwise a plain read. Collective like every pass.
SPECDEC_NO_EXEC_CHECK
template <class Ops>
SPECDEC_HD float row_value(const Ops& ops, row_ref r, token_id x) noexcept {
  if constexpr (requires { ops.value(r, x); })
    return ops.value(r, x);
  else
    return r[x];
}

SPECDEC_NO_EXEC_CHECK
template <class Uni>
SPECDEC_HD status take_uniform(const Uni& uni, node_id u, std::uint32_t draw, double& out) noexcept {
  out = uni(static_cast<std::uint32_t>(u), draw);
  if (!(out >= 0.0 && out < 1.0))
    return make_status(status_code::invalid_argument, "uniform outside [0, 1) or past draws_per_node", u);
  return status::success();
}

SPECDEC_NO_EXEC_CHECK
template <class Ops>
SPECDEC_HD status push_path(const Ops& ops, walk_out& o, node_id c) noexcept {
  if (o.accepted + 1 >= o.capacity)
    return make_status(status_code::buffer_too_small, "path and tokens need max depth + 1 entries");
  ++o.accepted;
  ops.put(o.path, o.accepted, c);
  return status::success();
}

//! Whether an earlier sibling of c (in visit order) carries token x.
SPECDEC_NO_EXEC_CHECK
template <class Topo>
SPECDEC_HD bool earlier_sibling_has(const Topo& t, node_id u, node_id c, token_id x) noexcept {
  for (node_id s = t.first_child(u); s >= 0 && s != c; s = t.next_sibling(s))
    if (t.token_of(s) == x) return true;
  return false;
}

//! Validates p_u (normalization checked when tol >= 0) and samples it with
//! draw 0 of u.
SPECDEC_NO_EXEC_CHECK
template <class Ops, class Uni>
SPECDEC_HD status sample_p(const Ops& ops, const Uni& uni, const walk_rows& rows, const walk_scratch& s, node_id u,
                           float tol, token_id& out) noexcept {
  const row_ref pu = rows.prow(u);
  double m = 0.0;
  if (!ops.mass(pu, rows.V, s.tp, m)) return row_status(ops.classify(pu, rows.V), u, false);
  SPECDEC_TRY(mass_status(m, tol, u, false));
  double un = 0.0;
  SPECDEC_TRY(take_uniform(uni, u, 0, un));
  out = ops.sample(pu, rows.V, s.tp, un * m);
  return status::success();
}

//! Validates p_u and q_u together (rows of an accepted node whose passes
//! did not run yet); a policy with `mass_pair` does both in one pass.
SPECDEC_NO_EXEC_CHECK
template <class Ops>
SPECDEC_HD status check_pq(const Ops& ops, const walk_rows& rows, const walk_scratch& s, node_id u,
                           float tol) noexcept {
  double mp = 0.0, mq = 0.0;
  bool okp = true, okq = true;
  if constexpr (requires { ops.mass_pair(rows.prow(u), rows.qrow(u), rows.V, s.tp, s.tq, mp, mq, okp, okq); }) {
    // Both rows in one pass (a vocabulary-sharded policy: one collective).
    ops.mass_pair(rows.prow(u), rows.qrow(u), rows.V, s.tp, s.tq, mp, mq, okp, okq);
  } else {
    okp = ops.mass(rows.prow(u), rows.V, s.tp, mp);
    okq = okp && ops.mass(rows.qrow(u), rows.V, s.tq, mq);
  }
  if (!okp) return row_status(ops.classify(rows.prow(u), rows.V), u, false);
  if (!okq) return row_status(ops.classify(rows.qrow(u), rows.V), u, true);
  SPECDEC_TRY(mass_status(mp, tol, u, false));
  return mass_status(mq, tol, u, true);
}

//! The token emitted at u from the residual in s.R (tile sums in s.tr)
//! of mass `mass`: a sample with draw 0 of u, or argmax p_u when the mass
//! rounded to zero (not positive).
SPECDEC_NO_EXEC_CHECK
template <class Ops, class Uni>
SPECDEC_HD status emit_residual(const Ops& ops, const Uni& uni, const walk_rows& rows, const walk_scratch& s, node_id u,
                                double mass, token_id& y) noexcept {
  y = -1;
  if (mass > 0.0) {
    double un = 0.0;
    SPECDEC_TRY(take_uniform(uni, u, 0, un));
    y = ops.sample(row_ref{s.R, 1}, rows.V, s.tr, un * mass);
  }
  if (y < 0) (void)ops.argmax(rows.prow(u), rows.V, y);
  return status::success();
}

//! sampled_iid / sampled_without_replacement: multi-step speculative
//! sampling (q renormalized after each rejection without replacement).
SPECDEC_NO_EXEC_CHECK
template <class Topo, class Ops, class Uni>
SPECDEC_HD status walk_sampled(const Topo& t, const Ops& ops, const Uni& uni, const verify_params& vp,
                               const walk_rows& rows, const walk_scratch& s, walk_out& o) noexcept {
  const bool wor = vp.mode == verify_mode::sampled_without_replacement;
  const float tol = vp.normalization_tolerance;
  const std::int64_t V = rows.V;
  node_id u = 0;
  for (;;) {
    const row_ref pu = rows.prow(u);
    node_id c = t.first_child(u);
    if (c < 0) {
      o.last = u;
      return sample_p(ops, uni, rows, s, u, tol, o.next);
    }
    const row_ref qu = rows.qrow(u);
    bool have_r = false;
    double M = 1.0;  // mass of the residual (input rows count as normalized)
    double Z = 0.0;  // q mass of the distinct tokens rejected so far (without replacement)
    node_id accepted = -1;
    for (std::uint32_t j = 0; c >= 0; ++j, c = t.next_sibling(c)) {
      const token_id x = t.token_of(c);
      const bool dup = wor && earlier_sibling_has(t, u, c, x);
      const double qx = dup ? 0.0 : static_cast<double>(row_value(ops, qu, x));
      const double rx = static_cast<double>(row_value(ops, have_r ? row_ref{s.R, 1} : pu, x));
      const double denom = 1.0 - Z;  // q_j = q / (1 - Z) outside the rejected set
      double un = 0.0;
      SPECDEC_TRY(take_uniform(uni, u, 1u + j, un));
      // min(1, P(x) / q_j(x)) > un without dividing; q_j(x) = 0 or P(x) = 0 rejects.
      if (qx > 0.0 && rx > 0.0 && denom > 0.0 && un * qx * M < rx * denom) {
        accepted = c;
        break;
      }
      if (!have_r) {
        double mp = 0.0, mq = 0.0;
        bool okp = true, okq = true;
        ops.first_residual(pu, qu, s.R, V, s.tp, s.tq, s.tr, mp, mq, M, okp, okq);
        if (!okp) return row_status(ops.classify(pu, V), u, false);
        if (!okq) return row_status(ops.classify(qu, V), u, true);
        SPECDEC_TRY(mass_status(mp, tol, u, false));
        SPECDEC_TRY(mass_status(mq, tol, u, true));
        have_r = true;
      } else if (denom > 0.0) {
        M = ops.update_residual(qu, s.R, static_cast<float>(M / denom), V, s.tr);
      }  // else q_j is all zero: P is unchanged
      if (wor && !dup) Z += qx;
    }
    if (accepted >= 0) {
      if (!have_r) SPECDEC_TRY(check_pq(ops, rows, s, u, tol));
      SPECDEC_TRY(push_path(ops, o, accepted));
      u = accepted;
      continue;
    }
    // Every child rejected: emit from the residual.
    o.last = u;
    return emit_residual(ops, uni, rows, s, u, M, o.next);
  }
}

//! The deterministic emission at u for policies that tile rows like
//! sample/order.hpp (host, CUDA): R = p_u with the children's tokens
//! removed is materialised only in the tiles holding such a token; its tile
//! sums are p_u's (s.tp, from the mass pass) with those tiles redone; the
//! sample scans R or p_u, whichever holds the crossing tile. Same token as
//! sampling the full R.
SPECDEC_NO_EXEC_CHECK
template <class Topo, class Ops, class Uni>
SPECDEC_HD status emit_excluding_tiled(const Topo& t, const Ops& ops, const Uni& uni, const walk_rows& rows,
                                       const walk_scratch& s, node_id u, token_id& y) noexcept {
  const std::int64_t V = rows.V;
  const row_ref pu = rows.prow(u);
  const std::int64_t nt = sum_tile_count(V);
  for (std::int64_t ti = 0; ti < nt; ++ti) ops.put(s.tr, ti, s.tp[ti]);
  auto tile_of = [](token_id x) { return static_cast<std::int64_t>(x) / sum_tile; };
  auto tile_end = [&](std::int64_t ti) { return (ti + 1) * sum_tile < V ? (ti + 1) * sum_tile : V; };
  for (node_id k = t.first_child(u); k >= 0; k = t.next_sibling(k))
    ops.copy_range(pu, s.R, tile_of(t.token_of(k)) * sum_tile, tile_end(tile_of(t.token_of(k))));
  ops.sync();
  for (node_id k = t.first_child(u); k >= 0; k = t.next_sibling(k)) ops.put(s.R, t.token_of(k), 0.0f);
  ops.sync();
  for (node_id k = t.first_child(u); k >= 0; k = t.next_sibling(k)) {
    const std::int64_t tk = tile_of(t.token_of(k));
    const double v = ops.tile_sum(row_ref{s.R, 1}, V, tk);
    ops.put(s.tr, tk, v);
  }
  ops.sync();
  const double mr = sum_tiles(s.tr, nt);
  if (mr > 0.0) {
    double un = 0.0;
    SPECDEC_TRY(take_uniform(uni, u, 0, un));
    const double target = un * mr;
    std::int64_t tt = 0;
    double cum = 0.0;
    while (y < 0 && locate_tile(s.tr, nt, target, tt, cum)) {
      bool touched = false;
      for (node_id k = t.first_child(u); k >= 0; k = t.next_sibling(k)) touched |= tile_of(t.token_of(k)) == tt;
      y = ops.scan_tile(touched ? row_ref{s.R, 1} : pu, V, tt, cum, target);
      if (y < 0) cum += s.tr[tt++];
    }
    if (y < 0) {  // rounding passed the row: the last positive entry of R, R in full
      ops.copy(pu, s.R, V);
      for (node_id k = t.first_child(u); k >= 0; k = t.next_sibling(k)) ops.put(s.R, t.token_of(k), 0.0f);
      ops.sync();
      y = ops.last_positive(row_ref{s.R, 1}, V);
    }
  }
  return status::success();
}

//! deterministic: the one-hot-q rule (q is not read).
SPECDEC_NO_EXEC_CHECK
template <class Topo, class Ops, class Uni>
SPECDEC_HD status walk_deterministic(const Topo& t, const Ops& ops, const Uni& uni, const walk_rows& rows,
                                     const walk_scratch& s, walk_out& o) noexcept {
  const std::int64_t V = rows.V;
  node_id u = 0;
  for (;;) {
    const row_ref pu = rows.prow(u);
    node_id c = t.first_child(u);
    if (c < 0) {
      o.last = u;
      return sample_p(ops, uni, rows, s, u, -1.0f, o.next);
    }
    double M = 0.0;
    if (!ops.mass(pu, V, s.tp, M)) return row_status(ops.classify(pu, V), u, false);
    SPECDEC_TRY(mass_status(M, -1.0f, u, false));
    node_id accepted = -1;
    for (std::uint32_t j = 0; c >= 0; ++j, c = t.next_sibling(c)) {
      const token_id x = t.token_of(c);
      const double rx = earlier_sibling_has(t, u, c, x) ? 0.0 : static_cast<double>(row_value(ops, pu, x));
      double un = 0.0;
      SPECDEC_TRY(take_uniform(uni, u, 1u + j, un));
      // Accept with probability P(x) = rx / M; on rejection P(x) = 0 and renormalize.
      if (rx > 0.0 && un * M < rx) {
        accepted = c;
        break;
      }
      M -= rx;
    }
    if (accepted >= 0) {
      SPECDEC_TRY(push_path(ops, o, accepted));
      u = accepted;
      continue;
    }
    // Every child rejected: sample R = p_u with the children's tokens removed.
    o.last = u;
    token_id y = -1;
    if constexpr (requires { ops.tile_sum(pu, V, V); }) {
      SPECDEC_TRY(emit_excluding_tiled(t, ops, uni, rows, s, u, y));
    } else {  // policies with another tile layout (vocabulary shards): R in full
      ops.copy(pu, s.R, V);
      ops.sync();
      for (node_id k = t.first_child(u); k >= 0; k = t.next_sibling(k)) ops.put(s.R, t.token_of(k), 0.0f);
      ops.sync();
      double mr = 0.0;
      (void)ops.mass(row_ref{s.R, 1}, V, s.tr, mr);
      SPECDEC_TRY(emit_residual(ops, uni, rows, s, u, mr, y));
    }
    if (y < 0) (void)ops.argmax(pu, V, y);
    o.next = y;
    return status::success();
  }
}

//! greedy (follow argmax p_u, lowest id on ties; p may hold logits) and
//! naive_matching (follow a sample of p_u): move to the first child
//! carrying the picked token, else emit it.
SPECDEC_NO_EXEC_CHECK
template <class Topo, class Ops, class Uni>
SPECDEC_HD status walk_matching(const Topo& t, const Ops& ops, const Uni& uni, const verify_params& vp,
                                const walk_rows& rows, const walk_scratch& s, walk_out& o) noexcept {
  const bool greedy = vp.mode == verify_mode::greedy;
  node_id u = 0;
  for (;;) {
    token_id y = 0;
    if (greedy) {
      if (!ops.argmax(rows.prow(u), rows.V, y))
        return make_status(status_code::non_finite, "target row p has a NaN entry", u);
    } else {
      SPECDEC_TRY(sample_p(ops, uni, rows, s, u, -1.0f, y));
    }
    node_id hit = -1;
    for (node_id c = t.first_child(u); c >= 0; c = t.next_sibling(c))
      if (t.token_of(c) == y) {
        hit = c;
        break;  // next_sibling costs O(n) with parent_topology
      }
    if (hit < 0) {
      o.last = u;
      o.next = y;
      return status::success();
    }
    SPECDEC_TRY(push_path(ops, o, hit));
    u = hit;
  }
}

//! typical_lossy: the deepest node reachable through typical nodes (lowest
//! id among the deepest), breadth first; a threshold is computed once per
//! reached internal node; then a sample of its p row.
SPECDEC_NO_EXEC_CHECK
template <class Topo, class Ops, class Uni>
SPECDEC_HD status walk_typical(const Topo& t, const Ops& ops, const Uni& uni, const verify_params& vp,
                               const walk_rows& rows, const walk_scratch& s, walk_out& o) noexcept {
  const std::int64_t V = rows.V;
  ops.put(s.queue, 0, std::int32_t{0});
  ops.put(s.depth, 0, std::int32_t{0});
  ops.sync();
  std::int32_t head = 0, tail = 1, best = 0, best_depth = 0;
  while (head < tail) {
    const node_id u = s.queue[head++];
    node_id c = t.first_child(u);
    if (c < 0) continue;
    const std::int32_t du = s.depth[u];
    const row_ref row = rows.prow(u);
    double mass = 0.0, plogp = 0.0;
    if (!ops.entropy(row, V, s.tp, mass, plogp)) return row_status(ops.classify(row, V), u, false);
    SPECDEC_TRY(mass_status(mass, -1.0f, u, false));
    const double h = std::log(mass) - plogp / mass;  // entropy of p / mass
    const double tau =
        std::fmin(static_cast<double>(vp.typical_epsilon), static_cast<double>(vp.typical_delta) * std::exp(-h));
    const double thr = tau * mass;  // compare unnormalized entries
    for (; c >= 0; c = t.next_sibling(c)) {
      if (!(static_cast<double>(row_value(ops, row, t.token_of(c))) > thr)) continue;
      ops.put(s.queue, tail++, c);
      ops.put(s.depth, c, du + 1);
      ops.put(s.from, c, u);
      if (du + 1 > best_depth || (du + 1 == best_depth && c < best)) {
        best = c;
        best_depth = du + 1;
      }
    }
    ops.sync();
  }
  if (best_depth + 1 > o.capacity)
    return make_status(status_code::buffer_too_small, "path and tokens need max depth + 1 entries");
  node_id v = best;
  for (std::int32_t k = best_depth; k >= 1; --k) {
    ops.put(o.path, k, v);
    v = s.from[v];
  }
  o.accepted = best_depth;
  o.last = best;
  return sample_p(ops, uni, rows, s, best, -1.0f, o.next);
}

//! a * b rounded to float before any later use (no fused multiply-add), as
//! the policies' residual passes round their products.
SPECDEC_HD float rounded_product(float a, float b) noexcept {
  volatile float prod = a * b;
  return prod;
}

//! Applies the rejection of f.node's latest child to its measure:
//! m <- max(m - q_j, 0) / rho, rho = 1 - M + mass(max(m - q_j, 0)), with
//! q_j = q_u / (1 - rejected_q). R and tr then hold max(p_u - s q_u, 0).
SPECDEC_NO_EXEC_CHECK
template <class Topo, class Ops>
SPECDEC_HD void traversal_reject(const Topo& t, const Ops& ops, const walk_rows& rows, const walk_scratch& sc,
                                 traversal_frame& f, bool wor) noexcept {
  const node_id u = f.node, c = f.last_child;
  const token_id x = t.token_of(c);
  const bool dup = wor && earlier_sibling_has(t, u, c, x);
  const double keep = 1.0 - f.rejected_q;
  if (keep > 0.0) {  // else q_j would be all zero (the drafts exhausted q): the measure is unchanged
    // k max(p - s q, 0) - q / keep = k max(p - (s + 1 / (k keep)) q, 0) where positive.
    const auto s2 = static_cast<float>(static_cast<double>(f.s) + 1.0 / (f.k * keep));
    double rm = 0.0;
    if constexpr (requires { ops.scaled_residual(rows.prow(u), rows.qrow(u), sc.R, s2, rows.V, sc.tr); }) {
      rm = ops.scaled_residual(rows.prow(u), rows.qrow(u), sc.R, s2, rows.V, sc.tr);  // one read
    } else {
      ops.copy(rows.prow(u), sc.R, rows.V);
      ops.sync();
      rm = ops.update_residual(rows.qrow(u), sc.R, s2, rows.V, sc.tr);
    }
    const double S = f.k * rm;
    const double rho = 1.0 - f.mass + S;
    if (rho > 0.0 && S > 0.0) {
      f.k /= rho;
      f.s = s2;
      f.mass = S / rho;
      f.r_mass = rm;
    } else {  // nothing left to deliver at u (in exact arithmetic only when rho = 0)
      f.mass = 0.0;
    }
  }
  if (wor && !dup) f.rejected_q += static_cast<double>(row_value(ops, rows.qrow(u), x));
}

//! block / traversal / traversal_without_replacement: leaves to root
//! (docs/verify.md derives it). Depth first over the children in visit
//! order; entering child c (token x) of u gives it the measure w p_c with
//! w = min(1, m_u(x) / q_j(x)); once c's subtree is exhausted c is accepted
//! with probability M_c (draw 1 + j of u), else u's measure takes the
//! rejection. The accepted node's next token is a sample of its measure
//! (draw 0). Rows are validated when first read: p_u and q_u when u's
//! first child is tried, p of an accepted leaf when it is sampled.
SPECDEC_NO_EXEC_CHECK
template <class Topo, class Ops, class Uni>
SPECDEC_HD status walk_traversal(const Topo& t, const Ops& ops, const Uni& uni, const verify_params& vp,
                                 const walk_rows& rows, const walk_scratch& sc, walk_out& o) noexcept {
  const bool wor = vp.mode == verify_mode::traversal_without_replacement;
  const float tol = vp.normalization_tolerance;
  std::int32_t d = 0;
  traversal_frame f{1.0, 1.0, 0.0, 0.0, 0.0f, 0, -1, 0, 0};  // the current node (frames hold its ancestors)
  for (;;) {
    const node_id u = f.node;
    const node_id c = !(f.mass > 0.0) ? -1 : f.last_child < 0 ? t.first_child(u) : t.next_sibling(f.last_child);
    if (c >= 0) {
      if (f.tried == 0) SPECDEC_TRY(check_pq(ops, rows, sc, u, tol));
      const row_ref pu = rows.prow(u), qu = rows.qrow(u);
      const token_id x = t.token_of(c);
      const bool dup = wor && earlier_sibling_has(t, u, c, x);
      const double keep = 1.0 - f.rejected_q;
      const float qx = row_value(ops, qu, x), px = row_value(ops, pu, x);
      const double qj = dup || !(keep > 0.0) ? 0.0 : static_cast<double>(qx) / keep;
      // m_u(x), rounded as the residual pass rounds R(x).
      const float r = px - rounded_product(f.s, qx);
      const double mx = f.k * static_cast<double>(r > 0.0f ? r : 0.0f);
      f.last_child = c;
      const std::uint32_t draw = 1u + f.tried++;
      if (qj > 0.0 && mx > 0.0) {  // else weight 0: rejected without a draw
        if (d + 1 >= o.capacity)
          return make_status(status_code::buffer_too_small, "path and tokens need max depth + 1 entries");
        const double w = mx < qj ? mx / qj : 1.0;
        ops.put(sc.frames, d, f);
        ops.sync();
        ++d;
        f = traversal_frame{w, w, 0.0, 0.0, 0.0f, c, -1, 0, draw};
        continue;
      }
      traversal_reject(t, ops, rows, sc, f, wor);
      continue;
    }
    // Every child of u is rejected (or u is a leaf): decide u itself.
    if (d > 0) {
      double un = 0.0;
      SPECDEC_TRY(take_uniform(uni, sc.frames[d - 1].node, f.draw, un));
      if (!(un < f.mass)) {
        f = sc.frames[--d];
        traversal_reject(t, ops, rows, sc, f, wor);
        continue;
      }
    }
    // u is accepted: the path is the frames' nodes, then u.
    for (std::int32_t k = 1; k < d; ++k) ops.put(o.path, k, sc.frames[k].node);
    if (d > 0) ops.put(o.path, d, u);
    o.accepted = d;
    o.last = u;
    if (f.tried == 0) return sample_p(ops, uni, rows, sc, u, tol, o.next);  // a leaf: its measure is w p_u
    // R and tr still hold u's latest residual; its mass rounds to zero at the root only.
    return emit_residual(ops, uni, rows, sc, u, f.mass > 0.0 ? f.r_mass : 0.0, o.next);
  }
}

}  // namespace specdec::detail
