// KV commit on the host vs memcpy of the same rows, on Llama-3-8B-like
// shapes: 32 layers, 8 KV heads, head dim 128, fp16 (moved as uint16_t),
// K and V as separate tensors, cache_len 2048, a 64-node draft tree and
// accepted paths of 4-8 tokens (root included), 1 or 32 requests. Bytes
// processed = the bytes the commit actually moves (entries whose source !=
// destination). Contiguous caches are [B][L][H][S][D] (a moved piece is one
// head's 256 bytes; 32 requests address 8.9 GB, of which the 268 MB of tree
// positions are touched); paged caches are [pages][L][P][H][D] with 16-slot
// pages shuffled over two 161 MiB pools (a moved piece is 8 heads, 2 KiB).
//
// BM_commit_vs_memcpy is the figure of record. It times, alternately within
// one run, commit_kv and a "same-row memcpy", each with a steady clock, and
// reports both rates and their ratio (medians over the pairs). "Same rows"
// means: the memcpy side replays a precomputed list of (dst, src, bytes)
// on the SAME buffers the commit works on (not a copy of them), covering
// exactly the bytes the commit moves (entries whose source != destination,
// every layer and head of K and V), request by request, each request's
// pieces sorted by destination address and merged where they are adjacent
// on both sides without overlapping (contiguous: one 256-byte head row per
// piece; paged: the 8 heads of a position, 2 KiB). It does no index work
// and no prefetching: plain memcpy calls. Cache state: with evict:1 (the
// figure of record) every timed call is preceded by an untimed read of a
// buffer of 4x the last-level cache, so both sides start with the rows in
// DRAM and a cold TLB, as after a target forward over a large batch; with
// evict:0 the calls run back to back (each one's leftovers warm the next).
// The side that goes first alternates every pair, so a load change on the
// shared machine hits both alike. threads:N > 1 runs the commit on a
// caller-owned pool of N threads (kv_commit_executor); the memcpy side is
// always one thread. The load average at the start is reported as load1.
// Wall time (steady clock) gives ratio; ratio_cpu is the same ratio from
// the calling thread's CPU time, which a preemption on the shared machine
// does not inflate (threads:1 only).

// BM_commit_kv times the commit alone (Google Benchmark's own loop, warm),
// BM_commit_kv_per_request the per-request commit on the same rows, and
// BM_memcpy_same_bytes_cold one contiguous memcpy of the moved byte count
// rotating over 32 buffer pairs (a DRAM streaming bound).
#include <benchmark/benchmark.h>

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include "cache_workload.hpp"

#include "specdec/cache/keep_indices.hpp"
#include "specdec/cache/kv_commit.hpp"

namespace {

using namespace cache_bench;

struct fixture {
  std::unique_ptr<std::uint16_t[]> k, v;  // default-initialised: untouched pages are never faulted in
  std::vector<specdec::kv_tensor<std::uint16_t>> tensors;
  specdec::kv_position_map map;
  workload w;
  std::int64_t moved_bytes = 0;
  struct piece {
    unsigned char* dst;
    const unsigned char* src;
    std::size_t bytes;
  };
  std::vector<piece> rows;  // the same-row memcpy list (see the file comment)

  fixture(std::int64_t R, bool paged) : w(R, paged) {
    if (!paged) {
      const std::int64_t elems = R * kLayers * kHeads * kCapacity * kDim;
      k.reset(new std::uint16_t[static_cast<std::size_t>(elems)]);
      v.reset(new std::uint16_t[static_cast<std::size_t>(elems)]);
      tensors.push_back(specdec::make_kv_tensor_lhsd(k.get(), R, kLayers, kHeads, kCapacity, kDim));
      tensors.push_back(specdec::make_kv_tensor_lhsd(v.get(), R, kLayers, kHeads, kCapacity, kDim));
      map = specdec::contiguous_positions(kCapacity);
    } else {
      const std::int64_t elems = w.pages * kLayers * kPage * kHeads * kDim;
      k.reset(new std::uint16_t[static_cast<std::size_t>(elems)]);
      v.reset(new std::uint16_t[static_cast<std::size_t>(elems)]);
      tensors.push_back(specdec::make_kv_tensor_paged_nhd(k.get(), w.pages, kLayers, kPage, kHeads, kDim));
      tensors.push_back(specdec::make_kv_tensor_paged_nhd(v.get(), w.pages, kLayers, kPage, kHeads, kDim));
      map = specdec::paged_positions(w.table.data(), w.per_row, kPage, w.pages);
    }
    const auto& koff = w.koff;
    const auto& keep = w.keep;
    // Touch (fill) only what the commit reads or writes.
    for (const auto& t : tensors)
      for (std::int64_t r = 0; r < R; ++r)
        for (std::int64_t l = 0; l < kLayers; ++l)
          for (std::int64_t h = 0; h < kHeads; ++h)
            for (std::int64_t p = kCacheLen; p < kCapacity; ++p) {
              std::uint16_t* row = t.data + specdec::detail::kv_offset(t, map, r, l, h, p);
              for (std::int64_t d = 0; d < kDim; ++d) row[d] = static_cast<std::uint16_t>(p * 131 + d);
            }
    for (const auto& t : tensors)
      for (std::int64_t r = 0; r < R; ++r) {
        std::vector<piece> mine;
        for (std::int64_t l = 0; l < kLayers; ++l)
          for (std::int64_t h = 0; h < kHeads; ++h)
            for (std::int32_t j = koff[static_cast<std::size_t>(r)]; j < koff[static_cast<std::size_t>(r) + 1]; ++j) {
              const std::int64_t src = keep[static_cast<std::size_t>(j)];
              const std::int64_t dst = kCacheLen + (j - koff[static_cast<std::size_t>(r)]);
              if (src == dst) continue;
              mine.push_back(
                  {reinterpret_cast<unsigned char*>(t.data + specdec::detail::kv_offset(t, map, r, l, h, dst)),
                   reinterpret_cast<const unsigned char*>(t.data + specdec::detail::kv_offset(t, map, r, l, h, src)),
                   kDim * 2});
              moved_bytes += kDim * 2;
            }
        // Address order, then one memcpy per piece contiguous on both sides
        // (never merged into an overlap, which memcpy could not do).
        std::sort(mine.begin(), mine.end(), [](const piece& a, const piece& b) { return a.dst < b.dst; });
        for (const piece& p : mine) {
          if (!rows.empty()) {
            piece& b = rows.back();
            const bool adjacent = b.dst + b.bytes == p.dst && b.src + b.bytes == p.src;
            const std::size_t merged = b.bytes + p.bytes;
            const bool disjoint = b.src >= b.dst + merged || b.dst >= b.src + merged;
            if (adjacent && disjoint) {
              b.bytes = merged;
              continue;
            }
          }
          rows.push_back(p);
        }
      }
  }
};

void BM_commit_kv(benchmark::State& state) {
  fixture f(state.range(0), state.range(1) != 0);
  for (auto _ : state) {
    const auto s = specdec::commit_kv<std::uint16_t>(f.tensors, f.map, f.w.clen, f.w.koff, f.w.keep);
    benchmark::DoNotOptimize(s);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * f.moved_bytes);
  state.counters["moved_KiB"] = static_cast<double>(f.moved_bytes) / 1024.0;
}

// The per-request commit (commit_kv_per_request, the host twin of the
// device kernel: each request checked on its own and given a status, a bad
// one left untouched) on the same rows as BM_commit_kv: what the per-request
// checks and statuses cost next to the all-or-nothing commit.
void BM_commit_kv_per_request(benchmark::State& state) {
  fixture f(state.range(0), state.range(1) != 0);
  std::vector<std::int32_t> request_status(static_cast<std::size_t>(state.range(0)), -1);
  for (auto _ : state) {
    const auto s =
        specdec::commit_kv_per_request<std::uint16_t>(f.tensors, f.map, f.w.clen, f.w.koff, f.w.keep, request_status);
    benchmark::DoNotOptimize(s);
    benchmark::ClobberMemory();
  }
  if (std::any_of(request_status.begin(), request_status.end(), [](std::int32_t c) { return c != 0; }))
    state.SkipWithError("a request failed its checks");
  state.SetBytesProcessed(state.iterations() * f.moved_bytes);
  state.counters["moved_KiB"] = static_cast<double>(f.moved_bytes) / 1024.0;
}

// One contiguous memcpy of the moved byte count, each iteration on the next
// of 32 buffer pairs so that for 32 requests (17 MiB moved) the copies
// stream from DRAM: what the same bytes cost when they are not scattered.
void BM_memcpy_same_bytes_cold(benchmark::State& state) {
  fixture f(state.range(0), state.range(1) != 0);
  const auto n = static_cast<std::size_t>(f.moved_bytes);
  constexpr std::size_t kCopies = 32;
  std::vector<unsigned char> a(n * kCopies, 1), b(n * kCopies, 2);
  std::size_t i = 0;
  for (auto _ : state) {
    std::memcpy(b.data() + i * n, a.data() + i * n, n);
    i = (i + 1) % kCopies;
    benchmark::DoNotOptimize(b.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * f.moved_bytes);
}

// A caller-owned pool: n - 1 workers plus the calling thread pull items
// from a shared counter. What an engine would plug into kv_commit_executor.
class pool {
 public:
  explicit pool(int n) {
    for (int i = 1; i < n; ++i) workers_.emplace_back([this] { work(); });
  }
  pool(const pool&) = delete;
  pool& operator=(const pool&) = delete;
  ~pool() {
    {
      const std::lock_guard<std::mutex> lock(m_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& w : workers_) w.join();
  }

  static void parallel_for(void* self, std::int64_t n, specdec::kv_commit_executor::body_fn body, void* ctx) {
    static_cast<pool*>(self)->run(n, body, ctx);
  }

 private:
  void run(std::int64_t n, specdec::kv_commit_executor::body_fn body, void* ctx) {
    {
      const std::lock_guard<std::mutex> lock(m_);
      body_ = body;
      ctx_ = ctx;
      n_ = n;
      next_.store(0);
      busy_ = static_cast<int>(workers_.size());
      ++generation_;
    }
    cv_.notify_all();
    drain();
    std::unique_lock<std::mutex> lock(m_);
    done_.wait(lock, [this] { return busy_ == 0; });
  }
  void drain() {
    for (std::int64_t i = next_.fetch_add(1); i < n_; i = next_.fetch_add(1)) body_(ctx_, i);
  }
  void work() {
    std::uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(m_);
        cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
      }
      drain();
      const std::lock_guard<std::mutex> lock(m_);
      if (--busy_ == 0) done_.notify_one();
    }
  }

  std::vector<std::thread> workers_;
  std::mutex m_;
  std::condition_variable cv_, done_;
  specdec::kv_commit_executor::body_fn body_ = nullptr;
  void* ctx_ = nullptr;
  std::int64_t n_ = 0;
  std::atomic<std::int64_t> next_{0};
  int busy_ = 0;
  std::uint64_t generation_ = 0;
  bool stop_ = false;
};

// Reads a buffer of 4x the last-level cache (at least 128 MiB) so that what
// follows finds neither its rows in any cache level nor its pages in the TLB.
class evictor {
 public:
  evictor() {
    long llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (llc <= 0) llc = 32L << 20;
    buf_.assign(std::max<std::size_t>(4 * static_cast<std::size_t>(llc), std::size_t{128} << 20) / 8, 1);
  }
  void operator()() {
    std::uint64_t sum = 0;
    for (std::size_t i = 0; i < buf_.size(); i += 8) sum += buf_[i];  // one read per 64-byte line
    benchmark::DoNotOptimize(sum);
  }

 private:
  std::vector<std::uint64_t> buf_;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n == 0 ? 0.0 : (n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]));
}

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

void BM_commit_vs_memcpy(benchmark::State& state) {
  const std::int64_t R = state.range(0);
  fixture f(R, state.range(1) != 0);
  const bool evict = state.range(2) != 0;
  const int threads = static_cast<int>(state.range(3));
  double load = 0;
  if (std::FILE* fp = std::fopen("/proc/loadavg", "r")) {
    if (std::fscanf(fp, "%lf", &load) != 1) load = 0;
    std::fclose(fp);
  }
  evictor flush;
  pool workers(threads);
  specdec::kv_commit_executor exec;
  if (threads > 1) exec = {&pool::parallel_for, &workers};
  using clock = std::chrono::steady_clock;
  std::vector<double> tc, tm, ratio, ratio_cpu;
  bool ok = true;
  for (auto _ : state) {
    double wall[2] = {0, 0}, cpu[2] = {0, 0};  // [0]: commit, [1]: memcpy
    for (int side = 0; side < 2; ++side) {
      const bool commit_side = (side == 0) == (tc.size() % 2 == 0);
      if (evict) flush();
      const double c0 = thread_cpu_seconds();
      const auto t0 = clock::now();
      if (commit_side) {
        ok = ok && specdec::commit_kv<std::uint16_t>(f.tensors, f.map, f.w.clen, f.w.koff, f.w.keep, exec).ok();
      } else {
        for (const auto& p : f.rows) std::memcpy(p.dst, p.src, p.bytes);
      }
      benchmark::ClobberMemory();
      wall[commit_side ? 0 : 1] = std::chrono::duration<double>(clock::now() - t0).count();
      cpu[commit_side ? 0 : 1] = thread_cpu_seconds() - c0;
    }
    tc.push_back(wall[0]);
    tm.push_back(wall[1]);
    ratio.push_back(wall[1] / wall[0]);  // rate ratio: commit bytes/s over memcpy bytes/s
    ratio_cpu.push_back(cpu[1] / cpu[0]);
    state.SetIterationTime(wall[0]);
  }
  if (!ok) state.SkipWithError("commit_kv failed");
  const auto bytes = static_cast<double>(f.moved_bytes);
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * f.moved_bytes);
  state.counters["commit_GBps"] = bytes / median(tc) / 1e9;
  state.counters["memcpy_GBps"] = bytes / median(tm) / 1e9;
  state.counters["ratio"] = median(ratio);
  // Calling-thread CPU time: blind to preemption on a loaded machine (but
  // not to the pool's other threads, so only meaningful for threads:1).
  if (threads == 1) state.counters["ratio_cpu"] = median(ratio_cpu);
  state.counters["load1"] = load;
  state.counters["memcpy_calls"] = static_cast<double>(f.rows.size());
}

void shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"requests", "paged"});
  for (int paged = 0; paged <= 1; ++paged)
    for (int r : {1, 32}) b->Args({r, paged});
}

void paired(benchmark::internal::Benchmark* b) {
  b->ArgNames({"requests", "paged", "evict", "threads"});
  for (int evict : {1, 0})
    for (int paged = 0; paged <= 1; ++paged)
      for (int threads : {1, 2}) b->Args({32, paged, evict, threads});
}

}  // namespace

BENCHMARK(BM_commit_vs_memcpy)->Apply(paired)->UseManualTime()->Iterations(60)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_commit_kv)->Apply(shapes);
BENCHMARK(BM_commit_kv_per_request)->Apply(shapes);

// keep_indices_from_results: R requests of 64-node random trees (parent of
// node i uniform in [0, i)), each verified to the path from a random node
// up to the root (2-8 nodes typically), results as verify_batch writes them.
// Items = kept positions per call (bytes/s: the paths read and keep lists
// written, 4 + 8 bytes each).
void BM_keep_from_results(benchmark::State& state) {
  const auto R = static_cast<std::int32_t>(state.range(0));
  constexpr std::int32_t n = 64;
  std::mt19937 g(5);
  std::vector<specdec::node_id> parent(static_cast<std::size_t>(R * n)), paths(parent.size());
  std::vector<std::int32_t> offsets{0};
  std::vector<specdec::verify_result> results(static_cast<std::size_t>(R));
  std::vector<specdec::position_id> cache_len(static_cast<std::size_t>(R), 1000);
  for (std::int32_t r = 0; r < R; ++r) {
    specdec::node_id* p = parent.data() + r * n;
    p[0] = -1;
    for (std::int32_t i = 1; i < n; ++i) p[i] = static_cast<specdec::node_id>(g() % static_cast<unsigned>(i));
    std::vector<specdec::node_id> up;
    for (auto u = static_cast<specdec::node_id>(g() % n); u >= 0; u = p[u]) up.push_back(u);
    std::copy(up.rbegin(), up.rend(), paths.begin() + r * n);
    results[static_cast<std::size_t>(r)].accepted = static_cast<std::int32_t>(up.size()) - 1;
    offsets.push_back((r + 1) * n);
  }
  std::vector<specdec::position_id> keep(parent.size());
  std::vector<std::int32_t> keep_offsets(static_cast<std::size_t>(R) + 1), status(static_cast<std::size_t>(R));
  specdec::keep_from_results_batch b;
  b.num_requests = R;
  b.tree_offsets = offsets.data();
  b.parent = parent.data();
  b.node_capacity = R * n;
  b.paths = paths.data();
  b.path_stride = n;
  b.results = results.data();
  b.cache_len = cache_len.data();
  b.keep = keep.data();
  b.keep_offsets = keep_offsets.data();
  b.request_status = status.data();
  for (auto _ : state) {
    benchmark::DoNotOptimize(specdec::keep_indices_from_results(b));
    benchmark::ClobberMemory();
  }
  const std::int64_t kept = keep_offsets.back();
  state.SetItemsProcessed(state.iterations() * kept);
  state.SetBytesProcessed(state.iterations() * kept * 12);
  state.counters["kept_per_request"] = static_cast<double>(kept) / R;
}
BENCHMARK(BM_keep_from_results)->Arg(1)->Arg(32)->Arg(256);
BENCHMARK(BM_memcpy_same_bytes_cold)->Apply(shapes);
