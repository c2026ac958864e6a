#include <catch2/catch.hpp>

#include <cstdint>
#include <random>
#include <vector>

#include "specdec/tree/structure.hpp"
#include "specdec/tree/token_tree.hpp"
#include "specdec/tree/validate.hpp"

using specdec::status_code;

TEST_CASE("token_tree appends nodes in topological order") {
  specdec::token_tree t(7);
  const auto a = t.add_child(0, 11, -0.5f);
  const auto b = t.add_child(0, 12, -1.0f);
  const auto c = t.add_child(a, 13, -0.7f);
  CHECK(t.size() == 4);
  CHECK(c == 3);
  CHECK(t.parent(c) == a);
  CHECK(t.depth(c) == 2);
  CHECK(t.depth(b) == 1);
  CHECK(t.token(0) == 7);
  CHECK(t.score(c) == -0.7f);
  CHECK(t.max_depth() == 2);
  CHECK(specdec::validate_tree(t.view(), 100).ok());
  CHECK(specdec::validate_tree(t.view(), 13) == status_code::token_out_of_range);
  CHECK_THROWS_AS(t.add_child(9, 1), specdec::error);
  CHECK_THROWS_AS(t.add_root(1), specdec::error);
}

TEST_CASE("token_tree accessors report a bad node id as specdec::error with out_of_range") {
  specdec::token_tree t(7);
  t.add_child(0, 3);
  const auto code_of = [](auto&& call) {
    try {
      call();
    } catch (const specdec::error& e) {
      return e.code();
    }
    return specdec::status_code::ok;
  };
  for (const specdec::node_id bad : {-1, 2, 100}) {
    INFO("node " << bad);
    CHECK(code_of([&] { (void)t.token(bad); }) == status_code::out_of_range);
    CHECK(code_of([&] { (void)t.parent(bad); }) == status_code::out_of_range);
    CHECK(code_of([&] { (void)t.depth(bad); }) == status_code::out_of_range);
    CHECK(code_of([&] { (void)t.score(bad); }) == status_code::out_of_range);
    CHECK(code_of([&] { t.set_score(bad, 1.0f); }) == status_code::out_of_range);
    CHECK(code_of([&] { t.set_token(bad, 1); }) == status_code::out_of_range);
    CHECK(code_of([&] { (void)specdec::children_csr(t.parents()).of(bad); }) == status_code::out_of_range);
  }
  // Valid ids still read and write.
  t.set_token(1, 9);
  CHECK(t.token(1) == 9);
  CHECK(code_of([&] { (void)t.token(1); }) == status_code::ok);
}

TEST_CASE("token_tree keeps capacity on clear") {
  specdec::token_tree t(1);
  for (int i = 0; i < 100; ++i) t.add_child(i, i);
  const auto* before = t.parents().data();
  t.clear();
  CHECK(t.empty());
  t.add_root(3);
  for (int i = 0; i < 100; ++i) t.add_child(i, i);
  CHECK(t.parents().data() == before);
}

TEST_CASE("validate_topological_parents reports each fault") {
  using V = std::vector<specdec::node_id>;
  CHECK(specdec::validate_topological_parents(V{-1, 0, 0, 1}).ok());
  CHECK(specdec::validate_topological_parents(V{}) == status_code::empty_input);
  CHECK(specdec::validate_topological_parents(V{0, 0}) == status_code::no_root);
  CHECK(specdec::validate_topological_parents(V{1, -1}) == status_code::not_topological);
  CHECK(specdec::validate_topological_parents(V{-1, 0, -1}) == status_code::multiple_roots);
  CHECK(specdec::validate_topological_parents(V{-1, 0, 5}) == status_code::parent_out_of_range);
  CHECK(specdec::validate_topological_parents(V{-1, 0, -3}) == status_code::parent_out_of_range);
  const auto s = specdec::validate_topological_parents(V{-1, 0, 2, 1});
  CHECK(s == status_code::not_topological);
  CHECK(s.index() == 2);
}

TEST_CASE("validate_parents_any_order finds cycles and root faults") {
  using V = std::vector<specdec::node_id>;
  std::vector<std::byte> scratch(specdec::parents_any_order_workspace_size(8));
  CHECK(specdec::validate_parents_any_order(V{2, 2, -1, 0}, scratch).ok());
  CHECK(specdec::validate_parents_any_order(V{1, 2, 0, -1}, scratch) == status_code::cycle);
  CHECK(specdec::validate_parents_any_order(V{-1, 1}, scratch) == status_code::cycle);
  CHECK(specdec::validate_parents_any_order(V{1, 0}, scratch) == status_code::no_root);
  CHECK(specdec::validate_parents_any_order(V{-1, -1}, scratch) == status_code::multiple_roots);
  CHECK(specdec::validate_parents_any_order(V{-1, 9}, scratch) == status_code::parent_out_of_range);
  CHECK(specdec::validate_parents_any_order(V{}, scratch) == status_code::empty_input);
  std::vector<std::byte> small(4);  // below one aligned slice at any address
  CHECK(specdec::validate_parents_any_order(V{-1, 0}, small) == status_code::buffer_too_small);
  CHECK(specdec::validate_parents_any_order(V{-1, 0}, {}) == status_code::buffer_too_small);
}

TEST_CASE("validate_parents_any_order agrees with a brute-force reachability check") {
  const std::uint64_t seed = 12345;
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  std::vector<std::byte> scratch(specdec::parents_any_order_workspace_size(12));
  for (int trial = 0; trial < 2000; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 12);
    std::vector<specdec::node_id> p(static_cast<std::size_t>(n));
    for (auto& x : p) x = static_cast<int>(rng() % static_cast<std::uint64_t>(n + 1)) - 1;
    // Brute force: exactly one root, and every node reaches it within n steps.
    int roots = 0;
    for (auto x : p) roots += x == -1;
    bool ok = roots == 1;
    for (int i = 0; ok && i < n; ++i) {
      int u = i, steps = 0;
      while (u != -1 && steps <= n) u = p[static_cast<std::size_t>(u)], ++steps;
      ok = u == -1;
    }
    CHECK(specdec::validate_parents_any_order(p, scratch).ok() == ok);
  }
}

TEST_CASE("validate_tree checks depths") {
  std::vector<specdec::token_id> tok{1, 2, 3};
  std::vector<specdec::node_id> par{-1, 0, 1};
  std::vector<std::int32_t> dep{0, 1, 1};
  specdec::tree_view v{tok.data(), par.data(), dep.data(), nullptr, 3};
  CHECK(specdec::validate_tree(v) == status_code::invalid_argument);
  dep[2] = 2;
  CHECK(specdec::validate_tree(v).ok());
  v.depth = nullptr;
  CHECK(specdec::validate_tree(v).ok());
  v.token = nullptr;
  CHECK(specdec::validate_tree(v) == status_code::invalid_argument);
}
