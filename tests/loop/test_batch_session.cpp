// batched_session: one forward per round over ragged trees with per-request
// seeds, sampling and rules; request r's tokens equal a single session's.
#include <catch2/catch.hpp>

#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "loop/loop_models.hpp"
#include "specdec/draft/sampled_tree.hpp"
#include "specdec/loop/batch_session.hpp"
#include "specdec/loop/session.hpp"

using namespace specdec;

static_assert(batch_target_model<looptest::batch_target>);
static_assert(batch_kv_committing_target<looptest::batch_target>);
static_assert(!batch_target_model<looptest::target>);
static_assert(!target_model<looptest::batch_target>);

TEST_CASE("batched session: request r equals a single session with the same options; KV committed per request") {
  constexpr int V = 30;
  const looptest::table tm{.V = V, .seed = 8};
  looptest::drafter d{{.V = V, .seed = 9}};
  std::vector<sampled_tree_options> bo = {{.mode = draft_mode::iid, .widths = {3, 2}, .vocab_size = V},
                                          {.mode = draft_mode::without_replacement, .widths = {4}, .vocab_size = V},
                                          {.mode = draft_mode::iid, .widths = {1, 1, 1, 1}, .vocab_size = V},
                                          {.mode = draft_mode::iid, .widths = {2, 2, 2}, .vocab_size = V},
                                          {.mode = draft_mode::without_replacement, .widths = {2, 2}, .vocab_size = V}};
  std::vector<session_options> so(bo.size());
  for (std::size_t r = 0; r < so.size(); ++r) {
    so[r].vocab_size = V;
    so[r].seed = 100 + r;
    so[r].request = static_cast<std::uint32_t>(r);
    so[r].max_tokens = 40 + 7 * static_cast<std::int32_t>(r);
  }
  so[1].sampling.temperature = 0.0f;  // greedy next to sampled requests
  so[2].sampling.top_k = 5;
  so[3].stop_tokens = {3, 4};
  so[4].sampling.min_p = 0.1f;
  std::vector<sampled_tree_builder> builders;
  for (const auto& o : bo) builders.emplace_back(o);
  batched_session<sampled_tree_builder> batch(builders, so);
  const std::vector<std::vector<token_id>> prompts = {{1, 2}, {3}, {4, 5, 6}, {7, 8}, {9}};
  looptest::batch_target bt{tm, 0, std::vector<std::vector<std::int32_t>>(5, std::vector<std::int32_t>(512, -1)),
                            std::vector<std::int32_t>(5, 0)};
  for (std::size_t r = 0; r < so.size(); ++r) {
    REQUIRE(batch.start(r, prompts[r]).ok());
    for (std::size_t p = 0; p + 1 < prompts[r].size(); ++p) bt.cache[r][p] = prompts[r][p];
    bt.len[r] = static_cast<std::int32_t>(prompts[r].size()) - 1;
  }
  int rounds = 0;
  while (!batch.done()) {
    const status st = batch.round(d, bt);
    if (!st.ok()) FAIL(st.message());
    ++rounds;
  }
  CHECK(bt.forwards == rounds);  // one target pass per round for the whole batch
  for (std::size_t r = 0; r < so.size(); ++r) {
    looptest::target tgt{tm};
    speculative_session s(sampled_tree_builder(bo[r]), so[r]);
    const auto ref = s.generate(d, tgt, prompts[r]);
    const auto got = batch.generated_tokens(r);
    INFO("request " << r);
    CHECK(std::vector<token_id>(got.begin(), got.end()) == std::vector<token_id>(ref.begin(), ref.end()));
    const auto all = batch.tokens(r);
    REQUIRE(bt.len[r] == static_cast<std::int32_t>(all.size()) - 1);
    for (std::int32_t p = 0; p < bt.len[r]; ++p)
      CHECK(bt.cache[r][static_cast<std::size_t>(p)] == all[static_cast<std::size_t>(p)]);
  }
  // Request 1 is greedy: equal to plain greedy decoding.
  const auto g = looptest::greedy_decode(tm, prompts[1], so[1].max_tokens);
  const auto got = batch.generated_tokens(1);
  CHECK(std::vector<token_id>(got.begin(), got.end()) == g);
}

TEST_CASE("batched session on caller round uniforms: request r equals a single session on the same uniforms") {
  constexpr int V = 30;
  const looptest::table tm{.V = V, .seed = 8};
  looptest::drafter d{{.V = V, .seed = 9}};
  const std::vector<sampled_tree_options> bo = {
      {.mode = draft_mode::iid, .widths = {3, 2}, .vocab_size = V},
      {.mode = draft_mode::without_replacement, .widths = {2, 2}, .vocab_size = V},
      {.mode = draft_mode::iid, .widths = {1, 1, 1}, .vocab_size = V}};
  std::vector<session_options> so(bo.size());
  for (std::size_t r = 0; r < so.size(); ++r) {
    so[r].vocab_size = V;
    so[r].request = static_cast<std::uint32_t>(r);
    so[r].max_tokens = 30;
  }
  // Uniforms of request r in round k: a std::mt19937_64 keyed by (r, k), so
  // the single sessions can be handed the same ones. Request 2 keeps Philox
  // for verification (a half left unset).
  constexpr std::int32_t draft_draws = V, verify_draws = 4, nodes = 16;
  const auto buffers = [&](std::size_t r, std::int32_t k, std::vector<double>& du, std::vector<double>& vu) {
    std::mt19937_64 gen(1000003ull * r + static_cast<std::uint64_t>(k));
    std::uniform_real_distribution<double> unif(0.0, 1.0);
    du.resize(static_cast<std::size_t>(nodes * draft_draws));
    vu.resize(static_cast<std::size_t>(nodes * verify_draws));
    for (auto& x : du) x = unif(gen);
    for (auto& x : vu) x = unif(gen);
    round_uniforms ru{{du.data(), nodes, draft_draws}, {vu.data(), nodes, verify_draws}};
    if (r == 2) ru.verify = caller_uniforms{nullptr, 0, 0};
    return ru;
  };
  std::vector<sampled_tree_builder> builders;
  for (const auto& o : bo) builders.emplace_back(o);
  batched_session<sampled_tree_builder> batch(builders, so);
  const std::vector<std::vector<token_id>> prompts = {{1, 2}, {3}, {4, 5, 6}};
  looptest::batch_target bt{tm, 0, std::vector<std::vector<std::int32_t>>(3, std::vector<std::int32_t>(512, -1)),
                            std::vector<std::int32_t>(3, 0)};
  for (std::size_t r = 0; r < so.size(); ++r) {
    REQUIRE(batch.start(r, prompts[r]).ok());
    for (std::size_t p = 0; p + 1 < prompts[r].size(); ++p) bt.cache[r][p] = prompts[r][p];
    bt.len[r] = static_cast<std::int32_t>(prompts[r].size()) - 1;
  }
  std::vector<std::vector<double>> du(3), vu(3);
  std::vector<round_uniforms> ru(3);
  CHECK(batch.round(d, bt, std::span<const round_uniforms>(ru.data(), 2)) == status_code::invalid_argument);
  for (std::int32_t k = 0; !batch.done(); ++k) {
    for (std::size_t r = 0; r < 3; ++r) ru[r] = buffers(r, k, du[r], vu[r]);
    const status st = batch.round(d, bt, ru);
    if (!st.ok()) FAIL(st.message());
  }
  for (std::size_t r = 0; r < so.size(); ++r) {
    looptest::target tgt{tm};
    speculative_session s(sampled_tree_builder(bo[r]), so[r]);
    REQUIRE(s.start(prompts[r]).ok());
    std::vector<double> a, b;
    for (std::int32_t k = 0; !s.done(); ++k) REQUIRE(s.round(d, tgt, buffers(r, k, a, b)).ok());
    const auto got = batch.generated_tokens(r);
    const auto ref = s.generated_tokens();
    INFO("request " << r);
    CHECK(std::vector<token_id>(got.begin(), got.end()) == std::vector<token_id>(ref.begin(), ref.end()));
  }
}

TEST_CASE("batched session errors") {
  std::vector<session_options> so(2);
  so[0].vocab_size = 8;
  so[1].vocab_size = 9;
  batched_session<sampled_tree_builder> b({sampled_tree_builder(), sampled_tree_builder()}, so);
  const std::vector<token_id> p = {1};
  CHECK(b.start(0, p).ok());
  CHECK(b.start(1, p) == status_code::invalid_argument);  // vocab sizes differ
  CHECK(b.start(2, p) == status_code::invalid_argument);
  batched_session<sampled_tree_builder> c({sampled_tree_builder()}, so);
  CHECK(c.start(0, p) == status_code::size_mismatch);
}
