// The round planner (loop/planner.hpp): its own cost per round, and what it
// chooses on other hardware.
//
// BM_planner_round/B/D: one next() + observe() per iteration on a stream of
// simulated rounds (acceptance 0.7 / 0.15 / 0.05 for sibling ranks 0-2,
// decaying 3% per depth), node budget B, depth bound D, measured pass times
// fed back (t = 100 us + 20 us per node). Re-solves happen every
// replan_every = 32 rounds and are included in the mean. Compare the time per
// iteration with a round of the demo (bash scripts/demo.sh prints t(1) of the
// target: a round costs at least that).
//
// BM_planner_cold_request/B/D: a planner reset, then 48 rounds as above per
// iteration (a cold request: valuations after 1, 2, 4, ... drafted rounds).
//
// BM_planner_drafted: plan_drafted() + observe() per iteration on a 16-node
// deterministic draft (rounds planned per second).
//
// BM_planner_skipped: a plain step with a draft in hand, plan_drafted() +
// observe() + observe_skipped() per iteration (a 16-node draft, a text that
// follows it 60% of the time, passes priced so that speculation never pays):
// what reporting skipped drafts adds to each plain round.
//
// BM_planned_drafts_build/H: one build() + observe() of
// planned_drafts_builder<prompt_lookup_builder> per iteration (lookup over a
// history of H tokens that repeats a 37-token phrase with every 11th token
// changed, a 16-node draft cut by plan_drafted, the first drafted level
// accepted): what a planned model-free round costs the host, lookup
// included, next to BM_planner_drafted's planning alone.
//
// BM_planner_curve/c: the planner fed one hardware curve (injected), run for
// 4000 simulated rounds against the same acceptance; counters: the shape it
// settles on (nodes, depth), its predicted tokens per round and speedup over
// plain decoding (t(1) per token), and the simulated ones (the second half of
// the run). Curves (relative to t(1)): 0 flat to 64 nodes (a GPU running a
// 7B model); 1 STree's linear SSM fit t = k(N + 15) (Mamba2-2.7B: t(15)/t(5)
// = 1.5); 2 a quadratic hybrid fit with t(15)/t(5) = 1.1 (MambaInLlama-8B);
// 3 this repository's CPU demo before the engine rework (t(N) ~ N t(1));
// drafter: 2% of t(1) per level.
//
// BM_planner_expected/E/M: cold 160-token requests (a new planner each) on
// this repository's CPU demo curve (t(N) = t(1) (1 + 0.5 (N - 1)), drafter
// 0.1 t(1) per level, injected), drafts accepted with a chance drawn per
// round and level from a beta law of mean M / 100 and variance
// m (1 - m) / 5 (the demo's chains at T = 1: 0.03); E = 1 feeds that chance
// back (round_feedback::accept_prob, what the sessions report from
// child_acceptance), E = 0 only the accepted / rejected indicator.
// Counters: speedup_sim (tokens per unit time over plain decoding) and
// drafted (share of rounds that drafted), over 400 requests; the simulation
// is the loop tests' (tests/loop/cold_requests.hpp).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "loop/cold_requests.hpp"
#include "specdec/draft/prompt_lookup.hpp"
#include "specdec/loop/planned_drafts.hpp"
#include "specdec/loop/planner.hpp"

namespace {

using specdec::node_id;

double accept(std::int32_t d, std::int32_t r) {
  static const double rank[3] = {0.7, 0.15, 0.05};
  return r < 3 ? rank[r] * std::pow(0.97, d - 1) : 0.0;
}

// Verification's walk over `shape` under accept(): one uniform per reached node.
void walk(std::span<const node_id> shape, std::mt19937_64& rng, std::vector<node_id>& path) {
  std::uniform_real_distribution<double> U(0.0, 1.0);
  path.assign(1, 0);
  for (std::int32_t depth = 1;; ++depth) {
    const double x = U(rng);
    double cum = 0.0;
    std::int32_t r = 0;
    node_id next = -1;
    for (std::size_t c = 1; c < shape.size() && next < 0; ++c)
      if (shape[c] == path.back() && x < (cum += accept(depth, r++))) next = static_cast<node_id>(c);
    if (next < 0) return;
    path.push_back(next);
  }
}

// One simulated round of `plan`: the walk under accept(), a pass of
// `pass_seconds` (< 0: 100 us + 20 us per node, as an engine would measure)
// and a drafter of 5 us per level. The feedback points into the buffers.
specdec::round_feedback simulated_round(const specdec::round_plan& plan, std::mt19937_64& rng,
                                        std::vector<node_id>& shape, std::vector<node_id>& path,
                                        std::vector<specdec::token_id>& tok, double pass_seconds) {
  shape.assign(plan.shape.begin(), plan.shape.end());
  walk(shape, rng, path);
  tok.assign(shape.size(), 0);
  specdec::round_feedback f;
  f.tree = specdec::tree_view{tok.data(), shape.data(), nullptr, nullptr, static_cast<std::int32_t>(shape.size())};
  f.path = path;
  f.forward_nodes = plan.summary.nodes;
  f.forward_seconds = pass_seconds < 0.0 ? 1e-4 + 2e-5 * plan.summary.nodes : pass_seconds;
  f.drafter_calls = plan.summary.depth;
  f.drafted_nodes = plan.summary.nodes - 1;
  f.drafter_seconds = 5e-6 * plan.summary.depth;
  return f;
}

struct simulated {
  double tokens = 0, seconds = 0, predicted_tokens = 0;
};

simulated run(specdec::round_planner& p, int rounds, std::uint64_t seed, bool measured_times) {
  std::mt19937_64 rng(seed);
  std::vector<node_id> shape, path;
  std::vector<specdec::token_id> tok;
  simulated s;
  for (int i = 0; i < rounds; ++i) {
    const specdec::round_plan plan = p.next();
    if (!p.observe(simulated_round(plan, rng, shape, path, tok,
                                   measured_times ? -1.0 : p.target_seconds(plan.summary.nodes)))
             .ok())
      std::abort();
    if (i >= rounds / 2) {
      s.tokens += static_cast<double>(path.size());
      s.seconds += plan.summary.predicted_seconds;
      s.predicted_tokens += plan.summary.expected_tokens;
    }
  }
  return s;
}

void BM_planner_round(benchmark::State& state) {
  specdec::round_planner p(specdec::planner_options{.max_nodes = static_cast<std::int32_t>(state.range(0)),
                                                    .max_depth = static_cast<std::int32_t>(state.range(1))});
  std::mt19937_64 rng(7);
  std::vector<node_id> shape, path;
  std::vector<specdec::token_id> tok;
  for (auto _ : state) {
    const specdec::round_plan plan = p.next();
    benchmark::DoNotOptimize(p.observe(simulated_round(plan, rng, shape, path, tok, -1.0)));
  }
  state.counters["nodes"] = p.plan().summary.nodes;
  state.SetItemsProcessed(state.iterations());  // rounds planned per second
}
BENCHMARK(BM_planner_round)->Args({16, 6})->Args({32, 8})->Args({64, 10})->Unit(benchmark::kMicrosecond);

// A cold planner per request of 48 rounds (the demo's "planned, cold" rows
// run about that many per 160 tokens), time per request (items/s: rounds
// per second): its valuations after 1, 2, 4, ... drafted rounds come with
// every request.
void BM_planner_cold_request(benchmark::State& state) {
  const specdec::planner_options o{.max_nodes = static_cast<std::int32_t>(state.range(0)),
                                   .max_depth = static_cast<std::int32_t>(state.range(1))};
  std::mt19937_64 rng(7);
  std::vector<node_id> shape, path;
  std::vector<specdec::token_id> tok;
  specdec::round_planner p(o);
  constexpr int rounds = 48;
  for (auto _ : state) {
    benchmark::DoNotOptimize(p.reset(o));
    for (int i = 0; i < rounds; ++i) {
      const specdec::round_plan plan = p.next();
      benchmark::DoNotOptimize(p.observe(simulated_round(plan, rng, shape, path, tok, -1.0)));
    }
  }
  state.SetItemsProcessed(state.iterations() * rounds);  // rounds planned per second
}
BENCHMARK(BM_planner_cold_request)->Args({16, 6})->Args({32, 8})->Args({64, 10})->Unit(benchmark::kMicrosecond);

// plan_drafted + observe() per iteration: a 16-node drafted lookup-like
// tree (a chain of 6 with two siblings per level, confidences 0.9 / 0.3 /
// 0.1), paths accepted at 0.8 per level, pass time injected as 1 + 0.7 (n - 1).
void BM_planner_drafted(benchmark::State& state) {
  specdec::round_planner p(specdec::planner_options{.max_nodes = 16, .max_depth = 6});
  const double n[2] = {1.0, 16.0}, t[2] = {1.0, 11.5};
  (void)p.set_target_cost(n, t);
  specdec::drafted_tree d;
  d.reset(0);
  for (node_id u = 0; d.size() < 16;) {
    const node_id top = d.add(u, 1, 0.9f, 0.0f, specdec::draft_mode::deterministic);
    if (d.size() < 16) d.add(u, 2, 0.3f, 0.0f, specdec::draft_mode::deterministic);
    if (d.size() < 16) d.add(u, 3, 0.1f, 0.0f, specdec::draft_mode::deterministic);
    u = top;
  }
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> U(0.0, 1.0);
  std::vector<node_id> path;
  for (auto _ : state) {
    specdec::round_plan plan;
    (void)p.plan_drafted(d, plan);
    const auto m = static_cast<std::int32_t>(plan.shape.size());
    path.assign(1, 0);
    for (node_id c = 1; c < m && U(rng) < 0.8; c += 3) {  // the top child of each level
      if (d.tree.parent(c) != path.back()) break;
      path.push_back(c);
    }
    specdec::round_feedback f;
    f.tree = d.tree.view();
    f.tree.size = m;
    f.draft_prob = std::span<const float>(d.prob).first(static_cast<std::size_t>(m));
    f.path = path;
    f.forward_nodes = m;
    f.forward_seconds = 1.0 + 0.7 * (m - 1);
    benchmark::DoNotOptimize(p.observe(f));
  }
  state.counters["nodes"] = p.plan().summary.nodes;
  state.SetItemsProcessed(state.iterations());  // rounds planned per second
}
BENCHMARK(BM_planner_drafted)->Unit(benchmark::kMicrosecond);

void BM_planner_skipped(benchmark::State& state) {
  specdec::round_planner p(specdec::planner_options{.max_nodes = 16, .max_depth = 6, .draft_bonus = 0.0});
  const double n[2] = {1.0, 16.0}, t[2] = {1.0, 16.0};  // every node a full step: always plain
  (void)p.set_target_cost(n, t);
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> U(0.0, 1.0);
  specdec::drafted_tree d;
  const node_id root[1] = {-1};
  const node_id path[1] = {0};
  std::int32_t pos = 0;  // the text: token pos at position pos while it follows the drafts
  for (auto _ : state) {
    d.reset(pos);
    for (node_id u = 0; d.size() < 16;) {  // a chain of the next tokens, two weaker siblings per level
      const node_id top = d.add(u, pos + d.tree.depth(u) + 1, 0.5f, 0.0f, specdec::draft_mode::deterministic);
      if (d.size() < 16) d.add(u, -2, 0.3f, 0.0f, specdec::draft_mode::deterministic);
      if (d.size() < 16) d.add(u, -3, 0.1f, 0.0f, specdec::draft_mode::deterministic);
      u = top;
    }
    specdec::round_plan plan;
    (void)p.plan_drafted(d, plan);
    specdec::round_feedback f;
    f.tree = specdec::tree_view{nullptr, root, nullptr, nullptr, 1};
    f.path = path;
    f.forward_nodes = 1;
    f.forward_seconds = 1.0;
    benchmark::DoNotOptimize(p.observe(f));
    const specdec::token_id emitted = U(rng) < 0.6 ? pos + 1 : -7;
    benchmark::DoNotOptimize(p.observe_skipped(d, emitted));
    ++pos;
  }
  state.SetItemsProcessed(state.iterations());  // plain rounds per second
}
BENCHMARK(BM_planner_skipped)->Unit(benchmark::kMicrosecond);

// The confidence stop's verdict on a drafted chain: start_draft(), then,
// as planned_tree_builder's filter asks them, expand_node() (before each
// level's drafter call) and keep_child() down a chain of falling
// confidence until the first node not expanded or child refused (the
// planner plans one draft here; counters say how deep it kept); items =
// nodes and children judged.
void BM_planner_keep_child(benchmark::State& state) {
  specdec::round_planner p(specdec::planner_options{.max_nodes = 16, .max_depth = 12, .draft_bonus = 0.0});
  const double n[2] = {1.0, 16.0}, t[2] = {1.0, 4.0};
  (void)p.set_target_cost(n, t);
  (void)p.set_drafter_cost(0.01, 0.05, 0.01);
  (void)p.set_loop_cost(0.0, 0.0);
  const std::int32_t planned = p.next().summary.depth;
  std::int64_t kept = 0, judged = 0;
  for (auto _ : state) {
    p.start_draft();
    float q_node = 1.0f;  // the root's
    for (std::int32_t d = 1; d <= 12; ++d) {
      const float q = 0.95f - 0.05f * static_cast<float>(d);
      ++judged;
      if (!p.expand_node(d - 1, d - 1, q_node)) break;
      ++judged;
      if (!p.keep_child(d - 1, d, q)) break;
      ++kept;
      q_node = q;
    }
  }
  state.counters["planned_depth"] = planned;
  state.counters["kept"] =
      static_cast<double>(kept) / static_cast<double>(std::max<std::int64_t>(state.iterations(), 1));
  state.SetItemsProcessed(judged);
}
BENCHMARK(BM_planner_keep_child);

void BM_planned_drafts_build(benchmark::State& state) {
  const auto H = static_cast<std::size_t>(state.range(0));
  std::vector<specdec::token_id> history(H);
  for (std::size_t i = 0; i < H; ++i) history[i] = static_cast<specdec::token_id>(i % 11 == 10 ? 100 + i % 7 : i % 37);
  specdec::planned_drafts_builder b(specdec::prompt_lookup_builder({.max_depth = 8, .max_nodes = 16}),
                                    specdec::planner_options{.max_nodes = 16, .max_depth = 8, .draft_bonus = 0.0});
  const double n[2] = {1.0, 16.0}, t[2] = {1.0, 4.0};
  (void)b.planner().set_target_cost(n, t);
  specdec::draft_round r;
  r.root_token = history.back();
  r.history = std::span<const specdec::token_id>(history).first(H - 1);
  specdec::drafted_tree out;
  std::vector<node_id> path;
  int source = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(b.build(source, r, out));
    path.assign(1, 0);
    if (out.size() > 1) path.push_back(1);
    specdec::round_feedback f;
    f.tree = out.tree.view();
    f.draft_prob = out.prob;
    f.path = path;
    f.forward_nodes = out.size();
    f.forward_seconds = 1.0 + 0.2 * (out.size() - 1);
    benchmark::DoNotOptimize(b.observe(f));
  }
  state.counters["nodes"] = out.size();
  state.SetItemsProcessed(state.iterations());  // rounds per second
}
BENCHMARK(BM_planned_drafts_build)->Arg(256)->Arg(2048)->Unit(benchmark::kMicrosecond);

void BM_planner_curve(benchmark::State& state) {
  const auto c = state.range(0);
  std::vector<double> n, t;
  for (int k = 1; k <= 128; ++k) {
    n.push_back(k);
    const double x = k;
    switch (c) {
      case 0:
        t.push_back(k <= 64 ? 1.0 : x / 64.0);
        break;
      case 1:
        t.push_back((x + 15.0) / 16.0);
        break;
      case 2:
        t.push_back(1.0 + 0.004 * x + 0.0008 * x * x);
        break;
      default:
        t.push_back(x);
        break;
    }
  }
  simulated s;
  specdec::plan_summary last{};
  for (auto _ : state) {
    specdec::round_planner p(specdec::planner_options{.max_nodes = 64, .max_depth = 10, .forget = 0.995});
    if (!p.set_target_cost(n, t).ok() || !p.set_drafter_cost(0.0, 0.02, 0.0).ok() || !p.set_loop_cost(0.0, 0.0).ok())
      std::abort();
    s = run(p, 4000, 11, false);
    last = p.plan().summary;
  }
  state.counters["nodes"] = last.nodes;
  state.counters["depth"] = last.depth;
  state.counters["tokens_pred"] = s.predicted_tokens / 2000.0;
  state.counters["tokens_sim"] = s.tokens / 2000.0;
  // Speedup over plain decoding, which costs t(1) = 1 per token.
  state.counters["speedup_pred"] = s.predicted_tokens / s.seconds;
  state.counters["speedup_sim"] = s.tokens / s.seconds;
}
BENCHMARK(BM_planner_curve)->DenseRange(0, 3)->Unit(benchmark::kMillisecond)->Iterations(1);

void BM_planner_expected(benchmark::State& state) {
  looptest::cold_result r;
  for (auto _ : state)
    r = looptest::cold_requests(state.range(0) != 0, static_cast<double>(state.range(1)) / 100.0, 400, 5);
  if (!r.ok) state.SkipWithError("planner refused a simulated round");
  state.counters["speedup_sim"] = r.speedup;
  state.counters["drafted"] = r.drafted;
}
BENCHMARK(BM_planner_expected)
    ->ArgsProduct({{0, 1}, {55, 70, 85}})
    ->ArgNames({"expected", "mean"})
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1);

}  // namespace
