// Vocabulary-parallel verification and top-k with ranks simulated as
// threads (covers the sharded logic under ASan/UBSan without MPI): for
// random trees, every mode and uneven partitions (an empty range, V not
// divisible by the rank count), every rank's result equals the
// single-process partitioned-order result token for token; bad input on
// one rank gives the same status on all ranks; the collective concept.
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

// Concept: the shipped collectives and the test's satisfy it; near misses do not.
struct no_broadcast {
  int rank() const { return 0; }
  int size() const { return 1; }
  void all_reduce_sum(double*, int) {}
  void all_reduce_max(std::int64_t*, int) {}
  void exclusive_prefix_sum(double*, int) {}
};
struct float_sums : no_broadcast {
  void all_reduce_sum(float*, int) {}
  void broadcast(double*, int, int) {}
};
static_assert(collective<self_collective> && collective<counting_collective<self_collective>>);
static_assert(collective<thread_collective>);
static_assert(!collective<no_broadcast> && !collective<float_sums> && !collective<int>);
static_assert(verify_row_ops<detail::shard_row_ops<host_shard_executor<thread_collective>, parent_topology>>);

outcome run_default(const tree_case& c, const verify_params& vp) {
  std::vector<std::byte> ws(verify_workspace_size(c.V, c.N) + 8);
  std::vector<node_id> path(static_cast<std::size_t>(c.N));
  std::vector<token_id> tokens(static_cast<std::size_t>(c.N));
  verify_result res{};
  const status s = verify_tree(c.view(), matrix(c.p, c.N, c.V), matrix(c.q, c.N, c.V), vp, ws, path, tokens, res);
  return record(s, res, path, tokens);
}

}  // namespace

TEST_CASE("rank_key orders (value, token) as the specdec ranking", "[parallel]") {
  const float vals[] = {-INFINITY, -2.5f, -0.0f, 0.0f, 1e-30f, 0.25f, 0.25f, 3.0f, INFINITY};
  for (const float a : vals)
    for (const float b : vals)
      for (std::int64_t ia : {0, 5, 128255})
        for (std::int64_t ib : {0, 7, 128255}) {
          const bool before = detail::ranks_before(a, static_cast<token_id>(ia), b, static_cast<token_id>(ib));
          CHECK(before == (detail::rank_key(a, ia) > detail::rank_key(b, ib)));
        }
  for (const float a : vals) {
    CHECK(detail::key_value(detail::rank_key(a, 42)) == a);
    CHECK(detail::key_token(detail::rank_key(a, 42)) == 42);
  }
  CHECK(detail::rank_key(-INFINITY, 2147483646) > detail::no_key);
}

TEST_CASE("bounds {0, V} on one rank equal verify_tree exactly", "[parallel]") {
  for (std::uint64_t seed = 1; seed <= 6; ++seed) {
    const auto c = make_tree_case(seed, 2500, 12);
    const std::vector<std::int64_t> whole = {0, c.V};
    for (const verify_mode m : all_modes) {
      verify_params vp{};
      vp.mode = m;
      vp.seed = seed;
      INFO("seed " << seed << " mode " << verify_mode_name(m));
      const outcome a = run_default(c, vp), b = run_partitioned(c, whole, vp);
      REQUIRE(a.code == status_code::ok);
      CHECK(a == b);
    }
  }
}

TEST_CASE("sharded verification equals the partitioned order on every rank", "[parallel]") {
  std::int64_t paths = 0, accepted = 0, mismatches_vs_default = 0, runs = 0;
  for (const int P : {1, 2, 3, 4, 5}) {
    for (const std::int64_t V : {std::int64_t{37}, std::int64_t{3001}}) {
      const auto bounds = uneven_bounds(V, P);
      for (std::uint64_t seed = 100; seed < 104; ++seed) {
        const auto c = make_tree_case(seed * 31 + static_cast<std::uint64_t>(P), V, 16, seed % 2 == 0);
        for (const verify_mode m : all_modes) {
          verify_params vp{};
          vp.mode = m;
          vp.seed = seed;
          vp.round = static_cast<std::uint32_t>(P);
          const outcome want = run_partitioned(c, bounds, vp);
          INFO("P " << P << " V " << V << " seed " << seed << " mode " << verify_mode_name(m));
          REQUIRE(want.code == status_code::ok);
          const auto got = run_ranks<outcome>(P, [&](thread_collective& tc) { return run_sharded(tc, c, bounds, vp); });
          for (const auto& o : got) CHECK(o == want);
          ++runs;
          paths += want.accepted > 0;
          accepted += want.accepted;
          if (!(run_default(c, vp) == want)) ++mismatches_vs_default;
        }
      }
    }
  }
  std::printf(
      "sharded == partitioned: %lld runs, %lld with accepted drafts (%lld drafts), %lld differ from the "
      "default order\n",
      static_cast<long long>(runs), static_cast<long long>(paths), static_cast<long long>(accepted),
      static_cast<long long>(mismatches_vs_default));
  // The cases must exercise acceptance, not only immediate rejection.
  CHECK(paths > runs / 3);
}

TEST_CASE("chains (block verification included): sharded equals partitioned", "[parallel]") {
  const std::int64_t V = 2100;
  const auto bounds = uneven_bounds(V, 3);
  std::int64_t accepted = 0;
  for (const std::uint64_t cs : {7u, 8u, 9u, 10u}) {
    const auto c = make_tree_case(cs, V, 6);
    std::vector<token_id> drafts;
    for (std::int32_t i = 1; i < c.N; ++i) drafts.push_back(c.token[static_cast<std::size_t>(i)]);
    for (const verify_mode m : chain_modes) {
      verify_params vp{};
      vp.mode = m;
      vp.seed = 11;
      std::vector<std::byte> ws(sharded_verify_workspace_size(bounds, 0, 1, c.N) + 8);
      std::vector<token_id> want(static_cast<std::size_t>(c.N));
      verify_result wr{};
      REQUIRE(
          verify_chain_partitioned(bounds, drafts, matrix(c.p, c.N, V), matrix(c.q, c.N, V), vp, ws, want, wr).ok());
      const auto got = run_ranks<std::vector<token_id>>(3, [&](thread_collective& tc) {
        const std::int64_t b0 = bounds[static_cast<std::size_t>(tc.rank())],
                           b1 = bounds[static_cast<std::size_t>(tc.rank()) + 1];
        const auto ps = shard_of(c.p, V, c.N, b0, b1), qs = shard_of(c.q, V, c.N, b0, b1);
        std::vector<std::byte> w(sharded_verify_workspace_size(bounds, tc.rank(), 3, c.N) + 8);
        std::vector<token_id> t(static_cast<std::size_t>(c.N));
        verify_result r{};
        const status s =
            verify_chain_sharded(tc, bounds, drafts, matrix(ps, c.N, b1 - b0), matrix(qs, c.N, b1 - b0), vp, w, t, r);
        if (!s.ok()) return std::vector<token_id>{};
        t.resize(static_cast<std::size_t>(r.accepted) + 1);
        return t;
      });
      want.resize(static_cast<std::size_t>(wr.accepted) + 1);
      accepted += wr.accepted;
      INFO("chain " << cs << " mode " << verify_mode_name(m));
      for (const auto& g : got) CHECK(g == want);
    }
  }
  CHECK(accepted > 0);
}

TEST_CASE("bad input on one rank gives the same status on every rank", "[parallel]") {
  const std::int64_t V = 3001;
  const int P = 4;
  const auto bounds = uneven_bounds(V, P);
  const auto base = make_tree_case(5, V, 10);
  verify_params vp{};
  vp.seed = 3;
  auto all_same = [](const std::vector<outcome>& v) {
    for (const auto& o : v)
      if (!(o.code == v[0].code && o.index == v[0].index)) return false;
    return true;
  };
  SECTION("NaN in one rank's shard of the root row") {
    for (const verify_mode m : all_modes) {
      auto c = base;
      c.p[static_cast<std::size_t>(bounds[3] + 5)] = std::numeric_limits<float>::quiet_NaN();
      vp.mode = m;
      const auto got = run_ranks<outcome>(P, [&](thread_collective& tc) { return run_sharded(tc, c, bounds, vp); });
      INFO(verify_mode_name(m));
      CHECK(all_same(got));
      CHECK(got[0].code == status_code::non_finite);
      CHECK(got[0].index == 0);
      CHECK(run_partitioned(c, bounds, vp) == got[0]);
    }
  }
  SECTION("a negative entry in q on the last rank") {
    auto c = base;
    c.q[static_cast<std::size_t>(V - 1)] = -0.5f;
    vp.mode = verify_mode::sampled_iid;
    const auto got = run_ranks<outcome>(P, [&](thread_collective& tc) { return run_sharded(tc, c, bounds, vp); });
    CHECK(all_same(got));
    // The root's children are rejected or accepted; either way q_0 is validated.
    CHECK(got[0].code == status_code::negative_probability);
  }
  SECTION("a token out of range on one rank's copy of the tree") {
    const auto got = run_ranks<outcome>(P, [&](thread_collective& tc) {
      auto c = base;
      if (tc.rank() == 2) c.token[3] = static_cast<token_id>(V);
      return run_sharded(tc, c, bounds, vp);
    });
    CHECK(all_same(got));
    CHECK(got[0].code == status_code::token_out_of_range);
    CHECK(got[0].index == 3);
  }
  SECTION("a tree that differs between ranks (valid on each)") {
    const auto got = run_ranks<outcome>(P, [&](thread_collective& tc) {
      auto c = base;
      if (tc.rank() == 1) c.token[4] = (c.token[4] + 1) % static_cast<token_id>(V);
      return run_sharded(tc, c, bounds, vp);
    });
    CHECK(all_same(got));
    CHECK(got[0].code == status_code::invalid_argument);
  }
  SECTION("a short workspace on one rank") {
    const auto got = run_ranks<outcome>(P, [&](thread_collective& tc) {
      const auto ps = shard_of(base.p, V, base.N, bounds[static_cast<std::size_t>(tc.rank())],
                               bounds[static_cast<std::size_t>(tc.rank()) + 1]);
      const std::int64_t w =
          bounds[static_cast<std::size_t>(tc.rank()) + 1] - bounds[static_cast<std::size_t>(tc.rank())];
      std::size_t bytes = sharded_verify_workspace_size(bounds, tc.rank(), P, base.N);
      if (tc.rank() == 3) bytes -= 256;
      std::vector<std::byte> ws(bytes);
      std::vector<node_id> path(static_cast<std::size_t>(base.N));
      std::vector<token_id> tokens(static_cast<std::size_t>(base.N));
      verify_result r{};
      vp.mode = verify_mode::greedy;
      const status s = verify_tree_sharded(tc, bounds, base.view(), matrix(ps, base.N, w), view2d<const float>{}, vp,
                                           ws, path, tokens, r);
      return record(s, r, path, tokens);
    });
    CHECK(all_same(got));
    CHECK(got[0].code == status_code::buffer_too_small);
  }
  SECTION("a shard of the wrong width, and a partition that does not match the rank count") {
    const auto got = run_ranks<outcome>(P, [&](thread_collective& tc) {
      if (tc.rank() == 0) {
        auto wrong = bounds;
        wrong[1] += 1;  // rank 0 thinks it holds one more column
        return run_sharded(tc, base, wrong, vp);
      }
      return run_sharded(tc, base, bounds, vp);
    });
    CHECK(all_same(got));
    CHECK(got[0].code != status_code::ok);
    const std::vector<std::int64_t> three = {0, 10, 20, V};
    const auto got3 = run_ranks<outcome>(P, [&](thread_collective& tc) { return run_sharded(tc, base, three, vp); });
    CHECK(all_same(got3));
    CHECK(got3[0].code == status_code::size_mismatch);
  }
}

TEST_CASE("sharded top-k equals the single-row top-k, ties included", "[parallel]") {
  std::mt19937_64 g(2024);
  for (const int P : {1, 2, 3, 4}) {
    for (const std::int64_t V : {std::int64_t{9}, std::int64_t{1000}, std::int64_t{4099}}) {
      for (const bool ties : {false, true}) {
        const auto row = random_row(g, V, ties);
        const auto bounds = uneven_bounds(V, P);
        for (const std::int32_t k : {1, 4, 8}) {
          if (k > V) continue;
          std::vector<token_id> wt(static_cast<std::size_t>(k));
          std::vector<float> wv(static_cast<std::size_t>(k));
          std::int32_t wn = 0;
          REQUIRE(detail::topk_probabilities(row, k, wt.data(), wv.data(), wn).ok());
          struct got_t {
            std::vector<token_id> t;
            std::vector<float> v;
            status_code code = status_code::ok;
          };
          const auto got = run_ranks<got_t>(P, [&](thread_collective& tc) {
            const std::int64_t b0 = bounds[static_cast<std::size_t>(tc.rank())],
                               b1 = bounds[static_cast<std::size_t>(tc.rank()) + 1];
            std::vector<float> mine(row.begin() + b0, row.begin() + b1);
            std::vector<std::int64_t> keys(sharded_topk_workspace_size(k, tc.size()) / 8);
            got_t o;
            o.t.resize(static_cast<std::size_t>(k));
            o.v.resize(static_cast<std::size_t>(k));
            std::int32_t n = 0;
            o.code = sharded_topk_probabilities(tc, mine, b0, V, k, keys, o.t.data(), o.v.data(), n).code();
            o.t.resize(static_cast<std::size_t>(n));
            o.v.resize(static_cast<std::size_t>(n));
            return o;
          });
          wt.resize(static_cast<std::size_t>(wn));
          wv.resize(static_cast<std::size_t>(wn));
          INFO("P " << P << " V " << V << " k " << k << " ties " << ties);
          for (const auto& o : got) {
            CHECK(o.code == status_code::ok);
            CHECK(o.t == wt);
            CHECK(o.v == wv);
          }
        }
      }
    }
  }
  // A NaN on one rank: non_finite with the global token, on every rank.
  auto row = random_row(g, 500, false);
  row[433] = std::numeric_limits<float>::quiet_NaN();
  const auto bounds = uneven_bounds(500, 3);
  const auto got = run_ranks<status>(3, [&](thread_collective& tc) {
    const std::int64_t b0 = bounds[static_cast<std::size_t>(tc.rank())],
                       b1 = bounds[static_cast<std::size_t>(tc.rank()) + 1];
    std::vector<float> mine(row.begin() + b0, row.begin() + b1);
    std::vector<std::int64_t> keys(12);
    token_id t[4];
    float v[4];
    std::int32_t n = 0;
    return sharded_topk_probabilities(tc, mine, b0, 500, 4, keys, t, v, n);
  });
  for (const auto& s : got) {
    CHECK(s.code() == status_code::non_finite);
    CHECK(s.index() == 433);
  }
}

TEST_CASE("counting_collective counts calls and payload bytes", "[parallel]") {
  const auto c = make_tree_case(9, 3001, 16);
  const auto bounds = uneven_bounds(3001, 2);
  verify_params vp{};
  const auto got = run_ranks<collective_traffic>(2, [&](thread_collective& tc) {
    counting_collective<thread_collective> cc(tc);
    (void)run_sharded(cc, c, bounds, vp);
    return cc.traffic();
  });
  CHECK(got[0].calls == got[1].calls);
  CHECK(got[0].calls > 3);
  CHECK(got[0].bytes > 0);
  CHECK(got[0].bytes < 64 * got[0].calls);
}

namespace {

// A collective whose sums leave out the last rank's values (an off-by-one
// over ranks): the comparison must notice (negative control of the
// equality test; single entries and masses both travel in sums).
class short_sum_collective {
 public:
  explicit short_sum_collective(thread_collective& c) : c_(&c) {}
  int rank() const { return c_->rank(); }
  int size() const { return c_->size(); }
  void all_reduce_sum(double* v, int n) {
    if (rank() == size() - 1)
      for (int i = 0; i < n; ++i) v[i] = 0.0;
    c_->all_reduce_sum(v, n);
  }
  void all_reduce_max(std::int64_t* v, int n) { c_->all_reduce_max(v, n); }
  void exclusive_prefix_sum(double* v, int n) { c_->exclusive_prefix_sum(v, n); }
  void broadcast(double* v, int n, int root) { c_->broadcast(v, n, root); }

 private:
  thread_collective* c_;
};
static_assert(collective<short_sum_collective>);

}  // namespace

TEST_CASE("negative control: a collective whose sums miss the last rank is caught", "[parallel]") {
  const std::int64_t V = 3001;
  const auto bounds = uneven_bounds(V, 3);
  int differ = 0, total = 0;
  for (std::uint64_t seed = 1; seed <= 6; ++seed) {
    const auto c = make_tree_case(seed, V, 16);
    verify_params vp{};
    vp.seed = seed;
    const outcome want = run_partitioned(c, bounds, vp);
    const auto got = run_ranks<outcome>(3, [&](thread_collective& tc) {
      short_sum_collective w(tc);
      return run_sharded(w, c, bounds, vp);
    });
    ++total;
    differ += !(got[0] == want);
  }
  std::printf("sums missing the last rank: %d of %d trees differ from the partitioned result\n", differ, total);
  CHECK(differ > 0);
}

TEST_CASE("a top-k tree drafted on split rows equals the tree drafted on full rows", "[parallel]") {
  const std::int64_t V = 1500;
  const int P = 3;
  const auto bounds = uneven_bounds(V, P);
  // A deterministic drafter: q depends on the path (hash-seeded rows with ties).
  auto full_row = [V](const draft_context& ctx) {
    std::uint64_t h = 1469598103934665603ull;
    for (const token_id t : ctx.path) h = (h ^ static_cast<std::uint64_t>(t)) * 1099511628211ull;
    std::mt19937_64 g(h);
    return random_row(g, V, ctx.depth % 2 == 1);
  };
  struct full_drafter {
    decltype(full_row) f;
    std::vector<float> row;
    std::span<const float> probabilities(const draft_context& c) {
      row = f(c);
      return row;
    }
  };
  static_assert(probability_drafter<full_drafter>);
  topk_tree_options opt;
  opt.k = 3;
  opt.depth = 3;
  opt.vocab_size = V;
  drafted_tree want;
  full_drafter fd{full_row, {}};
  REQUIRE(topk_tree_builder(opt).build(fd, 5, want).ok());
  struct tree_rows {
    std::vector<token_id> tok;
    std::vector<node_id> parent;
    std::vector<float> prob;
  };
  auto rows_of = [](const drafted_tree& t) {
    tree_rows r;
    for (std::int32_t i = 0; i < t.size(); ++i) {
      r.tok.push_back(t.tree.token(i));
      r.parent.push_back(t.tree.parent(i));
      r.prob.push_back(t.prob[static_cast<std::size_t>(i)]);
    }
    return r;
  };
  const tree_rows w = rows_of(want);
  const auto got = run_ranks<tree_rows>(P, [&](thread_collective& tc) {
    const std::int64_t b0 = bounds[static_cast<std::size_t>(tc.rank())],
                       b1 = bounds[static_cast<std::size_t>(tc.rank()) + 1];
    std::vector<float> mine;
    auto shard = [&](const draft_context& c) {
      const auto r = full_row(c);
      mine.assign(r.begin() + b0, r.begin() + b1);
      return std::span<const float>(mine);
    };
    std::vector<std::int64_t> keys(sharded_topk_workspace_size(opt.k, P) / 8);
    sharded_topk_drafter<thread_collective, decltype(shard)> d(tc, shard, b0, V, keys);
    static_assert(topk_drafter<decltype(d)>);
    drafted_tree t;
    if (!topk_tree_builder(opt).build(d, 5, t).ok()) return tree_rows{};
    return rows_of(t);
  });
  REQUIRE(w.tok.size() == 1 + 3 + 9 + 27);
  for (const auto& g : got) {
    CHECK(g.tok == w.tok);
    CHECK(g.parent == w.parent);
    CHECK(g.prob == w.prob);
  }
}

TEST_CASE("the executor entry point with separate pass and host workspaces equals partitioned", "[parallel]") {
  // The layout the device executor uses (parallel/cuda_shard.cuh), run on
  // host memory: the same pass objects, the walk on the host.
  const std::int64_t V = 3001;
  for (const int P : {1, 3, 4}) {
    const auto bounds = uneven_bounds(V, P);
    const auto c = make_tree_case(77 + static_cast<std::uint64_t>(P), V, 20);
    for (const verify_mode m : all_modes) {
      verify_params vp{};
      vp.mode = m;
      vp.seed = 5;
      const outcome want = run_partitioned(c, bounds, vp);
      INFO("P " << P << " mode " << verify_mode_name(m));
      const auto got = run_ranks<outcome>(P, [&](thread_collective& tc) {
        const int r = tc.rank();
        const std::int64_t b0 = bounds[static_cast<std::size_t>(r)], b1 = bounds[static_cast<std::size_t>(r) + 1];
        const auto ps = shard_of(c.p, c.V, c.N, b0, b1), qs = shard_of(c.q, c.V, c.N, b0, b1);
        std::size_t eb = 0, hb = 0;
        // Catch assertions stay on the main thread: a wrong size shows as a mismatch.
        if (!sharded_verify_workspace_parts(bounds, r, P, c.N, eb, hb) ||
            eb + hb != sharded_verify_workspace_size(bounds, r, P, c.N))
          return outcome{status_code::internal_error, -1, -1, -1, {}, {}};
        std::vector<std::byte> ew(eb), hw(hb);
        std::vector<node_id> path(static_cast<std::size_t>(c.N));
        std::vector<token_id> tokens(static_cast<std::size_t>(c.N));
        verify_result res{};
        host_shard_executor<thread_collective> ex(tc);
        const status s = verify_tree_sharded(ex, bounds, c.view(), matrix(ps, c.N, b1 - b0), matrix(qs, c.N, b1 - b0),
                                             vp, {ew, hw}, path, tokens, res);
        return record(s, res, path, tokens);
      });
      for (const auto& o : got) CHECK(o == want);
    }
  }
}

TEST_CASE("one collective per decision: single entries ride on the pass before them", "[parallel]") {
  // deterministic mode: per internal node on the path one mass pass (its
  // probe carries the children's entries: no collective per child), then
  // the emission (mass of the residual and the two-step sample) or the
  // leaf's sample (mass and the two-step sample); plus the argument check.
  const std::int64_t V = 3001;
  const auto bounds = uneven_bounds(V, 3);
  int checked = 0;
  for (std::uint64_t seed = 1; seed <= 8; ++seed) {
    const auto c = make_tree_case(seed, V, 16);
    verify_params vp{};
    vp.mode = verify_mode::deterministic;
    vp.seed = seed;
    struct counted {
      outcome o;
      collective_traffic t;
    };
    const auto got = run_ranks<counted>(3, [&](thread_collective& tc) {
      counting_collective<thread_collective> cc(tc);
      const outcome o = run_sharded(cc, c, bounds, vp);
      return counted{o, cc.traffic()};
    });
    const outcome& o = got[0].o;
    REQUIRE(o.code == status_code::ok);
    bool last_internal = false;
    for (std::int32_t i = 1; i < c.N; ++i) last_internal |= c.parent[static_cast<std::size_t>(i)] == o.last;
    const std::int64_t internal_on_path = o.accepted + (last_internal ? 1 : 0);
    const std::int64_t want = 1 + internal_on_path + 3;
    INFO("seed " << seed << " accepted " << o.accepted << " last internal " << last_internal);
    // The emission may add one argmax when the residual's mass rounds to zero.
    CHECK((got[0].t.calls == want || got[0].t.calls == want + 1));
    for (const auto& g : got) CHECK(g.t.calls == got[0].t.calls);
    ++checked;
  }
  CHECK(checked == 8);
}

TEST_CASE("sampled chains: one collective per accepted draft", "[parallel]") {
  // Per accepted node one probe (its draft's p and q entries, and the
  // masses the acceptance check needs); a rejected node adds its first
  // residual; then the emission's two-step sample (the leaf's: mass and
  // sample); plus the argument check.
  const std::int64_t V = 2100;
  const auto bounds = uneven_bounds(V, 3);
  int all_accepted = 0, rejected = 0;
  for (std::uint64_t cs = 1; cs <= 12; ++cs) {
    const auto c = make_tree_case(cs, V, 6);
    std::vector<token_id> drafts;
    for (std::int32_t i = 1; i < c.N; ++i) drafts.push_back(c.token[static_cast<std::size_t>(i)]);
    const auto gamma = static_cast<std::int64_t>(drafts.size());
    verify_params vp{};
    vp.mode = verify_mode::sampled_iid;
    vp.seed = cs;
    struct counted {
      std::int32_t accepted = -1;
      collective_traffic t;
    };
    const auto got = run_ranks<counted>(3, [&](thread_collective& tc) {
      counting_collective<thread_collective> cc(tc);
      const std::int64_t b0 = bounds[static_cast<std::size_t>(tc.rank())],
                         b1 = bounds[static_cast<std::size_t>(tc.rank()) + 1];
      const auto ps = shard_of(c.p, V, c.N, b0, b1), qs = shard_of(c.q, V, c.N, b0, b1);
      std::vector<std::byte> w(sharded_verify_workspace_size(bounds, tc.rank(), 3, c.N) + 8);
      std::vector<token_id> t(static_cast<std::size_t>(c.N));
      verify_result r{};
      const status s =
          verify_chain_sharded(cc, bounds, drafts, matrix(ps, c.N, b1 - b0), matrix(qs, c.N, b1 - b0), vp, w, t, r);
      return counted{s.ok() ? r.accepted : -1, cc.traffic()};
    });
    const std::int64_t a = got[0].accepted;
    REQUIRE(a >= 0);
    const std::int64_t want = a + 4 + (a < gamma ? 1 : 0);
    INFO("chain " << cs << " accepted " << a << " of " << gamma);
    CHECK((got[0].t.calls == want || got[0].t.calls == want + 1));  // + an argmax if the residual rounds to zero
    for (const auto& g : got) CHECK(g.t.calls == got[0].t.calls);
    (a == gamma ? all_accepted : rejected) += 1;
  }
  CHECK(rejected > 0);
  std::printf("sampled chain collective counts: %d fully accepted, %d with a rejection\n", all_accepted, rejected);
}
