// specdec::kernels token-tree entry points: explicit instantiations of
// include/specdec/cuda/tree.cuh behind the plain C++ API.
#include "specdec/cuda/tree.cuh"
#include "specdec/kernels/tree.hpp"

namespace specdec::kernels {

status build_tree_masks_batched(const tree_masks_params<std::uint32_t>& b, void* workspace, std::size_t workspace_bytes,
                                void* stream) noexcept {
  return cuda::build_tree_masks_batched(b, workspace, workspace_bytes, static_cast<cudaStream_t>(stream));
}

status build_tree_masks_batched(const tree_masks_params<std::uint64_t>& b, void* workspace, std::size_t workspace_bytes,
                                void* stream) noexcept {
  return cuda::build_tree_masks_batched(b, workspace, workspace_bytes, static_cast<cudaStream_t>(stream));
}

}  // namespace specdec::kernels
