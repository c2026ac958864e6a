// specdec::kernels: batched ancestor-closed top-B pruning, an instantiation
// of include/specdec/cuda/draft.cuh behind the plain C++ API.
#include "specdec/cuda/draft.cuh"
#include "specdec/kernels/draft.hpp"

namespace specdec::kernels {

std::size_t batch_prune_workspace_size(const batch_prune_params& p) noexcept {
  return cuda::batch_prune_workspace_size(p);
}

status batch_prune_to_budget(const batch_prune_params& p, void* workspace, std::size_t workspace_bytes,
                             void* stream) noexcept {
  return cuda::batch_prune_to_budget<256>(p, workspace, workspace_bytes, static_cast<cudaStream_t>(stream));
}

}  // namespace specdec::kernels
