//! \file
//! The collective of parallel/collective.hpp over the caller's MPI
//! communicator (host memory). Needs <mpi.h> and an MPI library; the rest
//! of specdec does not. The communicator is borrowed: specdec never calls
//! MPI_Init, creates communicators or spawns processes. MPI errors follow
//! the communicator's error handler (MPI_ERRORS_ARE_FATAL by default).
#pragma once

#include <mpi.h>

#include <cstdint>

#include "specdec/parallel/collective.hpp"

namespace specdec {

//! specdec::collective on an MPI_Comm. Sums and prefixes gather the few
//! scalars of every rank (MPI_Allgather) and fold them in rank order on
//! each rank, because MPI_Allreduce and MPI_Exscan leave the association
//! order of floating-point sums to the implementation; maxima use
//! MPI_Allreduce(MPI_MAX) on int64 (exact), broadcasts MPI_Bcast.
//! n is at most `max_scalars` per call (larger n aborts through MPI_Abort:
//! a sharded verification pass carries at most 5 scalars and 32 probed
//! entries; see sharded_topk.hpp for the top-k merge).
class mpi_collective {
 public:
  //! Most scalars one call may carry per rank (gather scratch on the stack).
  static constexpr int max_scalars = 64;
  //! Most ranks the gather scratch holds.
  static constexpr int max_ranks = 64;

  //! Borrows `comm` (must outlive this object).
  explicit mpi_collective(MPI_Comm comm) noexcept : comm_(comm) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }
  //! This process's rank in [0, size()).
  [[nodiscard]] int rank() const noexcept { return rank_; }
  //! Number of ranks.
  [[nodiscard]] int size() const noexcept { return size_; }
  //! The borrowed communicator.
  [[nodiscard]] MPI_Comm comm() const noexcept { return comm_; }

  //! v[i] = sum over ranks of v[i], added in rank order from rank 0.
  void all_reduce_sum(double* v, int n) noexcept { fold(v, n, size_); }
  //! v[i] = sum of v[i] over the ranks before this one, in rank order (0 on rank 0).
  void exclusive_prefix_sum(double* v, int n) noexcept { fold(v, n, rank_); }
  //! v[i] = max over ranks of v[i] (exact on int64).
  void all_reduce_max(std::int64_t* v, int n) noexcept {
    MPI_Allreduce(MPI_IN_PLACE, v, n, MPI_INT64_T, MPI_MAX, comm_);
  }
  //! v[0..n) = root's v[0..n) on every rank.
  void broadcast(double* v, int n, int root) noexcept { MPI_Bcast(v, n, MPI_DOUBLE, root, comm_); }
  //! all[q * n + i] = rank q's mine[i] (one MPI_Allgather; any n).
  void all_gather(const std::int64_t* mine, int n, std::int64_t* all) noexcept {
    MPI_Allgather(mine, n, MPI_INT64_T, all, n, MPI_INT64_T, comm_);
  }

 private:
  // v[i] = rank-order fold of the first `ranks` ranks' v[i].
  void fold(double* v, int n, int ranks) noexcept {
    if (n > max_scalars || size_ > max_ranks) MPI_Abort(comm_, 1);
    double all[max_scalars * max_ranks];
    MPI_Allgather(v, n, MPI_DOUBLE, all, n, MPI_DOUBLE, comm_);
    for (int i = 0; i < n; ++i) v[i] = detail::fold_rank_order(all + i, ranks, n);
  }
  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
};

static_assert(gathering_collective<mpi_collective>);

}  // namespace specdec
