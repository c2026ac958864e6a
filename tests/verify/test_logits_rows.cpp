// Logits rows read through their sampling transform (sample/row_transform.hpp,
// sample/logits_rows.hpp): the radix-selected cuts against a sorted
// reference, the exp against std::exp, verify_batch on logits rows against
// verify_batch on the transformed rows written out, the law of the emitted
// token (chi-square, with a negative control), and bad input.
#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <vector>

#include "exactness_harness.hpp"
#include "row_types_util.hpp"
#include "specdec/sample/detail/host_rows.hpp"
#include "specdec/sample/logits_rows.hpp"
#include "specdec/sample/split_transform.hpp"
#include "specdec/verify/batch_verify.hpp"
#include "specdec/verify/distribution.hpp"

#ifndef SPECDEC_VERIFY_TRIAL_SCALE
#define SPECDEC_VERIFY_TRIAL_SCALE 1
#endif

using namespace specdec;

namespace {

constexpr float neg_inf = -std::numeric_limits<float>::infinity();

// Logits with ties (values on a coarse grid) and some -inf entries.
std::vector<float> random_logits(std::mt19937& gen, std::int64_t V, bool coarse) {
  std::normal_distribution<float> N(0.0f, 3.0f);
  std::vector<float> x(static_cast<std::size_t>(V));
  for (auto& v : x) {
    v = N(gen);
    if (coarse) v = std::round(v * 2.0f) / 2.0f;
    if (gen() % 10 == 0) v = neg_inf;
  }
  x[gen() % static_cast<std::size_t>(V)] = 4.0f;  // at least one finite entry
  return x;
}

detail::row_ref ref_of(const std::vector<float>& x) { return detail::row_ref{x.data(), 1}; }

// The kept set by definition: candidates sorted in the tie order, the
// first top_k, then the shortest prefix whose grid mass reaches the goal.
std::vector<char> reference_kept(const std::vector<float>& x, const sampling_params& sp, const row_transform& t) {
  const auto V = static_cast<std::int64_t>(x.size());
  struct cand {
    float w;
    std::int64_t i;
  };
  std::vector<cand> c;
  for (std::int64_t i = 0; i < V; ++i) {
    const float w = t.weight(x[static_cast<std::size_t>(i)]);
    if (w > 0.0f && w >= sp.min_p) c.push_back({w, i});
  }
  std::sort(c.begin(), c.end(), [](const cand& a, const cand& b) { return a.w > b.w || (a.w == b.w && a.i < b.i); });
  if (sp.top_k > 0 && static_cast<std::size_t>(sp.top_k) < c.size()) c.resize(static_cast<std::size_t>(sp.top_k));
  if (sp.top_p < 1.0f) {
    std::uint64_t q = 0;
    for (const auto& e : c) q += static_cast<std::uint64_t>(std::ldexp(static_cast<double>(e.w), 40));
    const double goal = static_cast<double>(sp.top_p) * static_cast<double>(q);
    std::uint64_t cum = 0;
    std::size_t keep = 0;
    while (keep < c.size() && (keep == 0 || static_cast<double>(cum) < goal)) {
      cum += static_cast<std::uint64_t>(std::ldexp(static_cast<double>(c[keep].w), 40));
      ++keep;
    }
    c.resize(keep);
  }
  std::vector<char> kept(static_cast<std::size_t>(V), 0);
  for (const auto& e : c) kept[static_cast<std::size_t>(e.i)] = 1;
  return kept;
}

std::vector<float> transformed(const std::vector<float>& x, const row_transform& t) {
  std::vector<float> p(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) p[i] = t(x[i], static_cast<std::int64_t>(i));
  return p;
}

}  // namespace

TEST_CASE("logits transform: exp is within a few ulp of std::exp, exact at 0, 0 far below") {
  CHECK(detail::weight_exp_rn(0.0f) == 1.0f);
  CHECK(detail::weight_exp_rn(-88.0f) == 0.0f);
  CHECK(detail::weight_exp_rn(neg_inf) == 0.0f);
  double worst = 0;
  for (float z = -87.0f; z <= 0.0f; z += 0.0137f) {
    const double e = std::exp(static_cast<double>(z));
    const double got = detail::weight_exp_rn(z);
    if (e > 1e-37) worst = std::max(worst, std::fabs(got - e) / e);
  }
  INFO("worst relative error " << worst);
  CHECK(worst < 4e-7);
  // The vector weights of make_row_transform's scratch are the scalar ones, bit for bit.
  std::mt19937 gen(17);
  for (const float T : {1.0f, 0.05f, 7.0f}) {
    for (const std::int64_t V : {std::int64_t{3}, std::int64_t{1000}, std::int64_t{4099}}) {
      auto x = random_logits(gen, V, false);
      for (std::size_t i = 0; i < x.size(); i += 13) x[i] = -86.0f - static_cast<float>(i % 5);  // near the cut-off
      std::vector<float> w(x.size());
      const row_transform t = make_row_transform(ref_of(x), V, sampling_params{T, 0, 1.0f, 0.0f}, w);
      for (std::size_t i = 0; i < x.size(); ++i)
        REQUIRE(std::bit_cast<std::uint32_t>(w[i]) ==
                std::bit_cast<std::uint32_t>(t.kept_weight(x[i], static_cast<std::int64_t>(i))));
    }
  }
}

TEST_CASE("logits transform: the radix cuts keep exactly the sorted reference's tokens") {
  const std::uint64_t seed = 20261128;
  std::printf("logits transform cut seed %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937 gen(static_cast<std::uint32_t>(seed));
  const std::int64_t vocabs[] = {1, 2, 7, 300, 2500};
  const float temps[] = {0.6f, 1.0f, 1.7f};
  const std::int32_t ks[] = {0, 1, 3, 40};
  const float ps[] = {1.0f, 0.95f, 0.5f, 1e-6f};
  const float mins[] = {0.0f, 0.02f};
  int rows = 0;
  for (const std::int64_t V : vocabs)
    for (const bool coarse : {false, true})
      for (const float T : temps)
        for (const std::int32_t k : ks)
          for (const float tp : ps)
            for (const float mp : mins) {
              const auto x = random_logits(gen, V, coarse);
              const sampling_params sp{T, k, tp, mp};
              const row_transform t = make_row_transform(ref_of(x), V, sp);
              INFO("V " << V << " coarse " << coarse << " T " << T << " k " << k << " p " << tp << " min_p " << mp);
              REQUIRE(t.code == 0);
              // With scratch for the weights: the same constants.
              std::vector<float> scratch(static_cast<std::size_t>(V));
              const row_transform t2 = make_row_transform(ref_of(x), V, sp, scratch);
              CHECK((t2.m == t.m && t2.cut == t.cut && t2.inv_z == t.inv_z && t2.arg == t.arg && t2.code == t.code));
              const auto want = reference_kept(x, sp, t);
              const auto p = transformed(x, t);
              double sum = 0;
              for (std::int64_t i = 0; i < V; ++i) {
                const auto u = static_cast<std::size_t>(i);
                CHECK((p[u] > 0.0f) == (want[u] != 0));
                sum += p[u];
              }
              CHECK(sum == Approx(1.0).margin(1e-5));
              ++rows;
            }
  CHECK(rows == 5 * 2 * 3 * 4 * 4 * 2);
}

TEST_CASE("split logits pre-pass: any chunking gives make_row_transform's constants, bit for bit") {
  const std::uint64_t seed = 20261129;
  std::printf("split logits pre-pass seed %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937 gen(static_cast<std::uint32_t>(seed));
  const auto bits_same = [](const row_transform& a, const row_transform& b) {
    return std::bit_cast<std::uint32_t>(a.m) == std::bit_cast<std::uint32_t>(b.m) && a.inv_t == b.inv_t &&
           a.min_p == b.min_p && a.arg == b.arg && a.cut == b.cut &&
           std::bit_cast<std::uint64_t>(a.inv_z) == std::bit_cast<std::uint64_t>(b.inv_z) && a.greedy == b.greedy &&
           a.code == b.code;
  };
  const std::int64_t vocabs[] = {1, 7, 1500, 5000, 9000};
  const float temps[] = {0.0f, 0.6f, 1.7f};
  const std::int32_t ks[] = {0, 1, 40, 6000};
  const float ps[] = {1.0f, 0.9f, 1e-6f};
  const std::int64_t chunkings[] = {1, 2, 3, 100};
  int rows = 0, cut_rows = 0;
  for (const std::int64_t V : vocabs)
    for (const bool coarse : {false, true})
      for (const float T : temps)
        for (const std::int32_t k : ks)
          for (const float tp : ps) {
            auto x = random_logits(gen, V, coarse);
            if (V > 1 && gen() % 3 == 0) x[gen() % 2] = -0.0f;  // a signed zero among the maxima of coarse rows
            const sampling_params sp{T, k, tp, gen() % 2 == 0 ? 0.0f : 0.02f};
            const row_transform want = make_row_transform(ref_of(x), V, sp);
            std::vector<std::uint16_t> words(x.size());
            for (std::size_t i = 0; i < x.size(); ++i) words[i] = specdec_test::to_bf16(x[i]);
            const detail::row_ref bf{words.data(), 1, row_dtype::bf16};
            const row_transform want_bf = make_row_transform(bf, V, sp);
            for (const std::int64_t ct : chunkings) {
              INFO("V " << V << " coarse " << coarse << " T " << T << " k " << k << " p " << tp << " chunk tiles "
                        << ct);
              REQUIRE(bits_same(split_row_transform(ref_of(x), V, sp, ct), want));
              REQUIRE(bits_same(split_row_transform(bf, V, sp, ct), want_bf));
            }
            cut_rows += want.cut != 0 ? 1 : 0;
            ++rows;
          }
  CHECK(rows == 5 * 2 * 3 * 4 * 3);
  CHECK(cut_rows > rows / 4);  // the selects ran, not only the argmax and Z
  // Bad rows and bad settings: the same codes.
  std::vector<float> x(3000, 1.0f);
  for (const std::int64_t ct : chunkings) {
    x[2500] = std::numeric_limits<float>::quiet_NaN();
    CHECK(split_row_transform(ref_of(x), 3000, sampling_params{}, ct).code ==
          static_cast<std::int32_t>(status_code::non_finite));
    x[2500] = std::numeric_limits<float>::infinity();
    CHECK(split_row_transform(ref_of(x), 3000, sampling_params{0.0f, 0, 1.0f, 0.0f}, ct).code ==
          static_cast<std::int32_t>(status_code::non_finite));
    const std::vector<float> masked(3000, neg_inf);
    CHECK(split_row_transform(ref_of(masked), 3000, sampling_params{}, ct).code ==
          static_cast<std::int32_t>(status_code::zero_mass));
    x[2500] = 1.0f;
    CHECK(split_row_transform(ref_of(x), 3000, sampling_params{1.0f, 0, 0.0f, 0.0f}, ct).code ==
          static_cast<std::int32_t>(
              status_code::invalid_argument));  // Signed zeros as the maximum: the first one wins, -0.0 or not.
    std::vector<float> zeros(3000, neg_inf);
    zeros[1500] = -0.0f;
    zeros[2600] = 0.0f;
    const row_transform z = split_row_transform(ref_of(zeros), 3000, sampling_params{}, ct);
    CHECK((z.arg == 1500 && std::signbit(z.m) && bits_same(z, make_row_transform(ref_of(zeros), 3000, {}))));
  }
}

TEST_CASE("logits transform: unfiltered rows are logits_to_probs's softmax; greedy is one-hot at the argmax") {
  std::mt19937 gen(7);
  for (int trial = 0; trial < 20; ++trial) {
    const std::int64_t V = 1 + static_cast<std::int64_t>(gen() % 3000);
    const auto x = random_logits(gen, V, trial % 2 == 0);
    const sampling_params sp{0.8f, 0, 1.0f, 0.0f};
    const auto p = transformed(x, make_row_transform(ref_of(x), V, sp));
    std::vector<float> want(x.size());
    REQUIRE(logits_to_probs_row<float>(make_view(x.data(), V), make_view(want.data(), V), sp, {}).ok());
    for (std::size_t i = 0; i < x.size(); ++i) CHECK(p[i] == Approx(want[i]).epsilon(2e-6).margin(1e-12));
    const auto g = transformed(x, make_row_transform(ref_of(x), V, sampling_params{0.0f, 0, 1.0f, 0.0f}));
    const auto arg = std::max_element(x.begin(), x.end()) - x.begin();  // first maximum: lowest id
    for (std::size_t i = 0; i < x.size(); ++i) CHECK(g[i] == (static_cast<std::ptrdiff_t>(i) == arg ? 1.0f : 0.0f));
  }
}

TEST_CASE("logits transform: bad rows and bad params read as the walk reports them") {
  std::vector<float> x = {1.0f, 2.0f, std::numeric_limits<float>::quiet_NaN()};
  auto t = make_row_transform(ref_of(x), 3, sampling_params{});
  CHECK(t.code == static_cast<std::int32_t>(status_code::non_finite));
  CHECK(std::isnan(t(1.0f, 0)));
  x[2] = std::numeric_limits<float>::infinity();
  CHECK(make_row_transform(ref_of(x), 3, sampling_params{}).code == static_cast<std::int32_t>(status_code::non_finite));
  const std::vector<float> masked(4, neg_inf);
  t = make_row_transform(ref_of(masked), 4, sampling_params{});
  CHECK(t.code == static_cast<std::int32_t>(status_code::zero_mass));
  CHECK(std::isnan(t(neg_inf, 0)));
  const std::vector<float> ok = {0.0f, 1.0f};
  for (const sampling_params bad : {sampling_params{-1.0f, 0, 1.0f, 0.0f}, sampling_params{1.0f, -2, 1.0f, 0.0f},
                                    sampling_params{1.0f, 0, 0.0f, 0.0f}, sampling_params{1.0f, 0, 1.0f, 1.5f},
                                    sampling_params{1e-45f, 0, 1.0f, 0.0f}})
    CHECK(make_row_transform(ref_of(ok), 2, bad).code == static_cast<std::int32_t>(status_code::invalid_argument));
}

TEST_CASE("logits transform: rows read through row_ref, shifted or strided, bf16 or fp32, read the same") {
  std::mt19937 gen(3);
  const std::int64_t V = 3000;
  const auto x = random_logits(gen, V, true);
  const sampling_params sp{0.9f, 30, 0.8f, 0.0f};
  const row_transform t = make_row_transform(ref_of(x), V, sp);
  const auto want = transformed(x, t);
  const detail::row_ref r{x.data(), 1, row_dtype::f32, &t};
  // Every read path: operator[], a shifted row (its token ids carry on), widen_range.
  for (const std::int64_t k : {std::int64_t{0}, std::int64_t{1}, std::int64_t{1023}, std::int64_t{2500}}) {
    const detail::row_ref s = r.shifted(k);
    for (std::int64_t i = 0; i + k < V; i += 7) CHECK(s[i] == want[static_cast<std::size_t>(k + i)]);
    std::vector<float> out(static_cast<std::size_t>(V - k));
    detail::widen_range(r, k, V - k, out.data());
    CHECK(std::equal(out.begin(), out.end(), want.begin() + k));
  }
  CHECK(r.contiguous_f32() == nullptr);  // the vector paths must not read the logits as they are
  // Strided storage of the same logits.
  std::vector<float> spread(static_cast<std::size_t>(3 * V), std::numeric_limits<float>::quiet_NaN());
  for (std::int64_t i = 0; i < V; ++i) spread[static_cast<std::size_t>(3 * i)] = x[static_cast<std::size_t>(i)];
  const row_transform ts = make_row_transform(detail::row_ref{spread.data(), 3}, V, sp);
  const detail::row_ref rs{spread.data(), 3, row_dtype::f32, &ts};
  for (std::int64_t i = 0; i < V; ++i) CHECK(rs[i] == want[static_cast<std::size_t>(i)]);
  // The host argmax of a transformed bf16 row takes the transformed values, not the raw words.
  std::vector<std::uint16_t> words(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) words[i] = specdec_test::to_bf16(x[i]);
  const row_transform tb = make_row_transform(detail::row_ref{words.data(), 1, row_dtype::bf16}, V, sp);
  const detail::row_ref rb{words.data(), 1, row_dtype::bf16, &tb};
  token_id arg = -1;
  REQUIRE(detail::argmax_pass(rb, V, arg));
  float best = -1.0f;
  token_id want_arg = -1;
  for (std::int64_t i = 0; i < V; ++i)
    if (rb[i] > best) {
      best = rb[i];
      want_arg = static_cast<token_id>(i);
    }
  CHECK(arg == want_arg);
  // Scratch for the weights gives the same constants for strided and bf16
  // rows; scratch shorter than the row is not used (and not written).
  auto same = [](const row_transform& a, const row_transform& b) {
    return a.m == b.m && a.cut == b.cut && a.inv_z == b.inv_z && a.arg == b.arg && a.code == b.code;
  };
  std::vector<float> scratch(static_cast<std::size_t>(V));
  CHECK(same(make_row_transform(detail::row_ref{spread.data(), 3}, V, sp, scratch), ts));
  CHECK(same(make_row_transform(detail::row_ref{words.data(), 1, row_dtype::bf16}, V, sp, scratch), tb));
  std::vector<float> short_scratch(static_cast<std::size_t>(V - 1), 5.0f);
  CHECK(same(make_row_transform(ref_of(x), V, sp, short_scratch), t));
  CHECK(std::all_of(short_scratch.begin(), short_scratch.end(), [](float v) { return v == 5.0f; }));
}

namespace {

// A batch of R requests over logits rows (fp32 values, optionally kept as
// bf16), random trees, every mode, random sampling params per request.
struct logits_batch {
  std::int64_t V = 0;
  std::vector<std::int32_t> offsets{0};
  std::vector<token_id> token;
  std::vector<node_id> parent;
  std::vector<float> P, Q;  // logits
  std::vector<verify_params> params;
  std::vector<sampling_params> ps, qs;
};

logits_batch make_logits_batch(std::mt19937& gen, int R, std::int64_t V, int max_n) {
  logits_batch b;
  b.V = V;
  for (int r = 0; r < R; ++r) {
    const int n = 1 + static_cast<int>(gen() % static_cast<unsigned>(max_n));
    const bool chain = r % 3 == 0;  // block mode needs chains
    for (int i = 0; i < n; ++i) {
      const auto p = random_logits(gen, V, r % 2 == 0);
      const auto q = gen() % 3 == 0 ? p : random_logits(gen, V, false);
      const node_id par = i == 0 ? -1 : chain ? i - 1 : static_cast<node_id>(gen() % static_cast<unsigned>(i));
      token_id x = static_cast<token_id>(gen() % V);
      if (i > 0 && gen() % 2) {  // the parent's most likely token
        const float* pr = b.P.data() + (b.offsets.back() + par) * V;
        x = static_cast<token_id>(std::max_element(pr, pr + V) - pr);
      }
      b.token.push_back(x);
      b.parent.push_back(par);
      b.P.insert(b.P.end(), p.begin(), p.end());
      b.Q.insert(b.Q.end(), q.begin(), q.end());
    }
    b.offsets.push_back(b.offsets.back() + n);
    verify_params vp;
    vp.mode = chain ? verify_mode::block : static_cast<verify_mode>(r % verify_mode_count);
    vp.seed = 0x5eed + static_cast<std::uint64_t>(r);
    vp.request = static_cast<std::uint32_t>(r);
    vp.round = 3;
    b.params.push_back(vp);
    const float T = r % 7 == 6 ? 0.0f : 0.5f + static_cast<float>(gen() % 100) / 80.0f;
    const std::int32_t k = gen() % 3 == 0 ? 0 : 1 + static_cast<std::int32_t>(gen() % 20);
    const float tp = gen() % 2 == 0 ? 1.0f : 0.6f + static_cast<float>(gen() % 40) / 100.0f;
    b.ps.push_back(sampling_params{T, k, tp, gen() % 4 == 0 ? 0.01f : 0.0f});
    b.qs.push_back(sampling_params{T == 0.0f ? 1.0f : T, k, 1.0f, 0.0f});
  }
  return b;
}

struct batch_out {
  std::vector<node_id> paths;
  std::vector<token_id> tokens;
  std::vector<verify_result> results;
  status st;
};

enum class logits_side { both, p, q };

batch_out run_batch(const logits_batch& b, rows_view p, rows_view q, bool logits,
                    logits_side side = logits_side::both) {
  const int R = static_cast<int>(b.params.size());
  const int L = 64;
  batch_out o{std::vector<node_id>(static_cast<std::size_t>(R * L), -3),
              std::vector<token_id>(static_cast<std::size_t>(R * L), -3),
              std::vector<verify_result>(static_cast<std::size_t>(R)), status::success()};
  std::vector<std::byte> ws(verify_batch_workspace_size(b.V, b.offsets, logits));
  verify_batch_input in{b.offsets, tree_view{b.token.data(), b.parent.data(), nullptr, nullptr, b.offsets.back()}, p, q,
                        b.params};
  if (logits && side != logits_side::q) in.p_sampling = b.ps;
  if (logits && side != logits_side::p) in.q_sampling = b.qs;
  o.st = verify_batch(
      in, ws, verify_batch_output{make_view(o.paths.data(), R, L), make_view(o.tokens.data(), R, L), o.results, {}});
  return o;
}

}  // namespace

TEST_CASE("verify_batch on logits rows equals verify_batch on the transformed rows written out") {
  const std::uint64_t seed = 4242;
  std::printf("logits verify_batch seed %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937 gen(static_cast<std::uint32_t>(seed));
  int ok_requests = 0, accepted = 0;
  for (int trial = 0; trial < 12; ++trial) {
    const std::int64_t V = trial % 3 == 0 ? 2000 : 1 + static_cast<std::int64_t>(gen() % 60);
    const auto b = make_logits_batch(gen, 14, V, trial % 2 == 0 ? 6 : 12);
    const std::int32_t total = b.offsets.back();
    for (const bool bf16 : {false, true}) {
      // Logits as stored (bf16 words, or floats), and the transform of each
      // row written out as fp32 probabilities.
      std::vector<float> P = b.P, Q = b.Q;
      std::vector<std::uint16_t> Ph, Qh;
      if (bf16) {
        for (float& v : P) v = detail::widen_bf16(specdec_test::to_bf16(v));
        for (float& v : Q) v = detail::widen_bf16(specdec_test::to_bf16(v));
        for (float v : P) Ph.push_back(specdec_test::to_bf16(v));
        for (float v : Q) Qh.push_back(specdec_test::to_bf16(v));
      }
      std::vector<float> PP(P.size()), QQ(Q.size());
      for (std::size_t r = 0; r + 1 < b.offsets.size(); ++r)
        for (std::int32_t u = b.offsets[r]; u < b.offsets[r + 1]; ++u)
          for (int k = 0; k < 2; ++k) {
            const std::vector<float>& src = k == 0 ? P : Q;
            const std::vector<float> row(src.begin() + u * V, src.begin() + (u + 1) * V);
            const auto t = make_row_transform(ref_of(row), V, k == 0 ? b.ps[r] : b.qs[r]);
            const auto p = transformed(row, t);
            std::copy(p.begin(), p.end(), (k == 0 ? PP : QQ).begin() + u * V);
          }
      rows_view lp = make_view(P.data(), total, V).as_const(), lq = make_view(Q.data(), total, V).as_const();
      if (bf16) {
        lp.data = Ph.data();
        lp.dtype = row_dtype::bf16;
        lq.data = Qh.data();
        lq.dtype = row_dtype::bf16;
      }
      const rows_view pp = make_view(PP.data(), total, V).as_const(), qq = make_view(QQ.data(), total, V).as_const();
      const auto got = run_batch(b, lp, lq, true);
      const auto want = run_batch(b, pp, qq, false);
      // Logits on one side only: target logits next to draft probabilities, and the reverse.
      const auto p_only = run_batch(b, lp, qq, true, logits_side::p);
      const auto q_only = run_batch(b, pp, lq, true, logits_side::q);
      for (const auto* one : {&p_only, &q_only}) {
        CHECK(one->paths == want.paths);
        CHECK(one->tokens == want.tokens);
        for (std::size_t r = 0; r < b.params.size(); ++r) CHECK(one->results[r].code == want.results[r].code);
      }
      CHECK(got.st.code() == want.st.code());
      for (std::size_t r = 0; r < b.params.size(); ++r) {
        INFO("trial " << trial << " bf16 " << bf16 << " request " << r << " mode "
                      << verify_mode_name(b.params[r].mode));
        CHECK(got.results[r].code == want.results[r].code);
        CHECK(got.results[r].accepted == want.results[r].accepted);
        CHECK(got.results[r].next_token == want.results[r].next_token);
        if (want.results[r].code == status_code::ok) {
          ++ok_requests;
          accepted += want.results[r].accepted;
        }
      }
      CHECK(got.paths == want.paths);
      CHECK(got.tokens == want.tokens);
    }
  }
  INFO("ok requests " << ok_requests << ", accepted drafts " << accepted);
  CHECK(ok_requests > 200);
  CHECK(accepted > 50);
}

TEST_CASE("verify_batch on logits rows: bad sampling params, NaN rows and bad sizes") {
  std::mt19937 gen(99);
  const std::int64_t V = 16;
  auto b = make_logits_batch(gen, 4, V, 4);
  for (auto& vp : b.params) vp.mode = verify_mode::sampled_iid;
  const std::int32_t total = b.offsets.back();
  const rows_view p = make_view(b.P.data(), total, V).as_const(), q = make_view(b.Q.data(), total, V).as_const();
  auto base = run_batch(b, p, q, true);
  REQUIRE(base.st.ok());
  b.ps[1].top_p = 0.0f;  // request 1: invalid
  b.P[static_cast<std::size_t>(b.offsets[2] * V + 3)] =
      std::numeric_limits<float>::quiet_NaN();  // request 2's root row
  const auto bad = run_batch(b, p, q, true);
  CHECK(bad.st.code() == status_code::invalid_argument);
  CHECK(bad.st.index() == 1);
  CHECK(bad.results[0].code == status_code::ok);
  CHECK(bad.results[1].code == status_code::invalid_argument);
  CHECK(bad.results[2].code == status_code::non_finite);
  CHECK(bad.results[3].code == status_code::ok);
  CHECK(bad.results[3].next_token == base.results[3].next_token);
  // One sampling entry per request, and room for the transforms.
  std::vector<std::byte> ws(verify_batch_workspace_size(V, b.offsets, true));
  std::vector<node_id> paths(4 * 8);
  std::vector<token_id> toks(4 * 8);
  std::vector<verify_result> res(4);
  verify_batch_input in{b.offsets, tree_view{b.token.data(), b.parent.data(), nullptr, nullptr, total}, p, q, b.params};
  const verify_batch_output out{make_view(paths.data(), 4, 8), make_view(toks.data(), 4, 8), res, {}};
  const std::vector<sampling_params> three(3);
  in.p_sampling = three;
  CHECK(verify_batch(in, ws, out).code() == status_code::size_mismatch);
  in.p_sampling = b.ps;
  CHECK(verify_batch(in, std::span<std::byte>(ws).first(verify_batch_workspace_size(V, b.offsets)), out).code() ==
        status_code::buffer_too_small);
}

TEST_CASE("exactness: a tree verified on logits rows emits the transform's law; a wrong transform fails") {
  // Target and draft logits for one context; the draft proposes 3 i.i.d.
  // children from its transform; the emitted first token must follow the
  // target's transform (chi-square), and must not when verification reads
  // the draft under other settings than those it was sampled with.
  const std::int64_t V = 12;
  const std::vector<float> pl = {2.0f, 1.5f, 1.5f, 0.0f, -1.0f, 3.0f, neg_inf, 0.5f, 0.5f, -0.5f, 2.5f, 1.0f};
  const std::vector<float> ql = {1.0f, 2.0f, 1.0f, 1.0f, 0.0f, 2.5f, 0.0f, neg_inf, 1.5f, 0.0f, 2.0f, 1.0f};
  const sampling_params sp{0.9f, 8, 0.9f, 0.0f}, sq{1.2f, 0, 1.0f, 0.0f};
  const auto want_p = transformed(pl, make_row_transform(ref_of(pl), V, sp));
  const auto q_law = transformed(ql, make_row_transform(ref_of(ql), V, sq));
  const int trials = 100000 / SPECDEC_VERIFY_TRIAL_SCALE;
  auto run = [&](const sampling_params& q_claimed) {
    std::vector<std::int64_t> counts(static_cast<std::size_t>(V * V), 0);
    std::vector<std::int32_t> offsets = {0, 4};
    std::vector<float> P, Q;
    for (int u = 0; u < 4; ++u) {
      P.insert(P.end(), pl.begin(), pl.end());
      Q.insert(Q.end(), ql.begin(), ql.end());
    }
    std::vector<std::byte> ws(verify_batch_workspace_size(V, offsets, true));
    const std::vector<sampling_params> pss = {sp}, qss = {q_claimed};
    const rng_stream draft{77, 0, 0};
    for (int n = 0; n < trials; ++n) {
      std::vector<token_id> tok = {0};
      std::vector<node_id> par = {-1};
      for (int c = 0; c < 3; ++c) {  // inverse-CDF draws from q's law
        double u = draft.uniform(static_cast<std::uint32_t>(n), static_cast<std::uint32_t>(c)), acc = 0;
        token_id x = 0;
        for (std::int64_t i = 0; i < V; ++i) {
          acc += q_law[static_cast<std::size_t>(i)];
          if (u < acc && q_law[static_cast<std::size_t>(i)] > 0) {
            x = static_cast<token_id>(i);
            break;
          }
        }
        tok.push_back(x);
        par.push_back(0);
      }
      verify_params vp;
      vp.mode = verify_mode::sampled_iid;
      vp.seed = 31;
      vp.request = static_cast<std::uint32_t>(n);
      const std::vector<verify_params> vps = {vp};
      std::vector<node_id> paths(4);
      std::vector<token_id> toks(4);
      std::vector<verify_result> res(1);
      verify_batch_input in{offsets, tree_view{tok.data(), par.data(), nullptr, nullptr, 4},
                            make_view(P.data(), 4, V).as_const(), make_view(Q.data(), 4, V).as_const(), vps};
      in.p_sampling = pss;
      in.q_sampling = qss;
      REQUIRE(verify_batch(in, ws,
                           verify_batch_output{make_view(paths.data(), 1, 4), make_view(toks.data(), 1, 4), res, {}})
                  .ok());
      ++counts[static_cast<std::size_t>(toks[0])];  // first emitted token, second coordinate unused
    }
    std::vector<double> expected(static_cast<std::size_t>(V * V), 0.0);
    for (std::int64_t i = 0; i < V; ++i) expected[static_cast<std::size_t>(i)] = want_p[static_cast<std::size_t>(i)];
    return vtest::chi_square(counts, expected, static_cast<int>(V));
  };
  const auto good = run(sq);
  INFO("chi2 " << good.chi2 << " df " << good.df << " p " << good.p_value);
  CHECK_FALSE(good.impossible);
  CHECK(good.p_value > 1e-4);
  // Negative control: q claimed at another temperature and top-k than it was sampled with.
  const auto wrong = run(sampling_params{0.6f, 3, 1.0f, 0.0f});
  INFO("negative control chi2 " << wrong.chi2 << " p " << wrong.p_value);
  CHECK((wrong.impossible || wrong.p_value < 1e-6));
}
