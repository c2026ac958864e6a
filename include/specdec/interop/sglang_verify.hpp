//! \file
//! Lossless tree verification on SGLang's own batch layout: the trees stay
//! linked lists over slots (no conversion to a parent array), the rows stay
//! in slot order (row of request r, slot s at r * num_draft_tokens + s, as
//! SGLang's target_probs), and the results come out as SGLang's
//! `accept_index` / `accept_token_num` / `predicts` plus acceptance per
//! depth. The walk is specdec's one verification walk
//! (verify/walk.hpp) over linked_topology, so every lossless mode
//! (greedy, sampled i.i.d. / without replacement, deterministic) and the
//! named lossy ones (naive_matching, typical_lossy) keep their guarantees;
//! block and traversal verification are refused (`unsupported`).
//!
//! Node ids of the walk are SGLang's slots: the keyed Philox uniforms of a
//! request are keyed by slot, and caller uniforms are laid out
//! [batch * num_draft_tokens][draws_per_node], slot-major (see
//! caller_uniforms). Children are visited in list order.
//!
//! The per-request pieces (sglang_verify_prepare before the walk,
//! sglang_verify_finish after it) are the code the CUDA twin
//! (kernels::sglang_verify_tree, cuda/interop.cuh) runs on the device.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>

#include "specdec/core/config.hpp"
#include "specdec/core/philox.hpp"
#include "specdec/core/status.hpp"
#include "specdec/core/view.hpp"
#include "specdec/core/workspace.hpp"
#include "specdec/interop/detail/request_status.hpp"
#include "specdec/interop/detail/sglang_verify_inputs.hpp"
#include "specdec/interop/results.hpp"
#include "specdec/interop/sglang.hpp"
#include "specdec/tree/token_tree.hpp"
#include "specdec/verify/detail/row_ops.hpp"
#include "specdec/verify/policy.hpp"
#include "specdec/verify/verify_params.hpp"
#include "specdec/verify/walk.hpp"

namespace specdec {

namespace detail {

//! Before the walk (one thread): request r's links narrowed to int32 and
//! validated (validate_linked_tree), its tokens checked against V (the
//! root's is unused and becomes 0), its verify_params checked, the mode
//! supported and its rows present, and its depth at most
//! num_speculative_tokens - 1 (buffer_too_small otherwise).
template <std::integral I>
SPECDEC_HD status sglang_verify_prepare(const sglang_verify_inputs<I>& in, std::int32_t r,
                                        const sglang_verify_scratch& s) noexcept {
  const sglang_tree_batch<I>& b = in.tree;
  const std::int32_t n = b.num_draft_tokens;
  const std::int64_t o = static_cast<std::int64_t>(r) * n;
  const verify_params& vp = in.params[r];
  SPECDEC_TRY(validate_verify_params(vp));
  if (is_traversal(vp.mode))
    return make_status(status_code::unsupported, "block and traversal verification are not offered on linked lists");
  if (uses_draft_probs(vp.mode) && n > 1 && in.q.data == nullptr)
    return make_status(status_code::invalid_argument, "this mode needs the draft rows q");
  for (std::int32_t i = 0; i < n; ++i) {
    const I nt = b.retrive_next_token[o + i], ns = b.retrive_next_sibling[o + i];
    if (nt < -1 || nt >= n || ns < -1 || ns >= n)
      return make_status(status_code::parent_out_of_range, "link out of range", i);
    s.next[i] = static_cast<std::int32_t>(nt);
    s.sibling[i] = static_cast<std::int32_t>(ns);
  }
  SPECDEC_TRY(validate_linked_tree(s.next, s.sibling, n, s.check));
  const std::int64_t V = in.p.extent[1];
  s.token[0] = 0;
  for (std::int32_t i = 1; i < n; ++i) {
    const I t = b.candidates[o + i];
    if (t < 0 || t >= V) return make_status(status_code::token_out_of_range, "candidate token out of range", i);
    s.token[i] = static_cast<token_id>(t);
  }
  // Depth of the reached slots, breadth first (each slot is linked once).
  std::int32_t head = 0, tail = 1, max_depth = 0;
  s.walk.queue[0] = 0;
  s.walk.depth[0] = 0;
  while (head < tail) {
    const std::int32_t u = s.walk.queue[head++];
    for (std::int32_t c = s.next[u]; c != -1; c = s.sibling[c]) {
      s.walk.depth[c] = s.walk.depth[u] + 1;
      max_depth = s.walk.depth[c] > max_depth ? s.walk.depth[c] : max_depth;
      s.walk.queue[tail++] = c;
    }
  }
  if (max_depth > in.num_speculative_tokens - 1)
    return make_status(status_code::buffer_too_small, "tree deeper than num_speculative_tokens - 1");
  return status::success();
}

//! The walk's topology, rows and output of request r (after prepare).
template <std::integral I>
SPECDEC_HD linked_topology sglang_verify_topology(const sglang_verify_inputs<I>& in,
                                                  const sglang_verify_scratch& s) noexcept {
  return linked_topology{s.token, s.next, s.sibling, in.tree.num_draft_tokens};
}

template <std::integral I>
SPECDEC_HD walk_rows sglang_verify_rows(const sglang_verify_inputs<I>& in, std::int32_t r) noexcept {
  const std::int64_t o = static_cast<std::int64_t>(r) * in.tree.num_draft_tokens;
  const float* q = in.q.data != nullptr ? in.q.data + o * in.q.stride[0] : nullptr;
  return walk_rows{in.p.data + o * in.p.stride[0],
                   in.p.stride[0],
                   in.p.stride[1],
                   q,
                   in.q.stride[0],
                   in.q.stride[1],
                   in.p.extent[1]};
}

template <std::integral I>
SPECDEC_HD caller_uniforms sglang_verify_uniforms(const sglang_verify_inputs<I>& in, std::int32_t r) noexcept {
  const std::int64_t o = static_cast<std::int64_t>(r) * in.tree.num_draft_tokens;
  return caller_uniforms{in.uniforms + o * in.draws_per_node, in.tree.num_draft_tokens, in.draws_per_node};
}

//! After the walk (one thread): SGLang's outputs of request r from the
//! walk's path (slots) and next token.
template <std::integral I, std::integral P>
SPECDEC_HD status sglang_verify_finish(const sglang_verify_inputs<I>& in, std::int32_t r, const sglang_outputs<P>& out,
                                       const sglang_verify_scratch& s, const walk_out& o) noexcept {
  const auto un = static_cast<std::size_t>(in.tree.num_draft_tokens);
  const std::size_t base = static_cast<std::size_t>(r) * un;
  for (std::int32_t k = 1; k <= o.accepted; ++k) s.emitted[k - 1] = s.token[s.walk.path[k]];
  s.emitted[o.accepted] = o.next;
  const view1d<P> ai = out.accept_index.slice(r);
  return write_sglang_results<I, P>(std::span<const node_id>(s.walk.path, un), std::span<const token_id>(s.emitted, un),
                                    o.accepted, std::span<const std::int32_t>{},
                                    std::span<const I>(in.tree.retrive_index + base, un),
                                    std::span<P>(ai.data, static_cast<std::size_t>(in.num_speculative_tokens)),
                                    out.accept_token_num[static_cast<std::size_t>(r)], out.predicts);
}

}  // namespace detail

//! Bytes of host workspace sglang_verify_tree needs (one request's scratch,
//! reused; 256-byte aligned).
inline std::size_t sglang_verify_tree_workspace_size(std::int32_t num_draft_tokens, std::int64_t vocab) noexcept {
  return detail::sglang_verify_request_bytes(vocab, num_draft_tokens);
}

//! Verifies every request of an SGLang batch with its verify_params' mode
//! (see the file comment) and writes SGLang's outputs.
//! - accepted_per_depth (may be empty): entry d - 1 is incremented for
//!   every request whose accepted path reaches depth d.
//! - request_status: empty = stop at the first failing request and return
//!   its status (index = request; requests before it are written); else
//!   num_requests entries receive each request's code and the call goes on
//!   (as the CUDA twin does), returning success after the whole-call checks.
//! A failing request writes none of its outputs. Deterministic for given
//! keys or uniforms; identical to verify_tree on the same tree as a parent
//! array with children in list order (tests/interop/test_sglang_verify.cpp).
template <std::integral I, std::integral P>
status sglang_verify_tree(const sglang_verify_inputs<I>& in, const sglang_outputs<P>& out,
                          std::span<std::int64_t> accepted_per_depth, std::span<status_code> request_status,
                          std::span<std::byte> workspace) noexcept {
  SPECDEC_TRY(detail::check_sglang_verify(in, out));
  SPECDEC_TRY(detail::check_request_status(request_status, in.tree.num_requests));
  if (in.tree.num_requests == 0) return status::success();
  const std::int64_t V = in.p.extent[1];
  workspace_carver w(workspace.data(), workspace.size());
  if (workspace.size() < detail::sglang_verify_request_bytes(V, in.tree.num_draft_tokens))
    return make_status(status_code::buffer_too_small, "workspace smaller than sglang_verify_tree_workspace_size");
  if (!w.base_aligned()) return make_status(status_code::invalid_argument, "workspace must be 256-byte aligned");
  const detail::sglang_verify_scratch s = detail::carve_sglang_verify(w, V, in.tree.num_draft_tokens);
  const detail::host_row_ops ops{};
  return detail::raise_or_record(in.tree.num_requests, request_status, [&](std::int32_t r) {
    walk_out o{s.walk.path, in.tree.num_draft_tokens, 0, 0, -1};
    status st = detail::sglang_verify_prepare(in, r, s);
    if (st.ok()) {
      const verify_params& vp = in.params[r];
      const auto topo = detail::sglang_verify_topology(in, s);
      const auto rows = detail::sglang_verify_rows(in, r);
      st = in.uniforms != nullptr ? verify_walk(topo, ops, detail::sglang_verify_uniforms(in, r), vp, rows, s.walk, o)
                                  : verify_walk(topo, ops, philox_uniforms{rng_stream{vp.seed, vp.request, vp.round}},
                                                vp, rows, s.walk, o);
    }
    if (st.ok()) st = detail::sglang_verify_finish(in, r, out, s, o);
    if (st.ok()) count_acceptance_per_depth(o.accepted, accepted_per_depth);
    return st;
  });
}

}  // namespace specdec
