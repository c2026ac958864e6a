#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "specdec/tree/build.hpp"
#include "specdec/tree/order.hpp"
#include "tree_test_util.hpp"

using specdec::node_id;
using specdec::status_code;

namespace {
std::vector<int> subtree_sizes(const std::vector<node_id>& p) {
  std::vector<int> s(p.size(), 1);
  for (std::size_t i = p.size(); i-- > 1;) s[static_cast<std::size_t>(p[i])] += s[i];
  return s;
}
}  // namespace

TEST_CASE("DFS and BFS orders are permutations that round-trip and have their defining property") {
  const std::uint64_t seed = 77;
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 1000; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 300);
    const auto p = tree_test::random_tree(rng, n, trial % 4);
    INFO("trial " << trial << " n " << n);
    for (int kind = 0; kind < 2; ++kind) {
      const auto perm = kind == 0 ? specdec::dfs_order(p) : specdec::bfs_order(p);
      REQUIRE(specdec::check_permutation(perm.new_to_old, perm.old_to_new).ok());
      std::vector<node_id> q(p.size());
      REQUIRE(specdec::permute_parents(p, perm.new_to_old, perm.old_to_new, q).ok());
      CHECK(q == tree_test::relabel(p, perm.new_to_old));
      // Round trip: applying the inverse permutation restores the tree.
      std::vector<node_id> back(p.size());
      REQUIRE(specdec::permute_parents(q, perm.old_to_new, perm.new_to_old, back).ok());
      CHECK(back == p);
      if (kind == 0) {
        // DFS: each subtree is contiguous, children in ascending original id.
        const auto sz = subtree_sizes(q);
        bool ok = true;
        for (int i = 1; i < n; ++i) {
          const auto par = static_cast<std::size_t>(q[static_cast<std::size_t>(i)]);
          ok = ok && static_cast<int>(par) < i && i < static_cast<int>(par) + sz[par];
        }
        CHECK(ok);
        std::vector<node_id> ref;
        tree_test::ref_dfs(p, 0, ref);
        CHECK(ref == perm.new_to_old);
      } else {
        // BFS: depths non-decreasing; siblings keep their relative order.
        const auto d = tree_test::brute_depths(q);
        CHECK(std::is_sorted(d.begin(), d.end()));
        CHECK(tree_test::ref_bfs(p, 0) == perm.new_to_old);
        bool ok = true;
        for (int i = 2; i < n; ++i)
          if (q[static_cast<std::size_t>(i)] < q[static_cast<std::size_t>(i - 1)])
            ok = false;  // parents non-decreasing
        CHECK(ok);
      }
    }
  }
}

TEST_CASE("permuted token_tree carries tokens and scores with their nodes") {
  specdec::token_tree t(100);
  t.add_child(0, 1, -1.0f);
  t.add_child(0, 2, -2.0f);
  t.add_child(1, 3, -3.0f);
  t.add_child(2, 4, -4.0f);
  t.add_child(1, 5, -5.0f);
  const auto bfs = specdec::bfs_order(t.parents());
  CHECK(bfs.new_to_old == std::vector<node_id>{0, 1, 2, 3, 5, 4});
  const auto b = specdec::permuted(t, bfs);
  CHECK(b.tokens()[4] == 5);
  CHECK(b.scores()[4] == -5.0f);
  CHECK(b.parent(4) == 1);
  CHECK(b.depth(5) == 2);
  const auto dfs = specdec::dfs_order(t.parents());
  CHECK(dfs.new_to_old == std::vector<node_id>{0, 1, 3, 5, 2, 4});
  const specdec::tree_permutation inv{bfs.old_to_new, bfs.new_to_old};
  CHECK(specdec::permuted(b, inv) == t);
}

TEST_CASE("relabel_topological handles any node order") {
  const std::uint64_t seed = 99;
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 500; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 200);
    const auto p = tree_test::random_tree(rng, n, trial % 4);
    std::vector<node_id> shuffle(static_cast<std::size_t>(n));
    std::iota(shuffle.begin(), shuffle.end(), 0);
    std::shuffle(shuffle.begin(), shuffle.end(), rng);
    const auto any = tree_test::relabel(p, shuffle);  // root somewhere, parents anywhere
    const auto r = specdec::relabel_topological(any);
    REQUIRE(specdec::validate_topological_parents(r.parent).ok());
    REQUIRE(specdec::check_permutation(r.perm.new_to_old, r.perm.old_to_new).ok());
    for (int i = 0; i < n; ++i) {
      const node_id o = r.perm.new_to_old[static_cast<std::size_t>(i)];
      const node_id po = any[static_cast<std::size_t>(o)];
      CHECK(r.parent[static_cast<std::size_t>(i)] == (po < 0 ? -1 : r.perm.old_to_new[static_cast<std::size_t>(po)]));
    }
    // DFS from the root, children in ascending original index.
    const node_id root = static_cast<node_id>(std::find(any.begin(), any.end(), -1) - any.begin());
    std::vector<node_id> ref;
    tree_test::ref_dfs(any, root, ref);
    CHECK(ref == r.perm.new_to_old);
  }
}

TEST_CASE("orders and relabel report bad input") {
  using V = std::vector<node_id>;
  std::vector<node_id> a(4, 42), b(4, 42), c(4, 42);
  std::vector<std::byte> ws(specdec::relabel_workspace_size(4));
  CHECK(specdec::relabel_topological(V{1, 2, 0, -1}, a, b, c, ws) == status_code::cycle);
  CHECK(specdec::relabel_topological(V{1, 0, 0, 0}, a, b, c, ws) == status_code::no_root);
  CHECK(specdec::relabel_topological(V{-1, -1, 0, 0}, a, b, c, ws) == status_code::multiple_roots);
  CHECK(specdec::relabel_topological(V{-1, 9, 0, 0}, a, b, c, ws) == status_code::parent_out_of_range);
  CHECK(specdec::relabel_topological(V{}, a, b, c, ws) == status_code::empty_input);
  // Three slices of 256 bytes are needed; 2 * 256 bytes are too few at any address.
  std::vector<std::byte> small_ws(2 * specdec::workspace_alignment);
  CHECK(specdec::relabel_topological(V{2, 2, -1, 0}, a, b, c, small_ws) == status_code::buffer_too_small);
  CHECK(specdec::relabel_topological(V{2, 2, -1, 0}, a, b, c, {}) == status_code::buffer_too_small);
  std::vector<node_id> short_out(3, 42);
  CHECK(specdec::relabel_topological(V{2, 2, -1, 0}, short_out, b, c, ws) == status_code::buffer_too_small);
  CHECK(a == V(4, 42));
  CHECK(short_out == V(3, 42));
  CHECK(specdec::relabel_topological(V{2, 2, -1, 0}, a, b, c, ws).ok());
  CHECK(a == V{-1, 0, 1, 0});
  CHECK(b == V{2, 0, 3, 1});

  std::vector<std::byte> ows(specdec::order_workspace_size(3));
  std::vector<node_id> n2o(3, 42), o2n(3, 42);
  CHECK(specdec::dfs_order(V{-1, 2, 0}, n2o, o2n, ows) == status_code::not_topological);
  CHECK(specdec::bfs_order(V{-1, 0, 0}, n2o, o2n, std::span<std::byte>(ows).first(2 * specdec::workspace_alignment)) ==
        status_code::buffer_too_small);
  CHECK(specdec::bfs_order(V{-1, 0, 0}, std::span<node_id>(n2o).first(2), o2n, ows) == status_code::buffer_too_small);
  CHECK(n2o == V(3, 42));
  // A permutation that puts a child before its parent.
  std::vector<node_id> out(3, 42);
  CHECK(specdec::permute_parents(V{-1, 0, 1}, V{0, 2, 1}, V{0, 2, 1}, out) == status_code::not_topological);
  CHECK(specdec::permute_parents(V{-1, 0, 1}, V{0, 1, 1}, V{0, 1, 2}, out) == status_code::invalid_argument);
  CHECK(specdec::permute_parents(V{-1, 0, 1}, V{0, 1, 5}, V{0, 1, 2}, out) == status_code::out_of_range);
  CHECK(specdec::permute_parents(V{-1, 0, 1}, V{0, 1}, V{0, 1}, out) == status_code::size_mismatch);
  CHECK(out == V(3, 42));
  std::vector<int> dst(2);
  CHECK(specdec::permute_values<int>(std::vector<int>{1, 2, 3}, V{2, 0, 1}, dst) == status_code::buffer_too_small);
  dst.resize(3);
  CHECK(specdec::permute_values<int>(std::vector<int>{1, 2, 3}, V{2, 0, 3}, dst) == status_code::out_of_range);
  CHECK(specdec::permute_values<int>(std::vector<int>{1, 2, 3}, V{2, 0, 1}, dst).ok());
  CHECK(dst == std::vector<int>{3, 1, 2});
  CHECK_THROWS_AS(specdec::dfs_order(V{0}), specdec::error);
}
