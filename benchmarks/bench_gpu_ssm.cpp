// GPU tree scan (specdec::kernels::tree_scan) on full binary trees vs the
// unrolled baseline: each root-to-leaf sequence scanned on its own by the same
// kernel (one launch per leaf, inputs pre-gathered), i.e. leaves x depth
// token steps; and R trees of one round (one per request) in one batched
// launch (kernels::tree_scan_batch) against one launch per request.
// headdim 64, dstate 128, groups 1, float. Wall time per round including
// the synchronisation. Skips without a CUDA device.
#include <benchmark/benchmark.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include <cuda_runtime.h>

#include "gpu_bench.hpp"
#include "specdec/kernels.hpp"

namespace {

using gpu_bench::dev_buf;
using gpu_bench::upload;

using specdec::node_id;
constexpr std::int64_t kHeaddim = 64, kDstate = 128;

// Inputs of one scan problem (a tree, or one gathered root-to-leaf chain) on the device.
struct dev_problem {
  std::int64_t n, heads;
  dev_buf parent, x, dt, A, B, C, y, states;
  dev_problem(const std::vector<node_id>& par, std::int64_t h, std::mt19937_64& rng)
      : n(static_cast<std::int64_t>(par.size())),
        heads(h),
        parent(par.size() * sizeof(node_id)),
        x(static_cast<std::size_t>(n * h * kHeaddim) * sizeof(float)),
        dt(static_cast<std::size_t>(n * h) * sizeof(float)),
        A(static_cast<std::size_t>(h) * sizeof(float)),
        B(static_cast<std::size_t>(n * kDstate) * sizeof(float)),
        C(static_cast<std::size_t>(n * kDstate) * sizeof(float)),
        y(static_cast<std::size_t>(n * h * kHeaddim) * sizeof(float)),
        states(static_cast<std::size_t>(n * h * kHeaddim * kDstate) * sizeof(float)) {
    std::normal_distribution<float> nd;
    auto rnd = [&](std::int64_t k) {
      std::vector<float> v(static_cast<std::size_t>(k));
      for (auto& e : v) e = 0.3f * nd(rng);
      return v;
    };
    upload(parent, par);
    upload(x, rnd(n * h * kHeaddim));
    upload(dt, rnd(n * h));
    upload(A, std::vector<float>(static_cast<std::size_t>(h), -1.0f));
    upload(B, rnd(n * kDstate));
    upload(C, rnd(n * kDstate));
  }
  bool ok() const { return parent.p && x.p && dt.p && A.p && B.p && C.p && y.p && states.p; }
  specdec::kernels::tree_scan_params<float> params() const {
    specdec::kernels::tree_scan_params<float> p;
    p.parent = parent.as<node_id>();
    p.in.x = specdec::make_view<const float>(x.as<float>(), n, heads, kHeaddim);
    p.in.dt = specdec::make_view<const float>(dt.as<float>(), n, heads);
    p.in.A = specdec::make_view<const float>(A.as<float>(), heads);
    p.in.B = specdec::make_view<const float>(B.as<float>(), n, std::int64_t{1}, kDstate);
    p.in.C = specdec::make_view<const float>(C.as<float>(), n, std::int64_t{1}, kDstate);
    p.y = specdec::make_view(y.as<float>(), n, heads, kHeaddim);
    p.states = specdec::make_view(states.as<float>(), n, heads, kHeaddim, kDstate);
    return p;
  }
};

std::vector<node_id> binary_tree(std::int64_t n) {
  std::vector<node_id> p(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) p[static_cast<std::size_t>(i)] = i == 0 ? -1 : static_cast<node_id>((i - 1) / 2);
  return p;
}

void BM_gpu_ssm_tree_scan(benchmark::State& st) {
  if (gpu_bench::skip_without_device(st)) return;
  std::mt19937_64 rng(7);
  dev_problem pb(binary_tree(st.range(0)), st.range(1), rng);
  if (!pb.ok()) {
    st.SkipWithError("cudaMalloc failed");
    return;
  }
  const auto p = pb.params();
  for (auto _ : st) {
    if (!specdec::kernels::tree_scan(p, nullptr, 0, nullptr).ok()) st.SkipWithError("launch failed");
    if (!specdec::kernels::synchronize(nullptr).ok()) st.SkipWithError("kernel failed");
  }
  st.SetItemsProcessed(st.iterations() * pb.n);
}

void BM_gpu_ssm_unrolled_sequences(benchmark::State& st) {
  if (gpu_bench::skip_without_device(st)) return;
  const std::int64_t n = st.range(0);
  const std::int64_t leaves = (n + 1) / 2, depth = [&] {
    std::int64_t d = 0;
    for (std::int64_t k = n + 1; k > 1; k /= 2) ++d;
    return d;
  }();
  std::mt19937_64 rng(7);
  std::vector<node_id> chain(static_cast<std::size_t>(depth));
  for (std::int64_t i = 0; i < depth; ++i) chain[static_cast<std::size_t>(i)] = static_cast<node_id>(i - 1);
  std::vector<std::unique_ptr<dev_problem>> seqs;
  for (std::int64_t l = 0; l < leaves; ++l) seqs.push_back(std::make_unique<dev_problem>(chain, st.range(1), rng));
  for (const auto& s : seqs)
    if (!s->ok()) {
      st.SkipWithError("cudaMalloc failed");
      return;
    }
  std::vector<specdec::kernels::tree_scan_params<float>> params;
  for (const auto& s : seqs) params.push_back(s->params());
  for (auto _ : st) {
    for (const auto& p : params)
      if (!specdec::kernels::tree_scan(p, nullptr, 0, nullptr).ok()) st.SkipWithError("launch failed");
    if (!specdec::kernels::synchronize(nullptr).ok()) st.SkipWithError("kernel failed");
  }
  st.SetItemsProcessed(st.iterations() * n);
  st.counters["steps"] = static_cast<double>(leaves * depth);
}

void gpu_args(benchmark::internal::Benchmark* b) {
  for (std::int64_t heads : {8, 80})
    for (std::int64_t n : {15, 31, 63}) b->Args({n, heads});
  b->ArgNames({"nodes", "heads"})->Unit(benchmark::kMicrosecond)->UseRealTime()->MinTime(0.1);
}

// R requests' binary trees of n nodes each: one kernels::tree_scan_batch
// call (a check launch, then one launch for all) against R tree_scan calls
// on the same per-request problems. items/s: nodes.
void BM_gpu_ssm_tree_scan_batch(benchmark::State& st) {
  if (gpu_bench::skip_without_device(st)) return;
  const std::int64_t n = st.range(0), R = st.range(1), heads = 8;
  std::mt19937_64 rng(7);
  const auto tree = binary_tree(n);
  std::vector<node_id> forest;
  std::vector<std::int32_t> offsets{0};
  for (std::int64_t r = 0; r < R; ++r) {
    forest.insert(forest.end(), tree.begin(), tree.end());
    offsets.push_back(static_cast<std::int32_t>(offsets.back() + n));
  }
  dev_problem pb(forest, heads, rng);
  dev_buf doff(offsets.size() * sizeof(std::int32_t)), dstatus(static_cast<std::size_t>(R) * sizeof(std::int32_t));
  if (!pb.ok() || !doff.p || !dstatus.p) {
    st.SkipWithError("cudaMalloc failed");
    return;
  }
  upload(doff, offsets);
  const auto one = pb.params();
  specdec::tree_scan_batch_params<float> p;
  p.offsets = doff.as<std::int32_t>();
  p.parent = one.parent;
  p.in = one.in;
  p.y = one.y;
  p.states = one.states;
  p.num_requests = static_cast<std::int32_t>(R);
  p.request_status = dstatus.as<std::int32_t>();
  for (auto _ : st) {
    if (!specdec::kernels::tree_scan_batch(p, nullptr, 0, nullptr).ok()) st.SkipWithError("launch failed");
    if (!specdec::kernels::synchronize(nullptr).ok()) st.SkipWithError("kernel failed");
  }
  st.SetItemsProcessed(st.iterations() * n * R);
}

void BM_gpu_ssm_tree_scan_per_request(benchmark::State& st) {
  if (gpu_bench::skip_without_device(st)) return;
  const std::int64_t n = st.range(0), R = st.range(1), heads = 8;
  std::mt19937_64 rng(7);
  std::vector<std::unique_ptr<dev_problem>> reqs;
  for (std::int64_t r = 0; r < R; ++r) reqs.push_back(std::make_unique<dev_problem>(binary_tree(n), heads, rng));
  std::vector<specdec::kernels::tree_scan_params<float>> params;
  for (const auto& q : reqs) {
    if (!q->ok()) {
      st.SkipWithError("cudaMalloc failed");
      return;
    }
    params.push_back(q->params());
  }
  for (auto _ : st) {
    for (const auto& q : params)
      if (!specdec::kernels::tree_scan(q, nullptr, 0, nullptr).ok()) st.SkipWithError("launch failed");
    if (!specdec::kernels::synchronize(nullptr).ok()) st.SkipWithError("kernel failed");
  }
  st.SetItemsProcessed(st.iterations() * n * R);
}

void batch_args(benchmark::internal::Benchmark* b) {
  for (std::int64_t R : {1, 8, 64})
    for (std::int64_t n : {7, 31}) b->Args({n, R});
  b->ArgNames({"nodes", "requests"})->Unit(benchmark::kMicrosecond)->UseRealTime()->MinTime(0.1);
}

}  // namespace

BENCHMARK(BM_gpu_ssm_tree_scan)->Apply(gpu_args);
BENCHMARK(BM_gpu_ssm_unrolled_sequences)->Apply(gpu_args);
BENCHMARK(BM_gpu_ssm_tree_scan_batch)->Apply(batch_args);
BENCHMARK(BM_gpu_ssm_tree_scan_per_request)->Apply(batch_args);
