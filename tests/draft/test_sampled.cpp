#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <vector>

#include "draft_test_util.hpp"
#include "specdec/draft/sampled_tree.hpp"

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
