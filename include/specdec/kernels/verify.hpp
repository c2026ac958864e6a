//! \file
//! CUDA batched tree verification (host API of specdec::kernels). The
//! device twin of specdec::verify_batch (verify/batch_verify.hpp): same
//! modes, same walk, same Philox keys (verify/verify_params.hpp), one
//! thread block per request, vocabulary-parallel row passes. The block and
//! traversal modes are host-only for now: such a request gets
//! `unsupported` in its result code.
//!
//! Equality with the host path: every decision uses the same uniforms and
//! the same element-wise formulas (residual updates use non-contracted
//! float arithmetic on both sides, acceptance tests the same double
//! products), but row masses and inverse-CDF prefix sums are reduced in a
//! different order (the host's fixed 8-lane order with float partial sums
//! over 32-element blocks; per-thread double sums and CUB block trees on
//! the device). Masses therefore agree to about 1e-7 relative, and a token
//! can differ only when a uniform lands that close to a cumulative-sum or
//! acceptance boundary (probability ~1e-7 per draw); with random inputs the
//! tokens are identical. Typical acceptance also uses the device log/exp,
//! so a typical threshold equal to an entry within a few ulps may decide
//! differently.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "specdec/core/status.hpp"
#include "specdec/tree/token_tree.hpp"
#include "specdec/verify/verify_params.hpp"

namespace specdec::kernels {

//! Device pointers and sizes of one batched verification launch. All
//! pointers are device memory. Trivially copyable (passed by value to the
//! kernel).
struct verify_batch_params {
  const std::int32_t* offsets = nullptr;  //!< R + 1 node offsets (strictly increasing, offsets[0] = 0)
  const token_id* token = nullptr;        //!< concatenated tree tokens
  const node_id* parent = nullptr;        //!< concatenated local parent ids (root -1)
  const float* p = nullptr;               //!< offsets[R] target rows, unit column stride
  std::int64_t p_row_stride = 0;          //!< elements between consecutive p rows (>= vocab)
  const float* q = nullptr;               //!< draft rows like p; may be null if no request reads q
  std::int64_t q_row_stride = 0;
  const verify_params* params = nullptr;  //!< R per-request settings
  std::int32_t num_requests = 0;          //!< R
  std::int32_t vocab = 0;                 //!< V
  std::int32_t max_nodes = 0;             //!< an upper bound on every request's node count
  std::int32_t out_stride = 0;            //!< L: row length of paths and tokens (>= deepest tree + 1)
  node_id* paths = nullptr;               //!< R x L accepted node ids (row r: root first)
  token_id* tokens = nullptr;             //!< R x L emitted tokens
  verify_result* results = nullptr;       //!< R results; code = per-request status
  void* workspace = nullptr;              //!< verify_batch_workspace_size bytes, 16-byte aligned
  std::size_t workspace_bytes = 0;
};

static_assert(std::is_trivially_copyable_v<verify_batch_params>);

//! Bytes of device workspace: per request V floats (residual) rounded up to
//! 16 bytes, plus 8 bytes per node (typical-acceptance thresholds).
std::size_t verify_batch_workspace_size(std::int32_t num_requests, std::int32_t vocab, std::int32_t max_nodes) noexcept;

//! Checks what can be checked on the host without reading device memory:
//! non-null pointers, positive sizes, strides, workspace size and
//! alignment. Per-request problems (malformed trees, out-of-range tokens,
//! NaN rows, a request longer than max_nodes or deeper than L) are found
//! by the kernel and reported in results[r].code (outputs of that request
//! untouched).
status verify_batch_can_implement(const verify_batch_params& params) noexcept;

//! Launches the verification of every request (asynchronous on `stream`, a
//! cudaStream_t; null = default stream). Returns the launch status; read
//! results[] after synchronizing. Deterministic for given keys.
status verify_batch(const verify_batch_params& params, void* stream) noexcept;

}  // namespace specdec::kernels
