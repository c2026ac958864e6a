//! \file
//! Tree and chain verification (host). Given the target rows p[N x V] and,
//! for the sampled modes, the draft rows q[N x V] (row u = the distribution
//! that produced u's children), walk the token tree from the root and
//! return the accepted path plus one more token. See verify_params.hpp for
//! the modes and the exact random-number keys, docs/verify.md for the math.
//!
//! Rows are strided views, so logits-derived buffers (padded rows, a slice
//! of a larger batch) are read in place. Only rows the walk visits are
//! read, and each visited row is validated in full (finite, >= 0, mass) in
//! the same pass that first needs its contents: a NaN anywhere in a visited
//! row is reported (non_finite) instead of influencing a token; rows the
//! walk never visits are not inspected.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>

#include "specdec/core/philox.hpp"
#include "specdec/core/status.hpp"
#include "specdec/core/view.hpp"
#include "specdec/tree/token_tree.hpp"
#include "specdec/tree/validate.hpp"
#include "specdec/verify/detail/row_ops.hpp"
#include "specdec/verify/detail/topology.hpp"
#include "specdec/verify/detail/traversal_walk.hpp"
#include "specdec/verify/verify_params.hpp"

namespace specdec {

namespace detail {

inline constexpr std::size_t align8(std::size_t n) noexcept { return (n + 7u) & ~std::size_t{7}; }

//! Views of the caller's workspace.
struct verify_scratch {
  float* residual;          // V floats
  double* threshold;        // N doubles (typical_lossy)
  std::int32_t* depth;      // N ints
  traversal_frame* frames;  // N frames (block / traversal)
};

inline verify_scratch carve_scratch(std::span<std::byte> ws, std::int64_t V, std::int32_t n) noexcept {
  std::byte* b = ws.data();
  verify_scratch s{};
  s.residual = reinterpret_cast<float*>(b);
  b += align8(static_cast<std::size_t>(V) * sizeof(float));
  s.threshold = reinterpret_cast<double*>(b);
  b += static_cast<std::size_t>(n) * sizeof(double);
  s.depth = reinterpret_cast<std::int32_t*>(b);
  b += align8(static_cast<std::size_t>(n) * sizeof(std::int32_t));
  s.frames = reinterpret_cast<traversal_frame*>(b);
  return s;
}

//! Validates p_u and samples it with uniform draw 0 of node u.
inline status sample_p(prow pu, std::int64_t V, node_id u, const rng_stream& rng, float tol, bool check_norm,
                       token_id& out) noexcept {
  return sample_checked(pu, V, u, rng.uniform(static_cast<std::uint32_t>(u), 0), tol, check_norm, out);
}

//! sampled_iid / sampled_without_replacement.
template <class Topo>
status walk_sampled(const Topo& t, const view2d<const float>& p, const view2d<const float>& q, std::int64_t V,
                    const verify_params& vp, float* R, node_id& last, token_id& next) noexcept {
  const rng_stream rng{vp.seed, vp.request, vp.round};
  const bool wor = vp.mode == verify_mode::sampled_without_replacement;
  const float tol = vp.normalization_tolerance;
  node_id u = 0;
  for (;;) {
    const prow pu = row_of(p, u);
    node_id c = t.next_child(u, -1);
    if (c < 0) {
      last = u;
      return sample_p(pu, V, u, rng, tol, true, next);
    }
    const prow qu = row_of(q, u);
    bool have_r = false;
    double M = 1.0;  // mass of the residual (input rows count as normalized)
    double Z = 0.0;  // q mass of the distinct tokens rejected so far (without replacement)
    node_id accepted = -1;
    for (std::uint32_t j = 0; c >= 0; ++j, c = t.next_child(u, c)) {
      const token_id x = t.token_of(c);
      const bool dup = wor && earlier_sibling_has(t, u, c, x);
      const double qx = dup ? 0.0 : static_cast<double>(qu[x]);
      const double rx = have_r ? static_cast<double>(R[x]) : static_cast<double>(pu[x]);
      const double denom = 1.0 - Z;  // q_j = q / (1 - Z) outside the rejected set
      const double un = static_cast<double>(rng.uniform(static_cast<std::uint32_t>(u), 1u + j));
      // min(1, P(x) / q_j(x)) > un without dividing; q_j(x) = 0 or P(x) = 0 rejects.
      if (qx > 0.0 && rx > 0.0 && denom > 0.0 && un * qx * M < rx * denom) {
        accepted = c;
        break;
      }
      if (!have_r) {
        double mp = 0.0, mq = 0.0;
        bool okp = true, okq = true;
        with_load2(pu, qu, [&](auto lp, auto lq) { first_residual_pass(lp, lq, R, V, mp, mq, M, okp, okq); });
        if (!okp) return classify_row(pu, V, u, false);
        if (!okq) return classify_row(qu, V, u, true);
        SPECDEC_TRY(check_mass(mp, tol, u, false));
        SPECDEC_TRY(check_mass(mq, tol, u, true));
        have_r = true;
      } else if (denom > 0.0) {
        const double s = M / denom;
        M = with_load(qu, [&](auto lq) { return update_residual_pass(lq, R, s, V); });
      }  // else q_j is all zero: P is unchanged
      if (wor && !dup) Z += qx;
    }
    if (accepted >= 0) {
      if (!have_r) SPECDEC_TRY(check_pq(pu, qu, V, u, tol));  // the rows were not read yet
      u = accepted;
      continue;
    }
    // Every child rejected: emit from the residual.
    last = u;
    token_id y = -1;
    if (M > 0.0) {
      const double target = static_cast<double>(rng.uniform(static_cast<std::uint32_t>(u), 0)) * M;
      y = sample_pass(contig_load{R}, V, target);
    }
    if (y < 0) (void)with_load(pu, [&](auto ld) { return argmax_pass(ld, V, y); });  // mass rounded to zero
    next = y;
    return status::success();
  }
}

//! deterministic: the one-hot-q rule.
template <class Topo>
status walk_deterministic(const Topo& t, const view2d<const float>& p, std::int64_t V, const verify_params& vp,
                          float* R, node_id& last, token_id& next) noexcept {
  const rng_stream rng{vp.seed, vp.request, vp.round};
  node_id u = 0;
  for (;;) {
    const prow pu = row_of(p, u);
    node_id c = t.next_child(u, -1);
    if (c < 0) {
      last = u;
      return sample_p(pu, V, u, rng, 0.0f, false, next);
    }
    double M = 0.0;
    SPECDEC_TRY(p_mass(pu, V, u, 0.0f, false, M));
    node_id accepted = -1;
    for (std::uint32_t j = 0; c >= 0; ++j, c = t.next_child(u, c)) {
      const token_id x = t.token_of(c);
      const double rx = earlier_sibling_has(t, u, c, x) ? 0.0 : static_cast<double>(pu[x]);
      const double un = static_cast<double>(rng.uniform(static_cast<std::uint32_t>(u), 1u + j));
      // Accept with probability P(x) = rx / M; on rejection P(x) = 0 and renormalize.
      if (rx > 0.0 && un * M < rx) {
        accepted = c;
        break;
      }
      M -= rx;
    }
    if (accepted >= 0) {
      u = accepted;
      continue;
    }
    last = u;
    with_load(pu, [&](auto ld) { copy_pass(ld, R, V); });
    for (node_id s = t.next_child(u, -1); s >= 0; s = t.next_child(u, s)) R[t.token_of(s)] = 0.0f;
    const double mr = sum_pass(R, V);
    token_id y = -1;
    if (mr > 0.0) {
      const double target = static_cast<double>(rng.uniform(static_cast<std::uint32_t>(u), 0)) * mr;
      y = sample_pass(contig_load{R}, V, target);
    }
    if (y < 0) (void)with_load(pu, [&](auto ld) { return argmax_pass(ld, V, y); });
    next = y;
    return status::success();
  }
}

//! Greedy and naive matching share one walk: pick a token at u (`pick`
//! returns a status and writes it), move to the first child carrying it,
//! else emit it.
template <class Topo, class Pick>
status walk_matching(const Topo& t, Pick pick, node_id& last, token_id& next) noexcept {
  node_id u = 0;
  for (;;) {
    token_id y = -1;
    SPECDEC_TRY(pick(u, y));
    node_id hit = -1;
    for (node_id c = t.next_child(u, -1); c >= 0 && hit < 0; c = t.next_child(u, c))
      if (t.token_of(c) == y) hit = c;
    if (hit < 0) {
      last = u;
      next = y;
      return status::success();
    }
    u = hit;
  }
}

//! greedy: follow argmax p_u (lowest id on ties); p rows may be
//! probabilities or logits (any non-NaN values).
template <class Topo>
status walk_greedy(const Topo& t, const view2d<const float>& p, std::int64_t V, node_id& last,
                   token_id& next) noexcept {
  return walk_matching(
      t,
      [&](node_id u, token_id& a) {
        a = 0;
        if (!with_load(row_of(p, u), [&](auto ld) { return argmax_pass(ld, V, a); }))
          return make_status(status_code::non_finite, "target row p has a NaN entry", u);
        return status::success();
      },
      last, next);
}

//! naive_matching: sample from p_u, follow the child carrying the sample.
template <class Topo>
status walk_naive(const Topo& t, const view2d<const float>& p, std::int64_t V, const verify_params& vp, node_id& last,
                  token_id& next) noexcept {
  const rng_stream rng{vp.seed, vp.request, vp.round};
  return walk_matching(
      t, [&](node_id u, token_id& y) { return sample_p(row_of(p, u), V, u, rng, 0.0f, false, y); }, last, next);
}

//! typical_lossy: longest path of typical nodes (deepest, lowest id on
//! ties); thresholds computed once per reachable internal node.
template <class Topo>
status walk_typical(const Topo& t, const view2d<const float>& p, std::int64_t V, const verify_params& vp,
                    const verify_scratch& s, node_id& last, token_id& next) noexcept {
  const rng_stream rng{vp.seed, vp.request, vp.round};
  constexpr double unreachable = -2.0, pending = -1.0;
  s.threshold[0] = pending;
  s.depth[0] = 0;
  node_id best = 0;
  for (node_id c = 1; c < t.n; ++c) {
    const node_id pu = t.parent_of(c);
    s.threshold[c] = unreachable;
    if (s.threshold[pu] == unreachable) continue;
    const prow row = row_of(p, pu);
    if (s.threshold[pu] == pending) {
      double mass = 0.0, plogp = 0.0;
      if (!with_load(row, [&](auto ld) { return entropy_pass(ld, V, mass, plogp); }))
        return classify_row(row, V, pu, false);
      SPECDEC_TRY(check_mass(mass, -1.0f, pu, false));
      const double h = std::log(mass) - plogp / mass;  // entropy of p / mass
      const double tau =
          std::fmin(static_cast<double>(vp.typical_epsilon), static_cast<double>(vp.typical_delta) * std::exp(-h));
      s.threshold[pu] = tau * mass;  // compare unnormalized entries
    }
    if (static_cast<double>(row[t.token_of(c)]) > s.threshold[pu]) {
      s.threshold[c] = pending;
      s.depth[c] = s.depth[pu] + 1;
      if (s.depth[c] > s.depth[best]) best = c;
    }
  }
  last = best;
  return sample_p(row_of(p, best), V, best, rng, 0.0f, false, next);
}

template <class Topo>
status run_walk(const Topo& t, const view2d<const float>& p, const view2d<const float>& q, std::int64_t V,
                const verify_params& vp, const verify_scratch& s, node_id& last, token_id& next) noexcept {
  switch (vp.mode) {
    case verify_mode::sampled_iid:
    case verify_mode::sampled_without_replacement:
      return walk_sampled(t, p, q, V, vp, s.residual, last, next);
    case verify_mode::deterministic:
      return walk_deterministic(t, p, V, vp, s.residual, last, next);
    case verify_mode::greedy:
      return walk_greedy(t, p, V, last, next);
    case verify_mode::naive_matching:
      return walk_naive(t, p, V, vp, last, next);
    case verify_mode::typical_lossy:
      return walk_typical(t, p, V, vp, s, last, next);
    case verify_mode::block:
    case verify_mode::traversal:
    case verify_mode::traversal_without_replacement:
      return walk_traversal(t, p, q, V, vp.mode, vp.normalization_tolerance, rng_stream{vp.seed, vp.request, vp.round},
                            s.residual, s.frames, last, next);
  }
  return make_status(status_code::invalid_argument, "unknown verify_mode");
}

//! Shared size/shape checks of the p and q views against N nodes.
inline status check_rows(const view2d<const float>& p, const view2d<const float>& q, std::int64_t p_rows,
                         std::int64_t q_rows_min, const verify_params& vp) noexcept {
  SPECDEC_TRY(validate_verify_params(vp));
  const std::int64_t V = p.extent[1];
  if (V <= 0) return make_status(status_code::empty_input, "vocabulary size (p.extent[1]) must be positive");
  if (V > INT32_MAX) return make_status(status_code::invalid_argument, "vocabulary too large for 32-bit token ids");
  if (p.data == nullptr) return make_status(status_code::invalid_argument, "p has no data");
  if (p.extent[0] < p_rows) return make_status(status_code::size_mismatch, "p must have one row per node");
  // A request without drafts reads no q row, whatever the mode.
  if (uses_draft_probs(vp.mode) && q_rows_min > 0) {
    if (q.data == nullptr) return make_status(status_code::invalid_argument, "this mode needs the draft rows q");
    if (q.extent[1] != V) return make_status(status_code::size_mismatch, "q rows must have p's vocabulary size");
    if (q.extent[0] < q_rows_min) return make_status(status_code::size_mismatch, "q must have one row per node");
  }
  return status::success();
}

inline bool aligned8(const std::byte* b) noexcept { return (reinterpret_cast<std::uintptr_t>(b) & 7u) == 0; }

}  // namespace detail

//! Bytes of workspace verify_tree / verify_chain need for a vocabulary of
//! `vocab` and a tree of `nodes` nodes (chain: gamma + 1): V floats for the
//! residual, then 12 bytes per node plus one walk frame per node (block
//! and traversal modes). Must be 8-byte aligned.
inline std::size_t verify_workspace_size(std::int64_t vocab, std::int32_t nodes) noexcept {
  if (vocab <= 0 || nodes <= 0) return 0;
  const auto n = static_cast<std::size_t>(nodes);
  return detail::align8(static_cast<std::size_t>(vocab) * sizeof(float)) + n * sizeof(double) +
         detail::align8(n * sizeof(std::int32_t)) + n * detail::traversal_frame_bytes;
}

//! Verifies one token tree.
//! - tree: N nodes in topological order (validated: parents, depths when
//!   given, every token < V); the root token is the last committed token.
//! - p: N x V target rows (row u = target distribution after u's path);
//!   q: N x V draft rows, read only by the sampled modes (else may be empty).
//!   Any strides. Sampled modes need rows normalized within
//!   vp.normalization_tolerance; greedy accepts logits.
//! - path, tokens: capacity >= max depth + 1. On success path[0..accepted]
//!   holds the accepted nodes from the root, tokens[0..accepted] the emitted
//!   tokens (accepted nodes' tokens, then result.next_token).
//! Errors (outputs untouched): argument/shape errors, tree errors,
//! buffer_too_small, invalid_argument for verify_mode::block on a tree that
//! is not a chain, and data errors of visited rows (non_finite,
//! negative_probability, zero_mass, invalid_argument for unnormalized rows)
//! with the node as index. Cost: O(N * depth) for child scans plus about
//! one streaming read of each visited row (two for a node where the sampled
//! modes reject, plus one read of q_u per further rejected sibling).
//! Deterministic for a given (seed, request, round); no allocation.
inline status verify_tree(const tree_view& tree, view2d<const float> p, view2d<const float> q, const verify_params& vp,
                          std::span<std::byte> workspace, std::span<node_id> path, std::span<token_id> tokens,
                          verify_result& result) noexcept {
  const std::int64_t N = tree.size;
  SPECDEC_TRY(detail::check_rows(p, q, N, N > 1 ? N : 0, vp));
  const std::int64_t V = p.extent[1];
  SPECDEC_TRY(validate_tree(tree, V));
  if (workspace.size() < verify_workspace_size(V, tree.size))
    return make_status(status_code::buffer_too_small, "workspace smaller than verify_workspace_size");
  if (!detail::aligned8(workspace.data()))
    return make_status(status_code::invalid_argument, "workspace must be 8-byte aligned");
  const detail::verify_scratch s = detail::carve_scratch(workspace, V, tree.size);
  std::int32_t max_depth = 0;
  s.depth[0] = 0;
  for (std::int32_t i = 1; i < tree.size; ++i) {
    s.depth[i] = s.depth[tree.parent[i]] + 1;
    max_depth = s.depth[i] > max_depth ? s.depth[i] : max_depth;
  }
  if (path.size() < static_cast<std::size_t>(max_depth) + 1 || tokens.size() < static_cast<std::size_t>(max_depth) + 1)
    return make_status(status_code::buffer_too_small, "path and tokens need max depth + 1 entries");
  if (vp.mode == verify_mode::block && max_depth != tree.size - 1)
    return make_status(status_code::invalid_argument,
                       "block verification needs a chain (at most one child per node); use verify_mode::traversal");
  const detail::tree_topology topo{tree.token, tree.parent, tree.size};
  node_id last = 0;
  token_id next = -1;
  SPECDEC_TRY(detail::run_walk(topo, p, q, V, vp, s, last, next));
  std::int32_t d = 0;
  for (node_id v = last; v != 0; v = tree.parent[v]) ++d;
  node_id v = last;
  for (std::int32_t k = d; k >= 1; --k) {
    path[static_cast<std::size_t>(k)] = v;
    tokens[static_cast<std::size_t>(k - 1)] = tree.token[v];
    v = tree.parent[v];
  }
  path[0] = 0;
  tokens[static_cast<std::size_t>(d)] = next;
  result = verify_result{d, last, next, status_code::ok};
  return status::success();
}

//! Verifies a chain of gamma = drafts.size() drafts (Leviathan/Chen
//! speculative sampling in mode sampled_iid). p: (gamma + 1) x V target
//! rows (row i follows the first i drafts); q: at least gamma draft rows
//! (row i produced draft i), read only by the sampled modes. Node ids in
//! the random-number keys are 0 (context) .. gamma (last draft), exactly
//! the ids the same chain has as a token_tree, so verify_chain and
//! verify_tree agree token for token. tokens: capacity >= gamma + 1;
//! receives the accepted drafts then result.next_token. Errors as verify_tree.
inline status verify_chain(std::span<const token_id> drafts, view2d<const float> p, view2d<const float> q,
                           const verify_params& vp, std::span<std::byte> workspace, std::span<token_id> tokens,
                           verify_result& result) noexcept {
  if (drafts.size() >= static_cast<std::size_t>(INT32_MAX))
    return make_status(status_code::invalid_argument, "too many drafts");
  const auto n = static_cast<std::int32_t>(drafts.size()) + 1;
  SPECDEC_TRY(detail::check_rows(p, q, n, n - 1, vp));
  const std::int64_t V = p.extent[1];
  SPECDEC_TRY(validate_tokens(drafts.data(), n - 1, V));
  if (workspace.size() < verify_workspace_size(V, n))
    return make_status(status_code::buffer_too_small, "workspace smaller than verify_workspace_size");
  if (!detail::aligned8(workspace.data()))
    return make_status(status_code::invalid_argument, "workspace must be 8-byte aligned");
  if (tokens.size() < static_cast<std::size_t>(n))
    return make_status(status_code::buffer_too_small, "tokens needs gamma + 1 entries");
  const detail::verify_scratch s = detail::carve_scratch(workspace, V, n);
  const detail::chain_topology topo{drafts.data(), n};
  node_id last = 0;
  token_id next = -1;
  SPECDEC_TRY(detail::run_walk(topo, p, q, V, vp, s, last, next));
  for (std::int32_t k = 0; k < last; ++k) tokens[static_cast<std::size_t>(k)] = drafts[static_cast<std::size_t>(k)];
  tokens[static_cast<std::size_t>(last)] = next;
  result = verify_result{last, last, next, status_code::ok};
  return status::success();
}

}  // namespace specdec
