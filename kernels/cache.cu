// specdec::kernels KV commit and keep lists: an instantiation of
// include/specdec/cuda/cache.cuh behind the plain C++ API.
#include "specdec/cuda/cache.cuh"
#include "specdec/kernels/cache.hpp"

namespace specdec::kernels {

status commit_kv(const kv_commit_params& p, void* workspace, std::size_t workspace_bytes, void* stream) noexcept {
  return cuda::commit_kv(p, workspace, workspace_bytes, static_cast<cudaStream_t>(stream));
}

status keep_indices_from_results(const keep_from_results_batch& b, void* workspace, std::size_t workspace_bytes,
                                 void* stream) noexcept {
  return cuda::keep_indices_from_results(b, workspace, workspace_bytes, static_cast<cudaStream_t>(stream));
}

}  // namespace specdec::kernels
