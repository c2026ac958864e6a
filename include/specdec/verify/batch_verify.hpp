//! \file
//! Batched tree verification (host): many requests' trees in one call,
//! stored back to back (ragged, CSR offsets), each with its own mode and
//! Philox key. A greedy request can sit next to a sampled one; a request
//! whose tree is only the root emits one token.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>

#include "specdec/core/status.hpp"
#include "specdec/core/view.hpp"
#include "specdec/core/workspace.hpp"
#include "specdec/sample/logits_rows.hpp"
#include "specdec/sample/sampling_params.hpp"
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
  //! Empty: p holds probabilities. Else R entries: p holds logits (fp32,
  //! bf16 or fp16) and request r's target rows are their sampling
  //! transform under p_sampling[r] (sample/row_transform.hpp), found per
  //! row and applied as the walk reads (the host twin of the kernel's
  //! logits rows: the same tokens).
  std::span<const sampling_params> p_sampling = {};
  //! q's, as p_sampling (read for requests whose mode reads q).
  std::span<const sampling_params> q_sampling = {};
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
//! every request), with room for two row transforms per node and a row of
//! weights when `logits_rows` (p_sampling or q_sampling given). 0 for
//! malformed offsets.
inline std::size_t verify_batch_workspace_size(std::int64_t vocab, std::span<const std::int32_t> offsets,
                                               bool logits_rows = false) noexcept {
  std::int32_t n = 0;
  for (std::size_t r = 0; r + 1 < offsets.size(); ++r) {
    const std::int32_t k = offsets[r + 1] - offsets[r];
    n = k > n ? k : n;
  }
  const std::size_t walk = verify_workspace_size(vocab, n);
  return walk == 0 || !logits_rows ? walk
                                   : walk + 2 * align_up(static_cast<std::size_t>(n) * sizeof(row_transform)) +
                                         align_up(static_cast<std::size_t>(vocab) * sizeof(float));
}

namespace detail {

//! Request r's row transforms (its p rows under p_sampling[r], its q rows
//! under q_sampling[r] when its mode reads q): invalid_argument for bad
//! sampling params, else ok (a bad row's transform carries its code and
//! the walk reports it when it reads the row).
inline status transform_request_rows(const verify_batch_input& in, std::size_t r, const rows_view& pr,
                                     const rows_view& qr, row_transform* px, row_transform* qx,
                                     std::span<float> weights) noexcept {
  const std::int32_t n = in.offsets[r + 1] - in.offsets[r];
  SPECDEC_TRY(check_rows(pr, qr, n, n > 1 ? n : 0, in.params[r]));  // the shapes the rows are read with
  const std::int64_t V = pr.extent[1];
  if (V > logits_rows_max_vocab) return make_status(status_code::invalid_argument, "logits rows of more than 2^23");
  auto fill = [&](const rows_view& rows, const sampling_params& sp, row_transform* out) {
    SPECDEC_TRY(validate_sampling_params(sp));
    if (!sampling_transformable(sp))
      return make_status(status_code::invalid_argument, "temperature too small (1/T overflows); use 0 for greedy");
    for (std::int32_t u = 0; u < n; ++u)
      out[u] = make_row_transform(
          row_ref{static_cast<const char*>(rows.data) + u * rows.stride[0] * row_dtype_bytes(rows.dtype),
                  rows.stride[1], rows.dtype},
          V, sp, weights);
    return status::success();
  };
  if (!in.p_sampling.empty()) SPECDEC_TRY(fill(pr, in.p_sampling[r], px));
  if (!in.q_sampling.empty() && uses_draft_probs(in.params[r].mode) && qr.data != nullptr && n > 1)
    SPECDEC_TRY(fill(qr, in.q_sampling[r], qx));
  return status::success();
}

}  // namespace detail

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
  if ((!in.p_sampling.empty() && in.p_sampling.size() != R) || (!in.q_sampling.empty() && in.q_sampling.size() != R))
    return make_status(status_code::size_mismatch, "p_sampling and q_sampling need none or one entry per request");
  const bool logits = !in.p_sampling.empty() || !in.q_sampling.empty();
  if (workspace.size() < verify_batch_workspace_size(V, in.offsets, logits))
    return make_status(status_code::buffer_too_small, "workspace smaller than verify_batch_workspace_size");
  std::int32_t n_max = 0;
  for (std::size_t r = 0; r < R; ++r) n_max = std::max(n_max, in.offsets[r + 1] - in.offsets[r]);
  // Logits rows: each request's row transforms first, then the walk's scratch.
  row_transform* px = nullptr;
  row_transform* qx = nullptr;
  std::span<float> weights;
  if (logits && V > 0) {
    if (!detail::aligned8(workspace.data()))
      return make_status(status_code::invalid_argument, "workspace must be 8-byte aligned");
    workspace_carver w(workspace.data(), workspace.size());
    px = w.take<row_transform>(static_cast<std::size_t>(n_max));
    qx = w.take<row_transform>(static_cast<std::size_t>(n_max));
    weights = std::span<float>(w.take<float>(static_cast<std::size_t>(V)), static_cast<std::size_t>(V));
    workspace = workspace.subspan(w.bytes_used());
  }

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
    status st = logits ? detail::transform_request_rows(in, r, pr, qr, px, qx, weights) : status::success();
    const row_transform* pxr = in.p_sampling.empty() ? nullptr : px;
    const row_transform* qxr = in.q_sampling.empty() ? nullptr : qx;
    if (st.ok())
      st = in.uniforms.empty()
               ? detail::verify_tree_with(
                     t, pr, qr, in.params[r],
                     philox_uniforms{rng_stream{in.params[r].seed, in.params[r].request, in.params[r].round}},
                     workspace, path_r, tok_r, res, detail::host_row_ops{}, pxr, qxr)
           : in.uniforms.data() == nullptr
               ? make_status(status_code::invalid_argument, "caller uniforms have no data")
               : detail::verify_tree_with(
                     t, pr, qr, in.params[r],
                     caller_uniforms{in.uniforms.data() + static_cast<std::ptrdiff_t>(b) * in.draws_per_node, n,
                                     in.draws_per_node},
                     workspace, path_r, tok_r, res, detail::host_row_ops{}, pxr, qxr);
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
