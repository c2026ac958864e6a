#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "specdec/verify/distribution.hpp"

using namespace specdec;

namespace {

// Straightforward reference: softmax in double, full sort by the tie order, then filters.
std::vector<double> reference_probs(const std::vector<float>& logits, const sampling_params& sp) {
  const std::size_t V = logits.size();
  std::vector<double> out(V, 0.0);
  if (sp.temperature == 0.0f) {
    std::size_t a = 0;
    for (std::size_t i = 1; i < V; ++i)
      if (logits[i] > logits[a]) a = i;
    out[a] = 1.0;
    return out;
  }
  double m = -INFINITY;
  for (float x : logits) m = std::max(m, static_cast<double>(x));
  std::vector<double> e(V);
  for (std::size_t i = 0; i < V; ++i) e[i] = std::exp((static_cast<double>(logits[i]) - m) / sp.temperature);
  std::vector<std::size_t> order(V);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](std::size_t a, std::size_t b) { return e[a] > e[b] || (e[a] == e[b] && a < b); });
  std::vector<std::size_t> cand;
  for (std::size_t i : order)
    if (e[i] > 0 && e[i] >= sp.min_p) cand.push_back(i);
  if (sp.top_k > 0 && static_cast<std::size_t>(sp.top_k) < cand.size()) cand.resize(static_cast<std::size_t>(sp.top_k));
  if (sp.top_p < 1.0f) {
    double mass = 0;
    for (auto i : cand) mass += e[i];
    double cum = 0;
    std::size_t keep = 0;
    while (keep < cand.size() && (keep == 0 || cum < sp.top_p * mass)) cum += e[cand[keep++]];
    cand.resize(keep);
  }
  double kept = 0;
  for (auto i : cand) kept += e[i];
  for (auto i : cand) out[i] = e[i] / kept;
  return out;
}

status run_row(const std::vector<float>& logits, std::vector<float>& probs, const sampling_params& sp) {
  std::vector<std::byte> ws(logits_to_probs_workspace_size(static_cast<std::int64_t>(logits.size()), sp));
  return logits_to_probs_row(make_view(logits.data(), logits.size()), make_view(probs.data(), probs.size()), sp, ws);
}

}  // namespace

TEST_CASE("logits_to_probs matches a sort-based reference on random rows") {
  std::mt19937 gen(1234);
  INFO("seed 1234");
  const sampling_params cases[] = {
      {1.0f, 0, 1.0f, 0.0f},  {0.7f, 0, 1.0f, 0.0f},  {1.3f, 5, 1.0f, 0.0f}, {1.0f, 0, 0.8f, 0.0f},
      {0.5f, 0, 1.0f, 0.1f},  {1.0f, 7, 0.9f, 0.05f}, {0.0f, 3, 0.5f, 0.2f}, {2.0f, 1, 1.0f, 0.0f},
      {1.0f, 40, 0.3f, 0.0f}, {1.0f, 0, 1.0f, 1.0f},
  };
  for (int trial = 0; trial < 200; ++trial) {
    const std::size_t V = 1 + gen() % 60;
    std::vector<float> logits(V);
    // Few distinct values so ties are frequent and the tie order matters.
    for (auto& x : logits) x = static_cast<float>(static_cast<int>(gen() % 7)) * 0.5f - 1.5f;
    if (gen() % 4 == 0) logits[gen() % V] = -INFINITY;
    bool any_finite = false;
    for (float x : logits) any_finite = any_finite || x != -INFINITY;
    if (!any_finite) logits[0] = 0.0f;
    for (const auto& sp : cases) {
      std::vector<float> probs(V, -1.0f);
      REQUIRE(run_row(logits, probs, sp).ok());
      const auto ref = reference_probs(logits, sp);
      double sum = 0;
      for (std::size_t i = 0; i < V; ++i) {
        INFO("trial " << trial << " V " << V << " token " << i << " T " << sp.temperature << " k " << sp.top_k << " p "
                      << sp.top_p << " minp " << sp.min_p);
        CHECK(probs[i] == Approx(ref[i]).margin(1e-6));
        CHECK((probs[i] == 0.0f) == (ref[i] == 0.0));
        sum += probs[i];
      }
      CHECK(sum == Approx(1.0).margin(1e-5));
    }
  }
}

TEST_CASE("tie order: top-k and argmax keep the lowest id among equals") {
  std::vector<float> logits = {1.0f, 2.0f, 2.0f, 2.0f, 0.5f};
  std::vector<float> probs(5);
  REQUIRE(run_row(logits, probs, {1.0f, 2, 1.0f, 0.0f}).ok());
  CHECK(probs[1] == Approx(0.5f));
  CHECK(probs[2] == Approx(0.5f));
  CHECK(probs[3] == 0.0f);
  CHECK(probs[0] == 0.0f);
  REQUIRE(run_row(logits, probs, {0.0f, 0, 1.0f, 0.0f}).ok());
  CHECK(probs == std::vector<float>{0, 1, 0, 0, 0});
  CHECK(argmax_row(make_view(logits.data(), logits.size()).as_const()) == 1);
  // top-p stops at the shortest prefix: three equal tokens, p = 0.5 keeps two (ids 1, 2).
  std::vector<float> eq = {0.0f, 0.0f, 0.0f, 0.0f};
  std::vector<float> pe(4);
  REQUIRE(run_row(eq, pe, {1.0f, 0, 0.5f, 0.0f}).ok());
  CHECK(pe == std::vector<float>{0.5f, 0.5f, 0.0f, 0.0f});
}

TEST_CASE("logits_to_probs rejects bad input and leaves the output untouched") {
  std::vector<float> probs(3, 7.0f);
  const std::vector<float> nan_row = {0.0f, std::numeric_limits<float>::quiet_NaN(), 1.0f};
  auto s = run_row(nan_row, probs, {});
  CHECK(s == status_code::non_finite);
  CHECK(s.index() == 1);
  CHECK(probs == std::vector<float>(3, 7.0f));
  const std::vector<float> all_nan(3, std::numeric_limits<float>::quiet_NaN());
  CHECK(run_row(all_nan, probs, {}) == status_code::non_finite);
  CHECK(run_row(all_nan, probs, {0.0f, 0, 1.0f, 0.0f}) == status_code::non_finite);
  const std::vector<float> inf_row = {0.0f, INFINITY, 1.0f};
  CHECK(run_row(inf_row, probs, {}) == status_code::non_finite);
  const std::vector<float> masked(3, -INFINITY);
  CHECK(run_row(masked, probs, {}) == status_code::zero_mass);
  CHECK(probs == std::vector<float>(3, 7.0f));
  const std::vector<float> ok = {0.0f, 1.0f, 2.0f};
  CHECK(run_row(ok, probs, {-1.0f, 0, 1.0f, 0.0f}) == status_code::invalid_argument);
  CHECK(run_row(ok, probs, {1.0f, -1, 1.0f, 0.0f}) == status_code::invalid_argument);
  CHECK(run_row(ok, probs, {1.0f, 0, 0.0f, 0.0f}) == status_code::invalid_argument);
  CHECK(run_row(ok, probs, {1.0f, 0, 1.0f, 1.5f}) == status_code::invalid_argument);
  CHECK(run_row(ok, probs, {NAN, 0, 1.0f, 0.0f}) == status_code::invalid_argument);
  CHECK(run_row(ok, probs, {1e-40f, 0, 1.0f, 0.0f}) == status_code::invalid_argument);  // 1/T overflows
  std::vector<float> short_out(2);
  CHECK(logits_to_probs_row(make_view(ok.data(), 3), make_view(short_out.data(), 2), sampling_params{}, {}) ==
        status_code::size_mismatch);
  CHECK(logits_to_probs_row(make_view(ok.data(), 3), make_view(probs.data(), 3), sampling_params{1.0f, 2, 1.0f, 0.0f},
                            {}) == status_code::buffer_too_small);
  CHECK(probs == std::vector<float>(3, 7.0f));
}

TEST_CASE("logits_to_probs: contiguous rows (vector max and normalisation) equal strided rows bit for bit") {
  // A contiguous float row takes the integer-key max and a vectorised last
  // pass; a strided copy of it takes the scalar passes. Same probabilities,
  // same status and index, on rows with -inf, ties, +-0 maxima and bad entries.
  const std::uint64_t seed = 20261131;
  std::printf("contiguous logits seed %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 4.0f);
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (const std::int64_t V : {1, 2, 7, 64, 1000, 4099}) {
    for (int kind = 0; kind < 9; ++kind) {
      std::vector<float> row(static_cast<std::size_t>(V));
      for (auto& x : row) {
        const auto r = rng() % 10;
        x = r == 0 ? -inf : kind == 1 ? static_cast<float>(rng() % 3) : nd(rng);  // kind 1: many ties
      }
      const auto at = static_cast<std::size_t>(rng() % static_cast<std::uint64_t>(V));
      const auto at2 = static_cast<std::size_t>(rng() % static_cast<std::uint64_t>(V));
      if (kind == 2) std::fill(row.begin(), row.end(), -inf), row[at] = -0.0f, row[at2] = 0.0f;  // +-0 maxima
      if (kind == 3) row[at] = nan;
      if (kind == 4) row[at] = inf;
      if (kind == 5) row[at] = -nan;
      if (kind == 6) std::fill(row.begin(), row.end(), -inf);
      if (kind == 7) row[at] = std::numeric_limits<float>::max(), row[at2] = -std::numeric_limits<float>::max();
      if (kind == 8) row[at] = std::numeric_limits<float>::denorm_min();
      std::vector<float> strided(static_cast<std::size_t>(2 * V), 123.0f), pa(static_cast<std::size_t>(V), 7.0f);
      std::vector<float> pb(static_cast<std::size_t>(2 * V), 7.0f);
      for (std::int64_t i = 0; i < V; ++i) strided[static_cast<std::size_t>(2 * i)] = row[static_cast<std::size_t>(i)];
      for (const float t : {1.0f, 0.7f, 0.0f}) {
        const sampling_params sp{t, 0, 1.0f, 0.0f};
        const status a = logits_to_probs_row(make_view<const float>(row.data(), V), make_view(pa.data(), V), sp, {});
        const status b = logits_to_probs_row(view1d<const float>{strided.data(), {V}, {2}},
                                             view1d<float>{pb.data(), {V}, {2}}, sp, {});
        CHECK(a.code() == b.code());
        CHECK(a.index() == b.index());
        for (std::int64_t i = 0; i < V; ++i)
          CHECK(pa[static_cast<std::size_t>(i)] == pb[static_cast<std::size_t>(2 * i)]);
      }
    }
  }
}

TEST_CASE("batched logits_to_probs with per-row params and strided rows") {
  // 3 rows of V = 4 inside a buffer with row stride 6 (padding columns).
  std::vector<float> buf = {0, 1, 2, 3, 99, 99, 1, 1, 1, 1, 99, 99, 3, 2, 1, 0, 99, 99};
  const auto lv = make_strided_view<const float, 2>(buf.data(), {3, 4}, {6, 1});
  std::vector<float> out(12, -1.0f);
  const sampling_params ps[3] = {{0.0f, 0, 1.0f, 0.0f}, {1.0f, 0, 1.0f, 0.0f}, {1.0f, 1, 1.0f, 0.0f}};
  std::vector<std::byte> ws(logits_to_probs_workspace_size(4, std::span<const sampling_params>(ps)));
  REQUIRE(logits_to_probs(lv, make_view(out.data(), 3, 4), std::span<const sampling_params>(ps), ws).ok());
  CHECK(out == std::vector<float>{0, 0, 0, 1, .25f, .25f, .25f, .25f, 1, 0, 0, 0});
  buf[7] = NAN;
  auto s = logits_to_probs(lv, make_view(out.data(), 3, 4), std::span<const sampling_params>(ps), ws);
  CHECK(s == status_code::non_finite);
  CHECK(s.index() == 1);
}

TEST_CASE("probability row validation, argmax and inverse-CDF sampling") {
  std::vector<float> p = {0.0f, 0.25f, 0.0f, 0.75f, 0.0f};
  const auto v = make_view(p.data(), p.size()).as_const();
  double total = 0;
  REQUIRE(validate_probability_row(v, &total).ok());
  CHECK(total == 1.0);
  CHECK(sample_row(v, 0.0f, total) == 1);
  CHECK(sample_row(v, 0.2499f, total) == 1);
  CHECK(sample_row(v, 0.25f, total) == 3);  // strict <: the boundary belongs to the next token
  CHECK(sample_row(v, 0.9999999f, total) == 3);
  // Rounding fallback: a total larger than the real mass still yields a valid positive token.
  CHECK(sample_row(v, 0.9999999f, 2.0) == 3);
  CHECK(argmax_row(v) == 3);
  token_id t = -1;
  CHECK(sample_row_checked(v, 1.0f, &t) == status_code::invalid_argument);
  CHECK(t == -1);
  REQUIRE(sample_row_checked(v, 0.5f, &t).ok());
  CHECK(t == 3);
  std::vector<float> bad = {0.1f, -0.1f};
  CHECK(validate_probability_row(make_view(bad.data(), 2).as_const()) == status_code::negative_probability);
  bad = {0.0f, 0.0f};
  CHECK(validate_probability_row(make_view(bad.data(), 2).as_const()) == status_code::zero_mass);
  bad = {NAN, 1.0f};
  CHECK(validate_probability_row(make_view(bad.data(), 2).as_const()) == status_code::non_finite);
  bad = {1.0f, INFINITY};
  CHECK(validate_probability_row(make_view(bad.data(), 2).as_const()) == status_code::non_finite);
  // argmax ignores a leading NaN.
  bad = {NAN, 1.0f};
  CHECK(argmax_row(make_view(bad.data(), 2).as_const()) == 1);
}

TEST_CASE("temperature 0 is token-identical to argmax decoding") {
  std::mt19937 gen(99);
  INFO("seed 99");
  for (int trial = 0; trial < 100; ++trial) {
    const std::size_t V = 1 + gen() % 300;
    std::vector<float> logits(V);
    for (auto& x : logits) x = static_cast<float>(gen() % 50) * 0.1f;
    std::vector<float> probs(V);
    REQUIRE(run_row(logits, probs, {0.0f, 0, 1.0f, 0.0f}).ok());
    const auto a = argmax_row(make_view(logits.data(), V).as_const());
    const auto b = argmax_row(make_view(probs.data(), V).as_const());
    CHECK(a == b);
    CHECK(probs[static_cast<std::size_t>(a)] == 1.0f);
    double total = 0;
    REQUIRE(validate_probability_row(make_view(probs.data(), V).as_const(), &total).ok());
    CHECK(sample_row(make_view(probs.data(), V).as_const(), 0.999f, total) == a);
  }
}

namespace {
struct my_half {
  unsigned short bits;
  explicit operator float() const { return static_cast<float>(bits) / 1024.0f; }
};
struct no_conversion {};
}  // namespace

// Positive and negative checks of the row element concept.
static_assert(specdec::score_value<float>);
static_assert(specdec::score_value<double>);
static_assert(specdec::score_value<int>);
static_assert(specdec::score_value<my_half>);
static_assert(!specdec::score_value<no_conversion>);
static_assert(!specdec::score_value<float*>);
static_assert(!specdec::score_value<std::vector<float>>);

TEST_CASE("logits_to_probs accepts a caller element type") {
  const std::vector<my_half> logits = {{0}, {1024}, {2048}};
  std::vector<float> probs(3);
  REQUIRE(logits_to_probs_row(make_view(logits.data(), 3), make_view(probs.data(), 3), sampling_params{}, {}).ok());
  CHECK(probs[2] > probs[1]);
  CHECK(probs[1] > probs[0]);
  CHECK(argmax_row(make_view(logits.data(), 3)) == 2);
}
