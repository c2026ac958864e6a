// Tree/chain/batched verification: exact laws of the docs/verify.md counterexamples,
// edge cases, bad input, batching, strided views and reference comparisons.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "specdec/verify/batch_verify.hpp"
#include "specdec/verify/distribution.hpp"
#include "specdec/verify/tree_verify.hpp"

using namespace specdec;

namespace {

// ---------------------------------------------------------------------------
// Exact (analytic) laws of the first emitted token for a root with two
// children, on p = [.5, .3, .2], q = [.2, .3, .5] (docs/verify.md, "Counterexamples").

using dist3 = std::array<double, 3>;
constexpr dist3 P3 = {.5, .3, .2};
constexpr dist3 Q3 = {.2, .3, .5};

dist3 normalize(dist3 d) {
  double s = d[0] + d[1] + d[2];
  for (auto& x : d) x /= s;
  return d;
}

// Recursive rejection along an ordered child list; `qs[j]` is the law the
// j-th child was drawn from (q for iid, q minus earlier picks for WOR,
// one-hot for deterministic).
dist3 rejection_chain(const std::vector<int>& xs, const std::vector<dist3>& qs) {
  dist3 out{};
  dist3 P = P3;
  double stay = 1;
  for (std::size_t j = 0; j < xs.size(); ++j) {
    const int x = xs[j];
    const double a = qs[j][static_cast<std::size_t>(x)] > 0
                         ? std::min(1.0, P[static_cast<std::size_t>(x)] / qs[j][static_cast<std::size_t>(x)])
                         : 0.0;
    out[static_cast<std::size_t>(x)] += stay * a;
    stay *= 1 - a;
    dist3 r;
    for (std::size_t i = 0; i < 3; ++i) r[i] = std::max(P[i] - qs[j][i], 0.0);
    if (r[0] + r[1] + r[2] > 0) P = normalize(r);
  }
  for (std::size_t i = 0; i < 3; ++i) out[i] += stay * P[i];
  return out;
}

dist3 law_iid(bool sort_by_q) {
  dist3 tot{};
  for (int a = 0; a < 3; ++a)
    for (int b = 0; b < 3; ++b) {
      std::vector<int> xs = {a, b};
      if (sort_by_q) std::stable_sort(xs.begin(), xs.end(), [](int x, int y) { return Q3[x] > Q3[y]; });
      const auto d = rejection_chain(xs, {Q3, Q3});
      for (std::size_t i = 0; i < 3; ++i)
        tot[i] += Q3[static_cast<std::size_t>(a)] * Q3[static_cast<std::size_t>(b)] * d[i];
    }
  return tot;
}

dist3 law_without_replacement() {
  dist3 tot{};
  for (int a = 0; a < 3; ++a)
    for (int b = 0; b < 3; ++b) {
      if (a == b) continue;
      dist3 q2 = Q3;
      q2[static_cast<std::size_t>(a)] = 0;
      q2 = normalize(q2);
      const double w = Q3[static_cast<std::size_t>(a)] * q2[static_cast<std::size_t>(b)];
      const auto d = rejection_chain({a, b}, {Q3, q2});
      for (std::size_t i = 0; i < 3; ++i) tot[i] += w * d[i];
    }
  return tot;
}

dist3 law_independent_acceptance() {
  dist3 tot{};
  const dist3 resid =
      normalize({std::max(P3[0] - Q3[0], 0.0), std::max(P3[1] - Q3[1], 0.0), std::max(P3[2] - Q3[2], 0.0)});
  for (int a = 0; a < 3; ++a)
    for (int b = 0; b < 3; ++b) {
      const double w = Q3[static_cast<std::size_t>(a)] * Q3[static_cast<std::size_t>(b)];
      const double aa = std::min(1.0, P3[static_cast<std::size_t>(a)] / Q3[static_cast<std::size_t>(a)]);
      const double ab = std::min(1.0, P3[static_cast<std::size_t>(b)] / Q3[static_cast<std::size_t>(b)]);
      tot[static_cast<std::size_t>(a)] += w * aa;
      tot[static_cast<std::size_t>(b)] += w * (1 - aa) * ab;
      for (std::size_t i = 0; i < 3; ++i) tot[i] += w * (1 - aa) * (1 - ab) * resid[i];
    }
  return tot;
}

void check_law(const dist3& got, const dist3& want) {
  for (std::size_t i = 0; i < 3; ++i) CHECK(got[i] == Approx(want[i]).margin(1e-12));
}

// ---------------------------------------------------------------------------
// Random inputs.

std::vector<float> random_rows(std::mt19937& gen, std::int64_t n, std::int64_t V, double zero_frac) {
  std::vector<float> r(static_cast<std::size_t>(n * V));
  std::uniform_real_distribution<double> U(0.0, 1.0);
  for (std::int64_t u = 0; u < n; ++u) {
    std::vector<double> w(static_cast<std::size_t>(V));
    double s = 0;
    for (auto& x : w) {
      x = U(gen) < zero_frac ? 0.0 : std::pow(U(gen), 4.0);
      s += x;
    }
    if (s == 0) {
      w[0] = 1;
      s = 1;
    }
    for (std::int64_t i = 0; i < V; ++i)
      r[static_cast<std::size_t>(u * V + i)] = static_cast<float>(w[static_cast<std::size_t>(i)] / s);
  }
  return r;
}

token_tree random_tree(std::mt19937& gen, int n, std::int64_t V, bool distinct_siblings) {
  token_tree t(static_cast<token_id>(gen() % V));
  for (int i = 1; i < n; ++i) {
    const node_id par = static_cast<node_id>(gen() % static_cast<unsigned>(i));
    token_id x = static_cast<token_id>(gen() % V);
    if (distinct_siblings) {
      for (std::int64_t tries = 0, clash = 1; clash && tries < V; ++tries) {
        clash = 0;
        for (node_id c = 1; c < t.size(); ++c) clash = clash || (t.parent(c) == par && t.token(c) == x) ? 1 : 0;
        if (clash) x = static_cast<token_id>((x + 1) % V);
      }
    }
    t.add_child(par, x);
  }
  return t;
}

struct runner {
  std::vector<std::byte> ws;
  std::vector<node_id> path;
  std::vector<token_id> toks;
  status run(const token_tree& t, const std::vector<float>& P, const std::vector<float>& Q, std::int64_t V,
             const verify_params& vp, verify_result& r) {
    const int n = t.size();
    ws.assign(verify_workspace_size(V, n), std::byte{0});
    path.assign(static_cast<std::size_t>(n), -7);
    toks.assign(static_cast<std::size_t>(n), -7);
    return verify_tree(t.view(), make_view(P.data(), n, V).as_const(),
                       Q.empty() ? view2d<const float>{} : make_view(Q.data(), n, V).as_const(), vp, ws, path, toks, r);
  }
};

verify_params params_of(verify_mode m, std::uint64_t seed, std::uint32_t req = 0, std::uint32_t round = 0) {
  verify_params vp;
  vp.mode = m;
  vp.seed = seed;
  vp.request = req;
  vp.round = round;
  return vp;
}

constexpr verify_mode all_modes[] = {verify_mode::sampled_iid,    verify_mode::sampled_without_replacement,
                                     verify_mode::deterministic,  verify_mode::greedy,
                                     verify_mode::naive_matching, verify_mode::typical_lossy};

}  // namespace

TEST_CASE("analytic laws of the docs/verify.md counterexamples") {
  // Lossless rules give exactly p.
  check_law(law_iid(false), P3);
  check_law(law_without_replacement(), P3);
  const dist3 onehot2 = {0, 0, 1}, onehot1 = {0, 1, 0};
  check_law(rejection_chain({2, 1}, {onehot2, onehot1}), P3);  // top-2 of q with the one-hot rule
  // The biased schemes.
  check_law(law_independent_acceptance(), {.35, .39, .26});
  check_law(rejection_chain({2, 1}, {Q3, Q3}), {.6, 0, .4});  // top-2 verified with the real q
  check_law(law_iid(true), {.49, .21, .30});                  // iid re-sorted by q
}

TEST_CASE("modes: names, lossless flags and parameter validation") {
  CHECK(is_lossless(verify_mode::sampled_iid));
  CHECK(is_lossless(verify_mode::sampled_without_replacement));
  CHECK(is_lossless(verify_mode::deterministic));
  CHECK(is_lossless(verify_mode::greedy));
  CHECK(is_lossless(verify_mode::naive_matching));
  CHECK_FALSE(is_lossless(verify_mode::typical_lossy));
  CHECK(std::string(verify_mode_name(verify_mode::typical_lossy)) == "typical_lossy");
  CHECK(uses_draft_probs(verify_mode::sampled_iid));
  CHECK_FALSE(uses_draft_probs(verify_mode::deterministic));
  verify_params vp;
  vp.mode = static_cast<verify_mode>(17);
  CHECK(validate_verify_params(vp) == status_code::invalid_argument);
  vp.mode = verify_mode::typical_lossy;
  vp.typical_epsilon = 0;
  CHECK(validate_verify_params(vp) == status_code::invalid_argument);
  vp.typical_epsilon = 0.1f;
  vp.typical_delta = -1;
  CHECK(validate_verify_params(vp) == status_code::invalid_argument);
  vp.typical_delta = 0.3f;
  CHECK(validate_verify_params(vp).ok());
}

TEST_CASE("chain verification equals tree verification of the same chain") {
  std::mt19937 gen(2024);
  INFO("seed 2024");
  runner rn;
  for (int trial = 0; trial < 300; ++trial) {
    const std::int64_t V = 2 + gen() % 40;
    const int gamma = static_cast<int>(gen() % 6);
    const auto P = random_rows(gen, gamma + 1, V, 0.3);
    const auto Q = random_rows(gen, gamma + 1, V, 0.3);
    token_tree t(0);
    std::vector<token_id> drafts;
    for (int i = 0; i < gamma; ++i) {
      drafts.push_back(static_cast<token_id>(gen() % V));
      t.add_child(i, drafts.back());
    }
    for (auto m : all_modes) {
      const auto vp = params_of(m, 77, static_cast<std::uint32_t>(trial), 3);
      verify_result rt{}, rc{};
      REQUIRE(rn.run(t, P, Q, V, vp, rt).ok());
      std::vector<std::byte> ws(verify_workspace_size(V, gamma + 1));
      std::vector<token_id> toks(static_cast<std::size_t>(gamma + 1), -1);
      REQUIRE(verify_chain(drafts, make_view(P.data(), gamma + 1, V).as_const(),
                           make_view(Q.data(), gamma, V).as_const(), vp, ws, toks, rc)
                  .ok());
      INFO("trial " << trial << " mode " << verify_mode_name(m));
      CHECK(rc.accepted == rt.accepted);
      CHECK(rc.next_token == rt.next_token);
      for (int k = 0; k <= rc.accepted; ++k)
        CHECK(toks[static_cast<std::size_t>(k)] == rn.toks[static_cast<std::size_t>(k)]);
    }
  }
}

TEST_CASE("results are consistent, reproducible and emitted ids are valid for large vocabularies") {
  std::mt19937 gen(7);
  INFO("seed 7");
  runner rn;
  for (std::int64_t V : {100, 8193, 151936}) {
    const int trials = V > 10000 ? 6 : 40;
    for (int trial = 0; trial < trials; ++trial) {
      const int n = 1 + static_cast<int>(gen() % 12);
      const auto t = random_tree(gen, n, V, false);
      // Drafts drawn near p's mass so that acceptances happen: give every tree token extra mass.
      auto P = random_rows(gen, n, V, 0.5);
      auto Q = random_rows(gen, n, V, 0.5);
      for (auto m : all_modes) {
        const auto vp = params_of(m, 1234, static_cast<std::uint32_t>(trial));
        verify_result r{};
        const status st = rn.run(t, P, Q, V, vp, r);
        INFO("V " << V << " trial " << trial << " mode " << verify_mode_name(m));
        REQUIRE(st.ok());
        CHECK(r.next_token >= 0);
        CHECK(r.next_token < V);
        // The emitted token has positive target probability at the last node.
        CHECK(P[static_cast<std::size_t>(r.last_node * V + r.next_token)] > 0.0f);
        // The path is a root path of the right length ending at last_node.
        CHECK(rn.path[0] == 0);
        CHECK(rn.path[static_cast<std::size_t>(r.accepted)] == r.last_node);
        for (int k = 1; k <= r.accepted; ++k) {
          CHECK(t.parent(rn.path[static_cast<std::size_t>(k)]) == rn.path[static_cast<std::size_t>(k - 1)]);
          CHECK(rn.toks[static_cast<std::size_t>(k - 1)] == t.token(rn.path[static_cast<std::size_t>(k)]));
        }
        CHECK(rn.toks[static_cast<std::size_t>(r.accepted)] == r.next_token);
        // Same key, same result.
        verify_result r2{};
        REQUIRE(rn.run(t, P, Q, V, vp, r2).ok());
        CHECK(r2.next_token == r.next_token);
        CHECK(r2.last_node == r.last_node);
      }
    }
  }
}

TEST_CASE("p == q: every sampled child is accepted, whatever the uniforms") {
  std::mt19937 gen(31);
  INFO("seed 31");
  runner rn;
  for (int trial = 0; trial < 200; ++trial) {
    const std::int64_t V = 2 + gen() % 64;
    const int depth = 1 + static_cast<int>(gen() % 4);
    const auto P = random_rows(gen, depth + 1, V, 0.2);
    token_tree t(0);
    for (int d = 0; d < depth; ++d) {
      // A token with positive mass under row d.
      token_id x = 0;
      while (P[static_cast<std::size_t>(d * V + x)] <= 0.0f) ++x;
      t.add_child(d, x);
    }
    for (auto m : {verify_mode::sampled_iid, verify_mode::sampled_without_replacement}) {
      verify_result r{};
      REQUIRE(rn.run(t, P, P, V, params_of(m, static_cast<std::uint64_t>(trial)), r).ok());
      CHECK(r.accepted == depth);
      CHECK(r.next_token >= 0);
      CHECK(r.next_token < V);
    }
  }
}

TEST_CASE("zero probabilities reject without dividing") {
  runner rn;
  // Child 0 carries a token with q = 0 (p large); child 1 a token with p = 0.
  const std::vector<float> P = {0.7f, 0.0f, 0.3f, 1.0f / 3, 1.0f / 3, 1.0f / 3, 1.0f / 3, 1.0f / 3, 1.0f / 3};
  const std::vector<float> Q = {0.0f, 0.5f, 0.5f, 1.0f / 3, 1.0f / 3, 1.0f / 3, 1.0f / 3, 1.0f / 3, 1.0f / 3};
  token_tree t(2);
  t.add_child(0, 0);  // q(0) = 0
  t.add_child(0, 1);  // p(1) = 0
  for (std::uint64_t seed = 0; seed < 200; ++seed) {
    for (auto m : {verify_mode::sampled_iid, verify_mode::sampled_without_replacement}) {
      verify_result r{};
      REQUIRE(rn.run(t, P, Q, 3, params_of(m, seed), r).ok());
      CHECK(r.accepted == 0);
      // Residual after both rejections: max(max(p - q, 0) norm - q, 0) -> only token 0 (0.7 vs q 0).
      CHECK(r.next_token == 0);
    }
    verify_result r{};
    REQUIRE(rn.run(t, P, Q, 3, params_of(verify_mode::deterministic, seed), r).ok());
    CHECK(r.last_node != 2);                        // p(1) = 0 is never accepted
    if (r.accepted == 0) CHECK(r.next_token == 2);  // nor emitted: p without the rejected tokens is {2}
  }
}

TEST_CASE("residual mass that rounds to zero falls back to a valid token") {
  runner rn;
  // p sums to 1 - 5e-4 (inside the tolerance) and p <= q everywhere: after
  // rejecting the only child (p(x) = 0) the residual max(p - q, 0) is exactly 0.
  const std::vector<float> P = {0.0f, 0.4f, 0.5995f, 0.25f, 0.25f, 0.25f, 0.25f};
  const std::vector<float> Q = {0.0005f, 0.4f, 0.5995f, 0.25f, 0.25f, 0.25f, 0.25f};
  std::vector<float> p4 = {0.0f, 0.4f, 0.5995f, 0.0f, 0.25f, 0.25f, 0.25f, 0.25f};
  std::vector<float> q4 = {0.0005f, 0.4f, 0.5995f, 0.0f, 0.25f, 0.25f, 0.25f, 0.25f};
  token_tree t(1);
  t.add_child(0, 0);
  for (std::uint64_t seed = 0; seed < 20; ++seed) {
    verify_result r{};
    REQUIRE(rn.run(t, p4, q4, 4, params_of(verify_mode::sampled_iid, seed), r).ok());
    CHECK(r.accepted == 0);
    CHECK(r.next_token == 2);  // deterministic fallback: argmax of p at the node
  }
  // A tiny but positive residual is sampled normally: only token 3 has p > q.
  std::vector<float> p5 = {0.1f, 0.3f, 0.6f - 1e-30f, 1e-30f, 0.25f, 0.25f, 0.25f, 0.25f};
  std::vector<float> q5 = {0.1f, 0.3f, 0.6f, 0.0f, 0.25f, 0.25f, 0.25f, 0.25f};
  p5[2] = 0.6f;  // 0.6 - 1e-30 rounds to 0.6 in float
  token_tree t2(1);
  t2.add_child(0, 1);  // p == q at token 1: accepted unless u >= 1 (never)
  verify_result r{};
  REQUIRE(rn.run(t2, p5, q5, 4, params_of(verify_mode::sampled_iid, 3), r).ok());
  CHECK(r.accepted == 1);
  token_tree t3(1);
  t3.add_child(0, 0);
  t3.add_child(0, 2);
  for (std::uint64_t seed = 0; seed < 50; ++seed) {
    // Both children have p == q: accepted. Force rejection with p(0) = 0 instead.
    std::vector<float> p6 = p5, q6 = q5;
    p6[0] = 0.0f;
    p6[1] = 0.4f;
    verify_result r6{};
    REQUIRE(rn.run(t3, p6, q6, 4, params_of(verify_mode::sampled_iid, seed), r6).ok());
    if (r6.accepted == 0) CHECK((r6.next_token == 1 || r6.next_token == 3));
  }
  (void)P;
  (void)Q;
}

TEST_CASE("greedy and temperature 0 are token-identical to argmax decoding") {
  std::mt19937 gen(5);
  INFO("seed 5");
  runner rn;
  for (int trial = 0; trial < 300; ++trial) {
    const std::int64_t V = 2 + gen() % 30;
    const int n = 1 + static_cast<int>(gen() % 15);
    // Logits with frequent ties (argmax takes the lowest id).
    std::vector<float> logits(static_cast<std::size_t>(n * V));
    for (auto& x : logits) x = static_cast<float>(static_cast<int>(gen() % 5)) - 2.0f;
    auto t = random_tree(gen, n, V, false);
    // Put the argmax path into the tree often.
    for (node_id c = 1; c < n; ++c)
      if (gen() % 2) t.set_token(c, argmax_row(make_view(logits.data() + t.parent(c) * V, V).as_const()));
    // Reference: follow argmax through the tree (first child in id order).
    node_id u = 0;
    std::vector<token_id> want;
    for (;;) {
      const token_id a = argmax_row(make_view(logits.data() + u * V, V).as_const());
      want.push_back(a);
      node_id hit = -1;
      for (node_id c = u + 1; c < n && hit < 0; ++c)
        if (t.parent(c) == u && t.token(c) == a) hit = c;
      if (hit < 0) break;
      u = hit;
    }
    // Greedy directly on logits.
    verify_result r{};
    REQUIRE(rn.run(t, logits, {}, V, params_of(verify_mode::greedy, 0), r).ok());
    REQUIRE(static_cast<std::size_t>(r.accepted) + 1 == want.size());
    for (std::size_t k = 0; k < want.size(); ++k) CHECK(rn.toks[k] == want[k]);
    // Temperature 0 probabilities: every lossless mode emits the same tokens.
    std::vector<float> P(logits.size());
    const sampling_params greedy_sp{0.0f, 0, 1.0f, 0.0f};
    REQUIRE(logits_to_probs(make_view(logits.data(), n, V).as_const(), make_view(P.data(), n, V),
                            std::span<const sampling_params>(&greedy_sp, 1), {})
                .ok());
    const auto Q = random_rows(gen, n, V, 0.0);
    for (auto m : {verify_mode::sampled_iid, verify_mode::sampled_without_replacement, verify_mode::deterministic,
                   verify_mode::greedy, verify_mode::naive_matching}) {
      verify_result rm{};
      REQUIRE(rn.run(t, P, Q, V, params_of(m, static_cast<std::uint64_t>(trial)), rm).ok());
      INFO("trial " << trial << " mode " << verify_mode_name(m));
      REQUIRE(static_cast<std::size_t>(rm.accepted) + 1 == want.size());
      for (std::size_t k = 0; k < want.size(); ++k) CHECK(rn.toks[k] == want[k]);
    }
  }
}

TEST_CASE("typical acceptance (lossy) matches a brute-force longest typical path") {
  std::mt19937 gen(17);
  INFO("seed 17");
  runner rn;
  for (int trial = 0; trial < 300; ++trial) {
    const std::int64_t V = 2 + gen() % 20;
    const int n = 1 + static_cast<int>(gen() % 20);
    const auto t = random_tree(gen, n, V, false);
    const auto P = random_rows(gen, n, V, 0.2);
    auto vp = params_of(verify_mode::typical_lossy, 9, static_cast<std::uint32_t>(trial));
    vp.typical_epsilon = 0.05f + 0.3f * static_cast<float>(gen() % 4);
    vp.typical_delta = 0.2f + 0.2f * static_cast<float>(gen() % 3);
    std::vector<int> ok(static_cast<std::size_t>(n), 0);
    ok[0] = 1;
    node_id best = 0;
    for (node_id c = 1; c < n; ++c) {
      const node_id u = t.parent(c);
      double h = 0;
      for (std::int64_t i = 0; i < V; ++i) {
        const double x = P[static_cast<std::size_t>(u * V + i)];
        if (x > 0) h -= x * std::log(x);
      }
      const double tau = std::min(static_cast<double>(vp.typical_epsilon), vp.typical_delta * std::exp(-h));
      ok[static_cast<std::size_t>(c)] =
          ok[static_cast<std::size_t>(u)] && P[static_cast<std::size_t>(u * V + t.token(c))] > tau;
      if (ok[static_cast<std::size_t>(c)] && t.depth(c) > t.depth(best)) best = c;
    }
    verify_result r{};
    REQUIRE(rn.run(t, P, {}, V, vp, r).ok());
    CHECK(r.last_node == best);
    CHECK(r.accepted == t.depth(best));
    CHECK(P[static_cast<std::size_t>(best * V + r.next_token)] > 0.0f);
  }
}

TEST_CASE("without replacement: a repeated sibling token is rejected") {
  runner rn;
  const std::vector<float> P = {0.1f, 0.9f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f};
  const std::vector<float> Q = {0.9f, 0.1f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f};
  token_tree t(1);
  t.add_child(0, 0);
  t.add_child(0, 0);  // impossible under sampling without replacement
  int second = 0;
  for (std::uint64_t seed = 0; seed < 400; ++seed) {
    verify_result r{};
    REQUIRE(rn.run(t, P, Q, 2, params_of(verify_mode::sampled_without_replacement, seed), r).ok());
    second += r.last_node == 2;
    if (r.accepted == 0) CHECK(r.next_token == 1);
  }
  CHECK(second == 0);
}

TEST_CASE("strided rows give the same tokens as dense rows") {
  std::mt19937 gen(3);
  INFO("seed 3");
  runner rn;
  for (int trial = 0; trial < 100; ++trial) {
    const std::int64_t V = 2 + gen() % 50;
    const int n = 1 + static_cast<int>(gen() % 10);
    const auto t = random_tree(gen, n, V, true);
    const auto P = random_rows(gen, n, V, 0.3);
    const auto Q = random_rows(gen, n, V, 0.3);
    // Interleave p and q element-wise with row padding: stride (2V + 6, 2).
    const std::int64_t rs = 2 * V + 6;
    std::vector<float> buf(static_cast<std::size_t>(n * rs), std::numeric_limits<float>::quiet_NaN());
    for (int u = 0; u < n; ++u)
      for (std::int64_t i = 0; i < V; ++i) {
        buf[static_cast<std::size_t>(u * rs + 2 * i)] = P[static_cast<std::size_t>(u * V + i)];
        buf[static_cast<std::size_t>(u * rs + 2 * i + 1)] = Q[static_cast<std::size_t>(u * V + i)];
      }
    const auto pv = make_strided_view<const float, 2>(buf.data(), {n, V}, {rs, 2});
    const auto qv = make_strided_view<const float, 2>(buf.data() + 1, {n, V}, {rs, 2});
    for (auto m : all_modes) {
      const auto vp = params_of(m, 55, static_cast<std::uint32_t>(trial));
      verify_result a{}, b{};
      REQUIRE(rn.run(t, P, Q, V, vp, a).ok());
      std::vector<std::byte> ws(verify_workspace_size(V, n));
      std::vector<node_id> path(static_cast<std::size_t>(n));
      std::vector<token_id> toks(static_cast<std::size_t>(n));
      REQUIRE(verify_tree(t.view(), pv, qv, vp, ws, path, toks, b).ok());
      CHECK(a.next_token == b.next_token);
      CHECK(a.last_node == b.last_node);
    }
  }
}

TEST_CASE("bad input gives a clear status and leaves the outputs untouched") {
  runner rn;
  const std::int64_t V = 4;
  token_tree t(0);
  t.add_child(0, 1);
  t.add_child(1, 2);
  std::vector<float> P(12, 0.25f), Q(12, 0.25f);
  auto expect = [&](std::vector<float> p, std::vector<float> q, verify_mode m, status_code code, std::int64_t index) {
    verify_result r{5, 5, 5, status_code::ok};
    const status st = rn.run(t, p, q, V, params_of(m, 1), r);
    CHECK(st == code);
    if (index >= 0) CHECK(st.index() == index);
    CHECK(r.accepted == 5);
    CHECK(r.next_token == 5);
    CHECK(std::all_of(rn.path.begin(), rn.path.end(), [](node_id x) { return x == -7; }));
    CHECK(std::all_of(rn.toks.begin(), rn.toks.end(), [](token_id x) { return x == -7; }));
  };
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // All-NaN root row: an error in every mode.
  auto pn = P;
  std::fill(pn.begin(), pn.begin() + 4, nan);
  for (auto m : all_modes) expect(pn, Q, m, status_code::non_finite, 0);
  // NaN in a visited q row; negative entries; zero mass; an unnormalized row.
  auto qn = Q;
  qn[3] = nan;
  expect(P, qn, verify_mode::sampled_iid, status_code::non_finite, 0);
  auto pneg = P;
  pneg[4 + 2] = -0.25f;
  pneg[4 + 3] = 0.75f;
  SECTION("negative entry in a visited row (node 1; the root always accepts p == q)") {
    expect(pneg, Q, verify_mode::sampled_iid, status_code::negative_probability, 1);
  }
  auto pz = P;
  std::fill(pz.begin(), pz.begin() + 4, 0.0f);
  expect(pz, Q, verify_mode::naive_matching, status_code::zero_mass, 0);
  auto pu = P;
  for (int i = 0; i < 4; ++i) pu[static_cast<std::size_t>(i)] = 0.5f;
  expect(pu, Q, verify_mode::sampled_iid, status_code::invalid_argument, 0);
  // Infinity is rejected too.
  auto pinf = P;
  pinf[8] = std::numeric_limits<float>::infinity();
  expect(pinf, Q, verify_mode::sampled_iid, status_code::non_finite, 2);

  // Shape and argument errors.
  std::vector<std::byte> ws(verify_workspace_size(V, 3));
  std::vector<node_id> path(3);
  std::vector<token_id> toks(3);
  verify_result r{};
  const auto pv = make_view(P.data(), 3, V).as_const();
  const auto qv = make_view(Q.data(), 3, V).as_const();
  const auto vp = params_of(verify_mode::sampled_iid, 1);
  CHECK(verify_tree(t.view(), make_view(P.data(), 2, V).as_const(), qv, vp, ws, path, toks, r) ==
        status_code::size_mismatch);
  CHECK(verify_tree(t.view(), pv, view2d<const float>{}, vp, ws, path, toks, r) == status_code::invalid_argument);
  CHECK(verify_tree(t.view(), pv, view2d<const float>{}, params_of(verify_mode::deterministic, 1), ws, path, toks, r)
            .ok());
  CHECK(verify_tree(t.view(), pv, qv, vp, std::span<std::byte>(ws).first(ws.size() - 1), path, toks, r) ==
        status_code::buffer_too_small);
  CHECK(verify_tree(t.view(), pv, qv, vp, std::span<std::byte>(ws).subspan(1), path, toks, r) ==
        status_code::buffer_too_small);
  std::vector<std::byte> big(ws.size() + 8);
  CHECK(verify_tree(t.view(), pv, qv, vp, std::span<std::byte>(big).subspan(1), path, toks, r) ==
        status_code::invalid_argument);
  CHECK(verify_tree(t.view(), pv, qv, vp, ws, std::span<node_id>(path).first(2), toks, r) ==
        status_code::buffer_too_small);
  token_tree bad_tok(0);
  bad_tok.add_child(0, 4);  // == V
  bad_tok.add_child(0, 1);
  CHECK(verify_tree(bad_tok.view(), pv, qv, vp, ws, path, toks, r) == status_code::token_out_of_range);
  const node_id bad_parent[] = {-1, 2, 0};
  const token_id tk[] = {0, 1, 2};
  CHECK(verify_tree(tree_view{tk, bad_parent, nullptr, nullptr, 3}, pv, qv, vp, ws, path, toks, r) ==
        status_code::not_topological);
  auto badmode = vp;
  badmode.mode = static_cast<verify_mode>(9);
  CHECK(verify_tree(t.view(), pv, qv, badmode, ws, path, toks, r) == status_code::invalid_argument);
  CHECK(verify_tree(tree_view{}, pv, qv, vp, ws, path, toks, r) == status_code::empty_input);
  // Chain: wrong draft token, too few q rows, short output.
  std::vector<token_id> drafts = {1, 7};
  std::vector<token_id> ctoks(3);
  CHECK(verify_chain(drafts, pv, qv, vp, ws, ctoks, r) == status_code::token_out_of_range);
  drafts = {1, 2};
  CHECK(verify_chain(drafts, pv, make_view(Q.data(), 1, V).as_const(), vp, ws, ctoks, r) == status_code::size_mismatch);
  CHECK(verify_chain(drafts, pv, qv, vp, ws, std::span<token_id>(ctoks).first(2), r) == status_code::buffer_too_small);
  CHECK(verify_chain(drafts, pv, qv, vp, ws, ctoks, r).ok());
}

TEST_CASE("root-only trees and empty chains emit exactly one token") {
  runner rn;
  const std::vector<float> P = {0.0f, 0.0f, 1.0f};
  token_tree t(1);
  for (auto m : all_modes) {
    verify_result r{};
    REQUIRE(rn.run(t, P, P, 3, params_of(m, 4), r).ok());
    CHECK(r.accepted == 0);
    CHECK(r.next_token == 2);
    std::vector<std::byte> ws(verify_workspace_size(3, 1));
    std::vector<token_id> toks(1);
    verify_result rc{};
    REQUIRE(verify_chain({}, make_view(P.data(), 1, 3).as_const(), view2d<const float>{}, params_of(m, 4), ws, toks, rc)
                .ok());  // no drafts: one token from p, no q needed in any mode
    CHECK(toks[0] == rc.next_token);
  }
}

TEST_CASE("batched verification: mixed modes, order independence, per-request errors") {
  std::mt19937 gen(8);
  INFO("seed 8");
  const std::int64_t V = 37;
  const int R = 12;
  std::vector<token_tree> trees;
  std::vector<std::vector<float>> Ps, Qs;
  std::vector<verify_params> params;
  for (int r = 0; r < R; ++r) {
    const int n = r == 3 ? 1 : 1 + static_cast<int>(gen() % 9);  // request 3: root only
    trees.push_back(random_tree(gen, n, V, true));
    Ps.push_back(random_rows(gen, n, V, 0.3));
    Qs.push_back(random_rows(gen, n, V, 0.3));
    params.push_back(
        params_of(all_modes[r % 6], 1000 + static_cast<std::uint64_t>(r), 50 + static_cast<std::uint32_t>(r), 2));
  }
  // Individual reference results.
  runner rn;
  std::vector<verify_result> ref(static_cast<std::size_t>(R));
  std::vector<std::vector<token_id>> ref_toks(static_cast<std::size_t>(R));
  for (int r = 0; r < R; ++r) {
    REQUIRE(rn.run(trees[static_cast<std::size_t>(r)], Ps[static_cast<std::size_t>(r)], Qs[static_cast<std::size_t>(r)],
                   V, params[static_cast<std::size_t>(r)], ref[static_cast<std::size_t>(r)])
                .ok());
    ref_toks[static_cast<std::size_t>(r)] = rn.toks;
  }
  CHECK(ref[3].accepted == 0);
  // Pack the batch in a given order.
  auto run_batch = [&](const std::vector<int>& order, std::vector<verify_result>& res,
                       std::vector<std::vector<token_id>>& toks, std::vector<std::int64_t>& per_depth,
                       int corrupt) -> status {
    std::vector<std::int32_t> off = {0};
    std::vector<token_id> tok;
    std::vector<node_id> par;
    std::vector<float> P, Q;
    std::vector<verify_params> ps;
    for (int r : order) {
      const auto& t = trees[static_cast<std::size_t>(r)];
      tok.insert(tok.end(), t.tokens().begin(), t.tokens().end());
      par.insert(par.end(), t.parents().begin(), t.parents().end());
      P.insert(P.end(), Ps[static_cast<std::size_t>(r)].begin(), Ps[static_cast<std::size_t>(r)].end());
      Q.insert(Q.end(), Qs[static_cast<std::size_t>(r)].begin(), Qs[static_cast<std::size_t>(r)].end());
      ps.push_back(params[static_cast<std::size_t>(r)]);
      off.push_back(off.back() + t.size());
    }
    if (corrupt >= 0)
      P[static_cast<std::size_t>(off[static_cast<std::size_t>(corrupt)] * V)] = std::numeric_limits<float>::quiet_NaN();
    const int L = 12;
    std::vector<node_id> paths(static_cast<std::size_t>(R * L), -9);
    std::vector<token_id> outt(static_cast<std::size_t>(R * L), -9);
    res.assign(static_cast<std::size_t>(R), verify_result{});
    verify_batch_input in{off, tree_view{tok.data(), par.data(), nullptr, nullptr, off.back()},
                          make_view(P.data(), off.back(), V).as_const(), make_view(Q.data(), off.back(), V).as_const(),
                          ps};
    std::vector<std::byte> ws(verify_batch_workspace_size(V, off));
    per_depth.assign(4, 0);
    const verify_batch_output out{make_view(paths.data(), R, L), make_view(outt.data(), R, L), res, per_depth};
    const status st = verify_batch(in, ws, out);
    toks.assign(static_cast<std::size_t>(R), {});
    for (int i = 0; i < R; ++i)
      toks[static_cast<std::size_t>(i)].assign(outt.begin() + i * L, outt.begin() + (i + 1) * L);
    return st;
  };
  std::vector<int> order(static_cast<std::size_t>(R));
  std::iota(order.begin(), order.end(), 0);
  std::vector<verify_result> res;
  std::vector<std::vector<token_id>> toks;
  std::vector<std::int64_t> per_depth;
  REQUIRE(run_batch(order, res, toks, per_depth, -1).ok());
  std::vector<std::int64_t> want_depth(4, 0);
  for (int r = 0; r < R; ++r) {
    CHECK(res[static_cast<std::size_t>(r)].accepted == ref[static_cast<std::size_t>(r)].accepted);
    CHECK(res[static_cast<std::size_t>(r)].next_token == ref[static_cast<std::size_t>(r)].next_token);
    CHECK(res[static_cast<std::size_t>(r)].code == status_code::ok);
    for (int k = 0; k <= ref[static_cast<std::size_t>(r)].accepted; ++k)
      CHECK(toks[static_cast<std::size_t>(r)][static_cast<std::size_t>(k)] ==
            ref_toks[static_cast<std::size_t>(r)][static_cast<std::size_t>(k)]);
    for (int d = 1; d <= ref[static_cast<std::size_t>(r)].accepted && d <= 4; ++d)
      ++want_depth[static_cast<std::size_t>(d - 1)];
  }
  CHECK(per_depth == want_depth);
  // Reversed order: each request's result is unchanged.
  std::reverse(order.begin(), order.end());
  REQUIRE(run_batch(order, res, toks, per_depth, -1).ok());
  for (int i = 0; i < R; ++i) {
    const int r = order[static_cast<std::size_t>(i)];
    CHECK(res[static_cast<std::size_t>(i)].next_token == ref[static_cast<std::size_t>(r)].next_token);
    CHECK(res[static_cast<std::size_t>(i)].accepted == ref[static_cast<std::size_t>(r)].accepted);
  }
  // A NaN root row in request 5 (position 5): its code is set, the others are still verified.
  std::iota(order.begin(), order.end(), 0);
  const status st = run_batch(order, res, toks, per_depth, 5);
  CHECK(st == status_code::non_finite);
  CHECK(st.index() == 5);
  CHECK(res[5].code == status_code::non_finite);
  CHECK(toks[5][0] == -9);
  for (int r = 0; r < R; ++r)
    if (r != 5) CHECK(res[static_cast<std::size_t>(r)].next_token == ref[static_cast<std::size_t>(r)].next_token);
}

TEST_CASE("batched verification rejects malformed batches before writing") {
  const std::vector<std::int32_t> off = {0, 2, 2};  // second request empty
  const token_id tok[] = {0, 1};
  const node_id par[] = {-1, 0};
  std::vector<float> P(8, 0.25f);
  const verify_params ps[2] = {};
  std::vector<verify_result> res(2, verify_result{3, 3, 3, status_code::ok});
  std::vector<node_id> paths(4);
  std::vector<token_id> toks(4);
  std::vector<std::byte> ws(1024);
  verify_batch_input in{off, tree_view{tok, par, nullptr, nullptr, 2}, make_view(P.data(), 2, 4).as_const(),
                        make_view(P.data(), 2, 4).as_const(), ps};
  const verify_batch_output out{make_view(paths.data(), 2, 2), make_view(toks.data(), 2, 2), res, {}};
  CHECK(verify_batch(in, ws, out) == status_code::not_sorted);
  CHECK(res[0].accepted == 3);
  const std::vector<std::int32_t> off2 = {0, 2};
  in.offsets = off2;
  CHECK(verify_batch(in, ws, out) == status_code::size_mismatch);  // params has 2 entries
}

TEST_CASE("vectorised and scalar row passes agree bit for bit") {
  std::mt19937 gen(21);
  INFO("seed 21");
  const detail::host_row_ops ops{};
  for (std::int64_t V : {1, 7, 8, 9, 31, 64, 100, 1003, 1024, 1025, 3000, 5000}) {
    INFO("V = " << V);
    const auto P = random_rows(gen, 1, V, 0.3);
    const auto Q = random_rows(gen, 1, V, 0.3);
    // The same rows at stride 2 take the scalar (gathered) path.
    std::vector<float> P2(static_cast<std::size_t>(2 * V)), Q2(static_cast<std::size_t>(2 * V));
    for (std::int64_t i = 0; i < V; ++i) {
      P2[static_cast<std::size_t>(2 * i)] = P[static_cast<std::size_t>(i)];
      Q2[static_cast<std::size_t>(2 * i)] = Q[static_cast<std::size_t>(i)];
    }
    const detail::row_ref cp{P.data(), 1}, cq{Q.data(), 1};
    const detail::row_ref sp{P2.data(), 2}, sq{Q2.data(), 2};
    const auto nt = static_cast<std::size_t>(sum_tile_count(V));
    std::vector<double> t1(nt), t2(nt), t3(nt), u1(nt), u2(nt), u3(nt);
    double m1 = 0, m2 = 0;
    CHECK(ops.mass(cp, V, t1.data(), m1));
    CHECK(ops.mass(sp, V, t2.data(), m2));
    CHECK(m1 == m2);
    // The scalar reference of the fixed order.
    double ref = 0.0;
    for (std::size_t t = 0; t < nt; ++t) {
      const auto b = static_cast<std::int64_t>(t) * sum_tile;
      const double ts = detail::tile_tree_sum([&](std::int64_t i) { return P[static_cast<std::size_t>(b + i)]; },
                                              std::min<std::int64_t>(sum_tile, V - b));
      CHECK(ts == t1[t]);
      ref += ts;
    }
    CHECK(ref == m1);
    double total = 0.0;
    REQUIRE(validate_probability_row(make_view(P.data(), V).as_const(), &total).ok());
    CHECK(total == m1);
    double a[3], b[3];
    bool o[4];
    std::vector<float> R1(static_cast<std::size_t>(V)), R2(static_cast<std::size_t>(V));
    ops.first_residual(cp, cq, R1.data(), V, t1.data(), t2.data(), t3.data(), a[0], a[1], a[2], o[0], o[1]);
    ops.first_residual(sp, sq, R2.data(), V, u1.data(), u2.data(), u3.data(), b[0], b[1], b[2], o[2], o[3]);
    CHECK(R1 == R2);
    CHECK((a[0] == b[0] && a[1] == b[1] && a[2] == b[2]));
    CHECK((t3 == u3));
    CHECK(ops.update_residual(cq, R1.data(), 0.75f, V, t3.data()) ==
          ops.update_residual(sq, R2.data(), 0.75f, V, u3.data()));
    CHECK(R1 == R2);
    REQUIRE(ops.mass(cp, V, t1.data(), m1));
    for (double t : {0.0, 0.3, 0.999, std::nextafter(1.0, 0.0)}) {
      const double target = t * m1;
      const token_id y = ops.sample(cp, V, t1.data(), target);
      CHECK(y == ops.sample(sp, V, t1.data(), target));
      CHECK(y == sample_row(make_view(P.data(), V).as_const(), t, m1));
      const std::int64_t ext[1] = {V}, str[1] = {2};
      CHECK(y == sample_row(make_strided_view(static_cast<const float*>(P2.data()), ext, str), t, m1));
    }
    // Negative and NaN entries are caught on both paths; -0.0 is a probability.
    auto Pn = P;
    Pn[static_cast<std::size_t>(V - 1)] = -1e-9f;
    CHECK_FALSE(ops.mass(detail::row_ref{Pn.data(), 1}, V, t1.data(), m1));
    CHECK(ops.classify(detail::row_ref{Pn.data(), 1}, V) == status_code::negative_probability);
    Pn[static_cast<std::size_t>(V - 1)] = std::numeric_limits<float>::quiet_NaN();
    CHECK_FALSE(ops.mass(detail::row_ref{Pn.data(), 1}, V, t1.data(), m1));
    CHECK(ops.classify(detail::row_ref{Pn.data(), 1}, V) == status_code::non_finite);
    Pn[static_cast<std::size_t>(V - 1)] = -0.0f;
    CHECK(ops.mass(detail::row_ref{Pn.data(), 1}, V, t1.data(), m1));
  }
}
