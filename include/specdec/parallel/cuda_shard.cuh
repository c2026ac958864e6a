//! \file
//! The device-resident shard executor: vocabulary-parallel verification
//! (parallel/sharded_verify.hpp) on rows that stay in GPU memory, as a
//! tensor-parallel output layer leaves them. Each row pass of the sharded
//! policy is one launch of a one-block kernel running the pass objects of
//! parallel/detail/shard_passes.hpp with the CUDA block policy of
//! cuda/verify.cuh (the same tile order as the host, so results are bit
//! for bit the host's); its scalars stay on the device, are combined over
//! the caller's NCCL communicator on the caller's stream, and one small
//! device-to-host copy plus a stream synchronization hands the combined
//! scalars to the walk, which runs on the host. So a decision costs one
//! kernel, one collective and one synchronization; rows never leave the
//! device. docs/parallel.md says why the walk stays on the host.
//!
//! The same executor runs the level-batched sharded top-k of drafting
//! (sharded_topk_rows_on in parallel/sharded_topk.hpp): a selection kernel
//! with one block per frontier row, one ncclAllGather of the keys, a merge
//! kernel and one copy of the merged candidates to the host.
//!
//! Needs <nccl.h> and nvcc (include it from a .cu file). specdec never
//! creates the communicator, the stream or any memory: the caller passes
//! device scratch and host staging (pinned memory avoids a staging copy).
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "specdec/core/status.hpp"
#include "specdec/cuda/verify.cuh"
#include "specdec/parallel/collective.hpp"
#include "specdec/parallel/detail/shard_passes.hpp"
#include "specdec/parallel/nccl.hpp"
#include "specdec/parallel/shard_batch.hpp"
#include "specdec/parallel/sharded_topk.hpp"
#include "specdec/parallel/sharded_verify.hpp"

namespace specdec {

namespace cuda::detail {

//! One pass of shard_passes.hpp in one block of Block threads.
template <int Block, class Pass>
SPECDEC_KERNEL void __launch_bounds__(Block) shard_pass_kernel(Pass f, double* d, std::int64_t* l) {
  __shared__ typename block_row_ops<Block>::storage sh;
  const block_row_ops<Block> ops{sh};
  f(ops, d, l);
}

//! The lane policy of parallel/detail/topk_passes.hpp for one block: the
//! block's threads are the lanes, max is a block reduction.
template <int Block>
struct block_lanes {
  using reduce = cub::BlockReduce<std::int64_t, Block>;
  struct storage {
    typename reduce::TempStorage r;
    std::int64_t out;
  };
  storage& sh;
  SPECDEC_DEVICE int lane() const { return static_cast<int>(threadIdx.x); }
  SPECDEC_DEVICE int lanes() const { return Block; }
  //! The maximum of every lane's v, returned to every lane.
  SPECDEC_DEVICE std::int64_t max(std::int64_t v) const {
    const std::int64_t a = reduce(sh.r).Reduce(v, max_i64_op{});
    if (threadIdx.x == 0) sh.out = a;
    __syncthreads();
    const std::int64_t out = sh.out;
    __syncthreads();
    return out;
  }
  SPECDEC_DEVICE void sync() const { __syncthreads(); }
};

//! A row pass of topk_passes.hpp: block b runs row b with Block lanes.
template <int Block, class Pass>
SPECDEC_KERNEL void __launch_bounds__(Block) shard_rows_kernel(Pass f) {
  __shared__ typename block_row_ops<Block>::storage sh;
  __shared__ typename block_lanes<Block>::storage sl;
  const block_row_ops<Block> ops{sh};
  const block_lanes<Block> lanes{sl};
  f(ops, lanes, static_cast<std::int32_t>(blockIdx.x));
}

//! One request's share of a batch step (nccl_batch_backend): its queued
//! passes [first, last) and where its scalars go.
struct batch_job {
  std::int32_t first, last;  //!< passes of the step's array
  std::int32_t n;            //!< scalars to publish (0: none)
  std::int32_t from_l;       //!< publish the int64 slot (maxima), else the double slot
  std::int64_t off;          //!< word offset of the scalars in the published buffer
  double* d;                 //!< the request's double slot
  std::int64_t* l;           //!< the request's int64 slot
};

//! A batch step: block b runs job b's passes in order, then publishes its
//! scalars as 8-byte words (doubles bit for bit).
template <int Block>
SPECDEC_KERNEL void __launch_bounds__(Block)
    shard_batch_kernel(const ::specdec::detail::any_shard_pass* passes, const batch_job* jobs, std::int64_t* words) {
  __shared__ typename block_row_ops<Block>::storage sh;
  const block_row_ops<Block> ops{sh};
  const batch_job j = jobs[blockIdx.x];
  for (std::int32_t i = j.first; i < j.last; ++i) {
    passes[i].run(ops, j.d, j.l);
    __syncthreads();  // the next pass reads what this one wrote (R, tiles, scalars)
  }
  for (std::int32_t i = static_cast<std::int32_t>(threadIdx.x); i < j.n; i += Block)
    words[j.off + i] = j.from_l != 0 ? j.l[i] : __double_as_longlong(j.d[i]);
}

}  // namespace cuda::detail

//! A shard executor (see host_shard_executor) whose passes run on the
//! current CUDA device on `stream` and whose scalars are combined with
//! NCCL on `comm`: sums and prefixes by ncclAllGather and a rank-order fold
//! on the host (exact and identical on every rank), maxima by
//! ncclAllReduce(ncclMax) on int64. Argument checks travel over an
//! nccl_collective on the same communicator. A failing CUDA or NCCL call
//! is recorded (error()); later calls do nothing, every rank still returns
//! and the entry points report the failure.
template <int Block = 256>
class nccl_shard_executor {
 public:
  //! Most scalars of each type one pass writes.
  static constexpr int capacity = 64;

  //! Device scratch bytes for `ranks` ranks.
  static constexpr std::size_t scratch_bytes(int ranks) noexcept {
    return nccl_collective::scratch_bytes(ranks, nccl_collective::max_scalars) +
           static_cast<std::size_t>(capacity) * 8 * (2 + static_cast<std::size_t>(ranks));
  }
  //! Host staging bytes for `ranks` ranks (pinned memory recommended).
  static constexpr std::size_t staging_bytes(int ranks) noexcept {
    return static_cast<std::size_t>(capacity) * 8 * static_cast<std::size_t>(ranks);
  }

  //! Borrows comm, stream, device `scratch` (scratch_bytes(ranks), 8-byte
  //! aligned) and host `staging` (staging_bytes(ranks), 8-byte aligned).
  nccl_shard_executor(ncclComm_t comm, cudaStream_t stream, void* scratch, std::size_t scratch_size, void* staging,
                      std::size_t staging_size) noexcept
      : comm_(comm),
        stream_(stream),
        coll_(comm, stream, scratch, scratch_size < head(comm) ? scratch_size : head(comm)) {
    const int P = coll_.size();
    if (!coll_.error().ok()) return;
    if (scratch == nullptr || scratch_size < scratch_bytes(P) || staging == nullptr ||
        staging_size < staging_bytes(P)) {
      fail(status_code::buffer_too_small, "scratch or staging smaller than nccl_shard_executor's sizes");
      return;
    }
    auto* base = static_cast<unsigned char*>(scratch) + head(comm);
    d_ = reinterpret_cast<double*>(base);
    l_ = reinterpret_cast<std::int64_t*>(base + capacity * 8);
    g_ = reinterpret_cast<double*>(base + capacity * 16);
    h_ = static_cast<double*>(staging);
  }

  //! This rank.
  [[nodiscard]] int rank() const noexcept { return coll_.rank(); }
  //! Number of ranks.
  [[nodiscard]] int size() const noexcept { return coll_.size(); }
  //! The collective on host memory (argument checks).
  nccl_collective& coll() noexcept { return coll_; }
  //! The first failure of this executor or its collective, or success.
  [[nodiscard]] status error() const noexcept { return err_.ok() ? coll_.error() : err_; }
  //! Collectives and payload bytes since construction (for reports).
  [[nodiscard]] collective_traffic traffic() const noexcept { return t_; }

  //! Copies the partition to `dst` (device memory from the workspace).
  const std::int64_t* stage_bounds(std::span<const std::int64_t> bounds, std::int64_t* dst) noexcept {
    if (ok()) check(cudaMemcpyAsync(dst, bounds.data(), bounds.size_bytes(), cudaMemcpyHostToDevice, stream_));
    return dst;
  }
  //! One kernel launch of a pass (stream-ordered, no synchronization).
  template <class Pass>
  void run(const Pass& f) noexcept {
    if (!ok()) return;
    cuda::detail::shard_pass_kernel<Block, Pass><<<1, Block, 0, stream_>>>(f, d_, l_);
    check(cudaPeekAtLastError());  // peek: the engine's error state is its own
  }
  //! out[0..n) = the rank-order sums of the pass's first n doubles.
  void sum(int n, double* out) noexcept { fold(n, out, size()); }
  //! out[0..n) = the rank-order sums over the lower ranks.
  void prefix(int n, double* out) noexcept { fold(n, out, rank()); }
  //! One launch of a row pass (topk_passes.hpp): one block per row.
  template <class Pass>
  void run_rows(const Pass& f, std::int32_t rows) noexcept {
    if (!ok() || rows <= 0) return;
    cuda::detail::shard_rows_kernel<Block, Pass><<<static_cast<unsigned>(rows), Block, 0, stream_>>>(f);
    check(cudaPeekAtLastError());  // peek: the engine's error state is its own
  }
  //! all[q * n + i] = rank q's mine[i] (device memory): one ncclAllGather
  //! on the stream, no synchronization.
  void gather(const std::int64_t* mine, int n, std::int64_t* all) noexcept {
    count(n);
    if (!ok()) return;
    check(ncclAllGather(mine, all, static_cast<std::size_t>(n), ncclInt64, comm_, stream_));
  }
  //! Copies pass results from device memory to host memory and waits for
  //! the stream (the one synchronization of a sharded top-k level).
  void to_host(void* dst, const void* src, std::size_t bytes) noexcept {
    if (!ok()) return;
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
    check(cudaStreamSynchronize(stream_));
  }
  //! out[0..n) = the maxima of the pass's first n int64s.
  void max(int n, std::int64_t* out) noexcept {
    count(n);
    for (int i = 0; i < n; ++i) out[i] = 0;  // what a failed call leaves
    if (!ok()) return;
    check(ncclAllReduce(l_, l_, static_cast<std::size_t>(n), ncclInt64, ncclMax, comm_, stream_));
    check(cudaMemcpyAsync(h_, l_, static_cast<std::size_t>(n) * 8, cudaMemcpyDeviceToHost, stream_));
    check(cudaStreamSynchronize(stream_));
    const auto* h = reinterpret_cast<const std::int64_t*>(h_);
    if (ok())
      for (int i = 0; i < n; ++i) out[i] = h[i];
  }

 private:
  static std::size_t head(ncclComm_t comm) noexcept {
    int P = 1;
    if (ncclCommCount(comm, &P) != ncclSuccess || P < 1) P = 1;
    return nccl_collective::scratch_bytes(P, nccl_collective::max_scalars);
  }
  void fold(int n, double* out, int ranks) noexcept {
    count(n);
    for (int i = 0; i < n; ++i) out[i] = 0.0;  // what a failed call leaves
    if (!ok()) return;
    const std::size_t all = static_cast<std::size_t>(n) * static_cast<std::size_t>(size()) * 8;
    check(ncclAllGather(d_, g_, static_cast<std::size_t>(n), ncclFloat64, comm_, stream_));
    check(cudaMemcpyAsync(h_, g_, all, cudaMemcpyDeviceToHost, stream_));
    check(cudaStreamSynchronize(stream_));
    if (ok())
      for (int i = 0; i < n; ++i) out[i] = detail::fold_rank_order(h_ + i, ranks, n);
  }
  void count(int n) noexcept {
    ++t_.calls;
    t_.bytes += static_cast<std::int64_t>(n) * 8;
  }
  bool ok() const noexcept { return err_.ok() && coll_.error().ok(); }
  void check(cudaError_t e) noexcept {
    if (e != cudaSuccess && err_.ok()) fail(status_code::cuda_error, "a CUDA call of nccl_shard_executor failed");
  }
  void check(ncclResult_t e) noexcept {
    if (e != ncclSuccess && err_.ok()) fail(status_code::cuda_error, "an NCCL call of nccl_shard_executor failed");
  }
  void fail(status_code c, const char* m) noexcept { err_ = make_status(c, m); }

  ncclComm_t comm_;
  cudaStream_t stream_;
  nccl_collective coll_;
  double* d_ = nullptr;
  std::int64_t* l_ = nullptr;
  double* g_ = nullptr;
  double* h_ = nullptr;
  status err_ = status::success();
  collective_traffic t_{};
};

//! The batch backend of verify_trees_sharded (parallel/shard_batch.hpp)
//! for rows in GPU memory: a step is one kernel running every request's
//! queued passes (a block per request, cuda::detail::shard_batch_kernel),
//! one ncclAllGather of every request's scalars (8-byte words), one
//! device-to-host copy and one stream synchronization; the rank-order folds
//! and maxima are then taken on the host, as nccl_shard_executor does. So a
//! batch of R requests costs one collective per step instead of one per
//! decision of every request. Steps may run on any of the call's threads;
//! the backend makes its device current first. Host queues are allocated
//! at construction; no launch path allocates.
template <int Block = 256>
class nccl_batch_backend {
 public:
  //! Most scalars of each type one request publishes per step.
  static constexpr int capacity = 64;
  //! Passes one request queues before a step runs them.
  static constexpr int queue_depth = 8;

  //! Device scratch bytes for `ranks` ranks and `max_requests` requests.
  static constexpr std::size_t scratch_bytes(int ranks, std::int32_t max_requests) noexcept {
    return head_bytes(ranks) + 4 * part(max_requests, ranks) + slot_bytes(max_requests);
  }
  //! Host staging bytes (pinned memory recommended).
  static constexpr std::size_t staging_bytes(int ranks, std::int32_t max_requests) noexcept {
    return 4 * part(max_requests, ranks);
  }

  //! Borrows comm, stream, device `scratch` (scratch_bytes, 256-byte
  //! aligned) and host `staging` (staging_bytes, 256-byte aligned) for
  //! batches of up to `max_requests` requests, on the current device.
  nccl_batch_backend(ncclComm_t comm, cudaStream_t stream, std::int32_t max_requests, void* scratch,
                     std::size_t scratch_size, void* staging, std::size_t staging_size)
      : comm_(comm),
        stream_(stream),
        coll_(comm, stream, scratch, scratch_size < head(comm) ? scratch_size : head(comm)),
        max_(max_requests > 0 ? max_requests : 0),
        queue_(static_cast<std::size_t>(max_) * queue_depth),
        count_(static_cast<std::size_t>(max_), 0),
        off_(static_cast<std::size_t>(max_), 0) {
    if (cudaGetDevice(&device_) != cudaSuccess) {
      fail(status_code::cuda_error, "cudaGetDevice failed");
      return;
    }
    if (!coll_.error().ok()) return;
    const int P = coll_.size();
    if (scratch == nullptr || scratch_size < scratch_bytes(P, max_) || staging == nullptr ||
        staging_size < staging_bytes(P, max_) || reinterpret_cast<std::uintptr_t>(scratch) % 256 != 0 ||
        reinterpret_cast<std::uintptr_t>(staging) % 256 != 0) {
      fail(status_code::buffer_too_small, "scratch or staging smaller than nccl_batch_backend's sizes, or unaligned");
      return;
    }
    auto* dev = static_cast<unsigned char*>(scratch) + head(comm);
    auto* host = static_cast<unsigned char*>(staging);
    slots_ = reinterpret_cast<double*>(dev + 4 * part(max_, P));
    carve(dev, d_);
    carve(host, h_);
  }

  //! This rank.
  [[nodiscard]] int rank() const noexcept { return coll_.rank(); }
  //! Number of ranks.
  [[nodiscard]] int size() const noexcept { return coll_.size(); }
  //! Most requests of one call.
  [[nodiscard]] std::int32_t max_requests() const noexcept { return max_; }
  //! The collective on host memory (the batch's argument agreement); makes
  //! the backend's device current on the calling thread.
  nccl_collective& coll() noexcept {
    (void)current();
    return coll_;
  }
  //! The first failure of this backend or its collective, or success.
  [[nodiscard]] status error() const noexcept { return err_.ok() ? coll_.error() : err_; }
  //! Steps and gathered payload bytes since construction (for reports).
  [[nodiscard]] collective_traffic traffic() const noexcept { return t_; }

  //! Copies the partition to `dst` (device memory from a request's workspace).
  const std::int64_t* stage_bounds(std::span<const std::int64_t> bounds, std::int64_t* dst) noexcept {
    if (ok() && current())
      check(cudaMemcpyAsync(dst, bounds.data(), bounds.size_bytes(), cudaMemcpyHostToDevice, stream_));
    return dst;
  }
  //! Queues request r's pass; false when its queue is full (a step first).
  template <class Pass>
  bool queue(std::int32_t r, const Pass& f) noexcept {
    std::int32_t& c = count_[static_cast<std::size_t>(r)];
    if (c == queue_depth) return false;
    queue_[static_cast<std::size_t>(r) * queue_depth + static_cast<std::size_t>(c++)] =
        ::specdec::detail::any_shard_pass(f);
    return true;
  }
  //! Request r left: passes it queued after its last collective are dropped.
  void drop(std::int32_t r) noexcept { count_[static_cast<std::size_t>(r)] = 0; }
  //! One step for every post (posts[r] null: request r takes no part).
  void step(std::span<const batch_post* const> posts) noexcept {
    std::int32_t J = 0, npass = 0;
    const std::int64_t W = ::specdec::detail::pack_posts(posts, off_.data(), h_.words,
                                                         [](std::size_t, std::int64_t*, int) {});  // kernel-published
    for (std::size_t r = 0; r < posts.size(); ++r) {
      const batch_post* p = posts[r];
      if (p == nullptr) continue;  // a request that left (drop() emptied its queue)
      const int n = p->op == batch_op::none || p->from_host ? 0 : p->n;
      const std::int32_t c = count_[r];
      if (c > 0 || n > 0) {
        for (std::int32_t i = 0; i < c; ++i)
          h_.passes[npass + i] = queue_[r * queue_depth + static_cast<std::size_t>(i)];
        h_.jobs[J++] = cuda::detail::batch_job{npass,
                                               npass + c,
                                               n,
                                               p->op == batch_op::max ? 1 : 0,
                                               n > 0 ? off_[r] : 0,
                                               slots_ + r * 2 * capacity,
                                               reinterpret_cast<std::int64_t*>(slots_ + (r * 2 + 1) * capacity)};
        npass += c;
      }
      count_[r] = 0;
    }
    const int P = size();
    if (ok() && current() && (J > 0 || W > 0)) {
      ++t_.calls;
      t_.bytes += W * 8;
      if (npass > 0) copy_in(d_.passes, h_.passes, static_cast<std::size_t>(npass) * sizeof(*h_.passes));
      if (J > 0) copy_in(d_.jobs, h_.jobs, static_cast<std::size_t>(J) * sizeof(*h_.jobs));
      if (W > 0) copy_in(d_.words, h_.words, static_cast<std::size_t>(W) * 8);
      if (J > 0) {
        cuda::detail::shard_batch_kernel<Block>
            <<<static_cast<unsigned>(J), Block, 0, stream_>>>(d_.passes, d_.jobs, d_.words);
        check(cudaPeekAtLastError());  // peek: the engine's error state is its own
      }
      if (W > 0) {
        check(ncclAllGather(d_.words, d_.gathered, static_cast<std::size_t>(W), ncclInt64, comm_, stream_));
        check(cudaMemcpyAsync(h_.gathered, d_.gathered, static_cast<std::size_t>(W) * 8 * static_cast<std::size_t>(P),
                              cudaMemcpyDeviceToHost, stream_));
      }
      check(cudaStreamSynchronize(stream_));
    }
    ::specdec::detail::unpack_posts(posts, off_.data(), W, h_.gathered, rank(), P, ok());
  }

 private:
  struct arrays {
    ::specdec::detail::any_shard_pass* passes = nullptr;
    cuda::detail::batch_job* jobs = nullptr;
    std::int64_t* words = nullptr;
    std::int64_t* gathered = nullptr;
  };
  static constexpr std::size_t up(std::size_t b) noexcept { return (b + 255) / 256 * 256; }
  // Bytes of one part: the largest of the passes, jobs, words and gathered
  // arrays (device scratch and host staging both hold the four, in that order).
  static constexpr std::size_t part(std::int32_t R, int ranks) noexcept {
    const auto n = static_cast<std::size_t>(R > 0 ? R : 0);
    const std::size_t a = up(n * queue_depth * sizeof(::specdec::detail::any_shard_pass));
    const std::size_t b = up(n * capacity * 8 * static_cast<std::size_t>(ranks > 0 ? ranks : 1));
    return a > b ? a : b;
  }
  // The requests' scalar slots (device only, after the four parts).
  static constexpr std::size_t slot_bytes(std::int32_t R) noexcept {
    return up(static_cast<std::size_t>(R > 0 ? R : 0) * capacity * 16);
  }
  static constexpr std::size_t head_bytes(int ranks) noexcept {
    return up(nccl_collective::scratch_bytes(ranks, nccl_collective::max_scalars));
  }
  static std::size_t head(ncclComm_t comm) noexcept {
    int P = 1;
    if (ncclCommCount(comm, &P) != ncclSuccess || P < 1) P = 1;
    return head_bytes(P);
  }
  void carve(unsigned char* base, arrays& a) const noexcept {
    const std::size_t s = part(max_, size());
    a.passes = reinterpret_cast<::specdec::detail::any_shard_pass*>(base);
    a.jobs = reinterpret_cast<cuda::detail::batch_job*>(base + s);
    a.words = reinterpret_cast<std::int64_t*>(base + 2 * s);
    a.gathered = reinterpret_cast<std::int64_t*>(base + 3 * s);
  }
  void copy_in(void* dst, const void* src, std::size_t bytes) noexcept {
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_));
  }
  bool current() noexcept {
    check(cudaSetDevice(device_));
    return ok();
  }
  bool ok() const noexcept { return err_.ok() && coll_.error().ok(); }
  void check(cudaError_t e) noexcept {
    if (e != cudaSuccess && err_.ok()) fail(status_code::cuda_error, "a CUDA call of nccl_batch_backend failed");
  }
  void check(ncclResult_t e) noexcept {
    if (e != ncclSuccess && err_.ok()) fail(status_code::cuda_error, "an NCCL call of nccl_batch_backend failed");
  }
  void fail(status_code c, const char* m) noexcept { err_ = make_status(c, m); }

  ncclComm_t comm_;
  cudaStream_t stream_;
  nccl_collective coll_;
  std::int32_t max_;
  int device_ = 0;
  std::vector<::specdec::detail::any_shard_pass> queue_;
  std::vector<std::int32_t> count_;
  std::vector<std::int64_t> off_;
  double* slots_ = nullptr;  // request r: capacity doubles, then capacity int64s
  arrays d_{}, h_{};
  status err_ = status::success();
  collective_traffic t_{};
};

}  // namespace specdec
