#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "specdec/cache/keep_indices.hpp"
#include "specdec/verify/verify_params.hpp"
#include "test_util.hpp"

using specdec::node_id;
using specdec::status_code;

TEST_CASE("keep_indices_from_path: identity and explicit slot orders") {
  // 0 -> {1, 4}; 1 -> {2, 3}; 4 -> {5}
  const std::vector<node_id> parent{-1, 0, 1, 1, 0, 4};
  const std::vector<node_id> path{0, 4, 5};
  std::vector<specdec::position_id> keep(8, -7);
  std::int32_t count = 0;
  REQUIRE(specdec::keep_indices_from_path(parent, path, {}, 100, keep, count).ok());
  CHECK(count == 3);
  CHECK(std::vector<std::int32_t>(keep.begin(), keep.begin() + 3) == std::vector<std::int32_t>{100, 104, 105});
  // BFS slots: order 0,1,4,2,3,5 -> slot(4) = 2, slot(5) = 5.
  const auto slots = cache_test::bfs_slots(parent);
  REQUIRE(specdec::keep_indices_from_path(parent, path, slots, 10, keep, count).ok());
  CHECK(std::vector<std::int32_t>(keep.begin(), keep.begin() + 3) == std::vector<std::int32_t>{10, 12, 15});
  // A -1 pad ends the path.
  const std::vector<node_id> padded{0, 1, 3, -1, -1};
  REQUIRE(specdec::keep_indices_from_path(parent, padded, {}, 0, keep, count).ok());
  CHECK(count == 3);
  CHECK(keep[2] == 3);
}

TEST_CASE("keep_indices_from_path: bad inputs leave outputs alone") {
  const std::vector<node_id> parent{-1, 0, 1, 1, 0, 4};
  std::vector<specdec::position_id> keep(8, -7);
  std::int32_t count = 42;
  auto run = [&](std::vector<node_id> path, std::vector<std::int32_t> slots = {}, specdec::position_id c = 5,
                 std::size_t room = 8) {
    return specdec::keep_indices_from_path(parent, path, slots, c, std::span<specdec::position_id>(keep).first(room),
                                           count);
  };
  CHECK(run({}) == status_code::empty_input);
  CHECK(run({-1, 0}) == status_code::empty_input);
  CHECK(run({1, 2}) == status_code::invalid_argument);                // not starting at the root
  CHECK(run({0, 2}) == status_code::invalid_argument);                // 2 is not a child of 0
  CHECK(run({0, 9}) == status_code::out_of_range);                    // id out of range
  CHECK(run({0, 1}, {0, 1}) == status_code::size_mismatch);           // slot map of the wrong size
  CHECK(run({0, 1}, {3, 0, 1, 2, 4, 5}) == status_code::not_sorted);  // non-topological slot order
  CHECK(run({0, 1}, {0, 9, 1, 2, 3, 4}) == status_code::out_of_range);
  CHECK(run({0, 1}, {}, -1) == status_code::invalid_argument);
  CHECK(run({0, 1}, {}, std::numeric_limits<specdec::position_id>::max()) == status_code::out_of_range);
  CHECK(run({0, 1, 2}, {}, 5, 2) == status_code::buffer_too_small);
  CHECK(count == 42);
  for (auto k : keep) CHECK(k == -7);
  // Positions are 64-bit end to end: a context past 2^31 is fine.
  REQUIRE(run({0, 1}, {}, INT32_MAX).ok());
  CHECK(count == 2);
  CHECK(keep[0] == INT32_MAX);
  CHECK(keep[1] == std::int64_t{INT32_MAX} + 1);
}

TEST_CASE("keep_indices_batch matches per-request calls on random trees") {
  for (std::uint32_t seed = 1; seed <= 30; ++seed) {
    INFO("seed " << seed);
    std::mt19937 g(seed);
    // The trees, slots and accepted paths of a verified batch (its result
    // codes do not matter here), each path padded with a -1.
    const auto v = cache_test::make_verified(g, true);
    const int R = static_cast<int>(v.results.size());
    const auto& parent = v.parent;
    const auto& slots = v.slots;
    const auto& toff = v.toff;
    const auto& clen = v.clen;
    std::vector<node_id> path;
    std::vector<std::int32_t> poff{0}, expect_off{0};
    std::vector<specdec::position_id> expect;
    for (std::size_t r = 0; r < static_cast<std::size_t>(R); ++r) {
      for (std::int32_t k = 0; k <= v.results[r].accepted; ++k) {
        const node_id u = v.paths[r * static_cast<std::size_t>(v.L) + static_cast<std::size_t>(k)];
        path.push_back(u);
        expect.push_back(clen[r] + slots[static_cast<std::size_t>(toff[r] + u)]);
      }
      path.push_back(-1);  // padded rows are fine
      poff.push_back(static_cast<std::int32_t>(path.size()));
      expect_off.push_back(static_cast<std::int32_t>(expect.size()));
    }
    std::vector<specdec::position_id> keep(path.size());
    std::vector<std::int32_t> koff(static_cast<std::size_t>(R) + 1);
    REQUIRE(specdec::keep_indices_batch(parent, toff, slots, path, poff, clen, keep, koff).ok());
    CHECK(koff == expect_off);
    keep.resize(static_cast<std::size_t>(koff.back()));
    CHECK(keep == expect);
    // Corrupt the last request's path: nothing is written.
    std::vector<specdec::position_id> keep2(path.size(), -3);
    std::vector<std::int32_t> koff2(static_cast<std::size_t>(R) + 1, -3);
    auto bad = path;
    bad[static_cast<std::size_t>(poff[static_cast<std::size_t>(R) - 1])] = 1;  // not the root
    const auto st = specdec::keep_indices_batch(parent, toff, slots, bad, poff, clen, keep2, koff2);
    if (toff[static_cast<std::size_t>(R)] - toff[static_cast<std::size_t>(R) - 1] > 1) {
      CHECK(st == status_code::invalid_argument);
    } else {
      CHECK(st == status_code::out_of_range);
    }
    CHECK(st.index() == R - 1);
    for (auto k : keep2) CHECK(k == -3);
    for (auto k : koff2) CHECK(k == -3);
  }
}

using cache_test::args;
using cache_test::make_verified;
using cache_test::verified_batch;

TEST_CASE("keep_indices_from_results: the accepted paths' keep lists, refused requests keep nothing") {
  for (std::uint32_t seed = 1; seed <= 60; ++seed) {
    INFO("seed " << seed);
    std::mt19937 g(seed);
    const bool with_slots = seed % 2 == 0;
    const verified_batch v = make_verified(g, with_slots);
    std::vector<specdec::position_id> keep;
    std::vector<std::int32_t> koff, st;
    REQUIRE(specdec::keep_indices_from_results(args(v, with_slots, keep, koff, st)).ok());
    std::vector<std::int32_t> want_off{0};
    std::vector<specdec::position_id> want_keep;
    for (std::size_t r = 0; r < v.results.size(); ++r) {
      CHECK(st[r] == static_cast<std::int32_t>(v.results[r].code));
      want_keep.insert(want_keep.end(), v.want[r].begin(), v.want[r].end());
      want_off.push_back(static_cast<std::int32_t>(want_keep.size()));
    }
    CHECK(koff == want_off);
    CHECK(std::vector<specdec::position_id>(keep.begin(), keep.begin() + koff.back()) == want_keep);
    // The same lists as keep_indices_batch on the accepted paths.
    std::vector<node_id> path;
    std::vector<std::int32_t> poff{0};
    for (std::size_t r = 0; r < v.results.size(); ++r) {
      if (v.results[r].code == status_code::ok)
        for (std::int32_t k = 0; k <= v.results[r].accepted; ++k) path.push_back(v.paths[r * v.L + k]);
      else
        path.push_back(0);  // the root alone: one kept position, dropped below
      poff.push_back(static_cast<std::int32_t>(path.size()));
    }
    std::vector<specdec::position_id> kb(path.size());
    std::vector<std::int32_t> kbo(v.results.size() + 1);
    REQUIRE(specdec::keep_indices_batch(v.parent, v.toff, with_slots ? v.slots : std::vector<std::int32_t>{}, path,
                                        poff, v.clen, kb, kbo)
                .ok());
    std::vector<specdec::position_id> from_batch;
    for (std::size_t r = 0; r < v.results.size(); ++r)
      if (v.results[r].code == status_code::ok)
        from_batch.insert(from_batch.end(), kb.begin() + kbo[r], kb.begin() + kbo[r + 1]);
    CHECK(from_batch == want_keep);
  }
}

TEST_CASE("keep_indices_from_results: malformed requests get their code, bad offsets stop every request") {
  std::mt19937 g(20261128);
  verified_batch v = make_verified(g, true);
  while (v.results.size() < 3) v = make_verified(g, true);
  for (auto& r : v.results) r.code = status_code::ok;
  std::vector<specdec::position_id> keep;
  std::vector<std::int32_t> koff, st;
  const auto R = v.results.size();
  SECTION("accepted past the path row or the request's nodes") {
    v.results[1].accepted = v.L;
    REQUIRE(specdec::keep_indices_from_results(args(v, true, keep, koff, st)).ok());
    CHECK(st[1] == static_cast<std::int32_t>(status_code::out_of_range));
    CHECK(st[0] == 0);
    CHECK(koff[2] == koff[1]);  // request 1 keeps nothing
  }
  SECTION("a path that does not start at the root") {
    v.paths[static_cast<std::size_t>(v.L) * 2] = 1;
    REQUIRE(specdec::keep_indices_from_results(args(v, true, keep, koff, st)).ok());
    const bool one_node = v.toff[3] - v.toff[2] == 1;
    CHECK(st[2] == static_cast<std::int32_t>(one_node ? status_code::out_of_range : status_code::invalid_argument));
    CHECK(koff[3] == koff[2]);
  }
  SECTION("offsets that decrease or end past node_capacity: every request not_sorted, nothing kept") {
    for (int variant = 0; variant < 3; ++variant) {
      verified_batch w = v;
      if (variant == 0) std::swap(w.toff[1], w.toff[2]);
      if (variant == 1) w.toff[R] += 1;
      if (variant == 2) w.toff[0] = -1;
      if (w.toff[1] == w.toff[2]) continue;  // a swap of equal offsets changes nothing
      REQUIRE(specdec::keep_indices_from_results(args(w, true, keep, koff, st)).ok());
      for (auto s : st) CHECK(s == static_cast<std::int32_t>(status_code::not_sorted));
      for (auto o : koff) CHECK(o == 0);
      for (auto k : keep) CHECK(k == -3);
    }
  }
  SECTION("whole-call errors write nothing") {
    auto b = args(v, true, keep, koff, st);
    b.path_stride = 0;
    CHECK(specdec::keep_indices_from_results(b) == status_code::invalid_argument);
    b = args(v, true, keep, koff, st);
    b.results = nullptr;
    CHECK(specdec::keep_indices_from_results(b) == status_code::invalid_argument);
    for (auto o : koff) CHECK(o == -3);
  }
}
