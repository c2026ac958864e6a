//! \file
//! Batched tree verification (host): many requests' trees in one call,
//! stored back to back (ragged, CSR offsets), each with its own mode and
//! Philox key. A greedy request can sit next to a sampled one; a request
//! whose tree is only the root emits one token.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "specdec/core/status.hpp"
#include "specdec/core/view.hpp"
#include "specdec/tree/token_tree.hpp"
#include "specdec/verify/tree_verify.hpp"
#include "specdec/verify/verify_params.hpp"

namespace specdec {

//! Inputs of a batch of R requests.
//! - offsets: R + 1 entries, offsets[0] = 0, strictly increasing (every
//!   request has at least its root); request r owns nodes and rows
//!   [offsets[r], offsets[r + 1]).
//! - nodes: the concatenated trees; parent ids are local to each request
//!   (root -1, others in [0, local id)); depth/score arrays optional.
//! - p: offsets[R] x V target rows; q: offsets[R] x V draft rows (may be
//!   empty when no request uses a sampled mode).
//! - params: R entries (mode, seed, request key, round, ...).
//! - uniforms: empty for the keyed Philox streams, or the caller's
//!   uniforms: offsets[R] x draws_per_node doubles, node-major over the
//!   concatenated nodes (request r's node u at row offsets[r] + u; layout
//!   of caller_uniforms).
struct verify_batch_input {
  std::span<const std::int32_t> offsets;  //!< R + 1 node offsets; request r owns [offsets[r], offsets[r + 1])
  tree_view nodes;                        //!< concatenated trees, parent ids local to each request
  rows_view p;                            //!< offsets[R] x V target probability rows (fp32, bf16 or fp16)
  rows_view q;  //!< offsets[R] x V draft probability rows (may be empty without sampled modes)
  std::span<const verify_params> params;  //!< R per-request verification parameters
  std::span<const double> uniforms = {};  //!< caller's uniforms, offsets[R] x draws_per_node; empty = keyed Philox
  std::int32_t draws_per_node = 0;        //!< uniforms per node in `uniforms`
};

//! Outputs of a batch: row r of `paths` / `tokens` (R x L, L >= the
//! deepest tree's depth + 1) receives request r's accepted path and emitted
//! tokens as in verify_tree; `results` has R entries. When
//! `accepted_per_depth` is not empty (size D), entry d - 1 is incremented
//! for every request whose accepted path reaches depth d <= D (deeper
//! acceptances are not counted), so accepted_per_depth[d - 1] / R is the
//! batch's acceptance rate at depth d.
struct verify_batch_output {
  view2d<node_id> paths;             //!< R x L: accepted path of each request, root first
  view2d<token_id> tokens;           //!< R x L: emitted tokens of each request
  std::span<verify_result> results;  //!< R per-request results
  std::span<std::int64_t>
      accepted_per_depth;  //!< optional, size D: requests whose accepted path reaches depth d, at d - 1
};

//! Workspace for verify_batch: the largest single-request need (reused by
//! every request). 0 for malformed offsets.
inline std::size_t verify_batch_workspace_size(std::int64_t vocab, std::span<const std::int32_t> offsets) noexcept {
  std::int32_t n = 0;
  for (std::size_t r = 0; r + 1 < offsets.size(); ++r) {
    const std::int32_t k = offsets[r + 1] - offsets[r];
    n = k > n ? k : n;
  }
  return verify_workspace_size(vocab, n);
}

//! Verifies every request of the batch in order, each independently (its
//! result depends only on its own inputs and Philox key, never on its
//! position). Batch-level checks (offsets, shapes, sizes) fail the whole
//! call before anything is written. A request whose own inputs are bad
//! (malformed tree, NaN in a visited row, too-small output row...) gets
//! its code in results[r].code and rows r of paths/tokens untouched; the
//! other requests are still verified, and the call returns the first such
//! error with the request index as status index.
//! Cost: the sum of the requests' verify_tree costs; no allocation.
inline status verify_batch(const verify_batch_input& in, std::span<std::byte> workspace,
                           const verify_batch_output& out) noexcept {
  if (in.offsets.size() < 1) return make_status(status_code::invalid_argument, "offsets needs R + 1 entries");
  const std::size_t R = in.offsets.size() - 1;
  if (in.params.size() != R) return make_status(status_code::size_mismatch, "params needs one entry per request");
  if (out.results.size() != R) return make_status(status_code::size_mismatch, "results needs one entry per request");
  if (out.paths.extent[0] != static_cast<std::int64_t>(R) || out.tokens.extent[0] != static_cast<std::int64_t>(R))
    return make_status(status_code::size_mismatch, "paths and tokens need one row per request");
  if (in.offsets[0] != 0) return make_status(status_code::invalid_argument, "offsets[0] must be 0");
  for (std::size_t r = 0; r < R; ++r)
    if (in.offsets[r + 1] <= in.offsets[r])
      return make_status(status_code::not_sorted, "offsets must be strictly increasing (each request has a root)",
                         static_cast<std::int64_t>(r));
  const std::int32_t total = in.offsets[R];
  if (total != in.nodes.size) return make_status(status_code::size_mismatch, "offsets[R] must equal nodes.size");
  if (R > 0 && (in.nodes.token == nullptr || in.nodes.parent == nullptr))
    return make_status(status_code::invalid_argument, "nodes needs token and parent arrays");
  if (in.p.extent[0] != total) return make_status(status_code::size_mismatch, "p needs offsets[R] rows");
  const std::int64_t V = in.p.extent[1];
  bool any_q = false;
  for (const auto& vp : in.params) any_q = any_q || uses_draft_probs(vp.mode);
  if (any_q && in.q.extent[0] != total) return make_status(status_code::size_mismatch, "q needs offsets[R] rows");
  if (!in.uniforms.empty() &&
      (in.draws_per_node <= 0 ||
       in.uniforms.size() / static_cast<std::size_t>(in.draws_per_node) < static_cast<std::size_t>(total)))
    return make_status(status_code::size_mismatch, "uniforms needs offsets[R] x draws_per_node entries");
  if (workspace.size() < verify_batch_workspace_size(V, in.offsets))
    return make_status(status_code::buffer_too_small, "workspace smaller than verify_batch_workspace_size");

  if ((out.paths.stride[1] != 1 && out.paths.extent[1] > 1) || (out.tokens.stride[1] != 1 && out.tokens.extent[1] > 1))
    return make_status(status_code::invalid_argument, "paths and tokens rows must be contiguous (stride 1)");
  status first = status::success();
  const std::size_t L = out.paths.extent[1] < out.tokens.extent[1] ? static_cast<std::size_t>(out.paths.extent[1])
                                                                   : static_cast<std::size_t>(out.tokens.extent[1]);
  for (std::size_t r = 0; r < R; ++r) {
    const std::int32_t b = in.offsets[r];
    const std::int32_t n = in.offsets[r + 1] - b;
    tree_view t{in.nodes.token + b, in.nodes.parent + b, in.nodes.depth ? in.nodes.depth + b : nullptr,
                in.nodes.score ? in.nodes.score + b : nullptr, n};
    const rows_view pr = in.p.rows(b, n);
    const rows_view qr = uses_draft_probs(in.params[r].mode) ? in.q.rows(b, n) : in.q;
    const view1d<node_id> prow_out = out.paths.slice(static_cast<std::int64_t>(r));
    const view1d<token_id> trow_out = out.tokens.slice(static_cast<std::int64_t>(r));
    verify_result res{};
    const std::span<node_id> path_r(prow_out.data, L);
    const std::span<token_id> tok_r(trow_out.data, L);
    const status st =
        in.uniforms.empty()
            ? verify_tree(t, pr, qr, in.params[r], workspace, path_r, tok_r, res)
            : verify_tree(t, pr, qr, in.params[r],
                          caller_uniforms{in.uniforms.data() + static_cast<std::ptrdiff_t>(b) * in.draws_per_node, n,
                                          in.draws_per_node},
                          workspace, path_r, tok_r, res);
    if (!st.ok()) {
      out.results[r] = verify_result{0, 0, -1, st.code()};
      if (first.ok()) first = make_status(st.code(), st.message(), static_cast<std::int64_t>(r));
      continue;
    }
    out.results[r] = res;
    for (std::int32_t d = 1; d <= res.accepted && static_cast<std::size_t>(d) <= out.accepted_per_depth.size(); ++d)
      ++out.accepted_per_depth[static_cast<std::size_t>(d - 1)];
  }
  return first;
}

}  // namespace specdec
