// specdec::kernels KV commit: an instantiation of include/specdec/cuda/cache.cuh
// behind the plain C++ API.
#include "specdec/cuda/cache.cuh"
#include "specdec/kernels/cache.hpp"

namespace specdec::kernels {

status kv_commit(const kv_commit_params& p, void* workspace, std::size_t workspace_bytes, void* stream) noexcept {
  return cuda::kv_commit(p, workspace, workspace_bytes, static_cast<cudaStream_t>(stream));
}

}  // namespace specdec::kernels
