//! \file
//! Tree and chain verification (host). Given the target rows p[N x V] and,
//! for the sampled modes, the draft rows q[N x V] (row u = the distribution
//! that produced u's children), walk the token tree from the root and
//! return the accepted path plus one more token. See verify_params.hpp for
//! the modes and the exact random-number keys, docs/verify.md for the math.
//! The walk itself is verify/walk.hpp, the same code the CUDA kernel
//! runs; uniforms come from the keyed Philox streams or from the caller.
//!
//! Rows are strided views (rows_view: fp32, bf16 or fp16, each element
//! widened exactly to float as it is read), so logits-derived buffers
//! (padded rows, a slice of a larger batch, an engine's bf16 rows) are
//! read in place. Only rows the walk visits are
//! read, and each visited row is validated in full (finite, >= 0, mass) in
//! the same pass that first needs its contents: a NaN anywhere in a visited
//! row is reported (non_finite) instead of influencing a token; rows the
//! walk never visits are not inspected.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "specdec/core/philox.hpp"
#include "specdec/core/rows_view.hpp"
#include "specdec/core/status.hpp"
#include "specdec/core/view.hpp"
#include "specdec/core/workspace.hpp"
#include "specdec/sample/order.hpp"
#include "specdec/tree/token_tree.hpp"
#include "specdec/tree/validate.hpp"
#include "specdec/verify/detail/row_ops.hpp"
#include "specdec/verify/policy.hpp"
#include "specdec/verify/request_checks.hpp"
#include "specdec/verify/verify_params.hpp"
#include "specdec/verify/walk.hpp"

namespace specdec {

namespace detail {

//! Shared size/shape checks of the p and q views against N nodes, after
//! the parameters (validated once per call, here).
inline status check_rows(const rows_view& p, const rows_view& q, std::int64_t p_rows, std::int64_t q_rows_min,
                         const verify_params& vp) noexcept {
  SPECDEC_TRY(validate_verify_params(vp));
  const std::int64_t V = p.extent[1];
  if (V <= 0) return make_status(status_code::empty_input, "vocabulary size (p.extent[1]) must be positive");
  if (V > INT32_MAX) return make_status(status_code::invalid_argument, "vocabulary too large for 32-bit token ids");
  if (p.data == nullptr) return make_status(status_code::invalid_argument, "p has no data");
  if (!valid_row_dtype(p.dtype) || (q.data != nullptr && !valid_row_dtype(q.dtype)))
    return make_status(status_code::invalid_argument, "rows must be fp32, bf16 or fp16");
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

inline status carve_checked(std::span<std::byte> ws, std::int64_t V, std::int32_t n, walk_scratch& s) noexcept {
  workspace_carver w(ws.data(), ws.size());
  s = carve_walk_scratch(w, V, n);
  if (w.overflowed() || ws.data() == nullptr)
    return make_status(status_code::buffer_too_small, "workspace smaller than verify_workspace_size");
  if (!aligned8(ws.data())) return make_status(status_code::invalid_argument, "workspace must be 8-byte aligned");
  return status::success();
}

inline walk_rows rows_of(const rows_view& p, const rows_view& q, const row_transform* px = nullptr,
                         const row_transform* qx = nullptr) noexcept {
  return walk_rows{p.data,      p.stride[0], p.stride[1], q.data, q.stride[0], q.stride[1],
                   p.extent[1], p.dtype,     q.dtype,     px,     qx};
}

//! verify_tree over any host row policy (the loop layer passes one that
//! converts logits rows to probabilities when the walk first reads them).
//! px / qx, when given, make p / q logits rows read through these
//! per-row transforms (sample/row_transform.hpp).
template <class Uni, class Ops = host_row_ops>
status verify_tree_with(const tree_view& tree, const rows_view& p, const rows_view& q, const verify_params& vp,
                        const Uni& uni, std::span<std::byte> workspace, std::span<node_id> path,
                        std::span<token_id> tokens, verify_result& result, const Ops& ops = Ops{},
                        const row_transform* px = nullptr, const row_transform* qx = nullptr) noexcept {
  const std::int64_t N = tree.size;
  SPECDEC_TRY(check_rows(p, q, N, N > 1 ? N : 0, vp));
  const std::int64_t V = p.extent[1];
  if (N <= 0 || tree.parent == nullptr) return make_status(status_code::empty_input, "tree has no nodes");
  walk_scratch s{};
  SPECDEC_TRY(carve_checked(workspace, V, tree.size, s));
  const std::size_t cap = path.size() < tokens.size() ? path.size() : tokens.size();
  SPECDEC_TRY(check_request_tree(tree.parent, tree.token, tree.size, V, vp, q.data != nullptr,
                                 static_cast<std::int64_t>(cap), s.depth));  // params checked by check_rows
  if (tree.depth != nullptr) SPECDEC_TRY(validate_tree(tree));
  walk_out o{s.path, tree.size, 0, 0, -1};
  SPECDEC_TRY(
      verify_walk(parent_topology{tree.token, tree.parent, tree.size}, ops, uni, vp, rows_of(p, q, px, qx), s, o));
  for (std::int32_t k = 0; k <= o.accepted; ++k) {
    path[static_cast<std::size_t>(k)] = s.path[k];
    if (k > 0) tokens[static_cast<std::size_t>(k - 1)] = tree.token[s.path[k]];
  }
  tokens[static_cast<std::size_t>(o.accepted)] = o.next;
  result = verify_result{o.accepted, o.last, o.next, status_code::ok};
  return status::success();
}

template <class Uni>
status verify_chain_with(std::span<const token_id> drafts, const rows_view& p, const rows_view& q,
                         const verify_params& vp, const Uni& uni, std::span<std::byte> workspace,
                         std::span<token_id> tokens, verify_result& result) noexcept {
  if (drafts.size() >= static_cast<std::size_t>(INT32_MAX))
    return make_status(status_code::invalid_argument, "too many drafts");
  const auto n = static_cast<std::int32_t>(drafts.size()) + 1;
  SPECDEC_TRY(check_rows(p, q, n, n - 1, vp));
  const std::int64_t V = p.extent[1];
  SPECDEC_TRY(validate_tokens(drafts.data(), n - 1, V));
  walk_scratch s{};
  SPECDEC_TRY(carve_checked(workspace, V, n, s));
  if (tokens.size() < static_cast<std::size_t>(n))
    return make_status(status_code::buffer_too_small, "tokens needs gamma + 1 entries");
  const host_row_ops ops{};
  walk_out o{s.path, n, 0, 0, -1};
  SPECDEC_TRY(verify_walk(chain_topology{drafts.data(), n}, ops, uni, vp, rows_of(p, q), s, o));
  for (std::int32_t k = 0; k < o.last; ++k) tokens[static_cast<std::size_t>(k)] = drafts[static_cast<std::size_t>(k)];
  tokens[static_cast<std::size_t>(o.last)] = o.next;
  result = verify_result{o.last, o.last, o.next, status_code::ok};
  return status::success();
}

}  // namespace detail

//! Bytes of workspace verify_tree / verify_chain need for a vocabulary of
//! `vocab` and a tree of `nodes` nodes (chain: gamma + 1): V floats for the
//! residual, three arrays of tile sums (sample/order.hpp), four ints and
//! one walk frame (block and traversal modes) per node, each slice
//! 256-byte aligned (core/workspace.hpp). The base must be 8-byte aligned.
inline std::size_t verify_workspace_size(std::int64_t vocab, std::int32_t nodes) noexcept {
  if (vocab <= 0 || nodes <= 0) return 0;
  workspace_carver w;
  (void)carve_walk_scratch(w, vocab, nodes);
  return w.bytes_used();
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
//! Errors (outputs untouched): argument/shape errors, the checks of
//! check_verify_request (shared with the CUDA kernel; verify_mode::block
//! on a tree that is not a chain is invalid_argument), buffer_too_small,
//! and data errors of visited rows (non_finite, negative_probability,
//! zero_mass, invalid_argument for unnormalized rows) with the node as
//! index. Cost: O(N * depth) for child scans plus about one streaming read
//! of each visited row (two for a node where the sampled modes reject,
//! plus one read of q_u per further rejected sibling). Deterministic for a
//! given (seed, request, round); no allocation.
inline status verify_tree(const tree_view& tree, rows_view p, rows_view q, const verify_params& vp,
                          std::span<std::byte> workspace, std::span<node_id> path, std::span<token_id> tokens,
                          verify_result& result) noexcept {
  return detail::verify_tree_with(tree, p, q, vp, philox_uniforms{rng_stream{vp.seed, vp.request, vp.round}}, workspace,
                                  path, tokens, result);
}

//! verify_tree with the caller's uniforms instead of the Philox streams
//! (layout: caller_uniforms; docs/verify.md). vp.seed/request/round are
//! ignored. A uniform outside [0, 1), or a draw past draws_per_node, gives
//! invalid_argument with the node as index.
inline status verify_tree(const tree_view& tree, rows_view p, rows_view q, const verify_params& vp,
                          const caller_uniforms& uniforms, std::span<std::byte> workspace, std::span<node_id> path,
                          std::span<token_id> tokens, verify_result& result) noexcept {
  if (uniforms.u == nullptr) return make_status(status_code::invalid_argument, "caller uniforms have no data");
  return detail::verify_tree_with(tree, p, q, vp, uniforms, workspace, path, tokens, result);
}

//! Verifies a chain of gamma = drafts.size() drafts (Leviathan/Chen
//! speculative sampling in mode sampled_iid). p: (gamma + 1) x V target
//! rows (row i follows the first i drafts); q: at least gamma draft rows
//! (row i produced draft i), read only by the sampled modes. Node ids in
//! the random-number keys are 0 (context) .. gamma (last draft), exactly
//! the ids the same chain has as a token_tree, so verify_chain and
//! verify_tree agree token for token. tokens: capacity >= gamma + 1;
//! receives the accepted drafts then result.next_token. Errors as verify_tree.
inline status verify_chain(std::span<const token_id> drafts, rows_view p, rows_view q, const verify_params& vp,
                           std::span<std::byte> workspace, std::span<token_id> tokens, verify_result& result) noexcept {
  return detail::verify_chain_with(drafts, p, q, vp, philox_uniforms{rng_stream{vp.seed, vp.request, vp.round}},
                                   workspace, tokens, result);
}

//! verify_chain with the caller's uniforms (as verify_tree).
inline status verify_chain(std::span<const token_id> drafts, rows_view p, rows_view q, const verify_params& vp,
                           const caller_uniforms& uniforms, std::span<std::byte> workspace, std::span<token_id> tokens,
                           verify_result& result) noexcept {
  if (uniforms.u == nullptr) return make_status(status_code::invalid_argument, "caller uniforms have no data");
  return detail::verify_chain_with(drafts, p, q, vp, uniforms, workspace, tokens, result);
}

}  // namespace specdec
