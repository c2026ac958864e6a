// Shared helpers of the CUDA entry points (built when specdec::kernels is,
// SPECDEC_PYTHON_HAS_CUDA): device array aliases, the device guard, the
// call's device scratch, offsets read on the host, the caller's stream.
// Every call runs on the caller's stream (an integer cudaStream_t handle;
// 0 = legacy default) and on the device of its arrays, checks with
// X_can_implement (and the shape checks of its binding) before anything is
// enqueued, and takes its scratch from the caller's workspace array, or
// stream-ordered memory when none is given.
#pragma once

#if defined(SPECDEC_PYTHON_HAS_CUDA)

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "common.hpp"
#include "specdec/core/workspace.hpp"

namespace specdec::python {

//! Device arrays: 1-D contiguous, or strided of a fixed rank.
template <class T>
using dev1 = nb::ndarray<T, nb::ndim<1>, nb::c_contig, nb::device::cuda>;
template <class T, int R>
using dev_nd = nb::ndarray<T, nb::ndim<R>, nb::device::cuda>;
using dev_bytes = nb::ndarray<std::uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cuda>;
//! Probability rows on a CUDA device: float32, float16 or bfloat16 (rows_of).
using dev_rows = nb::ndarray<nb::ro, nb::ndim<2>, nb::device::cuda>;
using any_dev = nb::ndarray<nb::device::cuda>;
//! An int32 vector on either side (offsets are read on the host).
using any_i32 = nb::ndarray<const std::int32_t, nb::ndim<1>, nb::c_contig>;

inline void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw error(std::string("cuda_error: ") + what + ": " + cudaGetErrorString(e));
}

inline cudaStream_t stream_of(std::uintptr_t handle) { return reinterpret_cast<cudaStream_t>(handle); }

//! The one device of a call's arrays, made current for the launch (and the
//! previous device restored after it).
class device_guard {
 public:
  device_guard() = default;
  device_guard(const device_guard&) = delete;
  device_guard& operator=(const device_guard&) = delete;
  ~device_guard() {
    if (prev_ >= 0 && prev_ != dev_) (void)cudaSetDevice(prev_);
  }
  //! Adds arrays (each followed by its name for the error message); none
  //! for an empty optional.
  template <class A, class... More>
  void add(const A& a, const char* name, const More&... more) {
    add_one(a, name);
    if constexpr (sizeof...(More) > 0) add(more...);
  }
  //! The arrays' device (-1 before any was added).
  int device() const { return dev_; }

 private:
  template <class A>
  void add_one(const A& a, const char* name) {
    const int d = static_cast<int>(a.device_id());
    if (dev_ < 0) {
      dev_ = d;
      cuda_check(cudaGetDevice(&prev_), "cudaGetDevice");
      if (prev_ != dev_) cuda_check(cudaSetDevice(dev_), "cudaSetDevice");
    } else if (d != dev_) {
      throw error(std::string("invalid_argument: ") + name + " is on another CUDA device than the other arrays");
    }
  }
  template <class A>
  void add_one(const std::optional<A>& a, const char* name) {
    if (a) add_one(*a, name);
  }
  int dev_ = -1;
  int prev_ = -1;
};

//! A call's device scratch: the kernel's workspace followed by the small
//! host-built arguments (parameter arrays, tensor descriptions, status
//! words), uploaded with one copy. Backed by the caller's byte array, else
//! by cudaMallocAsync memory freed on the same stream after the launch.
class device_scratch {
 public:
  device_scratch(std::size_t kernel_bytes, std::size_t staging_bytes, const std::optional<dev_bytes>& given,
                 cudaStream_t stream)
      : kernel_(align_up(kernel_bytes)), staging_(align_up(staging_bytes)), stream_(stream) {
    const std::size_t total = kernel_ + staging_;
    if (given) {
      require(given->size() >= total, status_code::buffer_too_small,
              ("workspace too small: " + std::to_string(total) + " bytes needed").c_str());
      base_ = reinterpret_cast<std::byte*>(given->data());
      require(reinterpret_cast<std::uintptr_t>(base_) % workspace_alignment == 0, status_code::invalid_argument,
              "workspace must be 256-byte aligned");
    } else if (total > 0) {
      void* p = nullptr;
      cuda_check(cudaMallocAsync(&p, total, stream_), "cudaMallocAsync");
      base_ = static_cast<std::byte*>(p);
      owned_ = true;
    }
    host_ = scratch(staging_);
    if (staging_ > 0) std::memset(host_.data(), 0, staging_);
  }
  device_scratch(const device_scratch&) = delete;
  device_scratch& operator=(const device_scratch&) = delete;
  ~device_scratch() {
    if (owned_) (void)cudaFreeAsync(base_, stream_);
  }
  //! Bytes a caller's workspace needs for these sizes.
  static std::size_t bytes(std::size_t kernel_bytes, std::size_t staging_bytes) {
    return align_up(kernel_bytes) + align_up(staging_bytes);
  }
  void* kernel() const { return kernel_ > 0 ? base_ : nullptr; }
  std::size_t kernel_bytes() const { return kernel_; }
  //! Stages `count` values at byte `offset` of the staging area; returns
  //! their device address.
  template <class T>
  T* stage(std::size_t offset, const T* values, std::size_t count) {
    std::memcpy(host_.data() + offset, values, count * sizeof(T));
    return reinterpret_cast<T*>(base_ + kernel_ + offset);
  }
  //! The device address of byte `offset` of the staging area, for a value
  //! the device writes before it reads it (nothing is staged or uploaded).
  template <class T>
  T* slot(std::size_t offset) const {
    return reinterpret_cast<T*>(base_ + kernel_ + offset);
  }
  //! Uploads what was staged (pageable source: the copy is staged by the
  //! driver before this returns, so the host buffer may be reused).
  void upload() {
    if (staging_ > 0)
      cuda_check(cudaMemcpyAsync(base_ + kernel_, host_.data(), staging_, cudaMemcpyHostToDevice, stream_),
                 "cudaMemcpyAsync");
  }

 private:
  static std::size_t align_up(std::size_t b) {
    return (b + workspace_alignment - 1) / workspace_alignment * workspace_alignment;
  }
  std::size_t kernel_ = 0;
  std::size_t staging_ = 0;
  cudaStream_t stream_ = nullptr;
  std::byte* base_ = nullptr;
  bool owned_ = false;
  std::span<std::byte> host_;
};

//! Reads a value from device memory after everything enqueued on `stream`.
template <class T>
T read_back(const T* device_value, cudaStream_t stream) {
  T v{};
  cuda_check(cudaMemcpyAsync(&v, device_value, sizeof(T), cudaMemcpyDeviceToHost, stream), "cudaMemcpyAsync");
  cuda_check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  return v;
}

//! Host copy of a CSR offsets vector given on either side (a device vector
//! is copied on the stream, which synchronizes it).
inline std::vector<std::int32_t> host_offsets(const any_i32& offsets, cudaStream_t stream) {
  std::vector<std::int32_t> h(offsets.size());
  if (offsets.device_type() == nb::device::cuda::value) {
    if (!h.empty())
      cuda_check(
          cudaMemcpyAsync(h.data(), offsets.data(), h.size() * sizeof(std::int32_t), cudaMemcpyDeviceToHost, stream),
          "cudaMemcpyAsync");
    cuda_check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  } else {
    require(offsets.device_type() == nb::device::cpu::value, status_code::invalid_argument,
            "offsets must be in host or CUDA memory");
    std::copy(offsets.data(), offsets.data() + offsets.size(), h.begin());
  }
  return h;
}

//! Checks CSR offsets (0 first, non-decreasing, last <= total); returns the
//! largest request.
inline std::int32_t check_offsets(const std::vector<std::int32_t>& off, std::size_t total, bool allow_empty) {
  require(!off.empty(), status_code::invalid_argument, "offsets needs R + 1 entries");
  require(off[0] == 0, status_code::invalid_argument, "offsets must start at 0");
  std::int32_t largest = 0;
  for (std::size_t r = 0; r + 1 < off.size(); ++r) {
    require(off[r + 1] > off[r] || (allow_empty && off[r + 1] == off[r]), status_code::invalid_argument,
            allow_empty ? "offsets must be non-decreasing" : "every request needs at least one node");
    largest = std::max(largest, off[r + 1] - off[r]);
  }
  require(static_cast<std::size_t>(off.back()) <= total, status_code::size_mismatch,
          "offsets run past the node arrays");
  return largest;
}

}  // namespace specdec::python

#endif  // SPECDEC_PYTHON_HAS_CUDA
