// The level-batched sharded top-k (sharded_topk_rows_on) with ranks
// simulated as threads and the host executor running the same pass objects
// the device executor runs (parallel/detail/topk_passes.hpp): every rank's
// candidates equal brute force and the row-at-a-time
// sharded_topk_probabilities, and the masses equal the partitioned tiled
// order bit for bit, on uneven partitions (an empty range, V not divisible
// by the rank count), ties and strided rows; malformed rows and arguments
// give the same status on every rank; a tree drafted level by level on
// split rows equals the tree drafted on full rows.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <vector>

#include "sharded_cases.hpp"
#include "specdec/draft/topk_tree.hpp"
#include "specdec/parallel/sharded_topk.hpp"
#include "specdec/sample/order.hpp"
#include "thread_collective.hpp"

using namespace specdec;
using namespace sharded_test;

static_assert(gathering_collective<counting_collective<thread_gather_collective>>);
static_assert(!gathering_collective<counting_collective<thread_collective>>);
static_assert(collective<counting_collective<thread_collective>>);

namespace {

// The best k positive entries of a full row: sort by (value desc, token asc).
void brute_topk(const float* row, std::int64_t V, std::int32_t k, std::vector<token_id>& t, std::vector<float>& v) {
  std::vector<token_id> ids;
  for (std::int64_t i = 0; i < V; ++i)
    if (row[i] > 0.0f) ids.push_back(static_cast<token_id>(i));
  std::sort(ids.begin(), ids.end(),
            [&](token_id a, token_id b) { return row[a] > row[b] || (row[a] == row[b] && a < b); });
  if (ids.size() > static_cast<std::size_t>(k)) ids.resize(static_cast<std::size_t>(k));
  t = ids;
  v.clear();
  for (const token_id i : ids) v.push_back(row[i]);
}

// The partitioned order: each range's tiled sum (sample/order.hpp), folded in rank order.
double partitioned_mass(const float* row, std::span<const std::int64_t> bounds) {
  double m = 0.0;
  for (std::size_t r = 0; r + 1 < bounds.size(); ++r) {
    const std::int64_t b0 = bounds[r], len = bounds[r + 1] - b0;
    if (len == 0) continue;
    std::vector<double> tiles(static_cast<std::size_t>(sum_tile_count(len)));
    double mr = 0.0;
    REQUIRE(detail::row_tiles(detail::row_ref{row + b0, 1}, len, tiles.data(), mr));
    m += mr;
  }
  return m;
}

struct level_out {
  status_code code = status_code::ok;
  std::int64_t index = -1;
  std::vector<std::vector<token_id>> tok;
  std::vector<std::vector<float>> val;
  std::vector<double> mass;
  bool operator==(const level_out&) const = default;
};

// Rank `r`'s call on its columns of the n x V rows `m`, stored with a padded row stride.
template <class C>
level_out run_rows(C& coll, const std::vector<float>& m, std::int32_t n, std::int64_t V,
                   std::span<const std::int64_t> bounds, std::int32_t k, std::int64_t pad = 3) {
  const int r = coll.rank();
  const std::int64_t b0 = bounds[static_cast<std::size_t>(r)], b1 = bounds[static_cast<std::size_t>(r) + 1],
                     w = b1 - b0, rs = w + pad;
  std::vector<float> mine(static_cast<std::size_t>(n * rs + 1), -7.0f);  // padding is garbage: never read
  for (std::int32_t i = 0; i < n; ++i)
    for (std::int64_t j = 0; j < w; ++j)
      mine[static_cast<std::size_t>(i * rs + j)] = m[static_cast<std::size_t>(i * V + b0 + j)];
  const view2d<const float> rows{mine.data(), {n, w}, {rs, 1}};
  std::vector<std::byte> ws(sharded_topk_rows_workspace_size(n, w, k, coll.size()));
  std::vector<token_id> tok(static_cast<std::size_t>(n * k));
  std::vector<float> val(tok.size());
  std::vector<std::int32_t> counts(static_cast<std::size_t>(n));
  std::vector<double> mass(static_cast<std::size_t>(n));
  const status s = sharded_topk_rows(coll, b0, V, rows, k, ws, make_view(tok.data(), n, k), make_view(val.data(), n, k),
                                     counts, mass);
  level_out o;
  o.code = s.code();
  o.index = s.index();
  if (!s.ok()) return o;
  for (std::int32_t i = 0; i < n; ++i) {
    const auto c = static_cast<std::size_t>(counts[static_cast<std::size_t>(i)]);
    o.tok.emplace_back(tok.begin() + i * k, tok.begin() + i * k + static_cast<std::ptrdiff_t>(c));
    o.val.emplace_back(val.begin() + i * k, val.begin() + i * k + static_cast<std::ptrdiff_t>(c));
  }
  o.mass = mass;
  return o;
}

std::vector<float> random_rows(std::mt19937_64& g, std::int32_t n, std::int64_t V, bool ties) {
  std::vector<float> m;
  for (std::int32_t i = 0; i < n; ++i) {
    auto row = random_row(g, V, ties);
    if (i == 1)  // a row with fewer positive entries than most k: padding in the merge
      for (std::int64_t j = 0; j < V; ++j)
        row[static_cast<std::size_t>(j)] = j % 97 == 5 ? row[static_cast<std::size_t>(j)] + 0.125f : 0.0f;
    m.insert(m.end(), row.begin(), row.end());
  }
  return m;
}

}  // namespace

TEST_CASE("level-batched sharded top-k == row-at-a-time sharded top-k == brute force", "[parallel]") {
  std::mt19937_64 g(20261122);  // printed seed: the rows below are reproducible
  std::printf("sharded_topk_rows: seed 20261122\n");
  std::int64_t rows_checked = 0;
  for (const int P : {1, 2, 3, 4, 5}) {
    for (const std::int64_t V : {std::int64_t{37}, std::int64_t{1000}, std::int64_t{4099}}) {
      for (const bool ties : {false, true}) {
        const std::int32_t n = 6;
        const auto m = random_rows(g, n, V, ties);
        const auto bounds = uneven_bounds(V, P);
        for (const std::int32_t k : {1, 4, 8, 33, 64}) {
          if (k > V) continue;
          INFO("P " << P << " V " << V << " ties " << ties << " k " << k);
          const auto got =
              run_ranks<level_out>(P, [&](thread_collective& tc) { return run_rows(tc, m, n, V, bounds, k); });
          // The same through a collective with its own all-gather.
          const auto gathered = run_ranks<level_out>(P, [&](thread_collective& tc) {
            thread_gather_collective gc(tc.group(), tc.rank());
            return run_rows(gc, m, n, V, bounds, k);
          });
          CHECK(gathered == got);
          // The row-at-a-time form on the same partition, row by row.
          std::vector<level_out> old(static_cast<std::size_t>(P));
          for (std::int32_t i = 0; i < n; ++i) {
            const auto one = run_ranks<level_out>(P, [&](thread_collective& tc) {
              const std::int64_t b0 = bounds[static_cast<std::size_t>(tc.rank())],
                                 b1 = bounds[static_cast<std::size_t>(tc.rank()) + 1];
              std::vector<float> mine(m.begin() + i * V + b0, m.begin() + i * V + b1);
              std::vector<std::int64_t> keys(sharded_topk_workspace_size(k, tc.size()) / 8);
              std::vector<token_id> t(static_cast<std::size_t>(k));
              std::vector<float> v(t.size());
              std::int32_t c = 0;
              level_out o;
              o.code = sharded_topk_probabilities(tc, mine, b0, V, k, keys, t.data(), v.data(), c).code();
              t.resize(static_cast<std::size_t>(c));
              v.resize(static_cast<std::size_t>(c));
              o.tok.push_back(t);
              o.val.push_back(v);
              return o;
            });
            for (int r = 0; r < P; ++r) {
              REQUIRE(one[static_cast<std::size_t>(r)].code == status_code::ok);
              old[static_cast<std::size_t>(r)].tok.push_back(one[static_cast<std::size_t>(r)].tok[0]);
              old[static_cast<std::size_t>(r)].val.push_back(one[static_cast<std::size_t>(r)].val[0]);
            }
          }
          for (int r = 0; r < P; ++r) {
            const level_out& o = got[static_cast<std::size_t>(r)];
            REQUIRE(o.code == status_code::ok);
            CHECK(o.tok == old[static_cast<std::size_t>(r)].tok);
            CHECK(o.val == old[static_cast<std::size_t>(r)].val);
            for (std::int32_t i = 0; i < n; ++i) {
              std::vector<token_id> bt;
              std::vector<float> bv;
              brute_topk(m.data() + i * V, V, k, bt, bv);
              CHECK(o.tok[static_cast<std::size_t>(i)] == bt);
              CHECK(o.val[static_cast<std::size_t>(i)] == bv);
              // Bit for bit the partitioned order (every rank alike).
              CHECK(o.mass[static_cast<std::size_t>(i)] == partitioned_mass(m.data() + i * V, bounds));
              ++rows_checked;
            }
          }
        }
      }
    }
  }
  std::printf("sharded_topk_rows: %lld rows equal brute force and the row-at-a-time merge on every rank\n",
              static_cast<long long>(rows_checked));
}

TEST_CASE("sharded top-k rows: malformed rows give the same status on every rank", "[parallel]") {
  std::mt19937_64 g(7);
  const std::int64_t V = 1000;
  const int P = 4;
  const auto bounds = uneven_bounds(V, P);  // rank 1 holds no columns
  const std::int32_t n = 5;
  const auto base = random_rows(g, n, V, false);
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  struct bad_case {
    std::int32_t row;
    std::int64_t col;
    float v;
    std::int32_t row2;
    std::int64_t col2;
    float v2;
    status_code want;
    std::int64_t index;
  };
  const std::int64_t last = bounds[3];  // the first column of rank 3
  const bad_case cases[] = {
      // NaN in row 3 on rank 3, a negative entry in row 1 on rank 0: the lowest row wins.
      {3, last + 4, nan, 1, 20, -0.5f, status_code::negative_probability, 20},
      // Two bad entries in one row on ranks 0 and 3: the lowest rank's first bad entry.
      {2, last + 1, -1.0f, 2, 30, inf, status_code::non_finite, 30},
      // Two bad entries on one rank: the first one.
      {0, 400, nan, 0, 410, -2.0f, status_code::non_finite, 400},
      {4, last, inf, 4, last, inf, status_code::non_finite, last},
  };
  for (const bad_case& c : cases) {
    auto m = base;
    m[static_cast<std::size_t>(c.row * V + c.col)] = c.v;
    m[static_cast<std::size_t>(c.row2 * V + c.col2)] = c.v2;
    INFO("row " << c.row << " col " << c.col);
    const auto got = run_ranks<level_out>(P, [&](thread_collective& tc) { return run_rows(tc, m, n, V, bounds, 4); });
    for (const auto& o : got) {
      CHECK(o.code == c.want);
      CHECK(o.index == c.index);
    }
    // The row-at-a-time form agrees on the failing row.
    const std::int32_t row = std::min(c.row, c.row2);
    const auto one = run_ranks<status>(P, [&](thread_collective& tc) {
      const std::int64_t b0 = bounds[static_cast<std::size_t>(tc.rank())],
                         b1 = bounds[static_cast<std::size_t>(tc.rank()) + 1];
      std::vector<float> mine(m.begin() + row * V + b0, m.begin() + row * V + b1);
      std::vector<std::int64_t> keys(16);
      token_id t[4];
      float v[4];
      std::int32_t cnt = 0;
      return sharded_topk_probabilities(tc, mine, b0, V, 4, keys, t, v, cnt);
    });
    for (const auto& s : one) {
      CHECK(s.code() == c.want);
      CHECK(s.index() == c.index);
    }
  }
  // A zero row: zero_mass with the row as index.
  auto m = base;
  for (std::int64_t j = 0; j < V; ++j) m[static_cast<std::size_t>(2 * V + j)] = 0.0f;
  const auto got = run_ranks<level_out>(P, [&](thread_collective& tc) { return run_rows(tc, m, n, V, bounds, 3); });
  for (const auto& o : got) {
    CHECK(o.code == status_code::zero_mass);
    CHECK(o.index == 2);
  }
}

TEST_CASE("sharded top-k rows: bad arguments on one rank give the same status on every rank", "[parallel]") {
  std::mt19937_64 g(8);
  const std::int64_t V = 500;
  const int P = 3;
  const auto bounds = uneven_bounds(V, P);
  const std::int32_t n = 3;
  const auto m = random_rows(g, n, V, false);
  auto call = [&](thread_collective& tc, std::int64_t v0, std::int64_t w, std::int32_t k, std::size_t ws_bytes,
                  std::int64_t Vr) {
    const int r = tc.rank();
    const std::int64_t b0 = bounds[static_cast<std::size_t>(r)];
    std::vector<float> mine(static_cast<std::size_t>(n * (w > 0 ? w : 1)), 0.1f);
    for (std::int32_t i = 0; i < n; ++i)
      for (std::int64_t j = 0; j < w && b0 + j < V; ++j)
        mine[static_cast<std::size_t>(i * w + j)] = m[static_cast<std::size_t>(i * V + b0 + j)];
    std::vector<std::byte> ws(ws_bytes);
    std::vector<token_id> tok(static_cast<std::size_t>(n * 8));
    std::vector<float> val(tok.size());
    std::vector<std::int32_t> counts(static_cast<std::size_t>(n));
    return sharded_topk_rows(tc, v0, Vr, view2d<const float>{mine.data(), {n, w}, {w, 1}}, k, ws,
                             make_view(tok.data(), n, 8), make_view(val.data(), n, 8), counts);
  };
  auto width = [&](int r) { return bounds[static_cast<std::size_t>(r) + 1] - bounds[static_cast<std::size_t>(r)]; };
  auto full = [&](int r, std::int32_t k) { return sharded_topk_rows_workspace_size(n, width(r), k, P); };
  // k differs on rank 2: the fingerprint.
  auto got = run_ranks<status>(P, [&](thread_collective& tc) {
    const int r = tc.rank();
    const std::int32_t k = r == 2 ? 5 : 4;
    return call(tc, bounds[static_cast<std::size_t>(r)], width(r), k, full(r, k), V);
  });
  for (const auto& s : got) CHECK(s.code() == status_code::invalid_argument);
  // A short workspace on rank 1.
  got = run_ranks<status>(P, [&](thread_collective& tc) {
    const int r = tc.rank();
    return call(tc, bounds[static_cast<std::size_t>(r)], width(r), 4, full(r, 4) - (r == 1 ? 1 : 0), V);
  });
  for (const auto& s : got) CHECK(s.code() == status_code::buffer_too_small);
  // k > V on every rank; columns past V on rank 0.
  got = run_ranks<status>(P, [&](thread_collective& tc) {
    const int r = tc.rank();
    return call(tc, bounds[static_cast<std::size_t>(r)], width(r), 8, full(r, 8), 7);
  });
  for (const auto& s : got) CHECK(s.code() == status_code::invalid_argument);
  // k above topk_max_k.
  got = run_ranks<status>(P, [&](thread_collective& tc) {
    const int r = tc.rank();
    return call(tc, bounds[static_cast<std::size_t>(r)], width(r), 65, full(r, 65), V);
  });
  for (const auto& s : got) CHECK(s.code() == status_code::invalid_argument);
  // Each rank's range is valid on its own but they overlap (rank 2 starts one column early).
  got = run_ranks<status>(P, [&](thread_collective& tc) {
    const int r = tc.rank();
    const std::int64_t v0 = bounds[static_cast<std::size_t>(r)] - (r == 2 ? 1 : 0);
    return call(tc, v0, width(r), 4, full(r, 4), V);
  });
  for (const auto& s : got) {
    CHECK(s.code() == status_code::invalid_argument);
    CHECK(s.index() == 2);
  }
  // No rows: success, nothing exchanged but the agreement.
  const auto zero = run_ranks<collective_traffic>(P, [&](thread_collective& tc) {
    counting_collective<thread_collective> cc(tc);
    std::vector<std::byte> ws(sharded_topk_rows_workspace_size(0, 0, 2, P));
    std::int32_t cnt = 0;
    token_id t = 0;
    float v = 0;
    const status s = sharded_topk_rows(cc, bounds[static_cast<std::size_t>(tc.rank())], V,
                                       view2d<const float>{nullptr, {0, width(tc.rank())}, {1, 1}}, 2, ws,
                                       make_view(&t, 0, 2), make_view(&v, 0, 2), std::span<std::int32_t>(&cnt, 0));
    if (!s.ok()) return collective_traffic{-1, -1};  // Catch assertions stay on the main thread
    return cc.traffic();
  });
  for (const auto& t : zero) CHECK(t.calls == 1);
}

namespace {

// A collective whose maxima ignore the last rank's values: the merge must
// notice (negative control of the equality test).
class short_max_collective {
 public:
  explicit short_max_collective(thread_collective& c) : c_(&c) {}
  int rank() const { return c_->rank(); }
  int size() const { return c_->size(); }
  void all_reduce_sum(double* v, int n) { c_->all_reduce_sum(v, n); }
  void all_reduce_max(std::int64_t* v, int n) {
    if (rank() == size() - 1 && n > 3)  // the gather, not the argument agreement
      for (int i = 0; i < n; ++i) v[i] = detail::no_key;
    c_->all_reduce_max(v, n);
  }
  void exclusive_prefix_sum(double* v, int n) { c_->exclusive_prefix_sum(v, n); }
  void broadcast(double* v, int n, int root) { c_->broadcast(v, n, root); }

 private:
  thread_collective* c_;
};
static_assert(collective<short_max_collective>);

}  // namespace

TEST_CASE("negative control: a gather that misses the last rank is caught", "[parallel]") {
  std::mt19937_64 g(9);
  const std::int64_t V = 1000;
  const int P = 2;
  const auto bounds = uneven_bounds(V, P);
  const std::int32_t n = 4;
  const auto m = random_rows(g, n, V, false);
  const auto got = run_ranks<level_out>(P, [&](thread_collective& tc) {
    short_max_collective s(tc);
    return run_rows(s, m, n, V, bounds, 8);
  });
  // The last rank's header is missing: the partition check fires (a wrong
  // result is never returned as success).
  for (const auto& o : got) CHECK(o.code == status_code::invalid_argument);
}

TEST_CASE("sharded top-k rows: traffic per level", "[parallel]") {
  std::mt19937_64 g(10);
  const std::int64_t V = 4099;
  const int P = 4;
  const auto bounds = uneven_bounds(V, P);
  const std::int32_t n = 8, k = 4;
  const auto m = random_rows(g, n, V, false);
  const auto got = run_ranks<collective_traffic>(P, [&](thread_collective& tc) {
    counting_collective<thread_collective> cc(tc);
    const level_out o = run_rows(cc, m, n, V, bounds, k);
    if (o.code != status_code::ok) return collective_traffic{-1, -1};
    return cc.traffic();
  });
  // Agreement (3 int64) + the gather; the host executor's gather is a max
  // over P blocks, so it counts P times the NCCL all-gather's payload.
  const std::int64_t block = 2 + std::int64_t{n} * (k + 3);
  for (const auto& t : got) {
    CHECK(t.calls == 2);
    CHECK(t.bytes == 3 * 8 + P * block * 8);
  }
  // With a collective that all-gathers: the all-gather's own payload.
  const auto got2 = run_ranks<collective_traffic>(P, [&](thread_collective& tc) {
    thread_gather_collective gc(tc.group(), tc.rank());
    counting_collective<thread_gather_collective> cc(gc);
    const level_out o = run_rows(cc, m, n, V, bounds, k);
    if (o.code != status_code::ok) return collective_traffic{-1, -1};
    return cc.traffic();
  });
  for (const auto& t : got2) {
    CHECK(t.calls == 2);
    CHECK(t.bytes == 3 * 8 + block * 8);
  }
  std::printf(
      "sharded_topk_rows traffic per level (n %d, k %d, P %d): 2 collectives; all-gather payload %lld bytes "
      "per rank vs %lld bytes of this rank's float rows\n",
      n, k, P, static_cast<long long>(block * 8), static_cast<long long>(n * (V / P) * 4));
}

namespace {

// A deterministic level drafter: node u's row depends on its token path.
std::vector<float> row_of(const token_tree& t, node_id u, std::int64_t V) {
  std::uint64_t h = 1469598103934665603ull;
  for (node_id x = u; x >= 0; x = t.parent(x)) h = (h ^ static_cast<std::uint64_t>(t.token(x))) * 1099511628211ull;
  std::mt19937_64 g(h);
  return random_row(g, V, t.depth(u) % 2 == 1);
}

struct full_level_drafter {
  std::int64_t V;
  std::vector<float> rows;
  status level_probabilities(const draft_level& l, view2d<const float>& out) {
    rows.clear();
    for (const node_id u : l.nodes) {
      const auto r = row_of(*l.tree, u, V);
      rows.insert(rows.end(), r.begin(), r.end());
    }
    out = view2d<const float>{rows.data(), {static_cast<std::int64_t>(l.nodes.size()), V}, {V, 1}};
    return status::success();
  }
};
static_assert(level_probability_drafter<full_level_drafter>);

}  // namespace

TEST_CASE("a tree drafted level by level on split rows equals the tree drafted on full rows", "[parallel]") {
  const std::int64_t V = 1500;
  for (const int P : {1, 3, 4}) {
    const auto bounds = uneven_bounds(V, P);
    topk_tree_options opt;
    opt.k = 3;
    opt.depth = 4;
    opt.vocab_size = V;
    drafted_tree want;
    full_level_drafter fd{V, {}};
    REQUIRE(topk_tree_builder(opt).build(fd, 5, want).ok());
    REQUIRE(want.size() == 1 + 3 + 9 + 27 + 81);
    struct tree_rows {
      std::vector<token_id> tok;
      std::vector<node_id> parent;
      std::vector<float> prob;
      bool operator==(const tree_rows&) const = default;
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
    const auto got = run_ranks<tree_rows>(P, [&](thread_collective& tc) {
      const std::int64_t b0 = bounds[static_cast<std::size_t>(tc.rank())],
                         b1 = bounds[static_cast<std::size_t>(tc.rank()) + 1];
      std::vector<float> mine;
      auto shard = [&](const draft_level& l) {
        mine.clear();
        for (const node_id u : l.nodes) {
          const auto r = row_of(*l.tree, u, V);
          mine.insert(mine.end(), r.begin() + b0, r.begin() + b1);
        }
        return view2d<const float>{mine.data(), {static_cast<std::int64_t>(l.nodes.size()), b1 - b0}, {b1 - b0, 1}};
      };
      std::size_t eb = 0, hb = 0;
      if (!sharded_topk_rows_workspace_parts(81, b1 - b0, opt.k, P, eb, hb)) return tree_rows{};
      std::vector<std::byte> ew(eb), hw(hb);
      host_shard_executor<thread_collective> ex(tc);
      sharded_level_topk_drafter<host_shard_executor<thread_collective>, decltype(shard)> d(ex, shard, b0, V, ew, hw);
      static_assert(level_topk_drafter<decltype(d)>);
      drafted_tree t;
      if (!topk_tree_builder(opt).build(d, 5, t).ok()) return tree_rows{};
      return rows_of(t);
    });
    const tree_rows w = rows_of(want);
    INFO("P " << P);
    for (const auto& t : got) CHECK(t == w);
  }
}
