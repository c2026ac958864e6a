// Small helpers for the GPU tests: an owning device buffer and copies.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

#include <cuda_runtime.h>

namespace specdec_test {

inline void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

//! Owning device allocation of n elements of T.
template <class T>
class device_buffer {
 public:
  explicit device_buffer(std::size_t n) : n_(n) {
    if (n_ > 0) cuda_check(cudaMalloc(reinterpret_cast<void**>(&p_), n_ * sizeof(T)), "cudaMalloc");
  }
  explicit device_buffer(const std::vector<T>& host) : device_buffer(host.size()) { upload(host); }
  ~device_buffer() {
    if (p_ != nullptr) cudaFree(p_);
  }
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;

  void upload(const std::vector<T>& host) {
    if (host.size() != n_) throw std::runtime_error("device_buffer::upload: size mismatch");
    if (n_ > 0) cuda_check(cudaMemcpy(p_, host.data(), n_ * sizeof(T), cudaMemcpyHostToDevice), "upload");
  }
  std::vector<T> download() const {
    std::vector<T> host(n_);
    if (n_ > 0) cuda_check(cudaMemcpy(host.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost), "download");
    return host;
  }
  T* data() const noexcept { return p_; }
  std::size_t size() const noexcept { return n_; }

 private:
  T* p_ = nullptr;
  std::size_t n_ = 0;
};

//! Captures launch(stream) into a CUDA graph on a new stream (global capture
//! mode: any synchronizing or allocating call in any thread breaks the
//! capture), runs the graph once and waits. This is how an engine replays a
//! decode step; launch returns false when the entry point refused.
template <class Launch>
void run_in_graph(Launch&& launch) {
  cudaStream_t stream = nullptr;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  std::string error;
  cuda_check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  cuda_check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), "cudaStreamBeginCapture");
  const bool launched = launch(stream);
  const cudaError_t end = cudaStreamEndCapture(stream, &graph);
  if (!launched)
    error = "the entry point refused the captured launch";
  else if (end != cudaSuccess)
    error = std::string("cudaStreamEndCapture: ") + cudaGetErrorString(end);
  else if (const cudaError_t e = cudaGraphInstantiate(&exec, graph, 0); e != cudaSuccess)
    error = std::string("cudaGraphInstantiate: ") + cudaGetErrorString(e);
  else if (const cudaError_t e2 = cudaGraphLaunch(exec, stream); e2 != cudaSuccess)
    error = std::string("cudaGraphLaunch: ") + cudaGetErrorString(e2);
  else if (const cudaError_t e3 = cudaStreamSynchronize(stream); e3 != cudaSuccess)
    error = std::string("cudaStreamSynchronize: ") + cudaGetErrorString(e3);
  if (exec != nullptr) cudaGraphExecDestroy(exec);
  if (graph != nullptr) cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
  if (!error.empty()) throw std::runtime_error(error);
}

}  // namespace specdec_test
