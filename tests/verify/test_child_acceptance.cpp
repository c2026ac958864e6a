// child_acceptance: the chance verification accepts a child given its
// parent was reached, against the frequency verify_tree accepts it with
// (fresh drafts from q per trial for the sampled modes), with a negative
// control (a wrong expectation the same frequencies must reject); and its
// bad-input statuses.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "specdec/verify/child_acceptance.hpp"
#include "specdec/verify/tree_verify.hpp"

#ifndef SPECDEC_VERIFY_TRIAL_SCALE
#define SPECDEC_VERIFY_TRIAL_SCALE 1
#endif

using namespace specdec;

namespace {

constexpr std::int64_t V = 6;
// Root with three children; node 1 with two; node 4 with one.
constexpr std::array<node_id, 7> parents = {-1, 0, 0, 0, 1, 1, 4};

struct rows {
  std::vector<float> p, q;
};

rows random_rows(std::mt19937_64& rng) {
  rows r;
  std::gamma_distribution<double> g(0.6, 1.0);
  for (std::vector<float>* m : {&r.p, &r.q}) {
    m->resize(parents.size() * V);
    for (std::size_t u = 0; u < parents.size(); ++u) {
      double s = 0.0;
      std::array<double, V> w{};
      for (auto& x : w) s += (x = g(rng) + 1e-3);
      for (std::int64_t x = 0; x < V; ++x) (*m)[u * V + static_cast<std::size_t>(x)] = static_cast<float>(w[x] / s);
    }
  }
  return r;
}

token_id draw(const float* row, std::mt19937_64& rng, const std::vector<token_id>& taken) {
  double total = 0.0;
  for (std::int64_t x = 0; x < V; ++x)
    if (std::find(taken.begin(), taken.end(), x) == taken.end()) total += row[x];
  double u = std::uniform_real_distribution<double>(0.0, total)(rng);
  token_id last = 0;
  for (std::int64_t x = 0; x < V; ++x) {
    if (std::find(taken.begin(), taken.end(), x) != taken.end()) continue;
    last = static_cast<token_id>(x);
    if ((u -= row[x]) < 0.0) return last;
  }
  return last;
}

// Largest |frequency - expected| / sd over the children with an expectation
// (expected(c) < 0: skipped) after `trials` rounds of verify_tree.
template <class Expect>
double max_z(const rows& r, verify_mode mode, std::uint64_t seed, int trials, bool redraw, Expect expected) {
  std::mt19937_64 rng(seed);
  std::array<token_id, parents.size()> tokens = {0, 2, 2, 4, 1, 3, 0};  // a duplicate under the root
  std::array<double, parents.size()> reached{}, accepted{}, sum_expected{};
  std::vector<std::byte> ws(verify_workspace_size(V, static_cast<std::int32_t>(parents.size())));
  std::array<node_id, parents.size()> path{};
  std::array<token_id, parents.size()> emitted{};
  std::array<float, parents.size()> out{};
  verify_params vp;
  vp.mode = mode;
  vp.seed = seed;
  for (int t = 0; t < trials; ++t) {
    if (redraw) {  // the sampled modes: children drawn from q_u, i.i.d. or without replacement
      for (node_id u = 0; u < static_cast<node_id>(parents.size()); ++u) {
        std::vector<token_id> taken;
        for (std::size_t c = 1; c < parents.size(); ++c)
          if (parents[c] == u) {
            tokens[c] = draw(r.q.data() + u * V, rng, taken);
            if (mode == verify_mode::sampled_without_replacement) taken.push_back(tokens[c]);
          }
      }
    }
    const tree_view tv{tokens.data(), parents.data(), nullptr, nullptr, static_cast<std::int32_t>(parents.size())};
    vp.round = static_cast<std::uint32_t>(t);
    verify_result res;
    const auto pv = make_view<const float>(r.p.data(), static_cast<std::int64_t>(parents.size()), V);
    const auto qv = make_view<const float>(r.q.data(), static_cast<std::int64_t>(parents.size()), V);
    REQUIRE(verify_tree(tv, pv, qv, vp, ws, path, emitted, res).ok());
    const std::span<const node_id> accepted_path(path.data(), static_cast<std::size_t>(res.accepted) + 1);
    REQUIRE(child_acceptance(tv, accepted_path, mode, pv, qv, out).ok());
    for (std::size_t i = 0; i < accepted_path.size(); ++i) {
      const node_id u = accepted_path[i];
      const node_id next = i + 1 < accepted_path.size() ? accepted_path[i + 1] : -1;
      for (std::size_t c = 1; c < parents.size(); ++c) {
        if (parents[c] != u) continue;
        const double e = expected(tv, u, static_cast<node_id>(c), out[c]);
        if (e < 0.0) continue;
        reached[c] += 1.0;
        accepted[c] += static_cast<node_id>(c) == next ? 1.0 : 0.0;
        sum_expected[c] += e;
      }
    }
  }
  double z = 0.0;
  for (std::size_t c = 1; c < parents.size(); ++c) {
    if (reached[c] < 100.0) continue;
    const double e = sum_expected[c] / reached[c], f = accepted[c] / reached[c];
    const double sd = std::sqrt(std::max(e * (1.0 - e), 1e-4) / reached[c]);
    z = std::max(z, std::abs(f - e) / sd);
  }
  return z;
}

}  // namespace

TEST_CASE("child_acceptance: the frequency verify_tree accepts a child with, given its parent was reached") {
  const int trials = 120000 / SPECDEC_VERIFY_TRIAL_SCALE;
  for (const std::uint64_t seed : {11u, 12u}) {
    std::mt19937_64 rng(seed);
    const rows r = random_rows(rng);
    std::printf("child_acceptance seed %llu, %d trials per mode\n", static_cast<unsigned long long>(seed), trials);
    // What the function reports, checked against the frequencies.
    const auto reported = [](const tree_view&, node_id, node_id, float v) { return static_cast<double>(v); };
    for (const verify_mode m : {verify_mode::sampled_iid, verify_mode::sampled_without_replacement}) {
      CHECK(max_z(r, m, seed, trials, true, reported) < 5.0);
      // Negative control: the chance that a draw from p equals the draw from q.
      const auto wrong = [&](const tree_view&, node_id u, node_id, float v) {
        if (v < 0.0f) return -1.0;
        double s = 0.0;
        for (std::int64_t x = 0; x < V; ++x)
          s += static_cast<double>(r.p[static_cast<std::size_t>(u * V + x)]) * r.q[static_cast<std::size_t>(u * V + x)];
        return s;
      };
      CHECK(max_z(r, m, seed, trials, true, wrong) > 5.0);
    }
    for (const verify_mode m : {verify_mode::deterministic, verify_mode::naive_matching}) {
      CHECK(max_z(r, m, seed, trials, false, reported) < 5.0);
      // Negative control: the drafter's chance q_u(x) instead of the target's.
      const auto wrong = [&](const tree_view& t, node_id u, node_id c, float v) {
        return v <= 0.0f ? static_cast<double>(v) : r.q[static_cast<std::size_t>(u * V + t.token[c])];
      };
      CHECK(max_z(r, m, seed, trials, false, wrong) > 5.0);
    }
  }
}

TEST_CASE("child_acceptance: which entries are known, by mode") {
  std::mt19937_64 rng(3);
  const rows r = random_rows(rng);
  const std::array<token_id, parents.size()> tokens = {0, 2, 2, 4, 1, 3, 0};
  const tree_view tv{tokens.data(), parents.data(), nullptr, nullptr, static_cast<std::int32_t>(parents.size())};
  const auto pv = make_view<const float>(r.p.data(), static_cast<std::int64_t>(parents.size()), V);
  const auto qv = make_view<const float>(r.q.data(), static_cast<std::int64_t>(parents.size()), V);
  const node_id path[] = {0, 1, 4};  // node 4's child 6 is offered; node 1's second child 5 too
  std::array<float, parents.size()> out{};
  REQUIRE(child_acceptance(tv, path, verify_mode::sampled_iid, pv, qv, out).ok());
  double overlap = 0.0;
  for (std::int64_t x = 0; x < V; ++x)
    overlap += std::min(r.p[static_cast<std::size_t>(x)], r.q[static_cast<std::size_t>(x)]);
  CHECK(out[1] == Approx(overlap).epsilon(1e-5));
  CHECK(out[2] == -1.0f);  // later siblings: unknown
  CHECK(out[3] == -1.0f);
  CHECK(out[4] >= 0.0f);
  CHECK(out[5] == -1.0f);
  CHECK(out[6] >= 0.0f);
  CHECK(out[0] == -1.0f);
  REQUIRE(child_acceptance(tv, path, verify_mode::deterministic, pv, {}, out).ok());
  CHECK(out[1] == Approx(r.p[2]).epsilon(1e-5));
  CHECK(out[2] == 0.0f);  // token 2 again: the first child carrying it takes the draw
  CHECK(out[3] == Approx(r.p[4]).epsilon(1e-5));
  for (const verify_mode m : {verify_mode::greedy, verify_mode::typical_lossy, verify_mode::block}) {
    REQUIRE(child_acceptance(tv, path, m, pv, qv, out).ok());
    CHECK(std::all_of(out.begin(), out.end(), [](float v) { return v == -1.0f; }));
  }
}

TEST_CASE("child_acceptance: bad input gets a status and no write past out") {
  std::mt19937_64 rng(4);
  rows r = random_rows(rng);
  std::array<token_id, parents.size()> tokens = {0, 2, 2, 4, 1, 3, 0};
  const tree_view tv{tokens.data(), parents.data(), nullptr, nullptr, static_cast<std::int32_t>(parents.size())};
  const auto pv = make_view<const float>(r.p.data(), static_cast<std::int64_t>(parents.size()), V);
  const auto qv = make_view<const float>(r.q.data(), static_cast<std::int64_t>(parents.size()), V);
  std::array<float, parents.size() + 1> buf{};
  buf.back() = 7.0f;  // guard
  const std::span<float> out(buf.data(), parents.size());
  const node_id good[] = {0, 1}, not_root[] = {1, 4}, not_linked[] = {0, 4};
  CHECK(child_acceptance(tv, not_root, verify_mode::sampled_iid, pv, qv, out) == status_code::invalid_argument);
  CHECK(child_acceptance(tv, not_linked, verify_mode::sampled_iid, pv, qv, out) == status_code::invalid_argument);
  CHECK(child_acceptance(tv, {}, verify_mode::sampled_iid, pv, qv, out) == status_code::invalid_argument);
  CHECK(child_acceptance(tv, good, static_cast<verify_mode>(99), pv, qv, out) == status_code::invalid_argument);
  CHECK(child_acceptance(tv, good, verify_mode::sampled_iid, pv, qv, out.first(3)) == status_code::size_mismatch);
  CHECK(child_acceptance(tv, good, verify_mode::sampled_iid, pv, {}, out) == status_code::size_mismatch);
  CHECK(child_acceptance(tv, good, verify_mode::sampled_iid, make_view<const float>(r.p.data(), 3, V), qv, out) ==
        status_code::size_mismatch);
  const node_id cyclic[] = {-1, 2, 0, 0, 1, 1, 4};
  const tree_view bad_tree{tokens.data(), cyclic, nullptr, nullptr, 7};
  CHECK_FALSE(child_acceptance(bad_tree, good, verify_mode::sampled_iid, pv, qv, out).ok());
  tokens[3] = static_cast<token_id>(V);  // out of range
  CHECK(child_acceptance(tv, good, verify_mode::deterministic, pv, {}, out) == status_code::invalid_argument);
  tokens[3] = 4;
  r.p[2] = NAN;  // row 0, read for the root's children
  CHECK(child_acceptance(tv, good, verify_mode::sampled_iid, pv, qv, out) == status_code::non_finite);
  CHECK(child_acceptance(tv, good, verify_mode::deterministic, pv, {}, out) == status_code::non_finite);
  r.p[2] = -0.1f;
  CHECK(child_acceptance(tv, good, verify_mode::sampled_iid, pv, qv, out) == status_code::non_finite);
  r.p[2] = INFINITY;
  CHECK(child_acceptance(tv, good, verify_mode::sampled_iid, pv, qv, out) == status_code::non_finite);
  CHECK(child_acceptance(tv, good, verify_mode::deterministic, pv, {}, out) == status_code::non_finite);
  r.p[2] = 0.1f;
  r.q[3] = NAN;  // q row 0
  CHECK(child_acceptance(tv, good, verify_mode::sampled_iid, pv, qv, out) == status_code::non_finite);
  r.q[3] = 0.1f;
  r.p[5] = NAN;  // the vector loop's tail
  CHECK(child_acceptance(tv, good, verify_mode::sampled_iid, pv, qv, out) == status_code::non_finite);
  CHECK(child_acceptance(tv, good, verify_mode::deterministic, pv, {}, out) == status_code::non_finite);
  CHECK(buf.back() == 7.0f);
}

TEST_CASE("child_acceptance: long rows (several tiles, vector loop and tail) against a plain double sum") {
  constexpr std::uint64_t seed = 6;
  std::printf("child_acceptance long rows seed %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> U(0.0f, 1.0f);
  for (const std::int64_t vocab : {std::int64_t{1}, std::int64_t{7}, std::int64_t{1024}, std::int64_t{3001}}) {
    std::vector<float> p(static_cast<std::size_t>(2 * vocab)), q(p.size());
    for (std::vector<float>* m : {&p, &q}) {
      for (auto& x : *m) x = U(rng);
      for (std::size_t u = 0; u < 2; ++u) {  // normalize each row
        double sum = 0.0;
        for (std::int64_t x = 0; x < vocab; ++x)
          sum += (*m)[u * static_cast<std::size_t>(vocab) + static_cast<std::size_t>(x)];
        for (std::int64_t x = 0; x < vocab; ++x)
          (*m)[u * static_cast<std::size_t>(vocab) + static_cast<std::size_t>(x)] /= static_cast<float>(sum);
      }
    }
    const node_id parent[] = {-1, 0};
    const token_id tokens[] = {0, static_cast<token_id>(vocab - 1)};
    const tree_view tv{tokens, parent, nullptr, nullptr, 2};
    const node_id path[] = {0};
    std::array<float, 2> out{};
    const auto pv = make_view<const float>(p.data(), 2, vocab), qv = make_view<const float>(q.data(), 2, vocab);
    double overlap = 0.0, mass = 0.0;
    for (std::int64_t x = 0; x < vocab; ++x) {
      overlap += std::min(p[static_cast<std::size_t>(x)], q[static_cast<std::size_t>(x)]);
      mass += p[static_cast<std::size_t>(x)];
    }
    INFO("V = " << vocab);
    REQUIRE(child_acceptance(tv, path, verify_mode::sampled_iid, pv, qv, out).ok());
    CHECK(out[1] == Approx(std::min(overlap, 1.0)).epsilon(1e-5));
    REQUIRE(child_acceptance(tv, path, verify_mode::deterministic, pv, {}, out).ok());
    CHECK(out[1] == Approx(p[static_cast<std::size_t>(vocab - 1)] / mass).epsilon(1e-5));
  }
}
