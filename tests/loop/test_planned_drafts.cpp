// planned_drafts_builder: concepts, the draft cut against a brute-force
// reference, greedy sessions and batches with planned prompt lookup equal
// plain greedy decoding, speculation where the text repeats and plain steps
// where passes are dear, and errors. Its law at temperature 1 is tested in
// test_session.cpp with the other planned builders.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <vector>

#include "loop/loop_models.hpp"
#include "specdec/draft/prompt_lookup.hpp"
#include "specdec/draft/sampled_tree.hpp"
#include "specdec/draft/suffix_index.hpp"
#include "specdec/loop/batch_session.hpp"
#include "specdec/loop/planned_drafts.hpp"
#include "specdec/loop/session.hpp"

using namespace specdec;

using planned_lookup = planned_drafts_builder<prompt_lookup_builder>;
static_assert(round_observing_builder<planned_lookup>);
static_assert(tree_builder<planned_lookup, looptest::drafter>);
static_assert(tree_builder<planned_lookup, looptest::level_drafter>);
static_assert(tree_builder<planned_drafts_builder<suffix_tree_builder>, suffix_index>);
static_assert(!tree_builder<planned_drafts_builder<suffix_tree_builder>, looptest::drafter>);
static_assert(!round_observing_builder<prompt_lookup_builder>);
// The wrapped builder's build decides what the wrapper can draft from.
static_assert(!tree_builder<planned_drafts_builder<sampled_tree_builder>, int>);

namespace {

// The draft cut by definition: a node is eligible when its parent is (the
// root always is), its depth is within max_depth and its parent's path
// probability reaches the threshold of the parent's depth (depth >= 1, inside
// the span); the first max_nodes eligible nodes in id order are kept.
std::vector<node_id> reference_kept(const drafted_tree& t, std::int32_t max_nodes, std::int32_t max_depth,
                                    const std::vector<double>& thr) {
  std::vector<char> ok(static_cast<std::size_t>(t.size()), 0);
  ok[0] = 1;
  for (node_id i = 1; i < t.size(); ++i) {
    const node_id u = t.tree.parent(i);
    const auto du = static_cast<std::size_t>(t.tree.depth(u));
    const bool expand = du == 0 || du >= thr.size() || std::exp(static_cast<double>(t.tree.score(u))) >= thr[du];
    ok[static_cast<std::size_t>(i)] = ok[static_cast<std::size_t>(u)] && t.tree.depth(i) <= max_depth && expand;
  }
  std::vector<node_id> kept;
  for (node_id i = 0; i < t.size() && static_cast<std::int32_t>(kept.size()) < max_nodes; ++i)
    if (ok[static_cast<std::size_t>(i)]) kept.push_back(i);
  return kept;
}

// A target whose next-token law depends on the last token only: greedy
// decoding cycles, so prompt lookup soon drafts what the target will say.
struct markov_target {
  int V = 12;
  static token_id next(token_id t, int V) { return static_cast<token_id>((t * 5 + 3) % V); }
  specdec::status forward(const tree_forward& f) {
    for (node_id i = 0; i < f.tree.size; ++i)
      for (int v = 0; v < V; ++v) f.logits(i, v) = v == next(f.tree.token[i], V) ? 2.0f : -static_cast<float>(v % 3);
    return status::success();
  }
  std::vector<token_id> greedy(token_id last, int n) const {
    std::vector<token_id> out;
    for (int k = 0; k < n; ++k) out.push_back(last = next(last, V));
    return out;
  }
};

session_options greedy_options(std::int64_t V, std::int32_t max_tokens) {
  session_options o;
  o.vocab_size = V;
  o.max_tokens = max_tokens;
  o.sampling.temperature = 0.0f;
  return o;
}

planned_lookup lookup_builder(std::int64_t V, double node_cost, std::int32_t max_nodes = 8) {
  planned_lookup b(prompt_lookup_builder({.max_depth = 6, .max_nodes = max_nodes, .vocab_size = V}),
                   {.max_nodes = max_nodes, .max_depth = 6, .probe_every = 0, .draft_bonus = 0.0});
  // Injected pass cost 1 + node_cost (n - 1): the plans do not depend on this machine's timing.
  const double n[] = {1, 2, 8}, t[] = {1.0, 1.0 + node_cost, 1.0 + 7 * node_cost};
  throw_if_error(b.planner().set_target_cost(n, t));
  throw_if_error(b.planner().set_loop_cost(0.0, 0.0));
  return b;
}

}  // namespace

TEST_CASE("planned drafts: the cut keeps what the brute-force definition keeps") {
  std::mt19937_64 rng = looptest::seeded_rng("[planned drafts] cut", 20261127);
  std::vector<node_id> scratch;
  for (int trial = 0; trial < 3000; ++trial) {
    const auto n = static_cast<std::int32_t>(1 + rng() % 20);
    drafted_tree t;
    t.reset(static_cast<token_id>(rng() % 50));
    for (node_id i = 1; i < n; ++i) {
      const auto p = static_cast<node_id>(rng() % static_cast<std::uint64_t>(i));
      const float q = static_cast<float>(1 + rng() % 100) / 100.0f;
      t.add(p, static_cast<token_id>(rng() % 50), q, t.tree.score(p) + std::log(q), draft_mode::deterministic);
    }
    const auto max_nodes = static_cast<std::int32_t>(1 + rng() % 22);
    const auto max_depth =
        trial % 3 == 0 ? std::numeric_limits<std::int32_t>::max() : static_cast<std::int32_t>(rng() % 6);
    std::vector<double> thr(rng() % 5);
    for (auto& x : thr) x = static_cast<double>(rng() % 60) / 100.0;
    drafted_tree out;
    REQUIRE(keep_draft_within(t, max_nodes, max_depth, thr, out, scratch).ok());
    const auto kept = reference_kept(t, max_nodes, max_depth, thr);
    INFO("trial " << trial);
    REQUIRE(out.size() == static_cast<std::int32_t>(kept.size()));
    std::vector<node_id> id(static_cast<std::size_t>(t.size()), -1);
    for (std::size_t k = 0; k < kept.size(); ++k) id[static_cast<std::size_t>(kept[k])] = static_cast<node_id>(k);
    for (std::size_t k = 0; k < kept.size(); ++k) {
      const node_id i = kept[k], o = static_cast<node_id>(k);
      CHECK(out.tree.token(o) == t.tree.token(i));
      CHECK(out.tree.score(o) == t.tree.score(i));
      CHECK(out.prob[k] == t.prob[static_cast<std::size_t>(i)]);
      if (k > 0) CHECK(out.tree.parent(o) == id[static_cast<std::size_t>(t.tree.parent(i))]);
      // A kept node with a kept child keeps the child mode; one without is a leaf.
      bool has_child = false;
      for (std::size_t c = k + 1; c < kept.size(); ++c) has_child = has_child || t.tree.parent(kept[c]) == i;
      CHECK(out.child_mode[k] == (has_child ? t.child_mode[static_cast<std::size_t>(i)] : draft_mode::leaf));
    }
  }
}

TEST_CASE("planned drafts: the cut refuses malformed drafts before writing anything") {
  drafted_tree out, empty;
  out.reset(7);
  std::vector<node_id> scratch;
  CHECK(keep_draft_within(empty, 4, 4, {}, out, scratch) == status_code::invalid_argument);  // no root
  drafted_tree t;
  t.reset(1);
  t.add(0, 2, 0.5f, std::log(0.5f), draft_mode::deterministic);
  t.add(1, 3, 0.5f, 2 * std::log(0.5f), draft_mode::deterministic);
  CHECK(keep_draft_within(t, 0, 4, {}, out, scratch) == status_code::invalid_argument);  // max_nodes < 1
  drafted_tree short_prob = t;
  short_prob.prob.pop_back();
  CHECK(keep_draft_within(short_prob, 4, 4, {}, out, scratch) == status_code::size_mismatch);
  drafted_tree short_modes = t;
  short_modes.child_mode.pop_back();
  CHECK(keep_draft_within(short_modes, 4, 4, {}, out, scratch) == status_code::size_mismatch);
  // Nothing was written: `out` still holds its own root only.
  CHECK(out.size() == 1);
  CHECK(out.tree.token(0) == 7);
  // max_nodes 1: the root alone, a leaf.
  REQUIRE(keep_draft_within(t, 1, 4, {}, out, scratch).ok());
  CHECK(out.size() == 1);
  CHECK(out.child_mode[0] == draft_mode::leaf);
}

TEST_CASE(
    "planned prompt lookup: greedy output equals plain greedy; it speculates on repeats, steps plainly when dear") {
  const markov_target tm;
  const std::vector<token_id> prompt = {1, 2, 3};
  const auto ref = tm.greedy(prompt.back(), 150);
  looptest::drafter unused{{.V = 12, .seed = 1}};
  // Cheap nodes: after one cycle of the text every draft is right; the
  // planner keeps long drafts and the session needs few rounds.
  {
    markov_target tgt;
    speculative_session s(lookup_builder(12, 0.05), greedy_options(12, 150));
    const auto out = s.generate(unused, tgt, prompt);
    CHECK(std::vector<token_id>(out.begin(), out.end()) == ref);
    std::printf("[planned drafts] cheap nodes: %lld rounds for 150 tokens\n", static_cast<long long>(s.stats().rounds));
    CHECK(s.stats().rounds < 50);
    CHECK(s.last_round().plan.kind == plan_kind::drafted);
  }
  // Each node costs more than a step: no draft pays, every round is plain.
  {
    markov_target tgt;
    speculative_session s(lookup_builder(12, 1.5), greedy_options(12, 150));
    REQUIRE(s.start(prompt).ok());
    std::int64_t plain = 0;
    while (!s.done()) {
      REQUIRE(s.round(unused, tgt).ok());
      plain += s.last_round().tree_nodes == 1 ? 1 : 0;
      CHECK(s.last_round().plan.kind == plan_kind::autoregressive);
    }
    CHECK(std::vector<token_id>(s.generated_tokens().begin(), s.generated_tokens().end()) == ref);
    CHECK(plain == 150);
  }
  // Plain steps still teach the planner (observe_skipped): after 150 plain
  // steps on dear nodes, passes get cheaper (0.9 of a step per node): the
  // drafts, right every time, now pay only if the planner learned that they
  // are (the lookup's own confidence, 8/9 per level, says they do not).
  {
    markov_target tgt;
    planned_lookup b = lookup_builder(12, 1.5);
    planner_options po = b.planner().options();
    po.explore = 0.0;
    REQUIRE(b.planner().reset(po).ok());
    const double n[] = {1, 2, 8}, dear[] = {1.0, 2.5, 11.5}, cheaper[] = {1.0, 1.9, 7.3};
    REQUIRE(b.planner().set_target_cost(n, dear).ok());
    REQUIRE(b.planner().set_loop_cost(0.0, 0.0).ok());
    speculative_session s(std::move(b), greedy_options(12, 200));
    REQUIRE(s.start(prompt).ok());
    while (s.generated_tokens().size() < 150) REQUIRE(s.round(unused, tgt).ok());
    CHECK(s.stats().rounds == 150);
    REQUIRE(s.builder().planner().set_target_cost(n, cheaper).ok());
    REQUIRE(s.round(unused, tgt).ok());
    CHECK(s.last_round().tree_nodes == 7);  // the whole draft, 6 levels deep
    CHECK(s.last_round().accepted == 6);
  }
  // The suffix index as the source (suffix_tree_builder syncs it with the context).
  {
    markov_target tgt;
    planned_drafts_builder<suffix_tree_builder> b(
        suffix_tree_builder({.max_depth = 6, .max_nodes = 8}),
        {.max_nodes = 8, .max_depth = 6, .probe_every = 0, .draft_bonus = 0.0});
    const double n[] = {1, 2, 8}, t[] = {1.0, 1.05, 1.35};
    REQUIRE(b.planner().set_target_cost(n, t).ok());
    REQUIRE(b.planner().set_loop_cost(0.0, 0.0).ok());
    suffix_index index({.depth = 16, .capacity = 1 << 12});
    speculative_session s(std::move(b), greedy_options(12, 150));
    const auto out = s.generate(index, tgt, prompt);
    CHECK(std::vector<token_id>(out.begin(), out.end()) == ref);
    std::printf("[planned drafts] suffix index: %lld rounds for 150 tokens\n",
                static_cast<long long>(s.stats().rounds));
    CHECK(s.stats().rounds < 50);
  }
  // A target whose text never repeats exactly (random per context): still plain greedy decoding.
  {
    const looptest::table tab{.V = 30, .seed = 3, .zero_frac = 0.0};
    looptest::target tgt{tab};
    speculative_session s(lookup_builder(30, 0.05), greedy_options(30, 100));
    const auto out = s.generate(unused, tgt, prompt);
    CHECK(std::vector<token_id>(out.begin(), out.end()) == looptest::greedy_decode(tab, prompt, 100));
  }
}

TEST_CASE("batched planned prompt lookup: greedy equals plain decoding per request, within the node budget") {
  const looptest::table tm{.V = 6, .seed = 3, .zero_frac = 0.0};
  const std::vector<std::vector<token_id>> prompts = {{1, 2, 1, 2, 1}, {5, 4, 5}, {0}};
  std::vector<planned_lookup> builders;
  std::vector<session_options> opts;
  for (std::size_t r = 0; r < prompts.size(); ++r) {
    builders.push_back(lookup_builder(6, 0.05));
    session_options o = greedy_options(6, 60);
    o.request = static_cast<std::uint32_t>(r);
    opts.push_back(o);
  }
  batched_session s(std::move(builders), opts);
  s.set_node_budget(9);
  looptest::batch_target tgt{tm};
  tgt.cache.assign(prompts.size(), std::vector<std::int32_t>(512, 0));
  tgt.len.assign(prompts.size(), 0);
  for (std::size_t r = 0; r < prompts.size(); ++r) REQUIRE(s.start(r, prompts[r]).ok());
  looptest::level_drafter unused{{.V = 6, .seed = 1}};
  while (!s.done()) {
    REQUIRE(s.round(unused, tgt).ok());
    CHECK(s.last_round().tree_nodes <= 9);
  }
  for (std::size_t r = 0; r < prompts.size(); ++r) {
    const auto got = s.generated_tokens(r);
    CHECK(std::vector<token_id>(got.begin(), got.end()) == looptest::greedy_decode(tm, prompts[r], 60));
  }
}

TEST_CASE("planned drafts: errors") {
  looptest::drafter d{{.V = 5, .seed = 1}};
  looptest::target tgt{{.V = 5, .seed = 2}};
  // Sampled drafts are planned before drafting (planned_tree_builder), not after.
  planned_drafts_builder sampled(sampled_tree_builder({.mode = draft_mode::iid, .widths = {2}, .vocab_size = 5}),
                                 planner_options{.max_nodes = 4, .plain_first = 0});
  const double n[] = {1, 4}, t[] = {1.0, 1.01};
  REQUIRE(sampled.planner().set_target_cost(n, t).ok());
  session_options o;
  o.vocab_size = 5;
  o.max_tokens = 8;
  speculative_session s(std::move(sampled), o);
  REQUIRE(s.start(std::vector<token_id>{1, 2}).ok());
  CHECK(s.round(d, tgt) == status_code::invalid_argument);
  // The wrapped builder's errors come through: a context token outside its vocabulary.
  speculative_session bad(lookup_builder(3, 0.05), greedy_options(5, 8));
  REQUIRE(bad.start(std::vector<token_id>{1, 4}).ok());
  CHECK(bad.round(d, tgt) == status_code::token_out_of_range);
  // Invalid planner options throw at construction.
  CHECK_THROWS_AS(planned_lookup(prompt_lookup_builder{}, planner_options{.max_nodes = 0}), error);
}
