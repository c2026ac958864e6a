// Request batching of the vocabulary-parallel verifier
// (parallel/shard_batch.hpp) with ranks simulated as threads: every
// request of a batch gets exactly what it gets verified alone (tokens,
// path, status), a bad request gets its own status while the others
// verify, the batch makes fewer collectives than its requests alone, and a
// bad batch fails on every rank.
#include <catch2/catch.hpp>

#include <array>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <thread>
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

// The step of nccl_batch_backend on the host: passes are queued (at most
// `depth` per request, so full queues force steps of no collective) and run
// at the step, request by request in queue order, then one all-gather of
// the packed words. It checks the deferred execution the device backend
// relies on without a GPU.
class deferred_backend {
 public:
  static constexpr int capacity = 64;
  deferred_backend(thread_gather_collective& c, std::int32_t R, int depth)
      : c_(&c),
        R_(R),
        depth_(depth),
        queue_(static_cast<std::size_t>(R * depth)),
        count_(static_cast<std::size_t>(R)),
        d_(static_cast<std::size_t>(R * capacity)),
        l_(d_.size()),
        words_(d_.size() * static_cast<std::size_t>(1 + c.size())),
        off_(static_cast<std::size_t>(R)) {}
  int rank() const { return c_->rank(); }
  int size() const { return c_->size(); }
  std::int32_t max_requests() const { return R_; }
  thread_gather_collective& coll() { return *c_; }
  status error() const { return status::success(); }
  const std::int64_t* stage_bounds(std::span<const std::int64_t> b, std::int64_t*) { return b.data(); }
  void drop(std::int32_t r) { count_[static_cast<std::size_t>(r)] = 0; }
  template <class Pass>
  bool queue(std::int32_t r, const Pass& f) {
    int& c = count_[static_cast<std::size_t>(r)];
    if (c == depth_) return false;
    queue_[static_cast<std::size_t>(r * depth_ + c++)] = detail::any_shard_pass(f);
    return true;
  }
  void step(std::span<const batch_post* const> posts) {
    for (std::size_t r = 0; r < posts.size(); ++r) {
      if (posts[r] == nullptr) continue;
      for (int i = 0; i < count_[r]; ++i)
        queue_[r * static_cast<std::size_t>(depth_) + static_cast<std::size_t>(i)].run(detail::host_row_ops{}, d(r),
                                                                                       l(r));
      count_[r] = 0;
    }
    const std::size_t all = d_.size();
    const std::int64_t W =
        detail::pack_posts(posts, off_.data(), words_.data(), [&](std::size_t r, std::int64_t* w, int n) {
          for (int i = 0; i < n; ++i)
            w[i] = posts[r]->op == batch_op::max ? l(r)[i] : std::bit_cast<std::int64_t>(d(r)[i]);
        });
    if (W > 0) c_->all_gather(words_.data(), static_cast<int>(W), words_.data() + all);
    detail::unpack_posts(posts, off_.data(), W, words_.data() + all, rank(), size(), true);
  }

 private:
  double* d(std::size_t r) { return d_.data() + r * capacity; }
  std::int64_t* l(std::size_t r) { return l_.data() + r * capacity; }
  thread_gather_collective* c_;
  std::int32_t R_;
  int depth_;
  std::vector<detail::any_shard_pass> queue_;
  std::vector<int> count_;
  std::vector<double> d_;
  std::vector<std::int64_t> l_;
  std::vector<std::int64_t> words_;
  std::vector<std::int64_t> off_;
};

// A collective that carries at most 8 scalars per call (as mpi_collective
// and nccl_collective carry at most 64) and counts calls over the limit.
class limited_collective {
 public:
  static constexpr int max_scalars = 8;
  explicit limited_collective(thread_collective& c) : c_(&c) {}
  int rank() const { return c_->rank(); }
  int size() const { return c_->size(); }
  void all_reduce_sum(double* v, int n) { c_->all_reduce_sum(v, check(n)); }
  void exclusive_prefix_sum(double* v, int n) { c_->exclusive_prefix_sum(v, check(n)); }
  void all_reduce_max(std::int64_t* v, int n) { c_->all_reduce_max(v, check(n)); }
  void broadcast(double* v, int n, int root) { c_->broadcast(v, check(n), root); }
  int over = 0;

 private:
  int check(int n) {
    over += n > max_scalars ? 1 : 0;
    return n;
  }
  thread_collective* c_;
};
static_assert(collective<limited_collective> && !gathering_collective<limited_collective>);

}  // namespace

TEST_CASE("a collective's scalar limit is kept: per-kind steps are split into calls of at most max_scalars",
          "[parallel]") {
  const std::int64_t V = 500;
  const batch_case b = make_batch(77, 12, V);
  const auto bounds = uneven_bounds(V, 2);
  // Each rank's outcomes, then (as the last entry's `index`) its calls over the limit.
  const auto got = run_ranks<std::vector<outcome>>(2, [&](thread_collective& tc) {
    limited_collective lc(tc);
    rank_batch rb(b, bounds, tc.rank(), 2);
    std::vector<outcome> out;
    const status s = verify_trees_sharded(lc, bounds, rb.req, rb.res, rb.st);
    for (std::size_t r = 0; s.ok() && r < rb.req.size(); ++r) out.push_back(rb.got(r));
    outcome over;
    over.index = lc.over;
    out.push_back(over);
    return out;
  });
  for (auto g : got) {
    REQUIRE(g.size() == 13);
    CHECK(g.back().index == 0);  // no call carried more than max_scalars
    g.pop_back();
    for (std::size_t r = 0; r < 12; ++r) CHECK(g[r] == run_partitioned(b.trees[r], bounds, b.params[r]));
  }
}

TEST_CASE("deferred passes (the device backend's step, on the host) give every request its result alone",
          "[parallel]") {
  const std::int64_t V = 900;
  for (const int P : {1, 3})
    for (const int depth : {1, 2, 8}) {
      const std::uint64_t seed = 40 + static_cast<std::uint64_t>(depth);
      INFO("seed " << seed << " ranks " << P << " queue depth " << depth);
      const batch_case b = make_batch(seed, 9, V);
      const auto bounds = uneven_bounds(V, P);
      const auto got = run_ranks<std::vector<outcome>>(P, [&](thread_collective& tc) {
        thread_gather_collective gc(tc.group(), tc.rank());
        deferred_backend be(gc, 9, depth);
        rank_batch rb(b, bounds, tc.rank(), P);
        std::vector<outcome> out;
        if (!verify_trees_sharded(be, bounds, rb.req, rb.res, rb.st).ok()) return out;
        for (std::size_t r = 0; r < rb.req.size(); ++r) out.push_back(rb.got(r));
        return out;
      });
      for (int q = 0; q < P; ++q) {
        REQUIRE(got[static_cast<std::size_t>(q)].size() == 9);
        for (std::size_t r = 0; r < 9; ++r)
          CHECK(got[static_cast<std::size_t>(q)][r] == run_partitioned(b.trees[r], bounds, b.params[r]));
      }
    }
}

TEST_CASE("verify_trees_sharded gives every request what it gets alone, in fewer collectives", "[parallel]") {
  const std::int64_t V = 700;
  for (const int P : {1, 2, 3})
    for (const std::int32_t R : {1, 5, 16})
      for (std::uint64_t seed = 1; seed <= 3; ++seed) {
        INFO("seed " << seed << " ranks " << P << " requests " << R);
        batch_case b = make_batch(seed, R, V);
        if (R > 2) b.trees[2].token[b.trees[2].N > 1 ? 1 : 0] = static_cast<token_id>(V);  // a bad request
        if (R > 5) b.trees[5].p[static_cast<std::size_t>(V / 2)] = std::nanf("");  // fails mid-walk (non-finite row)
        const auto bounds = uneven_bounds(V, P);
        std::vector<outcome> want;
        for (std::int32_t r = 0; r < R; ++r)
          want.push_back(
              run_partitioned(b.trees[static_cast<std::size_t>(r)], bounds, b.params[static_cast<std::size_t>(r)]));
        if (R > 2) CHECK(want[2].code == status_code::token_out_of_range);
        if (R > 5) CHECK(want[5].code == status_code::non_finite);

        std::vector<std::int64_t> alone(static_cast<std::size_t>(P), 0), longest(static_cast<std::size_t>(P), 0),
            batched(static_cast<std::size_t>(P), 0), gathered(static_cast<std::size_t>(P), 0);
        const auto got = run_ranks<std::vector<outcome>>(P, [&](thread_collective& tc) {
          for (std::int32_t r = 0; r < R; ++r) {  // the collectives of each request alone
            counting_collective<thread_collective> cc(tc);
            (void)run_sharded(cc, b.trees[static_cast<std::size_t>(r)], bounds, b.params[static_cast<std::size_t>(r)]);
            alone[static_cast<std::size_t>(tc.rank())] += cc.traffic().calls;
            auto& l = longest[static_cast<std::size_t>(tc.rank())];
            l = cc.traffic().calls > l ? cc.traffic().calls : l;
          }
          std::vector<outcome> out;
          {  // with an all-gather: one collective per step, the layout of nccl_batch_backend
            rank_batch rb(b, bounds, tc.rank(), P);
            thread_gather_collective gc(tc.group(), tc.rank());
            counting_collective<thread_gather_collective> cc(gc);
            const status s = verify_trees_sharded(cc, bounds, rb.req, rb.res, rb.st);
            gathered[static_cast<std::size_t>(tc.rank())] = cc.traffic().calls;
            for (std::size_t r = 0; s.ok() && r < rb.req.size(); ++r) out.push_back(rb.got(r));
          }
          rank_batch rb(b, bounds, tc.rank(), P);
          counting_collective<thread_collective> cc(tc);
          const status s = verify_trees_sharded(cc, bounds, rb.req, rb.res, rb.st);
          batched[static_cast<std::size_t>(tc.rank())] = cc.traffic().calls;
          if (!s.ok()) return out;
          for (std::size_t r = 0; r < rb.req.size(); ++r) out.push_back(rb.got(r));
          return out;
        });
        for (int q = 0; q < P; ++q) {
          REQUIRE(got[static_cast<std::size_t>(q)].size() == 2 * static_cast<std::size_t>(R));
          for (std::int32_t r = 0; r < 2 * R; ++r) {
            INFO("rank " << q << " request " << r % R << (r < R ? " (all-gather)" : ""));
            CHECK(got[static_cast<std::size_t>(q)][static_cast<std::size_t>(r)] ==
                  want[static_cast<std::size_t>(r % R)]);
          }
        }
        std::printf(
            "batched sharded verify: seed %llu, %d ranks, %d requests: %lld collectives alone (longest "
            "request %lld), batched %lld, batched with an all-gather %lld\n",
            static_cast<unsigned long long>(seed), P, R, static_cast<long long>(alone[0]),
            static_cast<long long>(longest[0]), static_cast<long long>(batched[0]),
            static_cast<long long>(gathered[0]));
        // One step per collective of the longest request, plus the batch's agreement.
        CHECK(gathered[0] == longest[0] + 1);
        if (R == 1) CHECK(batched[0] == alone[0] + 1);
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
      for (auto& r : rb.res) r = verify_result{9, 9, 9, status_code::ok};
      for (auto& st : rb.st) st = make_status(status_code::cycle, "sentinel");
      out.push_back(verify_trees_sharded(be, bounds, rb.req, rb.res, rb.st).code());
      bool untouched = true;
      for (const auto& r : rb.res) untouched &= r.accepted == 9 && r.last_node == 9 && r.next_token == 9;
      for (const auto& st : rb.st) untouched &= st.code() == status_code::cycle;
      out.push_back(untouched ? status_code::ok : status_code::internal_error);
    }
    return out;
  });
  for (const auto& c : codes) {
    REQUIRE(c.size() == 4);
    CHECK(c[3] == status_code::ok);  // every result and status left as they were
    CHECK(c[0] == status_code::invalid_argument);
    CHECK(c[1] == status_code::buffer_too_small);
    CHECK(c[2] == status_code::buffer_too_small);
  }
}

TEST_CASE("a shard_batch_workers pool kept across calls gives every request what it gets alone", "[parallel]") {
  const std::int64_t V = 500;
  for (const int P : {1, 2, 3}) {
    // Batches of varying size on one pool per rank: workers left out of a
    // small batch must join the next larger one.
    const std::int32_t sizes[] = {16, 1, 5, 16, 3, 12};
    std::vector<batch_case> cases;
    std::vector<std::vector<outcome>> want;
    const auto bounds = uneven_bounds(V, P);
    for (std::size_t k = 0; k < std::size(sizes); ++k) {
      cases.push_back(make_batch(40 + k, sizes[k], V));
      want.emplace_back();
      for (std::int32_t r = 0; r < sizes[k]; ++r)
        want.back().push_back(run_partitioned(cases[k].trees[static_cast<std::size_t>(r)], bounds,
                                              cases[k].params[static_cast<std::size_t>(r)]));
    }
    const auto got = run_ranks<std::vector<std::vector<outcome>>>(P, [&](thread_collective& tc) {
      shard_batch_workers pool(16);
      host_batch_backend<thread_collective> be(tc, pool.max_requests());
      std::vector<std::vector<outcome>> out;
      for (const batch_case& b : cases) {
        rank_batch rb(b, bounds, tc.rank(), P);
        const status s = verify_trees_sharded(be, pool, bounds, rb.req, rb.res, rb.st);
        out.emplace_back();
        for (std::size_t r = 0; s.ok() && r < rb.req.size(); ++r) out.back().push_back(rb.got(r));
      }
      return out;
    });
    for (int q = 0; q < P; ++q)
      for (std::size_t k = 0; k < std::size(sizes); ++k) {
        INFO("ranks " << P << " rank " << q << " batch " << k << " of " << sizes[k] << " requests");
        CHECK(got[static_cast<std::size_t>(q)][k] == want[k]);
      }
  }
  // A pool too small on one rank fails the call on every rank, outputs untouched.
  const batch_case b = make_batch(9, 3, V);
  const auto bounds = uneven_bounds(V, 2);
  const auto codes = run_ranks<std::vector<status_code>>(2, [&](thread_collective& tc) {
    shard_batch_workers pool(tc.rank() == 1 ? 2 : 3);
    host_batch_backend<thread_collective> be(tc, 3);
    rank_batch rb(b, bounds, tc.rank(), 2);
    for (auto& r : rb.res) r = verify_result{9, 9, 9, status_code::ok};
    for (auto& st : rb.st) st = make_status(status_code::cycle, "sentinel");
    const status s = verify_trees_sharded(be, pool, bounds, rb.req, rb.res, rb.st);
    bool untouched = true;
    for (const auto& r : rb.res) untouched &= r.accepted == 9 && r.last_node == 9 && r.next_token == 9;
    for (const auto& st : rb.st) untouched &= st.code() == status_code::cycle;
    return std::vector<status_code>{s.code(), untouched ? status_code::ok : status_code::internal_error};
  });
  for (const auto& c : codes) CHECK((c[0] == status_code::buffer_too_small && c[1] == status_code::ok));
}

TEST_CASE("shard_batch_workers runs each request of every call once, on its own thread, whatever the sizes",
          "[parallel]") {
  // Calls of 1, 1 and 8 requests in turn: the workers a call leaves out
  // sleep through it and must take part in the next larger one, once.
  shard_batch_workers pool(8);
  REQUIRE(pool.max_requests() == 8);
  std::array<std::atomic<int>, 8> runs{};
  std::array<std::atomic<std::size_t>, 8> thread_of{};
  const auto f = [&](std::int32_t r) {
    runs[static_cast<std::size_t>(r)].fetch_add(1);
    thread_of[static_cast<std::size_t>(r)] = std::hash<std::thread::id>{}(std::this_thread::get_id());
  };
  const std::int32_t sizes[] = {1, 1, 8, 3, 0, 8, 2};
  int bad = 0;
  for (int call = 0; call < 3000; ++call) {
    const std::int32_t R = sizes[call % 7];
    for (auto& x : runs) x = 0;
    REQUIRE(pool.prepare(R, f));
    CHECK_FALSE(pool.prepare(1, f));  // one call at a time
    pool.run(true, R, f);
    for (std::int32_t r = 0; r < 8; ++r) bad += runs[static_cast<std::size_t>(r)] != (r < R ? 1 : 0) ? 1 : 0;
    if (R == 8)
      for (std::size_t r = 1; r < 8; ++r) bad += thread_of[r] == thread_of[r - 1] ? 1 : 0;
  }
  CHECK(bad == 0);
  // An agreement that failed runs nothing and releases the pool.
  for (auto& x : runs) x = 0;
  REQUIRE(pool.prepare(8, f));
  pool.run(false, 8, f);
  for (const auto& x : runs) CHECK(x == 0);
  CHECK(pool.prepare(9, f) == false);  // larger than the pool
  CHECK(pool.prepare(8, f));
  pool.run(false, 8, f);
}
