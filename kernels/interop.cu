// specdec::kernels peer formats: the compiled entry points around
// include/specdec/cuda/interop.cuh, instantiated for SGLang's index types
// (int64 trees and ids, int32 outputs).
#include "specdec/cuda/interop.cuh"
#include "specdec/kernels/interop.hpp"

namespace specdec::kernels {

status chain_acceptance_counts_batch(const chain_counts_params& params, void* workspace, std::size_t workspace_bytes,
                                     void* stream) noexcept {
  return cuda::chain_acceptance_counts_batch(params, workspace, workspace_bytes, static_cast<cudaStream_t>(stream));
}

status sglang_build_tree(const sglang_build_tree_params& params, void* workspace, std::size_t workspace_bytes,
                         void* stream) noexcept {
  return cuda::sglang_build_tree(params, workspace, workspace_bytes, static_cast<cudaStream_t>(stream));
}

status sglang_verify_tree_greedy(const sglang_greedy_params<std::int64_t, std::int32_t>& params, void* workspace,
                                 std::size_t workspace_bytes, void* stream) noexcept {
  return cuda::sglang_verify_tree_greedy(params, workspace, workspace_bytes, static_cast<cudaStream_t>(stream));
}

status sglang_tree_sampling_target_only(const sglang_sampling_params<std::int64_t, std::int32_t>& params,
                                        void* workspace, std::size_t workspace_bytes, void* stream) noexcept {
  return cuda::sglang_tree_sampling_target_only(params, workspace, workspace_bytes, static_cast<cudaStream_t>(stream));
}

status sglang_verify_tree(const sglang_verify_params<std::int64_t, std::int32_t>& params, void* workspace,
                          std::size_t workspace_bytes, void* stream) noexcept {
  return cuda::sglang_verify_tree(params, workspace, workspace_bytes, static_cast<cudaStream_t>(stream));
}

}  // namespace specdec::kernels
