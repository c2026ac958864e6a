// Request batching of the vocabulary-parallel verifier
// (parallel/shard_batch.hpp) with ranks simulated as threads: every
// request of a batch gets exactly what it gets verified alone (tokens,
// path, status), a bad request gets its own status while the others
// verify, the batch makes fewer collectives than its requests alone, and a
// bad batch fails on every rank.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstdio>
#include <vector>

#include "sharded_cases.hpp"
#include "specdec/parallel/collective.hpp"
#include "specdec/parallel/shard_batch.hpp"
#include "specdec/parallel/sharded_verify.hpp"
#include "thread_collective.hpp"

using namespace specdec;
using namespace sharded_test;

namespace {

struct batch_case {
  std::vector<tree_case> trees;
  std::vector<verify_params> params;
};

batch_case make_batch(std::uint64_t seed, std::int32_t R, std::int64_t V) {
  batch_case b;
  for (std::int32_t r = 0; r < R; ++r) {
    const std::uint64_t s = seed * 1000 + static_cast<std::uint64_t>(r);
    b.trees.push_back(make_tree_case(s, V, 1 + static_cast<std::int32_t>(s * 7 % 13)));
    verify_params vp{};
    vp.mode = all_modes[(seed + static_cast<std::uint64_t>(r)) % std::size(all_modes)];
    vp.seed = seed;
    vp.request = static_cast<std::uint64_t>(r);
    b.params.push_back(vp);
  }
  return b;
}

// Each rank's shards, scratch and outputs of a batch.
struct rank_batch {
  std::vector<std::vector<float>> ps, qs;
  std::vector<std::vector<std::byte>> ws;
  std::vector<std::vector<node_id>> path;
  std::vector<std::vector<token_id>> tokens;
  std::vector<sharded_tree_request> req;
  std::vector<verify_result> res;
  std::vector<status> st;

  rank_batch(const batch_case& b, std::span<const std::int64_t> bounds, int rank, int ranks) {
    const std::size_t R = b.trees.size();
    const bool has = static_cast<std::size_t>(rank) + 1 < bounds.size();
    const std::int64_t b0 = has ? bounds[static_cast<std::size_t>(rank)] : 0,
                       b1 = has ? bounds[static_cast<std::size_t>(rank) + 1] : 0;
    ps.resize(R);
    qs.resize(R);
    ws.resize(R);
    path.resize(R);
    tokens.resize(R);
    for (std::size_t r = 0; r < R; ++r) {
      const tree_case& c = b.trees[r];
      ps[r] = shard_of(c.p, c.V, c.N, b0, b1);
      qs[r] = shard_of(c.q, c.V, c.N, b0, b1);
      ws[r].resize(sharded_verify_workspace_size(bounds, rank, ranks, c.N) + 8);
      path[r].resize(static_cast<std::size_t>(c.N));
      tokens[r].resize(static_cast<std::size_t>(c.N));
    }
    for (std::size_t r = 0; r < R; ++r) {
      const tree_case& c = b.trees[r];
      sharded_tree_request q{};
      q.tree = c.view();
      q.p = matrix(ps[r], c.N, b1 - b0);
      q.q = matrix(qs[r], c.N, b1 - b0);
      q.params = b.params[r];
      q.workspace = shard_workspace(ws[r]);
      q.path = path[r];
      q.tokens = tokens[r];
      req.push_back(q);
    }
    res.resize(R);
    st.resize(R, status::success());
  }
  outcome got(std::size_t r) const { return record(st[r], res[r], path[r], tokens[r]); }
};

}  // namespace

TEST_CASE("verify_trees_sharded gives every request what it gets alone, in fewer collectives", "[parallel]") {
  const std::int64_t V = 700;
  for (const int P : {1, 2, 3})
    for (const std::int32_t R : {1, 5})
      for (std::uint64_t seed = 1; seed <= 3; ++seed) {
        INFO("seed " << seed << " ranks " << P << " requests " << R);
        batch_case b = make_batch(seed, R, V);
        if (R > 2) b.trees[2].token[b.trees[2].N > 1 ? 1 : 0] = static_cast<token_id>(V);  // a bad request
        const auto bounds = uneven_bounds(V, P);
        std::vector<outcome> want;
        for (std::int32_t r = 0; r < R; ++r)
          want.push_back(
              run_partitioned(b.trees[static_cast<std::size_t>(r)], bounds, b.params[static_cast<std::size_t>(r)]));
        if (R > 2) CHECK(want[2].code == status_code::token_out_of_range);

        std::vector<std::int64_t> alone(static_cast<std::size_t>(P), 0), batched(static_cast<std::size_t>(P), 0);
        const auto got = run_ranks<std::vector<outcome>>(P, [&](thread_collective& tc) {
          for (std::int32_t r = 0; r < R; ++r) {  // the collectives of each request alone
            counting_collective<thread_collective> cc(tc);
            (void)run_sharded(cc, b.trees[static_cast<std::size_t>(r)], bounds, b.params[static_cast<std::size_t>(r)]);
            alone[static_cast<std::size_t>(tc.rank())] += cc.traffic().calls;
          }
          rank_batch rb(b, bounds, tc.rank(), P);
          counting_collective<thread_collective> cc(tc);
          const status s = verify_trees_sharded(cc, bounds, rb.req, rb.res, rb.st);
          batched[static_cast<std::size_t>(tc.rank())] = cc.traffic().calls;
          std::vector<outcome> out;
          if (!s.ok()) return out;
          for (std::size_t r = 0; r < rb.req.size(); ++r) out.push_back(rb.got(r));
          return out;
        });
        for (int q = 0; q < P; ++q) {
          REQUIRE(got[static_cast<std::size_t>(q)].size() == static_cast<std::size_t>(R));
          for (std::int32_t r = 0; r < R; ++r) {
            INFO("rank " << q << " request " << r);
            CHECK(got[static_cast<std::size_t>(q)][static_cast<std::size_t>(r)] == want[static_cast<std::size_t>(r)]);
          }
        }
        std::printf("batched sharded verify: seed %llu, %d ranks, %d requests: %lld collectives batched, %lld alone\n",
                    static_cast<unsigned long long>(seed), P, R, static_cast<long long>(batched[0]),
                    static_cast<long long>(alone[0]));
        if (R == 1) CHECK(batched[0] == alone[0] + 1);  // one request: its own collectives + the batch agreement
        if (R > 1) CHECK(batched[0] < alone[0]);
      }
}

TEST_CASE("a bad batch fails on every rank and verifies nothing", "[parallel]") {
  const std::int64_t V = 300;
  const batch_case b = make_batch(9, 3, V);
  const auto bounds = uneven_bounds(V, 2);
  const auto codes = run_ranks<std::vector<status_code>>(2, [&](thread_collective& tc) {
    std::vector<status_code> out;
    {  // rank 1 passes fewer requests
      rank_batch rb(b, bounds, tc.rank(), 2);
      const auto n = static_cast<std::size_t>(tc.rank() == 1 ? 2 : 3);
      out.push_back(verify_trees_sharded(tc, bounds, std::span(rb.req).first(n), rb.res, rb.st).code());
    }
    {  // statuses too short on rank 0
      rank_batch rb(b, bounds, tc.rank(), 2);
      const std::size_t n = tc.rank() == 0 ? 2 : 3;
      out.push_back(verify_trees_sharded(tc, bounds, rb.req, rb.res, std::span(rb.st).first(n)).code());
    }
    {  // more requests than the backend holds, on rank 1
      rank_batch rb(b, bounds, tc.rank(), 2);
      host_batch_backend<thread_collective> be(tc, tc.rank() == 1 ? 2 : 3);
      out.push_back(verify_trees_sharded(be, bounds, rb.req, rb.res, rb.st).code());
    }
    return out;
  });
  for (const auto& c : codes) {
    REQUIRE(c.size() == 3);
    CHECK(c[0] == status_code::invalid_argument);
    CHECK(c[1] == status_code::buffer_too_small);
    CHECK(c[2] == status_code::buffer_too_small);
  }
}
