// specdec::collective for ranks simulated as threads of one process (the
// sanitizer-friendly stand-in for MPI/NCCL in the tests): shared slots and
// a barrier; sums fold in rank order as the contract requires.
#pragma once

#include <barrier>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

#include "specdec/parallel/collective.hpp"

namespace sharded_test {

class thread_group {
 public:
  static constexpr int slot = 4096;  // scalars per rank and call
  explicit thread_group(int ranks)
      : ranks_(ranks),
        bar_(ranks),
        d_(static_cast<std::size_t>(ranks * slot)),
        i_(static_cast<std::size_t>(ranks * slot)) {}
  int ranks_;
  std::barrier<> bar_;
  std::vector<double> d_;
  std::vector<std::int64_t> i_;
};

class thread_collective {
 public:
  thread_collective(thread_group& g, int rank) : g_(&g), r_(rank) {}
  int rank() const { return r_; }
  int size() const { return g_->ranks_; }
  thread_group& group() const { return *g_; }
  void all_reduce_sum(double* v, int n) { fold(v, n, size()); }
  void exclusive_prefix_sum(double* v, int n) { fold(v, n, r_); }
  void all_reduce_max(std::int64_t* v, int n) {
    for (int i = 0; i < n; ++i) g_->i_[static_cast<std::size_t>(r_ * thread_group::slot + i)] = v[i];
    g_->bar_.arrive_and_wait();
    for (int i = 0; i < n; ++i)
      for (int q = 0; q < size(); ++q) {
        const std::int64_t x = g_->i_[static_cast<std::size_t>(q * thread_group::slot + i)];
        v[i] = x > v[i] ? x : v[i];
      }
    g_->bar_.arrive_and_wait();
  }
  void broadcast(double* v, int n, int root) {
    if (r_ == root)
      for (int i = 0; i < n; ++i) g_->d_[static_cast<std::size_t>(i)] = v[i];
    g_->bar_.arrive_and_wait();
    if (r_ != root)
      for (int i = 0; i < n; ++i) v[i] = g_->d_[static_cast<std::size_t>(i)];
    g_->bar_.arrive_and_wait();
  }

 private:
  void fold(double* v, int n, int ranks) {
    for (int i = 0; i < n; ++i) g_->d_[static_cast<std::size_t>(r_ * thread_group::slot + i)] = v[i];
    g_->bar_.arrive_and_wait();
    for (int i = 0; i < n; ++i) v[i] = specdec::detail::fold_rank_order(g_->d_.data() + i, ranks, thread_group::slot);
    g_->bar_.arrive_and_wait();
  }
  thread_group* g_;
  int r_;
};

static_assert(specdec::collective<thread_collective>);

// thread_collective plus the optional all-gather (gathering_collective).
class thread_gather_collective : public thread_collective {
 public:
  thread_gather_collective(thread_group& g, int rank) : thread_collective(g, rank), g_(&g) {}
  void all_gather(const std::int64_t* mine, int n, std::int64_t* all) {
    for (int i = 0; i < n; ++i) g_->i_[static_cast<std::size_t>(rank() * thread_group::slot + i)] = mine[i];
    g_->bar_.arrive_and_wait();
    for (int q = 0; q < size(); ++q)
      for (int i = 0; i < n; ++i)
        all[static_cast<std::size_t>(q * n + i)] = g_->i_[static_cast<std::size_t>(q * thread_group::slot + i)];
    g_->bar_.arrive_and_wait();
  }

 private:
  thread_group* g_;
};

static_assert(specdec::gathering_collective<thread_gather_collective>);
static_assert(!specdec::gathering_collective<thread_collective>);

// Runs f(coll) on `ranks` threads; returns each rank's result.
template <class R>
std::vector<R> run_ranks(int ranks, const std::function<R(thread_collective&)>& f) {
  thread_group g(ranks);
  std::vector<R> out(static_cast<std::size_t>(ranks));
  std::vector<std::thread> ts;
  for (int r = 0; r < ranks; ++r)
    ts.emplace_back([&, r] {
      thread_collective c(g, r);
      out[static_cast<std::size_t>(r)] = f(c);
    });
  for (auto& t : ts) t.join();
  return out;
}

}  // namespace sharded_test
