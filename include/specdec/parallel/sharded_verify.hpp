//! \file
//! Vocabulary-parallel verification: every rank holds the columns
//! [bounds[r], bounds[r + 1]) of the target rows p (and draft rows q) of a
//! tree, as a tensor-parallel output layer leaves them, and the ranks
//! verify the tree together without gathering the rows. The walk is the
//! one of verify/walk.hpp, run on every rank with a row-operations
//! policy whose passes work on the local columns and exchange O(1) scalars
//! per decision over the caller's collective (parallel/collective.hpp):
//! partial masses, the drafted tokens' probabilities (a probe riding on
//! the pass before the walk reads them, see parallel/detail/shard_passes.hpp),
//! the sampled token (the rank whose range holds the inverse-CDF target),
//! argmax keys and status flags; one collective per decision. Every mode of
//! verify_mode is supported, block and traversal verification included.
//! Where the passes run is a shard executor's business
//! (parallel/shard_executor.hpp): host_shard_executor (host rows, any
//! collective), nccl_shard_executor (rows in GPU memory) in
//! parallel/cuda_shard.cuh. The row policy is
//! parallel/detail/shard_row_ops.hpp, the partition checks
//! parallel/partition.hpp.
//!
//! Entry points: verify_tree_sharded and verify_chain_sharded take a
//! collective (the passes then run on host rows) or a shard executor, a
//! shard_workspace (one workspace, or its executor and host parts) and
//! optionally the caller's uniforms (else keyed Philox);
//! verify_tree_partitioned and verify_chain_partitioned run the same walk in
//! one process.
//!
//! Exactness. Masses and inverse-CDF prefixes are summed in the
//! partitioned order: the fixed tiled order of sample/order.hpp inside
//! each column range (tiles start at the range's first column), then
//! across ranges in rank order from zero. verify_tree_partitioned runs the
//! same walk in one process with that order, so a sharded run and a
//! partitioned run of the same rows, partition and uniforms give the same
//! tokens bit for bit. Against the default order (verify_tree) the masses
//! differ by rounding only: both are sums of the same V nonnegative floats
//! in double, each within (V - 1) * 2^-53 * mass of the exact sum, so they
//! differ by at most about 2 * V * 2^-53 relative (3e-11 at V = 128256),
//! and a token differs only when a uniform falls within that distance of a
//! cumulative boundary (an event of probability about 1e-10 per draw).
//! Argmax (greedy) is order-free: identical in every case.
//!
//! Errors. Arguments are checked on every rank, then agreed over the
//! collective (agree_status): a bad argument on one rank (a NaN-free but
//! wrong-sized shard, a token out of range, a short workspace, a tree that
//! differs between ranks) becomes the same status code and index on all
//! ranks. Row data errors (NaN or negative entries in any rank's shard,
//! zero or unnormalized mass) are found by collective passes and so are
//! reported identically everywhere. Every rank joins every collective it
//! owes before returning: no hang.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>

#include "specdec/core/philox.hpp"
#include "specdec/core/status.hpp"
#include "specdec/core/view.hpp"
#include "specdec/core/workspace.hpp"
#include "specdec/parallel/collective.hpp"
#include "specdec/parallel/detail/shard_passes.hpp"
#include "specdec/parallel/detail/shard_row_ops.hpp"
#include "specdec/parallel/partition.hpp"
#include "specdec/parallel/shard_executor.hpp"
#include "specdec/sample/uniforms.hpp"
#include "specdec/tree/token_tree.hpp"
#include "specdec/tree/validate.hpp"
#include "specdec/verify/policy.hpp"
#include "specdec/verify/request_checks.hpp"
#include "specdec/verify/tree_verify.hpp"
#include "specdec/verify/verify_params.hpp"
#include "specdec/verify/walk.hpp"

namespace specdec {

namespace detail {

//! The walk's scratch of a shard in two parts: rows and tile sums where the
//! executor runs passes (plus a copy of the partition), the walk's own
//! arrays and the tag rows on the host.
struct shard_scratch {
  walk_scratch walk;  //!< R, tp, tq, tr: executor memory; the rest: host
  std::int64_t* bounds;
  float* tags;
};
inline void carve_shard_exec(workspace_carver& w, const owned_ranges& o, std::size_t ranges,
                             shard_scratch& s) noexcept {
  const walk_scratch e = carve_walk_scratch(w, o.width, o.tiles, 0);
  s.walk.R = e.R;
  s.walk.tp = e.tp;
  s.walk.tq = e.tq;
  s.walk.tr = e.tr;
  s.bounds = w.take<std::int64_t>(ranges + 1);
}
inline void carve_shard_host(workspace_carver& w, std::int32_t n, shard_scratch& s) noexcept {
  const walk_scratch h = carve_walk_scratch(w, 0, 0, n);
  s.walk.queue = h.queue;
  s.walk.depth = h.depth;
  s.walk.from = h.from;
  s.walk.path = h.path;
  s.walk.frames = h.frames;
  s.tags = w.take<float>(2 * static_cast<std::size_t>(n));
}

//! The request of one sharded call: what every rank checks locally.
struct sharded_request {
  const owned_ranges* own;
  std::int64_t V;
  std::int32_t n;       //!< nodes
  std::int32_t q_rows;  //!< q rows the mode needs (0: none)
  view2d<const float> p, q;
};

inline status check_shards(const sharded_request& rq, const verify_params& vp) noexcept {
  SPECDEC_TRY(validate_verify_params(vp));
  if (rq.p.extent[1] != rq.own->width)
    return make_status(status_code::size_mismatch, "p's columns must be this rank's vocabulary range");
  if (rq.p.extent[0] < rq.n) return make_status(status_code::size_mismatch, "p must have one row per node");
  if (rq.own->width > 0 && rq.p.data == nullptr) return make_status(status_code::invalid_argument, "p has no data");
  if (uses_draft_probs(vp.mode) && rq.q_rows > 0) {
    if (rq.q.extent[1] != rq.own->width)
      return make_status(status_code::size_mismatch, "q's columns must be this rank's vocabulary range");
    if (rq.q.extent[0] < rq.q_rows) return make_status(status_code::size_mismatch, "q must have one row per node");
    if (rq.own->width > 0 && rq.q.data == nullptr)
      return make_status(status_code::invalid_argument, "this mode needs the draft rows q");
  }
  return status::success();
}

inline std::uint64_t fingerprint_of(const verify_params& vp, std::span<const std::int64_t> bounds, std::int32_t n,
                                    const node_id* parent, const token_id* token, const caller_uniforms* cu) noexcept {
  std::uint64_t h = 0xcbf29ce484222325ull;
  fingerprint_add(h, vp.mode);
  fingerprint_add(h, vp.request);
  fingerprint_add(h, vp.seed);
  fingerprint_add(h, vp.round);
  fingerprint_add(h, vp.typical_epsilon);
  fingerprint_add(h, vp.typical_delta);
  fingerprint_add(h, vp.normalization_tolerance);
  fingerprint_add(h, bounds.size());
  for (const std::int64_t b : bounds) fingerprint_add(h, b);
  fingerprint_add(h, n);
  for (std::int32_t i = 0; i < n; ++i) {
    if (parent != nullptr) fingerprint_add(h, parent[i]);
    if (token != nullptr) fingerprint_add(h, token[i]);
  }
  if (cu != nullptr && cu->u != nullptr) {
    fingerprint_add(h, cu->draws_per_node);
    const std::int64_t m = static_cast<std::int64_t>(cu->nodes) * cu->draws_per_node;
    for (std::int64_t i = 0; i < m; ++i) fingerprint_add(h, cu->u[i]);
  }
  return h;
}

inline walk_rows shard_rows(const view2d<const float>& p, const view2d<const float>& q, const owned_ranges& own,
                            std::int64_t V) noexcept {
  if (own.width == 0) return walk_rows{nullptr, 0, 0, nullptr, 0, 0, V};  // a rank holding no columns reads nothing
  return walk_rows{p.data,
                   p.stride[0],
                   p.stride[1],
                   q.data,
                   q.data != nullptr ? q.stride[0] : 0,
                   q.data != nullptr ? q.stride[1] : 0,
                   V};
}

//! Bytes of the executor part and the host part of one rank's scratch.
inline bool shard_scratch_bytes(std::span<const std::int64_t> bounds, int rank, int size, std::int32_t nodes,
                                std::size_t& exec, std::size_t& host) noexcept {
  owned_ranges own{};
  if (nodes <= 0 || !own_ranges(bounds, rank, size, own).ok()) return false;
  shard_scratch s{};
  workspace_carver we, wh;
  carve_shard_exec(we, own, bounds.size() - 1, s);
  carve_shard_host(wh, nodes, s);
  exec = we.bytes_used();
  host = wh.bytes_used();
  return true;
}

//! Checks and carves the two scratch parts (the same checks for both).
inline status carve_shards(const owned_ranges& own, std::size_t ranges, std::int32_t n, std::span<std::byte> exec_ws,
                           std::span<std::byte> host_ws, shard_scratch& s) noexcept {
  workspace_carver we(exec_ws.data(), exec_ws.size()), wh(host_ws.data(), host_ws.size());
  carve_shard_exec(we, own, ranges, s);
  carve_shard_host(wh, n, s);
  if (we.overflowed() || wh.overflowed() || exec_ws.data() == nullptr || host_ws.data() == nullptr ||
      s.walk.depth == nullptr || s.walk.path == nullptr || s.bounds == nullptr || s.tags == nullptr)
    return make_status(status_code::buffer_too_small, "workspace smaller than sharded_verify_workspace_size");
  if (!aligned8(exec_ws.data()) || !aligned8(host_ws.data()))
    return make_status(status_code::invalid_argument, "workspace must be 8-byte aligned");
  return status::success();
}

//! One workspace holding both parts: the executor part first.
inline void split_workspace(std::span<const std::int64_t> bounds, int rank, int size, std::int32_t nodes,
                            std::span<std::byte> ws, std::span<std::byte>& exec_ws,
                            std::span<std::byte>& host_ws) noexcept {
  std::size_t e = 0, h = 0;
  if (!shard_scratch_bytes(bounds, rank, size, nodes, e, h) || ws.size() < e) {
    exec_ws = ws;
    host_ws = {};
    return;
  }
  exec_ws = ws.first(e);
  host_ws = ws.subspan(e);
}

template <class Exec, verify_topology Topo, class Uni>
status sharded_walk(Exec& ex, const owned_ranges& own, const shard_scratch& sc, const std::int64_t* staged,
                    const Topo& topo, const verify_params& vp, const Uni& uni, const sharded_request& rq, walk_out& o) {
  const shard_span sh{staged, own.first, own.last, own.base, own.width};
  const std::int32_t n = topo.size();
  const bool probes = vp.mode != verify_mode::greedy && vp.mode != verify_mode::naive_matching;
  const shard_row_ops<Exec, Topo> ops{&ex,       sh,
                                      &topo,     sc.tags,
                                      n,         shard_rows(rq.p, rq.q, own, rq.V),
                                      sc.walk.R, uses_draft_probs(vp.mode),
                                      probes,    sc.walk.tp,
                                      sc.walk.tq};
  const walk_rows tagged{sc.tags, 1, 0, sc.tags + n, 1, 0, rq.V};  // row identities for the policy
  return verify_walk(topo, ops, uni, vp, tagged, sc.walk, o);
}

template <class Exec, class Uni>
status verify_tree_sharded_with(Exec& ex, std::span<const std::int64_t> bounds, const tree_view& tree,
                                const view2d<const float>& p, const view2d<const float>& q, const verify_params& vp,
                                const Uni& uni, const caller_uniforms* cu, std::span<std::byte> exec_ws,
                                std::span<std::byte> host_ws, std::span<node_id> path, std::span<token_id> tokens,
                                verify_result& result) {
  owned_ranges own{};
  shard_scratch sc{};
  const std::int32_t N = tree.size;
  auto local = [&]() -> status {
    SPECDEC_TRY(own_ranges(bounds, ex.rank(), ex.size(), own));
    if (N <= 0 || tree.parent == nullptr) return make_status(status_code::empty_input, "tree has no nodes");
    SPECDEC_TRY(check_shards(sharded_request{&own, bounds.back(), N, N > 1 ? N : 0, p, q}, vp));
    SPECDEC_TRY(carve_shards(own, bounds.size() - 1, N, exec_ws, host_ws, sc));
    const std::size_t cap = path.size() < tokens.size() ? path.size() : tokens.size();
    const bool has_q = q.data != nullptr || own.width == 0;
    SPECDEC_TRY(check_request_tree(tree.parent, tree.token, N, bounds.back(), vp, has_q, static_cast<std::int64_t>(cap),
                                   sc.walk.depth));  // params: check_shards
    if (tree.depth != nullptr) SPECDEC_TRY(validate_tree(tree));
    return status::success();
  };
  const std::int32_t nfp = N > 0 && tree.parent != nullptr && tree.token != nullptr ? N : 0;
  SPECDEC_TRY(agree_status(ex.coll(), local(), fingerprint_of(vp, bounds, nfp, tree.parent, tree.token, cu)));
  if (sc.walk.path == nullptr) return make_status(status_code::internal_error, "sharded walk scratch not carved");
  walk_out o{sc.walk.path, N, 0, 0, -1};
  const sharded_request rq{&own, bounds.back(), N, N > 1 ? N : 0, p, q};
  const std::int64_t* staged = ex.stage_bounds(bounds, sc.bounds);
  const status walked = sharded_walk(ex, own, sc, staged, parent_topology{tree.token, tree.parent, N}, vp, uni, rq, o);
  SPECDEC_TRY(executor_error(ex));  // a failed transport makes every result meaningless
  SPECDEC_TRY(walked);
  for (std::int32_t k = 0; k <= o.accepted; ++k) {
    path[static_cast<std::size_t>(k)] = sc.walk.path[k];
    if (k > 0) tokens[static_cast<std::size_t>(k - 1)] = tree.token[sc.walk.path[k]];
  }
  tokens[static_cast<std::size_t>(o.accepted)] = o.next;
  result = verify_result{o.accepted, o.last, o.next, status_code::ok};
  return status::success();
}

template <class Exec, class Uni>
status verify_chain_sharded_with(Exec& ex, std::span<const std::int64_t> bounds, std::span<const token_id> drafts,
                                 const view2d<const float>& p, const view2d<const float>& q, const verify_params& vp,
                                 const Uni& uni, const caller_uniforms* cu, std::span<std::byte> exec_ws,
                                 std::span<std::byte> host_ws, std::span<token_id> tokens, verify_result& result) {
  owned_ranges own{};
  shard_scratch sc{};
  const bool too_long = drafts.size() >= static_cast<std::size_t>(INT32_MAX);
  const std::int32_t n = too_long ? 1 : static_cast<std::int32_t>(drafts.size()) + 1;
  auto local = [&]() -> status {
    if (too_long) return make_status(status_code::invalid_argument, "too many drafts");
    SPECDEC_TRY(own_ranges(bounds, ex.rank(), ex.size(), own));
    SPECDEC_TRY(check_shards(sharded_request{&own, bounds.back(), n, n - 1, p, q}, vp));
    SPECDEC_TRY(validate_tokens(drafts.data(), n - 1, bounds.back()));
    SPECDEC_TRY(carve_shards(own, bounds.size() - 1, n, exec_ws, host_ws, sc));
    if (tokens.size() < static_cast<std::size_t>(n))
      return make_status(status_code::buffer_too_small, "tokens needs gamma + 1 entries");
    return status::success();
  };
  SPECDEC_TRY(agree_status(ex.coll(), local(), fingerprint_of(vp, bounds, n - 1, nullptr, drafts.data(), cu)));
  if (sc.walk.path == nullptr) return make_status(status_code::internal_error, "sharded walk scratch not carved");
  walk_out o{sc.walk.path, n, 0, 0, -1};
  const sharded_request rq{&own, bounds.back(), n, n - 1, p, q};
  const std::int64_t* staged = ex.stage_bounds(bounds, sc.bounds);
  const status walked = sharded_walk(ex, own, sc, staged, chain_topology{drafts.data(), n}, vp, uni, rq, o);
  SPECDEC_TRY(executor_error(ex));
  SPECDEC_TRY(walked);
  for (std::int32_t k = 0; k < o.last; ++k) tokens[static_cast<std::size_t>(k)] = drafts[static_cast<std::size_t>(k)];
  tokens[static_cast<std::size_t>(o.last)] = o.next;
  result = verify_result{o.last, o.last, o.next, status_code::ok};
  return status::success();
}

}  // namespace detail

//! Bytes of workspace one rank needs for verify_tree_sharded /
//! verify_chain_sharded: its columns as floats, three arrays of tile sums
//! over its ranges, four ints and one walk frame per node (256-byte aligned slices; 8-byte
//! aligned base). 0 for an invalid partition, rank or node count.
inline std::size_t sharded_verify_workspace_size(std::span<const std::int64_t> bounds, int rank, int size,
                                                 std::int32_t nodes) noexcept {
  std::size_t e = 0, h = 0;
  return detail::shard_scratch_bytes(bounds, rank, size, nodes, e, h) ? e + h : 0;
}

//! The two parts of sharded_verify_workspace_size for an executor whose
//! passes run elsewhere (parallel/cuda_shard.cuh): `exec` bytes where the
//! passes run (the residual and tile sums of this rank's columns, a copy of
//! the partition), `host` bytes in host memory (the walk's arrays). False
//! for an invalid partition, rank or node count.
inline bool sharded_verify_workspace_parts(std::span<const std::int64_t> bounds, int rank, int size, std::int32_t nodes,
                                           std::size_t& exec, std::size_t& host) noexcept {
  return detail::shard_scratch_bytes(bounds, rank, size, nodes, exec, host);
}

//! Where one sharded call's scratch lives: either one workspace of
//! sharded_verify_workspace_size bytes, which the call splits (for
//! executors whose passes read host memory, such as host_shard_executor),
//! or the two parts of sharded_verify_workspace_parts: `exec` in the memory
//! the executor's passes read (device memory for parallel/cuda_shard.cuh),
//! `host` in host memory.
struct shard_workspace {
  std::span<std::byte> exec;  //!< the executor part, or the whole workspace when `whole`
  std::span<std::byte> host;  //!< the host part (empty when `whole`)
  bool whole = false;         //!< `exec` holds both parts; the call splits it
  //! One workspace holding both parts (host executors).
  shard_workspace(std::span<std::byte> ws) noexcept : exec(ws), whole(true) {}  // NOLINT: implicit on purpose
  //! One workspace from any contiguous byte range (a std::vector<std::byte>).
  template <class R>
  requires std::constructible_from<std::span<std::byte>, R&> shard_workspace(R& ws) noexcept
      : shard_workspace(std::span<std::byte>(ws)) {}  // NOLINT: implicit on purpose
  //! The executor part and the host part.
  shard_workspace(std::span<std::byte> exec_part, std::span<std::byte> host_part) noexcept
      : exec(exec_part), host(host_part) {}
};

namespace detail {

//! Runs `body(exec, uniforms, exec_ws, host_ws)` with the executor (a
//! collective is wrapped in a host_shard_executor), the uniform source
//! (the caller's, else Philox keyed by vp) and the two workspace parts.
template <class X, class Body>
status with_shard_call(X& ex_or_coll, std::span<const std::int64_t> bounds, std::int32_t nodes,
                       const shard_workspace& ws, const verify_params& vp, const caller_uniforms* uniforms,
                       const Body& body) {
  auto on = [&](auto& ex) -> status {
    std::span<std::byte> e = ws.exec, h = ws.host;
    if (ws.whole) split_workspace(bounds, ex.rank(), ex.size(), nodes, ws.exec, e, h);
    if (uniforms != nullptr) return body(ex, *uniforms, e, h);
    return body(ex, philox_uniforms{rng_stream{vp.seed, vp.request, vp.round}}, e, h);
  };
  if constexpr (collective<X>) {
    host_shard_executor<X> ex(ex_or_coll);
    return on(ex);
  } else {
    return on(ex_or_coll);
  }
}

//! Nodes of a chain of `drafts` (1 when too long; the checks report it).
inline std::int32_t chain_nodes(std::span<const token_id> drafts) noexcept {
  return static_cast<std::int32_t>(drafts.size() < INT32_MAX ? drafts.size() + 1 : 1);
}

}  // namespace detail

//! Verifies one token tree on a vocabulary split over ranks. Collective:
//! every rank calls it with the same tree, parameters, partition and
//! uniforms. `ex`: a collective (the passes run on host rows through a
//! host_shard_executor) or a shard executor (parallel/shard_executor.hpp,
//! parallel/cuda_shard.cuh; p, q and the executor part of the workspace in
//! the memory its passes read). bounds: ranks + 1 column bounds (rank r
//! holds [bounds[r], bounds[r + 1]), any range may be empty, V =
//! bounds.back()). p, q: this rank's N x (bounds[r + 1] - bounds[r]) shards
//! (any strides; q read by the sampled modes). workspace: see
//! shard_workspace. uniforms: the caller's (host memory, the same on every
//! rank; ranks that pass different uniforms all get invalid_argument), or
//! null for the keyed Philox streams of vp. Tokens in the tree and in the
//! results are global ids. Outputs and errors as verify_tree, on every rank
//! (see the file comment for how errors agree). Traffic: one collective per
//! decision of at most 37 scalars (counting_collective counts them;
//! docs/parallel.md lists them). Deterministic; no allocation.
template <class X>
status verify_tree_sharded(X& ex, std::span<const std::int64_t> bounds, const tree_view& tree, view2d<const float> p,
                           view2d<const float> q, const verify_params& vp, const shard_workspace& workspace,
                           std::span<node_id> path, std::span<token_id> tokens, verify_result& result,
                           const caller_uniforms* uniforms = nullptr) {
  return detail::with_shard_call(ex, bounds, tree.size, workspace, vp, uniforms,
                                 [&](auto& e, const auto& uni, std::span<std::byte> ew, std::span<std::byte> hw) {
                                   return detail::verify_tree_sharded_with(e, bounds, tree, p, q, vp, uni, uniforms, ew,
                                                                           hw, path, tokens, result);
                                 });
}

//! Verifies a chain of drafts on a vocabulary split over ranks (as
//! verify_chain; executor, shards, workspace, uniforms and errors as
//! verify_tree_sharded; node i of the chain is draft position i).
template <class X>
status verify_chain_sharded(X& ex, std::span<const std::int64_t> bounds, std::span<const token_id> drafts,
                            view2d<const float> p, view2d<const float> q, const verify_params& vp,
                            const shard_workspace& workspace, std::span<token_id> tokens, verify_result& result,
                            const caller_uniforms* uniforms = nullptr) {
  return detail::with_shard_call(ex, bounds, detail::chain_nodes(drafts), workspace, vp, uniforms,
                                 [&](auto& e, const auto& uni, std::span<std::byte> ew, std::span<std::byte> hw) {
                                   return detail::verify_chain_sharded_with(e, bounds, drafts, p, q, vp, uni, uniforms,
                                                                            ew, hw, tokens, result);
                                 });
}

//! Single-process verify_tree in the partitioned summation order of
//! `bounds` (p, q: full N x V rows). Gives the tokens verify_tree_sharded
//! gives on bounds.size() - 1 ranks; with bounds {0, V} it equals
//! verify_tree. Workspace: sharded_verify_workspace_size(bounds, 0, 1, N).
//! uniforms: the caller's, or null for the keyed Philox streams of vp.
inline status verify_tree_partitioned(std::span<const std::int64_t> bounds, const tree_view& tree,
                                      view2d<const float> p, view2d<const float> q, const verify_params& vp,
                                      std::span<std::byte> workspace, std::span<node_id> path,
                                      std::span<token_id> tokens, verify_result& result,
                                      const caller_uniforms* uniforms = nullptr) noexcept {
  self_collective one;
  return verify_tree_sharded(one, bounds, tree, p, q, vp, workspace, path, tokens, result, uniforms);
}

//! Single-process verify_chain in the partitioned order of `bounds` (as
//! verify_tree_partitioned).
inline status verify_chain_partitioned(std::span<const std::int64_t> bounds, std::span<const token_id> drafts,
                                       view2d<const float> p, view2d<const float> q, const verify_params& vp,
                                       std::span<std::byte> workspace, std::span<token_id> tokens,
                                       verify_result& result, const caller_uniforms* uniforms = nullptr) noexcept {
  self_collective one;
  return verify_chain_sharded(one, bounds, drafts, p, q, vp, workspace, tokens, result, uniforms);
}

}  // namespace specdec
