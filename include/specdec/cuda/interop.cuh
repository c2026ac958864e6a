//! \file
//! Device side of the peers' formats (contract in kernels/interop.hpp).
//! No verification logic lives here: each kernel runs its host twin's
//! per-request SPECDEC_HD code (interop/sglang.hpp,
//! interop/sglang_verify.hpp) and, for sglang_verify_tree, the one
//! verification walk with the CUDA row policy of cuda/verify.cuh.
#pragma once

#include <cuda_runtime.h>

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "specdec/core/config.hpp"
#include "specdec/core/philox.hpp"
#include "specdec/core/status.hpp"
#include "specdec/core/workspace.hpp"
#include "specdec/cuda/check.cuh"
#include "specdec/cuda/verify.cuh"
#include "specdec/interop/results.hpp"
#include "specdec/interop/sglang.hpp"
#include "specdec/interop/sglang_build_tree.hpp"
#include "specdec/interop/sglang_verify.hpp"
#include "specdec/kernels/interop.hpp"
#include "specdec/verify/policy.hpp"
#include "specdec/verify/walk.hpp"

namespace specdec::cuda {

namespace detail {

//! Adds one accepted path to the device per-depth counters.
SPECDEC_DEVICE void count_depths(unsigned long long* per_depth, std::int32_t counters, std::int32_t accepted) {
  if (per_depth == nullptr) return;
  for (std::int32_t d = 1; d <= accepted && d <= counters; ++d) atomicAdd(per_depth + (d - 1), 1ull);
}

//! Request r's slice of a workspace of equal per-request slices.
SPECDEC_DEVICE workspace_carver request_slice(unsigned char* ws, std::size_t slice, std::int32_t r) {
  return workspace_carver(ws + slice * static_cast<std::size_t>(r), slice);
}

// Request r's scratch for the SGLang greedy walk: its slice of
// the launch workspace, carved as the host twins carve theirs.
SPECDEC_DEVICE specdec::detail::sglang_scratch sglang_request_scratch(unsigned char* ws, std::int32_t nodes,
                                                                      std::int32_t r) {
  workspace_carver w = request_slice(ws, specdec::detail::sglang_request_bytes(nodes), r);
  return specdec::detail::carve_sglang(w, nodes);
}

}  // namespace detail

//! Threads per block of the one-thread-per-request SGLang kernels.
inline constexpr int sglang_request_threads = 128;

//! SGLang's build_tree_kernel_efficient: thread r runs request r through
//! specdec::detail::sglang_build_tree_request (the host twin's code).
template <int Threads>
SPECDEC_KERNEL void __launch_bounds__(Threads)
    sglang_build_tree_kernel(const kernels::sglang_build_tree_params p, unsigned char* workspace) {
  const std::int64_t r = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= p.in.num_requests) return;
  const std::size_t slice = specdec::detail::sglang_build_tree_request_bytes(p.in.draft_token_num);
  const status st = specdec::detail::sglang_build_tree_request(p.in, static_cast<std::int32_t>(r), p.out,
                                                               workspace + slice * static_cast<std::size_t>(r));
  p.request_status[r] = static_cast<std::int32_t>(st.code());
}

//! FlashInfer's chain counters: thread r runs
//! specdec::detail::chain_counts_request (the host twin's code).
template <int Threads>
SPECDEC_KERNEL void __launch_bounds__(Threads) chain_counts_kernel(const kernels::chain_counts_params p) {
  const std::int64_t r = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= p.batch.num_requests) return;
  const status st = specdec::detail::chain_counts_request(p.batch, static_cast<std::int32_t>(r));
  p.request_status[r] = static_cast<std::int32_t>(st.code());
}

//! SGLang's verify_tree_greedy: thread r runs request r through
//! specdec::detail::sglang_greedy_request (the host twin's code).
template <std::integral I, std::integral P>
SPECDEC_KERNEL void __launch_bounds__(sglang_request_threads)
    sglang_greedy_kernel(const kernels::sglang_greedy_params<I, P> p, unsigned char* workspace) {
  const std::int64_t r = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= p.tree.num_requests) return;
  const auto ri = static_cast<std::int32_t>(r);
  const specdec::detail::sglang_scratch s = detail::sglang_request_scratch(workspace, p.tree.num_draft_tokens, ri);
  std::int32_t accepted = 0;
  const status st = specdec::detail::sglang_greedy_request(p.tree, ri, p.target_predict, p.num_speculative_tokens,
                                                           p.out, s, accepted);
  p.request_status[r] = static_cast<std::int32_t>(st.code());
  if (st.ok()) detail::count_depths(p.accepted_per_depth, p.depth_counters, accepted);
}

//! SGLang's tree_speculative_sampling_target_only: block r runs request r
//! through the host twin's code. Thread 0 walks the coins; the last sample
//! (a pass over V) is collective (cuda/verify.cuh's block_row_ops, in the
//! host's fixed tile order); thread 0 writes the outputs.
template <int Block, std::integral I, std::integral P>
SPECDEC_KERNEL void __launch_bounds__(Block)
    sglang_sampling_kernel(const kernels::sglang_sampling_params<I, P> p, unsigned char* workspace) {
  using ops_t = detail::block_row_ops<Block>;
  __shared__ typename ops_t::storage sh;
  __shared__ node_id walk_u;
  __shared__ std::int32_t walk_accepted, walk_rejected;
  const ops_t ops{sh};
  const auto r = static_cast<std::int32_t>(blockIdx.x);
  const std::int32_t n = p.tree.num_draft_tokens;
  const std::int64_t V = p.target_probs.extent[1];
  workspace_carver w = detail::request_slice(workspace, specdec::detail::sglang_sampling_request_bytes(n, V), r);
  const specdec::detail::sglang_sampling_scratch s = specdec::detail::carve_sglang_sampling(w, n, V);
  if (threadIdx.x == 0) {
    const float acc = p.thresholds.threshold_acc > 1e-9f ? p.thresholds.threshold_acc : 1e-9f;
    node_id u = 0;
    std::int32_t accepted = 0, rejected = 0;
    sh.code = static_cast<std::int32_t>(
        specdec::detail::sglang_sampling_walk(p.tree, r, p.target_probs, p.coins.data(), p.num_speculative_tokens,
                                              p.thresholds.threshold_single, acc, s.base, u, accepted, rejected)
            .code());
    walk_u = u;
    walk_accepted = accepted;
    walk_rejected = rejected;
  }
  __syncthreads();  // the walk's results, and its scratch in global memory
  const auto pre = static_cast<status_code>(sh.code);
  const node_id u = walk_u;
  const std::int32_t accepted = walk_accepted, rejected = walk_rejected;
  __syncthreads();  // read before the ops reuse the shared storage
  if (pre != status_code::ok) {
    if (threadIdx.x == 0) p.request_status[r] = static_cast<std::int32_t>(pre);
    return;
  }
  token_id pick = -1;
  const status st = specdec::detail::sglang_sampling_final(
      ops, specdec::detail::sglang_slot_row(p.target_probs, r, n, s.base.new_to_old[u]), V, s.base.ids, rejected,
      p.final_coins[static_cast<std::size_t>(r)], s.row, s.tiles, pick);
  if (threadIdx.x != 0) return;
  const status fin = st.ok() ? specdec::detail::sglang_sampling_finish(p.tree, r, p.num_speculative_tokens, p.out,
                                                                       s.base, u, accepted, pick)
                             : st;
  p.request_status[r] = static_cast<std::int32_t>(fin.code());
  if (fin.ok()) detail::count_depths(p.accepted_per_depth, p.depth_counters, accepted);
}

//! specdec's walk on SGLang's linked lists: block r verifies request r.
//! Thread 0 runs the host twin's prepare and finish steps; the walk is
//! collective (cuda/verify.cuh's block_row_ops).
template <int Block, std::integral I, std::integral P>
SPECDEC_KERNEL void __launch_bounds__(Block)
    sglang_verify_kernel(const kernels::sglang_verify_params<I, P> p, unsigned char* workspace) {
  using ops_t = detail::block_row_ops<Block>;
  __shared__ typename ops_t::storage sh;
  const ops_t ops{sh};
  const auto r = static_cast<std::int32_t>(blockIdx.x);
  const std::int32_t n = p.in.tree.num_draft_tokens;
  const std::int64_t V = p.in.p.extent[1];
  workspace_carver w = detail::request_slice(workspace, specdec::detail::sglang_verify_request_bytes(V, n), r);
  const specdec::detail::sglang_verify_scratch s = specdec::detail::carve_sglang_verify(w, V, n);
  if (threadIdx.x == 0) sh.code = static_cast<std::int32_t>(specdec::detail::sglang_verify_prepare(p.in, r, s).code());
  __syncthreads();
  const auto pre = static_cast<status_code>(sh.code);
  __syncthreads();
  if (pre != status_code::ok) {
    if (threadIdx.x == 0) p.request_status[r] = static_cast<std::int32_t>(pre);
    return;
  }
  const verify_params vp = p.in.params[r];
  const linked_topology topo = specdec::detail::sglang_verify_topology(p.in, s);
  const specdec::walk_rows rows = specdec::detail::sglang_verify_rows(p.in, r);
  specdec::walk_out o{s.walk.path, n, 0, 0, -1};
  const status st =
      p.in.uniforms != nullptr
          ? specdec::verify_walk(topo, ops, specdec::detail::sglang_verify_uniforms(p.in, r), vp, rows, s.walk, o)
          : specdec::verify_walk(topo, ops, philox_uniforms{rng_stream{vp.seed, vp.request, vp.round}}, vp, rows,
                                 s.walk, o);
  __syncthreads();  // the path written by thread 0
  if (threadIdx.x != 0) return;
  const status fin = st.ok() ? specdec::detail::sglang_verify_finish(p.in, r, p.out, s, o) : st;
  p.request_status[r] = static_cast<std::int32_t>(fin.code());
  if (fin.ok()) detail::count_depths(p.accepted_per_depth, p.depth_counters, o.accepted);
}

namespace detail {
inline unsigned request_blocks(std::int32_t requests) noexcept {
  return static_cast<unsigned>((requests + sglang_request_threads - 1) / sglang_request_threads);
}

//! The shell of the workspace-taking launches below: the entry point's
//! checks, nothing to do for an empty batch, the workspace check (need(p)
//! bytes, counted once the checks passed), then kernel<<<grid, block, 0,
//! stream>>>(p, workspace) and its launch status.
template <class Params>
status checked_launch(status checks, std::int64_t batch, const Params& p, void* workspace, std::size_t workspace_bytes,
                      std::type_identity_t<std::size_t (*)(const Params&)> need, const char* too_small,
                      std::type_identity_t<void (*)(Params, unsigned char*)> kernel, unsigned grid, unsigned block,
                      cudaStream_t stream) noexcept {
  SPECDEC_TRY(checks);
  if (batch == 0) return status::success();
  SPECDEC_TRY(check_workspace(workspace, workspace_bytes, need(p), too_small));
  kernel<<<grid, block, 0, stream>>>(p, static_cast<unsigned char*>(workspace));
  return last_launch_status();
}
}  // namespace detail

//! Checks and launches chain_counts_kernel on `stream` (the kernels API's
//! chain_acceptance_counts_batch, for engines compiling this header).
inline status chain_acceptance_counts_batch(const kernels::chain_counts_params& p, void* /*workspace*/,
                                            std::size_t /*workspace_bytes*/, cudaStream_t stream) noexcept {
  SPECDEC_TRY(kernels::chain_acceptance_counts_batch_can_implement(p));
  if (p.batch.num_requests == 0) return status::success();
  chain_counts_kernel<sglang_request_threads>
      <<<detail::request_blocks(p.batch.num_requests), sglang_request_threads, 0, stream>>>(p);
  return last_launch_status();
}

//! Checks and launches sglang_build_tree_kernel on `stream` (the kernels
//! API's sglang_build_tree, for engines compiling this header).
inline status sglang_build_tree(const kernels::sglang_build_tree_params& p, void* workspace,
                                std::size_t workspace_bytes, cudaStream_t stream) noexcept {
  return detail::checked_launch(kernels::sglang_build_tree_can_implement(p), p.in.num_requests, p, workspace,
                                workspace_bytes, &kernels::sglang_build_tree_workspace_size,
                                "workspace smaller than sglang_build_tree_workspace_size",
                                &sglang_build_tree_kernel<sglang_request_threads>,
                                detail::request_blocks(p.in.num_requests), sglang_request_threads, stream);
}

//! Checks and launches sglang_greedy_kernel on `stream` (the kernels API's
//! sglang_verify_tree_greedy, for engines compiling this header).
template <std::integral I, std::integral P>
status sglang_verify_tree_greedy(const kernels::sglang_greedy_params<I, P>& p, void* workspace,
                                 std::size_t workspace_bytes, cudaStream_t stream) noexcept {
  return detail::checked_launch(kernels::sglang_verify_tree_greedy_can_implement(p), p.tree.num_requests, p, workspace,
                                workspace_bytes, &kernels::sglang_verify_tree_greedy_workspace_size<I, P>,
                                "workspace smaller than sglang_verify_tree_greedy_workspace_size",
                                &sglang_greedy_kernel<I, P>, detail::request_blocks(p.tree.num_requests),
                                sglang_request_threads, stream);
}

//! Checks and launches sglang_sampling_kernel (verify_block_threads threads
//! per request) on `stream` (the kernels API's
//! sglang_tree_sampling_target_only, for engines compiling this header).
template <std::integral I, std::integral P>
status sglang_tree_sampling_target_only(const kernels::sglang_sampling_params<I, P>& p, void* workspace,
                                        std::size_t workspace_bytes, cudaStream_t stream) noexcept {
  return detail::checked_launch(kernels::sglang_tree_sampling_target_only_can_implement(p), p.tree.num_requests, p,
                                workspace, workspace_bytes,
                                &kernels::sglang_tree_sampling_target_only_workspace_size<I, P>,
                                "workspace smaller than sglang_tree_sampling_target_only_workspace_size",
                                &sglang_sampling_kernel<verify_block_threads, I, P>,
                                static_cast<unsigned>(p.tree.num_requests), verify_block_threads, stream);
}

//! Checks and launches sglang_verify_kernel (verify_block_threads threads
//! per request) on `stream` (the kernels API's sglang_verify_tree, for
//! engines compiling this header).
template <std::integral I, std::integral P>
status sglang_verify_tree(const kernels::sglang_verify_params<I, P>& p, void* workspace, std::size_t workspace_bytes,
                          cudaStream_t stream) noexcept {
  return detail::checked_launch(kernels::sglang_verify_tree_can_implement(p), p.in.tree.num_requests, p, workspace,
                                workspace_bytes, &kernels::sglang_verify_tree_workspace_size<I, P>,
                                "workspace smaller than sglang_verify_tree_workspace_size",
                                &sglang_verify_kernel<verify_block_threads, I, P>,
                                static_cast<unsigned>(p.in.tree.num_requests), verify_block_threads, stream);
}

}  // namespace specdec::cuda
