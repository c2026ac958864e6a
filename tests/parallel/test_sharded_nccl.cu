// Vocabulary-parallel verification with the rows in GPU memory
// (parallel/cuda_shard.cuh): one rank per visible GPU (one thread each,
// communicators from ncclCommInitAll), or one rank on one GPU; every rank's
// result must equal the host's partitioned-order result token for token,
// for random trees and every mode, and a NaN in one rank's shard must give
// the same status on every rank. The level-batched sharded top-k of
// drafting runs on the same executor: every rank's candidates, counts and
// masses must equal the host executor's (threads) bit for bit, and a NaN
// in one rank's rows must give the same status everywhere; caller uniforms
// copied from Philox must reproduce the seeded result. Batches of requests
// (verify_trees_sharded on nccl_batch_backend) must give every request its
// result alone. Prints which
// configuration ran. Exits 77 (CTest: skipped) without a CUDA device.
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdio>
#include <thread>
#include <vector>

#include "parallel/sharded_cases.hpp"
#include "parallel/thread_collective.hpp"
#include "specdec/parallel/cuda_shard.cuh"
#include "specdec/parallel/sharded_topk.hpp"

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
                        std::span<const std::int64_t> bounds, const verify_params& vp, std::int64_t nan_at,
                        const caller_uniforms* cu = nullptr) {
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
    const auto pd = device_matrix(ps.empty() ? nullptr : dp, c.N, b1 - b0);
    const auto qd = device_matrix(qs.empty() ? nullptr : dq, c.N, b1 - b0);
    const std::span<std::byte> ew(static_cast<std::byte*>(ws), ex_bytes);
    const std::span<std::byte> hw = std::span<std::byte>(host).first(host_bytes);
    const status s = verify_tree_sharded(ex, bounds, c.view(), pd, qd, vp, {ew, hw}, path, tokens, res, cu);
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

// What one rank's sharded top-k of a level returned.
struct topk_out {
  status_code code = status_code::ok;
  std::int64_t index = -1;
  std::vector<token_id> tok;
  std::vector<float> val;
  std::vector<std::int32_t> counts;
  std::vector<double> mass;
  bool operator==(const topk_out&) const = default;
};

#define GPU_OK_T(x)                                                       \
  do {                                                                    \
    if ((x) != cudaSuccess) {                                             \
      std::fprintf(stderr, "%s:%d: %s failed\n", __FILE__, __LINE__, #x); \
      return topk_out{status_code::cuda_error, -1, {}, {}, {}, {}};       \
    }                                                                     \
  } while (0)

// One rank's top-k of n rows through `run` (device or host executor).
template <class Run>
topk_out topk_rank(std::int32_t n, std::int32_t k, Run&& run) {
  topk_out o;
  o.tok.assign(static_cast<std::size_t>(n * k), -1);
  o.val.assign(o.tok.size(), -1.0f);
  o.counts.assign(static_cast<std::size_t>(n), -1);
  o.mass.assign(static_cast<std::size_t>(n), -1.0);
  const status s = run(make_view(o.tok.data(), n, k), make_view(o.val.data(), n, k), std::span<std::int32_t>(o.counts),
                       std::span<double>(o.mass));
  o.code = s.code();
  o.index = s.index();
  if (!s.ok()) return topk_out{s.code(), s.index(), {}, {}, {}, {}};
  return o;
}

topk_out run_device_topk(ncclComm_t comm, int dev, int r, int P, const std::vector<float>& m, std::int32_t n,
                         std::int64_t V, std::span<const std::int64_t> bounds, std::int32_t k) {
  GPU_OK_T(cudaSetDevice(dev));
  const std::int64_t b0 = bounds[static_cast<std::size_t>(r)], b1 = bounds[static_cast<std::size_t>(r) + 1];
  const auto mine = shard_of(m, V, n, b0, b1);
  std::size_t eb = 0, hb = 0;
  if (!sharded_topk_rows_workspace_parts(n, b1 - b0, k, P, eb, hb))
    return topk_out{status_code::invalid_argument, -1, {}, {}, {}, {}};
  cudaStream_t stream{};
  GPU_OK_T(cudaStreamCreate(&stream));
  float* d = nullptr;
  void *ws = nullptr, *scratch = nullptr, *staging = nullptr, *host = nullptr;
  GPU_OK_T(cudaMalloc(&d, mine.size() * sizeof(float) + sizeof(float)));
  GPU_OK_T(cudaMalloc(&ws, eb));
  GPU_OK_T(cudaMalloc(&scratch, executor::scratch_bytes(P)));
  GPU_OK_T(cudaMallocHost(&staging, executor::staging_bytes(P)));
  GPU_OK_T(cudaMallocHost(&host, hb));
  GPU_OK_T(cudaMemcpy(d, mine.data(), mine.size() * sizeof(float), cudaMemcpyHostToDevice));
  topk_out o;
  {
    executor ex(comm, stream, scratch, executor::scratch_bytes(P), staging, executor::staging_bytes(P));
    o = topk_rank(n, k, [&](view2d<token_id> t, view2d<float> v, std::span<std::int32_t> c, std::span<double> ms) {
      return sharded_topk_rows_on(ex, b0, V, device_matrix(mine.empty() ? nullptr : d, n, b1 - b0), k,
                                  std::span<std::byte>(static_cast<std::byte*>(ws), eb),
                                  std::span<std::byte>(static_cast<std::byte*>(host), hb), t, v, c, ms);
    });
  }
  cudaFree(d);
  cudaFree(ws);
  cudaFree(scratch);
  cudaFreeHost(staging);
  cudaFreeHost(host);
  cudaStreamDestroy(stream);
  return o;
}

// The host executor's answer for every rank (threads).
std::vector<topk_out> host_topk(int P, const std::vector<float>& m, std::int32_t n, std::int64_t V,
                                std::span<const std::int64_t> bounds, std::int32_t k) {
  return run_ranks<topk_out>(P, [&](thread_collective& tc) {
    const std::int64_t b0 = bounds[static_cast<std::size_t>(tc.rank())],
                       b1 = bounds[static_cast<std::size_t>(tc.rank()) + 1];
    const auto mine = shard_of(m, V, n, b0, b1);
    std::vector<std::byte> ws(sharded_topk_rows_workspace_size(n, b1 - b0, k, P));
    return topk_rank(n, k, [&](view2d<token_id> t, view2d<float> v, std::span<std::int32_t> c, std::span<double> ms) {
      return sharded_topk_rows(tc, b0, V, matrix(mine, n, b1 - b0), k, ws, t, v, c, ms);
    });
  });
}

// Rank r's batched verification (verify_trees_sharded on nccl_batch_backend)
// of cases[i] as request i, rows on device r; `steps` gets the backend's
// step count. Empty on a CUDA failure.
std::vector<outcome> run_device_batch(ncclComm_t comm, int dev, int r, int P, const std::vector<tree_case>& cases,
                                      const std::vector<verify_params>& vps, std::span<const std::int64_t> bounds,
                                      std::int64_t& steps) {
  using backend_t = nccl_batch_backend<256>;
  const auto R = static_cast<std::int32_t>(cases.size());
  std::vector<void*> dev_bufs;
  bool ok = cudaSetDevice(dev) == cudaSuccess;
  auto dalloc = [&](std::size_t bytes) -> void* {
    void* p = nullptr;
    if (ok && cudaMalloc(&p, bytes + 256) == cudaSuccess) {
      dev_bufs.push_back(p);
      return p;
    }
    ok = false;
    return nullptr;
  };
  const std::int64_t b0 = bounds[static_cast<std::size_t>(r)], b1 = bounds[static_cast<std::size_t>(r) + 1];
  std::vector<std::vector<std::byte>> host(cases.size());
  std::vector<std::vector<node_id>> path(cases.size());
  std::vector<std::vector<token_id>> tokens(cases.size());
  std::vector<sharded_tree_request> req(cases.size());
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const tree_case& c = cases[i];
    const auto ps = shard_of(c.p, c.V, c.N, b0, b1), qs = shard_of(c.q, c.V, c.N, b0, b1);
    std::size_t eb = 0, hb = 0;
    ok = ok && sharded_verify_workspace_parts(bounds, r, P, c.N, eb, hb);
    auto* dp = static_cast<float*>(dalloc(ps.size() * sizeof(float)));
    auto* dq = static_cast<float*>(dalloc(qs.size() * sizeof(float)));
    auto* ew = static_cast<std::byte*>(dalloc(eb));
    if (!ok) break;  // the call below still runs: a backend without scratch fails it on every rank
    ok = cudaMemcpy(dp, ps.data(), ps.size() * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess &&
         cudaMemcpy(dq, qs.data(), qs.size() * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess;
    host[i].resize(hb + 8);
    path[i].resize(static_cast<std::size_t>(c.N));
    tokens[i].resize(static_cast<std::size_t>(c.N));
    req[i].tree = c.view();
    req[i].p = device_matrix(ps.empty() ? nullptr : dp, c.N, b1 - b0);
    req[i].q = device_matrix(qs.empty() ? nullptr : dq, c.N, b1 - b0);
    req[i].params = vps[i];
    req[i].workspace = shard_workspace(std::span<std::byte>(ew, eb), std::span<std::byte>(host[i]).first(hb));
    req[i].path = path[i];
    req[i].tokens = tokens[i];
  }
  void* scratch = dalloc(backend_t::scratch_bytes(P, R));
  void* staging = nullptr;
  cudaStream_t stream{};
  if (ok && cudaMallocHost(&staging, backend_t::staging_bytes(P, R)) != cudaSuccess) staging = nullptr;
  if (ok && cudaStreamCreate(&stream) != cudaSuccess) stream = nullptr;
  std::vector<outcome> out;
  {
    // Every rank makes the call, even after a failed set-up (a rank that
    // skipped it would leave the others waiting in the collective): missing
    // staging fails the backend, and its agreement the call on every rank;
    // missing request buffers fail those requests.
    backend_t be(comm, stream, R, scratch, backend_t::scratch_bytes(P, R), staging, backend_t::staging_bytes(P, R));
    std::vector<verify_result> res(cases.size());
    std::vector<status> st(cases.size(), status::success());
    const status s = verify_trees_sharded(be, bounds, req, res, st);
    steps = be.traffic().calls;
    if (s.ok())
      for (std::size_t i = 0; i < cases.size(); ++i) out.push_back(record(st[i], res[i], path[i], tokens[i]));
  }
  if (stream != nullptr) cudaStreamDestroy(stream);
  for (void* p : dev_bufs) cudaFree(p);
  if (staging != nullptr) cudaFreeHost(staging);
  return out;
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
                     std::int64_t nan_at, const caller_uniforms* cu = nullptr) {
    std::vector<outcome> got(static_cast<std::size_t>(P));
    std::vector<std::thread> ts;
    for (int r = 0; r < P; ++r)
      ts.emplace_back([&, r] {
        got[static_cast<std::size_t>(r)] =
            run_device_rank(comms[static_cast<std::size_t>(r)], r, r, P, c, bounds, vp, nan_at, cu);
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
  // Caller uniforms copied from Philox: the seeded result on the device executor.
  {
    const std::int64_t V = 3001;
    const auto bounds = uneven_bounds(V, P);
    const auto c = make_tree_case(21, V, 16);
    for (const verify_mode m : all_modes) {
      verify_params vp{};
      vp.mode = m;
      vp.seed = 9;
      const philox_uniforms pu{rng_stream{vp.seed, vp.request, vp.round}};
      std::vector<double> u(static_cast<std::size_t>(c.N) * static_cast<std::size_t>(c.N + 1));
      for (std::int32_t a = 0; a < c.N; ++a)
        for (std::int32_t d = 0; d <= c.N; ++d)
          u[static_cast<std::size_t>(a * (c.N + 1) + d)] =
              pu(static_cast<std::uint32_t>(a), static_cast<std::uint32_t>(d));
      const caller_uniforms cu{u.data(), c.N, c.N + 1};
      const outcome want = run_partitioned(c, bounds, vp);
      for (const outcome& o : run_all(c, bounds, vp, -1, &cu)) {
        ++runs;
        if (!(o == want)) {
          ++failures;
          std::printf("CALLER-UNIFORMS MISMATCH mode %s\n", verify_mode_name(m));
        }
      }
    }
  }
  // Request batching (verify_trees_sharded on nccl_batch_backend): every
  // request of a batch of mixed modes and sizes, one bad, equals its
  // partitioned-order result alone.
  for (const std::int32_t R : {1, 7, 64}) {
    const std::int64_t V = 3001;
    const auto bounds = uneven_bounds(V, P);
    std::vector<tree_case> cases;
    std::vector<verify_params> vps;
    for (std::int32_t i = 0; i < R; ++i) {
      cases.push_back(make_tree_case(static_cast<std::uint64_t>(100 + i), V, 1 + (i * 5) % 24, i % 3 == 0));
      verify_params vp{};
      vp.mode = all_modes[static_cast<std::size_t>(i) % std::size(all_modes)];
      vp.seed = 11;
      vp.request = static_cast<std::uint64_t>(i);
      vps.push_back(vp);
    }
    if (R > 3) cases[3].token[0] = static_cast<token_id>(V);  // a bad request
    std::vector<std::vector<outcome>> got(static_cast<std::size_t>(P));
    std::vector<std::int64_t> steps(static_cast<std::size_t>(P), 0);
    std::vector<std::thread> ts;
    for (int r = 0; r < P; ++r)
      ts.emplace_back([&, r] {
        got[static_cast<std::size_t>(r)] = run_device_batch(comms[static_cast<std::size_t>(r)], r, r, P, cases, vps,
                                                            bounds, steps[static_cast<std::size_t>(r)]);
      });
    for (auto& t : ts) t.join();
    for (int r = 0; r < P; ++r) {
      const auto& g = got[static_cast<std::size_t>(r)];
      for (std::int32_t i = 0; i < R; ++i) {
        ++runs;
        const bool same = g.size() == static_cast<std::size_t>(R) &&
                          g[static_cast<std::size_t>(i)] == run_partitioned(cases[static_cast<std::size_t>(i)], bounds,
                                                                            vps[static_cast<std::size_t>(i)]);
        if (!same) {
          ++failures;
          std::printf("BATCH MISMATCH R %d request %d rank %d\n", R, i, r);
        }
      }
    }
    // Steps: at least the longest request's collectives alone (its argument
    // agreement included: it is a step of the batch too; counted on host
    // thread ranks over the same partition), fewer than all requests'
    // together when R > 1.
    std::int64_t longest = 0, total = 0;
    for (std::int32_t i = 0; i < R; ++i) {
      const std::int64_t n = run_ranks<std::int64_t>(P, [&](thread_collective& tc) {
        counting_collective<thread_collective> cc(tc);
        (void)run_sharded(cc, cases[static_cast<std::size_t>(i)], bounds, vps[static_cast<std::size_t>(i)]);
        return cc.traffic().calls;
      })[0];
      longest = n > longest ? n : longest;
      total += n;
    }
    ++runs;
    if (steps[0] < longest || (R > 1 && steps[0] >= total)) {
      ++failures;
      std::printf("BATCH STEPS %lld outside [%lld, %lld)\n", static_cast<long long>(steps[0]),
                  static_cast<long long>(longest), static_cast<long long>(total));
    }
    std::printf(
        "device-resident batched verification: %d requests in %lld steps (one collective each; the longest "
        "request alone %lld, all alone %lld)\n",
        R, static_cast<long long>(steps[0]), static_cast<long long>(longest), static_cast<long long>(total));
  }
  // Level-batched sharded top-k: device == host executor, bit for bit.
  std::mt19937_64 g(20261122);
  for (const std::int64_t V : {std::int64_t{3001}, std::int64_t{128256}}) {
    const auto bounds = uneven_bounds(V, P);
    for (const std::int32_t k : {1, 8, 40}) {
      const std::int32_t n = 64;
      std::vector<float> m;
      for (std::int32_t i = 0; i < n; ++i) {
        const auto row = random_row(g, V, i % 2 == 1);
        m.insert(m.end(), row.begin(), row.end());
      }
      for (const bool nan : {false, true}) {
        if (nan) m[static_cast<std::size_t>(9 * V + V / 2)] = std::nanf("");
        const auto want = host_topk(P, m, n, V, bounds, k);
        std::vector<topk_out> got(static_cast<std::size_t>(P));
        std::vector<std::thread> ts;
        for (int r = 0; r < P; ++r)
          ts.emplace_back([&, r] {
            got[static_cast<std::size_t>(r)] =
                run_device_topk(comms[static_cast<std::size_t>(r)], r, r, P, m, n, V, bounds, k);
          });
        for (auto& t : ts) t.join();
        for (int r = 0; r < P; ++r) {
          ++runs;
          const bool ok = got[static_cast<std::size_t>(r)] == want[static_cast<std::size_t>(r)] &&
                          (nan ? want[0].code == status_code::non_finite : want[0].code == status_code::ok);
          if (!ok) {
            ++failures;
            std::printf("TOP-K MISMATCH V %lld k %d nan %d rank %d\n", static_cast<long long>(V), k, nan ? 1 : 0, r);
          }
        }
      }
    }
  }
  std::printf("device-resident sharded top-k: 64 rows per level, V 3001 and 128256, k 1/8/40 checked\n");
  for (auto& cm : comms) ncclCommDestroy(cm);
  std::printf("%d rank results, %d mismatches\n", runs, failures);
  return failures == 0 ? 0 : 1;
}
