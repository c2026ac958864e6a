// specdec::kernels batched verification: the compiled entry point around
// cuda::verify_batch (include/specdec/cuda/verify.cuh), which runs the
// shared verification walk with the CUDA row policy.
#include "specdec/cuda/verify.cuh"
#include "specdec/kernels/verify.hpp"

namespace specdec::kernels {

status verify_batch(const verify_batch_params& params, void* workspace, std::size_t workspace_bytes,
                    void* stream) noexcept {
  return cuda::verify_batch(params, workspace, workspace_bytes, static_cast<cudaStream_t>(stream));
}

}  // namespace specdec::kernels
