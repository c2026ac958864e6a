// Tests of the llama.cpp adapter with the real SmolLM2-135M model (CPU,
// flash attention off, 1 thread). Needs the cache of fetch_build.sh; run
// with `bash examples/llama_cpp/run.sh --test`.
//
// Tolerance (measured, not hoped for): a tree pass decodes many tokens in
// one llama_decode, plain decoding one per call, and llama.cpp's CPU backend
// does not compute the two bit for bit alike (other kernels and summation
// orders for a batch; the 8-bit quantization of activations before the
// Q4_1 products can turn a last-bit difference into a whole step). Logits
// of the same context differ by up to ~0.75 (max over the vocabulary); a
// root-only tree (one token per call) matches exactly. Rows are therefore
// compared as distributions: max |logit diff| <= kMaxLogitDiff and total
// variation distance of the softmaxes <= kMaxTv (measured up to 0.053; a
// different context gives 0.46 and more), and every such check has a
// negative control (the row of a different context) that must fail it.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>

#include "exactness_harness.hpp"  // gamma_q (tests/verify)
#include "speculate.hpp"

using namespace specdec_llama;

namespace {

constexpr float kMaxLogitDiff = 1.5f;
constexpr double kMaxTv = 0.1;
// Greedy texts may part only where plain decoding was this close to a tie.
constexpr float kTieGap = 2.0f * kMaxLogitDiff;

const char* kPrompt =
    "The quick brown fox jumps over the lazy dog. The quick brown fox jumps over the lazy dog again, and then the "
    "fox runs into the forest. In the forest, the fox";

model& the_model() {
  static model m(SPECDEC_LLAMA_MODEL);
  return m;
}

context_options opts() {
  context_options o;
  o.n_ctx = 1024;
  o.n_batch = 128;
  o.n_seq_max = 64;
  o.threads = 1;  // no spinning thread barrier on a shared machine
  return o;
}

struct diff {
  float max_abs = 0.0f;
  double tv = 0.0;
  bool within() const { return max_abs <= kMaxLogitDiff && tv <= kMaxTv; }
};

diff compare_rows(const float* a, const float* b, std::int64_t V) {
  diff d;
  float ma = -INFINITY, mb = -INFINITY;
  for (std::int64_t i = 0; i < V; ++i) {
    d.max_abs = std::max(d.max_abs, std::fabs(a[i] - b[i]));
    ma = std::max(ma, a[i]);
    mb = std::max(mb, b[i]);
  }
  double za = 0.0, zb = 0.0;
  for (std::int64_t i = 0; i < V; ++i) {
    za += std::exp(static_cast<double>(a[i] - ma));
    zb += std::exp(static_cast<double>(b[i] - mb));
  }
  for (std::int64_t i = 0; i < V; ++i)
    d.tv +=
        0.5 * std::fabs(std::exp(static_cast<double>(a[i] - ma)) / za - std::exp(static_cast<double>(b[i] - mb)) / zb);
  return d;
}

// Greedy text `got` equals plain greedy text `want` up to the first token
// where they part, and plain decoding had a near tie there.
bool same_greedy_text(const std::vector<llama_token>& got, const run_stats& plain) {
  std::size_t k = 0;
  while (k < got.size() && k < plain.tokens.size() && got[k] == plain.tokens[k]) ++k;
  if (k == got.size() && k == plain.tokens.size()) return true;
  const bool tie = k < plain.top2_gap.size() && plain.top2_gap[k] < kTieGap;
  std::printf("  greedy texts part at token %zu (plain top-2 logit gap %.3g): %s\n", k,
              k < plain.top2_gap.size() ? static_cast<double>(plain.top2_gap[k]) : -1.0,
              tie ? "a near tie, allowed" : "NOT a near tie");
  return tie;
}

// Logits after the committed text `prefix` followed by `path` (path[0] is
// prefix.back()), decoded as a plain sequence one token per call.
std::vector<float> plain_logits(tree_target& ref, const std::vector<llama_token>& prefix,
                                const std::vector<llama_token>& path) {
  ref.start(prefix);
  const float* row = ref.plain_step();
  for (std::size_t k = 1; k < path.size(); ++k) {
    ref.push(path[k]);
    row = ref.plain_step();
  }
  return {row, row + ref.ctx().n_vocab()};
}

}  // namespace

TEST_CASE("every tree node's logits equal those of its path decoded as a plain sequence") {
  model& m = the_model();
  const auto V = static_cast<std::int64_t>(m.n_vocab());
  const std::vector<llama_token> prompt = m.tokenize(kPrompt);
  tree_target tgt(m, opts());
  tree_target ref(m, opts());
  const std::uint32_t seed = 20261122;
  std::printf("random trees: seed %u\n", seed);
  std::mt19937 rng(seed);
  for (int trial = 0; trial < 3; ++trial) {
    // A random tree: 1 + 15 nodes, each under a random earlier node, tokens
    // half from the real continuation (a prompt-lookup-like tree) and half
    // random vocabulary entries.
    draft_output d;
    d.tree.reset(prompt.back());
    const std::int32_t n = trial == 0 ? 1 : 16;
    for (std::int32_t i = 1; i < n; ++i) {
      const auto parent = static_cast<specdec::node_id>(std::uniform_int_distribution<int>(0, i - 1)(rng));
      const auto tok = static_cast<llama_token>(rng() % 2 ? prompt[rng() % prompt.size()] : rng() % V);
      d.tree.add(parent, tok, 1.0f, 0.0f, specdec::draft_mode::deterministic);
    }
    tgt.start(prompt);
    const specdec::tree_view tv = d.tree.tree.view();
    const specdec::view2d<const float> rows = tgt.score_tree(tv);
    REQUIRE(tgt.ctx().calls() == 1);  // the whole tree in one llama_decode
    float worst = 0.0f;
    double worst_tv = 0.0, closest_wrong_tv = 1.0;
    std::vector<std::vector<float>> want(static_cast<std::size_t>(n));
    for (specdec::node_id u = 0; u < n; ++u) {
      std::vector<llama_token> path;
      for (specdec::node_id v = u; v >= 0; v = tv.parent[v]) path.insert(path.begin(), tv.token[v]);
      want[static_cast<std::size_t>(u)] = plain_logits(ref, prompt, path);
      const diff df = compare_rows(&rows(u, 0), want[static_cast<std::size_t>(u)].data(), V);
      worst = std::max(worst, df.max_abs);
      worst_tv = std::max(worst_tv, df.tv);
      INFO("trial " << trial << " node " << u << " depth " << tv.depth[u] << " max |diff| " << df.max_abs << " tv "
                    << df.tv);
      CHECK(df.within());
      if (u > 0) {  // negative control: the parent's context is a different one
        const diff wrong = compare_rows(&rows(u, 0), want[static_cast<std::size_t>(tv.parent[u])].data(), V);
        closest_wrong_tv = std::min(closest_wrong_tv, wrong.tv);
        CHECK_FALSE(wrong.within());
      }
    }
    std::printf(
        "trial %d: %d nodes, max |tree - plain| logit diff %.3g, max TV %.3g, smallest TV of a wrong context %.3g\n",
        trial, n, static_cast<double>(worst), worst_tv, closest_wrong_tv);
  }
}

TEST_CASE("F32 model: every tree node's row equals its path decoded alone to rounding; a masking bug fails") {
  // An exactly dequantized F32 copy of the shipped Q4_1 file: no 8-bit
  // activation rounding, so a tree pass and one-token decoding differ only
  // by summation order. Tolerance near the measured noise; the injected
  // masking bug (each node tagged with its parent's leaves, so it also sees
  // its siblings) must exceed it.
  constexpr float kF32MaxLogitDiff = 0.05f;
  static model m32(f32_copy(SPECDEC_LLAMA_MODEL));
  const auto V = static_cast<std::int64_t>(m32.n_vocab());
  const std::vector<llama_token> prompt = m32.tokenize(kPrompt);
  tree_target tgt(m32, opts());
  tree_target ref(m32, opts());
  const std::uint32_t seed = 20261125;
  std::printf("F32 random trees: seed %u\n", seed);
  std::mt19937 rng(seed);
  float worst = 0.0f, bug_worst = 0.0f;
  for (int trial = 0; trial < 2; ++trial) {
    draft_output raw, d;
    raw.tree.reset(prompt.back());
    for (std::int32_t i = 1; i < 16; ++i) {
      const auto parent = static_cast<specdec::node_id>(std::uniform_int_distribution<int>(0, i - 1)(rng));
      const auto tok = static_cast<llama_token>(rng() % 2 ? prompt[rng() % prompt.size()] : rng() % V);
      raw.tree.add(parent, tok, 1.0f, 0.0f, specdec::draft_mode::deterministic);
    }
    // Level order (ids by depth): with the injected bug a sequence then still
    // sees non-decreasing positions in the batch, which llama.cpp requires.
    std::vector<specdec::node_id> order(static_cast<std::size_t>(raw.tree.size())), id(order.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = static_cast<specdec::node_id>(i);
    std::stable_sort(order.begin(), order.end(), [&](specdec::node_id a, specdec::node_id b) {
      return raw.tree.tree.depth(a) < raw.tree.tree.depth(b);
    });
    d.tree.reset(prompt.back());
    for (std::size_t k = 1; k < order.size(); ++k) {
      const specdec::node_id u = order[k];
      id[static_cast<std::size_t>(u)] =
          d.tree.add(id[static_cast<std::size_t>(raw.tree.tree.parent(u))], raw.tree.tree.token(u), 1.0f, 0.0f,
                     specdec::draft_mode::deterministic);
    }
    const specdec::tree_view tv = d.tree.tree.view();
    std::vector<std::vector<float>> want;
    for (specdec::node_id u = 0; u < tv.size; ++u) {
      std::vector<llama_token> path;
      for (specdec::node_id v = u; v >= 0; v = tv.parent[v]) path.insert(path.begin(), tv.token[v]);
      want.push_back(plain_logits(ref, prompt, path));
    }
    for (const bool bug : {false, true}) {
      tgt.inject_sibling_bug(bug);
      tgt.start(prompt);
      const specdec::view2d<const float> rows = tgt.score_tree(tv);
      float w = 0.0f;
      for (specdec::node_id u = 0; u < tv.size; ++u)
        w = std::max(w, compare_rows(&rows(u, 0), want[static_cast<std::size_t>(u)].data(), V).max_abs);
      (bug ? bug_worst : worst) = std::max(bug ? bug_worst : worst, w);
      for (llama_seq_id sq = 1; sq < 64; ++sq) llama_memory_seq_rm(tgt.ctx().memory(), sq, -1, -1);
    }
    tgt.inject_sibling_bug(false);
  }
  std::printf("F32: max |tree row - path decoded alone| %.3g (tolerance %.3g); with the sibling masking bug %.3g\n",
              static_cast<double>(worst), static_cast<double>(kF32MaxLogitDiff), static_cast<double>(bug_worst));
  CHECK(worst <= kF32MaxLogitDiff);
  CHECK(bug_worst > 10.0f * kF32MaxLogitDiff);  // the negative control must fail the strict check by far

  // Greedy speculation with a 64-node prompt-lookup tree gives exactly the
  // plain greedy text on the F32 model.
  const gen_options go{40, 0.0f, 1, true};
  const run_stats plain = plain_decode(m32, tgt, prompt, go);
  lookup_drafter tree{specdec::prompt_lookup_builder({.max_depth = 6, .max_nodes = 64})};
  const run_stats s = speculate(
      "F32 lookup tree", m32, tgt, [&](std::span<const llama_token> c, draft_output& dd) { tree.draft(c, dd); },
      nullptr, prompt, go);
  std::printf("F32 lookup tree: %lld rounds, %lld accepted, text %s plain greedy\n", static_cast<long long>(s.rounds),
              static_cast<long long>(s.accepted), s.tokens == plain.tokens ? "==" : "!=");
  CHECK(s.tokens == plain.tokens);

  // The same with the round planner sizing each drafted tree (plan_drafted):
  // prefixes of the lookup tree or plain steps, the same greedy text.
  specdec::planner_options po;
  po.max_nodes = 64;
  po.max_depth = 6;
  specdec::round_planner planner(po);
  const run_stats sp = speculate(
      "F32 planned lookup", m32, tgt, [&](std::span<const llama_token> c, draft_output& dd) { tree.draft(c, dd); },
      nullptr, prompt, go, &planner);
  std::printf("F32 planned lookup: %lld rounds (%lld plain), %lld accepted, text %s plain greedy\n",
              static_cast<long long>(sp.rounds), static_cast<long long>(sp.plain_rounds),
              static_cast<long long>(sp.accepted), sp.tokens == plain.tokens ? "==" : "!=");
  CHECK(sp.tokens == plain.tokens);
  CHECK(planner.rounds() == sp.rounds);

  // The oracle cut (a bound for the harness): each round decodes only the
  // path an uncounted pass over the whole draft accepted, so every counted
  // pass accepts all it drafted, the text is plain greedy's, and the
  // uncounted passes leave neither cache cells nor counts behind.
  const run_stats so = speculate(
      "F32 oracle-cut lookup", m32, tgt, [&](std::span<const llama_token> c, draft_output& dd) { tree.draft(c, dd); },
      nullptr, prompt, go, nullptr, true);
  std::printf("F32 oracle-cut lookup: %lld rounds (%lld plain), %lld accepted of %lld drafted\n",
              static_cast<long long>(so.rounds), static_cast<long long>(so.plain_rounds),
              static_cast<long long>(so.accepted), static_cast<long long>(so.drafted));
  CHECK(so.tokens == plain.tokens);
  CHECK(so.accepted == so.drafted);
  // The same rounds as the whole tree's (same drafts, same accepted paths), each in a smaller pass.
  CHECK(so.rounds == s.rounds);
  CHECK(so.accepted == s.accepted);
  CHECK(so.target_tokens < s.target_tokens);
  CHECK(so.target_calls == so.rounds);
  CHECK(so.target_tokens == so.rounds + so.drafted);
  for (llama_seq_id sq = 1; sq < 64; ++sq) CHECK(llama_memory_seq_pos_max(tgt.ctx().memory(), sq) == -1);
  CHECK_THROWS(speculate(
      "planner and oracle", m32, tgt, [&](std::span<const llama_token> c, draft_output& dd) { tree.draft(c, dd); },
      nullptr, prompt, go, &planner, true));
}

TEST_CASE("greedy tree speculation with the self-drafter accepts every draft and reproduces plain greedy text") {
  model& m = the_model();
  const std::vector<llama_token> prompt = m.tokenize(kPrompt);
  tree_target tgt(m, opts());
  const gen_options go{48, 0.0f, 1, true};
  const run_stats plain = plain_decode(m, tgt, prompt, go);
  REQUIRE(plain.tokens.size() == 48);
  CHECK(plain.target_calls == 48);
  for (const std::vector<std::int32_t>& widths :
       {std::vector<std::int32_t>{1, 1, 1, 1}, std::vector<std::int32_t>{2, 2, 1, 1},
        std::vector<std::int32_t>{3, 1, 1}}) {
    level_drafter self(m, opts(), widths, 0.0f);
    self.start();
    const run_stats s = speculate(
        "self", m, tgt, [&](std::span<const llama_token> ctx, draft_output& d) { self.draft(ctx, d); }, &self.ctx(),
        prompt, go);
    const auto depth = static_cast<std::int64_t>(widths.size());
    INFO("widths " << widths.size() << " rounds " << s.rounds << " accepted " << s.accepted);
    CHECK(s.accepted == s.rounds * depth);  // every round accepts a full root-to-leaf path
    CHECK(s.target_calls == s.rounds);
    // One draft decode per tree level below the leaves' level, per round.
    CHECK(s.draft_calls == s.rounds * depth);
    CHECK(same_greedy_text(s.tokens, plain));
  }
}

TEST_CASE("prompt-lookup speculation reproduces plain greedy text; commit leaves the cache of plain decoding") {
  model& m = the_model();
  const auto V = static_cast<std::int64_t>(m.n_vocab());
  const std::vector<llama_token> prompt = m.tokenize(kPrompt);
  tree_target tgt(m, opts());
  tree_target ref(m, opts());
  const gen_options go{40, 0.0f, 1, true};
  const run_stats plain = plain_decode(m, tgt, prompt, go);
  // The library's model-free drafters: prompt lookup as a chain (one match,
  // no threshold) and as a tree, and the suffix tree.
  lookup_drafter chain{specdec::prompt_lookup_builder({.max_matches = 1, .max_depth = 6, .max_nodes = 7})};
  lookup_drafter tree{specdec::prompt_lookup_builder({.max_depth = 6, .max_nodes = 64})};
  suffix_drafter suffix{specdec::suffix_index({.depth = 16, .capacity = 1 << 14}),
                        specdec::suffix_tree_builder({.max_depth = 6, .max_nodes = 64})};
  for (const int which : {0, 1, 2}) {
    const char* name = which == 0 ? "lookup chain" : which == 1 ? "lookup tree" : "suffix tree";
    suffix.start();
    const run_stats s = speculate(
        name, m, tgt,
        [&](std::span<const llama_token> ctx, draft_output& d) {
          if (which == 0) chain.draft(ctx, d);
          if (which == 1) tree.draft(ctx, d);
          if (which == 2) suffix.draft(ctx, d);
          specdec::verify_mode vm = specdec::verify_mode::greedy;
          check(specdec::matching_verify_mode(d.tree, vm), "matching_verify_mode");
          CHECK(vm == specdec::verify_mode::deterministic);  // model-free drafts: the one-hot rule
        },
        nullptr, prompt, go);
    CHECK(same_greedy_text(s.tokens, plain));
    CHECK(s.target_calls == s.rounds);
    // The cache now holds the committed text but its newest token in
    // sequence 0 only; every leaf sequence is gone.
    llama_memory_t mem = tgt.ctx().memory();
    CHECK(llama_memory_seq_pos_min(mem, 0) == 0);
    CHECK(llama_memory_seq_pos_max(mem, 0) == tgt.prefix() - 1);
    for (llama_seq_id sq = 1; sq < 64; ++sq) CHECK(llama_memory_seq_pos_max(mem, sq) == -1);
    // Next-token logits from the speculated cache equal those of plain
    // decoding of the same committed text in a fresh context.
    const std::vector<llama_token> committed = tgt.committed();
    const float* got = tgt.plain_step();
    std::vector<float> got_row(got, got + V);
    ref.start(committed);
    const float* want = ref.plain_step();
    const diff df = compare_rows(got_row.data(), want, V);
    // Negative control: the same text without its newest token.
    ref.start(std::span(committed).first(committed.size() - 1));
    const diff wrong = compare_rows(got_row.data(), ref.plain_step(), V);
    std::printf("%s: %lld rounds, %lld accepted, next-token max |diff| %.3g TV %.3g (wrong context TV %.3g)\n", name,
                static_cast<long long>(s.rounds), static_cast<long long>(s.accepted), static_cast<double>(df.max_abs),
                df.tv, wrong.tv);
    CHECK(df.within());
    CHECK_FALSE(wrong.within());
  }
}

TEST_CASE("sampled speculation runs the lossless mode of its drafts and is reproducible") {
  model& m = the_model();
  const std::vector<llama_token> prompt = m.tokenize(kPrompt);
  tree_target tgt(m, opts());
  const gen_options go{24, 0.8f, 7, false};
  std::vector<llama_token> first;
  for (int rep = 0; rep < 2; ++rep) {
    level_drafter self(m, opts(), {2, 2, 1}, 0.8f, 7);
    self.start();
    const run_stats s = speculate(
        "self sampled", m, tgt, [&](std::span<const llama_token> ctx, draft_output& d) { self.draft(ctx, d); },
        &self.ctx(), prompt, go);
    REQUIRE(s.tokens.size() == 24);
    CHECK(s.accepted > 0);
    if (rep == 0)
      first = s.tokens;
    else
      CHECK(s.tokens == first);  // same seed, same tokens
  }
  draft_output d;
  level_drafter self(m, opts(), {2, 1}, 0.8f, 7);
  self.start();
  self.draft(prompt, d);
  specdec::verify_mode mode{};
  REQUIRE(specdec::matching_verify_mode(d.tree, mode).ok());
  CHECK(mode == specdec::verify_mode::sampled_without_replacement);
  CHECK(d.q.size() == static_cast<std::size_t>(d.tree.size()) * static_cast<std::size_t>(m.n_vocab()));
}

namespace {

// Law of the first emitted token of one round whose root children the
// adapter's drafter sampled without replacement from q, verified with
// `mode`; the target row p and the draft row q are real SmolLM2 rows.
std::vector<std::int64_t> first_token_counts(const std::vector<float>& p_root, const std::vector<float>& q_root,
                                             specdec::verify_mode mode, std::int32_t width, std::int32_t trials) {
  const auto V = static_cast<std::int64_t>(p_root.size());
  const auto n = static_cast<std::size_t>(width + 1);
  std::vector<float> p(n * static_cast<std::size_t>(V), 1.0f / static_cast<float>(V));
  std::vector<float> q = p;
  std::copy(p_root.begin(), p_root.end(), p.begin());
  std::copy(q_root.begin(), q_root.end(), q.begin());
  std::vector<std::int64_t> counts(static_cast<std::size_t>(V));
  std::vector<float> scratch(static_cast<std::size_t>(V));
  std::vector<std::uint64_t> ws;
  std::vector<specdec::node_id> path(n);
  std::vector<specdec::token_id> toks(n);
  specdec::drafted_tree t;
  for (std::int32_t trial = 0; trial < trials; ++trial) {
    const auto round = static_cast<std::uint32_t>(trial);
    std::copy(q_root.begin(), q_root.end(), scratch.begin());
    const specdec::rng_stream draft_rng =
        specdec::for_purpose(specdec::rng_stream{99, 0, round}, specdec::rng_purpose::draft);
    t.reset(0);
    for (llama_token x : sample_without_replacement(scratch, width, draft_rng, 0))
      t.add(0, x, 1.0f, 0.0f, specdec::draft_mode::without_replacement);
    const specdec::tree_view tv = t.tree.view();
    const auto rows = static_cast<std::int64_t>(tv.size);
    specdec::verify_params vp;
    vp.mode = mode;
    vp.seed = 99;
    vp.round = round;
    ws.resize((specdec::verify_workspace_size(V, tv.size) + 7) / 8);
    specdec::verify_result r;
    REQUIRE(specdec::verify_tree(tv, specdec::make_view(static_cast<const float*>(p.data()), rows, V),
                                 specdec::make_view(static_cast<const float*>(q.data()), rows, V), vp,
                                 std::as_writable_bytes(std::span(ws)), path, toks, r)
                .ok());
    ++counts[static_cast<std::size_t>(toks[0])];
  }
  return counts;
}

// Pearson chi-square p-value of `counts` against `prob` (cells with an
// expected count below 5 pooled).
double chi_square_p(const std::vector<std::int64_t>& counts, const std::vector<float>& prob) {
  double n = 0;
  for (auto c : counts) n += static_cast<double>(c);
  double chi2 = 0, po = 0, pe = 0;
  int cells = 0;
  for (std::size_t i = 0; i < counts.size(); ++i) {
    const double e = static_cast<double>(prob[i]) * n, o = static_cast<double>(counts[i]);
    if (e < 5) {
      po += o;
      pe += e;
      continue;
    }
    chi2 += (o - e) * (o - e) / e;
    ++cells;
  }
  if (pe > 0) {
    chi2 += (po - pe) * (po - pe) / pe;
    ++cells;
  }
  return cells > 1 ? vtest::gamma_q(0.5 * (cells - 1), 0.5 * chi2) : 1.0;
}

}  // namespace

TEST_CASE("sampled drafts of the adapter verified losslessly follow the target law (real rows, chi-square)") {
  model& m = the_model();
  const auto V = static_cast<std::int64_t>(m.n_vocab());
  const std::vector<llama_token> prompt = m.tokenize(kPrompt);
  tree_target tgt(m, opts());
  tgt.start(prompt);
  specdec::drafted_tree root;
  root.reset(prompt.back());
  const specdec::view2d<const float> logits = tgt.score_tree(root.tree.view());
  // p: the target row at temperature 1.5; q: the same row at temperature
  // 0.5, so the drafts come from a sharper, clearly different distribution.
  std::vector<float> p_root(static_cast<std::size_t>(V)), q_root(static_cast<std::size_t>(V));
  const specdec::sampling_params sp{1.5f, 0, 1.0f, 0.0f}, sq{0.5f, 0, 1.0f, 0.0f};
  REQUIRE(specdec::logits_to_probs_row(logits.slice(0), specdec::make_view(p_root.data(), V), sp, {}).ok());
  REQUIRE(specdec::logits_to_probs_row(logits.slice(0), specdec::make_view(q_root.data(), V), sq, {}).ok());
  const std::int32_t trials = 20000;
  std::printf(
      "chi-square, %d trials per mode, 3 children sampled without replacement, seed 99; max p %.3f, max q %.3f\n",
      trials, static_cast<double>(*std::max_element(p_root.begin(), p_root.end())),
      static_cast<double>(*std::max_element(q_root.begin(), q_root.end())));
  const auto ok = first_token_counts(p_root, q_root, specdec::verify_mode::sampled_without_replacement, 3, trials);
  const double ok_p = chi_square_p(ok, p_root);
  const double wrong_law_p = chi_square_p(ok, q_root);
  const double iid_p =
      chi_square_p(first_token_counts(p_root, q_root, specdec::verify_mode::sampled_iid, 3, trials), p_root);
  // Exact too: the one-hot rule is lossless for any drafts chosen
  // independently of the verifier's uniforms (it only accepts less).
  const double det_p =
      chi_square_p(first_token_counts(p_root, q_root, specdec::verify_mode::deterministic, 3, trials), p_root);
  std::printf("  sampled_without_replacement (the matching rule) vs p: p-value %.3g\n", ok_p);
  std::printf("  deterministic (one-hot) vs p: p-value %.3g\n", det_p);
  std::printf("  negative controls: the same counts vs q: p-value %.3g; sampled_iid rule vs p: p-value %.3g\n",
              wrong_law_p, iid_p);
  CHECK(ok_p > 1e-3);
  CHECK(det_p > 1e-3);
  CHECK(wrong_law_p < 1e-6);
  CHECK(iid_p < 1e-6);  // MSS without renormalizing q after a rejection is biased for these drafts
}

TEST_CASE("a long prompt decodes to the end with the largest tree of each method; a full cache shrinks the round") {
  model& m = the_model();
  std::string text;
  for (int i = 0; i < 6; ++i) text += kPrompt;
  const std::vector<llama_token> prompt = m.tokenize(text);
  const std::int32_t depth = 8, n_predict = 160;
  lookup_drafter lookup{specdec::prompt_lookup_builder({.max_depth = depth, .max_nodes = 64})};
  suffix_drafter suffix{specdec::suffix_index({.depth = 24, .capacity = 1 << 15}),
                        specdec::suffix_tree_builder({.max_depth = depth, .max_nodes = 64})};
  const std::vector<std::int32_t> widths{2, 2, 1, 1, 1, 1, 1, 1};  // the self-draft tree: 2 + 4 * 7 nodes + root
  context_options o = opts();
  o.n_ctx = context_cells(prompt.size(), n_predict, 64, depth);
  o.n_batch = std::max<std::int32_t>(128, static_cast<std::int32_t>(prompt.size()));
  std::printf("long prompt: %zu tokens, n_predict %d, n_ctx %d\n", prompt.size(), n_predict, o.n_ctx);
  const gen_options go{n_predict, 0.0f, 1, false};  // no stop at end-of-generation: run to n_predict
  {
    tree_target tgt(m, o);
    const run_stats a = speculate(
        "lookup", m, tgt, [&](std::span<const llama_token> c, draft_output& d) { lookup.draft(c, d); }, nullptr, prompt,
        go);
    CHECK(a.tokens.size() == static_cast<std::size_t>(n_predict));
    CHECK(a.shrunk == 0);
    suffix.start();
    const run_stats b = speculate(
        "suffix", m, tgt, [&](std::span<const llama_token> c, draft_output& d) { suffix.draft(c, d); }, nullptr, prompt,
        go);
    CHECK(b.tokens.size() == static_cast<std::size_t>(n_predict));
    CHECK(b.shrunk == 0);
    level_drafter self(m, o, widths, 0.0f);
    self.start();
    const run_stats c = speculate(
        "self", m, tgt, [&](std::span<const llama_token> x, draft_output& d) { self.draft(x, d); }, &self.ctx(), prompt,
        go);
    CHECK(c.tokens.size() == static_cast<std::size_t>(n_predict));
    CHECK(c.shrunk == 0);
    std::printf("long prompt: lookup %lld rounds (%lld accepted), suffix %lld (%lld), self-draft tree %lld (%lld)\n",
                static_cast<long long>(a.rounds), static_cast<long long>(a.accepted), static_cast<long long>(b.rounds),
                static_cast<long long>(b.accepted), static_cast<long long>(c.rounds),
                static_cast<long long>(c.accepted));
  }
  // A cache too small for the largest tree near its end (llama.cpp pads
  // n_ctx to a multiple of 256): rounds that find no cells are cut in
  // half and the generation still reaches n_predict.
  const std::int32_t cells = (static_cast<std::int32_t>(prompt.size()) + n_predict + 255) / 256 * 256;
  o.n_ctx = cells;
  const std::int32_t tight = cells - static_cast<std::int32_t>(prompt.size()) - 4;
  tree_target small(m, o);
  const run_stats t = speculate(
      "63-node chain", m, small,
      [&](std::span<const llama_token> c, draft_output& d) {  // a 63-node chain of the newest token
        d.q.clear();
        d.tree.reset(c.back());
        for (specdec::node_id u = 0; u < 62; ++u)
          d.tree.add(u, c.back(), 1.0f, 0.0f, specdec::draft_mode::deterministic);
      },
      nullptr, prompt, gen_options{tight, 0.0f, 1, false});
  std::printf("tight cache: %d cells, %d tokens generated, %lld rounds shrunk\n", cells,
              static_cast<int>(t.tokens.size()), static_cast<long long>(t.shrunk));
  CHECK(t.tokens.size() == static_cast<std::size_t>(tight));
  CHECK(t.shrunk > 0);
}

TEST_CASE("generation ends at an end-of-generation token committed in the middle of a round") {
  // A round can commit tokens past the end-of-generation token: they are
  // not output, and decoding must stop there (it went on to n_predict, which
  // counted target calls after the end: 127 calls for 70 tokens measured).
  model& m = the_model();
  const llama_token eog = llama_vocab_eos(m.vocab()), a = m.tokenize("a").back();
  REQUIRE(llama_vocab_is_eog(m.vocab(), eog));
  const gen_options go{40, 0.0f, 1, true};
  const std::vector<llama_token> prompt{a, a};
  std::vector<llama_token> committed = prompt;
  committed.insert(committed.end(), {a, a});
  CHECK_FALSE(detail::done(m, committed, prompt.size(), go));
  committed.insert(committed.end(), {eog, a, a});  // one round: the end, then two more accepted drafts
  CHECK(detail::done(m, committed, prompt.size(), go));
  CHECK(detail::generated(m, committed, prompt.size(), go).size() == 3);
  CHECK_FALSE(detail::done(m, committed, prompt.size(), gen_options{40, 0.0f, 1, false}));
}

TEST_CASE("layer_skip_copy: the first K blocks byte for byte, loadable; bad block counts refused, nothing written") {
  const std::string src = SPECDEC_LLAMA_MODEL;
  const std::string copy = layer_skip_copy(src, 2);
  // Reference: every tensor of the source but blocks 2 and up, with the same bytes.
  ggml_context *sd = nullptr, *cd = nullptr;
  gguf_context* s = gguf_init_from_file(src.c_str(), gguf_init_params{false, &sd});
  gguf_context* c = gguf_init_from_file(copy.c_str(), gguf_init_params{false, &cd});
  REQUIRE(s != nullptr);
  REQUIRE(c != nullptr);
  std::int64_t kept = 0;
  for (std::int64_t i = 0; i < gguf_get_n_tensors(s); ++i) {
    const std::string name = gguf_get_tensor_name(s, i);
    const bool want = !name.starts_with("blk.") || std::atoi(name.c_str() + 4) < 2;
    INFO(name);
    CHECK((gguf_find_tensor(c, name.c_str()) >= 0) == want);
    if (!want) continue;
    ++kept;
    const ggml_tensor* a = ggml_get_tensor(sd, name.c_str());
    const ggml_tensor* b = ggml_get_tensor(cd, name.c_str());
    REQUIRE(b != nullptr);
    CHECK(a->type == b->type);
    REQUIRE(ggml_nbytes(a) == ggml_nbytes(b));
    CHECK(std::memcmp(a->data, b->data, ggml_nbytes(a)) == 0);
  }
  CHECK(gguf_get_n_tensors(c) == kept);
  CHECK(gguf_get_val_u32(c, gguf_find_key(c, "llama.block_count")) == 2);
  gguf_free(c);
  gguf_free(s);
  ggml_free(cd);
  ggml_free(sd);
  const model drafter(copy);
  CHECK(llama_model_n_layer(drafter.get()) == 2);
  CHECK(drafter.n_vocab() == the_model().n_vocab());
  for (const std::int32_t bad : {0, -1, 30, 31}) {  // the source has 30 blocks
    INFO("K = " << bad);
    CHECK_THROWS_AS(layer_skip_copy(src, bad), llama_error);
    const std::string out = src.substr(0, src.rfind('.')) + ".first" + std::to_string(bad) + ".gguf";
    CHECK(std::fopen(out.c_str(), "rb") == nullptr);
  }
}

TEST_CASE("bad trees are rejected before anything is decoded") {
  model& m = the_model();
  const std::vector<llama_token> prompt = m.tokenize(kPrompt);
  context_options o = opts();
  o.n_seq_max = 4;
  tree_target tgt(m, o);
  tgt.start(prompt);
  specdec::drafted_tree t;
  t.reset(prompt.back() + 1);  // root is not the newest committed token
  CHECK_THROWS_AS(tgt.score_tree(t.tree.view()), llama_error);
  t.reset(prompt.back());
  for (int i = 0; i < 4; ++i) t.add(0, i, 1.0f, 0.0f, specdec::draft_mode::deterministic);  // 4 leaves > 3
  CHECK_THROWS_AS(tgt.score_tree(t.tree.view()), llama_error);
  t.reset(prompt.back());
  t.add(0, m.n_vocab(), 1.0f, 0.0f, specdec::draft_mode::deterministic);  // token id out of range
  CHECK_THROWS_AS(tgt.score_tree(t.tree.view()), llama_error);
  CHECK(tgt.ctx().calls() == 0);
  for (llama_seq_id sq = 1; sq < 4; ++sq) CHECK(llama_memory_seq_pos_max(tgt.ctx().memory(), sq) == -1);
}

int main(int argc, char** argv) {
  llama_log_set(
      [](ggml_log_level level, const char* text, void*) {
        if (level == GGML_LOG_LEVEL_ERROR) std::fputs(text, stderr);
      },
      nullptr);
  llama_backend_init();
  const int rc = Catch::Session().run(argc, argv);
  llama_backend_free();
  return rc;
}
