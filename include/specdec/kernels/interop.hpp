//! \file
//! CUDA twins of the peers' tree-verification kernels, on the peers' own
//! formats (host API of specdec::kernels; plain C++, no CUDA header needed):
//! - sglang_verify_tree_greedy: SGLang's verify_tree_greedy (target argmax
//!   ids in `target_predict`, linked-list trees, root unused);
//! - sglang_tree_sampling_target_only: SGLang's
//!   tree_speculative_sampling_target_only with its coin rule and the
//!   threshold_single / threshold_acc knobs (LOSSY below 1, see
//!   interop/sglang.hpp), a thread block per request;
//! - sglang_build_tree: SGLang's build_tree_kernel_efficient (EAGLE's
//!   parent_list / selected_index to mask, positions and linked lists, the
//!   three mask modes; interop/sglang_build_tree.hpp);
//! - chain_acceptance_counts_batch: FlashInfer's accepted_num (acceptances
//!   counted past the first rejection) next to the emitted count, per chain;
//! - sglang_verify_tree: specdec's lossless verification walk on SGLang's
//!   linked lists and slot-ordered rows, SGLang's outputs and acceptance
//!   per depth out (interop/sglang_verify.hpp).
//! Each kernel runs the per-request SPECDEC_HD code of its host twin
//! (interop/sglang.hpp, interop/sglang_verify.hpp), so host and device give
//! the same outputs and status codes (tests/gpu/test_interop.cpp).
//!
//! Convention (core/workspace.hpp): X_workspace_size(params) -> bytes,
//! X_can_implement(params) -> status (host checks only, no device memory
//! read), X(params, workspace, bytes, stream). Every pointer and span in
//! the params is device memory. Per-request failures land in
//! request_status[r] (a status_code value; ok = 0) and leave that request's
//! outputs untouched; the other requests are still verified. The library
//! instantiates int64 trees and ids (SGLang's) with int32 outputs; other
//! index types: compile cuda/interop.cuh and call specdec::cuda::X.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>

#include "specdec/core/status.hpp"
#include "specdec/interop/detail/sglang_verify_inputs.hpp"
#include "specdec/interop/results.hpp"
#include "specdec/interop/sglang.hpp"
#include "specdec/interop/sglang_build_tree.hpp"

namespace specdec::kernels {

//! Parameters of sglang_verify_tree_greedy (device memory; trivially copyable).
template <std::integral I, std::integral P>
struct sglang_greedy_params {
  sglang_tree_batch<I> tree{};              //!< the linked-list trees
  std::span<const I> target_predict{};      //!< target argmax id per row (indexed by retrive_index)
  std::int32_t num_speculative_tokens = 0;  //!< accept at most this - 1 drafts per request
  sglang_outputs<P> out{};                  //!< predicts, accept_index, accept_token_num
  std::int32_t* request_status = nullptr;   //!< num_requests status codes (required)
  //! Optional (null = not counted): entry d - 1 counts (atomically) the
  //! requests whose accepted path reaches depth d <= depth_counters.
  unsigned long long* accepted_per_depth = nullptr;
  std::int32_t depth_counters = 0;  //!< entries of accepted_per_depth
};

//! Parameters of sglang_tree_sampling_target_only (device memory).
template <std::integral I, std::integral P>
struct sglang_sampling_params {
  sglang_tree_batch<I> tree{};                       //!< the linked-list trees
  view2d<const float> target_probs{};                //!< [batch * num_draft_tokens][V], row by slot
  std::span<const float> coins{};                    //!< one coin per slot
  std::span<const float> final_coins{};              //!< one coin per request
  std::int32_t num_speculative_tokens = 0;           //!< accept at most this - 1 drafts per request
  sglang_thresholds thresholds{};                    //!< 1, 1: exact; lower: LOSSY
  sglang_outputs<P> out{};                           //!< predicts, accept_index, accept_token_num
  std::int32_t* request_status = nullptr;            //!< num_requests status codes (required)
  unsigned long long* accepted_per_depth = nullptr;  //!< optional per-depth counters (as above)
  std::int32_t depth_counters = 0;                   //!< entries of accepted_per_depth
};

//! Parameters of sglang_verify_tree (device memory).
template <std::integral I, std::integral P>
struct sglang_verify_params {
  sglang_verify_inputs<I> in{};                      //!< trees, rows, per-request settings, uniforms
  sglang_outputs<P> out{};                           //!< predicts, accept_index, accept_token_num
  std::int32_t* request_status = nullptr;            //!< num_requests status codes (required)
  unsigned long long* accepted_per_depth = nullptr;  //!< optional per-depth counters (as above)
  std::int32_t depth_counters = 0;                   //!< entries of accepted_per_depth
};

//! Parameters of sglang_build_tree (device memory).
struct sglang_build_tree_params {
  sglang_build_tree_inputs in{};           //!< parent_list, selected_index, verified_seq_len, shape, mask mode
  sglang_build_tree_outputs out{};         //!< mask, positions, linked lists
  std::int32_t* request_status = nullptr;  //!< num_requests status codes (required)
};

static_assert(std::is_trivially_copyable_v<sglang_build_tree_params>);
static_assert(std::is_trivially_copyable_v<sglang_greedy_params<std::int64_t, std::int32_t>>);
static_assert(std::is_trivially_copyable_v<sglang_sampling_params<std::int64_t, std::int32_t>>);
static_assert(std::is_trivially_copyable_v<sglang_verify_params<std::int64_t, std::int32_t>>);

}  // namespace specdec::kernels

// In specdec::detail, not specdec::kernels::detail: a kernels::detail
// namespace would hide specdec::detail from the other kernels headers.
namespace specdec::detail {
inline status check_interop_launch(std::int32_t num_requests, const std::int32_t* request_status,
                                   const unsigned long long* per_depth, std::int32_t depth_counters) noexcept {
  if (num_requests > 0 && request_status == nullptr)
    return make_status(status_code::invalid_argument, "request_status must not be null");
  if (per_depth != nullptr && depth_counters <= 0)
    return make_status(status_code::invalid_argument, "depth_counters must be positive with accepted_per_depth");
  return status::success();
}
//! One slice of sglang_workspace_size(num_draft_tokens) per request of `tree`.
template <std::integral I>
std::size_t sglang_batch_bytes(const sglang_tree_batch<I>& tree) noexcept {
  if (tree.num_requests <= 0) return 0;
  return sglang_request_bytes(tree.num_draft_tokens) * static_cast<std::size_t>(tree.num_requests);
}
}  // namespace specdec::detail

namespace specdec::kernels {

//! Device workspace of sglang_verify_tree_greedy: one slice of
//! sglang_workspace_size(num_draft_tokens) per request.
template <std::integral I, std::integral P>
std::size_t sglang_verify_tree_greedy_workspace_size(const sglang_greedy_params<I, P>& p) noexcept {
  return specdec::detail::sglang_batch_bytes(p.tree);
}

//! Host checks of sglang_verify_tree_greedy: the whole-call checks of the
//! host twin (shapes, predicts covering target_predict) and the pointers.
template <std::integral I, std::integral P>
status sglang_verify_tree_greedy_can_implement(const sglang_greedy_params<I, P>& p) noexcept {
  SPECDEC_TRY(specdec::detail::check_sglang_shapes(p.tree, p.num_speculative_tokens, p.out, p.target_predict.size()));
  return specdec::detail::check_interop_launch(p.tree.num_requests, p.request_status, p.accepted_per_depth,
                                               p.depth_counters);
}

//! Device workspace of sglang_tree_sampling_target_only: one slice of
//! sglang_sampling_workspace_size(num_draft_tokens, V) per request (the
//! last row's copy and tile sums, V floats and ceil(V / 1024) doubles, next to
//! the tree scratch).
template <std::integral I, std::integral P>
std::size_t sglang_tree_sampling_target_only_workspace_size(const sglang_sampling_params<I, P>& p) noexcept {
  if (p.tree.num_requests <= 0) return 0;
  return specdec::detail::sglang_sampling_request_bytes(p.tree.num_draft_tokens, p.target_probs.extent[1]) *
         static_cast<std::size_t>(p.tree.num_requests);
}

//! Host checks of sglang_tree_sampling_target_only: the host twin's
//! whole-call checks (shapes, row and coin counts, thresholds in (0, 1]).
template <std::integral I, std::integral P>
status sglang_tree_sampling_target_only_can_implement(const sglang_sampling_params<I, P>& p) noexcept {
  SPECDEC_TRY(specdec::detail::check_sglang_shapes(p.tree, p.num_speculative_tokens, p.out, 0));
  const std::size_t slots =
      static_cast<std::size_t>(p.tree.num_requests) * static_cast<std::size_t>(p.tree.num_draft_tokens);
  SPECDEC_TRY(specdec::detail::check_sglang_sampling(slots, p.tree.num_requests, p.target_probs, p.coins.size(),
                                                     p.final_coins.size(), p.thresholds));
  return specdec::detail::check_interop_launch(p.tree.num_requests, p.request_status, p.accepted_per_depth,
                                               p.depth_counters);
}

//! Device workspace of sglang_verify_tree: one slice of
//! sglang_verify_tree_workspace_size(num_draft_tokens, V) per request.
template <std::integral I, std::integral P>
std::size_t sglang_verify_tree_workspace_size(const sglang_verify_params<I, P>& p) noexcept {
  if (p.in.tree.num_requests <= 0) return 0;
  return specdec::detail::sglang_verify_request_bytes(p.in.p.extent[1], p.in.tree.num_draft_tokens) *
         static_cast<std::size_t>(p.in.tree.num_requests);
}

//! Host checks of sglang_verify_tree: the host twin's whole-call checks.
template <std::integral I, std::integral P>
status sglang_verify_tree_can_implement(const sglang_verify_params<I, P>& p) noexcept {
  SPECDEC_TRY(specdec::detail::check_sglang_verify(p.in, p.out));
  return specdec::detail::check_interop_launch(p.in.tree.num_requests, p.request_status, p.accepted_per_depth,
                                               p.depth_counters);
}

//! Parameters of chain_acceptance_counts_batch (device memory).
struct chain_counts_params {
  chain_counts_batch batch{};              //!< drafts, rows, coins, outputs
  std::int32_t* request_status = nullptr;  //!< num_requests status codes (required)
};

static_assert(std::is_trivially_copyable_v<chain_counts_params>);

//! Device workspace of chain_acceptance_counts_batch: none.
inline std::size_t chain_acceptance_counts_batch_workspace_size(const chain_counts_params&) noexcept { return 0; }

//! Host checks of chain_acceptance_counts_batch: the host twin's whole-call checks.
inline status chain_acceptance_counts_batch_can_implement(const chain_counts_params& p) noexcept {
  SPECDEC_TRY(specdec::detail::check_chain_counts(p.batch));
  return specdec::detail::check_interop_launch(p.batch.num_requests, p.request_status, nullptr, 0);
}

//! FlashInfer's accepted_num next to the emitted count for a batch of
//! chains, one thread per request running the host twin's per-request code
//! (chain_acceptance_counts_batch, interop/results.hpp). Needs no workspace.
status chain_acceptance_counts_batch(const chain_counts_params& params, void* workspace, std::size_t workspace_bytes,
                                     void* stream) noexcept;

//! Device workspace of sglang_build_tree: one slice per request.
inline std::size_t sglang_build_tree_workspace_size(const sglang_build_tree_params& p) noexcept {
  if (p.in.num_requests <= 0) return 0;
  return specdec::detail::sglang_build_tree_request_bytes(p.in.draft_token_num) *
         static_cast<std::size_t>(p.in.num_requests);
}

//! Host checks of sglang_build_tree: the host twin's whole-call checks.
inline status sglang_build_tree_can_implement(const sglang_build_tree_params& p) noexcept {
  SPECDEC_TRY(specdec::detail::check_sglang_build_tree(p.in, p.out));
  return specdec::detail::check_interop_launch(p.in.num_requests, p.request_status, nullptr, 0);
}

//! SGLang's build_tree_kernel_efficient on the device, one thread per
//! request running the host twin's per-request code (asynchronous on
//! `stream`). As below.
status sglang_build_tree(const sglang_build_tree_params& params, void* workspace, std::size_t workspace_bytes,
                         void* stream) noexcept;

//! SGLang's verify_tree_greedy on the device, one thread per request
//! (asynchronous on `stream`, a cudaStream_t; null = default stream).
//! `workspace`: sglang_verify_tree_greedy_workspace_size bytes, 256-byte
//! aligned. Returns the can_implement / workspace status or the launch
//! status. Deterministic.
status sglang_verify_tree_greedy(const sglang_greedy_params<std::int64_t, std::int32_t>& params, void* workspace,
                                 std::size_t workspace_bytes, void* stream) noexcept;

//! SGLang's tree_speculative_sampling_target_only on the device, one thread
//! per request (the final sample scans the row on that thread: O(V) per
//! request; sglang_verify_tree uses a block per request). As above.
status sglang_tree_sampling_target_only(const sglang_sampling_params<std::int64_t, std::int32_t>& params,
                                        void* workspace, std::size_t workspace_bytes, void* stream) noexcept;

//! specdec's verification walk on SGLang's linked lists, one thread block
//! per request with the row policy of verify_batch (cuda/verify.cuh). As
//! above. The same outputs, codes and per-depth counts as the host
//! sglang_verify_tree for every mode but typical_lossy (device log/exp).
status sglang_verify_tree(const sglang_verify_params<std::int64_t, std::int32_t>& params, void* workspace,
                          std::size_t workspace_bytes, void* stream) noexcept;

}  // namespace specdec::kernels
