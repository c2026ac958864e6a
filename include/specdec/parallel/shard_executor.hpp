//! \file
//! Shard executors: where the passes of the vocabulary-parallel verifier
//! and top-k run. host_shard_executor (host rows, any collective) is here;
//! nccl_shard_executor (rows in GPU memory) is in parallel/cuda_shard.cuh.
//! The sharded entry points (parallel/sharded_verify.hpp,
//! parallel/sharded_topk.hpp) take either an executor or a collective
//! (wrapped in a host_shard_executor).
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "specdec/core/status.hpp"
#include "specdec/parallel/collective.hpp"
#include "specdec/parallel/detail/topk_passes.hpp"
#include "specdec/sample/detail/host_rows.hpp"
#include "specdec/verify/detail/row_ops.hpp"

namespace specdec {

//! The trivial shard executor: passes run on host memory with the host
//! policy, their scalars are combined by a host collective. The
//! device-resident executor is in parallel/cuda_shard.cuh. An executor has
//! rank(), size(), coll() (a collective on host memory, for the argument
//! checks), run(pass) (the pass writes up to `capacity` doubles and int64s
//! into the executor's scalar buffers), sum / prefix (double scalars,
//! combined in rank order into host memory) and max (int64 scalars), and
//! stage_bounds (the partition where passes read it); for the sharded
//! top-k also run_rows(pass, rows), gather (an all-gather of int64s) and
//! to_host (pass results into host memory).
template <collective C>
class host_shard_executor {
 public:
  //! Most scalars of each type one pass writes.
  static constexpr int capacity = 64;
  //! Runs the passes on this process's memory over `coll` (not owned).
  explicit host_shard_executor(C& coll) noexcept : c_(&coll) {}
  //! This rank.
  [[nodiscard]] int rank() const { return c_->rank(); }
  //! Number of ranks.
  [[nodiscard]] int size() const { return c_->size(); }
  //! The collective on host memory.
  C& coll() noexcept { return *c_; }
  //! The partition as passes read it (host memory: the caller's array).
  const std::int64_t* stage_bounds(std::span<const std::int64_t> bounds, std::int64_t*) noexcept {
    return bounds.data();
  }
  //! Runs one pass of shard_passes.hpp with the host policy.
  template <class Pass>
  void run(const Pass& f) {
    f(detail::host_row_ops{}, d_, l_);
  }
  //! out[0..n) = the rank-order sums of the pass's first n doubles.
  void sum(int n, double* out) {
    for (int i = 0; i < n; ++i) out[i] = d_[i];
    c_->all_reduce_sum(out, n);
  }
  //! out[0..n) = the rank-order sums over the lower ranks.
  void prefix(int n, double* out) {
    for (int i = 0; i < n; ++i) out[i] = d_[i];
    c_->exclusive_prefix_sum(out, n);
  }
  //! out[0..n) = the maxima of the pass's first n int64s.
  void max(int n, std::int64_t* out) {
    for (int i = 0; i < n; ++i) out[i] = l_[i];
    c_->all_reduce_max(out, n);
  }
  //! Runs a row pass of parallel/detail/topk_passes.hpp on rows [0, rows).
  template <class Pass>
  void run_rows(const Pass& f, std::int32_t rows) {
    for (std::int32_t r = 0; r < rows; ++r) f(detail::host_row_ops{}, detail::host_lanes{}, r);
  }
  //! all[q * n + i] = rank q's mine[i]: the collective's all_gather when
  //! it has one (gathering_collective), else an all-gather made of its max
  //! (the other ranks' slots hold no_key, below every int64). all holds
  //! size() * n int64s; size() * n must fit an int.
  void gather(const std::int64_t* mine, int n, std::int64_t* all) {
    if constexpr (gathering_collective<C>) {
      c_->all_gather(mine, n, all);
    } else {
      const std::int64_t total = static_cast<std::int64_t>(n) * size();
      for (std::int64_t i = 0; i < total; ++i) all[i] = detail::no_key;
      const std::int64_t slot = static_cast<std::int64_t>(n) * rank();
      for (int i = 0; i < n; ++i) all[slot + i] = mine[i];
      c_->all_reduce_max(all, static_cast<int>(total));
    }
  }
  //! Hands pass results to the host (here a copy within host memory).
  void to_host(void* dst, const void* src, std::size_t bytes) noexcept {
    if (bytes != 0 && dst != src) std::memcpy(dst, src, bytes);
  }

 private:
  C* c_;
  double d_[capacity] = {};
  std::int64_t l_[capacity] = {};
};

namespace detail {

//! The sticky failure of an executor (its own error(), then its collective's).
template <class Exec>
status executor_error(Exec& ex) {
  if constexpr (requires {
                  { ex.error() } -> std::convertible_to<status>;
                })
    if (!ex.error().ok()) return ex.error();
  return collective_error(ex.coll());
}

}  // namespace detail

}  // namespace specdec
