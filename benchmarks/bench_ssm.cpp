// Host SSM primitives (ssm/): every tree-scan form, the state commit and the
// tree conv1d at N = 1..64 nodes, headdim 64, dstate 128, 8 heads, 1 group,
// with h0, D, dt_bias and the SiLU gate z (the demo's Mamba2 layer), next to
// a same-run GEMM of the equivalent shape: per head the Eigen product
// C [N, dstate] * h0^T [dstate, headdim] (2 N H P S flops, the h0 term of
// the dual form and the y = C h read-out of the recurrence).
// Counters: flop (per call, the form's own arithmetic, see flop_* below)
// and FLOP/s. benchmarks/ssm_table.py turns the JSON output into the
// FLOP/s-vs-GEMM and t(N)/t(1) tables of benchmarks/results/ssm_*.md.
// Also: the tree scan against unrolling the tree into root-to-leaf
// sequences (STree's baseline), on full binary trees of 15, 31, 63 nodes.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "specdec/core/detail/simd.hpp"
#include "specdec/ssm/detail/ssm_step.hpp"
#include "specdec/ssm/state_commit.hpp"
#include "specdec/ssm/tree_conv1d.hpp"
#include "specdec/ssm/tree_scan.hpp"
#include "specdec/ssm/tree_ssm_batch.hpp"
#include "specdec/tree/structure.hpp"

#if __has_include(<Eigen/Dense>)
#include <Eigen/Dense>

#include "specdec/ssm/tree_scan_dual_eigen.hpp"
#define BENCH_SSM_EIGEN 1
#else
#define BENCH_SSM_EIGEN 0
#endif

namespace {

using specdec::node_id;

constexpr std::int64_t kGroups = 1, kConvWidth = 4;

enum tree_shape : std::int64_t { binary = 0, chain = 1 };

struct bench_problem {
  std::int64_t n, heads, headdim, dstate;
  std::vector<node_id> parent;
  std::vector<float> x, dt, A, B, C, D, bias, h0, z, y, states;
  std::vector<std::vector<node_id>> paths;  // root-to-leaf paths

  bench_problem(std::int64_t nodes, std::int64_t h, std::int64_t shape = binary, std::int64_t p = 64,
                std::int64_t s = 128)
      : n(nodes), heads(h), headdim(p), dstate(s) {
    std::mt19937_64 rng(12345);
    std::normal_distribution<float> nd;
    auto fill = [&](std::vector<float>& v, std::int64_t k, float sc) {
      v.resize(static_cast<std::size_t>(k));
      for (auto& e : v) e = sc * nd(rng);
    };
    parent.resize(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i)
      parent[static_cast<std::size_t>(i)] = i == 0 ? -1 : static_cast<node_id>(shape == chain ? i - 1 : (i - 1) / 2);
    fill(x, n * heads * headdim, 1.0f);
    fill(z, n * heads * headdim, 1.0f);
    fill(dt, n * heads, 1.0f);
    A.assign(static_cast<std::size_t>(heads), -1.0f);
    fill(B, n * kGroups * dstate, 0.3f);
    fill(C, n * kGroups * dstate, 0.3f);
    fill(D, heads, 1.0f);
    fill(bias, heads, 0.5f);
    fill(h0, heads * headdim * dstate, 0.3f);
    y.resize(static_cast<std::size_t>(n * heads * headdim));
    std::vector<int> has_child(static_cast<std::size_t>(n), 0);
    for (std::int64_t i = 1; i < n; ++i) has_child[static_cast<std::size_t>(parent[static_cast<std::size_t>(i)])] = 1;
    for (std::int64_t i = 0; i < n; ++i) {
      if (has_child[static_cast<std::size_t>(i)]) continue;
      std::vector<node_id> path;
      for (node_id u = static_cast<node_id>(i); u >= 0; u = parent[static_cast<std::size_t>(u)])
        path.insert(path.begin(), u);
      paths.push_back(path);
    }
  }
  specdec::tree_ssm_inputs<float> inputs(bool gate = true) const {
    specdec::tree_ssm_inputs<float> in;
    in.x = specdec::make_view(x.data(), n, heads, headdim);
    in.dt = specdec::make_view(dt.data(), n, heads);
    in.A = specdec::make_view(A.data(), heads);
    in.B = specdec::make_view(B.data(), n, kGroups, dstate);
    in.C = specdec::make_view(C.data(), n, kGroups, dstate);
    in.D = specdec::make_view(D.data(), heads, std::int64_t{1});
    in.dt_bias = specdec::make_view(bias.data(), heads);
    in.h0 = specdec::make_view(h0.data(), heads, headdim, dstate);
    if (gate) in.z = specdec::make_view(z.data(), n, heads, headdim);
    return in;
  }
  specdec::tree_ssm_shape shape() const { return {n, heads, headdim, kGroups, dstate}; }
  // Channels of the conv1d before the scan (x, B and C: the demo's xBC).
  std::int64_t conv_channels() const { return heads * headdim + 2 * kGroups * dstate; }
  double pairs() const {
    return static_cast<double>(specdec::ancestor_pair_count(parent.data(), static_cast<std::int32_t>(n)));
  }
  // Flop counts (multiply and add count one each).
  // GEMM: C h0^T per head.
  double flop_gemm() const { return 2.0 * static_cast<double>(n * heads * headdim * dstate); }
  // Recurrent: h = decay h + xdt B (3) and C . h (2) per state entry.
  double flop_recurrent() const { return 5.0 * static_cast<double>(n * heads * headdim * dstate); }
  // Dual: C.B per pair and group, weight * x per pair and head, C h0^T per head.
  double flop_dual() const {
    return 2.0 * pairs() * static_cast<double>(kGroups * dstate + heads * headdim) + flop_gemm();
  }
  // Dense dual (Eigen): C B^T, M X over all N^2 entries, C h0^T.
  double flop_dual_dense() const {
    const auto nn = static_cast<double>(n * n);
    return 2.0 * nn * static_cast<double>(kGroups * dstate + heads * headdim) + flop_gemm();
  }
};

void set_flops(benchmark::State& st, double flop) {
  st.counters["flop"] = flop;
  st.counters["FLOP/s"] = benchmark::Counter(flop, benchmark::Counter::kIsIterationInvariantRate);
}

// ---- every form at N = 1..64 ------------------------------------------------

void run_scan(benchmark::State& st, specdec::tree_scan_method method, bool want_states) {
  bench_problem pb(st.range(0), st.range(1), st.range(2));
  const auto in = pb.inputs();
  if (want_states) pb.states.resize(static_cast<std::size_t>(pb.n * pb.heads * pb.headdim * pb.dstate));
  std::vector<std::byte> ws(specdec::tree_scan_workspace_size<float>(pb.parent, pb.shape(), method));
  auto yv = specdec::make_view(pb.y.data(), pb.n, pb.heads, pb.headdim);
  specdec::view4d<float> sv{};
  if (want_states) sv = specdec::make_view(pb.states.data(), pb.n, pb.heads, pb.headdim, pb.dstate);
  for (auto _ : st) {
    const auto s = specdec::tree_scan<float>(pb.parent, in, {}, yv, sv, ws, method);
    if (!s.ok()) st.SkipWithError(s.message());
    benchmark::DoNotOptimize(pb.y.data());
    benchmark::ClobberMemory();
  }
  const bool dual =
      method == specdec::tree_scan_method::dual ||
      (method == specdec::tree_scan_method::automatic &&
       specdec::tree_scan_choose(pb.parent, pb.shape(), want_states, true) == specdec::tree_scan_method::dual);
  set_flops(st, dual ? pb.flop_dual() : pb.flop_recurrent());
  st.counters["pairs"] = pb.pairs();
  if (want_states)  // per-node states: a large output, compare with BM_ssm_states_store
    st.counters["state bytes/s"] = benchmark::Counter(static_cast<double>(sizeof(float) * pb.states.size()),
                                                      benchmark::Counter::kIsIterationInvariantRate);
}

// The same-run reference of recurrent_states: storing N x heads x headdim x
// dstate floats (what it writes per call; 16.8 MB at N = 64), no compute.
void BM_ssm_states_store(benchmark::State& st) {
  bench_problem pb(st.range(0), st.range(1), st.range(2));
  std::vector<float> states(static_cast<std::size_t>(pb.n * pb.heads * pb.headdim * pb.dstate));
  float v = 0.0f;
  for (auto _ : st) {
    std::fill(states.begin(), states.end(), v += 1.0f);
    benchmark::DoNotOptimize(states.data());
    benchmark::ClobberMemory();
  }
  st.counters["state bytes/s"] = benchmark::Counter(static_cast<double>(sizeof(float) * states.size()),
                                                    benchmark::Counter::kIsIterationInvariantRate);
}

// The data movement alone of recurrent_states on a chain: per head and
// node, read the parent's state and write the node's (h = d h + x B per
// entry, no read-out, no dt', no output row), in the scan's order (head by
// head) and layout. The states form cannot run faster than this.
void BM_ssm_states_pass(benchmark::State& st) {
  bench_problem pb(st.range(0), st.range(1), st.range(2));
  const std::int64_t P = pb.headdim, S = pb.dstate, row = P * S;
  std::vector<float> states(static_cast<std::size_t>(pb.n * pb.heads * row)), xdt(static_cast<std::size_t>(P), 0.01f);
  float unused[64];
  for (auto _ : st) {
    for (std::int64_t h = 0; h < pb.heads; ++h)
      for (std::int64_t i = 0; i < pb.n; ++i) {
        const float* in = i == 0 ? pb.h0.data() + h * row : states.data() + ((i - 1) * pb.heads + h) * row;
        specdec::detail::ssm_step_row_block(in, S, states.data() + (i * pb.heads + h) * row, S, pb.B.data() + i * S,
                                            static_cast<const float*>(nullptr), 0.9f, xdt.data(), unused, P, S);
      }
    benchmark::DoNotOptimize(states.data());
    benchmark::ClobberMemory();
  }
  st.counters["state bytes/s"] = benchmark::Counter(static_cast<double>(sizeof(float) * states.size()),
                                                    benchmark::Counter::kIsIterationInvariantRate);
}

// A ragged batch of R binary trees of n nodes (one per request, h0 per
// request): tree_scan_batch (the host twin of kernels::tree_scan_batch)
// against R tree_scan calls on the same rows. items/s: nodes.
struct batch_problem {
  bench_problem pb;
  std::vector<std::int32_t> offsets{0}, status;
  std::vector<float> h0;
  batch_problem(std::int64_t n, std::int64_t R) : pb(n * R, 8) {
    for (std::int64_t r = 0; r < R; ++r) {
      for (std::int64_t i = 0; i < n; ++i)
        pb.parent[static_cast<std::size_t>(r * n + i)] = i == 0 ? -1 : static_cast<node_id>((i - 1) / 2);
      offsets.push_back(static_cast<std::int32_t>((r + 1) * n));
    }
    status.resize(static_cast<std::size_t>(R));
    for (std::int64_t r = 0; r < R; ++r) h0.insert(h0.end(), pb.h0.begin(), pb.h0.end());
  }
  specdec::tree_scan_batch_params<float> params() {
    specdec::tree_scan_batch_params<float> p;
    p.offsets = offsets.data();
    p.parent = pb.parent.data();
    p.in = pb.inputs();
    p.in.h0 = {};
    p.h0 = specdec::make_view<const float>(h0.data(), static_cast<std::int64_t>(status.size()), pb.heads, pb.headdim,
                                           pb.dstate);
    p.y = specdec::make_view(pb.y.data(), pb.n, pb.heads, pb.headdim);
    p.num_requests = static_cast<std::int32_t>(status.size());
    p.request_status = status.data();
    return p;
  }
};

void BM_ssm_scan_batch(benchmark::State& st) {
  batch_problem bp(st.range(0), st.range(1));
  const auto p = bp.params();
  std::vector<std::byte> ws(specdec::tree_scan_batch_workspace_size<float>(bp.offsets, bp.pb.parent, bp.pb.shape()));
  for (auto _ : st) {
    if (!specdec::tree_scan_batch(p, ws).ok() || bp.status[0] != 0) st.SkipWithError("tree_scan_batch failed");
    benchmark::DoNotOptimize(bp.pb.y.data());
    benchmark::ClobberMemory();
  }
  st.SetItemsProcessed(st.iterations() * bp.pb.n);
}

void BM_ssm_scan_per_request(benchmark::State& st) {
  batch_problem bp(st.range(0), st.range(1));
  const auto p = bp.params();
  const std::int64_t n = st.range(0);
  std::vector<std::byte> ws(specdec::tree_scan_batch_workspace_size<float>(bp.offsets, bp.pb.parent, bp.pb.shape()));
  for (auto _ : st) {
    for (std::int32_t r = 0; r < p.num_requests; ++r) {
      const std::int64_t b = r * n;
      auto in = specdec::detail::batch_request_inputs(p, r, b, n);
      const std::span<const node_id> par(bp.pb.parent.data() + b, static_cast<std::size_t>(n));
      if (!specdec::tree_scan<float>(par, in, p.opt, specdec::detail::node_rows(p.y, b, n), {}, ws).ok())
        st.SkipWithError("tree_scan failed");
    }
    benchmark::DoNotOptimize(bp.pb.y.data());
    benchmark::ClobberMemory();
  }
  st.SetItemsProcessed(st.iterations() * bp.pb.n);
}

void batch_args(benchmark::internal::Benchmark* b) {
  for (std::int64_t R : {1, 8, 32})
    for (std::int64_t n : {7, 31}) b->Args({n, R});
  b->ArgNames({"nodes", "requests"})->Unit(benchmark::kMicrosecond)->MinTime(0.05);
}

void BM_ssm_recurrent(benchmark::State& st) { run_scan(st, specdec::tree_scan_method::recurrent, false); }
void BM_ssm_recurrent_states(benchmark::State& st) { run_scan(st, specdec::tree_scan_method::recurrent, true); }
void BM_ssm_dual(benchmark::State& st) { run_scan(st, specdec::tree_scan_method::dual, false); }
void BM_ssm_auto(benchmark::State& st) { run_scan(st, specdec::tree_scan_method::automatic, false); }

#if BENCH_SSM_EIGEN
using rowmat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

void BM_ssm_dual_eigen(benchmark::State& st) {
  bench_problem pb(st.range(0), st.range(1), st.range(2));
  const auto in = pb.inputs();
  std::vector<std::byte> ws(specdec::tree_scan_dual_eigen_workspace_size<float>(pb.shape()));
  auto yv = specdec::make_view(pb.y.data(), pb.n, pb.heads, pb.headdim);
  for (auto _ : st) {
    const auto s = specdec::tree_scan_dual_eigen<float>(pb.parent, in, {}, yv, ws);
    if (!s.ok()) st.SkipWithError(s.message());
    benchmark::DoNotOptimize(pb.y.data());
    benchmark::ClobberMemory();
  }
  set_flops(st, pb.flop_dual_dense());
}

// The same-run reference: per head Y = C h0^T, [N, dstate] x [dstate, headdim].
void BM_ssm_gemm(benchmark::State& st) {
  bench_problem pb(st.range(0), st.range(1), st.range(2));
  const Eigen::Index N = pb.n, P = pb.headdim, S = pb.dstate;
  Eigen::Map<const rowmat> C(pb.C.data(), N, S);
  rowmat Y(N, P);
  for (auto _ : st) {
    for (std::int64_t h = 0; h < pb.heads; ++h) {
      Eigen::Map<const rowmat> H0(pb.h0.data() + h * P * S, P, S);
      Y.noalias() = C * H0.transpose();
      benchmark::DoNotOptimize(Y.data());
    }
    benchmark::ClobberMemory();
  }
  set_flops(st, pb.flop_gemm());
}
#endif

// The scans' input check alone (validate_tree_ssm: shapes, tree, every value
// finite), the error contract's cost: one read pass over x, dt, B, C, z, h0.
void BM_ssm_check(benchmark::State& st) {
  bench_problem pb(st.range(0), st.range(1), st.range(2));
  const auto in = pb.inputs();
  for (auto _ : st) {
    specdec::tree_ssm_shape shape;
    const auto s = specdec::validate_tree_ssm<float>(pb.parent, in, {}, shape);
    if (!s.ok()) st.SkipWithError(s.message());
    benchmark::DoNotOptimize(shape);
  }
  st.counters["bytes"] = static_cast<double>(
      sizeof(float) * (pb.x.size() + pb.z.size() + pb.dt.size() + pb.B.size() + pb.C.size() + pb.h0.size()));
}

// State commit of the deepest root path (depth + 1 recurrence steps, all heads).
void BM_ssm_commit(benchmark::State& st) {
  bench_problem pb(st.range(0), st.range(1), st.range(2));
  const auto in = pb.inputs();
  std::vector<float> h(pb.h0.size());
  const auto& path = pb.paths.back();
  for (auto _ : st) {
    const auto s = specdec::tree_ssm_commit_path<float>(pb.parent, in, {}, path,
                                                        specdec::make_view(h.data(), pb.heads, pb.headdim, pb.dstate));
    if (!s.ok()) st.SkipWithError(s.message());
    benchmark::DoNotOptimize(h.data());
  }
  // 3 flops per state entry and step.
  set_flops(st, 3.0 * static_cast<double>(path.size()) * static_cast<double>(pb.heads * pb.headdim * pb.dstate));
  st.counters["steps"] = static_cast<double>(path.size());
}

// Tree conv1d over the demo's xBC channels (heads * headdim + 2 groups dstate), W = 4, SiLU.
// Row-major weight [channels, W] and state [channels, W - 1] (gathered per
// call), or channel-contiguous ones (weight stored [W][channels], a
// column-major state: read in place).
void run_conv1d(benchmark::State& st, bool channel_minor) {
  bench_problem pb(st.range(0), st.range(1), st.range(2));
  const std::int64_t ch = pb.conv_channels(), len = kConvWidth - 1;
  std::mt19937_64 rng(7);
  std::normal_distribution<float> nd;
  std::vector<float> x(static_cast<std::size_t>(pb.n * ch)), w(static_cast<std::size_t>(ch * kConvWidth)),
      b(static_cast<std::size_t>(ch)), state(static_cast<std::size_t>(ch * len)),
      out(static_cast<std::size_t>(pb.n * ch));
  for (auto* v : {&x, &w, &b, &state})
    for (auto& e : *v) e = nd(rng);
  specdec::tree_conv1d_inputs<float> in;
  in.x = specdec::make_view<const float>(x.data(), pb.n, ch);
  in.weight = channel_minor ? specdec::view2d<const float>{w.data(), {ch, kConvWidth}, {1, ch}}
                            : specdec::make_view<const float>(w.data(), ch, kConvWidth);
  in.bias = specdec::make_view<const float>(b.data(), ch);
  in.conv_state = channel_minor ? specdec::view2d<const float>{state.data(), {ch, len}, {1, ch}}
                                : specdec::make_view<const float>(state.data(), ch, len);
  in.silu = true;
  std::vector<std::byte> ws(specdec::tree_conv1d_workspace_size(kConvWidth));
  for (auto _ : st) {
    const auto s = specdec::tree_conv1d<float>(pb.parent, in, specdec::make_view(out.data(), pb.n, ch), ws);
    if (!s.ok()) st.SkipWithError(s.message());
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  // 2 W flops per output (the SiLU not counted); outputs/s against BM_ssm_silu.
  set_flops(st, 2.0 * static_cast<double>(pb.n * ch * kConvWidth));
  st.counters["outputs/s"] =
      benchmark::Counter(static_cast<double>(pb.n * ch), benchmark::Counter::kIsIterationInvariantRate);
}
void BM_ssm_conv1d(benchmark::State& st) { run_conv1d(st, false); }
void BM_ssm_conv1d_channel_minor(benchmark::State& st) { run_conv1d(st, true); }

// The conv-state commit after a round: [channels, W - 1] shifted by the
// accepted path (`path` nodes of a chain), in place. Channels: the demo
// hybrid's xBC (288) and a Mamba2-2.7B-sized layer's (5120 + 2 x 128).
// Bytes/s counts the state read and written once, against
// BM_ssm_conv_commit_copy, a plain copy of as many bytes in the same run.
// State [channels, L] packed, or column-major (BM_ssm_conv_commit_columns).
void run_conv_commit(benchmark::State& st, bool columns) {
  const std::int64_t ch = st.range(0), len = kConvWidth - 1;
  const auto m = static_cast<std::size_t>(st.range(1));
  const std::int64_t n = 5;
  std::vector<float> x(static_cast<std::size_t>(n * ch), 0.5f), state(static_cast<std::size_t>(ch * len), 1.0f);
  std::vector<node_id> parent(static_cast<std::size_t>(n)), path(m);
  for (std::size_t i = 0; i < parent.size(); ++i) parent[i] = static_cast<node_id>(i) - 1;
  for (std::size_t i = 0; i < m; ++i) path[i] = static_cast<node_id>(i);
  const specdec::view2d<float> sv =
      columns ? specdec::view2d<float>{state.data(), {ch, len}, {1, ch}} : specdec::make_view(state.data(), ch, len);
  for (auto _ : st) {
    const auto s =
        specdec::tree_conv1d_commit_state<float>(parent, specdec::make_view<const float>(x.data(), n, ch), path, sv);
    if (!s.ok()) st.SkipWithError(s.message());
    benchmark::DoNotOptimize(state.data());
    benchmark::ClobberMemory();
  }
  st.counters["state bytes/s"] = benchmark::Counter(2.0 * static_cast<double>(sizeof(float) * state.size()),
                                                    benchmark::Counter::kIsIterationInvariantRate);
}
void BM_ssm_conv_commit(benchmark::State& st) { run_conv_commit(st, false); }
void BM_ssm_conv_commit_columns(benchmark::State& st) { run_conv_commit(st, true); }

void BM_ssm_conv_commit_copy(benchmark::State& st) {
  const std::int64_t ch = st.range(0), len = kConvWidth - 1;
  std::vector<float> a(static_cast<std::size_t>(ch * len), 1.0f), b(a.size());
  for (auto _ : st) {
    std::copy(a.begin(), a.end(), b.begin());
    benchmark::DoNotOptimize(b.data());
    benchmark::ClobberMemory();
  }
  st.counters["state bytes/s"] = benchmark::Counter(2.0 * static_cast<double>(sizeof(float) * a.size()),
                                                    benchmark::Counter::kIsIterationInvariantRate);
}

void commit_args(benchmark::internal::Benchmark* b) {
  for (std::int64_t ch : {288, 5376})
    for (std::int64_t path : {1, 4}) b->Args({ch, path});
  b->ArgNames({"channels", "path"})->Unit(benchmark::kNanosecond)->MinTime(0.05);
}

// The same-run reference of conv1d: SiLU alone (the library's vector SiLU)
// over as many values as conv1d outputs. conv1d's 2 W flops per output are
// cheap next to the SiLU's exp and divide, so this, not a GEMM, bounds it.
void BM_ssm_silu(benchmark::State& st) {
  bench_problem pb(st.range(0), st.range(1), st.range(2));
  const std::int64_t count = pb.n * pb.conv_channels();
  using S = specdec::detail::vec_ops<float>;
  std::vector<float> x(static_cast<std::size_t>(count), 0.25f), out(x.size());
  for (auto _ : st) {
    std::int64_t i = 0;
    for (; i + S::lanes <= count; i += S::lanes) S::store(out.data() + i, S::silu(S::load(x.data() + i)));
    for (; i < count; ++i)
      out[static_cast<std::size_t>(i)] = specdec::detail::vec_ops<float, false>::silu(x[static_cast<std::size_t>(i)]);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  st.counters["outputs/s"] =
      benchmark::Counter(static_cast<double>(count), benchmark::Counter::kIsIterationInvariantRate);
}

void form_args(benchmark::internal::Benchmark* b) {
  for (std::int64_t shape : {binary, chain})
    for (std::int64_t n : {1, 8, 16, 32, 64}) b->Args({n, 8, shape});
  b->ArgNames({"nodes", "heads", "chain"})->Unit(benchmark::kMicrosecond)->MinTime(0.05);
}

// The references do not depend on the tree's shape.
void roofline_args(benchmark::internal::Benchmark* b) {
  for (std::int64_t n : {8, 16, 32, 64}) b->Args({n, 8, chain});
  b->ArgNames({"nodes", "heads", "chain"})->Unit(benchmark::kMicrosecond)->MinTime(0.05);
}

// ---- crossover of tree_scan_choose: recurrent vs dual over N, headdim, dstate --

void run_cross(benchmark::State& st, specdec::tree_scan_method method) {
  bench_problem pb(st.range(0), 8, st.range(3), st.range(1), st.range(2));
  const auto in = pb.inputs();
  std::vector<std::byte> ws(specdec::tree_scan_workspace_size<float>(pb.parent, pb.shape(), method));
  auto yv = specdec::make_view(pb.y.data(), pb.n, pb.heads, pb.headdim);
  for (auto _ : st) {
    const auto s = specdec::tree_scan<float>(pb.parent, in, {}, yv, {}, ws, method);
    if (!s.ok()) st.SkipWithError(s.message());
    benchmark::DoNotOptimize(pb.y.data());
    benchmark::ClobberMemory();
  }
  st.counters["pairs"] = pb.pairs();
}
void BM_ssm_cross_recurrent(benchmark::State& st) { run_cross(st, specdec::tree_scan_method::recurrent); }
void BM_ssm_cross_dual(benchmark::State& st) { run_cross(st, specdec::tree_scan_method::dual); }

void cross_args(benchmark::internal::Benchmark* b) {
  // 32 x 16: the model demo's Mamba2 layer; 64 x 128: Mamba2's default.
  for (std::int64_t shape : {binary, chain})
    for (std::int64_t p : {32, 64})
      for (std::int64_t s : {16, 64, 128})
        for (std::int64_t n : {8, 16, 32, 64, 128}) b->Args({n, p, s, shape});
  b->ArgNames({"nodes", "headdim", "dstate", "chain"})->Unit(benchmark::kMicrosecond)->MinTime(0.05);
}

// ---- tree scan vs unrolled root-to-leaf sequences -----------------------------

// Baseline: every root-to-leaf sequence scanned on its own with the same
// inner step (so only the amount of work differs), y for every token.
void BM_ssm_unrolled_sequences(benchmark::State& st) {
  bench_problem pb(st.range(0), st.range(1));
  const std::int64_t P = pb.headdim, S = pb.dstate;
  // Two buffers used in turn (read one, write the other).
  std::vector<float> state[2] = {std::vector<float>(static_cast<std::size_t>(P * S)),
                                 std::vector<float>(static_cast<std::size_t>(P * S))};
  std::int64_t steps = 0;
  for (const auto& p : pb.paths) steps += static_cast<std::int64_t>(p.size());
  for (auto _ : st) {
    for (const auto& path : pb.paths) {
      for (std::int64_t h = 0; h < pb.heads; ++h) {
        const float* h0 = pb.h0.data() + h * P * S;
        for (std::size_t t = 0; t < path.size(); ++t) {
          const std::int64_t i = path[t];
          const float d = specdec::detail::ssm_softplus(pb.dt[static_cast<std::size_t>(i * pb.heads + h)] +
                                                        pb.bias[static_cast<std::size_t>(h)]);
          const float decay = std::exp(d * pb.A[static_cast<std::size_t>(h)]);
          const float* b = pb.B.data() + i * S;
          const float* c = pb.C.data() + i * S;
          for (std::int64_t p = 0; p < P; ++p) {
            const float xv = pb.x[static_cast<std::size_t>((i * pb.heads + h) * P + p)];
            const float* in_row = t == 0 ? h0 + p * S : state[(t + 1) % 2].data() + p * S;
            float out = specdec::detail::ssm_step_row(in_row, state[t % 2].data() + p * S, b, c, decay, d * xv, S);
            pb.y[static_cast<std::size_t>((i * pb.heads + h) * P + p)] = out + pb.D[static_cast<std::size_t>(h)] * xv;
          }
        }
      }
    }
    benchmark::DoNotOptimize(pb.y.data());
    benchmark::ClobberMemory();
  }
  st.counters["steps"] = static_cast<double>(steps);
}

void run_tree(benchmark::State& st, specdec::tree_scan_method method) {
  bench_problem pb(st.range(0), st.range(1));
  const auto in = pb.inputs(false);
  std::vector<std::byte> ws(specdec::tree_scan_workspace_size<float>(pb.parent, pb.shape(), method));
  auto yv = specdec::make_view(pb.y.data(), pb.n, pb.heads, pb.headdim);
  for (auto _ : st) {
    const auto s = specdec::tree_scan<float>(pb.parent, in, {}, yv, {}, ws, method);
    if (!s.ok()) st.SkipWithError(s.message());
    benchmark::DoNotOptimize(pb.y.data());
    benchmark::ClobberMemory();
  }
  st.counters["steps"] = static_cast<double>(pb.n);
  st.counters["state_bytes"] = static_cast<double>(ws.size());
}
void BM_ssm_tree_recurrent(benchmark::State& st) { run_tree(st, specdec::tree_scan_method::recurrent); }
void BM_ssm_tree_dual(benchmark::State& st) { run_tree(st, specdec::tree_scan_method::dual); }

void tree_args(benchmark::internal::Benchmark* b) {
  for (std::int64_t heads : {8, 80})
    for (std::int64_t n : {15, 31, 63}) b->Args({n, heads});
  b->ArgNames({"nodes", "heads"})->Unit(benchmark::kMicrosecond)->MinTime(0.05);
}

}  // namespace

#if BENCH_SSM_EIGEN
BENCHMARK(BM_ssm_gemm)->Apply(form_args);
BENCHMARK(BM_ssm_dual_eigen)->Apply(form_args);
#endif
BENCHMARK(BM_ssm_recurrent)->Apply(form_args);
BENCHMARK(BM_ssm_recurrent_states)->Apply(form_args);
BENCHMARK(BM_ssm_dual)->Apply(form_args);
BENCHMARK(BM_ssm_auto)->Apply(form_args);
BENCHMARK(BM_ssm_commit)->Apply(form_args);
BENCHMARK(BM_ssm_check)->Apply(form_args);
BENCHMARK(BM_ssm_conv1d)->Apply(form_args);
BENCHMARK(BM_ssm_conv1d_channel_minor)->Apply(form_args);
BENCHMARK(BM_ssm_silu)->Apply(roofline_args);
BENCHMARK(BM_ssm_conv_commit)->Apply(commit_args);
BENCHMARK(BM_ssm_conv_commit_columns)->Apply(commit_args);
BENCHMARK(BM_ssm_conv_commit_copy)->Apply(commit_args);
BENCHMARK(BM_ssm_states_store)->Apply(roofline_args);
BENCHMARK(BM_ssm_states_pass)->Apply(roofline_args);
BENCHMARK(BM_ssm_scan_batch)->Apply(batch_args);
BENCHMARK(BM_ssm_scan_per_request)->Apply(batch_args);
BENCHMARK(BM_ssm_cross_recurrent)->Apply(cross_args);
BENCHMARK(BM_ssm_cross_dual)->Apply(cross_args);
BENCHMARK(BM_ssm_tree_recurrent)->Apply(tree_args);
BENCHMARK(BM_ssm_tree_dual)->Apply(tree_args);
BENCHMARK(BM_ssm_unrolled_sequences)->Apply(tree_args);
