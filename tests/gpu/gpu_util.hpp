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

namespace detail {

//! The stream, graph and executable graph of a capture, released in
//! reverse order (a capture still open is ended first).
struct graph_resources {
  cudaStream_t stream = nullptr;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  bool capturing = false;
  graph_resources() = default;
  graph_resources(const graph_resources&) = delete;
  graph_resources& operator=(const graph_resources&) = delete;
  ~graph_resources() {
    if (capturing) {
      cudaGraph_t partial = nullptr;
      (void)cudaStreamEndCapture(stream, &partial);
      if (partial != nullptr) cudaGraphDestroy(partial);
    }
    if (exec != nullptr) cudaGraphExecDestroy(exec);
    if (graph != nullptr) cudaGraphDestroy(graph);
    if (stream != nullptr) cudaStreamDestroy(stream);
  }
};

//! Captures launch(stream) on a new non-blocking stream (global capture
//! mode) into r and instantiates the graph; throws when launch returns
//! false or on any CUDA error.
template <class Launch>
void capture_graph(graph_resources& r, Launch& launch) {
  cuda_check(cudaStreamCreateWithFlags(&r.stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  cuda_check(cudaStreamBeginCapture(r.stream, cudaStreamCaptureModeGlobal), "cudaStreamBeginCapture");
  r.capturing = true;
  const bool launched = launch(r.stream);
  r.capturing = false;
  cuda_check(cudaStreamEndCapture(r.stream, &r.graph), "cudaStreamEndCapture");
  if (!launched) throw std::runtime_error("the entry point refused the captured launch");
  cuda_check(cudaGraphInstantiate(&r.exec, r.graph, 0), "cudaGraphInstantiate");
}

}  // namespace detail

//! Captures launch(stream) into a CUDA graph on a new stream (global capture
//! mode: any synchronizing or allocating call in any thread breaks the
//! capture), runs the graph once and waits. This is how an engine replays a
//! decode step; launch returns false when the entry point refused. Throws
//! on any CUDA error, with the capture ended and everything released.
template <class Launch>
void run_in_graph(Launch&& launch) {
  detail::graph_resources r;
  detail::capture_graph(r, launch);
  cuda_check(cudaGraphLaunch(r.exec, r.stream), "cudaGraphLaunch");
  cuda_check(cudaStreamSynchronize(r.stream), "cudaStreamSynchronize");
}

//! Captured once as run_in_graph does, replayed any number of times: the
//! launches' device buffers are refilled in place (device_buffer::upload)
//! between replays, as an engine reuses one graph for every decode step.
class captured_graph {
 public:
  template <class Launch>
  explicit captured_graph(Launch&& launch) {
    detail::capture_graph(r_, launch);
  }
  captured_graph(const captured_graph&) = delete;
  captured_graph& operator=(const captured_graph&) = delete;

  //! Runs the graph once and waits. The whole device is synchronized first:
  //! an upload from pageable memory may return before its copy has landed,
  //! and the graph's non-blocking stream does not wait for the legacy stream.
  void replay() {
    cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    cuda_check(cudaGraphLaunch(r_.exec, r_.stream), "cudaGraphLaunch");
    cuda_check(cudaStreamSynchronize(r_.stream), "cudaStreamSynchronize");
  }

 private:
  detail::graph_resources r_;
};

}  // namespace specdec_test
