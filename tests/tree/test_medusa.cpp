// Medusa's default tree, mc_sim_7b_63 (FasterDecoding/Medusa,
// medusa/model/medusa_choices.py), built from its choice list and checked
// against an independent re-implementation of generate_medusa_buffers.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <map>
#include <vector>

#include "specdec/tree/build.hpp"
#include "specdec/tree/mask.hpp"
#include "specdec/tree/paths.hpp"
#include "specdec/tree/positions.hpp"

using specdec::node_id;
using specdec::status_code;
using choice = std::vector<std::int32_t>;

namespace {

const specdec::choice_list mc_sim_7b_63 = {
    {0},          {0, 0},    {1},       {0, 1},    {2},       {0, 0, 0}, {1, 0},       {0, 2},    {3},
    {0, 3},       {4},       {0, 4},    {2, 0},    {0, 5},    {0, 0, 1}, {5},          {0, 6},    {6},
    {0, 7},       {0, 1, 0}, {1, 1},    {7},       {0, 8},    {0, 0, 2}, {3, 0},       {0, 9},    {8},
    {9},          {1, 0, 0}, {0, 2, 0}, {1, 2},    {0, 0, 3}, {4, 0},    {2, 1},       {0, 0, 4}, {0, 0, 5},
    {0, 0, 0, 0}, {0, 1, 1}, {0, 0, 6}, {0, 3, 0}, {5, 0},    {1, 3},    {0, 0, 7},    {0, 0, 8}, {0, 0, 9},
    {6, 0},       {0, 4, 0}, {1, 4},    {7, 0},    {0, 1, 2}, {2, 0, 0}, {3, 1},       {2, 2},    {8, 0},
    {0, 5, 0},    {1, 5},    {1, 0, 1}, {0, 2, 1}, {9, 0},    {0, 6, 0}, {0, 0, 0, 1}, {1, 6},    {0, 7, 0}};

// generate_medusa_buffers, transcribed: sort by (len, value); mask = eye +
// column 0 + ancestors found by prefix lookup; position = depth; retrieve
// rows from the reversed sorted list, skipping prefixes already seen.
struct medusa_buffers {
  std::vector<std::vector<int>> mask;
  std::vector<int> position;
  std::vector<std::vector<int>> retrieve;
};

medusa_buffers reference(specdec::choice_list choices) {
  std::sort(choices.begin(), choices.end(),
            [](const choice& a, const choice& b) { return a.size() != b.size() ? a.size() < b.size() : a < b; });
  std::map<choice, int> index;
  for (std::size_t k = 0; k < choices.size(); ++k) index[choices[k]] = static_cast<int>(k);
  const std::size_t len = choices.size() + 1;
  medusa_buffers m;
  m.mask.assign(len, std::vector<int>(len, 0));
  for (std::size_t i = 0; i < len; ++i) m.mask[i][i] = 1, m.mask[i][0] = 1;
  m.position.assign(len, 0);
  for (std::size_t k = 0; k < choices.size(); ++k) {
    const auto& c = choices[k];
    m.position[k + 1] = static_cast<int>(c.size());
    for (std::size_t l = 1; l < c.size(); ++l)
      m.mask[k + 1][static_cast<std::size_t>(index.at(choice(c.begin(), c.begin() + static_cast<long>(l))) + 1)] = 1;
  }
  std::vector<choice> seen;
  std::vector<std::vector<int>> nest;
  for (std::size_t i = 0; i < choices.size(); ++i) {
    const auto& c = choices[choices.size() - 1 - i];
    if (std::find(seen.begin(), seen.end(), c) != seen.end()) continue;
    std::vector<int> r;
    for (std::size_t l = 1; l <= c.size(); ++l) {
      const choice pre(c.begin(), c.begin() + static_cast<long>(l));
      r.push_back(index.at(pre));
      seen.push_back(pre);
    }
    nest.push_back(r);
  }
  std::size_t width = 0;
  for (const auto& r : nest) width = std::max(width, r.size());
  for (auto r : nest) {
    r.resize(width, -2);  // pad_path's -2, then +1 below
    std::vector<int> row{0};
    for (int v : r) row.push_back(v + 1);
    m.retrieve.push_back(row);
  }
  return m;
}

}  // namespace

TEST_CASE("Medusa mc_sim_7b_63: 64 nodes, 10/28/23/2 per depth, mask, positions, retrieve indices") {
  REQUIRE(mc_sim_7b_63.size() == 63);
  std::vector<std::int32_t> node_choice;
  const auto parent = specdec::parents_from_choices(mc_sim_7b_63, &node_choice);
  REQUIRE(parent.size() == 64);
  REQUIRE(specdec::validate_topological_parents(parent).ok());

  const auto pos = specdec::positions<std::int64_t>(parent, 0);
  std::vector<int> per_depth(5, 0);
  for (auto p : pos) ++per_depth[static_cast<std::size_t>(p)];
  CHECK(per_depth == std::vector<int>{1, 10, 28, 23, 2});

  // Node k + 1 is the k-th choice in (length, lexicographic) order.
  CHECK(mc_sim_7b_63[static_cast<std::size_t>(node_choice[1])] == choice{0});
  CHECK(mc_sim_7b_63[static_cast<std::size_t>(node_choice[11])] == choice{0, 0});
  CHECK(mc_sim_7b_63[static_cast<std::size_t>(node_choice[39])] == choice{0, 0, 0});
  CHECK(mc_sim_7b_63[static_cast<std::size_t>(node_choice[63])] == choice{0, 0, 0, 1});
  CHECK(parent[63] == 39);
  CHECK(parent[39] == 11);
  CHECK(parent[11] == 1);

  const auto ref = reference(mc_sim_7b_63);
  const auto dense = specdec::dense_mask(parent);
  bool ok = true;
  for (std::size_t i = 0; i < 64; ++i)
    for (std::size_t j = 0; j < 64; ++j) ok = ok && (dense[i * 64 + j] != 0) == (ref.mask[i][j] != 0);
  CHECK(ok);
  const auto packed = specdec::packed_mask<std::uint64_t>(parent);
  REQUIRE(packed.size() == 64);
  for (std::size_t i = 0; i < 64; ++i)
    for (std::size_t j = 0; j < 64; ++j)
      ok = ok && specdec::mask_test(&packed[i], static_cast<std::int64_t>(j)) == (ref.mask[i][j] != 0);
  CHECK(ok);
  for (std::size_t i = 0; i < 64; ++i) CHECK(pos[i] == ref.position[i]);
  const auto pos_shifted = specdec::positions<std::int32_t>(parent, 1000);
  CHECK(pos_shifted[63] == 1004);

  const auto paths = specdec::paths(parent, specdec::leaf_order::descending);
  CHECK(paths.shape.rows == 42);  // SpecMemo counts 42 candidate leaves in this tree
  CHECK(paths.shape.width == 5);
  REQUIRE(ref.retrieve.size() == 42);
  for (std::int32_t r = 0; r < 42; ++r) {
    const auto row = paths.row(r);
    CHECK(std::vector<int>(row.begin(), row.end()) == ref.retrieve[static_cast<std::size_t>(r)]);
  }
  CHECK(std::vector<int>(paths.row(0).begin(), paths.row(0).end()) == std::vector<int>{0, 1, 11, 39, 63});
  CHECK(std::vector<int>(paths.row(1).begin(), paths.row(1).end()) == std::vector<int>{0, 1, 11, 39, 62});

  // And back: the retrieve indices alone rebuild the same tree.
  CHECK(specdec::parents_from_paths(paths.data, paths.shape.width) == parent);
}

TEST_CASE("choice lists: order, and every malformed list is rejected") {
  const auto p = specdec::parents_from_choices({{1}, {0, 1}, {0}, {0, 0}, {1, 0}});
  // Sorted: (0) (1) (0,0) (0,1) (1,0).
  CHECK(p == std::vector<node_id>{-1, 0, 0, 1, 1, 2});
  std::vector<std::int32_t> ranks{0, 0, 1}, offsets{0, 1, 3};  // (0), (0,1)
  std::vector<node_id> parent(3, 42);
  std::vector<std::byte> ws(specdec::choices_workspace_size(2));
  CHECK(specdec::from_choices(ranks, offsets, parent, ws).ok());
  CHECK(parent == std::vector<node_id>{-1, 0, 1});
  std::fill(parent.begin(), parent.end(), 42);
  CHECK(specdec::from_choices(std::vector<std::int32_t>{0, 1, 1}, offsets, parent, ws) ==
        status_code::invalid_argument);
  CHECK(specdec::from_choices(std::vector<std::int32_t>{0, 0}, std::vector<std::int32_t>{0, 1, 2}, parent, ws) ==
        status_code::invalid_argument);  // duplicate (0)
  CHECK(specdec::from_choices(std::vector<std::int32_t>{0, -1, 1}, offsets, parent, ws) == status_code::out_of_range);
  CHECK(specdec::from_choices(ranks, std::vector<std::int32_t>{0, 0, 3}, parent, ws) == status_code::empty_input);
  CHECK(specdec::from_choices(ranks, std::vector<std::int32_t>{0, 2, 1, 3}, parent, ws) ==
        status_code::invalid_argument);
  CHECK(specdec::from_choices(ranks, std::vector<std::int32_t>{0, 1, 2}, parent, ws) == status_code::size_mismatch);
  // A middle offset past ranks.size() (the last one is right): rejected before reading.
  CHECK(specdec::from_choices(ranks, std::vector<std::int32_t>{0, 100, 3}, parent, ws) ==
        status_code::invalid_argument);
  CHECK(specdec::from_choices(ranks, std::vector<std::int32_t>{}, parent, ws) == status_code::size_mismatch);
  CHECK(specdec::from_choices(ranks, offsets, std::span<node_id>(parent).first(2), ws) ==
        status_code::buffer_too_small);
  // Under one aligned slice (256 bytes) is too small at any address.
  CHECK(specdec::from_choices(ranks, offsets, parent, std::span<std::byte>(ws).first(8)) ==
        status_code::buffer_too_small);
  CHECK(specdec::from_choices(ranks, offsets, parent, {}) == status_code::buffer_too_small);
  CHECK(parent == std::vector<node_id>(3, 42));
  const auto s = specdec::from_choices(std::vector<std::int32_t>{0, 2, 1, 0}, std::vector<std::int32_t>{0, 1, 3, 4},
                                       parent, std::span<std::byte>(ws.data(), 100));
  CHECK(s == status_code::buffer_too_small);  // 3 choices need one aligned slice
  std::vector<std::byte> ws3(specdec::choices_workspace_size(3));
  std::vector<node_id> p4(4, 42);
  const auto s2 =
      specdec::from_choices(std::vector<std::int32_t>{0, 2, 1, 1}, std::vector<std::int32_t>{0, 1, 3, 4}, p4, ws3);
  CHECK(s2 == status_code::invalid_argument);  // (2,1) has no (2)
  CHECK(s2.index() == 1);
  CHECK_THROWS_AS(specdec::parents_from_choices({{0, 0}}), specdec::error);
  // Root only: no choices.
  CHECK(specdec::parents_from_choices({}) == std::vector<node_id>{-1});
}

TEST_CASE("from_paths rejects malformed path matrices") {
  using V = std::vector<node_id>;
  V parent(4, 42);
  std::vector<std::byte> ws(specdec::from_paths_workspace_size(4));
  auto run = [&](const V& m, std::int64_t rows, std::int64_t width) {
    return specdec::from_paths(specdec::make_view(m.data(), rows, width), parent, ws);
  };
  CHECK(run(V{0, 1, 3, 0, 2, -1}, 2, 3).ok());
  CHECK(parent == V{-1, 0, 0, 1});
  std::fill(parent.begin(), parent.end(), 42);
  CHECK(run(V{1, 0, 3, 0, 2, -1}, 2, 3) == status_code::invalid_argument);  // not from the root
  CHECK(run(V{0, 1, 3, 0, -1, 2}, 2, 3) == status_code::invalid_argument);  // id after padding
  CHECK(run(V{0, 1, 3, 0, 2, 3}, 2, 3) == status_code::invalid_argument);   // 3 has two parents
  CHECK(run(V{0, 1, 3, 0, 1, -1}, 2, 3) == status_code::invalid_argument);  // 2 missing
  CHECK(run(V{0, 1, 7, 0, 2, -1}, 2, 3) == status_code::out_of_range);
  CHECK(run(V{0, 1, -3, 0, 2, -1}, 2, 3) == status_code::out_of_range);
  CHECK(run(V{}, 0, 3) == status_code::empty_input);
  CHECK(specdec::from_paths(specdec::make_view(V{0, 1, 3, 0, 2, -1}.data(), 2, 3), parent,
                            std::span<std::byte>(ws).first(12)) == status_code::buffer_too_small);
  CHECK(parent == V(4, 42));
  CHECK_THROWS_AS(specdec::parents_from_paths(V{0, 1, 2}, 2), specdec::error);
}
