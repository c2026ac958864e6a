// Tests of the llama.cpp adapter with the real SmolLM2-135M model (CPU,
// flash attention off, 2 threads). Needs the cache of fetch_build.sh; run
// with `bash examples/llama_cpp/run.sh --test`.
//
// Tolerance: a tree pass decodes many tokens in one batch, plain decoding
// one at a time; ggml may then take other kernels (and summation orders) for
// the same matrix products, so logits are compared with
// |a - b| <= kAbsTol + kRelTol * |b| and the argmax must agree whenever the
// top two plain logits are more than 2 * kAbsTol apart.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <random>

#include "speculate.hpp"

using namespace specdec_llama;

namespace {

constexpr float kAbsTol = 2e-2f;
constexpr float kRelTol = 1e-3f;

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
  o.threads = 2;
  return o;
}

struct diff {
  float max_abs = 0.0f;
  bool within = true;
  bool argmax_ok = true;
};

diff compare_rows(const float* a, const float* b, std::int64_t V) {
  diff d;
  for (std::int64_t i = 0; i < V; ++i) {
    const float e = std::fabs(a[i] - b[i]);
    d.max_abs = std::max(d.max_abs, e);
    if (!(e <= kAbsTol + kRelTol * std::fabs(b[i]))) d.within = false;
  }
  const auto ia = specdec::argmax_row(specdec::make_view(a, V));
  const auto ib = specdec::argmax_row(specdec::make_view(b, V));
  float top = -INFINITY, second = -INFINITY;
  for (std::int64_t i = 0; i < V; ++i) {
    if (b[i] > top) {
      second = top;
      top = b[i];
    } else if (b[i] > second) {
      second = b[i];
    }
  }
  if (ia != ib && top - second > 2 * kAbsTol) d.argmax_ok = false;
  return d;
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
  for (int trial = 0; trial < 4; ++trial) {
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
    for (specdec::node_id u = 0; u < n; ++u) {
      std::vector<llama_token> path;
      for (specdec::node_id v = u; v >= 0; v = tv.parent[v]) path.insert(path.begin(), tv.token[v]);
      const std::vector<float> want = plain_logits(ref, prompt, path);
      const diff df = compare_rows(&rows(u, 0), want.data(), V);
      worst = std::max(worst, df.max_abs);
      INFO("trial " << trial << " node " << u << " depth " << tv.depth[u] << " max |diff| " << df.max_abs);
      CHECK(df.within);
      CHECK(df.argmax_ok);
    }
    std::printf("trial %d: %d nodes, max |tree - plain| logit difference %.3g\n", trial, n, static_cast<double>(worst));
  }
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
    CHECK(s.tokens == plain.tokens);
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
  for (std::int32_t branches : {1, 4}) {
    prompt_lookup_drafter pl{3, 1, 6, branches, 64};
    const run_stats s = speculate(
        "lookup", m, tgt, [&](std::span<const llama_token> ctx, draft_output& d) { pl.draft(ctx, d); }, nullptr, prompt,
        go);
    CHECK(s.tokens == plain.tokens);
    CHECK(s.target_calls == s.rounds);
    // The cache now holds the committed text but its newest token in
    // sequence 0 only; every leaf sequence is gone.
    llama_memory_t mem = tgt.ctx().memory();
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
    std::printf("lookup branches %d: %lld rounds, %lld accepted, next-token max |diff| %.3g\n", branches,
                static_cast<long long>(s.rounds), static_cast<long long>(s.accepted), static_cast<double>(df.max_abs));
    CHECK(df.within);
    CHECK(df.argmax_ok);
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
  CHECK(tgt.ctx().calls() == 0);
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
