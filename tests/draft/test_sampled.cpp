#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "draft_test_util.hpp"
#include "specdec/draft/sampled_tree.hpp"
#include "specdec/draft/static_tree.hpp"

using specdec::draft_context;
using specdec::draft_mode;
using specdec::status_code;
using specdec::token_id;

namespace {
struct fixed_drafter {
  std::vector<float> q;
  std::span<const float> probabilities(const draft_context&) { return q; }
};

double chi_square(const std::vector<double>& observed, const std::vector<double>& expected) {
  double c = 0;
  for (std::size_t i = 0; i < observed.size(); ++i)
    if (expected[i] > 0) c += (observed[i] - expected[i]) * (observed[i] - expected[i]) / expected[i];
  return c;
}
}  // namespace

TEST_CASE("iid sampled tree: children follow q (chi-square), deterministic per key") {
  fixed_drafter d{{0.5f, 0.0f, 0.2f, 0.3f}};  // unnormalized rows are fine too
  const int rounds = 20000;
  std::vector<double> counts(4, 0.0), pairs(16, 0.0);
  specdec::sampled_tree_builder b({.mode = draft_mode::iid, .widths = {2}});
  specdec::drafted_tree t;
  for (int r = 0; r < rounds; ++r) {
    REQUIRE(b.build(d, {.root_token = 0, .rng = {42, 3, static_cast<std::uint32_t>(r)}}, t).ok());
    REQUIRE(t.size() == 3);
    CHECK(t.child_mode[0] == draft_mode::iid);
    for (int c = 1; c < 3; ++c) counts[static_cast<std::size_t>(t.tree.token(c))] += 1;
    pairs[static_cast<std::size_t>(t.tree.token(1) * 4 + t.tree.token(2))] += 1;
  }
  // Siblings are independent (MSS assumes it): the ordered pair follows q x q,
  // repeats included. Equal siblings occur with probability sum q^2 = 0.38;
  // a without-replacement or correlated sampler would give 0 or 1.
  {
    const double qn[4] = {0.5, 0.0, 0.2, 0.3};
    std::vector<double> pexp(16, 0.0);
    double same = 0.0;
    for (int a = 0; a < 4; ++a) {
      for (int c = 0; c < 4; ++c) pexp[static_cast<std::size_t>(a * 4 + c)] = rounds * qn[a] * qn[c];
      same += pairs[static_cast<std::size_t>(a * 5)];
    }
    INFO("equal sibling pairs " << same);
    CHECK(chi_square(pairs, pexp) < 30.0);          // df = 8; p ~ 2e-4
    CHECK(std::abs(same - 0.38 * rounds) < 350.0);  // ~5 sigma
  }
  CHECK(counts[1] == 0);  // zero-probability tokens are never drafted
  const std::vector<double> exp = {0.5 * 2 * rounds, 0, 0.2 * 2 * rounds, 0.3 * 2 * rounds};
  INFO("counts " << counts[0] << " " << counts[2] << " " << counts[3]);
  CHECK(chi_square(counts, exp) < 20.0);  // df = 2; p ~ 5e-5
  // Negative control: the same counts are far from a wrong q.
  const std::vector<double> wrong = {0.4 * 2 * rounds, 0, 0.3 * 2 * rounds, 0.3 * 2 * rounds};
  CHECK(chi_square(counts, wrong) > 100.0);
  // Same key, same tree.
  specdec::drafted_tree t1, t2;
  REQUIRE(b.build(d, {.root_token = 0, .rng = {7, 1, 2}}, t1).ok());
  REQUIRE(b.build(d, {.root_token = 0, .rng = {7, 1, 2}}, t2).ok());
  CHECK(t1.tree == t2.tree);
}

TEST_CASE("Gumbel-top-k tree: ordered sibling pairs follow sequential sampling without replacement") {
  const std::vector<float> q = {0.4f, 0.3f, 0.2f, 0.1f};
  fixed_drafter d{q};
  const int rounds = 20000;
  std::map<std::pair<int, int>, double> counts;
  specdec::sampled_tree_builder b({.mode = draft_mode::without_replacement, .widths = {2}});
  specdec::drafted_tree t;
  for (int r = 0; r < rounds; ++r) {
    REQUIRE(b.build(d, {.root_token = 0, .rng = {9, 0, static_cast<std::uint32_t>(r)}}, t).ok());
    REQUIRE(t.size() == 3);
    CHECK(t.tree.token(1) != t.tree.token(2));
    CHECK(t.child_mode[0] == draft_mode::without_replacement);
    counts[{t.tree.token(1), t.tree.token(2)}] += 1;
  }
  std::vector<double> obs, exp, iid;
  for (int a = 0; a < 4; ++a)
    for (int c = 0; c < 4; ++c) {
      if (a == c) continue;
      obs.push_back(counts[{a, c}]);
      exp.push_back(rounds * q[a] * q[c] / (1.0 - q[a]));
      // Negative control: pairs drawn i.i.d. and conditioned on being distinct.
      double z = 0;
      for (int x = 0; x < 4; ++x) z += q[x] * q[x];
      iid.push_back(rounds * q[a] * q[c] / (1.0 - z));
    }
  CHECK(chi_square(obs, exp) < 45.0);  // df = 11; p ~ 4e-6
  CHECK(chi_square(obs, iid) > 100.0);
}

TEST_CASE("sampled trees: multi-level shape, widths and bad inputs") {
  draft_test::path_drafter d{.V = 6, .seed = 3};
  specdec::sampled_tree_builder b({.mode = draft_mode::without_replacement, .widths = {3, 2}});
  specdec::drafted_tree t;
  REQUIRE(b.build(d, {.root_token = 0, .rng = {1, 2, 3}}, t).ok());
  CHECK(t.size() == 1 + 3 + 6);
  CHECK(d.calls == 4);
  for (specdec::node_id i = 1; i < t.size(); ++i) {
    const auto row = d.make(draft_test::path_of(t.tree, t.tree.parent(i)));
    CHECK(t.prob[static_cast<std::size_t>(i)] == Approx(row[static_cast<std::size_t>(t.tree.token(i))]));
  }
  // Without replacement: asking for more children than positive tokens gives fewer.
  fixed_drafter two{{0.0f, 0.5f, 0.5f}};
  specdec::sampled_tree_builder b2({.mode = draft_mode::without_replacement, .widths = {3}});
  REQUIRE(b2.build(two, {}, t).ok());
  CHECK(t.size() == 3);
  fixed_drafter nan_d{{0.5f, std::numeric_limits<float>::quiet_NaN()}};
  CHECK(specdec::sampled_tree_builder({.widths = {1}}).build(nan_d, {}, t) == status_code::non_finite);
  fixed_drafter neg{{0.5f, -0.5f}};
  CHECK(specdec::sampled_tree_builder({.widths = {1}}).build(neg, {}, t) == status_code::negative_probability);
  CHECK(specdec::sampled_tree_builder({.widths = {0}}).build(two, {}, t) == status_code::invalid_argument);
  CHECK(specdec::sampled_tree_builder({.mode = draft_mode::deterministic}).build(two, {}, t) ==
        status_code::invalid_argument);
  CHECK(specdec::sampled_tree_builder({.widths = {1}, .vocab_size = 5}).build(two, {}, t) ==
        status_code::size_mismatch);
}

// ---- caller-supplied uniforms (draft_round::uniforms) -----------------------

namespace {
// The Philox draws a build would make, copied into a caller buffer.
std::vector<double> philox_copy(const specdec::rng_stream& key, int nodes, int draws) {
  const specdec::rng_stream r = specdec::for_purpose(key, specdec::rng_purpose::draft);
  std::vector<double> u(static_cast<std::size_t>(nodes * draws));
  for (int n = 0; n < nodes; ++n)
    for (int d = 0; d < draws; ++d)
      u[static_cast<std::size_t>(n * draws + d)] =
          r.uniform_double(static_cast<std::uint32_t>(n), static_cast<std::uint32_t>(d));
  return u;
}
}  // namespace

TEST_CASE("draft uniforms: Philox values copied into the caller buffer give identical trees") {
  constexpr int V = 12;
  draft_test::path_drafter d{V, 5, 0, 0.2};
  const std::vector<token_id> hist = {3, 4};
  for (std::uint32_t round = 0; round < 50; ++round) {
    const specdec::rng_stream key{77, 2, round};
    INFO("round " << round);
    // i.i.d. and Gumbel sampled trees; static shapes in both sampled modes.
    specdec::sampled_tree_builder iid({.mode = draft_mode::iid, .widths = {3, 2, 2}, .vocab_size = V});
    specdec::sampled_tree_builder wor({.mode = draft_mode::without_replacement, .widths = {3, 2}, .vocab_size = V});
    specdec::static_tree_builder st_iid({.shape = {-1, 0, 0, 1, 1, 2}, .mode = draft_mode::iid, .vocab_size = V});
    specdec::static_tree_builder st_wor(
        {.shape = {-1, 0, 0, 0, 1, 3}, .mode = draft_mode::without_replacement, .vocab_size = V});
    auto same = [&](auto& b, int draws) {
      const auto u = philox_copy(key, b.node_bound(), draws);
      specdec::drafted_tree a, c;
      REQUIRE(b.build(d, specdec::draft_round{.root_token = 1, .rng = key, .history = hist}, a).ok());
      specdec::draft_round r{.root_token = 1, .rng = {1, 1, 1}, .history = hist};  // another key: unused
      r.uniforms = specdec::caller_uniforms{u.data(), b.node_bound(), draws};
      REQUIRE(b.build(d, r, c).ok());
      CHECK(a.tree == c.tree);
      CHECK(a.child_mode == c.child_mode);
    };
    same(iid, 3);
    same(wor, V);
    same(st_iid, 2);
    same(st_wor, V);
  }
}

TEST_CASE("draft uniforms from std::mt19937_64 pass the builders' chi-square tests (with negative controls)") {
  std::mt19937_64 g(20261122);
  std::uniform_real_distribution<double> unif(0.0, 1.0);
  const int rounds = 20000;
  std::vector<double> u;
  auto fill = [&](int n) {
    u.resize(static_cast<std::size_t>(n));
    for (auto& x : u) x = unif(g);
  };
  SECTION("i.i.d. children: ordered sibling pairs follow q x q") {
    fixed_drafter d{{0.5f, 0.0f, 0.2f, 0.3f}};
    specdec::sampled_tree_builder b({.mode = draft_mode::iid, .widths = {2}});
    specdec::drafted_tree t;
    std::vector<double> pairs(16, 0.0);
    for (int r = 0; r < rounds; ++r) {
      fill(2);
      specdec::draft_round dr{.root_token = 0};
      dr.uniforms = specdec::caller_uniforms{u.data(), 1, 2};
      REQUIRE(b.build(d, dr, t).ok());
      pairs[static_cast<std::size_t>(t.tree.token(1) * 4 + t.tree.token(2))] += 1;
    }
    const double qn[4] = {0.5, 0.0, 0.2, 0.3}, wrong[4] = {0.4, 0.0, 0.3, 0.3};
    std::vector<double> pexp(16), pwrong(16);
    for (int a = 0; a < 4; ++a)
      for (int c = 0; c < 4; ++c) {
        pexp[static_cast<std::size_t>(a * 4 + c)] = rounds * qn[a] * qn[c];
        pwrong[static_cast<std::size_t>(a * 4 + c)] = rounds * wrong[a] * wrong[c];
      }
    CHECK(chi_square(pairs, pexp) < 30.0);     // df = 8; p ~ 2e-4
    CHECK(chi_square(pairs, pwrong) > 100.0);  // negative control
  }
  SECTION("Gumbel-top-2: ordered pairs follow sequential sampling without replacement") {
    const std::vector<float> q = {0.4f, 0.3f, 0.2f, 0.1f};
    fixed_drafter d{q};
    specdec::sampled_tree_builder b({.mode = draft_mode::without_replacement, .widths = {2}});
    specdec::drafted_tree t;
    std::map<std::pair<int, int>, double> counts;
    for (int r = 0; r < rounds; ++r) {
      fill(4);
      specdec::draft_round dr{.root_token = 0};
      dr.uniforms = specdec::caller_uniforms{u.data(), 1, 4};
      REQUIRE(b.build(d, dr, t).ok());
      counts[{t.tree.token(1), t.tree.token(2)}] += 1;
    }
    std::vector<double> obs, exp, iid;
    double z = 0;
    for (int x = 0; x < 4; ++x) z += q[static_cast<std::size_t>(x)] * q[static_cast<std::size_t>(x)];
    for (int a = 0; a < 4; ++a)
      for (int c = 0; c < 4; ++c) {
        if (a == c) continue;
        const double qa = q[static_cast<std::size_t>(a)], qc = q[static_cast<std::size_t>(c)];
        obs.push_back(counts[{a, c}]);
        exp.push_back(rounds * qa * qc / (1.0 - qa));
        iid.push_back(rounds * qa * qc / (1.0 - z));
      }
    CHECK(chi_square(obs, exp) < 45.0);   // df = 11; p ~ 4e-6
    CHECK(chi_square(obs, iid) > 100.0);  // negative control
  }
}

TEST_CASE("draft uniforms: 0 and the largest double below 1 are handled; bad values and short buffers refused") {
  fixed_drafter d{{0.0f, 0.5f, 0.2f, 0.3f}};
  const double top = std::nextafter(1.0, 0.0);
  specdec::drafted_tree t;
  specdec::sampled_tree_builder iid({.mode = draft_mode::iid, .widths = {2}});
  specdec::sampled_tree_builder wor({.mode = draft_mode::without_replacement, .widths = {2}});
  auto build = [&](specdec::sampled_tree_builder& b, std::vector<double> u, std::int32_t draws) {
    specdec::draft_round dr{.root_token = 0};
    dr.uniforms = specdec::caller_uniforms{u.data(), 1, draws};
    return b.build(d, dr, t);
  };
  // i.i.d.: u = 0 is the first positive token, u just below 1 the last one.
  REQUIRE(build(iid, {0.0, top}, 2).ok());
  CHECK(t.tree.token(1) == 1);
  CHECK(t.tree.token(2) == 3);
  // Gumbel: U = 0 gives an infinite key (ties: lower id); U just below 1 a finite one.
  REQUIRE(build(wor, {top, top, 0.0, top}, 4).ok());
  CHECK(t.tree.token(1) == 2);
  CHECK(t.tree.token(2) == 1);  // then the largest q
  REQUIRE(build(wor, {0.0, 0.0, 0.0, 0.0}, 4).ok());
  CHECK(t.tree.token(1) == 1);  // token 0 has q = 0: never drafted
  CHECK(t.tree.token(2) == 2);
  REQUIRE(build(wor, {top, top, top, top}, 4).ok());
  CHECK(t.tree.token(1) == 1);
  CHECK(t.tree.token(2) == 3);
  // Refused: 1, negative, NaN, and a buffer with too few draws per node.
  CHECK(build(iid, {0.5, 1.0}, 2) == status_code::invalid_argument);
  CHECK(build(iid, {-1e-300, 0.5}, 2) == status_code::invalid_argument);
  CHECK(build(wor, {0.5, std::numeric_limits<double>::quiet_NaN(), 0.5, 0.5}, 4) == status_code::invalid_argument);
  const auto st = build(wor, {0.5, 0.5}, 2);  // Gumbel needs V draws per node
  CHECK(st == status_code::invalid_argument);
  CHECK(st.index() == 0);
  specdec::sampled_tree_builder deep({.mode = draft_mode::iid, .widths = {1, 1}});
  std::vector<double> one = {0.5};
  specdec::draft_round dr{.root_token = 0};
  dr.uniforms = specdec::caller_uniforms{one.data(), 1, 1};  // covers node 0 only
  const auto s2 = deep.build(d, dr, t);
  CHECK(s2 == status_code::invalid_argument);
  CHECK(s2.index() == 1);
}
