//! \file
//! The collective a caller provides to the vocabulary-parallel primitives
//! (parallel/sharded_verify.hpp, parallel/sharded_topk.hpp): a handful of
//! operations on a few scalars over the caller's own ranks. specdec never
//! creates processes or communicators; parallel/mpi.hpp adapts an MPI_Comm,
//! parallel/nccl.hpp an ncclComm_t and a cudaStream_t. This header needs
//! neither library.
//!
//! Exactness contract. Sums are folded in rank order from zero:
//! all_reduce_sum returns ((0 + v_0) + v_1) + ... + v_{P-1} on every rank,
//! exclusive_prefix_sum returns ((0 + v_0) + ...) + v_{r-1} on rank r (0.0
//! on rank 0). Library all-reduces (MPI_Allreduce, ncclAllReduce) do not
//! promise an association order for floating-point sums, so the adapters
//! gather the few scalars and fold them locally instead. Maxima are exact
//! in any order. With this contract a sharded verification reproduces the
//! single-process verification in the partitioned order bit for bit.
#pragma once

#include <bit>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>

#include "specdec/core/config.hpp"
#include "specdec/core/status.hpp"

namespace specdec {

//! What the vocabulary-parallel primitives need from the caller's ranks.
//! Every member is collective (all ranks call it in the same order with
//! the same n) except rank() and size(). `n` is small (at most a few times
//! the rank count), except all_reduce_max in the sharded top-k: k * size
//! keys for one row, and size() blocks of a whole level's keys when the
//! collective has no all_gather (nccl_collective carries what its scratch
//! holds and reports buffer_too_small beyond; mpi_collective has no
//! limit). Members:
//! - rank(), size(): this rank in [0, size), size >= 1;
//! - all_reduce_sum(double* v, n): v[i] = the rank-order fold of v[i];
//! - all_reduce_max(std::int64_t* v, n): v[i] = max over ranks;
//! - exclusive_prefix_sum(double* v, n): v[i] = the fold over lower ranks;
//! - broadcast(double* v, n, root): v = root's v.
template <class C>
concept collective = requires(C& c, const C& cc, double* d, std::int64_t* i, int n, int root) {
  { cc.rank() } -> std::convertible_to<int>;
  { cc.size() } -> std::convertible_to<int>;
  { c.all_reduce_sum(d, n) } -> std::same_as<void>;
  { c.all_reduce_max(i, n) } -> std::same_as<void>;
  { c.exclusive_prefix_sum(d, n) } -> std::same_as<void>;
  { c.broadcast(d, n, root) } -> std::same_as<void>;
};

//! A collective that can also all-gather int64s: all_gather(mine, n, all)
//! sets all[q * n + i] = rank q's mine[i] (size() * n entries). Optional:
//! the level-batched sharded top-k (parallel/sharded_topk.hpp) uses it when
//! present and otherwise builds the gather from all_reduce_max over size()
//! blocks (the same result, size() times the payload).
template <class C>
concept gathering_collective = collective<C> && requires(C& c, const std::int64_t* mine, int n, std::int64_t* all) {
  { c.all_gather(mine, n, all) } -> std::same_as<void>;
};

//! The trivial collective of one rank (the single-process partitioned path).
struct self_collective {
  //! This process's rank in [0, size()).
  [[nodiscard]] int rank() const noexcept { return 0; }
  //! Number of ranks.
  [[nodiscard]] int size() const noexcept { return 1; }
  //! 0 + v, exactly v (a -0.0 becomes +0.0, as in any rank-order fold).
  void all_reduce_sum(double* v, int n) noexcept {
    for (int i = 0; i < n; ++i) v[i] = 0.0 + v[i];
  }
  //! v[i] = max over ranks of v[i] (exact on int64).
  void all_reduce_max(std::int64_t*, int) noexcept {}
  //! v[i] = sum of v[i] over the ranks before this one, in rank order (0 on rank 0).
  void exclusive_prefix_sum(double* v, int n) noexcept {
    for (int i = 0; i < n; ++i) v[i] = 0.0;
  }
  //! v[0..n) = root's v[0..n) on every rank.
  void broadcast(double*, int, int) noexcept {}
};

//! Traffic of one rank: collective calls and payload bytes this rank puts
//! in (n * 8 per reduction or prefix, n * 8 for the root of a broadcast, 0
//! for the receivers). Wire bytes depend on the library's algorithm (a ring
//! all-reduce moves about 2 (P - 1) / P times the payload per rank).
struct collective_traffic {
  std::int64_t calls = 0;  //!< collective calls made
  std::int64_t bytes = 0;  //!< payload bytes this rank put in
};

//! Wraps a collective and counts its traffic (for benchmarks and reports).
template <collective C>
class counting_collective {
 public:
  //! Counts the traffic of `inner` (not owned; must outlive this object).
  explicit counting_collective(C& inner) noexcept : inner_(&inner) {}
  //! The wrapped collective's rank.
  [[nodiscard]] int rank() const { return inner_->rank(); }
  //! The wrapped collective's number of ranks.
  [[nodiscard]] int size() const { return inner_->size(); }
  //! v[i] = sum over ranks of v[i], added in rank order from rank 0.
  void all_reduce_sum(double* v, int n) {
    count(n, true);
    inner_->all_reduce_sum(v, n);
  }
  //! v[i] = max over ranks of v[i] (exact on int64).
  void all_reduce_max(std::int64_t* v, int n) {
    count(n, true);
    inner_->all_reduce_max(v, n);
  }
  //! v[i] = sum of v[i] over the ranks before this one, in rank order (0 on rank 0).
  void exclusive_prefix_sum(double* v, int n) {
    count(n, true);
    inner_->exclusive_prefix_sum(v, n);
  }
  //! v[0..n) = root's v[0..n) on every rank.
  void broadcast(double* v, int n, int root) {
    count(n, root == rank());
    inner_->broadcast(v, n, root);
  }
  //! all[q * n + i] = rank q's mine[i] (only when the wrapped collective has it).
  void all_gather(const std::int64_t* mine, int n, std::int64_t* all) requires gathering_collective<C> {
    count(n, true);
    inner_->all_gather(mine, n, all);
  }
  //! Traffic since construction or the last reset().
  [[nodiscard]] collective_traffic traffic() const noexcept { return t_; }
  //! Zeroes the counted traffic.
  void reset() noexcept { t_ = {}; }

 private:
  void count(int n, bool sends) noexcept {
    ++t_.calls;
    if (sends) t_.bytes += static_cast<std::int64_t>(n) * 8;
  }
  C* inner_;
  collective_traffic t_{};
};

namespace detail {

//! The rank-order fold of the contract: ((0 + v[0]) + v[1]) + ... (stride
//! `stride` between ranks' values). Shared by every adapter.
inline double fold_rank_order(const double* v, int count, int stride = 1) noexcept {
  double s = 0.0;
  for (int r = 0; r < count; ++r) s += v[static_cast<std::int64_t>(r) * stride];
  return s;
}

//! A (value, token) pair as one int64 whose order is the specdec ranking:
//! larger value first, then lower token id (-0.0 ranks as +0.0). Maxima of
//! keys are exact in any reduction order. Precondition: v is not NaN.
SPECDEC_HD std::int64_t rank_key(float v, std::int64_t token) noexcept {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(v == 0.0f ? 0.0f : v);
  const std::uint32_t ord = (bits & 0x80000000u) != 0 ? ~bits : bits | 0x80000000u;  // monotone in v
  const std::uint64_t key = (static_cast<std::uint64_t>(ord) << 32) | (0xFFFFFFFFu - static_cast<std::uint32_t>(token));
  return static_cast<std::int64_t>(key ^ (std::uint64_t{1} << 63));  // monotone uint64 -> int64
}
//! The key no pair reaches ("none").
inline constexpr std::int64_t no_key = std::numeric_limits<std::int64_t>::min();
//! The value and token of a key made by rank_key.
SPECDEC_HD float key_value(std::int64_t key) noexcept {
  const std::uint32_t ord =
      static_cast<std::uint32_t>((static_cast<std::uint64_t>(key) ^ (std::uint64_t{1} << 63)) >> 32);
  return std::bit_cast<float>((ord & 0x80000000u) != 0 ? ord & 0x7FFFFFFFu : ~ord);
}
SPECDEC_HD std::int64_t key_token(std::int64_t key) noexcept {
  return 0xFFFFFFFFu - static_cast<std::uint32_t>(static_cast<std::uint64_t>(key) & 0xFFFFFFFFu);
}

//! FNV-1a over the bytes of a trivially copyable value (rank agreement
//! fingerprints; not a security hash).
template <class T>
inline void fingerprint_add(std::uint64_t& h, const T& x) noexcept {
  const auto* b = reinterpret_cast<const unsigned char*>(&x);
  for (std::size_t i = 0; i < sizeof(T); ++i) h = (h ^ b[i]) * 0x100000001b3ull;
}

}  // namespace detail

//! The sticky failure of a collective that records one (`error()`, as
//! nccl_collective does), else success.
template <collective C>
status collective_error(const C& coll) {
  if constexpr (requires {
                  { coll.error() } -> std::convertible_to<status>;
                })
    return coll.error();
  else
    return status::success();
}

//! Makes a per-rank status the same on every rank, and checks that every
//! rank passed the same `fingerprint` (a hash of the arguments that must
//! agree). Collective: every rank calls it, failing or not. Returns the
//! status of the lowest failing rank (its code and index; ranks other than
//! that one get a message naming no detail), invalid_argument when the
//! fingerprints differ, else success. Three small collectives.
template <collective C>
status agree_status(C& coll, status local, std::uint64_t fingerprint) {
  const int P = coll.size(), r = coll.rank();
  const auto fp = static_cast<std::int64_t>(fingerprint >> 2);  // 62 bits: negation cannot overflow
  std::int64_t v[3] = {local.ok() ? 0 : static_cast<std::int64_t>(P - r), fp, -fp};
  coll.all_reduce_max(v, 3);
  if (v[0] > 0) {
    const int failing = P - static_cast<int>(v[0]);
    double cv[2] = {static_cast<double>(local.code()), static_cast<double>(local.index())};
    coll.broadcast(cv, 2, failing);
    if (failing == r) return local;
    return make_status(static_cast<status_code>(static_cast<std::int32_t>(cv[0])), "reported by another rank",
                       static_cast<std::int64_t>(cv[1]));
  }
  if (v[1] != -v[2])
    return make_status(status_code::invalid_argument,
                       "ranks disagree on the tree, the parameters or the vocabulary partition");
  return status::success();
}

}  // namespace specdec
