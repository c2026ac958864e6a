// The one verification walk: uniform sources (Philox streams, caller
// buffers), topologies (parent array, chain, linked list), the shared
// request checks (the host half of the GPU same-status test) and the policy
// concepts.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <vector>

#include "exactness_harness.hpp"
#include "malformed_cases.hpp"
#include "specdec/verify/batch_verify.hpp"
#include "specdec/verify/policy.hpp"
#include "specdec/verify/request_checks.hpp"
#include "specdec/verify/tree_verify.hpp"

#ifndef SPECDEC_VERIFY_TRIAL_SCALE
#define SPECDEC_VERIFY_TRIAL_SCALE 1
#endif

using namespace specdec;

namespace {

// Concepts: the shipped policies and sources satisfy them; near misses do not.
struct no_sample_ops : detail::host_row_ops {
  void sample() const noexcept {}
};
struct float_uniforms {
  float operator()(std::uint32_t, std::uint32_t) const noexcept { return 0.5f; }
};
struct no_sibling_topology {
  std::int32_t size() const noexcept { return 1; }
  node_id first_child(node_id) const noexcept { return -1; }
  token_id token_of(node_id) const noexcept { return 0; }
};
static_assert(verify_row_ops<detail::host_row_ops>);
static_assert(!verify_row_ops<no_sample_ops>);
static_assert(!verify_row_ops<int>);
static_assert(uniform_source<philox_uniforms> && uniform_source<caller_uniforms>);
static_assert(!uniform_source<float_uniforms> && !uniform_source<int>);
static_assert(verify_topology<parent_topology> && verify_topology<linked_topology>);
static_assert(!verify_topology<no_sibling_topology>);

std::vector<float> random_row(std::mt19937& gen, std::int64_t V, double zero_frac) {
  std::uniform_real_distribution<double> U(0.0, 1.0);
  std::vector<double> w(static_cast<std::size_t>(V));
  double s = 0;
  for (auto& x : w) {
    x = U(gen) < zero_frac ? 0.0 : std::pow(U(gen), 3.0);
    s += x;
  }
  if (s == 0) w[0] = s = 1;
  std::vector<float> r(w.size());
  for (std::size_t i = 0; i < r.size(); ++i) r[i] = static_cast<float>(w[i] / s);
  return r;
}

struct request {
  std::int64_t V;
  token_tree tree;
  std::vector<float> P, Q;
};

// A random tree whose children often carry likely tokens (so walks go deep).
request random_request(std::mt19937& gen, std::int64_t V, int n) {
  request rq{V, {}, {}, {}};
  std::vector<std::vector<float>> rows;
  for (int i = 0; i < n; ++i) rows.push_back(random_row(gen, V, 0.3));
  rq.tree.add_root(0);
  for (int i = 1; i < n; ++i) {
    const auto par = static_cast<node_id>(gen() % static_cast<unsigned>(i));
    const auto& pr = rows[static_cast<std::size_t>(par)];
    token_id x = static_cast<token_id>(gen() % static_cast<unsigned>(V));
    if (gen() % 2) x = static_cast<token_id>(std::max_element(pr.begin(), pr.end()) - pr.begin());
    rq.tree.add_child(par, x);
  }
  for (int i = 0; i < n; ++i) {
    const auto& r = rows[static_cast<std::size_t>(i)];
    rq.P.insert(rq.P.end(), r.begin(), r.end());
    const auto q = gen() % 3 == 0 ? r : random_row(gen, V, 0.3);
    rq.Q.insert(rq.Q.end(), q.begin(), q.end());
  }
  return rq;
}

std::int32_t max_children(const token_tree& t) {
  std::vector<std::int32_t> k(static_cast<std::size_t>(t.size()), 0);
  std::int32_t m = 0;
  for (node_id c = 1; c < t.size(); ++c) m = std::max(m, ++k[static_cast<std::size_t>(t.parent(c))]);
  return m;
}

struct outcome {
  status_code code;
  verify_result r;
  std::vector<node_id> path;
  std::vector<token_id> toks;
  bool operator==(const outcome& o) const {
    return code == o.code && r.accepted == o.r.accepted && r.last_node == o.r.last_node &&
           r.next_token == o.r.next_token && path == o.path && toks == o.toks;
  }
};

outcome run_tree(const request& rq, const verify_params& vp, const caller_uniforms* uni) {
  const int n = rq.tree.size();
  std::vector<std::byte> ws(verify_workspace_size(rq.V, n));
  outcome o{status_code::ok,
            {},
            std::vector<node_id>(static_cast<std::size_t>(n), -7),
            std::vector<token_id>(static_cast<std::size_t>(n), -7)};
  const auto p = make_view(rq.P.data(), n, rq.V).as_const();
  const auto q = make_view(rq.Q.data(), n, rq.V).as_const();
  o.code = (uni ? verify_tree(rq.tree.view(), p, q, vp, *uni, ws, o.path, o.toks, o.r)
                : verify_tree(rq.tree.view(), p, q, vp, ws, o.path, o.toks, o.r))
               .code();
  return o;
}

std::vector<double> philox_copy(const verify_params& vp, std::int32_t n, std::int32_t draws) {
  const philox_uniforms src{rng_stream{vp.seed, vp.request, vp.round}};
  std::vector<double> u(static_cast<std::size_t>(n * draws));
  for (std::int32_t v = 0; v < n; ++v)
    for (std::int32_t d = 0; d < draws; ++d)
      u[static_cast<std::size_t>(v * draws + d)] = src(static_cast<std::uint32_t>(v), static_cast<std::uint32_t>(d));
  return u;
}

}  // namespace

TEST_CASE("request checks: every malformed-input class gets the same code on the host (GPU test twin)") {
  const auto b = vtest::make_malformed_batch();
  const auto R = static_cast<int>(b.params.size());
  const std::int32_t total = b.offsets.back();
  std::vector<node_id> paths(static_cast<std::size_t>(R * b.L), -3);
  std::vector<token_id> toks(static_cast<std::size_t>(R * b.L), -3);
  std::vector<verify_result> res(static_cast<std::size_t>(R));
  std::vector<std::byte> ws(verify_batch_workspace_size(b.V, b.offsets));
  const verify_batch_input in{b.offsets, tree_view{b.token.data(), b.parent.data(), nullptr, nullptr, total},
                              make_view(b.P.data(), total, b.V).as_const(),
                              make_view(b.Q.data(), total, b.V).as_const(), b.params};
  const verify_batch_output out{make_view(paths.data(), R, b.L), make_view(toks.data(), R, b.L), res, {}};
  (void)verify_batch(in, ws, out);
  for (int r = 0; r < R; ++r) {
    INFO("case " << b.names[static_cast<std::size_t>(r)]);
    CHECK(res[static_cast<std::size_t>(r)].code == b.expected[static_cast<std::size_t>(r)]);
    // The structural checks alone (no rows read) agree with the full call.
    const std::int32_t o = b.offsets[static_cast<std::size_t>(r)];
    const std::int32_t n = b.offsets[static_cast<std::size_t>(r) + 1] - o;
    std::vector<std::int32_t> depth(static_cast<std::size_t>(n));
    const status st = check_verify_request(b.parent.data() + o, b.token.data() + o, n, b.V,
                                           b.params[static_cast<std::size_t>(r)], true, b.L, depth.data());
    if (!st.ok()) CHECK(st.code() == b.expected[static_cast<std::size_t>(r)]);
  }
}

TEST_CASE("caller uniforms copied out of the Philox streams give identical outputs") {
  const std::uint32_t seed = 4242;
  std::mt19937 gen(seed);
  INFO("seed " << seed);
  for (std::int64_t V : {5, 1000, 3000}) {
    for (int trial = 0; trial < 24; ++trial) {
      const auto rq = random_request(gen, V, 1 + static_cast<int>(gen() % 12));
      const std::int32_t n = rq.tree.size();
      const std::int32_t draws = 1 + max_children(rq.tree);
      for (int m = 0; m < 6; ++m) {
        verify_params vp;
        vp.mode = static_cast<verify_mode>(m);
        vp.seed = gen();
        vp.request = static_cast<std::uint32_t>(trial);
        vp.round = 3;
        const auto u = philox_copy(vp, n, draws);
        const caller_uniforms cu{u.data(), n, draws};
        INFO("V " << V << " trial " << trial << " mode " << verify_mode_name(vp.mode));
        const outcome a = run_tree(rq, vp, nullptr), b = run_tree(rq, vp, &cu);
        CHECK(a.code == status_code::ok);
        CHECK(a == b);
      }
    }
  }
}

TEST_CASE("a uniform of 0 and the largest values below 1 are valid; others are rejected") {
  const std::int64_t V = 3000;
  std::vector<float> row(static_cast<std::size_t>(V), 0.0f);
  row[17] = 0.25f;  // first positive token
  row[1500] = 0.5f;
  row[2990] = 0.25f;  // last positive token
  request rq{V, {}, row, row};
  rq.tree.add_root(0);
  verify_params vp;
  vp.mode = verify_mode::naive_matching;
  for (const double u0 : {0.0, std::nextafter(1.0, 0.0), static_cast<double>(std::nextafter(1.0f, 0.0f))}) {
    const double u[1] = {u0};
    const caller_uniforms cu{u, 1, 1};
    const outcome o = run_tree(rq, vp, &cu);
    REQUIRE(o.code == status_code::ok);
    CHECK(o.r.next_token == (u0 == 0.0 ? 17 : 2990));
  }
  // Acceptance: p == q accepts for every uniform in [0, 1), 0 included.
  request rq2{V, {}, {}, {}};
  rq2.tree.add_root(0);
  rq2.tree.add_child(0, 1500);
  for (int i = 0; i < 2; ++i) {
    rq2.P.insert(rq2.P.end(), row.begin(), row.end());
    rq2.Q.insert(rq2.Q.end(), row.begin(), row.end());
  }
  vp.mode = verify_mode::sampled_iid;
  for (const double ua : {0.0, std::nextafter(1.0, 0.0), static_cast<double>(std::nextafter(1.0f, 0.0f))}) {
    const double u[4] = {0.5, ua, 0.0, 0.0};
    const caller_uniforms cu{u, 2, 2};
    const outcome o = run_tree(rq2, vp, &cu);
    REQUIRE(o.code == status_code::ok);
    CHECK(o.r.accepted == 1);
    CHECK(o.r.next_token == 17);  // draw 0 of node 1 is 0.0
  }
  // Out of [0, 1), NaN, or a draw past draws_per_node: invalid_argument, outputs untouched.
  for (const double bad : {1.0, -1e-300, std::numeric_limits<double>::quiet_NaN(), 2.0}) {
    const double u[4] = {0.5, bad, 0.5, 0.5};
    const caller_uniforms cu{u, 2, 2};
    const outcome o = run_tree(rq2, vp, &cu);
    CHECK(o.code == status_code::invalid_argument);
    CHECK(o.path[0] == -7);
  }
  const double u1[2] = {0.5, 0.5};
  const caller_uniforms short_draws{u1, 2, 1};  // node 0 needs draw 1
  CHECK(run_tree(rq2, vp, &short_draws).code == status_code::invalid_argument);
}

TEST_CASE("the Philox draw 0 is a 53-bit uniform independent of the float draws") {
  const rng_stream s{7, 1, 2};
  bool fine = false;
  for (std::uint32_t node = 0; node < 64; ++node) {
    const double u = s.uniform53(node);
    CHECK((u >= 0.0 && u < 1.0));
    // A 24-bit uniform is a multiple of 2^-24; a 53-bit one almost never is.
    fine = fine || std::ldexp(u, 24) != std::floor(std::ldexp(u, 24));
    CHECK(u != static_cast<double>(s.uniform(node, 0)));
  }
  CHECK(fine);
  CHECK(philox_uniforms{s}(5, 0) == s.uniform53(5));
  CHECK(philox_uniforms{s}(5, 3) == static_cast<double>(s.uniform(5, 3)));
}

TEST_CASE("uniforms from std::mt19937_64 pass the exactness test (and biased ones fail)") {
  const std::uint64_t mt_seed = 0x6d74ULL;
  std::printf("[walk] mt19937_64 seed %llu\n", static_cast<unsigned long long>(mt_seed));
  struct mode_case {
    verify_mode mode;
    vtest::drafting how;
  };
  const mode_case cases[] = {
      {verify_mode::sampled_iid, vtest::drafting::iid},
      {verify_mode::sampled_without_replacement, vtest::drafting::gumbel},
      {verify_mode::deterministic, vtest::drafting::topk},
      {verify_mode::naive_matching, vtest::drafting::iid},
  };
  const int widths[] = {3, 2};
  const auto m = vtest::make_model(5, 4, 31);
  const auto expect = vtest::exact_pairs(m);
  auto verifier = [&](verify_mode mode, std::mt19937_64& mt, bool biased) {
    return [mode, &mt, biased](const vtest::round_tree& rt, std::uint32_t, std::uint32_t, std::vector<token_id>& out) {
      const int n = rt.tree.size();
      const auto V = static_cast<std::int64_t>(rt.P.size()) / n;
      const int draws = 8;
      std::vector<double> u(static_cast<std::size_t>(n * draws));
      for (auto& x : u) {
        x = static_cast<double>(mt() >> 11) * 0x1p-53;
        if (biased) x = x * x;  // negative control: not uniform
      }
      std::vector<std::byte> ws(verify_workspace_size(V, n));
      std::vector<node_id> path(static_cast<std::size_t>(n));
      std::vector<token_id> toks(static_cast<std::size_t>(n));
      verify_params vp;
      vp.mode = mode;
      verify_result r;
      const status st =
          verify_tree(rt.tree.view(), make_view(rt.P.data(), n, V).as_const(), make_view(rt.Q.data(), n, V).as_const(),
                      vp, caller_uniforms{u.data(), n, draws}, ws, path, toks, r);
      if (!st.ok()) FAIL("verify failed: " << st.message());
      for (int i = 0; i <= r.accepted; ++i) out.push_back(toks[static_cast<std::size_t>(i)]);
    };
  };
  const std::int64_t trials = 200000 / SPECDEC_VERIFY_TRIAL_SCALE;
  for (const auto& mc : cases) {
    std::mt19937_64 mt(mt_seed);
    const auto counts = vtest::count_pairs(m, widths, mc.how, trials, 77, verifier(mc.mode, mt, false));
    const auto f = vtest::chi_square(counts, expect, m.V);
    std::printf("[walk] mt19937_64 %-28s V=5 tree 3x2 trials=%lld chi2=%.1f df=%d p=%.4g TV=%.5f\n",
                verify_mode_name(mc.mode), static_cast<long long>(trials), f.chi2, f.df, f.p_value, f.tv);
    INFO("mode " << verify_mode_name(mc.mode));
    CHECK_FALSE(f.impossible);
    CHECK(f.p_value > 1e-3);
  }
  // Negative control: squared uniforms bias every decision and must fail.
  std::mt19937_64 mt(mt_seed);
  const auto counts =
      vtest::count_pairs(m, widths, vtest::drafting::iid, trials, 77, verifier(verify_mode::sampled_iid, mt, true));
  const auto f = vtest::chi_square(counts, expect, m.V);
  std::printf("[walk] squared uniforms (control) chi2=%.1f p=%.4g TV=%.5f\n", f.chi2, f.p_value, f.tv);
  CHECK(f.p_value < 1e-6);
}

TEST_CASE("the linked-list topology walks exactly like the parent array") {
  const std::uint32_t seed = 777;
  std::mt19937 gen(seed);
  INFO("seed " << seed);
  const detail::host_row_ops ops{};
  for (int trial = 0; trial < 40; ++trial) {
    const std::int64_t V = trial % 2 ? 1100 : 7;
    const auto rq = random_request(gen, V, 1 + static_cast<int>(gen() % 14));
    const std::int32_t n = rq.tree.size();
    // SGLang/EAGLE links: first child and next sibling, children in ascending id.
    std::vector<std::int32_t> next_token(static_cast<std::size_t>(n), -1), next_sib(static_cast<std::size_t>(n), -1),
        last(static_cast<std::size_t>(n), -1);
    for (node_id c = 1; c < n; ++c) {
      const auto p = static_cast<std::size_t>(rq.tree.parent(c));
      if (last[p] < 0)
        next_token[p] = c;
      else
        next_sib[static_cast<std::size_t>(last[p])] = c;
      last[p] = c;
    }
    std::vector<std::int32_t> scratch(static_cast<std::size_t>(n));
    REQUIRE(validate_linked_tree(next_token.data(), next_sib.data(), n, scratch.data()).ok());
    const linked_topology topo{rq.tree.tokens().data(), next_token.data(), next_sib.data(), n};
    for (int m = 0; m < 6; ++m) {
      verify_params vp;
      vp.mode = static_cast<verify_mode>(m);
      vp.seed = 5;
      vp.request = static_cast<std::uint32_t>(trial);
      const outcome a = run_tree(rq, vp, nullptr);
      REQUIRE(a.code == status_code::ok);
      std::vector<std::byte> ws(verify_workspace_size(V, n));
      workspace_carver w(ws.data(), ws.size());
      const walk_scratch s = carve_walk_scratch(w, V, n);
      walk_out o{s.path, n, 0, 0, -1};
      const walk_rows rows{rq.P.data(), V, 1, rq.Q.data(), V, 1, V};
      REQUIRE(verify_walk(topo, ops, philox_uniforms{rng_stream{vp.seed, vp.request, vp.round}}, vp, rows, s, o).ok());
      INFO("trial " << trial << " mode " << verify_mode_name(vp.mode));
      CHECK(o.accepted == a.r.accepted);
      CHECK(o.last == a.r.last_node);
      CHECK(o.next == a.r.next_token);
      for (int k = 0; k <= o.accepted; ++k) CHECK(s.path[k] == a.path[static_cast<std::size_t>(k)]);
    }
  }
  // Malformed links.
  std::vector<std::int32_t> scratch(4);
  const std::int32_t nt_cycle[4] = {1, 2, 1, -1}, ns_none[4] = {-1, -1, -1, -1};
  CHECK(validate_linked_tree(nt_cycle, ns_none, 4, scratch.data()) == status_code::cycle);
  const std::int32_t nt_range[4] = {1, 9, -1, -1};
  CHECK(validate_linked_tree(nt_range, ns_none, 4, scratch.data()) == status_code::parent_out_of_range);
  const std::int32_t nt_root[4] = {1, 0, -1, -1};
  CHECK(validate_linked_tree(nt_root, ns_none, 4, scratch.data()) == status_code::multiple_roots);
}

TEST_CASE("deterministic emission after rejections equals a brute-force sample of p without the children") {
  const std::uint32_t seed = 99;
  std::mt19937 gen(seed);
  INFO("seed " << seed);
  for (int trial = 0; trial < 40; ++trial) {
    const std::int64_t V = 2500 + static_cast<std::int64_t>(gen() % 3000);
    const auto row = random_row(gen, V, 0.2);
    request rq{V, {}, row, row};
    rq.tree.add_root(0);
    const int k = 1 + static_cast<int>(gen() % 4);
    for (int j = 0; j < k; ++j) rq.tree.add_child(0, static_cast<token_id>(gen() % static_cast<unsigned>(V)));
    for (int j = 0; j < k; ++j) rq.P.insert(rq.P.end(), row.begin(), row.end());
    rq.Q = rq.P;
    // Acceptance uniforms just below 1 reject every child; draw 0 is random.
    std::vector<double> u(static_cast<std::size_t>((k + 1) * (k + 1)), std::nextafter(1.0, 0.0));
    u[0] = std::uniform_real_distribution<double>(0.0, 1.0)(gen);
    if (trial % 5 == 0) u[0] = 0.0;
    verify_params vp;
    vp.mode = verify_mode::deterministic;
    const caller_uniforms cu{u.data(), k + 1, k + 1};
    const outcome o = run_tree(rq, vp, &cu);
    REQUIRE(o.code == status_code::ok);
    if (o.r.accepted != 0) continue;  // a child with p near 1 may still be accepted
    auto R = row;
    for (node_id c = 1; c <= k; ++c) R[static_cast<std::size_t>(rq.tree.token(c))] = 0.0f;
    double mr = 0.0;
    REQUIRE(validate_probability_row(make_view(R.data(), V).as_const(), &mr).ok());
    CHECK(o.r.next_token == sample_row(make_view(R.data(), V).as_const(), u[0], mr));
  }
}
