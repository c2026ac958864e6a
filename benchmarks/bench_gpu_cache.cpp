// Device KV commit (specdec::kernels::kv_commit) vs a device-to-device
// cudaMemcpyAsync of the same number of bytes, on Llama-3-8B-like shapes
// (32 layers, 8 KV heads, head dim 128, fp16, K and V separate), cache_len
// 2048, accepted paths of 4-8 tokens out of a 64-node tree, contiguous
// [B][L][H][S][D] and paged [pages][L][16][H][D], 1 and 32 requests.
// Timed with CUDA events (manual time). Bytes = the bytes the commit moves.
// Exits without benchmarks when no device is present.
#include <benchmark/benchmark.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "cache_workload.hpp"

#include "specdec/kernels.hpp"

namespace {

using namespace cache_bench;

template <class T>
T* device_copy(const std::vector<T>& h) {
  T* d = nullptr;
  cudaMalloc(reinterpret_cast<void**>(&d), std::max<std::size_t>(1, h.size()) * sizeof(T));
  if (!h.empty()) cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice);
  return d;
}

void BM_gpu_commit(benchmark::State& state) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    state.SkipWithError("no CUDA device");
    return;
  }
  const std::int64_t R = state.range(0);
  const bool paged = state.range(1) != 0;
  const bool baseline = state.range(2) != 0;
  const workload w(R, paged);
  const std::int64_t moved_bytes = w.moved_rows * kLayers * kHeads * kDim * 2 * 2;
  const std::int64_t pages = w.pages, per_row = w.per_row;
  const std::int64_t elems = paged ? pages * kLayers * kPage * kHeads * kDim : R * kLayers * kHeads * kCapacity * kDim;
  std::uint16_t *k = nullptr, *v = nullptr;
  cudaMalloc(reinterpret_cast<void**>(&k), static_cast<std::size_t>(elems) * 2);
  cudaMalloc(reinterpret_cast<void**>(&v), static_cast<std::size_t>(elems) * 2);
  std::vector<specdec::kv_tensor<void>> ts;
  for (auto* p : {k, v}) {
    const auto t = paged ? specdec::make_kv_tensor_paged_nhd(p, pages, kLayers, kPage, kHeads, kDim)
                         : specdec::make_kv_tensor_lhsd(p, R, kLayers, kHeads, kCapacity, kDim);
    ts.push_back(specdec::erase_kv_tensor(t));
  }
  auto* d_ts = device_copy(ts);
  auto* d_clen = device_copy(w.clen);
  auto* d_koff = device_copy(w.koff);
  auto* d_keep = device_copy(w.keep);
  auto* d_table = device_copy(w.table);
  std::uint64_t* d_status = nullptr;
  cudaMalloc(reinterpret_cast<void**>(&d_status), 8);
  unsigned char *a = nullptr, *b = nullptr;
  cudaMalloc(reinterpret_cast<void**>(&a), static_cast<std::size_t>(moved_bytes));
  cudaMalloc(reinterpret_cast<void**>(&b), static_cast<std::size_t>(moved_bytes));
  specdec::kernels::kv_commit_params p;
  p.tensors = d_ts;
  p.num_tensors = 2;
  p.elem_bytes = 2;
  p.max_layers = kLayers;
  p.max_heads = kHeads;
  p.map = paged ? specdec::paged_positions(d_table, per_row, kPage, pages) : specdec::contiguous_positions(kCapacity);
  p.batch = specdec::kv_commit_batch{static_cast<std::int32_t>(R), d_clen, d_koff, d_keep};
  p.total_keep = static_cast<std::int64_t>(w.keep.size());
  p.status_word = d_status;
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  for (auto _ : state) {
    cudaEventRecord(e0);
    if (baseline) {
      cudaMemcpyAsync(b, a, static_cast<std::size_t>(moved_bytes), cudaMemcpyDeviceToDevice);
    } else if (!specdec::kernels::kv_commit(p, nullptr, 0, nullptr).ok()) {
      state.SkipWithError("kv_commit failed");
      break;
    }
    cudaEventRecord(e1);
    cudaEventSynchronize(e1);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    state.SetIterationTime(static_cast<double>(ms) / 1e3);
  }
  std::uint64_t word = 0;
  cudaMemcpy(&word, d_status, 8, cudaMemcpyDeviceToHost);
  if (!baseline && !specdec::kernels::kv_commit_result(word).ok()) state.SkipWithError("device reported an error");
  state.SetBytesProcessed(state.iterations() * moved_bytes);
  state.counters["moved_KiB"] = static_cast<double>(moved_bytes) / 1024.0;
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  for (void* ptr : {static_cast<void*>(k), static_cast<void*>(v), static_cast<void*>(d_ts), static_cast<void*>(d_clen),
                    static_cast<void*>(d_koff), static_cast<void*>(d_keep), static_cast<void*>(d_table),
                    static_cast<void*>(d_status), static_cast<void*>(a), static_cast<void*>(b)})
    cudaFree(ptr);
}

}  // namespace

BENCHMARK(BM_gpu_commit)
    ->ArgNames({"requests", "paged", "memcpy_baseline"})
    ->ArgsProduct({{1, 32}, {0, 1}, {0, 1}})
    ->UseManualTime();
