// The loop layer's own cost per round: speculative_session::round minus the
// caller's drafter, target forward and KV commit, next to the primitives it
// calls (tree building, positions + mask, logits -> probabilities, the
// verification walk, keep indices). Trees of 15 to 255 nodes (top-k: k=2
// depth 3, k=4 depth 3, k=2 depth 7) at V = 32000 and 128256, sampled
// (temperature 1: the rows the walk reads go through logits_to_probs) and
// greedy (the walk reads logits; no conversion); BM_loop_round_static: the
// same tree drafted by static_tree_builder (i.i.d. children at temperature
// 1, deterministic when greedy, as the planner drafts). The drafter returns
// precomputed rows and the target fills its logits once (the session reuses
// the buffer), so the wall time per round is the loop's work plus two
// near-free calls. agree = 0: unrelated random rows (nothing is accepted);
// agree = 1: a confident drafter (0.9 on one token) and a target equal to it
// (the walk goes deep: the case where the most rows are converted).
// Counters (microseconds per round): overhead_us = stage_times::overhead(),
// then its parts: build_us (builder minus drafter), flatten_us, probs_us,
// verify_us, commit_us; probs_rows: target rows converted per round (only
// the rows the walk reads); accepted: drafts accepted per round.
// bytes_per_second: N logits rows per round.
// BM_loop_plain_round: the planned builder held to plain steps, next to
// BM_plain_step, a caller's own plain step (the root's row to
// probabilities, verify_tree): what the session adds to a plain round.
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "specdec/draft/static_tree.hpp"
#include "specdec/draft/topk_tree.hpp"
#include "specdec/loop/planned_builder.hpp"
#include "specdec/loop/session.hpp"

namespace {

using specdec::token_id;

// Level drafter over a pool of precomputed probability rows: the i-th
// frontier node of a level gets row i. `peaked`: one token of each row holds
// 0.9 of the mass (a confident drafter).
struct pooled_level_drafter {
  std::int64_t V;
  std::vector<float> rows;
  pooled_level_drafter(std::int64_t v, std::int64_t pool, bool peaked)
      : V(v), rows(static_cast<std::size_t>(v * pool)) {
    std::mt19937 g(7);
    std::normal_distribution<float> nd(0.0f, 3.0f);
    for (std::int64_t r = 0; r < pool; ++r) {
      double s = 0;
      float* row = rows.data() + r * V;
      for (std::int64_t t = 0; t < V; ++t) s += (row[t] = std::exp(nd(g)));
      for (std::int64_t t = 0; t < V; ++t) row[t] = static_cast<float>(row[t] / s * (peaked ? 0.1 : 1.0));
      if (peaked) row[(r * 7919 + 1) % V] += 0.9f;
    }
  }
  specdec::status level_probabilities(const specdec::draft_level& l, specdec::view2d<const float>& out) const {
    const auto pool = static_cast<std::int64_t>(rows.size()) / V;
    const auto n = static_cast<std::int64_t>(l.nodes.size());
    if (n > pool) return specdec::make_status(specdec::status_code::invalid_argument, "pool too small");
    out = specdec::make_view<const float>(rows.data(), n, V);
    return specdec::status::success();
  }
};

// Writes logits the first time it sees a logits buffer (the tree is the
// same every round): random ones, or with `agree` the log of the row the
// drafter gave the node (so the drafts are accepted as often as the drafter
// is confident, and the walk goes deep).
struct fill_once_target {
  const pooled_level_drafter* agree = nullptr;
  const float* filled = nullptr;
  std::int64_t rows = 0;
  specdec::status forward(const specdec::tree_forward& f) {
    if (f.logits.data == filled && f.logits.extent[0] <= rows) return specdec::status::success();
    std::mt19937 g(11);
    std::normal_distribution<float> nd(0.0f, 3.0f);
    std::int64_t level_start = 0, level_depth = 0;
    for (std::int64_t i = 0; i < f.logits.extent[0]; ++i) {
      if (agree == nullptr) {
        for (std::int64_t t = 0; t < f.logits.extent[1]; ++t) f.logits(i, t) = nd(g);
        continue;
      }
      const std::int64_t depth = f.positions[static_cast<std::size_t>(i)] - f.cache_len;  // levels are contiguous
      if (depth != level_depth) {
        level_depth = depth;
        level_start = i;
      }
      const float* q = agree->rows.data() + (i - level_start) * agree->V;
      for (std::int64_t t = 0; t < f.logits.extent[1]; ++t) f.logits(i, t) = std::log(q[t]);
    }
    filled = f.logits.data;
    rows = f.logits.extent[0];
    return specdec::status::success();
  }
};

// The session over `builder`; counters as described at the top.
template <class Builder>
void loop_rounds(benchmark::State& state, Builder builder) {
  const std::int64_t V = state.range(0);
  const bool greedy = state.range(2) != 0, agree = state.range(3) != 0;
  const pooled_level_drafter d(V, 128, agree);
  fill_once_target tgt{agree ? &d : nullptr};
  specdec::session_options o;
  o.vocab_size = V;
  o.max_tokens = 1 << 16;
  o.sampling.temperature = greedy ? 0.0f : 1.0f;
  specdec::speculative_session s(std::move(builder), o);
  const std::vector<token_id> prompt = {1, 2, 3};
  if (!s.start(prompt).ok() || !s.round(d, tgt).ok()) {  // warm-up: buffers, logits
    state.SkipWithError("warm-up failed");
    return;
  }
  specdec::stage_times sum{};
  std::int64_t rounds = 0, nodes = 0, converted = 0, accepted = 0;
  for (auto _ : state) {
    if (s.done()) (void)s.start(prompt);
    if (!s.round(d, tgt).ok()) {
      state.SkipWithError("round failed");
      return;
    }
    sum += s.last_round().time;
    nodes = s.last_round().tree_nodes;
    converted += s.last_round().probs_rows;
    accepted += s.last_round().accepted;
    ++rounds;
  }
  const double us = 1e6 / static_cast<double>(rounds);
  state.counters["nodes"] = static_cast<double>(nodes);
  state.counters["overhead_us"] = sum.overhead() * us;
  state.counters["build_us"] = (sum.draft - sum.drafter) * us;
  state.counters["flatten_us"] = sum.flatten * us;
  state.counters["probs_us"] = sum.probs * us;
  state.counters["probs_rows"] = static_cast<double>(converted) / static_cast<double>(rounds);
  state.counters["accepted"] = static_cast<double>(accepted) / static_cast<double>(rounds);
  state.counters["verify_us"] = sum.verify * us;
  state.counters["commit_us"] = (sum.commit - sum.kv) * us;
  state.SetBytesProcessed(rounds * nodes * V * static_cast<std::int64_t>(sizeof(float)));
}

void BM_loop_round(benchmark::State& state) {
  const int shape = static_cast<int>(state.range(1));
  const std::int32_t k = shape == 1 ? 4 : 2, depth = shape == 2 ? 7 : 3;
  loop_rounds(state, specdec::topk_tree_builder({.k = k, .depth = depth, .vocab_size = state.range(0)}));
}

// The static builder over the shape of top-k shape 0 (k = 2, depth 3): it
// reads every expanded node's full row and writes its q row where the
// verification may read it (not when greedy).
void BM_loop_round_static(benchmark::State& state) {
  const std::vector<specdec::node_id> shape = {-1, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6};
  const auto mode = state.range(2) != 0 ? specdec::draft_mode::deterministic : specdec::draft_mode::iid;
  loop_rounds(state, specdec::static_tree_builder({.shape = shape, .mode = mode, .vocab_size = state.range(0)}));
}

void shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"V", "shape", "greedy", "agree"});
  for (std::int64_t V : {32000, 128256})
    for (int shape : {0, 1, 2})
      for (int greedy : {0, 1})
        for (int agree : {0, 1}) b->Args({V, shape, greedy, agree});
  b->Unit(benchmark::kMicrosecond);
}
BENCHMARK(BM_loop_round)->Apply(shapes);

// A plain step through the session: the planned builder with max_depth = 0
// (every round root-only, as a planner that chose plain decoding), wall time
// per round with a near-free target and a drafter never called, next to
// BM_plain_step below: what the session and planner add to each step an
// engine decodes plainly.
void BM_loop_plain_round(benchmark::State& state) {
  specdec::planner_options po;
  po.max_depth = 0;
  loop_rounds(state, specdec::planned_tree_builder({.planner = po, .vocab_size = state.range(0)}));
}

// The same step without the session: the root's row to probabilities (at
// temperature 1) and verify_tree over a root-only tree, as a caller's own
// plain decoding loop does it.
void BM_plain_step(benchmark::State& state) {
  const std::int64_t V = state.range(0);
  const bool greedy = state.range(2) != 0;
  std::vector<float> logits(static_cast<std::size_t>(V)), probs(logits.size());
  std::mt19937 g(11);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  for (float& x : logits) x = nd(g);
  std::vector<std::byte> ws(specdec::verify_workspace_size(V, 1));
  std::vector<std::byte> fws(specdec::logits_to_probs_workspace_size(V, specdec::sampling_params{}));
  const specdec::node_id parent[1] = {-1};
  const token_id root = 1;
  const specdec::tree_view tree{&root, parent, nullptr, nullptr, 1};
  specdec::verify_params vp;
  vp.mode = greedy ? specdec::verify_mode::greedy : specdec::verify_mode::sampled_iid;
  const specdec::sampling_params sp{};
  specdec::node_id path[1];
  token_id emitted[1];
  std::uint32_t round = 0;
  for (auto _ : state) {
    specdec::verify_result res;
    vp.round = round++;
    const float* rows = logits.data();
    if (!greedy) {
      if (!specdec::logits_to_probs_row(specdec::make_view<const float>(logits.data(), V),
                                        specdec::make_view(probs.data(), V), sp, fws)
               .ok()) {
        state.SkipWithError("logits_to_probs failed");
        return;
      }
      rows = probs.data();
    }
    const specdec::status st =
        specdec::verify_tree(tree, specdec::make_view<const float>(rows, 1, V), {}, vp, ws, path, emitted, res);
    if (!st.ok()) {
      state.SkipWithError(st.message());
      return;
    }
    benchmark::DoNotOptimize(emitted[0]);
  }
  state.SetItemsProcessed(state.iterations());  // plain steps per second
}

void plain_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"V", "shape", "greedy", "agree"});
  for (std::int64_t V : {256, 32000})
    for (int greedy : {0, 1}) b->Args({V, 0, greedy, 0});
  b->Unit(benchmark::kMicrosecond);
}
BENCHMARK(BM_loop_plain_round)->Apply(plain_shapes);
BENCHMARK(BM_plain_step)->Apply(plain_shapes);
BENCHMARK(BM_loop_round_static)->Apply([](benchmark::internal::Benchmark* b) {
  b->ArgNames({"V", "shape", "greedy", "agree"});
  for (std::int64_t V : {32000, 128256})
    for (int greedy : {0, 1}) b->Args({V, 0, greedy, 0});
  b->Unit(benchmark::kMicrosecond);
});

}  // namespace
