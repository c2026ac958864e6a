#include <catch2/catch.hpp>

#include <cstdint>
#include <random>
#include <vector>

#include "specdec/cache/keep_indices.hpp"
#include "specdec/cache/row_commit.hpp"
#include "test_util.hpp"

using specdec::status_code;

TEST_CASE("commit_rows moves accepted nodes' hidden states to the front") {
  for (std::uint32_t seed = 1; seed <= 40; ++seed) {
    INFO("seed " << seed);
    std::mt19937 g(seed);
    const int n = std::uniform_int_distribution<int>(1, 30)(g);
    const int width = std::uniform_int_distribution<int>(1, 9)(g);
    const bool strided = seed % 2 == 0;  // padded rows (row stride > width)
    const auto parent = cache_test::random_parents(g, n);
    const auto path = cache_test::random_path(g, parent);
    const int c = std::uniform_int_distribution<int>(0, 100)(g);
    std::vector<specdec::position_id> keep(path.size());
    std::int32_t count = 0;
    REQUIRE(specdec::keep_indices_from_path(parent, path, {}, c, keep, count).ok());
    const std::int64_t cs = seed % 3 == 0 ? 2 : 1;  // column stride 2: the element-by-element path
    const std::int64_t ld = (width - 1) * cs + 1 + (strided ? 3 : 0);
    std::vector<float> buf(static_cast<std::size_t>(n * ld));
    for (auto& x : buf) x = std::uniform_real_distribution<float>(-1, 1)(g);
    const auto orig = buf;
    const auto v = specdec::make_strided_view(buf.data(), {std::int64_t{n}, std::int64_t{width}}, {ld, cs});
    // The KV keep list, reused with offset = cache_len.
    REQUIRE(specdec::commit_rows(v, keep, c).ok());
    auto expect = orig;
    for (std::size_t k = 0; k < keep.size(); ++k)
      for (int e = 0; e < width; ++e)
        expect[k * static_cast<std::size_t>(ld) + static_cast<std::size_t>(e * cs)] =
            orig[static_cast<std::size_t>(keep[k] - c) * static_cast<std::size_t>(ld) +
                 static_cast<std::size_t>(e * cs)];
    CHECK(buf == expect);
  }
}

TEST_CASE("commit_rows_batch equals per-request gathers; bad input changes nothing") {
  std::mt19937 g(99);
  const int R = 4, width = 5;
  std::vector<std::int32_t> row_off{0}, keep_off{0};
  std::vector<specdec::position_id> keep, clen;
  for (int r = 0; r < R; ++r) {
    const int n = std::uniform_int_distribution<int>(1, 12)(g);
    const auto parent = cache_test::random_parents(g, n);
    const auto path = cache_test::random_path(g, parent);
    const int c = 10 * r;
    std::vector<specdec::position_id> k(path.size());
    std::int32_t count = 0;
    REQUIRE(specdec::keep_indices_from_path(parent, path, cache_test::bfs_slots(parent), c, k, count).ok());
    keep.insert(keep.end(), k.begin(), k.end());
    keep_off.push_back(static_cast<std::int32_t>(keep.size()));
    row_off.push_back(row_off.back() + n);
    clen.push_back(c);
  }
  std::vector<std::uint32_t> buf(static_cast<std::size_t>(row_off.back() * width));
  for (auto& x : buf) x = static_cast<std::uint32_t>(g());
  const auto orig = buf;
  const auto v = specdec::make_view(buf.data(), row_off.back(), width);
  auto bad = keep;
  bad.back() = bad.back() + 1000;  // out of its request's rows
  CHECK(specdec::commit_rows_batch(v, row_off, keep_off, bad, clen) == status_code::out_of_range);
  CHECK(buf == orig);
  REQUIRE(specdec::commit_rows_batch(v, row_off, keep_off, keep, clen).ok());
  auto expect = orig;
  for (int r = 0; r < R; ++r)
    for (int k = keep_off[static_cast<std::size_t>(r)]; k < keep_off[static_cast<std::size_t>(r) + 1]; ++k) {
      const int dst = row_off[static_cast<std::size_t>(r)] + (k - keep_off[static_cast<std::size_t>(r)]);
      const auto src =
          row_off[static_cast<std::size_t>(r)] + keep[static_cast<std::size_t>(k)] - clen[static_cast<std::size_t>(r)];
      for (int e = 0; e < width; ++e)
        expect[static_cast<std::size_t>(dst * width + e)] = orig[static_cast<std::size_t>(src * width + e)];
    }
  CHECK(buf == expect);
}

TEST_CASE("commit_rows rejects bad keep lists and aliasing rows") {
  std::vector<float> buf(20, 1.0f);
  const auto v = specdec::make_view(buf.data(), 4, 5);
  CHECK(specdec::commit_rows(v, std::vector<specdec::position_id>{0, 0}) == status_code::not_sorted);
  CHECK(specdec::commit_rows(v, std::vector<specdec::position_id>{4}) == status_code::out_of_range);
  CHECK(specdec::commit_rows(v, std::vector<specdec::position_id>{0, 2}, 0, 1) == status_code::out_of_range);
  CHECK(specdec::commit_rows(v, std::vector<specdec::position_id>{1}, 2) == status_code::out_of_range);
  const auto alias =
      specdec::make_strided_view(buf.data(), {std::int64_t{4}, std::int64_t{5}}, {std::int64_t{2}, std::int64_t{1}});
  CHECK(specdec::commit_rows(alias, std::vector<specdec::position_id>{1}) == status_code::invalid_argument);
  CHECK(specdec::commit_rows(v, std::vector<specdec::position_id>{}).ok());
}
