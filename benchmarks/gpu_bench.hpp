// What the bench_gpu_* programs share: the no-device skip, an owning device
// buffer, uploads, and the CUDA-event timing loop (manual time).
#pragma once

#include <benchmark/benchmark.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

namespace gpu_bench {

// Skips the benchmark (and returns true) when no CUDA device is visible.
inline bool skip_without_device(benchmark::State& state) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0) return false;
  state.SkipWithError("no CUDA device");
  return true;
}

// cudaMalloc'd bytes, freed on destruction; p is null when allocation failed.
struct dev_buf {
  void* p = nullptr;
  explicit dev_buf(std::size_t bytes) {
    if (cudaMalloc(&p, std::max<std::size_t>(bytes, 1)) != cudaSuccess) p = nullptr;
  }
  ~dev_buf() {
    if (p != nullptr) cudaFree(p);
  }
  dev_buf(dev_buf&& o) noexcept : p(std::exchange(o.p, nullptr)) {}
  dev_buf(const dev_buf&) = delete;
  dev_buf& operator=(const dev_buf&) = delete;
  dev_buf& operator=(dev_buf&&) = delete;
  template <class T>
  T* as() const {
    return static_cast<T*>(p);
  }
};

// Copies h to d (allocated with at least h's bytes); false on failure.
template <class T>
bool upload(dev_buf& d, const std::vector<T>& h) {
  return d.p != nullptr &&
         (h.empty() || cudaMemcpy(d.p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice) == cudaSuccess);
}

// A new buffer holding a copy of h.
template <class T>
dev_buf device_copy(const std::vector<T>& h) {
  dev_buf d(h.size() * sizeof(T));
  upload(d, h);
  return d;
}

// The benchmark loop timed with CUDA events on the default stream (for
// UseManualTime): `launch()` enqueues one call and returns false on a launch
// error, which skips the benchmark.
template <class Launch>
void timed_loop(benchmark::State& state, Launch launch) {
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  for (auto _ : state) {
    cudaEventRecord(e0);
    if (!launch()) {
      state.SkipWithError("launch failed");
      break;
    }
    cudaEventRecord(e1);
    cudaEventSynchronize(e1);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    state.SetIterationTime(static_cast<double>(ms) / 1e3);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
}

}  // namespace gpu_bench
