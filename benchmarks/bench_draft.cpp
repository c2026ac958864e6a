// Drafting benchmarks: 60-node EAGLE-2-style beam trees and Lyanna token-info
// trees at V = 32000 and V = 128256 (trees/s and row bytes scanned/s), the
// pruning primitive alone, and a same-run streaming-read baseline over the
// same number of row bytes (tree building is a read of one V-row per
// expanded node, so that is the bound to compare with).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <span>
#include <vector>

#include "specdec/draft/batch_prune.hpp"
#include "specdec/draft/beam_tree.hpp"
#include "specdec/draft/prompt_lookup.hpp"
#include "specdec/draft/prune.hpp"
#include "specdec/draft/static_tree.hpp"
#include "specdec/draft/suffix_index.hpp"
#include "specdec/draft/token_info.hpp"

namespace {

constexpr int kPool = 16;  // distinct rows; a real drafter produces a fresh row per node

// A drafter serving precomputed random rows (softmax of Gaussian logits),
// picked by node id, so the benchmark measures the builder, not a model.
struct pooled_drafter {
  std::int64_t V;
  std::vector<float> rows;
  explicit pooled_drafter(std::int64_t v) : V(v), rows(static_cast<std::size_t>(v) * kPool) {
    std::mt19937 g(7);
    std::normal_distribution<float> nd(0.0f, 3.0f);
    for (int r = 0; r < kPool; ++r) {
      double s = 0;
      float* row = rows.data() + static_cast<std::size_t>(r) * static_cast<std::size_t>(V);
      for (std::int64_t t = 0; t < V; ++t) s += (row[t] = std::exp(nd(g)));
      for (std::int64_t t = 0; t < V; ++t) row[t] = static_cast<float>(row[t] / s);
    }
  }
  std::span<const float> probabilities(const specdec::draft_context& c) const {
    return {rows.data() + static_cast<std::size_t>(c.node % kPool) * static_cast<std::size_t>(V),
            static_cast<std::size_t>(V)};
  }
};

void BM_eagle2_tree_60(benchmark::State& st) {
  const std::int64_t V = st.range(0);
  pooled_drafter d(V);
  // EAGLE-2 defaults: top-k 10, depth 6, 60 draft tokens after the rerank (61 with the root).
  specdec::beam_tree_builder b({.k = 10, .width = 10, .depth = 6, .budget = 61});
  specdec::drafted_tree t;
  std::int64_t rows = 0;
  for (auto _ : st) {
    if (!b.build(d, 1, t).ok()) st.SkipWithError("build failed");
    rows += 1 + 5 * 10;  // drafter calls: the root, then 10 frontier nodes on 5 levels
    benchmark::DoNotOptimize(t.tree.tokens().data());
  }
  st.SetItemsProcessed(st.iterations());  // trees
  st.SetBytesProcessed(rows * V * static_cast<std::int64_t>(sizeof(float)));
  st.counters["nodes"] = t.size();
}
BENCHMARK(BM_eagle2_tree_60)->Arg(32000)->Arg(128256)->Unit(benchmark::kMicrosecond);

// A static shape (any parent array: here the full 4-3-2 tree, 41 nodes, 17
// of them expanded) in each draft mode; bytes = the drafter rows read.
void BM_static_tree_41(benchmark::State& st) {
  const std::int64_t V = st.range(0);
  const auto mode = static_cast<specdec::draft_mode>(st.range(1));
  pooled_drafter d(V);
  std::vector<specdec::node_id> shape = {-1};
  std::vector<specdec::node_id> level = {0};
  for (const int w : {4, 3, 2}) {
    std::vector<specdec::node_id> next;
    for (const auto u : level)
      for (int j = 0; j < w; ++j) {
        next.push_back(static_cast<specdec::node_id>(shape.size()));
        shape.push_back(u);
      }
    level = next;
  }
  specdec::static_tree_builder b({.shape = shape, .mode = mode, .vocab_size = V});
  std::vector<float> q(shape.size() * static_cast<std::size_t>(V));
  specdec::drafted_tree t;
  specdec::draft_round r;
  r.root_token = 1;
  r.q_rows = specdec::make_view(q.data(), static_cast<std::int64_t>(shape.size()), V);
  std::uint32_t round = 0;
  for (auto _ : st) {
    r.rng = specdec::rng_stream{7, 0, round++};
    if (!b.build(d, r, t).ok()) st.SkipWithError("build failed");
    benchmark::DoNotOptimize(t.tree.tokens().data());
  }
  st.SetItemsProcessed(st.iterations());  // trees
  st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations()) * 17 * V * static_cast<std::int64_t>(sizeof(float)));
  st.counters["nodes"] = t.size();
}
BENCHMARK(BM_static_tree_41)
    ->ArgsProduct({{32000, 128256},
                   {static_cast<int>(specdec::draft_mode::deterministic), static_cast<int>(specdec::draft_mode::iid),
                    static_cast<int>(specdec::draft_mode::without_replacement)}})
    ->ArgNames({"V", "mode"})
    ->Unit(benchmark::kMicrosecond);

// A deterministic chain of 10 drafts without a filter (filter 0), with a
// child filter that keeps every child (1) and with an expansion filter that
// also expands every node (2; static_tree_builder::build(d, round, out,
// keep)); an i.i.d. chain without a filter (3) and with a level filter
// that expands every node (4, the sampled confidence stop's kind): what
// the filters' calls cost; bytes = the drafter rows read.
void BM_static_chain_filter(benchmark::State& st) {
  const std::int64_t V = st.range(0);
  const std::int64_t filter = st.range(1);
  pooled_drafter d(V);
  std::vector<specdec::node_id> shape(11);
  for (std::size_t i = 0; i < shape.size(); ++i) shape[i] = static_cast<specdec::node_id>(i) - 1;
  const auto mode = filter >= 3 ? specdec::draft_mode::iid : specdec::draft_mode::deterministic;
  specdec::static_tree_builder b({.shape = shape, .mode = mode, .vocab_size = V});
  specdec::drafted_tree t;
  specdec::draft_round r;
  r.root_token = 1;
  std::int64_t judged = 0;
  const auto keep = [&](const specdec::drafted_tree&, specdec::node_id, specdec::token_id, float q) {
    ++judged;
    return q >= 0.0f;
  };
  struct expand_all {
    std::int64_t* judged;
    bool operator()(const specdec::drafted_tree&, specdec::node_id, specdec::token_id, float q) const {
      ++*judged;
      return q >= 0.0f;
    }
    bool expand(const specdec::drafted_tree&, specdec::node_id u, std::int32_t) const {
      ++*judged;
      return u >= 0;
    }
  };
  struct level_all {
    std::int64_t* judged;
    bool expand(const specdec::drafted_tree&, specdec::node_id u, std::int32_t) const {
      ++*judged;
      return u >= 0;
    }
  };
  std::uint32_t round = 0;
  for (auto _ : st) {
    r.rng = specdec::rng_stream{7, 0, round++};
    const specdec::status s = filter == 4   ? b.build(d, r, t, level_all{&judged})
                              : filter == 2 ? b.build(d, r, t, expand_all{&judged})
                              : filter == 1 ? b.build(d, r, t, keep)
                                            : b.build(d, r, t);
    if (!s.ok()) st.SkipWithError("build failed");
    benchmark::DoNotOptimize(t.tree.tokens().data());
  }
  st.SetItemsProcessed(st.iterations() * 10);  // drafted nodes
  st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations()) * 10 * V * static_cast<std::int64_t>(sizeof(float)));
  st.counters["judged"] = static_cast<double>(judged) / static_cast<double>(std::max<std::int64_t>(st.iterations(), 1));
}
BENCHMARK(BM_static_chain_filter)
    ->ArgsProduct({{32000}, {0, 1, 2, 3, 4}})
    ->ArgNames({"V", "filter"})
    ->Unit(benchmark::kMicrosecond);

void BM_token_info_tree_60(benchmark::State& st) {
  const std::int64_t V = st.range(0);
  const int N = 6, H = 64;
  std::mt19937 g(3);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  std::vector<float> L(static_cast<std::size_t>(N * V)), table(static_cast<std::size_t>(H * V));
  for (auto& x : L) x = nd(g);
  for (auto& x : table) x = 0.3f * nd(g);
  std::vector<std::int32_t> slot(static_cast<std::size_t>(V), -1);
  for (int h = 0; h < H; ++h) slot[static_cast<std::size_t>(h)] = h;  // hot tokens 0..H-1
  std::vector<float> fallback(static_cast<std::size_t>(V), 0.0f);
  specdec::token_info_table info{specdec::make_view(static_cast<const float*>(table.data()), H, V), slot, fallback};
  specdec::token_info_builder b({.k = 10, .budget = 61});
  specdec::drafted_tree t;
  const auto Lv = specdec::make_view(static_cast<const float*>(L.data()), N, V);
  for (auto _ : st) {
    if (!b.build(Lv, info, 1, t).ok()) st.SkipWithError("build failed");
    benchmark::DoNotOptimize(t.tree.tokens().data());
  }
  st.SetItemsProcessed(st.iterations());
  // Two passes over (row + bias) per expanded node: the root, then 10 per level.
  st.SetBytesProcessed(st.iterations() * (1 + 5 * 10) * 2 * 2 * V * static_cast<std::int64_t>(sizeof(float)));
  st.counters["nodes"] = t.size();
}
BENCHMARK(BM_token_info_tree_60)->Arg(32000)->Arg(128256)->Unit(benchmark::kMicrosecond);

// Baseline: stream-read the same 51 rows the beam builder reads per tree.
void BM_stream_read_rows(benchmark::State& st) {
  const std::int64_t V = st.range(0);
  pooled_drafter d(V);
  float acc = 0;
  for (auto _ : st) {
    for (int c = 0; c < 51; ++c) {
      const float* row = d.rows.data() + static_cast<std::size_t>(c % kPool) * static_cast<std::size_t>(V);
      float s = 0;
      for (std::int64_t t = 0; t < V; ++t) s = s > row[t] ? s : row[t];
      acc += s;
    }
    benchmark::DoNotOptimize(acc);
  }
  st.SetItemsProcessed(st.iterations());
  st.SetBytesProcessed(st.iterations() * 51 * V * static_cast<std::int64_t>(sizeof(float)));
}
BENCHMARK(BM_stream_read_rows)->Arg(32000)->Arg(128256)->Unit(benchmark::kMicrosecond);

// The pruning primitive alone: the 1 + 6 * 100 candidate nodes of an
// EAGLE-2 tree (before its rerank) down to 61 nodes.
void BM_prune_to_budget(benchmark::State& st) {
  const int n = static_cast<int>(st.range(0)), B = static_cast<int>(st.range(1));
  std::mt19937 g(5);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  specdec::token_tree t(0);
  for (int i = 1; i < n; ++i) {
    const int p = static_cast<int>(g() % static_cast<unsigned>(i));
    t.add_child(p, i, t.score(p) + std::log(u(g) + 1e-6f));
  }
  std::vector<specdec::node_id> idx(static_cast<std::size_t>(n));
  std::vector<std::byte> ws(specdec::prune_workspace_size(n));
  int kept = 0;
  for (auto _ : st) {
    if (!specdec::prune_to_budget(t.view(), B, idx, ws, kept).ok()) st.SkipWithError("prune failed");
    benchmark::DoNotOptimize(idx.data());
  }
  st.SetItemsProcessed(st.iterations() * n);  // nodes
}
BENCHMARK(BM_prune_to_budget)->Args({601, 61})->Args({4096, 256})->Unit(benchmark::kMicrosecond);

// The batched host twin over 64 requests of 601 nodes each.
void BM_batch_prune_host(benchmark::State& st) {
  const int R = 64, n = 601;
  std::mt19937 g(6);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  std::vector<specdec::node_id> parent;
  std::vector<float> score;
  std::vector<std::int32_t> offsets = {0};
  for (int r = 0; r < R; ++r) {
    const auto off = score.size();
    for (int i = 0; i < n; ++i) {
      const int p = i == 0 ? -1 : static_cast<int>(g() % static_cast<unsigned>(i));
      parent.push_back(p);
      score.push_back(i == 0 ? 0.0f : score[off + static_cast<std::size_t>(p)] + std::log(u(g) + 1e-6f));
    }
    offsets.push_back(offsets.back() + n);
  }
  const std::vector<std::int32_t> budget = {61};
  std::vector<specdec::node_id> idx(parent.size());
  std::vector<std::int32_t> kept(R), status(R);
  for (auto _ : st) {
    if (!specdec::batch_prune_to_budget(parent, score, offsets, budget, idx, kept, status).ok())
      st.SkipWithError("failed");
    benchmark::DoNotOptimize(idx.data());
  }
  st.SetItemsProcessed(st.iterations() * R * n);
}
BENCHMARK(BM_batch_prune_host)->Unit(benchmark::kMicrosecond);

}  // namespace

// Model-free drafting (draft/suffix_index.hpp): appending a token to the
// suffix trie (items = tokens appended) and drafting a tree of up to 32
// nodes from it (items = trees drafted), on a text of 8192 tokens over 512
// token ids that repeats 64-token phrases (what prompt lookup feeds on).
namespace {
std::vector<specdec::token_id> phrase_text() {
  std::mt19937 g(17);
  std::vector<std::vector<specdec::token_id>> phrases(32, std::vector<specdec::token_id>(64));
  for (auto& p : phrases)
    for (auto& t : p) t = static_cast<specdec::token_id>(g() % 512);
  std::vector<specdec::token_id> text;
  while (text.size() < 8192) {
    const auto& p = phrases[g() % phrases.size()];
    text.insert(text.end(), p.begin(), p.begin() + 8 + static_cast<std::ptrdiff_t>(g() % 56));
  }
  return text;
}

void BM_suffix_index_append(benchmark::State& state) {
  const auto text = phrase_text();
  const auto depth = static_cast<std::int32_t>(state.range(0));
  specdec::suffix_index idx({.depth = depth, .capacity = 1 << 20, .vocab_size = 512});
  std::size_t i = 0;
  for (auto _ : state) {
    if (i == text.size()) {
      state.PauseTiming();
      idx.clear();
      i = 0;
      state.ResumeTiming();
    }
    benchmark::DoNotOptimize(idx.append(text[i++]));
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_suffix_index_append)->Arg(4)->Arg(16)->Arg(24);

void BM_suffix_tree_draft(benchmark::State& state) {
  const auto text = phrase_text();
  specdec::suffix_index idx({.depth = 24, .capacity = 1 << 20, .vocab_size = 512});
  specdec::throw_if_error(idx.append(text));  // the context, root last
  specdec::suffix_tree_builder b({.max_nodes = static_cast<std::int32_t>(state.range(0))});
  specdec::drafted_tree out;
  std::int64_t nodes = 0;
  for (auto _ : state) {
    if (!b.draft(idx, text.back(), out).ok()) std::abort();
    nodes += out.size();
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["nodes"] = benchmark::Counter(static_cast<double>(nodes) / static_cast<double>(state.iterations()));
}
BENCHMARK(BM_suffix_tree_draft)->Arg(8)->Arg(32);

// Prompt lookup (draft/prompt_lookup.hpp): one build over a context of N
// tokens (items = builds; bytes = the context's tokens, read at least once
// per build). Context 1: the phrase text above, ending in a copy of an
// earlier span, so a 4-gram matches. Context 0: random tokens over 31000
// ids ending in 12 that occur nowhere else, so nothing matches and every
// build reads the whole context, as a round on new text does. Next to it,
// a same-run read of the same bytes (BM_stream_read_context).
std::vector<specdec::token_id> random_text(std::size_t n) {
  std::mt19937 g(29);
  std::vector<specdec::token_id> t(n);
  for (auto& x : t) x = static_cast<specdec::token_id>(g() % 31000);
  return t;
}

void BM_prompt_lookup_build(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  auto text = state.range(1) != 0 ? phrase_text() : random_text(n);
  text.resize(n - 12);
  if (state.range(1) != 0)
    text.insert(text.end(), text.begin() + 100, text.begin() + 112);
  else
    for (specdec::token_id t = 31000; t < 31012; ++t) text.push_back(t);
  specdec::prompt_lookup_builder b({.max_ngram = 4, .max_depth = 8, .max_nodes = 16, .vocab_size = 32000});
  specdec::draft_round r;
  r.root_token = text.back();
  r.history = std::span<const specdec::token_id>(text).first(n - 1);
  specdec::drafted_tree out;
  for (auto _ : state) {
    if (!b.build(r, out).ok()) std::abort();
    benchmark::DoNotOptimize(out.size());
  }
  state.SetItemsProcessed(state.iterations());
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * n * sizeof(specdec::token_id)));
  state.counters["ngram"] = b.last_match().ngram;
}
BENCHMARK(BM_prompt_lookup_build)->Args({512, 0})->Args({4096, 0})->Args({512, 1})->Args({4096, 1});

// Baseline: sum the same context's tokens once (a read of its bytes).
void BM_stream_read_context(benchmark::State& state) {
  const auto text = random_text(static_cast<std::size_t>(state.range(0)));
  for (auto _ : state) {
    std::uint32_t acc = 0;
    for (const specdec::token_id t : text) acc += static_cast<std::uint32_t>(t);
    benchmark::DoNotOptimize(acc);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * text.size() * sizeof(specdec::token_id)));
}
BENCHMARK(BM_stream_read_context)->Arg(512)->Arg(4096);

}  // namespace
