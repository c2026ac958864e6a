// Host verification throughput.
// - BM_verify_tree: one 64-node tree at V = 128256 (modes by number; 7 =
//   traversal); BM_verify_chain: a chain of 8 drafts (0 = sampled_iid,
//   6 = block). Bytes = the p and q rows the walk reads, each counted once
//   (found by probing, see visited_rows): the ideal "read each visited row
//   once" traffic. The same run also times a plain streaming read (sum) of
//   exactly those rows and reports its rate (stream_bytes_per_second) and
//   the ratio verify / stream.
// - BM_stream_visited_rows: that streaming read on its own.
// - BM_verify_batch: 32 requests (16-node trees, V = 32000), requests/s.
// - BM_logits_to_probs/V: one row at temperature 1, no filters (the
//   planner-driven loop's per-token cost at T > 0), bytes = the row read
//   and written once; BM_logits_to_probs_std_exp/V: the same three passes
//   with std::exp per entry (the form before the vector exp), and
//   BM_row_copy/V: memcpy of the row, the stream figure of the same run.
// - BM_child_acceptance/V/mode: child_acceptance after a chain of 4 drafts
//   all accepted (4 path nodes with children): mode 0 (sampled_iid) reads
//   the 4 p and 4 q rows, mode 2 (deterministic) the 4 p rows; bytes =
//   those rows once; the same run times a streaming read of exactly those
//   rows (stream_bytes_per_second, ratio_vs_stream).
// - BM_verify_trees_sharded/R/pool: R requests (8-node trees, V = 4096)
//   through verify_trees_sharded on one rank (self_collective): with
//   R - 1 threads started per call (pool 0) or a shard_batch_workers pool
//   kept across calls (pool 1). The difference is the host cost the pool
//   removes; the collectives of one rank cost nothing here.
#include <benchmark/benchmark.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <random>
#include <vector>

#include "specdec/parallel/shard_batch.hpp"
#include "specdec/sample/logits_rows.hpp"
#include "specdec/verify/batch_verify.hpp"
#include "specdec/verify/child_acceptance.hpp"
#include "specdec/verify/distribution.hpp"
#include "specdec/verify/tree_verify.hpp"

using namespace specdec;

namespace {

// Peaked target rows (softmax of Gaussian logits at temperature 0.5) and
// draft rows = a perturbed copy (so acceptance is realistic, not 0 or 1).
void make_rows(std::mt19937& gen, std::int64_t n, std::int64_t V, std::vector<float>& P, std::vector<float>& Q) {
  std::normal_distribution<float> N(0.0f, 2.0f);
  std::vector<float> lp(static_cast<std::size_t>(V)), lq(static_cast<std::size_t>(V));
  P.resize(static_cast<std::size_t>(n * V));
  Q.resize(static_cast<std::size_t>(n * V));
  const sampling_params sp{0.5f, 0, 1.0f, 0.0f};
  for (std::int64_t u = 0; u < n; ++u) {
    for (std::int64_t i = 0; i < V; ++i) {
      lp[static_cast<std::size_t>(i)] = N(gen);
      lq[static_cast<std::size_t>(i)] = lp[static_cast<std::size_t>(i)] + 0.5f * N(gen);
    }
    (void)logits_to_probs_row(make_view(lp.data(), V).as_const(), make_view(P.data() + u * V, V), sp, {});
    (void)logits_to_probs_row(make_view(lq.data(), V).as_const(), make_view(Q.data() + u * V, V), sp, {});
  }
}

// A tree of n nodes (BFS, up to 4 children per node) whose tokens are drawn
// from the parent's draft row q.
token_tree make_tree(std::mt19937& gen, int n, std::int64_t V, const std::vector<float>& Q) {
  token_tree t(0);
  std::uniform_real_distribution<float> U(0.0f, 1.0f);
  for (node_id u = 0; t.size() < n; ++u)
    for (int k = 0; k < 4 && t.size() < n; ++k) {
      const auto row = make_view(Q.data() + u * V, V).as_const();
      double total = 0;
      (void)validate_probability_row(row, &total);
      t.add_child(u, sample_row(row, U(gen), total));
    }
  return t;
}

// Thread CPU time: the machine running these benchmarks is shared, so the
// ratio compares CPU seconds of both loops rather than wall time.
double cpu_now() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// A streaming read of `rows`: fp32 rows summed in double lanes, 16-bit rows
// summed as raw words (integer lanes vectorise, so this is the memory figure,
// not a widening one).
template <class T>
double stream_sum(const std::vector<const T*>& rows, std::int64_t V) {
  using lane = std::conditional_t<std::is_same_v<T, float>, double, std::uint32_t>;  // wraps: only read
  auto word = [](T x) {
    if constexpr (std::is_same_v<T, float>)
      return static_cast<lane>(x);
    else
      return static_cast<lane>(x.bits);
  };
  lane acc[8] = {};
  for (const T* r : rows) {
    std::int64_t i = 0;
    for (; i + 8 <= V; i += 8)
      for (int l = 0; l < 8; ++l) acc[l] += word(r[i + l]);
    for (; i < V; ++i) acc[0] += word(r[i]);
  }
  return static_cast<double>(((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7])));
}

// A 64-node tree (BFS, 4 children per node) or a chain of 8 drafts at
// V = 128256, tokens drawn from the parent's q row.
struct tree_case {
  std::int64_t V = 128256;
  int n = 64;
  std::vector<float> P, Q;
  token_tree tree;
  explicit tree_case(bool chain) {
    std::mt19937 gen(12345);
    if (chain) n = 9;
    make_rows(gen, n, V, P, Q);
    if (!chain) {
      tree = make_tree(gen, n, V, Q);
      return;
    }
    tree = token_tree(0);
    std::uniform_real_distribution<float> U(0.0f, 1.0f);
    for (node_id u = 0; u + 1 < n; ++u) {
      const auto row = make_view(Q.data() + u * V, V).as_const();
      double total = 0;
      (void)validate_probability_row(row, &total);
      tree.add_child(u, sample_row(row, U(gen), total));
    }
  }
};

const tree_case& the_case(bool chain = false) {
  static const tree_case t(false), c(true);
  return chain ? c : t;
}

// The p and q rows one verification reads, found by probing: a NaN put in a
// row the walk reads is reported (non_finite, that node) when the walk first
// reads it, and changes nothing otherwise, because every walk validates each
// row it reads in full. Counts each visited row once.
template <class T>
std::vector<const T*> visited_rows(const tree_case& c, std::vector<T>& P, std::vector<T>& Q, const verify_params& vp) {
  std::vector<std::byte> ws(verify_workspace_size(c.V, c.n));
  std::vector<node_id> path(static_cast<std::size_t>(c.n));
  std::vector<token_id> toks(static_cast<std::size_t>(c.n));
  std::vector<const T*> rows;
  for (std::vector<T>* m : {&P, &Q}) {
    for (node_id u = 0; u < c.n; ++u) {
      T& x = (*m)[static_cast<std::size_t>(u * c.V + 1)];
      const T keep = x;
      if constexpr (std::is_same_v<T, float>)
        x = NAN;
      else
        x = T{0x7FC0u};  // a bf16 quiet NaN
      verify_result r{};
      const status st = verify_tree(c.tree.view(), make_view(P.data(), c.n, c.V).as_const(),
                                    make_view(Q.data(), c.n, c.V).as_const(), vp, ws, path, toks, r);
      x = keep;
      if (st.code() == status_code::non_finite && st.index() == u) rows.push_back(m->data() + u * c.V);
    }
  }
  return rows;
}
std::vector<const float*> visited_rows(const tree_case& c, const verify_params& vp) {
  return visited_rows(c, const_cast<std::vector<float>&>(c.P), const_cast<std::vector<float>&>(c.Q), vp);
}

// Sets vp.round to the first round in which verify_tree accepts >= 2
// drafts (the last round tried when none does); false if a call fails.
bool first_deep_round(const tree_case& c, const rows_view& p, const rows_view& q, verify_params& vp,
                      std::vector<std::byte>& ws, std::vector<node_id>& path, std::vector<token_id>& toks,
                      verify_result& r) {
  for (std::uint32_t round = 0; round < 1000; ++round) {
    vp.round = round;
    if (!verify_tree(c.tree.view(), p, q, vp, ws, path, toks, r).ok()) return false;
    if (r.accepted >= 2) break;
  }
  return true;
}

// Times verify_tree on vp's round and, in the same run, a streaming read of
// `rows` (the rows that round visits, elements of type T); reports the
// verification's bytes/s, the stream's, and their ratio.
template <class T>
void time_against_stream(benchmark::State& state, const tree_case& c, const std::vector<const T*>& rows,
                         const rows_view& p, const rows_view& q, const verify_params& vp) {
  std::vector<std::byte> ws(verify_workspace_size(c.V, c.n));
  std::vector<node_id> path(static_cast<std::size_t>(c.n));
  std::vector<token_id> toks(static_cast<std::size_t>(c.n));
  const double bytes = static_cast<double>(rows.size()) * static_cast<double>(c.V) * sizeof(T);
  const int reps = 50;
  double sink = 0;
  const double t0 = cpu_now();
  for (int i = 0; i < reps; ++i) {
    benchmark::ClobberMemory();  // the rows may have changed: re-read them every time
    double v = stream_sum(rows, c.V);
    benchmark::DoNotOptimize(v);
    sink += v;
  }
  const double ts = (cpu_now() - t0) / reps;
  benchmark::DoNotOptimize(sink);
  verify_result r{};
  const double v0 = cpu_now();
  for (auto _ : state) {
    const status st = verify_tree(c.tree.view(), p, q, vp, ws, path, toks, r);
    benchmark::DoNotOptimize(st);
    benchmark::DoNotOptimize(r);
  }
  const double tv = (cpu_now() - v0) / static_cast<double>(state.iterations());
  state.SetBytesProcessed(static_cast<std::int64_t>(bytes) * static_cast<std::int64_t>(state.iterations()));
  state.counters["accepted"] = r.accepted;
  state.counters["rows_read"] = static_cast<double>(rows.size());
  state.counters["stream_bytes_per_second"] = benchmark::Counter(bytes / ts);
  state.counters["ratio_vs_stream"] = ts / tv;  // verify bytes/s over streaming bytes/s
  state.SetLabel(verify_mode_name(vp.mode));
}

// Times verify_tree on a fixed round (the first with >= 2 accepted drafts)
// and, in the same run, a streaming read of exactly the rows it visits.
void verify_bench(benchmark::State& state, bool chain) {
  const auto& c = the_case(chain);
  const auto mode = static_cast<verify_mode>(state.range(0));
  std::vector<std::byte> ws(verify_workspace_size(c.V, c.n));
  std::vector<node_id> path(static_cast<std::size_t>(c.n));
  std::vector<token_id> toks(static_cast<std::size_t>(c.n));
  const auto p = make_view(c.P.data(), c.n, c.V).as_const();
  const auto q = make_view(c.Q.data(), c.n, c.V).as_const();
  verify_params vp;
  vp.mode = mode;
  vp.seed = 77;
  verify_result r{};
  if (!first_deep_round(c, p, q, vp, ws, path, toks, r)) {
    state.SkipWithError("verify failed");
    return;
  }
  const auto rows = visited_rows(c, vp);
  time_against_stream(state, c, rows, p, q, vp);
}

void BM_verify_tree(benchmark::State& state) { verify_bench(state, false); }
BENCHMARK(BM_verify_tree)->Arg(0)->Arg(1)->Arg(2)->Arg(3)->Arg(4)->Arg(7)->Unit(benchmark::kMicrosecond);

// The same tree with its rows rounded to bf16 (nearest even): the host widens
// 16-bit rows a tile at a time before its vector loops, so this is the cost
// of handing it bf16 rows instead of fp32 ones. The round is the first with
// >= 2 accepted drafts of these rows; the stream figure reads the bf16 rows
// that round visits (half the bytes of fp32 ones), widening as it sums.
void BM_verify_tree_bf16(benchmark::State& state) {
  const auto& c = the_case(false);
  auto narrow = [](const std::vector<float>& x) {
    std::vector<bfloat16> y(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) {
      const auto u = std::bit_cast<std::uint32_t>(x[i]);
      y[i] = bfloat16{static_cast<std::uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16)};
    }
    return y;
  };
  auto P = narrow(c.P), Q = narrow(c.Q);
  std::vector<std::byte> ws(verify_workspace_size(c.V, c.n));
  std::vector<node_id> path(static_cast<std::size_t>(c.n));
  std::vector<token_id> toks(static_cast<std::size_t>(c.n));
  const rows_view p = make_view(P.data(), c.n, c.V), q = make_view(Q.data(), c.n, c.V);
  verify_params vp;
  vp.mode = static_cast<verify_mode>(state.range(0));
  vp.seed = 77;
  vp.normalization_tolerance = 0.01f;
  verify_result r{};
  if (!first_deep_round(c, p, q, vp, ws, path, toks, r)) {
    state.SkipWithError("verify failed");
    return;
  }
  const auto rows = visited_rows(c, P, Q, vp);
  time_against_stream(state, c, rows, p, q, vp);
}
BENCHMARK(BM_verify_tree_bf16)->Arg(0)->Arg(3)->Unit(benchmark::kMicrosecond);

// A chain of 8 drafts: Leviathan/Chen (sampled_iid) vs block verification.
void BM_verify_chain(benchmark::State& state) { verify_bench(state, true); }
BENCHMARK(BM_verify_chain)->Arg(0)->Arg(6)->Unit(benchmark::kMicrosecond);

void BM_child_acceptance(benchmark::State& state) {
  const std::int64_t V = state.range(0);
  const auto mode = static_cast<verify_mode>(state.range(1));
  constexpr std::int32_t n = 5;
  std::mt19937 gen(13);
  std::uniform_real_distribution<float> U(0.0f, 1.0f);
  std::vector<float> p(static_cast<std::size_t>(n * V)), q(p.size());
  for (std::vector<float>* m : {&p, &q})
    for (std::int32_t u = 0; u < n; ++u) {
      double sum = 0.0;
      for (std::int64_t x = 0; x < V; ++x) sum += ((*m)[static_cast<std::size_t>(u * V + x)] = U(gen));
      for (std::int64_t x = 0; x < V; ++x) (*m)[static_cast<std::size_t>(u * V + x)] /= static_cast<float>(sum);
    }
  const node_id parent[n] = {-1, 0, 1, 2, 3}, path[n] = {0, 1, 2, 3, 4};
  const token_id tokens[n] = {0, 1, 2, 3, 4};
  const tree_view tv{tokens, parent, nullptr, nullptr, n};
  std::vector<const float*> rows;
  for (std::int32_t u = 0; u + 1 < n; ++u) {
    rows.push_back(p.data() + u * V);
    if (mode != verify_mode::deterministic) rows.push_back(q.data() + u * V);
  }
  const double bytes = static_cast<double>(rows.size()) * static_cast<double>(V) * sizeof(float);
  const int reps = 50;
  double sink = 0;
  const double t0 = cpu_now();
  for (int i = 0; i < reps; ++i) {
    benchmark::ClobberMemory();
    sink += stream_sum(rows, V);
  }
  const double ts = (cpu_now() - t0) / reps;
  benchmark::DoNotOptimize(sink);
  std::vector<float> out(n);
  const auto pv = make_view<const float>(p.data(), n, V), qv = make_view<const float>(q.data(), n, V);
  const double c0 = cpu_now();
  for (auto _ : state) {
    const status st = child_acceptance(tv, path, mode, pv, qv, out);
    benchmark::DoNotOptimize(st);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  const double tc = (cpu_now() - c0) / static_cast<double>(state.iterations());
  state.SetBytesProcessed(static_cast<std::int64_t>(bytes) * static_cast<std::int64_t>(state.iterations()));
  state.counters["stream_bytes_per_second"] = benchmark::Counter(bytes / ts);
  state.counters["ratio_vs_stream"] = ts / tc;
  state.SetLabel(verify_mode_name(mode));
}
BENCHMARK(BM_child_acceptance)
    ->ArgsProduct({{256, 49152, 152064}, {0, 2}})
    ->ArgNames({"V", "mode"})
    ->Unit(benchmark::kMicrosecond);

void BM_stream_visited_rows(benchmark::State& state) {
  const auto& c = the_case();
  // The sampled_iid walk's rows (as in BM_verify_tree/0).
  verify_params vp;
  vp.seed = 77;
  std::vector<std::byte> ws(verify_workspace_size(c.V, c.n));
  std::vector<node_id> path(static_cast<std::size_t>(c.n));
  std::vector<token_id> toks(static_cast<std::size_t>(c.n));
  verify_result r{};
  for (std::uint32_t round = 0; round < 1000; ++round) {
    vp.round = round;
    (void)verify_tree(c.tree.view(), make_view(c.P.data(), c.n, c.V).as_const(),
                      make_view(c.Q.data(), c.n, c.V).as_const(), vp, ws, path, toks, r);
    if (r.accepted >= 2) break;
  }
  const auto rows = visited_rows(c, vp);
  for (auto _ : state) benchmark::DoNotOptimize(stream_sum(rows, c.V));
  state.SetBytesProcessed(static_cast<std::int64_t>(rows.size()) * c.V * static_cast<std::int64_t>(sizeof(float)) *
                          static_cast<std::int64_t>(state.iterations()));
}
BENCHMARK(BM_stream_visited_rows)->Unit(benchmark::kMicrosecond);

void BM_verify_batch(benchmark::State& state) {
  const int R = 32, n = 16;
  const std::int64_t V = 32000;
  static std::vector<float> P, Q;
  static std::vector<token_id> tok;
  static std::vector<node_id> par;
  static std::vector<std::int32_t> off;
  if (off.empty()) {
    std::mt19937 gen(5);
    make_rows(gen, R * n, V, P, Q);
    off.push_back(0);
    for (int r = 0; r < R; ++r) {
      std::vector<float> qr(Q.begin() + static_cast<std::ptrdiff_t>(r) * n * V,
                            Q.begin() + static_cast<std::ptrdiff_t>(r + 1) * n * V);
      const auto t = make_tree(gen, n, V, qr);
      tok.insert(tok.end(), t.tokens().begin(), t.tokens().end());
      par.insert(par.end(), t.parents().begin(), t.parents().end());
      off.push_back(off.back() + n);
    }
  }
  std::vector<verify_params> params(R);
  for (int r = 0; r < R; ++r) {
    params[static_cast<std::size_t>(r)].mode = r % 4 == 3 ? verify_mode::greedy : verify_mode::sampled_iid;
    params[static_cast<std::size_t>(r)].seed = 9;
    params[static_cast<std::size_t>(r)].request = static_cast<std::uint32_t>(r);
  }
  std::vector<node_id> paths(static_cast<std::size_t>(R * n));
  std::vector<token_id> toks(static_cast<std::size_t>(R * n));
  std::vector<verify_result> res(R);
  std::vector<std::byte> ws(verify_batch_workspace_size(V, off));
  const verify_batch_input in{off, tree_view{tok.data(), par.data(), nullptr, nullptr, off.back()},
                              make_view(P.data(), off.back(), V).as_const(),
                              make_view(Q.data(), off.back(), V).as_const(), params};
  const verify_batch_output out{make_view(paths.data(), R, n), make_view(toks.data(), R, n), res, {}};
  std::uint32_t round = 0;
  double accepted = 0;
  for (auto _ : state) {
    for (auto& p : params) p.round = round;
    ++round;
    const status st = verify_batch(in, ws, out);
    benchmark::DoNotOptimize(st);
    for (const auto& x : res) accepted += x.accepted;
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()) * R);
  state.counters["mean_accepted"] = accepted / (static_cast<double>(state.iterations()) * R);
  state.SetLabel("32 requests, 16-node trees, V=32000, 3/4 sampled_iid + 1/4 greedy; items = requests");
}
BENCHMARK(BM_verify_batch)->Unit(benchmark::kMicrosecond);

void BM_verify_trees_sharded(benchmark::State& state) {
  const auto R = static_cast<std::int32_t>(state.range(0));
  const bool pooled = state.range(1) != 0;
  const int n = 8;
  const std::int64_t V = 4096;
  std::mt19937 gen(21);
  std::vector<float> P, Q;
  make_rows(gen, n, V, P, Q);
  const token_tree tree = make_tree(gen, n, V, Q);
  const std::int64_t bounds[] = {0, V};
  std::vector<std::vector<std::byte>> ws(static_cast<std::size_t>(R));
  std::vector<std::vector<node_id>> path(static_cast<std::size_t>(R), std::vector<node_id>(n));
  std::vector<std::vector<token_id>> toks(static_cast<std::size_t>(R), std::vector<token_id>(n));
  std::vector<sharded_tree_request> req(static_cast<std::size_t>(R));
  for (std::size_t r = 0; r < req.size(); ++r) {
    ws[r].resize(sharded_verify_workspace_size(bounds, 0, 1, n));
    req[r].tree = tree.view();
    req[r].p = make_view(P.data(), n, V).as_const();
    req[r].q = make_view(Q.data(), n, V).as_const();
    req[r].params.seed = 3;
    req[r].params.request = static_cast<std::uint32_t>(r);
    req[r].workspace = shard_workspace(ws[r]);
    req[r].path = path[r];
    req[r].tokens = toks[r];
  }
  std::vector<verify_result> res(static_cast<std::size_t>(R));
  std::vector<status> st(static_cast<std::size_t>(R));
  self_collective coll;
  host_batch_backend<self_collective> backend(coll, R);
  shard_batch_workers pool(pooled ? R : 1);
  std::uint32_t round = 0;
  for (auto _ : state) {
    for (auto& q : req) q.params.round = round;
    ++round;
    const status s = pooled ? verify_trees_sharded(backend, pool, bounds, req, res, st)
                            : verify_trees_sharded(backend, bounds, req, res, st);
    if (!s.ok()) {
      state.SkipWithError("verify_trees_sharded failed");
      return;
    }
  }
  double accepted = 0;
  for (std::size_t r = 0; r < req.size(); ++r) {
    if (!st[r].ok()) {
      state.SkipWithError("a request failed");
      return;
    }
    accepted += res[r].accepted;
  }
  state.counters["accepted"] = accepted / R;
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()) * R);
}
BENCHMARK(BM_verify_trees_sharded)
    ->ArgNames({"R", "pool"})
    ->ArgsProduct({{1, 8, 32}, {0, 1}})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

// Gaussian logits (sd 3) with a few masked tokens.
std::vector<float> random_logits(std::int64_t V) {
  std::mt19937 gen(11);
  std::normal_distribution<float> N(0.0f, 3.0f);
  std::vector<float> x(static_cast<std::size_t>(V));
  for (auto& v : x) v = N(gen);
  for (std::int64_t i = 0; i < V; i += 97) x[static_cast<std::size_t>(i)] = -INFINITY;
  return x;
}

// Times `pass(x, p, V)` over one row of random logits x into p; bytes = the
// row read once and written once.
template <class Pass>
void time_row(benchmark::State& state, Pass pass) {
  const std::int64_t V = state.range(0);
  const auto x = random_logits(V);
  std::vector<float> p(static_cast<std::size_t>(V));
  for (auto _ : state) {
    pass(x.data(), p.data(), V);
    benchmark::DoNotOptimize(p.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(2 * V * static_cast<std::int64_t>(sizeof(float)) *
                          static_cast<std::int64_t>(state.iterations()));
}

void BM_logits_to_probs(benchmark::State& state) {
  time_row(state, [](const float* x, float* p, std::int64_t V) {
    benchmark::DoNotOptimize(logits_to_probs_row(make_view(x, V), make_view(p, V), sampling_params{}, {}).ok());
  });
}
BENCHMARK(BM_logits_to_probs)->Arg(256)->Arg(49152)->Arg(152064)->Unit(benchmark::kMicrosecond);

void BM_logits_to_probs_std_exp(benchmark::State& state) {
  time_row(state, [](const float* x, float* p, std::int64_t V) {
    float m = -INFINITY;
    for (std::int64_t i = 0; i < V; ++i) m = std::max(m, x[i]);
    double s = 0.0;
    for (std::int64_t i = 0; i < V; ++i) {
      p[i] = x[i] == -INFINITY ? 0.0f : std::exp(x[i] - m);
      s += static_cast<double>(p[i]);
    }
    const double inv = 1.0 / s;
    for (std::int64_t i = 0; i < V; ++i) p[i] = static_cast<float>(static_cast<double>(p[i]) * inv);
  });
}
BENCHMARK(BM_logits_to_probs_std_exp)->Arg(256)->Arg(49152)->Arg(152064)->Unit(benchmark::kMicrosecond);

// The host twin of the kernels' logits pre-pass: one row's sampling
// transform (make_row_transform, with scratch for the weights as
// verify_batch gives it) unfiltered (arg 1 = 0), with top-k 50 (1) or
// top-k 50 and top-p 0.9 (2): the row is read twice, the weights 2, 11 or
// 20 times (count, 8 radix digits and the mass per filter; the zeroing and
// Z passes). Bytes are counted as for the rows above (a row in and out), so
// the time next to BM_row_copy's at the same V is the passes' cost.
void BM_row_transform(benchmark::State& state) {
  const int filters = static_cast<int>(state.range(1));
  const sampling_params sp{0.8f, filters >= 1 ? 50 : 0, filters == 2 ? 0.9f : 1.0f, 0.0f};
  std::vector<float> weights(static_cast<std::size_t>(state.range(0)));
  time_row(state, [&](const float* x, float* p, std::int64_t V) {
    const row_transform t = make_row_transform(detail::row_ref{x, 1}, V, sp, weights);
    p[0] = static_cast<float>(t.inv_z);
  });
  state.SetLabel(filters == 0 ? "T 0.8" : filters == 1 ? "T 0.8, top-k 50" : "T 0.8, top-k 50, top-p 0.9");
}
BENCHMARK(BM_row_transform)->ArgsProduct({{49152, 152064}, {0, 1, 2}})->Unit(benchmark::kMicrosecond);

void BM_row_copy(benchmark::State& state) {
  time_row(state, [](const float* x, float* p, std::int64_t V) {
    std::memcpy(p, x, static_cast<std::size_t>(V) * sizeof(float));
  });
}
BENCHMARK(BM_row_copy)->Arg(256)->Arg(49152)->Arg(152064)->Unit(benchmark::kMicrosecond);

}  // namespace
