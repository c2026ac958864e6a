//! \file
//! The collective of parallel/collective.hpp over the caller's NCCL
//! communicator and CUDA stream. Needs <nccl.h> and the CUDA runtime; the
//! rest of specdec does not. The communicator, the stream and the device
//! scratch are borrowed: specdec never creates communicators.
//!
//! Scope: host-memory scalars over NCCL, staged through a small device
//! buffer; each call synchronizes the stream (the walk branches on the
//! result). With this collective the sharded policy runs its row passes on
//! the host, so the rows must be host-readable; for rows in GPU memory use
//! nccl_shard_executor (parallel/cuda_shard.cuh), which runs the passes on
//! the device and uses this class only for the argument checks.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstddef>
#include <cstdint>

#include "specdec/core/status.hpp"
#include "specdec/parallel/collective.hpp"

namespace specdec {

//! specdec::collective on an ncclComm_t and a cudaStream_t. Sums and
//! prefixes gather the scalars (ncclAllGather) and fold them in rank order
//! on the host (ncclAllReduce promises no association order); maxima use
//! ncclAllReduce(ncclMax) on int64, broadcasts ncclBroadcast. A failing
//! CUDA or NCCL call is recorded (error()) and later calls do nothing, so
//! every rank still returns; the sharded entry points report it.
class nccl_collective {
 public:
  //! Most scalars per rank one sum or prefix carries.
  static constexpr int max_scalars = 64;
  //! Most ranks the host-side gather holds.
  static constexpr int max_ranks = 64;

  //! Device scratch bytes for `ranks` ranks and reductions of up to
  //! `max_n` scalars (the sharded top-k passes k * ranks).
  static constexpr std::size_t scratch_bytes(int ranks, int max_n) noexcept {
    const int n = max_n > max_scalars ? max_n : max_scalars;
    return static_cast<std::size_t>(n) * 8 +
           static_cast<std::size_t>(max_scalars) * 8 * static_cast<std::size_t>(ranks);
  }

  //! Borrows comm, stream and `scratch` (device memory of `scratch_size`
  //! bytes, at least scratch_bytes(size, max_n); 8-byte aligned).
  nccl_collective(ncclComm_t comm, cudaStream_t stream, void* scratch, std::size_t scratch_size) noexcept
      : comm_(comm), stream_(stream), scratch_(static_cast<unsigned char*>(scratch)), bytes_(scratch_size) {
    if (ncclCommUserRank(comm_, &rank_) != ncclSuccess || ncclCommCount(comm_, &size_) != ncclSuccess)
      fail(status_code::invalid_argument, "ncclCommUserRank/ncclCommCount failed");
    else if (size_ > max_ranks)
      fail(status_code::unsupported, "more ranks than nccl_collective::max_ranks");
    else if (scratch_ == nullptr || bytes_ < scratch_bytes(size_, max_scalars))
      fail(status_code::buffer_too_small, "NCCL scratch smaller than nccl_collective::scratch_bytes");
  }
  //! This process's rank in [0, size()).
  [[nodiscard]] int rank() const noexcept { return rank_; }
  //! Number of ranks.
  [[nodiscard]] int size() const noexcept { return size_; }
  //! The first failure, or success.
  [[nodiscard]] status error() const noexcept { return err_; }

  //! v[i] = sum over ranks of v[i], added in rank order from rank 0.
  void all_reduce_sum(double* v, int n) noexcept { fold(v, n, size_); }
  //! v[i] = sum of v[i] over the ranks before this one, in rank order (0 on rank 0).
  void exclusive_prefix_sum(double* v, int n) noexcept { fold(v, n, rank_); }

  //! v[i] = max over ranks of v[i] (exact on int64).
  void all_reduce_max(std::int64_t* v, int n) noexcept {
    if (!usable(static_cast<std::size_t>(n) * 8)) return;
    run(cudaMemcpyAsync(scratch_, v, static_cast<std::size_t>(n) * 8, cudaMemcpyHostToDevice, stream_));
    run(ncclAllReduce(scratch_, scratch_, static_cast<std::size_t>(n), ncclInt64, ncclMax, comm_, stream_));
    run(cudaMemcpyAsync(v, scratch_, static_cast<std::size_t>(n) * 8, cudaMemcpyDeviceToHost, stream_));
    run(cudaStreamSynchronize(stream_));
  }

  //! v[0..n) = root's v[0..n) on every rank.
  void broadcast(double* v, int n, int root) noexcept {
    if (!usable(static_cast<std::size_t>(n) * 8)) return;
    run(cudaMemcpyAsync(scratch_, v, static_cast<std::size_t>(n) * 8, cudaMemcpyHostToDevice, stream_));
    run(ncclBroadcast(scratch_, scratch_, static_cast<std::size_t>(n), ncclFloat64, root, comm_, stream_));
    run(cudaMemcpyAsync(v, scratch_, static_cast<std::size_t>(n) * 8, cudaMemcpyDeviceToHost, stream_));
    run(cudaStreamSynchronize(stream_));
  }

 private:
  void fold(double* v, int n, int ranks) noexcept {
    if (n > max_scalars) fail(status_code::unsupported, "more scalars than nccl_collective::max_scalars");
    const std::size_t all = static_cast<std::size_t>(n) * static_cast<std::size_t>(size_) * 8;
    if (!usable(static_cast<std::size_t>(n) * 8 + all)) return;
    double host[max_scalars * max_ranks];
    unsigned char* gathered = scratch_ + static_cast<std::size_t>(max_scalars) * 8;
    run(cudaMemcpyAsync(scratch_, v, static_cast<std::size_t>(n) * 8, cudaMemcpyHostToDevice, stream_));
    run(ncclAllGather(scratch_, gathered, static_cast<std::size_t>(n), ncclFloat64, comm_, stream_));
    run(cudaMemcpyAsync(host, gathered, all, cudaMemcpyDeviceToHost, stream_));
    run(cudaStreamSynchronize(stream_));
    if (err_.ok())
      for (int i = 0; i < n; ++i) v[i] = detail::fold_rank_order(host + i, ranks, n);
  }
  bool usable(std::size_t need) noexcept {
    if (err_.ok() && need > bytes_) fail(status_code::buffer_too_small, "NCCL scratch too small for this call");
    return err_.ok();
  }
  void run(cudaError_t e) noexcept {
    if (e != cudaSuccess && err_.ok()) fail(status_code::cuda_error, "a CUDA call of nccl_collective failed");
  }
  void run(ncclResult_t e) noexcept {
    if (e != ncclSuccess && err_.ok()) fail(status_code::cuda_error, "an NCCL call of nccl_collective failed");
  }
  void fail(status_code c, const char* m) noexcept { err_ = make_status(c, m); }

  ncclComm_t comm_;
  cudaStream_t stream_;
  unsigned char* scratch_;
  std::size_t bytes_;
  int rank_ = 0, size_ = 1;
  status err_ = status::success();
};

static_assert(collective<nccl_collective>);

}  // namespace specdec
