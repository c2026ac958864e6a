// SGLang formats: linked-list trees in and out, greedy verification from
// target_predict, the threshold sampling rule; each against a transcription
// (written here) of the peer's kernel loops and against brute force.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <random>
#include <vector>

#include "interop/sglang_reference.hpp"
#include "specdec/interop/greedy_ids.hpp"
#include "specdec/interop/linked_tree.hpp"
#include "specdec/interop/results.hpp"
#include "specdec/interop/sglang.hpp"
#include "specdec/verify/tree_verify.hpp"
#include "verify/exactness_harness.hpp"

using namespace specdec;
using namespace sglang_ref;

namespace {

std::span<std::byte> align(std::vector<std::byte>& storage, std::size_t bytes) {
  storage.assign(bytes + workspace_alignment, std::byte{0});
  auto p = reinterpret_cast<std::uintptr_t>(storage.data());
  const std::size_t shift = (workspace_alignment - p % workspace_alignment) % workspace_alignment;
  return std::span<std::byte>(storage.data() + shift, bytes);
}

}  // namespace

TEST_CASE("linked-list trees convert to specdec trees (brute-force ancestors) and back") {
  for (std::uint64_t seed = 1; seed <= 200; ++seed) {
    const int n = 1 + static_cast<int>(seed % 23);
    const batch b = make_batch(1, n, 9, seed, false);
    std::vector<node_id> parent(static_cast<std::size_t>(n));
    std::vector<token_id> token(static_cast<std::size_t>(n));
    std::vector<std::int32_t> o2n(static_cast<std::size_t>(n)), n2o(static_cast<std::size_t>(n));
    std::int32_t count = 0;
    const linked_tree<std::int64_t> lt{b.cand.data(), b.next.data(), b.sib.data(), n};
    REQUIRE(tree_from_linked_list(lt, {.unused_root = true, .root_token = 3, .require_all = true}, parent, token, o2n,
                                  n2o, count)
                .ok());
    REQUIRE(count == n);
    CHECK(token[0] == 3);
    REQUIRE(validate_topological_parents(parent.data(), n).ok());
    for (int s = 0; s < n; ++s) {
      const int u = o2n[static_cast<std::size_t>(s)];
      CHECK(n2o[static_cast<std::size_t>(u)] == s);
      // Brute force: the parent slot recorded when the tree was made.
      const int ps = b.parent_slot[static_cast<std::size_t>(s)];
      CHECK(parent[static_cast<std::size_t>(u)] == (ps < 0 ? -1 : o2n[static_cast<std::size_t>(ps)]));
      if (s > 0) CHECK(token[static_cast<std::size_t>(u)] == b.cand[static_cast<std::size_t>(s)]);
    }
    // Sibling visit order: ascending node ids follow the list order.
    for (int s = 0; s < n; ++s)
      for (std::int64_t c = b.next[static_cast<std::size_t>(s)]; c != -1; c = b.sib[static_cast<std::size_t>(c)])
        if (b.sib[static_cast<std::size_t>(c)] != -1)
          CHECK(o2n[static_cast<std::size_t>(c)] < o2n[static_cast<std::size_t>(b.sib[static_cast<std::size_t>(c)])]);
    // And back: first-child / next-sibling over node ids, same structure.
    std::vector<std::int64_t> nt(static_cast<std::size_t>(n)), ns(static_cast<std::size_t>(n));
    REQUIRE(
        linked_list_from_tree<std::int64_t>(tree_view{token.data(), parent.data(), nullptr, nullptr, n}, nt, ns).ok());
    for (int s = 0; s < n; ++s) {
      const auto u = static_cast<std::size_t>(o2n[static_cast<std::size_t>(s)]);
      const std::int64_t c = b.next[static_cast<std::size_t>(s)];
      CHECK(nt[u] == (c < 0 ? -1 : o2n[static_cast<std::size_t>(c)]));
      const std::int64_t sb = b.sib[static_cast<std::size_t>(s)];
      CHECK(ns[u] == (sb < 0 ? -1 : o2n[static_cast<std::size_t>(sb)]));
    }
  }
}

TEST_CASE("linked-list trees: malformed input gets a clear status") {
  std::vector<node_id> parent(4);
  std::vector<token_id> token(4);
  std::vector<std::int32_t> a(4), c(4);
  std::int32_t count = 0;
  const std::int64_t cand[4] = {0, 1, 2, 3};
  auto run = [&](std::vector<std::int64_t> next, std::vector<std::int64_t> sib, linked_tree_options o = {}) {
    return tree_from_linked_list(linked_tree<std::int64_t>{cand, next.data(), sib.data(), 4}, o, parent, token, a, c,
                                 count);
  };
  CHECK(run({1, -1, -1, -1}, {-1, 2, 3, -1}).ok());
  CHECK(count == 4);
  CHECK(run({1, 2, 1, -1}, {-1, -1, -1, -1}) == status_code::cycle);          // 1 -> 2 -> 1
  CHECK(run({1, -1, -1, -1}, {-1, 2, 1, -1}) == status_code::cycle);          // sibling loop
  CHECK(run({1, 0, -1, -1}, {-1, -1, -1, -1}) == status_code::cycle);         // the root as a child
  CHECK(run({1, -1, -1, -1}, {-1, 4, -1, -1}) == status_code::out_of_range);  // link past n
  CHECK(run({1, -1, -1, -1}, {-1, -2, -1, -1}) == status_code::out_of_range);
  CHECK(run({1, -1, -1, -1}, {2, -1, -1, -1}) == status_code::invalid_argument);  // root with a sibling
  CHECK(run({1, -1, -1, -1}, {-1, -1, -1, -1}).ok());                             // slots 2, 3 unreached
  CHECK(count == 2);
  CHECK(a[2] == -1);
  CHECK(run({1, -1, -1, -1}, {-1, -1, -1, -1}, {.require_all = true}) == status_code::invalid_argument);
  const std::int64_t neg[4] = {0, -3, 2, 3};
  std::vector<std::int64_t> nx = {1, -1, -1, -1}, sb = {-1, -1, -1, -1};
  CHECK(tree_from_linked_list(linked_tree<std::int64_t>{neg, nx.data(), sb.data(), 4}, {}, parent, token, a, c,
                              count) == status_code::token_out_of_range);
  CHECK(tree_from_linked_list(linked_tree<std::int64_t>{cand, nx.data(), sb.data(), 0}, {}, parent, token, a, c,
                              count) == status_code::empty_input);
  std::vector<node_id> small(2);
  CHECK(tree_from_linked_list(linked_tree<std::int64_t>{cand, nx.data(), sb.data(), 4}, {}, small, token, a, c,
                              count) == status_code::size_mismatch);
}

TEST_CASE("sglang_verify_tree_greedy equals SGLang's kernel loop and verify_tree greedy on one-hot rows") {
  std::vector<std::byte> storage;
  for (std::uint64_t seed = 1; seed <= 60; ++seed) {
    const int bs = 1 + static_cast<int>(seed % 4), n = 2 + static_cast<int>(seed % 15),
              V = 3 + static_cast<int>(seed % 4);
    const int num_spec = 1 + static_cast<int>(seed % 6);
    const batch b = make_batch(bs, n, V, seed * 7, seed % 2 == 0);
    std::mt19937_64 g(seed);
    std::vector<std::int64_t> tp(static_cast<std::size_t>(bs * n));
    for (auto& x : tp) x = static_cast<std::int64_t>(g() % static_cast<std::uint64_t>(V));
    std::vector<int> pr(tp.size(), -5), ai(static_cast<std::size_t>(bs * num_spec), -1),
        an(static_cast<std::size_t>(bs), -1);
    std::vector<int> pw = pr, aw = ai, nw = an;
    reference_greedy(b, tp, num_spec, pr, ai, an);
    const sglang_tree_batch<std::int64_t> tb{bs, n, b.cand.data(), b.ridx.data(), b.next.data(), b.sib.data()};
    const sglang_outputs<int> out{pw, make_view(aw.data(), bs, num_spec), nw};
    const auto ws = align(storage, sglang_workspace_size(n));
    REQUIRE(sglang_verify_tree_greedy<std::int64_t, int>(tb, tp, num_spec, out, ws).ok());
    INFO("seed " << seed);
    CHECK(pw == pr);
    CHECK(aw == ai);
    CHECK(nw == an);
    // Brute force through specdec's own greedy verifier: one-hot rows at the
    // target ids, on the converted tree (no cap: num_spec large enough).
    if (num_spec > n) {
      for (int r = 0; r < bs; ++r) {
        const auto o = static_cast<std::size_t>(r * n);
        std::vector<node_id> parent(static_cast<std::size_t>(n));
        std::vector<token_id> token(static_cast<std::size_t>(n));
        std::vector<std::int32_t> o2n(static_cast<std::size_t>(n)), n2o(static_cast<std::size_t>(n));
        std::int32_t count = 0;
        REQUIRE(
            tree_from_linked_list(linked_tree<std::int64_t>{b.cand.data() + o, b.next.data() + o, b.sib.data() + o, n},
                                  {.unused_root = true}, parent, token, o2n, n2o, count)
                .ok());
        std::vector<float> rows(static_cast<std::size_t>(n * V), 0.0f);
        for (int u = 0; u < n; ++u)
          rows[static_cast<std::size_t>(u * V) +
               static_cast<std::size_t>(tp[o + static_cast<std::size_t>(n2o[static_cast<std::size_t>(u)])])] = 1.0f;
        std::vector<std::byte> w(verify_workspace_size(V, n));
        std::vector<node_id> path(static_cast<std::size_t>(n));
        std::vector<token_id> toks(static_cast<std::size_t>(n));
        verify_params vp;
        vp.mode = verify_mode::greedy;
        verify_result res;
        REQUIRE(verify_tree(tree_view{token.data(), parent.data(), nullptr, nullptr, n},
                            make_view<const float>(rows.data(), n, V), {}, vp, w, path, toks, res)
                    .ok());
        CHECK(res.accepted == an[static_cast<std::size_t>(r)]);
        CHECK(static_cast<std::int64_t>(res.next_token) ==
              pr[static_cast<std::size_t>(ai[static_cast<std::size_t>(r * num_spec + res.accepted)])]);
      }
    }
  }
}

TEST_CASE("sglang_tree_sampling_target_only equals SGLang's kernel loop for any thresholds") {
  std::vector<std::byte> storage;
  for (std::uint64_t seed = 1; seed <= 80; ++seed) {
    const int bs = 1 + static_cast<int>(seed % 3), n = 2 + static_cast<int>(seed % 12),
              V = 4 + static_cast<int>(seed % 5);
    const int num_spec = 2 + static_cast<int>(seed % 5);
    const float ts = seed % 3 == 0 ? 0.3f : 1.0f, ta = seed % 4 == 0 ? 0.6f : 1.0f;
    const batch b = make_batch(bs, n, V, seed * 13, seed % 2 == 0);
    std::mt19937_64 g(seed);
    std::uniform_real_distribution<float> U(0.0f, 1.0f);
    std::vector<float> probs(static_cast<std::size_t>(bs * n * V));
    for (std::size_t row = 0; row < static_cast<std::size_t>(bs * n); ++row) {
      float s = 0;
      for (int x = 0; x < V; ++x)
        s += (probs[row * static_cast<std::size_t>(V) + static_cast<std::size_t>(x)] = U(g) < 0.2f ? 0.0f : U(g));
      if (s == 0) probs[row * static_cast<std::size_t>(V)] = s = 1.0f;
      for (int x = 0; x < V; ++x) probs[row * static_cast<std::size_t>(V) + static_cast<std::size_t>(x)] /= s;
    }
    std::vector<float> coins(static_cast<std::size_t>(bs * n)), fc(static_cast<std::size_t>(bs));
    for (auto& c : coins) c = U(g);
    for (auto& c : fc) c = U(g);
    if (seed % 5 == 0) fc[0] = 0.0f;                        // a coin of exactly 0
    if (seed % 7 == 0) fc[0] = std::nextafter(1.0f, 0.0f);  // the largest float below 1
    std::vector<int> pr(static_cast<std::size_t>(bs * n), -5), ai(static_cast<std::size_t>(bs * num_spec), -1),
        an(static_cast<std::size_t>(bs), -1);
    std::vector<int> pw = pr, aw = ai, nw = an;
    reference_sampling(b, probs, coins, fc, num_spec, ts, ta, pr, ai, an);
    const sglang_tree_batch<std::int64_t> tb{bs, n, b.cand.data(), b.ridx.data(), b.next.data(), b.sib.data()};
    const sglang_outputs<int> out{pw, make_view(aw.data(), bs, num_spec), nw};
    const auto ws = align(storage, sglang_sampling_workspace_size(n, V));
    REQUIRE(sglang_tree_sampling_target_only<std::int64_t, int>(tb, make_view<const float>(probs.data(), bs * n, V),
                                                                coins, fc, num_spec, {ts, ta}, out, ws)
                .ok());
    INFO("seed " << seed);
    CHECK(pw == pr);
    CHECK(aw == ai);
    CHECK(nw == an);
  }
}

TEST_CASE("sglang_tree_sampling_target_only: no mass left after the rejections samples V - 1, as SGLang") {
  // Root row [.25, .25, 0] (mass .5, all on the children {0, 1}); the coin
  // .9 rejects both, so nothing is left to sample: SGLang takes V - 1.
  const std::int64_t cand[3] = {-1, 0, 1}, ridx[3] = {0, 1, 2}, next[3] = {1, -1, -1}, sib[3] = {-1, 2, -1};
  const std::vector<float> probs = {0.25f, 0.25f, 0.0f, 0.3f, 0.3f, 0.4f, 0.3f, 0.3f, 0.4f};
  const sglang_tree_batch<std::int64_t> tb{1, 3, cand, ridx, next, sib};
  std::vector<std::byte> storage;
  const auto ws = align(storage, sglang_sampling_workspace_size(3, 3));
  const std::vector<float> coins{0.9f, 0.5f, 0.5f}, fc{0.3f};
  std::vector<int> pred(3, -1), ai(3, -1), an(1, -1);
  REQUIRE(sglang_tree_sampling_target_only<std::int64_t, int>(
              tb, make_view<const float>(probs.data(), 3, 3), coins, fc, 3, {},
              sglang_outputs<int>{pred, make_view(ai.data(), 1, 3), an}, ws)
              .ok());
  CHECK(an[0] == 0);
  CHECK(pred[0] == 2);
  // A workspace sized for the greedy call only is refused.
  const auto small = align(storage, sglang_workspace_size(3));
  CHECK(sglang_tree_sampling_target_only<std::int64_t, int>(
            tb, make_view<const float>(probs.data(), 3, 3), coins, fc, 3, {},
            sglang_outputs<int>{pred, make_view(ai.data(), 1, 3), an}, small) == status_code::buffer_too_small);
}

TEST_CASE("SGLang's coin rule with thresholds 1 is exact for distinct siblings; thresholds below 1 are not") {
  // One request: root with children tokens {2, 0} (list order), leaves below.
  // p at the root = [.5, .3, .2]; the first emitted token must follow p.
  const std::int64_t cand[3] = {-1, 2, 0}, ridx[3] = {0, 1, 2}, next[3] = {1, -1, -1}, sib[3] = {-1, 2, -1};
  const std::vector<float> probs = {0.5f, 0.3f, 0.2f, 0.1f, 0.6f, 0.3f, 0.7f, 0.2f, 0.1f};
  const sglang_tree_batch<std::int64_t> tb{1, 3, cand, ridx, next, sib};
  std::vector<std::byte> storage;
  const auto ws = align(storage, sglang_sampling_workspace_size(3, 3));
  std::mt19937_64 g(2026);
  std::uniform_real_distribution<float> U(0.0f, 1.0f);
  auto law = [&](sglang_thresholds th) {
    std::vector<std::int64_t> counts(3, 0);
    std::vector<int> pred(3), ai(3), an(1);
    std::vector<float> coins(3), fc(1);
    for (int t = 0; t < 1000000; ++t) {
      for (auto& c : coins) c = U(g);
      fc[0] = U(g);
      REQUIRE(sglang_tree_sampling_target_only<std::int64_t, int>(
                  tb, make_view<const float>(probs.data(), 3, 3), coins, fc, 3, th,
                  sglang_outputs<int>{pred, make_view(ai.data(), 1, 3), an}, ws)
                  .ok());
      ++counts[static_cast<std::size_t>(pred[0])];  // predicts[root row] = first emitted token
    }
    return vtest::chi_square(counts, std::vector<double>{0.5, 0.3, 0.2}, 0);
  };
  const auto exact = law({1.0f, 1.0f});
  std::printf("sglang coin rule, thresholds 1/1: chi2 %.1f df %d p %.3g\n", exact.chi2, exact.df, exact.p_value);
  CHECK(exact.p_value > 1e-4);
  const auto lossy = law({0.25f, 1.0f});  // token 2 (p .2) never reaches .25, token 0 (p .5) always accepted
  std::printf("sglang coin rule, threshold_single .25 (lossy): chi2 %.1f p %.3g\n", lossy.chi2, lossy.p_value);
  CHECK(lossy.p_value < 1e-6);
  const auto lossy_acc = law({1.0f, 0.5f});
  std::printf("sglang coin rule, threshold_acc .5 (lossy): chi2 %.1f p %.3g\n", lossy_acc.chi2, lossy_acc.p_value);
  CHECK(lossy_acc.p_value < 1e-6);
}

TEST_CASE("verify_greedy_ids: unused root, max_accept, bad ids") {
  // root(?) -> 1 -> 2 ; root -> 3
  const token_id tok[4] = {-1, 1, 2, 3};
  const node_id par[4] = {-1, 0, 1, 0};
  const tree_view t{tok, par, nullptr, nullptr, 4};
  std::vector<node_id> path(4);
  std::vector<token_id> out(4);
  verify_result res;
  const std::vector<token_id> ids = {1, 2, 0, 0};
  CHECK(verify_greedy_ids(t, ids, 5, {}, path, out, res) == status_code::token_out_of_range);  // root token -1
  REQUIRE(verify_greedy_ids(t, ids, 5, {.unused_root = true}, path, out, res).ok());
  CHECK(res.accepted == 2);
  CHECK(out[0] == 1);
  CHECK(out[1] == 2);
  CHECK(out[2] == 0);
  REQUIRE(verify_greedy_ids(t, ids, 5, {.unused_root = true, .max_accept = 1}, path, out, res).ok());
  CHECK(res.accepted == 1);
  CHECK(res.next_token == 2);
  const std::vector<token_id> bad = {1, 9, 0, 0};
  CHECK(verify_greedy_ids(t, bad, 5, {.unused_root = true}, path, out, res) == status_code::token_out_of_range);
  CHECK(verify_greedy_ids(t, std::span<const token_id>(ids).first(2), 5, {.unused_root = true}, path, out, res) ==
        status_code::size_mismatch);
  // A 1-entry view of a larger buffer: GCC's -Warray-bounds cannot see that
  // the size check returns before the writes, and would flag a 1-element vector.
  std::vector<node_id> buf(4);
  const std::span<node_id> short_path(buf.data(), 1);
  CHECK(verify_greedy_ids(t, ids, 5, {.unused_root = true}, short_path, out, res) == status_code::buffer_too_small);
}
