//! \file
//! SSM state commit after verification: the state after the accepted
//! root-to-node path, rebuilt from the x, dt and B the scan already had (no
//! model replay), in O(depth) recurrence steps:
//!   h <- exp(dt'_j A) h + dt'_j x_j B_j^T   for j along the path.
//! Two entry points: from the path (the verifier's output) and from a mask
//! row over the whole tree in storage order ("activation replay", STree's
//! Alg. 1 / Fused Selective Scan): unmasked nodes are skipped, so it visits
//! the path nodes in root-to-node order (parent[i] < i) and gives the same
//! state. Both equal the per-node state of tree_scan_recurrent.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>

#include "specdec/core/status.hpp"
#include "specdec/core/view.hpp"
#include "specdec/ssm/detail/ssm_step.hpp"
#include "specdec/ssm/tree_ssm_inputs.hpp"
#include "specdec/tree/paths.hpp"
#include "specdec/tree/token_tree.hpp"

namespace specdec {

namespace detail {

template <class T>
constexpr status ssm_check_state_out(const view3d<T>& h, const tree_ssm_shape& s) noexcept {
  if (h.data == nullptr) return make_status(status_code::invalid_argument, "output state is required");
  if (h.extent[0] != s.heads || h.extent[1] != s.headdim || h.extent[2] != s.dstate)
    return make_status(status_code::size_mismatch, "output state must be [heads, headdim, dstate]");
  if (!ssm_view_nonnegative_strides(h)) return make_status(status_code::invalid_argument, "negative stride in state");
  return status::success();
}

//! Most commit steps one call of ssm_commit_steps takes (its scratch is on the stack).
inline constexpr std::int64_t ssm_commit_chunk = 16;

// Recurrence steps of nodes[0 .. L) (L <= ssm_commit_chunk; a root-path
// segment, root side first) for every head into h_out. The first segment
// (`first`) reads h0 (or zeros); later ones update h_out in place. Rows
// with a unit dstate stride go through ssm_commit_rows (the state held in
// registers through the L steps, 64 rows at a time; the operations of the
// scans' step, so commits match their states); other layouts element by
// element. Every element only reads its own index, so h_out may be the
// very view h0.
template <class T>
void ssm_commit_steps(const tree_ssm_inputs<T>& in, const tree_ssm_options<T>& opt, const tree_ssm_shape& s,
                      const node_id* nodes, std::int64_t L, bool first, view3d<T> h_out) noexcept {
  const std::int64_t hpg = s.heads_per_group();
  const bool has_h0 = in.h0.data != nullptr;
  const bool rows = h_out.stride[2] == 1 && in.B.stride[2] == 1 && (!first || !has_h0 || in.h0.stride[2] == 1);
  constexpr std::int64_t chunk = 64;
  T decay[ssm_commit_chunk];
  T dt[ssm_commit_chunk];
  const T* b[ssm_commit_chunk];
  T xdt[ssm_commit_chunk * chunk];
  for (std::int64_t h = 0; h < s.heads; ++h) {
    const std::int64_t g = h / hpg;
    const T bias = in.dt_bias.data != nullptr ? in.dt_bias(h) : T(0);
    for (std::int64_t j = 0; j < L; ++j) {
      // The scans' dt' and exp (one-lane host vectors), so commits match their states.
      dt[j] = ssm_dt_host(in.dt(nodes[j], h), bias, opt);
      decay[j] = vec_ops<T, false>::exp(ssm_log_decay(dt[j], in.A(h)));
      b[j] = &in.B(nodes[j], g, 0);
    }
    if (rows) {
      for (std::int64_t p0 = 0; p0 < s.headdim; p0 += chunk) {
        const std::int64_t np = s.headdim - p0 < chunk ? s.headdim - p0 : chunk;
        for (std::int64_t j = 0; j < L; ++j)
          for (std::int64_t q = 0; q < np; ++q) xdt[j * chunk + q] = dt[j] * in.x(nodes[j], h, p0 + q);
        const T* h_in = !first ? &h_out(h, p0, 0) : (has_h0 ? &in.h0(h, p0, 0) : nullptr);
        const std::int64_t in_ld = !first ? h_out.stride[1] : (has_h0 ? in.h0.stride[1] : 0);
        ssm_commit_rows(h_in, in_ld, &h_out(h, p0, 0), h_out.stride[1], b, decay, xdt, chunk, L, np, s.dstate);
      }
      continue;
    }
    for (std::int64_t j = 0; j < L; ++j) {
      const bool from_h0 = first && j == 0;
      for (std::int64_t p = 0; p < s.headdim; ++p) {
        const T xd = dt[j] * in.x(nodes[j], h, p);
        for (std::int64_t k = 0; k < s.dstate; ++k) {
          const T prev = from_h0 ? (has_h0 ? in.h0(h, p, k) : T(0)) : h_out(h, p, k);
          h_out(h, p, k) = vec_ops<T, false>::fma(decay[j], prev, xd * in.B(nodes[j], g, k));
        }
      }
    }
  }
}

}  // namespace detail

//! State after accepting `path` (root first; parent[path[k]] == path[k-1]),
//! from the cached scan inputs `in` (x, dt, B, h0 of this round). Writes
//! h_out [heads, headdim, dstate]; h_out may be the same view as in.h0
//! (in-place commit) but must not otherwise overlap the inputs.
//! O(len(path) * heads * headdim * dstate) plus input validation; no
//! allocation; deterministic.
template <ssm_scalar T>
status tree_ssm_commit_path(std::span<const node_id> parent, const tree_ssm_inputs<T>& in,
                            const tree_ssm_options<T>& opt, std::span<const node_id> path, view3d<T> h_out) noexcept {
  tree_ssm_shape s;
  SPECDEC_TRY(validate_tree_ssm(parent, in, opt, s));
  SPECDEC_TRY(detail::ssm_check_state_out(h_out, s));
  SPECDEC_TRY(validate_root_path(parent, path));
  const auto len = static_cast<std::int64_t>(path.size());
  for (std::int64_t k = 0; k < len; k += detail::ssm_commit_chunk) {
    const std::int64_t L = len - k < detail::ssm_commit_chunk ? len - k : detail::ssm_commit_chunk;
    detail::ssm_commit_steps(in, opt, s, path.data() + k, L, k == 0, h_out);
  }
  return status::success();
}

//! Activation replay: the state after the masked nodes, visiting all N
//! nodes in storage order and skipping those whose bit is clear. `mask` is
//! a packed row (bit j of word j / 64; ceil(N / 64) words, bits >= N clear),
//! e.g. the accepted node's row of the tree's ancestor mask. The masked set
//! must be a root path (root set; each further masked node's parent is the
//! previous masked node); otherwise invalid_argument. Same aliasing and
//! cost as tree_ssm_commit_path, plus O(N).
template <ssm_scalar T>
status tree_ssm_replay_masked(std::span<const node_id> parent, const tree_ssm_inputs<T>& in,
                              const tree_ssm_options<T>& opt, std::span<const std::uint64_t> mask,
                              view3d<T> h_out) noexcept {
  tree_ssm_shape s;
  SPECDEC_TRY(validate_tree_ssm(parent, in, opt, s));
  SPECDEC_TRY(detail::ssm_check_state_out(h_out, s));
  const auto n = static_cast<std::size_t>(s.nodes);
  const std::size_t words = (n + 63) / 64;
  if (mask.size() != words) return make_status(status_code::size_mismatch, "mask must have ceil(N / 64) words");
  if (n % 64 != 0 && (mask[words - 1] >> (n % 64)) != 0)
    return make_status(status_code::invalid_argument, "mask has bits set beyond the last node");
  auto bit = [&](std::size_t j) { return ((mask[j / 64] >> (j % 64)) & 1u) != 0; };
  // Check the whole mask before writing anything.
  node_id prev = -1;
  for (std::size_t j = 0; j < n; ++j) {
    if (!bit(j)) continue;
    if (parent[j] != prev)
      return make_status(status_code::invalid_argument, "masked nodes do not form a root path",
                         static_cast<std::int64_t>(j));
    prev = static_cast<node_id>(j);
  }
  if (prev < 0) return make_status(status_code::empty_input, "mask selects no node");
  // The masked nodes in root-to-node order, a segment at a time.
  node_id seg[detail::ssm_commit_chunk];
  std::int64_t L = 0;
  bool first = true;
  for (std::size_t j = 0; j < n; ++j) {
    if (!bit(j)) continue;
    seg[L++] = static_cast<node_id>(j);
    if (L == detail::ssm_commit_chunk) {
      detail::ssm_commit_steps(in, opt, s, seg, L, first, h_out);
      first = false;
      L = 0;
    }
  }
  if (L > 0) detail::ssm_commit_steps(in, opt, s, seg, L, first, h_out);
  return status::success();
}

}  // namespace specdec
