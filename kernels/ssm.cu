// specdec::kernels: tree-masked SSM scan and tree conv1d, single trees and
// ragged batches (float, double),
// instantiations of include/specdec/cuda/ssm.cuh behind the plain C++ API.
#include "specdec/cuda/ssm.cuh"
#include "specdec/kernels/ssm.hpp"

namespace specdec::kernels {

status tree_scan(const tree_scan_params<float>& p, void* workspace, std::size_t workspace_bytes,
                 void* stream) noexcept {
  return cuda::tree_scan(p, workspace, workspace_bytes, static_cast<cudaStream_t>(stream));
}
status tree_scan(const tree_scan_params<double>& p, void* workspace, std::size_t workspace_bytes,
                 void* stream) noexcept {
  return cuda::tree_scan(p, workspace, workspace_bytes, static_cast<cudaStream_t>(stream));
}
status tree_conv1d(const tree_conv1d_params<float>& p, void* workspace, std::size_t workspace_bytes,
                   void* stream) noexcept {
  return cuda::tree_conv1d(p, workspace, workspace_bytes, static_cast<cudaStream_t>(stream));
}
status tree_conv1d(const tree_conv1d_params<double>& p, void* workspace, std::size_t workspace_bytes,
                   void* stream) noexcept {
  return cuda::tree_conv1d(p, workspace, workspace_bytes, static_cast<cudaStream_t>(stream));
}

status tree_scan_batch(const tree_scan_batch_params<float>& p, void* workspace, std::size_t workspace_bytes,
                       void* stream) noexcept {
  return cuda::tree_scan_batch(p, workspace, workspace_bytes, static_cast<cudaStream_t>(stream));
}
status tree_scan_batch(const tree_scan_batch_params<double>& p, void* workspace, std::size_t workspace_bytes,
                       void* stream) noexcept {
  return cuda::tree_scan_batch(p, workspace, workspace_bytes, static_cast<cudaStream_t>(stream));
}
status tree_conv1d_batch(const tree_conv1d_batch_params<float>& p, void* workspace, std::size_t workspace_bytes,
                         void* stream) noexcept {
  return cuda::tree_conv1d_batch(p, workspace, workspace_bytes, static_cast<cudaStream_t>(stream));
}
status tree_conv1d_batch(const tree_conv1d_batch_params<double>& p, void* workspace, std::size_t workspace_bytes,
                         void* stream) noexcept {
  return cuda::tree_conv1d_batch(p, workspace, workspace_bytes, static_cast<cudaStream_t>(stream));
}

}  // namespace specdec::kernels
