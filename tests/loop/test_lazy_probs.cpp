// Lazy conversion of target rows: the sessions convert a node's logits to
// probabilities only when the verification walk first reads the row. Checked
// against the round composed eagerly from the primitives (every row through
// logits_to_probs, then verify_tree): same tokens for every rule and for
// greedy / temperature / top-k / top-p / min-p, and the number of rows
// converted is the number the walk visits.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <vector>

#include "loop/loop_models.hpp"
#include "specdec/draft/sampled_tree.hpp"
#include "specdec/draft/topk_tree.hpp"
#include "specdec/loop/batch_session.hpp"
#include "specdec/loop/session.hpp"
#include "specdec/tree/mask.hpp"
#include "specdec/tree/positions.hpp"
#include "specdec/verify/distribution.hpp"
#include "specdec/verify/tree_verify.hpp"

using namespace specdec;

namespace {

// The round as the primitives compose it with every row converted up front.
template <class Builder>
std::vector<token_id> eager_generate(Builder b, looptest::drafter& d, looptest::target& tgt, const session_options& o,
                                     std::vector<token_id> hist) {
  const std::int64_t V = o.vocab_size;
  const std::size_t prompt_len = hist.size();
  const auto bound = static_cast<std::size_t>(std::max<std::int32_t>(b.node_bound(), 1));
  std::vector<float> q(bound * static_cast<std::size_t>(V)), logits, probs;
  std::vector<position_id> pos;
  std::vector<std::uint64_t> mask;
  std::vector<std::byte> fws(logits_to_probs_workspace_size(V, o.sampling)), vws;
  std::vector<node_id> path;
  std::vector<token_id> emitted;
  drafted_tree tree;
  for (std::uint32_t round = 0; hist.size() - prompt_len < static_cast<std::size_t>(o.max_tokens); ++round) {
    const auto cache_len = static_cast<position_id>(hist.size() - 1);
    const std::span<const token_id> before(hist.data(), hist.size() - 1);
    draft_round dr;
    dr.root_token = hist.back();
    dr.rng = rng_stream{o.seed, o.request, round};
    dr.history = before;
    dr.q_rows = make_view(q.data(), static_cast<std::int64_t>(bound), V);
    REQUIRE(b.build(d, dr, tree).ok());
    verify_mode m{};
    REQUIRE(choose_verify_mode(tree, o, m).ok());
    const std::int32_t n = tree.size();
    const auto parents = tree.tree.parents();
    pos.resize(static_cast<std::size_t>(n));
    REQUIRE(build_positions<position_id>(parents, cache_len, pos).ok());
    const std::int64_t words = mask_words_per_row<std::uint64_t>(n);
    mask.resize(static_cast<std::size_t>(n * words));
    REQUIRE(build_packed_mask<std::uint64_t>(parents, mask).ok());
    logits.resize(static_cast<std::size_t>(n * V));
    const auto lv = make_view(logits.data(), std::int64_t{n}, V);
    REQUIRE(tgt.forward(tree_forward{before, cache_len, tree.tree.view(), pos, mask, words, lv}).ok());
    view2d<const float> p = lv.as_const();
    if (m != verify_mode::greedy) {
      probs.resize(logits.size());
      const auto pv = make_view(probs.data(), std::int64_t{n}, V);
      REQUIRE(logits_to_probs<float>(p, pv, std::span<const sampling_params>(&o.sampling, 1), fws).ok());
      p = pv.as_const();
    }
    verify_params vp;
    vp.mode = m;
    vp.seed = o.seed;
    vp.request = o.request;
    vp.round = round;
    vp.typical_epsilon = o.typical_epsilon;
    vp.typical_delta = o.typical_delta;
    const auto qv = uses_draft_probs(m) ? make_view<const float>(q.data(), std::int64_t{n}, V) : view2d<const float>{};
    vws.resize(verify_workspace_size(V, n));
    path.resize(static_cast<std::size_t>(n));
    emitted.resize(static_cast<std::size_t>(n));
    verify_result res;
    REQUIRE(verify_tree(tree.tree.view(), p, qv, vp, vws, path, emitted, res).ok());
    auto k = std::min(static_cast<std::size_t>(res.accepted) + 1,
                      static_cast<std::size_t>(o.max_tokens) - (hist.size() - prompt_len));
    hist.insert(hist.end(), emitted.begin(), emitted.begin() + static_cast<std::ptrdiff_t>(k));
  }
  return std::vector<token_id>(hist.begin() + static_cast<std::ptrdiff_t>(prompt_len), hist.end());
}

struct sampling_case {
  const char* name;
  sampling_params sp;
};

const sampling_case sampling_cases[] = {
    {"T=1", {1.0f, 0, 1.0f, 0.0f}},
    {"T=0 (greedy)", {0.0f, 0, 1.0f, 0.0f}},
    {"T=0.7 top_k=8", {0.7f, 8, 1.0f, 0.0f}},
    {"T=1 top_p=0.8", {1.0f, 0, 0.8f, 0.0f}},
    {"T=1.3 min_p=0.1", {1.3f, 0, 1.0f, 0.1f}},
    {"T=0.9 top_k=12 top_p=0.9 min_p=0.05", {0.9f, 12, 0.9f, 0.05f}},
};

// Runs the session round by round next to the eager composition; checks
// equal tokens and the number of converted rows.
template <class Builder>
void compare(const Builder& b, session_options o, const char* what) {
  constexpr int V = 40;
  const looptest::table tm{.V = V, .seed = 21};
  looptest::drafter d{{.V = V, .seed = 22}};
  const std::vector<token_id> prompt = {5, 6, 7};
  for (const auto& sc : sampling_cases) {
    for (std::uint64_t seed = 1; seed <= 4; ++seed) {
      o.vocab_size = V;
      o.seed = 1000 * seed + 17;
      o.max_tokens = 30;
      o.sampling = sc.sp;
      INFO(what << ", " << sc.name << ", seed " << o.seed);
      looptest::target t1{tm};
      const auto ref = eager_generate(b, d, t1, o, prompt);
      looptest::target t2{tm};
      speculative_session<Builder> s(b, o);
      REQUIRE(s.start(prompt).ok());
      std::int64_t nodes = 0;
      while (!s.done()) {
        const status st = s.round(d, t2);
        if (!st.ok()) FAIL(st.message());
        const round_stats& r = s.last_round();
        nodes += r.tree_nodes;
        if (r.mode == verify_mode::greedy) {
          CHECK(r.probs_rows == 0);
        } else if (r.mode == verify_mode::sampled_iid || r.mode == verify_mode::sampled_without_replacement ||
                   r.mode == verify_mode::deterministic || r.mode == verify_mode::naive_matching) {
          CHECK(r.probs_rows == r.accepted + 1);  // the accepted path's rows and the emitting node's
        } else {
          CHECK(r.probs_rows >= r.accepted + 1);
          CHECK(r.probs_rows <= r.tree_nodes);
        }
      }
      const auto got = s.generated_tokens();
      CHECK(std::vector<token_id>(got.begin(), got.end()) == ref);
      if (!sc.sp.is_greedy()) CHECK(s.stats().probs_rows <= nodes);
    }
  }
}

}  // namespace

TEST_CASE("lazy conversion gives the tokens of eager conversion, every rule and sampling setting") {
  session_options o;
  SECTION("i.i.d. tree, sampled_iid") {
    compare(sampled_tree_builder({.mode = draft_mode::iid, .widths = {3, 2, 2}, .vocab_size = 40}), o, "iid");
  }
  SECTION("without-replacement tree, sampled_without_replacement") {
    compare(sampled_tree_builder({.mode = draft_mode::without_replacement, .widths = {3, 2}, .vocab_size = 40}), o,
            "wor");
  }
  SECTION("top-k tree, deterministic") {
    compare(topk_tree_builder({.k = 3, .depth = 3, .vocab_size = 40}), o, "top-k");
  }
  o.lossy = lossy_opt_in::mismatched_rule;  // forces every rule on the same trees
  SECTION("traversal, traversal without replacement, naive matching, typical") {
    const sampled_tree_builder iid({.mode = draft_mode::iid, .widths = {3, 2, 2}, .vocab_size = 40});
    const sampled_tree_builder wor({.mode = draft_mode::without_replacement, .widths = {3, 2}, .vocab_size = 40});
    o.rule = verify_mode::traversal;
    compare(iid, o, "traversal");
    o.rule = verify_mode::traversal_without_replacement;
    compare(wor, o, "traversal wor");
    o.rule = verify_mode::naive_matching;
    compare(iid, o, "naive matching");
    o.rule = verify_mode::typical_lossy;
    compare(iid, o, "typical");
  }
  SECTION("chain, block") {
    o.rule = verify_mode::block;
    compare(sampled_tree_builder({.mode = draft_mode::iid, .widths = {1, 1, 1, 1}, .vocab_size = 40}), o, "block");
  }
}

TEST_CASE("lazy conversion: a bad row is reported only when the walk reads it") {
  constexpr int V = 16;
  session_options o;
  o.vocab_size = V;
  o.max_tokens = 8;
  looptest::drafter d{{.V = V, .seed = 2}};
  // NaN in the root's row (always read): non_finite, index = the row.
  struct nan_row_target : looptest::target {
    node_id bad = 0;
    status forward(const tree_forward& f) {
      SPECDEC_TRY(looptest::target::forward(f));
      if (bad < f.tree.size) f.logits(bad, 3) = std::numeric_limits<float>::quiet_NaN();
      return status::success();
    }
  };
  nan_row_target t{{{.V = V, .seed = 1}}};
  speculative_session s(sampled_tree_builder({.mode = draft_mode::iid, .widths = {2, 2}, .vocab_size = V}), o);
  const std::vector<token_id> prompt = {1, 2};
  REQUIRE(s.start(prompt).ok());
  const status st = s.round(d, t);
  CHECK(st == status_code::non_finite);
  CHECK(st.index() == 0);
  CHECK(s.generated_tokens().empty());
  // A row of a node the walk never reaches is neither converted nor checked:
  // node 2 is the root's second child; the round fails exactly when the walk
  // accepts it (then its row is read).
  int ok = 0, failed = 0;
  for (std::uint64_t seed = 0; seed < 64; ++seed) {
    t.bad = 2;
    REQUIRE(s.start(prompt, seed).ok());
    const status r = s.round(d, t);
    if (r.ok()) {
      ++ok;
    } else {
      CHECK(r == status_code::non_finite);
      CHECK(r.index() == 2);
      ++failed;
    }
  }
  std::printf("lazy NaN row: %d rounds never read it, %d did\n", ok, failed);
  CHECK(ok > 0);
  CHECK(failed > 0);
}

TEST_CASE("batched session converts only the rows its walks read") {
  constexpr int V = 30;
  const looptest::table tm{.V = V, .seed = 8};
  looptest::drafter d{{.V = V, .seed = 9}};
  std::vector<session_options> so(3);
  for (std::size_t r = 0; r < so.size(); ++r) {
    so[r].vocab_size = V;
    so[r].seed = 50 + r;
    so[r].request = static_cast<std::uint32_t>(r);
    so[r].max_tokens = 30;
  }
  so[1].sampling.temperature = 0.0f;
  so[2].sampling.top_p = 0.85f;
  const sampled_tree_options bo{.mode = draft_mode::iid, .widths = {3, 2}, .vocab_size = V};
  batched_session<sampled_tree_builder> batch(std::vector<sampled_tree_builder>(3, sampled_tree_builder(bo)), so);
  const std::vector<token_id> prompt = {1, 2};
  looptest::batch_target bt{tm, 0, std::vector<std::vector<std::int32_t>>(3, std::vector<std::int32_t>(256, -1)),
                            std::vector<std::int32_t>(3, 1)};
  for (std::size_t r = 0; r < so.size(); ++r) {
    REQUIRE(batch.start(r, prompt).ok());
    bt.cache[r][0] = 1;
  }
  std::int64_t converted = 0;
  while (!batch.done()) {
    const status st = batch.round(d, bt);
    if (!st.ok()) FAIL(st.message());
    const round_stats& r = batch.last_round();
    CHECK(r.probs_rows <= r.accepted + 3);  // at most each sampled request's path (the greedy one converts none)
    CHECK(r.probs_rows < r.tree_nodes);
    converted += r.probs_rows;
  }
  CHECK(converted > 0);
  for (std::size_t r = 0; r < so.size(); ++r) {
    looptest::target tgt{tm};
    const auto ref = eager_generate(sampled_tree_builder(bo), d, tgt, so[r], prompt);
    const auto got = batch.generated_tokens(r);
    INFO("request " << r);
    CHECK(std::vector<token_id>(got.begin(), got.end()) == ref);
  }
}
