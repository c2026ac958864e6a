// Tree mask building: packed rows from the parent recurrence (specdec)
// next to the naive per-node ancestor walk into a dense matrix (the way the
// "Tree-Based Speculative Decoding" NanoGPT walkthrough, builds its mask), plus a memcpy of
// the packed mask's bytes as the memory-bound reference. Items = nodes, so
// the reported time / item is ns per node.
//
// Tree shapes: arg 1 = 0 random recursive tree (shallow, depth ~ ln N),
// 1 near-chain (deep, depth ~ N / 2): the naive walk costs O(N * depth).
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "specdec/tree/mask.hpp"

namespace {

std::vector<specdec::node_id> make_tree(int n, int shape) {
  std::mt19937_64 rng(static_cast<std::uint64_t>(n) * 31 + static_cast<std::uint64_t>(shape));
  std::vector<specdec::node_id> p(static_cast<std::size_t>(n));
  p[0] = -1;
  for (int i = 1; i < n; ++i)
    p[static_cast<std::size_t>(i)] = shape == 0 ? static_cast<int>(rng() % static_cast<std::uint64_t>(i))
                                                : (i - 1 - static_cast<int>(rng() % 2 == 0 && i > 1));
  return p;
}

template <class Word>
void BM_packed_mask(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  const auto p = make_tree(n, static_cast<int>(state.range(1)));
  std::vector<Word> out(static_cast<std::size_t>(specdec::packed_mask_size<Word>(n)));
  for (auto _ : state) {
    const auto s = specdec::build_packed_mask<Word>(p, std::span<Word>(out));
    benchmark::DoNotOptimize(s);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * n);
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(out.size() * sizeof(Word)));
}

// Dense uint8 matrix from the same recurrence (row copy of the parent).
void BM_dense_mask_recurrence(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  const auto p = make_tree(n, static_cast<int>(state.range(1)));
  std::vector<std::uint8_t> out(static_cast<std::size_t>(n) * static_cast<std::size_t>(n));
  for (auto _ : state) {
    const auto s = specdec::build_dense_mask<std::uint8_t>(p, std::span<std::uint8_t>(out));
    benchmark::DoNotOptimize(s);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * n);
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(out.size()));
}

// Seed 002's way: zero an N x N bool matrix, then per node set itself and
// walk its ancestors one by one.
void BM_naive_ancestor_walk(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  const auto p = make_tree(n, static_cast<int>(state.range(1)));
  std::vector<std::uint8_t> out(static_cast<std::size_t>(n) * static_cast<std::size_t>(n));
  for (auto _ : state) {
    std::memset(out.data(), 0, out.size());
    for (int i = 0; i < n; ++i) {
      std::uint8_t* row = out.data() + static_cast<std::size_t>(i) * static_cast<std::size_t>(n);
      row[i] = 1;
      for (specdec::node_id a = p[static_cast<std::size_t>(i)]; a != -1; a = p[static_cast<std::size_t>(a)]) row[a] = 1;
    }
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * n);
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(out.size()));
}

// Memory-bound reference: copying as many bytes as the packed 64-bit mask.
void BM_memcpy_packed_bytes(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  const auto bytes = static_cast<std::size_t>(specdec::packed_mask_size<std::uint64_t>(n)) * sizeof(std::uint64_t);
  std::vector<std::uint8_t> src(bytes, 1), dst(bytes);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), bytes);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * n);
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(bytes));
}

void sizes(benchmark::internal::Benchmark* b) {
  for (int shape : {0, 1})
    for (int n : {16, 64, 256, 1024, 4096}) b->Args({n, shape});
  b->ArgNames({"N", "deep"});
}

}  // namespace

BENCHMARK(BM_packed_mask<std::uint64_t>)->Apply(sizes);
BENCHMARK(BM_packed_mask<std::uint32_t>)->Apply(sizes);
BENCHMARK(BM_dense_mask_recurrence)->Apply(sizes);
BENCHMARK(BM_naive_ancestor_walk)->Apply(sizes);
BENCHMARK(BM_memcpy_packed_bytes)->Apply(sizes);
