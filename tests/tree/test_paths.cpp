#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "specdec/tree/order.hpp"
#include "specdec/tree/paths.hpp"
#include "specdec/tree/positions.hpp"
#include "specdec/tree/structure.hpp"
#include "tree_test_util.hpp"

using specdec::node_id;
using specdec::status_code;

TEST_CASE("positions, leaves, paths and navigation agree with brute force on random trees") {
  const std::uint64_t seed = 4242;
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 1000; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 300);
    auto p = tree_test::random_tree(rng, n, trial % 4);
    if (trial % 2) p = tree_test::relabel(p, specdec::bfs_order(p).new_to_old);
    INFO("trial " << trial << " n " << n);
    const auto d = tree_test::brute_depths(p);
    const auto anc = tree_test::brute_ancestors(p);
    const std::int64_t cache_len = static_cast<std::int64_t>(rng() % 5000);
    const auto pos = specdec::positions<std::int64_t>(p, cache_len);
    bool ok = true;
    for (int i = 0; i < n; ++i)
      ok = ok && pos[static_cast<std::size_t>(i)] == cache_len + d[static_cast<std::size_t>(i)];
    CHECK(ok);
    CHECK(specdec::depths(p) == d);

    // Leaves: nodes nobody names as parent.
    std::vector<node_id> ref_leaves;
    for (int i = 0; i < n; ++i)
      if (std::find(p.begin(), p.end(), i) == p.end()) ref_leaves.push_back(i);
    CHECK(specdec::leaves(p) == ref_leaves);
    auto desc = ref_leaves;
    std::reverse(desc.begin(), desc.end());
    CHECK(specdec::leaves(p, specdec::leaf_order::descending) == desc);

    // Paths: row r is the root-to-leaf chain of leaf r, padded with -1.
    const auto m = specdec::paths(p, trial % 3 == 0 ? specdec::leaf_order::descending : specdec::leaf_order::ascending);
    const int max_depth = *std::max_element(d.begin(), d.end());
    CHECK(m.shape.width == max_depth + 1);
    REQUIRE(m.shape.rows == static_cast<int>(ref_leaves.size()));
    for (int r = 0; r < m.shape.rows; ++r) {
      const node_id leaf = (trial % 3 == 0 ? desc : ref_leaves)[static_cast<std::size_t>(r)];
      std::vector<node_id> chain;
      for (node_id u = leaf; u != -1; u = p[static_cast<std::size_t>(u)]) chain.push_back(u);
      std::reverse(chain.begin(), chain.end());
      chain.resize(static_cast<std::size_t>(m.shape.width), -1);
      const auto row = m.row(r);
      ok = ok && std::vector<node_id>(row.begin(), row.end()) == chain;
      ok = ok && specdec::ancestor_path(p, leaf) ==
                     std::vector<node_id>(chain.begin(), chain.begin() + d[static_cast<std::size_t>(leaf)] + 1);
    }
    CHECK(ok);

    // Children CSR and first-child / next-sibling lists.
    const auto csr = specdec::children_csr(p);
    std::vector<node_id> fc(static_cast<std::size_t>(n)), ns(static_cast<std::size_t>(n));
    REQUIRE(specdec::build_first_child_next_sibling(p, fc, ns).ok());
    for (int u = 0; u < n; ++u) {
      std::vector<node_id> kids;
      for (int c = 0; c < n; ++c)
        if (p[static_cast<std::size_t>(c)] == u) kids.push_back(c);
      const auto got = csr.of(u);
      ok = ok && std::vector<node_id>(got.begin(), got.end()) == kids;
      std::vector<node_id> walk;
      for (node_id c = fc[static_cast<std::size_t>(u)]; c != -1; c = ns[static_cast<std::size_t>(c)]) walk.push_back(c);
      ok = ok && walk == kids;
    }
    CHECK(ok);
    for (int k = 0; k < 50; ++k) {
      const auto a = static_cast<node_id>(rng() % static_cast<std::uint64_t>(n));
      const auto b = static_cast<node_id>(rng() % static_cast<std::uint64_t>(n));
      ok =
          ok && specdec::is_ancestor_or_self(p.data(), a, b) ==
                    (anc[static_cast<std::size_t>(b) * static_cast<std::size_t>(n) + static_cast<std::size_t>(a)] != 0);
      ok = ok && specdec::node_depth(p.data(), b) == d[static_cast<std::size_t>(b)];
    }
    CHECK(ok);
  }
}

TEST_CASE("positions, paths and navigation report bad input") {
  using V = std::vector<node_id>;
  const V bad{-1, 0, 3, 1};
  const V good{-1, 0, 0, 1};
  std::vector<std::int64_t> pos(4, 7);
  CHECK(specdec::build_positions<std::int64_t>(bad, 0, pos) == status_code::not_topological);
  CHECK(specdec::build_positions<std::int64_t>(good, -1, pos) == status_code::invalid_argument);
  CHECK(specdec::build_positions<std::int64_t>(good, 0, std::span<std::int64_t>(pos).first(3)) ==
        status_code::buffer_too_small);
  CHECK(pos == std::vector<std::int64_t>(4, 7));
  std::vector<std::int32_t> pos32(4, 7);
  // Documented bound: cache_len + N - 1 must fit (N = 4 here).
  CHECK(specdec::build_positions<std::int32_t>(good, INT32_MAX - 2, pos32) == status_code::invalid_argument);
  CHECK(pos32 == std::vector<std::int32_t>(4, 7));
  CHECK(specdec::build_positions<std::int32_t>(good, INT32_MAX - 3, pos32).ok());
  CHECK(pos32[3] == INT32_MAX - 1);
  std::vector<std::int32_t> dep(3);
  CHECK(specdec::build_depths(good, dep) == status_code::buffer_too_small);

  std::vector<std::byte> ws(specdec::paths_workspace_size(4));
  V out(9, 42);  // 2 leaves x width 3 needs 6; give 5 for the failing call
  CHECK(specdec::build_paths(bad, out, ws) == status_code::not_topological);
  CHECK(specdec::build_paths(good, std::span<node_id>(out).first(5), ws) == status_code::buffer_too_small);
  CHECK(specdec::build_paths(good, out, std::span<std::byte>(ws).first(12)) == status_code::buffer_too_small);
  CHECK(specdec::build_paths(good, out, ws, specdec::leaf_order::ascending, 2) == status_code::invalid_argument);
  // A stride whose matrix size overflows int64 (it used to wrap and pass the size check).
  CHECK(specdec::build_paths(good, out, ws, specdec::leaf_order::ascending, INT64_MAX - 1) ==
        status_code::invalid_argument);
  CHECK(out == V(9, 42));
  CHECK(specdec::build_paths(good, out, ws, specdec::leaf_order::ascending, 4).ok());
  CHECK(out == V{0, 2, -1, 42, 0, 1, 3, 42, 42});  // stride 4: padding column untouched
  V lv(1, 42);
  std::int32_t count = 0;
  CHECK(specdec::build_leaves(good, lv, count, ws) == status_code::buffer_too_small);
  CHECK(count == 2);
  CHECK(lv == V(1, 42));

  V fc(4), ns(3);
  CHECK(specdec::build_first_child_next_sibling(good, fc, ns) == status_code::buffer_too_small);
  std::vector<std::int32_t> off(4);
  V kids(3);
  CHECK(specdec::build_children_csr(good, off, kids) == status_code::buffer_too_small);
  V path(2, 42);
  std::int32_t len = 0;
  CHECK(specdec::ancestor_path(good, 3, path, len) == status_code::buffer_too_small);
  CHECK(len == 3);
  CHECK(path == V(2, 42));
  CHECK(specdec::ancestor_path(good, 4, path, len) == status_code::out_of_range);
  CHECK(specdec::ancestor_path(good, -1, path, len) == status_code::out_of_range);
  CHECK_THROWS_AS(specdec::paths(bad), specdec::error);
  CHECK_THROWS_AS(specdec::leaves(V{}), specdec::error);
  CHECK_THROWS_AS(specdec::children_csr(V{0}), specdec::error);
}
