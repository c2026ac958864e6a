// Caller-supplied uniforms through the sharded entry points (ranks
// simulated as threads): uniforms copied from Philox reproduce the seeded
// run through every entry point (tree and chain, collective and executor
// forms, every mode), and a bad uniform gives the same status on every
// rank. Split from test_sharded.cpp.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <vector>

#include "sharded_cases.hpp"
#include "specdec/draft/topk_tree.hpp"
#include "specdec/parallel/collective.hpp"
#include "specdec/parallel/sharded_topk.hpp"
#include "specdec/parallel/sharded_verify.hpp"
#include "specdec/sample/row.hpp"
#include "specdec/verify/tree_verify.hpp"
#include "thread_collective.hpp"

using namespace specdec;
using namespace sharded_test;

namespace {

// Philox's uniforms of (seed, request, round) copied into a caller buffer.
std::vector<double> philox_copy(const verify_params& vp, std::int32_t nodes, std::int32_t draws) {
  const philox_uniforms pu{rng_stream{vp.seed, vp.request, vp.round}};
  std::vector<double> u(static_cast<std::size_t>(nodes) * static_cast<std::size_t>(draws));
  for (std::int32_t n = 0; n < nodes; ++n)
    for (std::int32_t d = 0; d < draws; ++d)
      u[static_cast<std::size_t>(n * draws + d)] = pu(static_cast<std::uint32_t>(n), static_cast<std::uint32_t>(d));
  return u;
}

struct uniform_runs {
  outcome host, on;  // verify_*_sharded and verify_*_sharded_on with caller uniforms
};

// Rank r's tree verification of c with uniforms cu through both sharded entry points.
uniform_runs tree_with_uniforms(thread_collective& tc, const tree_case& c, std::span<const std::int64_t> bounds,
                                const verify_params& vp, const caller_uniforms& cu) {
  const int r = tc.rank(), P = tc.size();
  const std::int64_t b0 = bounds[static_cast<std::size_t>(r)], b1 = bounds[static_cast<std::size_t>(r) + 1];
  const auto ps = shard_of(c.p, c.V, c.N, b0, b1), qs = shard_of(c.q, c.V, c.N, b0, b1);
  uniform_runs o;
  std::vector<node_id> path(static_cast<std::size_t>(c.N));
  std::vector<token_id> tokens(static_cast<std::size_t>(c.N));
  verify_result res{};
  std::vector<std::byte> ws(sharded_verify_workspace_size(bounds, r, P, c.N) + 8);
  status s = verify_tree_sharded(tc, bounds, c.view(), matrix(ps, c.N, b1 - b0), matrix(qs, c.N, b1 - b0), vp, ws, path,
                                 tokens, res, &cu);
  o.host = record(s, res, path, tokens);
  std::size_t eb = 0, hb = 0;
  if (!sharded_verify_workspace_parts(bounds, r, P, c.N, eb, hb))
    return o;  // o.on stays default (accepted -1): unequal to any real result
  std::vector<std::byte> ew(eb), hw(hb);
  host_shard_executor<thread_collective> ex(tc);
  s = verify_tree_sharded(ex, bounds, c.view(), matrix(ps, c.N, b1 - b0), matrix(qs, c.N, b1 - b0), vp, {ew, hw}, path,
                          tokens, res, &cu);
  o.on = record(s, res, path, tokens);
  return o;
}

}  // namespace

TEST_CASE("caller uniforms copied from Philox reproduce the seeded sharded run, trees", "[parallel]") {
  const std::int64_t V = 3001;
  std::int64_t differ_other_seed = 0, runs = 0;
  for (const int P : {1, 3, 4}) {
    const auto bounds = uneven_bounds(V, P);
    const auto c = make_tree_case(300 + static_cast<std::uint64_t>(P), V, 14);
    for (const verify_mode m : all_modes) {
      verify_params vp{};
      vp.mode = m;
      vp.seed = 41;
      vp.round = 3;
      const outcome want = run_partitioned(c, bounds, vp);
      REQUIRE(want.code == status_code::ok);
      const auto u = philox_copy(vp, c.N, c.N + 1);  // more draws than any node has children
      const caller_uniforms cu{u.data(), c.N, c.N + 1};
      // Negative control: another seed's uniforms must change some result.
      verify_params other = vp;
      other.seed = 42;
      const auto u2 = philox_copy(other, c.N, c.N + 1);
      const caller_uniforms cu2{u2.data(), c.N, c.N + 1};
      INFO("P " << P << " mode " << verify_mode_name(m));
      std::vector<std::byte> w(sharded_verify_workspace_size(bounds, 0, 1, c.N) + 8);
      std::vector<node_id> path(static_cast<std::size_t>(c.N));
      std::vector<token_id> tokens(static_cast<std::size_t>(c.N));
      verify_result res{};
      const status sp = verify_tree_partitioned(bounds, c.view(), matrix(c.p, c.N, V), matrix(c.q, c.N, V), vp, w, path,
                                                tokens, res, &cu);
      CHECK(record(sp, res, path, tokens) == want);
      const auto got =
          run_ranks<uniform_runs>(P, [&](thread_collective& tc) { return tree_with_uniforms(tc, c, bounds, vp, cu); });
      for (const auto& g : got) {
        CHECK(g.host == want);
        CHECK(g.on == want);
      }
      const auto alt =
          run_ranks<uniform_runs>(P, [&](thread_collective& tc) { return tree_with_uniforms(tc, c, bounds, vp, cu2); });
      for (const auto& g : alt) CHECK(g.host == g.on);
      differ_other_seed += !(alt[0].host == want);
      ++runs;
    }
  }
  std::printf("caller uniforms (trees): %lld runs equal the Philox run; another seed's copy differs in %lld\n",
              static_cast<long long>(runs), static_cast<long long>(differ_other_seed));
  CHECK(differ_other_seed > 0);
}

TEST_CASE("caller uniforms copied from Philox reproduce the seeded sharded run, chains", "[parallel]") {
  const std::int64_t V = 2100;
  const int P = 4;
  const auto bounds = uneven_bounds(V, P);
  for (const std::uint64_t cs : {7u, 8u, 9u}) {
    const auto c = make_tree_case(cs, V, 6);
    std::vector<token_id> drafts(c.token.begin() + 1, c.token.end());
    for (const verify_mode m : chain_modes) {
      verify_params vp{};
      vp.mode = m;
      vp.seed = 13;
      std::vector<std::byte> ws(sharded_verify_workspace_size(bounds, 0, 1, c.N) + 8);
      std::vector<token_id> want(static_cast<std::size_t>(c.N)), alt(want.size());
      verify_result wr{}, ar{};
      REQUIRE(
          verify_chain_partitioned(bounds, drafts, matrix(c.p, c.N, V), matrix(c.q, c.N, V), vp, ws, want, wr).ok());
      want.resize(static_cast<std::size_t>(wr.accepted) + 1);
      const auto u = philox_copy(vp, c.N, 2);
      const caller_uniforms cu{u.data(), c.N, 2};
      REQUIRE(verify_chain_partitioned(bounds, drafts, matrix(c.p, c.N, V), matrix(c.q, c.N, V), vp, ws, alt, ar, &cu)
                  .ok());
      alt.resize(static_cast<std::size_t>(ar.accepted) + 1);
      INFO("chain " << cs << " mode " << verify_mode_name(m));
      CHECK(alt == want);
      const auto got = run_ranks<std::vector<token_id>>(P, [&](thread_collective& tc) {
        const int r = tc.rank();
        const std::int64_t b0 = bounds[static_cast<std::size_t>(r)], b1 = bounds[static_cast<std::size_t>(r) + 1];
        const auto ps = shard_of(c.p, V, c.N, b0, b1), qs = shard_of(c.q, V, c.N, b0, b1);
        std::vector<std::byte> w(sharded_verify_workspace_size(bounds, r, P, c.N) + 8);
        std::vector<token_id> t(static_cast<std::size_t>(c.N)), t2(t.size());
        verify_result a{}, b{};
        const status s1 = verify_chain_sharded(tc, bounds, drafts, matrix(ps, c.N, b1 - b0), matrix(qs, c.N, b1 - b0),
                                               vp, w, t, a, &cu);
        std::size_t eb = 0, hb = 0;
        if (!sharded_verify_workspace_parts(bounds, r, P, c.N, eb, hb)) return std::vector<token_id>{};
        std::vector<std::byte> ew(eb), hw(hb);
        host_shard_executor<thread_collective> ex(tc);
        const status s2 = verify_chain_sharded(ex, bounds, drafts, matrix(ps, c.N, b1 - b0), matrix(qs, c.N, b1 - b0),
                                               vp, {ew, hw}, t2, b, &cu);
        if (!s1.ok() || !s2.ok()) return std::vector<token_id>{};
        t.resize(static_cast<std::size_t>(a.accepted) + 1);
        t2.resize(static_cast<std::size_t>(b.accepted) + 1);
        if (t != t2) return std::vector<token_id>{};
        return t;
      });
      for (const auto& g : got) CHECK(g == want);
    }
  }
}

TEST_CASE("a bad caller uniform gives the same status on every rank", "[parallel]") {
  const std::int64_t V = 1000;
  const int P = 3;
  const auto bounds = uneven_bounds(V, P);
  const auto c = make_tree_case(5, V, 10);
  verify_params vp{};
  vp.mode = verify_mode::sampled_iid;
  auto u = philox_copy(vp, c.N, c.N + 1);
  for (std::int32_t d = 0; d <= c.N; ++d) u[static_cast<std::size_t>(d)] = 1.5;  // every draw of the root
  const caller_uniforms bad{u.data(), c.N, c.N + 1};
  const outcome want = run_partitioned(c, bounds, vp);
  REQUIRE(want.code == status_code::ok);
  const auto got =
      run_ranks<uniform_runs>(P, [&](thread_collective& tc) { return tree_with_uniforms(tc, c, bounds, vp, bad); });
  for (const auto& g : got) {
    CHECK(g.host.code == status_code::invalid_argument);
    CHECK(g.host.index == 0);  // the root's node id
    CHECK(g.on == g.host);
  }
  // Too few draws per node: a draw past the buffer reads as -1, on every rank alike.
  const auto ok_u = philox_copy(vp, c.N, 1);
  const caller_uniforms short_u{ok_u.data(), c.N, 1};
  const auto got2 =
      run_ranks<uniform_runs>(P, [&](thread_collective& tc) { return tree_with_uniforms(tc, c, bounds, vp, short_u); });
  for (const auto& g : got2) {
    CHECK(g.host.code == status_code::invalid_argument);
    CHECK(g.host == got2[0].host);
    CHECK(g.on == g.host);
  }
  // Ranks passing different uniforms: invalid_argument everywhere (the fingerprint), no hang.
  const auto good = philox_copy(vp, c.N, c.N + 1);
  auto changed = good;
  changed[7] = 0.5 * changed[7];
  const auto got3 = run_ranks<uniform_runs>(P, [&](thread_collective& tc) {
    const caller_uniforms mine{tc.rank() == 2 ? changed.data() : good.data(), c.N, c.N + 1};
    return tree_with_uniforms(tc, c, bounds, vp, mine);
  });
  for (const auto& g : got3) {
    CHECK(g.host.code == status_code::invalid_argument);
    CHECK(g.on.code == status_code::invalid_argument);
  }
}
