// KV commit on the host vs memcpy of the same bytes, on Llama-3-8B-like
// shapes: 32 layers, 8 KV heads, head dim 128, fp16 (moved as uint16_t),
// K and V as separate tensors, cache_len 2048, a 64-node draft tree and
// accepted paths of 4-8 tokens (root included). Bytes processed = the bytes
// the commit actually moves (entries whose source != destination), so the
// figures compare directly with BM_memcpy_same_bytes of the same
// configuration (one memcpy of that many bytes between two buffers) and
// BM_memcpy_gather (the same row copies from a precomputed address list:
// what a perfect commit without any index work would cost), and
// BM_memcpy_same_bytes_cold (the contiguous memcpy rotating over 32 buffer
// pairs, so large copies come from DRAM like the commit's).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "cache_workload.hpp"

#include "specdec/cache/kv_commit.hpp"

namespace {

using namespace cache_bench;

struct fixture {
  std::unique_ptr<std::uint16_t[]> k, v;  // default-initialised: untouched pages are never faulted in
  std::vector<specdec::kv_tensor<std::uint16_t>> tensors;
  specdec::kv_position_map map;
  workload w;
  std::int64_t moved_bytes = 0;
  std::vector<std::pair<std::uint16_t*, const std::uint16_t*>> rows;  // (dst, src) per moved row

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
      for (std::int64_t r = 0; r < R; ++r)
        for (std::int64_t l = 0; l < kLayers; ++l)
          for (std::int64_t h = 0; h < kHeads; ++h)
            for (std::int32_t j = koff[static_cast<std::size_t>(r)]; j < koff[static_cast<std::size_t>(r) + 1]; ++j) {
              const std::int64_t src = keep[static_cast<std::size_t>(j)];
              const std::int64_t dst = kCacheLen + (j - koff[static_cast<std::size_t>(r)]);
              if (src == dst) continue;
              rows.emplace_back(t.data + specdec::detail::kv_offset(t, map, r, l, h, dst),
                                t.data + specdec::detail::kv_offset(t, map, r, l, h, src));
              moved_bytes += kDim * 2;
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

void BM_memcpy_gather(benchmark::State& state) {
  fixture f(state.range(0), state.range(1) != 0);
  for (auto _ : state) {
    for (const auto& [d, s] : f.rows) std::memcpy(d, s, kDim * 2);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * f.moved_bytes);
}

void BM_memcpy_same_bytes(benchmark::State& state) {
  fixture f(state.range(0), state.range(1) != 0);
  const auto n = static_cast<std::size_t>(f.moved_bytes);
  std::vector<unsigned char> a(n, 1), b(n, 2);
  for (auto _ : state) {
    std::memcpy(b.data(), a.data(), n);
    benchmark::DoNotOptimize(b.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * f.moved_bytes);
}

// The same memcpy, but each iteration uses the next of 32 buffer pairs, so
// for 32 requests (17 MiB moved) the copies stream from DRAM, as the
// commit's own rows do: the fair baseline once the working set leaves L3.
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

void shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"requests", "paged"});
  for (int paged = 0; paged <= 1; ++paged)
    for (int r : {1, 32}) b->Args({r, paged});
}

}  // namespace

BENCHMARK(BM_commit_kv)->Apply(shapes);
BENCHMARK(BM_memcpy_gather)->Apply(shapes);
BENCHMARK(BM_memcpy_same_bytes)->Apply(shapes);
BENCHMARK(BM_memcpy_same_bytes_cold)->Apply(shapes);
