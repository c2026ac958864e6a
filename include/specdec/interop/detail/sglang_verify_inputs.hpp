//! \file
//! The inputs of sglang_verify_tree (interop/sglang_verify.hpp), the size
//! of one request's scratch and the whole-call checks: what the kernels'
//! host API (kernels/interop.hpp) needs to size and check a launch, without
//! the verification walk.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>

#include "specdec/core/config.hpp"
#include "specdec/core/status.hpp"
#include "specdec/core/view.hpp"
#include "specdec/core/workspace.hpp"
#include "specdec/interop/results.hpp"
#include "specdec/interop/sglang.hpp"
#include "specdec/tree/token_tree.hpp"
#include "specdec/verify/verify_params.hpp"
#include "specdec/verify/walk_state.hpp"

namespace specdec {

//! Inputs of sglang_verify_tree (host: host memory; CUDA twin: device
//! memory). Trivially copyable.
template <std::integral I>
struct sglang_verify_inputs {
  sglang_tree_batch<I> tree{};            //!< SGLang's linked-list trees (candidates[slot 0] unused)
  view2d<const float> p{};                //!< [batch * num_draft_tokens][V] target rows, by slot
  view2d<const float> q{};                //!< draft rows like p (null data: none; needed by the sampled modes)
  const verify_params* params = nullptr;  //!< num_requests per-request settings (mode, seed, request, round, ...)
  //! Null: the keyed Philox streams of params; else
  //! [batch * num_draft_tokens][draws_per_node] caller uniforms, slot-major.
  const double* uniforms = nullptr;
  std::int32_t draws_per_node = 0;          //!< uniforms per slot in `uniforms`
  std::int32_t num_speculative_tokens = 0;  //!< columns of accept_index; trees deeper than this - 1 are refused
};

namespace detail {

//! One request's scratch: the walk's (for V and n) then the int32 links,
//! the tokens, a check array and the emitted tokens (n entries each).
struct sglang_verify_scratch {
  walk_scratch walk;
  std::int32_t* next;
  std::int32_t* sibling;
  token_id* token;
  std::int32_t* check;
  token_id* emitted;
};

SPECDEC_HD sglang_verify_scratch carve_sglang_verify(workspace_carver& w, std::int64_t V, std::int32_t n) noexcept {
  const auto un = static_cast<std::size_t>(n);
  sglang_verify_scratch s{};
  s.walk = carve_walk_scratch(w, V, n);
  s.next = w.take<std::int32_t>(un);
  s.sibling = w.take<std::int32_t>(un);
  s.token = w.take<token_id>(un);
  s.check = w.take<std::int32_t>(un);
  s.emitted = w.take<token_id>(un);
  return s;
}

//! Bytes of one request's scratch (a multiple of workspace_alignment).
SPECDEC_HD std::size_t sglang_verify_request_bytes(std::int64_t V, std::int32_t n) noexcept {
  if (V < 1 || n < 1) return 0;
  workspace_carver w;
  (void)carve_sglang_verify(w, V, n);
  return w.bytes_used();
}

//! The whole-call checks (host and CUDA launcher: no element is read).
template <std::integral I, std::integral P>
SPECDEC_HD status check_sglang_verify(const sglang_verify_inputs<I>& in, const sglang_outputs<P>& out) noexcept {
  SPECDEC_TRY(check_sglang_shapes(in.tree, in.num_speculative_tokens, out, 0));
  if (in.tree.num_requests == 0) return status::success();
  const std::int64_t slots = static_cast<std::int64_t>(in.tree.num_requests) * in.tree.num_draft_tokens;
  if (in.p.data == nullptr || in.p.extent[0] < slots)
    return make_status(status_code::size_mismatch, "p needs one row per slot");
  if (in.p.extent[1] < 1) return make_status(status_code::empty_input, "target rows are empty");
  if (in.q.data != nullptr && (in.q.extent[0] < slots || in.q.extent[1] != in.p.extent[1]))
    return make_status(status_code::size_mismatch, "q needs one row of V entries per slot");
  if (in.params == nullptr) return make_status(status_code::invalid_argument, "params must not be null");
  if (in.uniforms != nullptr && in.draws_per_node <= 0)
    return make_status(status_code::invalid_argument, "draws_per_node must be positive with caller uniforms");
  return status::success();
}

}  // namespace detail

}  // namespace specdec
