// GPU batched verification (specdec::kernels::verify_batch) at engine shapes:
// R requests of n-node chains over a vocabulary of V (Llama-2 32000,
// Llama-3 128256, Qwen2 152064), fp32 rows (and bf16 at V = 128256), time
// per call with CUDA events.
//
// greedy: every draft is the argmax of its parent's row, so the walk accepts
// the whole chain and reads each of the R x n rows exactly once: the
// bytes_per_second counter is then the rows' read bandwidth, next to a
// device-to-device copy of the same bytes (copy_baseline:1, counting the
// bytes read and written) in the same run.
// sampled_iid: drafts from a q that differs from p (rejections happen);
// only the time per call is comparable (the walk reads the rows it visits).
// Rows come from a pool of 8 random rows replicated on the device.
// logits:1 and logits:2 store the rows' logits instead and verify through
// the sampling transform (kernels::verify_batch_params::p_sampling: T = 1
// unfiltered, or T = 0.8 with top-k 50 and top-p 0.9): the time includes
// the pre-pass that reads every row (2 passes, or 20 with both filters;
// launches of at most 16 rows, here R = 1 with n = 1 or 8, split it over
// blocks in 18 launches: kernels::verify_transform_chunk_tiles).
// Exits without benchmarks when no device is present.
#include <benchmark/benchmark.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "gpu_bench.hpp"
#include "specdec/kernels.hpp"

namespace {

using namespace specdec;
using gpu_bench::dev_buf;
using gpu_bench::upload;
constexpr int kPool = 8;

// kPool peaked random rows (softmax of 3 x normal logits, or with `logits`
// their logarithms) stored as `t` (bf16 rounded to nearest even), and the
// argmaxes of the stored rows.
std::vector<unsigned char> pool_rows(std::int64_t V, std::uint32_t seed, row_dtype t, std::vector<token_id>& argmax,
                                     bool logits = false) {
  std::mt19937 gen(seed);
  std::normal_distribution<double> N(0.0, 3.0);
  const std::int64_t elem = row_dtype_bytes(t);
  std::vector<unsigned char> rows(static_cast<std::size_t>(kPool * V * elem));
  argmax.assign(kPool, 0);
  std::vector<double> w(static_cast<std::size_t>(V));
  for (int k = 0; k < kPool; ++k) {
    double mx = -1e300, s = 0;
    for (auto& x : w) mx = std::max(mx, x = N(gen));
    for (auto& x : w) s += (x = std::exp(x - mx));
    float best = -INFINITY;
    for (std::int64_t i = 0; i < V; ++i) {
      float f = static_cast<float>(w[static_cast<std::size_t>(i)] / s);
      if (logits) f = std::log(f);
      unsigned char* at = rows.data() + (k * V + i) * elem;
      if (t == row_dtype::bf16) {
        const auto u = std::bit_cast<std::uint32_t>(f);
        const auto b = static_cast<std::uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
        std::memcpy(at, &b, sizeof b);
        f = static_cast<float>(bfloat16{b});
      } else {
        std::memcpy(at, &f, sizeof f);
      }
      if (f > best) {
        best = f;
        argmax[static_cast<std::size_t>(k)] = static_cast<token_id>(i);
      }
    }
  }
  return rows;
}

// Fills `rows` row-major rows of `row_bytes` with the pool, row i = pool row (i + shift) % kPool.
bool fill(unsigned char* dst, std::int64_t rows, std::int64_t row_bytes, const unsigned char* pool, int shift) {
  const auto rb = static_cast<std::size_t>(row_bytes);
  for (std::int64_t i = 0; i < std::min<std::int64_t>(rows, kPool); ++i)
    if (cudaMemcpy(dst + i * row_bytes, pool + ((i + shift) % kPool) * row_bytes, rb, cudaMemcpyDeviceToDevice) !=
        cudaSuccess)
      return false;
  // Doubling copies: rows [done, 2 done) from [0, done) keep the period kPool.
  for (std::int64_t done = kPool; done < rows; done *= 2) {
    const std::int64_t m = std::min(done, rows - done);
    if (cudaMemcpy(dst + done * row_bytes, dst, static_cast<std::size_t>(m) * rb, cudaMemcpyDeviceToDevice) !=
        cudaSuccess)
      return false;
  }
  return true;
}

void BM_gpu_verify(benchmark::State& state) {
  if (gpu_bench::skip_without_device(state)) return;
  const auto R = static_cast<std::int32_t>(state.range(0));
  const std::int64_t V = state.range(1);
  const auto n = static_cast<std::int32_t>(state.range(2));
  const bool greedy = state.range(3) == 0;
  const bool copy = state.range(4) != 0;
  const row_dtype t = state.range(5) == 0 ? row_dtype::f32 : row_dtype::bf16;
  const auto logits = static_cast<int>(state.range(6));
  const std::int64_t rows = static_cast<std::int64_t>(R) * n;
  const std::int64_t row_bytes = rows * V * row_dtype_bytes(t);

  std::vector<token_id> pmax, qmax;
  const auto hp = pool_rows(V, 11, t, pmax, logits != 0);
  const auto hq = pool_rows(V, 23, t, qmax, logits != 0);
  dev_buf pool(hp.size()), qpool(hq.size());
  dev_buf P(static_cast<std::size_t>(row_bytes)), Q(greedy ? 0 : static_cast<std::size_t>(row_bytes));
  const std::int64_t one_row = V * row_dtype_bytes(t);
  if (!upload(pool, hp) || !upload(qpool, hq) || P.p == nullptr || Q.p == nullptr ||
      !fill(P.as<unsigned char>(), rows, one_row, pool.as<unsigned char>(), 0) ||
      (!greedy && !fill(Q.as<unsigned char>(), rows, one_row, qpool.as<unsigned char>(), 0))) {
    state.SkipWithError("device allocation or fill failed");
    return;
  }
  // Chains: node i's token is the argmax of its parent's p row (greedy) or
  // of its parent's q row (sampled_iid, drafted greedily from q).
  std::vector<std::int32_t> offsets(static_cast<std::size_t>(R) + 1);
  std::vector<token_id> token(static_cast<std::size_t>(rows));
  std::vector<node_id> parent(static_cast<std::size_t>(rows));
  std::vector<verify_params> params(static_cast<std::size_t>(R));
  for (std::int32_t r = 0; r < R; ++r) {
    offsets[static_cast<std::size_t>(r) + 1] = (r + 1) * n;
    for (std::int32_t i = 0; i < n; ++i) {
      const auto g = static_cast<std::size_t>(r * n + i);
      const auto par_row = static_cast<std::size_t>((g - 1) % kPool);
      parent[g] = i - 1;
      token[g] = i == 0 ? 0 : (greedy ? pmax : qmax)[par_row];
    }
    auto& vp = params[static_cast<std::size_t>(r)];
    vp.mode = greedy ? verify_mode::greedy : verify_mode::sampled_iid;
    vp.seed = 1234;
    vp.request = static_cast<std::uint32_t>(r);
    vp.round = 1;
  }
  const std::int32_t L = n + 1;
  dev_buf d_off(offsets.size() * 4), d_tok(token.size() * 4), d_par(parent.size() * 4),
      d_params(params.size() * sizeof(verify_params)), d_paths(static_cast<std::size_t>(R) * L * 4),
      d_toks(static_cast<std::size_t>(R) * L * 4), d_res(static_cast<std::size_t>(R) * sizeof(verify_result));
  const std::vector<sampling_params> sampling(static_cast<std::size_t>(R),
                                              logits == 2 ? sampling_params{0.8f, 50, 0.9f, 0.0f} : sampling_params{});
  dev_buf d_sampling(sampling.size() * sizeof(sampling_params));
  if (!upload(d_off, offsets) || !upload(d_tok, token) || !upload(d_par, parent) || !upload(d_params, params) ||
      !upload(d_sampling, sampling)) {
    state.SkipWithError("upload failed");
    return;
  }
  kernels::verify_batch_params p;
  p.offsets = d_off.as<std::int32_t>();
  p.token = d_tok.as<token_id>();
  p.parent = d_par.as<node_id>();
  p.p = P.p;
  p.p_dtype = p.q_dtype = t;
  p.p_row_stride = V;
  p.q = greedy ? nullptr : Q.p;
  p.q_row_stride = greedy ? 0 : V;
  p.params = d_params.as<verify_params>();
  p.num_requests = R;
  p.vocab = static_cast<std::int32_t>(V);
  p.max_nodes = n;
  p.node_capacity = R * n;
  p.out_stride = L;
  p.paths = d_paths.as<node_id>();
  p.tokens = d_toks.as<token_id>();
  p.results = d_res.as<verify_result>();
  if (logits != 0) {
    p.p_sampling = d_sampling.as<sampling_params>();
    if (!greedy) p.q_sampling = p.p_sampling;
  }
  const std::size_t ws_bytes = kernels::verify_batch_workspace_size(p);
  dev_buf ws(ws_bytes), dst(copy ? static_cast<std::size_t>(row_bytes) : 0);
  if (ws.p == nullptr || dst.p == nullptr) {
    state.SkipWithError("workspace allocation failed");
    return;
  }

  gpu_bench::timed_loop(state, [&] {
    if (copy)
      return cudaMemcpyAsync(dst.p, P.p, static_cast<std::size_t>(row_bytes), cudaMemcpyDeviceToDevice) == cudaSuccess;
    return kernels::verify_batch(p, ws.p, ws_bytes, nullptr).ok();
  });
  if (!copy) {
    std::vector<verify_result> res(static_cast<std::size_t>(R));
    cudaMemcpy(res.data(), d_res.p, res.size() * sizeof(verify_result), cudaMemcpyDeviceToHost);
    double accepted = 0;
    for (const auto& x : res) {
      if (x.code != status_code::ok) {
        state.SkipWithError("a request failed");
        return;
      }
      accepted += x.accepted;
    }
    state.counters["accepted"] = accepted / R;
    if (greedy && accepted != static_cast<double>(R) * (n - 1))
      state.SkipWithError("greedy did not accept every draft");
  }
  // The copy counts the bytes it reads and writes: memory traffic, like greedy's reads.
  if ((greedy && logits == 0) || copy) state.SetBytesProcessed(state.iterations() * row_bytes * (copy ? 2 : 1));
  state.counters["rows_MiB"] = static_cast<double>(row_bytes) / (1 << 20);
}

}  // namespace

// R x V x n x mode (0 greedy, 1 sampled_iid) x copy_baseline x bf16 rows x
// logits; the copy baseline only beside greedy (its bytes are the rows
// greedy reads); bf16 rows (half the bytes) and logits rows at V = 128256.
BENCHMARK(BM_gpu_verify)
    ->ArgNames({"R", "V", "n", "sampled", "copy_baseline", "bf16", "logits"})
    ->ArgsProduct({{1, 64, 256}, {32000, 128256, 152064}, {1, 8, 64}, {0, 1}, {0}, {0}, {0}})
    ->ArgsProduct({{1, 64, 256}, {32000, 128256, 152064}, {1, 8, 64}, {0}, {1}, {0}, {0}})
    ->ArgsProduct({{1, 64, 256}, {128256}, {1, 8, 64}, {0, 1}, {0}, {1}, {0}})
    ->ArgsProduct({{1, 64, 256}, {128256}, {1, 8, 64}, {0}, {1}, {1}, {0}})
    ->ArgsProduct({{1, 64}, {128256}, {1, 8, 64}, {0, 1}, {0}, {0, 1}, {1, 2}})
    ->MinTime(0.05)
    ->UseManualTime();
