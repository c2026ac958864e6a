// Vocabulary-parallel verification with the rows in GPU memory
// (parallel/cuda_shard.cuh): one rank per visible GPU (one thread each,
// communicators from ncclCommInitAll), or one rank on one GPU; every rank's
// result must equal the host's partitioned-order result token for token,
// for random trees and every mode, and a NaN in one rank's shard must give
// the same status on every rank. Prints which configuration ran. Exits 77
// (CTest: skipped) without a CUDA device.
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdio>
#include <thread>
#include <vector>

#include "parallel/sharded_cases.hpp"
#include "specdec/parallel/cuda_shard.cuh"

using namespace specdec;
using namespace sharded_test;

namespace {

using executor = nccl_shard_executor<256>;

view2d<const float> device_matrix(const float* d, std::int32_t N, std::int64_t W) {
  return view2d<const float>{d, {N, W}, {W, 1}};
}

#define GPU_OK(x)                                                         \
  do {                                                                    \
    if ((x) != cudaSuccess) {                                             \
      std::fprintf(stderr, "%s:%d: %s failed\n", __FILE__, __LINE__, #x); \
      return outcome{status_code::cuda_error, -1, 0, 0, {}, {}};          \
    }                                                                     \
  } while (0)

// Rank r's verification of case c with its shard copied to device r.
outcome run_device_rank(ncclComm_t comm, int dev, int r, int P, const tree_case& c,
                        std::span<const std::int64_t> bounds, const verify_params& vp, std::int64_t nan_at) {
  GPU_OK(cudaSetDevice(dev));
  const std::int64_t b0 = bounds[static_cast<std::size_t>(r)], b1 = bounds[static_cast<std::size_t>(r) + 1];
  auto ps = shard_of(c.p, c.V, c.N, b0, b1);
  const auto qs = shard_of(c.q, c.V, c.N, b0, b1);
  if (nan_at >= 0 && !ps.empty()) ps[static_cast<std::size_t>(nan_at) % ps.size()] = std::nanf("");
  std::size_t ex_bytes = 0, host_bytes = 0;
  if (!sharded_verify_workspace_parts(bounds, r, P, c.N, ex_bytes, host_bytes))
    return outcome{status_code::invalid_argument, -1, 0, 0, {}, {}};
  cudaStream_t stream{};
  GPU_OK(cudaStreamCreate(&stream));
  float *dp = nullptr, *dq = nullptr;
  void *ws = nullptr, *scratch = nullptr, *staging = nullptr;
  const std::size_t rows = ps.size() * sizeof(float) + sizeof(float);
  GPU_OK(cudaMalloc(&dp, rows));
  GPU_OK(cudaMalloc(&dq, rows));
  GPU_OK(cudaMalloc(&ws, ex_bytes));
  GPU_OK(cudaMalloc(&scratch, executor::scratch_bytes(P)));
  GPU_OK(cudaMallocHost(&staging, executor::staging_bytes(P)));
  GPU_OK(cudaMemcpy(dp, ps.data(), ps.size() * sizeof(float), cudaMemcpyHostToDevice));
  GPU_OK(cudaMemcpy(dq, qs.data(), qs.size() * sizeof(float), cudaMemcpyHostToDevice));
  std::vector<std::byte> host(host_bytes + 8);
  std::vector<node_id> path(static_cast<std::size_t>(c.N));
  std::vector<token_id> tokens(static_cast<std::size_t>(c.N));
  verify_result res{};
  outcome o;
  {
    executor ex(comm, stream, scratch, executor::scratch_bytes(P), staging, executor::staging_bytes(P));
    const status s =
        verify_tree_sharded_on(ex, bounds, c.view(), device_matrix(ps.empty() ? nullptr : dp, c.N, b1 - b0),
                               device_matrix(qs.empty() ? nullptr : dq, c.N, b1 - b0), vp,
                               std::span<std::byte>(static_cast<std::byte*>(ws), ex_bytes),
                               std::span<std::byte>(host).first(host_bytes), path, tokens, res);
    o = record(s, res, path, tokens);
  }
  cudaFree(dp);
  cudaFree(dq);
  cudaFree(ws);
  cudaFree(scratch);
  cudaFreeHost(staging);
  cudaStreamDestroy(stream);
  return o;
}

}  // namespace

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices < 1) {
    std::printf("no CUDA device: the device-resident sharded test is skipped\n");
    return 77;
  }
  const int P = devices;
  std::vector<int> devs(static_cast<std::size_t>(P));
  for (int d = 0; d < P; ++d) devs[static_cast<std::size_t>(d)] = d;
  std::vector<ncclComm_t> comms(static_cast<std::size_t>(P));
  if (ncclCommInitAll(comms.data(), P, devs.data()) != ncclSuccess) {
    std::printf("ncclCommInitAll failed on %d devices\n", P);
    return 1;
  }
  std::printf("device-resident sharded verification: %d rank(s), one per visible GPU\n", P);
  int failures = 0, runs = 0;
  auto run_all = [&](const tree_case& c, std::span<const std::int64_t> bounds, const verify_params& vp,
                     std::int64_t nan_at) {
    std::vector<outcome> got(static_cast<std::size_t>(P));
    std::vector<std::thread> ts;
    for (int r = 0; r < P; ++r)
      ts.emplace_back([&, r] {
        got[static_cast<std::size_t>(r)] =
            run_device_rank(comms[static_cast<std::size_t>(r)], r, r, P, c, bounds, vp, nan_at);
      });
    for (auto& t : ts) t.join();
    return got;
  };
  for (const std::int64_t V : {std::int64_t{3001}, std::int64_t{40000}}) {
    const auto bounds = uneven_bounds(V, P);
    for (std::uint64_t seed = 1; seed <= 4; ++seed) {
      const auto c = make_tree_case(seed * 7 + static_cast<std::uint64_t>(P), V, 24, seed % 2 == 0);
      for (const verify_mode m : all_modes) {
        verify_params vp{};
        vp.mode = m;
        vp.seed = seed;
        const outcome want = run_partitioned(c, bounds, vp);
        for (const outcome& o : run_all(c, bounds, vp, -1)) {
          ++runs;
          if (!(o == want)) {
            ++failures;
            std::printf("MISMATCH V %lld seed %llu mode %s\n", static_cast<long long>(V),
                        static_cast<unsigned long long>(seed), verify_mode_name(m));
          }
        }
      }
    }
  }
  // A NaN in rank 0's root row: the same status on every rank.
  {
    const auto bounds = uneven_bounds(3001, P);
    const auto c = make_tree_case(5, 3001, 16);
    const auto got = run_all(c, bounds, verify_params{}, 3);
    for (const outcome& o : got) {
      ++runs;
      if (o.code != status_code::non_finite || !(o == got[0])) ++failures;
    }
  }
  for (auto& cm : comms) ncclCommDestroy(cm);
  std::printf("%d rank results, %d mismatches\n", runs, failures);
  return failures == 0 ? 0 : 1;
}
