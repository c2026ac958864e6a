// Device KV commit (specdec::kernels::commit_kv) vs a device-to-device
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
#include "gpu_bench.hpp"

#include "specdec/kernels.hpp"

namespace {

using namespace cache_bench;
using gpu_bench::dev_buf;
using gpu_bench::device_copy;

void BM_gpu_commit(benchmark::State& state) {
  if (gpu_bench::skip_without_device(state)) return;
  const std::int64_t R = state.range(0);
  const bool paged = state.range(1) != 0;
  const bool baseline = state.range(2) != 0;
  const workload w(R, paged);
  const std::int64_t moved_bytes = w.moved_rows * kLayers * kHeads * kDim * 2 * 2;
  const std::int64_t pages = w.pages, per_row = w.per_row;
  const std::int64_t elems = paged ? pages * kLayers * kPage * kHeads * kDim : R * kLayers * kHeads * kCapacity * kDim;
  dev_buf k(static_cast<std::size_t>(elems) * 2), v(static_cast<std::size_t>(elems) * 2);
  std::vector<specdec::kv_tensor<void>> ts;
  for (const dev_buf* t : {&k, &v}) {
    auto* d = t->as<std::uint16_t>();
    const auto kt = paged ? specdec::make_kv_tensor_paged_nhd(d, pages, kLayers, kPage, kHeads, kDim)
                          : specdec::make_kv_tensor_lhsd(d, R, kLayers, kHeads, kCapacity, kDim);
    ts.push_back(specdec::erase_kv_tensor(kt));
  }
  const dev_buf d_ts = device_copy(ts), d_clen = device_copy(w.clen), d_koff = device_copy(w.koff),
                d_keep = device_copy(w.keep), d_table = device_copy(w.table);
  dev_buf d_status(sizeof(std::int32_t) * static_cast<std::size_t>(R)), a(static_cast<std::size_t>(moved_bytes)),
      b(static_cast<std::size_t>(moved_bytes));
  if (k.p == nullptr || v.p == nullptr || a.p == nullptr || b.p == nullptr) {
    state.SkipWithError("cudaMalloc failed");
    return;
  }
  specdec::kernels::kv_commit_params p;
  p.tensors = d_ts.as<specdec::kv_tensor<void>>();
  p.num_tensors = 2;
  p.elem_bytes = 2;
  p.max_layers = kLayers;
  p.max_heads = kHeads;
  p.map = paged ? specdec::paged_positions(d_table.as<std::int32_t>(), per_row, kPage, pages)
                : specdec::contiguous_positions(kCapacity);
  p.batch = specdec::kv_commit_batch{static_cast<std::int32_t>(R), d_clen.as<specdec::position_id>(),
                                     d_koff.as<std::int32_t>(), d_keep.as<specdec::position_id>()};
  p.total_keep = static_cast<std::int64_t>(w.keep.size());
  p.request_status = d_status.as<std::int32_t>();
  gpu_bench::timed_loop(state, [&] {
    if (baseline)
      return cudaMemcpyAsync(b.p, a.p, static_cast<std::size_t>(moved_bytes), cudaMemcpyDeviceToDevice) == cudaSuccess;
    return specdec::kernels::commit_kv(p, nullptr, 0, nullptr).ok();
  });
  std::vector<std::int32_t> codes(static_cast<std::size_t>(R));
  cudaMemcpy(codes.data(), d_status.p, codes.size() * sizeof(std::int32_t), cudaMemcpyDeviceToHost);
  if (!baseline && !specdec::kernels::kv_commit_result(codes).ok()) state.SkipWithError("device reported an error");
  state.SetBytesProcessed(state.iterations() * moved_bytes);
  state.counters["moved_KiB"] = static_cast<double>(moved_bytes) / 1024.0;
}

}  // namespace

BENCHMARK(BM_gpu_commit)
    ->ArgNames({"requests", "paged", "memcpy_baseline"})
    ->ArgsProduct({{1, 32}, {0, 1}, {0, 1}})
    ->UseManualTime();
