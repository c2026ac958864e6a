//! \file
//! The per-request checks shared by the host verifiers and the CUDA
//! verification kernel: the same inputs give the same status code on both.
#pragma once

#include <cstdint>

#include "specdec/core/config.hpp"
#include "specdec/core/status.hpp"
#include "specdec/tree/token_tree.hpp"
#include "specdec/tree/validate.hpp"
#include "specdec/verify/verify_params.hpp"

namespace specdec {

namespace detail {

//! check_verify_request after its parameter check, for callers that validated
//! the parameters already (one validation per call).
SPECDEC_HD constexpr status check_request_tree(const node_id* parent, const token_id* token, std::int32_t n,
                                               std::int64_t vocab, const verify_params& vp, bool has_q,
                                               std::int64_t capacity, std::int32_t* depth) noexcept {
  if (n > 0 && token == nullptr) return make_status(status_code::invalid_argument, "tree has no token array");
  SPECDEC_TRY(validate_topological_parents(parent, n));
  SPECDEC_TRY(validate_tokens(token, n, vocab));
  if (uses_draft_probs(vp.mode) && n > 1 && !has_q)
    return make_status(status_code::invalid_argument, "this mode needs the draft rows q");
  std::int32_t max_depth = 0;
  depth[0] = 0;
  for (std::int32_t i = 1; i < n; ++i) {
    depth[i] = depth[parent[i]] + 1;
    max_depth = depth[i] > max_depth ? depth[i] : max_depth;
  }
  if (capacity < static_cast<std::int64_t>(max_depth) + 1)
    return make_status(status_code::buffer_too_small, "path and tokens need max depth + 1 entries");
  if (vp.mode == verify_mode::block && max_depth != n - 1)
    return make_status(status_code::invalid_argument,
                       "block verification needs a chain (at most one child per node); use verify_mode::traversal");
  return status::success();
}

}  // namespace detail

//! Checks one tree request before its walk, in this order: the parameters
//! (validate_verify_params), the parent array (validate_topological_parents:
//! empty_input, no_root, multiple_roots, parent_out_of_range,
//! not_topological), the tokens (token_out_of_range), the presence of q for
//! a sampled mode with drafts (invalid_argument), the output capacity
//! (buffer_too_small when the tree is deeper than capacity - 1), and for
//! verify_mode::block a chain (invalid_argument otherwise). Writes the
//! node depths to `depth` (n ints). O(n), no allocation.
SPECDEC_HD constexpr status check_verify_request(const node_id* parent, const token_id* token, std::int32_t n,
                                                 std::int64_t vocab, const verify_params& vp, bool has_q,
                                                 std::int64_t capacity, std::int32_t* depth) noexcept {
  SPECDEC_TRY(validate_verify_params(vp));
  return detail::check_request_tree(parent, token, n, vocab, vp, has_q, capacity, depth);
}

}  // namespace specdec
