// speculative_session: concepts (positive and negative), exactness of the
// whole loop over continuations (chi-square with negative controls), greedy
// equals plain greedy decoding, determinism, stop tokens, statistics, errors.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <random>
#include <span>
#include <vector>

#include "loop/loop_models.hpp"
#include "specdec/draft/beam_tree.hpp"
#include "specdec/draft/prompt_lookup.hpp"
#include "specdec/draft/sampled_tree.hpp"
#include "specdec/draft/stream_tree.hpp"
#include "specdec/draft/token_info.hpp"
#include "specdec/draft/topk_tree.hpp"
#include "specdec/loop/concepts.hpp"
#include "specdec/loop/planned_builder.hpp"
#include "specdec/loop/planned_drafts.hpp"
#include "specdec/loop/session.hpp"
#include "verify/exactness_harness.hpp"

using namespace specdec;
using looptest::table;

// ---- concepts ---------------------------------------------------------------

// Under sanitizers the law tests run a quarter of the trials (tests/loop/CMakeLists.txt).
#ifndef SPECDEC_LOOP_TRIAL_SCALE
#define SPECDEC_LOOP_TRIAL_SCALE 1
#endif
namespace {
struct not_a_target {
  int forward(int) { return 0; }
};
struct wrong_return_target {
  void forward(const tree_forward&) {}
};
struct committing_target : looptest::target {
  status commit(const kv_commit_request&) { return status::success(); }
};
struct level_topk_only {
  status level_top_candidates(const draft_level&, view2d<token_id>, view2d<float>, std::span<std::int32_t>) {
    return status::success();
  }
};
struct not_a_level_drafter {
  status level_probabilities(const draft_level&, view2d<float>) { return status::success(); }  // rows not an out-param
};
struct builder_without_bound {
  status build(looptest::drafter&, const draft_round&, drafted_tree&) { return status::success(); }
};
}  // namespace

static_assert(target_model<looptest::target>);
static_assert(!target_model<not_a_target>);
static_assert(!target_model<wrong_return_target>);
static_assert(!target_model<int>);
static_assert(kv_committing_target<committing_target>);
static_assert(!kv_committing_target<looptest::target>);

static_assert(level_probability_drafter<looptest::level_drafter>);
static_assert(!level_topk_drafter<looptest::level_drafter>);
static_assert(level_topk_drafter<level_topk_only> && level_drafter<level_topk_only>);
static_assert(!level_drafter<not_a_level_drafter>);
static_assert(!level_drafter<looptest::drafter>);  // per node: needs level_adapter
static_assert(any_drafter<looptest::drafter> && any_drafter<looptest::level_drafter>);
static_assert(level_probability_drafter<level_adapter<looptest::drafter>>);
static_assert(!any_drafter<looptest::target>);

static_assert(tree_builder<topk_tree_builder, looptest::drafter>);
static_assert(tree_builder<topk_tree_builder, looptest::level_drafter>);
static_assert(tree_builder<beam_tree_builder, level_topk_only>);
static_assert(tree_builder<sampled_tree_builder, looptest::drafter>);
static_assert(tree_builder<sampled_tree_builder, looptest::level_drafter>);
static_assert(!tree_builder<sampled_tree_builder, level_topk_only>);  // sampling needs full rows
static_assert(!tree_builder<builder_without_bound, looptest::drafter>);
static_assert(!tree_builder<topk_tree_builder, int>);

// Stream trees and token-info trees draft from sources, not drafters.
namespace {
// Stream g = the drafter table's row after the root and the table's greedy
// continuation of g tokens (any rows would do: the children are deterministic).
struct table_stream_source {
  table m;
  std::int32_t gamma = 2;
  std::vector<float> rows{};
  std::vector<token_id> path{};
  status stream_rows(const draft_round& r, view2d<const float>& out) {
    rows.resize(static_cast<std::size_t>(gamma * m.V));
    path.assign(1, r.root_token);
    for (std::int32_t g = 0; g < gamma; ++g) {
      float* row = rows.data() + static_cast<std::size_t>(g * m.V);
      m.row(r.history, path, row);
      path.push_back(static_cast<token_id>(std::max_element(row, row + m.V) - row));
    }
    out = make_view<const float>(rows.data(), gamma, m.V);
    return status::success();
  }
};
// Token-info logits: l_d = log of the table's row after the root's greedy
// continuation of d - 1 tokens; a dense table of small token biases.
struct table_token_info_source {
  table m;
  std::int32_t n_rows = 2;
  std::vector<float> logits{}, bias{};
  std::vector<std::int32_t> slot{};
  std::vector<token_id> path{};
  status token_info_rows(const draft_round& r, view2d<const float>& l, token_info_table& info) {
    const auto V = static_cast<std::size_t>(m.V);
    if (bias.empty()) {
      bias.resize(V * V);
      for (std::size_t i = 0; i < bias.size(); ++i) bias[i] = 0.1f * static_cast<float>((i * 7919) % 11) - 0.5f;
      slot.resize(V);
      for (std::size_t t = 0; t < V; ++t) slot[t] = static_cast<std::int32_t>(t);
    }
    logits.resize(static_cast<std::size_t>(n_rows) * V);
    path.assign(1, r.root_token);
    for (std::int32_t d = 0; d < n_rows; ++d) {
      float* row = logits.data() + static_cast<std::size_t>(d) * V;
      m.row(r.history, path, row);
      path.push_back(static_cast<token_id>(std::max_element(row, row + m.V) - row));
      for (std::size_t t = 0; t < V; ++t) row[t] = row[t] > 0.0f ? std::log(row[t]) : -INFINITY;
    }
    l = make_view<const float>(logits.data(), n_rows, m.V);
    info = token_info_table{make_view<const float>(bias.data(), m.V, m.V), slot, {}};
    return status::success();
  }
};
}  // namespace
static_assert(stream_source<table_stream_source> && stream_source<stream_rows_source<>>);
static_assert(!stream_source<looptest::drafter> && !stream_source<token_info_rows_source>);
static_assert(token_info_source<table_token_info_source> && token_info_source<token_info_rows_source>);
static_assert(!token_info_source<looptest::drafter> && !token_info_source<stream_rows_source<>>);
static_assert(tree_builder<stream_tree_builder, table_stream_source>);
static_assert(tree_builder<stream_tree_builder, stream_rows_source<>>);
static_assert(!tree_builder<stream_tree_builder, looptest::drafter>);
static_assert(!tree_builder<stream_tree_builder, token_info_rows_source>);
static_assert(tree_builder<token_info_builder, table_token_info_source>);
static_assert(tree_builder<token_info_builder, token_info_rows_source>);
static_assert(!tree_builder<token_info_builder, looptest::level_drafter>);
static_assert(!tree_builder<token_info_builder, stream_rows_source<>>);

namespace {

session_options options(int V, std::uint64_t seed, std::int32_t max_tokens) {
  session_options o;
  o.vocab_size = V;
  o.seed = seed;
  o.max_tokens = max_tokens;
  return o;
}

// A top-k builder that also writes the q rows of its expanded nodes (what a
// sampling builder does), so that a mismatched sampled rule can be tried.
struct topk_q_builder {
  topk_tree_builder b;
  std::vector<token_id> path{};
  status build(looptest::drafter& d, const draft_round& r, drafted_tree& out) {
    SPECDEC_TRY(b.build(d, r, out));
    for (node_id u = 0; u < out.size(); ++u) {
      if (out.child_mode[static_cast<std::size_t>(u)] == draft_mode::leaf) continue;
      looptest::path_of(out.tree.view(), u, path);
      d.m.row(r.history, path, &r.q_rows(u, 0));
    }
    return status::success();
  }
  [[nodiscard]] std::int32_t node_bound() const noexcept { return b.node_bound(); }
};
static_assert(tree_builder<topk_q_builder, looptest::drafter>);

// Expected law of the next L tokens after `prompt` under the target table.
std::vector<double> continuation_law(const table& m, const std::vector<token_id>& prompt, int L) {
  std::size_t cells = 1;
  for (int i = 0; i < L; ++i) cells *= static_cast<std::size_t>(m.V);
  std::vector<double> law(cells, 0.0);
  std::vector<float> row(static_cast<std::size_t>(m.V));
  for (std::size_t c = 0; c < cells; ++c) {
    std::vector<token_id> ctx = prompt;
    double pr = 1.0;
    std::size_t rest = c, scale = cells;
    for (int i = 0; i < L; ++i) {
      scale /= static_cast<std::size_t>(m.V);
      const auto t = static_cast<token_id>(rest / scale);
      rest %= scale;
      m.row(ctx, {}, row.data());
      pr *= row[static_cast<std::size_t>(t)];
      ctx.push_back(t);
    }
    law[c] = pr;
  }
  return law;
}

// Runs `rounds` rounds of a fresh sequence per trial, completes every output
// to L tokens by sampling the target (or truncates it), and counts the
// sequences. Returns the chi-square fit against the target's law.
template <class Builder, class Source>
vtest::fit loop_law(Builder builder, Source& source, session_options o, int rounds, int L, int trials,
                    std::uint64_t seed, const std::function<void(const round_stats&)>& on_round = {}) {
  looptest::target tgt{{.V = 3, .seed = 11}};
  const std::vector<token_id> prompt = {1, 2};
  speculative_session<Builder> s(std::move(builder), o);
  std::vector<std::int64_t> counts(27, 0);
  std::vector<float> row(3);
  const rng_stream completion{seed, 99, 0};
  for (int t = 0; t < trials; ++t) {
    REQUIRE(s.start(prompt, seed + static_cast<std::uint64_t>(t)).ok());
    for (int r = 0; r < rounds && !s.done(); ++r) {
      const status st = s.round(source, tgt);
      if (!st.ok()) FAIL(st.message());
      if (on_round) on_round(s.last_round());
    }
    std::vector<token_id> seq(s.tokens().begin(), s.tokens().end());
    for (std::uint32_t k = 0; seq.size() < prompt.size() + static_cast<std::size_t>(L); ++k) {
      tgt.m.row(seq, {}, row.data());
      seq.push_back(
          sample_row(make_view<const float>(row.data(), 3), completion.uniform(static_cast<std::uint32_t>(t), k), 1.0));
    }
    std::size_t cell = 0;
    for (int i = 0; i < L; ++i)
      cell = cell * 3 + static_cast<std::size_t>(seq[prompt.size() + static_cast<std::size_t>(i)]);
    ++counts[cell];
  }
  const auto law = continuation_law(tgt.m, prompt, L);
  return vtest::chi_square(counts, law, 0);
}

void report(const char* name, const vtest::fit& f) {
  std::printf("loop law %-44s chi2 %9.1f df %2d p %.3g tv %.4f%s\n", name, f.chi2, f.df, f.p_value, f.tv,
              f.impossible ? " (impossible sequence seen)" : "");
}

}  // namespace

TEST_CASE("session at temperature 1 follows the target's law over whole continuations") {
  // Seeds are fixed and printed; p-value threshold 1e-4 per case.
  constexpr int trials = 200000 / SPECDEC_LOOP_TRIAL_SCALE;
  constexpr int L = 3;
  const std::uint64_t seed = 20261122;
  std::printf("loop law: trials %d, L %d, seed %llu\n", trials, L, static_cast<unsigned long long>(seed));
  looptest::drafter d{{.V = 3, .seed = 5}};
  looptest::level_drafter ld{{.V = 3, .seed = 5}};

  SECTION("i.i.d. sampled tree, per-node drafter, one round then completion") {
    const auto f = loop_law(sampled_tree_builder({.mode = draft_mode::iid, .widths = {2, 2}, .vocab_size = 3}), d,
                            options(3, 0, 64), 1, L, trials, seed);
    report("iid {2,2} 1 round", f);
    CHECK_FALSE(f.impossible);
    CHECK(f.p_value > 1e-4);
  }
  SECTION("Gumbel-top-k tree, level drafter, two rounds truncated at max_tokens") {
    const auto f =
        loop_law(sampled_tree_builder({.mode = draft_mode::without_replacement, .widths = {2, 1}, .vocab_size = 3}), ld,
                 options(3, 0, L), 2, L, trials, seed + 1);
    report("without replacement {2,1} 2 rounds", f);
    CHECK_FALSE(f.impossible);
    CHECK(f.p_value > 1e-4);
  }
  SECTION("top-2 tree (deterministic rule)") {
    const auto f = loop_law(topk_tree_builder({.k = 2, .depth = 2, .vocab_size = 3}), d, options(3, 0, 64), 1, L,
                            trials, seed + 2);
    report("top-2 depth 2 1 round", f);
    CHECK(f.p_value > 1e-4);
  }
  SECTION("top-p and top-k filtered target: the law of the filtered target") {
    // With top_k = 2 the third token never appears; the law is the filtered one.
    session_options o = options(3, 0, 64);
    o.sampling.top_k = 2;
    looptest::target tgt{{.V = 3, .seed = 11}};
    speculative_session s(sampled_tree_builder({.mode = draft_mode::iid, .widths = {2}, .vocab_size = 3}), o);
    const std::vector<token_id> prompt = {1, 2};
    std::vector<std::int64_t> first(3, 0);
    for (int t = 0; t < 100000; ++t) {
      REQUIRE(s.start(prompt, seed + static_cast<std::uint64_t>(t)).ok());
      REQUIRE(s.round(d, tgt).ok());
      ++first[static_cast<std::size_t>(s.generated_tokens()[0])];
    }
    std::vector<float> row(3);
    tgt.m.row(prompt, {}, row.data());
    // Filtered law: keep the 2 largest, renormalize.
    int lo = 0;
    for (int i = 1; i < 3; ++i)
      if (row[static_cast<std::size_t>(i)] < row[static_cast<std::size_t>(lo)]) lo = i;
    std::vector<double> law(3);
    double z = 0;
    for (int i = 0; i < 3; ++i) z += i == lo ? 0.0 : row[static_cast<std::size_t>(i)];
    for (int i = 0; i < 3; ++i) law[static_cast<std::size_t>(i)] = i == lo ? 0.0 : row[static_cast<std::size_t>(i)] / z;
    const auto f = vtest::chi_square(first, law, 0);
    report("iid {2}, target top_k = 2 (first token)", f);
    CHECK_FALSE(f.impossible);
    CHECK(f.p_value > 1e-4);
  }
}

TEST_CASE("loop law negative controls: a mismatched rule must fail the same test") {
  constexpr int trials = 200000 / SPECDEC_LOOP_TRIAL_SCALE;
  const std::uint64_t seed = 777;
  looptest::drafter d{{.V = 3, .seed = 5}};
  // Deterministic (top-2) drafts verified with the real q (the i.i.d. rule):
  // refused unless the caller opts in, then biased. (The reverse, i.i.d.
  // drafts under the one-hot rule, is lossless: that rule is exact for any
  // child set chosen independently of the target's coins.)
  session_options o = options(3, 0, 64);
  o.rule = verify_mode::sampled_iid;
  {
    speculative_session s(topk_tree_builder({.k = 2, .depth = 2, .vocab_size = 3}), o);
    looptest::target tgt{{.V = 3, .seed = 11}};
    const std::vector<token_id> prompt = {1, 2};
    REQUIRE(s.start(prompt).ok());
    CHECK(s.round(d, tgt) == status_code::invalid_argument);
    CHECK(s.generated_tokens().empty());
  }
  o.lossy = lossy_opt_in::mismatched_rule;
  // The top-k builder writes no q rows (the session refuses the i.i.d. rule
  // then); topk_q_builder also writes them.
  const auto f =
      loop_law(topk_q_builder{topk_tree_builder({.k = 2, .depth = 2, .vocab_size = 3})}, d, o, 1, 3, trials, seed);
  report("NEGATIVE top-2 drafts + i.i.d. rule (real q)", f);
  CHECK(f.p_value < 1e-6);
  // Medusa typical acceptance is lossy too.
  session_options t = options(3, 0, 64);
  t.rule = verify_mode::typical_lossy;
  t.lossy = lossy_opt_in::typical_acceptance;
  const auto g = loop_law(topk_tree_builder({.k = 2, .depth = 2, .vocab_size = 3}), d, t, 1, 3, trials, seed + 1);
  report("NEGATIVE top-2 + typical acceptance", g);
  CHECK(g.p_value < 1e-6);
}

namespace {
// A planned builder whose planner must weigh many shapes (injected costs,
// fast forgetting, a re-solve every round, early-stop thresholds on).
// max_children 1: chains only, which the confidence stop drafts past their plan.
planned_tree_builder law_planner(draft_mode mode, std::int32_t max_children = 3) {
  planned_tree_builder b({.planner = {.max_nodes = 8,
                                      .max_depth = 3,
                                      .max_children = max_children,
                                      .forget = 0.9,
                                      .replan_every = 1,
                                      .prune = true},
                          .mode = mode,
                          .vocab_size = 3});
  const double n[] = {1, 2, 4, 8}, t[] = {1.0, 1.08, 1.2, 1.5};
  throw_if_error(b.planner().set_target_cost(n, t));
  throw_if_error(b.planner().set_drafter_cost(0.01, 0.02, 0.01));
  throw_if_error(b.planner().set_loop_cost(0.01, 0.0));
  return b;
}

// Plans from this round's target rows (forbidden): after drafting the
// planner's tree, keeps the root's children only when the target gives the
// first child at least its draft probability, else drafts nothing.
struct target_peeking_builder {
  planned_tree_builder b;
  table target;
  std::vector<float> row = std::vector<float>(3);
  status build(looptest::level_drafter& d, const draft_round& r, drafted_tree& out) {
    SPECDEC_TRY(b.build(d, r, out));
    if (out.size() < 2) return status::success();
    const token_id path[1] = {r.root_token};
    target.row(r.history, path, row.data());
    if (row[static_cast<std::size_t>(out.tree.token(1))] < out.prob[1]) out.reset(r.root_token);
    return status::success();
  }
  [[nodiscard]] std::int32_t node_bound() const noexcept { return b.node_bound(); }
};

// Cuts sampled drafts by their own confidence (what static_tree_builder's
// child filter refuses for sampled modes; its level filter decides before
// the draw): an i.i.d. chain's first draft is dropped, with all below it,
// when the drafter gave it less than 0.5 (at the first round's root: token
// 0, q = 0.43). The kept drafts are then no longer draws from q.
struct sampled_cut_builder {
  static_tree_builder b{{.shape = {-1, 0, 1}, .mode = draft_mode::iid, .vocab_size = 3}};
  status build(looptest::level_drafter& d, const draft_round& r, drafted_tree& out) {
    SPECDEC_TRY(b.build(d, r, out));
    if (out.size() > 1 && out.prob[1] < 0.5f) out.reset(r.root_token);
    return status::success();
  }
  [[nodiscard]] std::int32_t node_bound() const noexcept { return 3; }
};
}  // namespace

TEST_CASE("planned rounds keep the target's law; planning from this round's target rows breaks it") {
  constexpr int trials = 200000 / SPECDEC_LOOP_TRIAL_SCALE;
  constexpr int L = 3;
  const std::uint64_t seed = 20261125;
  std::printf("planned loop law: trials %d, L %d, seed %llu\n", trials, L, static_cast<unsigned long long>(seed));
  looptest::level_drafter ld{{.V = 3, .seed = 5}};
  const std::pair<draft_mode, std::int32_t> cases[] = {{draft_mode::iid, 3},
                                                       {draft_mode::deterministic, 3},
                                                       {draft_mode::without_replacement, 3},
                                                       {draft_mode::deterministic, 1},
                                                       {draft_mode::iid, 1}};
  for (const auto& [mode, kids] : cases) {
    std::map<std::pair<int, int>, int> shapes;
    // Chains drafted past their plan; chains whose extension the stop
    // refused; chains it cut within their plan (sampled drafts only).
    int extended = 0, stopped = 0, cut = 0;
    const auto f =
        loop_law(law_planner(mode, kids), ld, options(3, 0, 64), 2, L, trials, seed, [&](const round_stats& st) {
          ++shapes[{st.plan.nodes, st.plan.depth}];
          if (st.plan.kind != plan_kind::chain || st.plan.depth < 1) return;
          cut += st.tree_depth < st.plan.depth ? 1 : 0;
          if (st.plan.depth >= 3) return;
          extended += st.tree_depth > st.plan.depth ? 1 : 0;
          stopped += st.tree_depth == st.plan.depth ? 1 : 0;
        });
    const std::string name =
        std::string("planned ") + draft_mode_name(mode) + (kids == 1 ? " chains" : "") + " 2 rounds";
    report(name.c_str(), f);
    std::printf("  shapes planned (nodes, depth) x rounds:");
    for (const auto& [k, v] : shapes) std::printf(" (%d,%d)x%d", k.first, k.second, v);
    std::printf("\n");
    CHECK(shapes.size() >= (kids == 1 ? 2u : 3u));  // the plans did change from round to round
    if (kids == 1) {                                // the confidence stop both kept and cut extensions
      std::printf("  chains drafted past their plan: %d rounds; extension refused: %d rounds; cut within it: %d\n",
                  extended, stopped, cut);
      CHECK(extended > 0);
      CHECK(stopped > 0);
      if (mode != draft_mode::deterministic) CHECK(cut > 0);  // (greedy chains are cut by `prune` only)
    }
    CHECK_FALSE(f.impossible);
    CHECK(f.p_value > 1e-4);
  }
  {  // Prompt lookup's drafts, cut by plan_drafted (the drafts decide the cut) or plain steps.
    planned_drafts_builder b(prompt_lookup_builder({.max_ngram = 2, .max_depth = 3, .max_nodes = 8, .vocab_size = 3}),
                             planner_options{.max_nodes = 8, .max_depth = 3, .forget = 0.9, .probe_every = 0});
    const double n[] = {1, 2, 4, 8}, t[] = {1.0, 1.08, 1.2, 1.5};
    REQUIRE(b.planner().set_target_cost(n, t).ok());
    REQUIRE(b.planner().set_loop_cost(0.01, 0.0).ok());
    std::map<std::pair<int, int>, int> shapes;
    const auto f = loop_law(std::move(b), ld, options(3, 0, 64), 3, L, trials, seed + 2, [&](const round_stats& st) {
      ++shapes[{st.tree_nodes, st.tree_depth}];
    });
    report("planned prompt lookup 3 rounds", f);
    std::printf("  trees verified (nodes, depth) x rounds:");
    for (const auto& [k, v] : shapes) std::printf(" (%d,%d)x%d", k.first, k.second, v);
    std::printf("\n");
    CHECK(shapes.size() >= 3);
    CHECK_FALSE(f.impossible);
    CHECK(f.p_value > 1e-4);
  }
  const auto g = loop_law(target_peeking_builder{law_planner(draft_mode::iid), {.V = 3, .seed = 11}}, ld,
                          options(3, 0, 64), 1, L, trials, seed + 1);
  report("NEGATIVE plan from this round's target rows", g);
  CHECK(g.p_value < 1e-6);
  // Why the confidence stop refuses no sampled child (it may only decline
  // to draw a level).
  const auto h = loop_law(sampled_cut_builder{}, ld, options(3, 0, 64), 1, L, trials, seed + 3);
  report("NEGATIVE sampled drafts cut by their confidence", h);
  CHECK(h.p_value < 1e-6);
}

TEST_CASE("greedy session equals plain greedy decoding token for token") {
  const table tm{.V = 50, .seed = 3, .zero_frac = 0.0};
  looptest::target tgt{tm};
  const std::vector<token_id> prompt = {4, 8, 15};
  const auto ref = looptest::greedy_decode(tm, prompt, 200);
  for (std::uint64_t ds : {5ull, 3ull}) {  // seed 3: the drafter equals the target (all accepted)
    looptest::drafter d{{.V = 50, .seed = ds, .zero_frac = 0.0}};
    session_options o = options(50, 1, 200);
    o.sampling.temperature = 0.0f;
    speculative_session s(beam_tree_builder({.k = 3, .width = 3, .depth = 4, .budget = 12}), o);
    const auto out = s.generate(d, tgt, prompt);
    REQUIRE(out.size() == ref.size());
    CHECK(std::equal(out.begin(), out.end(), ref.begin()));
    CHECK(s.last_round().mode == verify_mode::greedy);
    CHECK(s.stats().tokens == 200);
    CHECK(s.stats().target_calls == s.stats().rounds);
    // Per-depth acceptance is monotone: reaching depth d needs depth d - 1.
    for (std::size_t k = 1; k < s.stats().depth_accepted.size(); ++k)
      CHECK(s.stats().depth_accepted[k] <= s.stats().depth_accepted[k - 1]);
  }
}

TEST_CASE("q rows are asked for only where verification may read them") {
  // Greedy sampling with no named rule verifies greedily, which never reads
  // q rows: the builder gets none. Sampling, or a named rule, gets them.
  struct recording_builder {
    topk_q_builder b;
    std::vector<bool>* given;
    status build(looptest::drafter& d, const draft_round& r, drafted_tree& out) {
      given->push_back(r.q_rows.data != nullptr);
      if (r.q_rows.data == nullptr) return b.b.build(d, r, out);
      return b.build(d, r, out);
    }
    [[nodiscard]] std::int32_t node_bound() const noexcept { return b.node_bound(); }
  };
  const table tm{.V = 20, .seed = 3, .zero_frac = 0.0};
  const std::vector<token_id> prompt = {4, 8, 15};
  for (const float temperature : {0.0f, 1.0f}) {
    for (const bool named : {false, true}) {
      looptest::target tgt{tm};
      looptest::drafter d{{.V = 20, .seed = 5, .zero_frac = 0.0}};
      session_options o = options(20, 1, 30);
      o.sampling.temperature = temperature;
      if (named) {  // a rule that reads q rows (mismatched for a top-k tree, so opted in)
        o.rule = verify_mode::sampled_iid;
        o.lossy = lossy_opt_in::mismatched_rule;
      }
      std::vector<bool> given;
      speculative_session s(
          recording_builder{topk_q_builder{topk_tree_builder({.k = 2, .depth = 2, .vocab_size = 20})}, &given}, o);
      const auto out = s.generate(d, tgt, prompt);
      CHECK(out.size() == 30);
      REQUIRE(!given.empty());
      const bool want = temperature != 0.0f || named;
      CHECK(std::count(given.begin(), given.end(), want) == static_cast<std::ptrdiff_t>(given.size()));
      if (temperature == 0.0f && !named)
        CHECK(std::equal(out.begin(), out.end(), looptest::greedy_decode(tm, prompt, 30).begin()));
    }
  }
}

TEST_CASE("greedy session with a drafter equal to the target accepts every draft") {
  const table tm{.V = 50, .seed = 3, .zero_frac = 0.0};
  looptest::target tgt{tm};
  looptest::drafter d{tm};
  session_options o = options(50, 1, 200);
  o.sampling.temperature = 0.0f;
  speculative_session s(topk_tree_builder({.k = 1, .depth = 4, .vocab_size = 50}), o);
  const std::vector<token_id> prompt = {4, 8, 15};
  const auto out = s.generate(d, tgt, prompt);
  const auto ref = looptest::greedy_decode(tm, prompt, 200);
  CHECK(std::equal(out.begin(), out.end(), ref.begin(), ref.end()));
  CHECK(s.stats().rounds == 40);  // 4 drafts + 1 bonus token per round
  CHECK(s.stats().accepted == 4 * 40);
}

TEST_CASE("same seed, same output; another seed, another output; level drafter equals per-node drafter") {
  const table tm{.V = 40, .seed = 9};
  looptest::target tgt{tm};
  looptest::drafter d{{.V = 40, .seed = 10}};
  looptest::level_drafter ld{{.V = 40, .seed = 10}};
  const std::vector<token_id> prompt = {1, 2, 3};
  auto run = [&](auto& src, std::uint64_t seed, draft_mode m) {
    session_options o = options(40, seed, 120);
    o.sampling.top_p = 0.95f;
    speculative_session s(sampled_tree_builder({.mode = m, .widths = {3, 2, 1}, .vocab_size = 40}), o);
    const auto out = s.generate(src, tgt, prompt);
    return std::vector<token_id>(out.begin(), out.end());
  };
  for (auto m : {draft_mode::iid, draft_mode::without_replacement}) {
    const auto a = run(d, 42, m), b = run(d, 42, m), c = run(d, 43, m), e = run(ld, 42, m);
    CHECK(a.size() == 120);
    CHECK(a == b);
    CHECK(a != c);
    CHECK(a == e);
  }
  // The level drafter is called once per depth, not once per node.
  session_options o = options(40, 1, 10);
  speculative_session s(sampled_tree_builder({.mode = draft_mode::iid, .widths = {3, 2, 1}, .vocab_size = 40}), o);
  REQUIRE(s.start(prompt).ok());
  ld.calls = 0;
  REQUIRE(s.round(ld, tgt).ok());
  CHECK(ld.calls == 3);
  CHECK(s.last_round().drafter_calls == 3);
  CHECK(s.last_round().drafted_nodes == 1 + 3 + 6);
  CHECK(s.last_round().tree_nodes == 1 + 3 + 6 + 6);
  CHECK(s.last_round().mode == verify_mode::sampled_iid);
}

TEST_CASE("caller-supplied round uniforms: Philox copies reproduce a seeded run; mt19937_64 keeps the law") {
  constexpr int V = 3;
  const std::vector<token_id> prompt = {1, 2};
  looptest::target tgt{{.V = V, .seed = 11}};
  looptest::drafter d{{.V = V, .seed = 5}};
  // Draws per node: i.i.d. needs the widest level, Gumbel-top-k one per
  // token; verification one per child plus draw 0.
  constexpr std::int32_t draft_draws = V, verify_draws = 3;
  const auto fill = [](std::vector<double>& buf, std::int32_t nodes, std::int32_t draws, auto&& u) {
    buf.resize(static_cast<std::size_t>(nodes) * static_cast<std::size_t>(draws));
    for (std::int32_t n = 0; n < nodes; ++n)
      for (std::int32_t k = 0; k < draws; ++k)
        buf[static_cast<std::size_t>(n) * draws + static_cast<std::size_t>(k)] = u(n, k);
  };
  std::vector<double> du, vu;

  SECTION("the session's own Philox draws, copied, give the seeded output") {
    for (auto m : {draft_mode::iid, draft_mode::without_replacement}) {
      const sampled_tree_builder b({.mode = m, .widths = {2, 2}, .vocab_size = V});
      for (std::uint64_t seed = 1; seed <= 40; ++seed) {
        session_options o = options(V, seed, 12);
        speculative_session ref(b, o), own(b, o);
        REQUIRE(ref.start(prompt).ok());
        REQUIRE(own.start(prompt).ok());
        for (std::uint32_t r = 0; !ref.done(); ++r) {
          REQUIRE(ref.round(d, tgt).ok());
          const rng_stream key{seed, o.request, r};
          const rng_stream dk = for_purpose(key, rng_purpose::draft);
          const std::int32_t bound = b.node_bound();
          fill(du, bound, draft_draws, [&](std::int32_t n, std::int32_t k) {
            return dk.uniform_double(static_cast<std::uint32_t>(n), static_cast<std::uint32_t>(k));
          });
          fill(vu, bound, verify_draws, [&](std::int32_t n, std::int32_t k) {
            return philox_uniforms{key}(static_cast<std::uint32_t>(n), static_cast<std::uint32_t>(k));
          });
          const round_uniforms ru{{du.data(), bound, draft_draws}, {vu.data(), bound, verify_draws}};
          REQUIRE(own.round(d, tgt, ru).ok());
        }
        REQUIRE(std::vector<token_id>(ref.tokens().begin(), ref.tokens().end()) ==
                std::vector<token_id>(own.tokens().begin(), own.tokens().end()));
      }
    }
  }
  SECTION("uniforms from std::mt19937_64 keep the target's law; squared verify uniforms must not") {
    constexpr int trials = 100000 / SPECDEC_LOOP_TRIAL_SCALE, L = 2;
    const sampled_tree_builder b({.mode = draft_mode::iid, .widths = {2, 2}, .vocab_size = V});
    const std::int32_t bound = b.node_bound();
    const auto law_with = [&](bool biased) {
      std::mt19937_64 gen(20261122);
      std::uniform_real_distribution<double> unif(0.0, 1.0);
      speculative_session s(b, options(V, 0, L));
      std::vector<std::int64_t> counts(V * V, 0);
      for (int t = 0; t < trials; ++t) {
        REQUIRE(s.start(prompt).ok());
        while (!s.done()) {
          fill(du, bound, draft_draws, [&](std::int32_t, std::int32_t) { return unif(gen); });
          fill(vu, bound, verify_draws, [&](std::int32_t, std::int32_t) {
            const double x = unif(gen);
            return biased ? x * x : x;
          });
          const status st = s.round(d, tgt, {{du.data(), bound, draft_draws}, {vu.data(), bound, verify_draws}});
          if (!st.ok()) FAIL(st.message());
        }
        const auto g = s.generated_tokens();
        ++counts[static_cast<std::size_t>(g[0] * V + g[1])];
      }
      return vtest::chi_square(counts, continuation_law(tgt.m, prompt, L), 0);
    };
    const auto f = law_with(false);
    report("iid {2,2}, mt19937_64 round uniforms", f);
    CHECK_FALSE(f.impossible);
    CHECK(f.p_value > 1e-4);
    const auto neg = law_with(true);
    report("NEGATIVE iid {2,2}, squared verify uniforms", neg);
    CHECK(neg.p_value < 1e-6);
  }
  SECTION("a uniform of exactly 0 and the largest double below 1 are accepted; 1 and short buffers are refused") {
    const sampled_tree_builder b({.mode = draft_mode::iid, .widths = {2, 2}, .vocab_size = V});
    const std::int32_t bound = b.node_bound();
    speculative_session s(b, options(V, 0, 64));
    for (const double edge : {0.0, std::nextafter(1.0, 0.0)}) {
      fill(du, bound, draft_draws, [&](std::int32_t, std::int32_t) { return edge; });
      fill(vu, bound, verify_draws, [&](std::int32_t, std::int32_t) { return edge; });
      REQUIRE(s.start(prompt).ok());
      CHECK(s.round(d, tgt, {{du.data(), bound, draft_draws}, {vu.data(), bound, verify_draws}}).ok());
      CHECK(!s.generated_tokens().empty());
    }
    fill(vu, bound, verify_draws, [](std::int32_t, std::int32_t) { return 1.0; });
    REQUIRE(s.start(prompt).ok());
    CHECK(s.round(d, tgt, {{du.data(), bound, draft_draws}, {vu.data(), bound, verify_draws}}) ==
          status_code::invalid_argument);
    CHECK(s.generated_tokens().empty());
    fill(vu, bound, verify_draws, [](std::int32_t, std::int32_t) { return 0.5; });
    CHECK(s.round(d, tgt, {{du.data(), 1, draft_draws}, {vu.data(), bound, verify_draws}}) ==
          status_code::invalid_argument);  // draft buffer covers the root only
    CHECK(s.generated_tokens().empty());
  }
}

TEST_CASE("stop tokens, max tokens, token callback, KV commit requests") {
  const table tm{.V = 6, .seed = 21};
  struct recording_target : looptest::target {
    std::vector<std::int32_t> cache;  // the "KV" of each position: the token there
    std::int32_t len = 0;
    status commit(const kv_commit_request& c) {
      if (c.cache_len != len || c.keep.empty() || c.keep[0] != len)
        return make_status(status_code::invalid_argument, "bad commit");
      for (std::size_t k = 0; k < c.keep.size(); ++k)
        cache[static_cast<std::size_t>(c.cache_len) + k] = cache[static_cast<std::size_t>(c.keep[k])];
      len = c.new_len;
      return status::success();
    }
    status forward(const tree_forward& f) {
      for (node_id i = 0; i < f.tree.size; ++i)
        cache[static_cast<std::size_t>(f.cache_len + i)] = f.tree.token[i];  // node i's KV goes to slot cache_len + i
      return looptest::target::forward(f);
    }
  };
  recording_target tgt{{tm}, std::vector<std::int32_t>(4096, -1), 0};
  looptest::drafter d{{.V = 6, .seed = 22}};
  const std::vector<token_id> prompt = {0, 1, 2};
  for (std::int32_t p = 0; p + 1 < 3; ++p) tgt.cache[static_cast<std::size_t>(p)] = prompt[static_cast<std::size_t>(p)];
  tgt.len = 2;
  session_options o = options(6, 5, 300);
  o.stop_tokens = {5};
  speculative_session s(topk_tree_builder({.k = 2, .depth = 3, .vocab_size = 6}), o);
  std::vector<token_id> streamed;
  const auto out = s.generate(
      d, tgt, prompt, [&](std::span<const token_id> t) { streamed.insert(streamed.end(), t.begin(), t.end()); });
  REQUIRE(!out.empty());
  CHECK(std::vector<token_id>(out.begin(), out.end()) == streamed);
  const bool stopped = out.back() == 5;
  CHECK((stopped || out.size() == 300));
  CHECK(std::count(out.begin(), out.end(), 5) == (stopped ? 1 : 0));
  // The cache holds exactly the committed tokens but the last.
  const auto all = s.tokens();
  REQUIRE(tgt.len == static_cast<std::int32_t>(all.size()) - 1);
  for (std::int32_t p = 0; p < tgt.len; ++p)
    CHECK(tgt.cache[static_cast<std::size_t>(p)] == all[static_cast<std::size_t>(p)]);
  // max_tokens cuts a round short.
  session_options o2 = options(6, 5, 2);
  o2.sampling.temperature = 0.0f;
  looptest::drafter same{{.V = 6, .seed = 21}};  // accepts everything
  speculative_session s2(topk_tree_builder({.k = 1, .depth = 5, .vocab_size = 6}), o2);
  looptest::target plain{tm};
  CHECK(s2.generate(same, plain, prompt).size() == 2);
  CHECK(s2.stats().rounds == 1);
  CHECK(s2.last_round().accepted == 5);
}

TEST_CASE("a plain round hands the target the root's position and mask and commits the root") {
  // The session builds a root-only round's position, mask row and keep
  // list without the tree checks: what the target sees must be what the
  // checked path builds, and the tokens those of a plain sampling loop.
  const table tm{.V = 6, .seed = 23};
  struct checking_target : looptest::target {
    std::int32_t len = 0, bad = 0;
    status forward(const tree_forward& f) {
      if (f.tree.size != 1 || f.positions.size() != 1 || f.positions[0] != len || f.mask_words != 1 || f.mask[0] != 1 ||
          f.cache_len != len)
        ++bad;
      return looptest::target::forward(f);
    }
    status commit(const kv_commit_request& c) {
      if (c.cache_len != len || c.keep.size() != 1 || c.keep[0] != len || c.new_len != len + 1) ++bad;
      len = c.new_len;
      return status::success();
    }
  };
  planner_options po;
  po.max_depth = 0;  // never drafts: every round is a plain step
  looptest::level_drafter d{{.V = 6, .seed = 24}};
  const std::vector<token_id> prompt = {0, 1, 2};
  for (const float temperature : {0.0f, 1.0f}) {
    session_options o = options(6, 9, 40);
    o.sampling.temperature = temperature;
    checking_target tgt{{tm}};
    tgt.len = 2;
    speculative_session s(planned_tree_builder({.planner = po, .vocab_size = 6}), o);
    const auto out = s.generate(d, tgt, prompt);
    CHECK(tgt.bad == 0);
    CHECK(tgt.len == 2 + 40);
    CHECK(s.stats().rounds == 40);
    // The same tokens as a bare plain loop: the target's row, verify_tree
    // over the root alone, keyed {seed, request, step} as the session keys rounds.
    std::vector<token_id> hist(prompt.begin(), prompt.end()), want;
    std::vector<float> row(6), logits(6), probs(6);
    std::vector<std::byte> ws(verify_workspace_size(6, 1)), fws(logits_to_probs_workspace_size(6, o.sampling));
    for (std::uint32_t i = 0; i < 40; ++i) {
      const token_id root = hist.back();
      const std::vector<token_id> before(hist.begin(), hist.end() - 1);
      tm.row(before, std::vector<token_id>{root}, row.data());
      for (int t = 0; t < 6; ++t)
        logits[static_cast<std::size_t>(t)] = row[static_cast<std::size_t>(t)] > 0.0f
                                                  ? std::log(row[static_cast<std::size_t>(t)])
                                                  : -std::numeric_limits<float>::infinity();
      const float* rows = logits.data();
      if (temperature != 0.0f) {
        REQUIRE(
            logits_to_probs_row(make_view<const float>(logits.data(), 6), make_view(probs.data(), 6), o.sampling, fws)
                .ok());
        rows = probs.data();
      }
      const node_id parent[1] = {-1};
      const tree_view tv{&root, parent, nullptr, nullptr, 1};
      verify_params vp;
      vp.mode = temperature == 0.0f ? verify_mode::greedy : verify_mode::sampled_iid;
      vp.seed = o.seed;
      vp.request = o.request;
      vp.round = i;
      node_id p1[1];
      token_id e1[1];
      verify_result res;
      REQUIRE(verify_tree(tv, make_view<const float>(rows, 1, 6), {}, vp, ws, p1, e1, res).ok());
      hist.push_back(e1[0]);
      want.push_back(e1[0]);
    }
    CHECK(std::vector<token_id>(out.begin(), out.end()) == want);
  }
}

TEST_CASE("session errors") {
  looptest::target tgt{{.V = 4}};
  looptest::drafter d{{.V = 4}};
  const std::vector<token_id> prompt = {1};
  speculative_session s(topk_tree_builder({.k = 2, .depth = 2, .vocab_size = 4}), options(4, 0, 8));
  CHECK(s.round(d, tgt) == status_code::invalid_argument);  // not started
  CHECK(s.start({}) == status_code::invalid_argument);
  const std::vector<token_id> bad = {7};
  CHECK(s.start(bad) == status_code::token_out_of_range);
  speculative_session s0(topk_tree_builder(), options(0, 0, 8));
  CHECK(s0.start(prompt) == status_code::invalid_argument);
  session_options nan = options(4, 0, 8);
  nan.sampling.temperature = std::numeric_limits<float>::quiet_NaN();
  speculative_session s1(topk_tree_builder(), nan);
  CHECK(s1.start(prompt) == status_code::invalid_argument);
  // A target that fails aborts the round, the sequence is unchanged.
  struct failing : looptest::target {
    status forward(const tree_forward&) { return make_status(status_code::internal_error, "model failed"); }
  } f{{{.V = 4}}};
  REQUIRE(s.start(prompt).ok());
  CHECK(s.round(d, f) == status_code::internal_error);
  CHECK(s.tokens().size() == 1);
  // A target writing NaN logits: the verifier reports it.
  struct nan_target : looptest::target {
    status forward(const tree_forward& fw) {
      SPECDEC_TRY(looptest::target::forward(fw));
      fw.logits(0, 1) = std::numeric_limits<float>::quiet_NaN();
      return status::success();
    }
  } nt{{{.V = 4}}};
  CHECK(s.round(d, nt) == status_code::non_finite);
  // choose_verify_mode: naive matching is exact for any tree; greedy at T > 0 is not.
  drafted_tree t;
  t.reset(0);
  t.add(0, 1, 0.5f, -0.7f, draft_mode::iid);
  session_options o = options(4, 0, 8);
  verify_mode m{};
  REQUIRE(choose_verify_mode(t, o, m).ok());
  CHECK(m == verify_mode::sampled_iid);
  o.rule = verify_mode::naive_matching;
  CHECK(choose_verify_mode(t, o, m).ok());
  o.rule = verify_mode::traversal;  // lossless for i.i.d. drafts too
  CHECK(choose_verify_mode(t, o, m).ok());
  CHECK(m == verify_mode::traversal);
  o.rule = verify_mode::block;  // a chain
  CHECK(choose_verify_mode(t, o, m).ok());
  o.rule = verify_mode::sampled_without_replacement;  // not how the children were drafted
  CHECK(choose_verify_mode(t, o, m) == status_code::invalid_argument);
  o.rule = verify_mode::greedy;
  CHECK(choose_verify_mode(t, o, m) == status_code::invalid_argument);
  o.rule = verify_mode::typical_lossy;
  o.lossy = lossy_opt_in::mismatched_rule;
  CHECK(choose_verify_mode(t, o, m).ok());
  o.lossy = lossy_opt_in::none;
  CHECK(choose_verify_mode(t, o, m) == status_code::invalid_argument);
  t.add(0, 3, 0.5f, -0.7f, draft_mode::iid);  // no longer a chain
  o.rule = verify_mode::block;
  CHECK(choose_verify_mode(t, o, m) == status_code::invalid_argument);
  t.add(1, 2, 0.5f, -1.4f, draft_mode::deterministic);  // mixed modes
  o.rule.reset();
  CHECK(choose_verify_mode(t, o, m) == status_code::invalid_argument);
}

TEST_CASE("stream and token-info builders on the tree_builder signature: same trees, and sessions run them") {
  SECTION("the source overloads build the trees of the row overloads") {
    table_stream_source ss{{.V = 12, .seed = 4}, 3};
    table_token_info_source ts{{.V = 12, .seed = 5}, 3};
    const std::vector<token_id> hist = {1, 2};
    draft_round r;
    r.root_token = 7;
    r.history = hist;
    // A transition model that prunes some edges, next to the rows.
    const auto tr = [](node_id u, token_id a, token_id b) { return ((u + a + b) % 3 == 0) ? 0.1f : 0.9f; };
    struct with_transition : table_stream_source {
      decltype(tr) transition;
    } st{ss, tr};
    stream_tree_builder sb({.k = 2, .threshold = 0.5f, .max_depth = 3});
    drafted_tree a, b;
    REQUIRE(sb.build(st, r, a).ok());
    view2d<const float> rows{};
    REQUIRE(ss.stream_rows(r, rows).ok());
    REQUIRE(sb.build(rows, r.root_token, b, tr).ok());
    CHECK(a.tree.tokens().size() == b.tree.tokens().size());
    CHECK(std::ranges::equal(a.tree.tokens(), b.tree.tokens()));
    CHECK(std::ranges::equal(a.tree.parents(), b.tree.parents()));
    CHECK(a.size() < 1 + 2 + 4 + 8);  // the transition model pruned something
    CHECK(a.size() <= sb.node_bound());
    CHECK(sb.node_bound() == 15);
    token_info_builder tb({.k = 3, .budget = 0, .max_rows = 3});
    REQUIRE(tb.build(ts, r, a).ok());
    view2d<const float> l{};
    token_info_table info{};
    REQUIRE(ts.token_info_rows(r, l, info).ok());
    REQUIRE(tb.build(l, info, r.root_token, b).ok());
    CHECK(std::ranges::equal(a.tree.tokens(), b.tree.tokens()));
    CHECK(std::ranges::equal(a.tree.parents(), b.tree.parents()));
    CHECK(a.size() <= tb.node_bound());
    CHECK(tb.node_bound() == 1 + 3 + 2 * 9);
    CHECK(token_info_builder({.k = 3, .budget = 9}).node_bound() == 9);
    CHECK(token_info_builder({.k = 3}).node_bound() == 0);
    ts.n_rows = 4;  // more rows than max_rows
    CHECK(tb.build(ts, r, a) == status_code::invalid_argument);
  }
  SECTION("greedy sessions equal plain greedy decoding") {
    const table tm{.V = 50, .seed = 3, .zero_frac = 0.0};
    const std::vector<token_id> prompt = {4, 8, 15};
    const auto ref = looptest::greedy_decode(tm, prompt, 120);
    session_options o = options(50, 1, 120);
    o.sampling.temperature = 0.0f;
    looptest::target t1{tm}, t2{tm};
    table_stream_source ss{{.V = 50, .seed = 3, .zero_frac = 0.0}, 3};
    speculative_session s1(stream_tree_builder({.k = 2, .max_depth = 3}), o);
    const auto out1 = s1.generate(ss, t1, prompt);
    CHECK(std::ranges::equal(out1, ref));
    CHECK(s1.stats().accepted > 0);  // the streams follow the target here
    table_token_info_source ts{{.V = 50, .seed = 3, .zero_frac = 0.0}, 3};
    speculative_session s2(token_info_builder({.k = 2, .budget = 12, .max_rows = 3}), o);
    const auto out2 = s2.generate(ts, t2, prompt);
    CHECK(std::ranges::equal(out2, ref));
    CHECK(s2.stats().accepted > 0);
    // A builder without a node bound is refused, not overrun.
    looptest::target t3{tm};
    speculative_session s3(token_info_builder({.k = 2}), o);
    REQUIRE(s3.start(prompt).ok());
    CHECK(s3.round(ts, t3) == status_code::invalid_argument);
  }
  SECTION("temperature 1: whole-continuation law (deterministic rule)") {
    constexpr int trials = 200000 / SPECDEC_LOOP_TRIAL_SCALE;
    const std::uint64_t seed = 20261123;
    table_stream_source ss{{.V = 3, .seed = 5}, 2};
    const auto f = loop_law(stream_tree_builder({.k = 2, .max_depth = 2}), ss, options(3, 0, 64), 1, 3, trials, seed);
    report("stream tree k=2 depth 2", f);
    CHECK_FALSE(f.impossible);
    CHECK(f.p_value > 1e-4);
    table_token_info_source ts{{.V = 3, .seed = 5}, 2};
    const auto g = loop_law(token_info_builder({.k = 2, .max_rows = 2}), ts, options(3, 0, 64), 1, 3, trials, seed + 1);
    report("token-info tree k=2, 2 rows", g);
    CHECK_FALSE(g.impossible);
    CHECK(g.p_value > 1e-4);
  }
}
