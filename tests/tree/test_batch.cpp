#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "specdec/tree/batch.hpp"
#include "specdec/tree/mask.hpp"
#include "specdec/tree/positions.hpp"
#include "tree_test_util.hpp"

using specdec::node_id;
using specdec::status_code;

namespace {

template <class Word>
void run_batch(std::uint64_t seed) {
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  const int num_requests = 40;
  std::vector<node_id> parents;
  std::vector<std::int32_t> offsets{0};
  std::vector<std::int64_t> cache_len;
  std::vector<status_code> expect;
  int max_n = 0;
  for (int t = 0; t < num_requests; ++t) {
    const int n = 1 + static_cast<int>(rng() % 150);
    auto p = tree_test::random_tree(rng, n, t % 4);
    status_code e = status_code::ok;
    switch (t % 10) {  // a few broken trees in the middle of good ones
      case 3:
        if (n > 2) p[static_cast<std::size_t>(n - 1)] = n - 1, e = status_code::not_topological;
        break;
      case 6:
        if (n > 1) p[1] = -1, e = status_code::multiple_roots;
        break;
      case 8:  // the only -1 replaced: no node is a root
        p[0] = static_cast<node_id>(n > 1 ? 1 : 0), e = status_code::no_root;
        break;
      case 9:
        if (n > 3) p[3] = n + 5, e = status_code::parent_out_of_range;
        break;
      default:
        break;
    }
    max_n = std::max(max_n, n);
    parents.insert(parents.end(), p.begin(), p.end());
    offsets.push_back(static_cast<std::int32_t>(parents.size()));
    cache_len.push_back(static_cast<std::int64_t>(rng() % 100000));
    expect.push_back(e);
  }
  const std::int64_t stride = specdec::mask_words_per_row<Word>(max_n) + 1;
  const auto total = static_cast<std::int32_t>(parents.size());
  const Word sentinel = static_cast<Word>(0x5A5A5A5A5A5A5A5Aull);
  std::vector<Word> masks(static_cast<std::size_t>(total * stride), sentinel);
  std::vector<std::int64_t> pos(static_cast<std::size_t>(total), -7);
  std::vector<std::int32_t> st(static_cast<std::size_t>(num_requests), -1);
  specdec::tree_masks_params<Word> b;
  b.parents = parents.data();
  b.offsets = offsets.data();
  b.cache_len = cache_len.data();
  b.masks = masks.data();
  b.positions = pos.data();
  b.request_status = st.data();
  b.num_requests = num_requests;
  b.max_nodes = max_n;
  b.capacity_nodes = total;
  b.row_stride_words = stride;
  REQUIRE(specdec::build_tree_masks_batched(b).ok());
  for (int t = 0; t < num_requests; ++t) {
    INFO("tree " << t);
    const auto begin = static_cast<std::size_t>(offsets[static_cast<std::size_t>(t)]);
    const auto n = static_cast<std::size_t>(offsets[static_cast<std::size_t>(t) + 1]) - begin;
    const std::span<const node_id> p(parents.data() + begin, n);
    const auto s = specdec::validate_topological_parents(p);
    CHECK(static_cast<status_code>(st[static_cast<std::size_t>(t)]) == s.code());
    CHECK(s.code() == expect[static_cast<std::size_t>(t)]);
    if (!s.ok()) {
      bool untouched = true;
      for (std::size_t r = begin; r < begin + n; ++r) {
        untouched = untouched && pos[r] == -7;
        for (std::int64_t w = 0; w < stride; ++w)
          untouched =
              untouched && masks[r * static_cast<std::size_t>(stride) + static_cast<std::size_t>(w)] == sentinel;
      }
      CHECK(untouched);
      continue;
    }
    const auto m = specdec::packed_mask<Word>(p);
    const auto words = static_cast<std::size_t>(specdec::mask_words_per_row<Word>(static_cast<std::int64_t>(n)));
    const auto ps = specdec::positions<std::int64_t>(p, cache_len[static_cast<std::size_t>(t)]);
    bool ok = true;
    for (std::size_t i = 0; i < n; ++i) {
      for (std::size_t w = 0; w < words; ++w)
        ok = ok && masks[(begin + i) * static_cast<std::size_t>(stride) + w] == m[i * words + w];
      for (std::size_t w = words; w < static_cast<std::size_t>(stride); ++w)
        ok = ok && masks[(begin + i) * static_cast<std::size_t>(stride) + w] == sentinel;
      ok = ok && pos[begin + i] == ps[i];
    }
    CHECK(ok);
  }
}

}  // namespace

TEST_CASE("batched host twin equals per-tree builders and isolates broken trees") {
  run_batch<std::uint32_t>(1);
  run_batch<std::uint64_t>(2);
}

TEST_CASE("batched builder: per-tree and whole-call errors") {
  // Trees: ok, empty, too large for max_nodes, offsets past capacity.
  std::vector<node_id> parents{-1, 0, -1, 0, 1, 2};
  std::vector<std::int32_t> offsets{0, 2, 2, 6, 9};
  std::vector<std::int64_t> cache_len{5, 0, 0, -1};
  std::vector<std::uint32_t> masks(6, 9u);
  std::vector<std::int32_t> st(4, -1);
  specdec::tree_masks_params<std::uint32_t> b;
  b.parents = parents.data();
  b.offsets = offsets.data();
  b.cache_len = cache_len.data();
  b.masks = masks.data();
  b.request_status = st.data();
  b.num_requests = 4;
  b.max_nodes = 3;
  b.capacity_nodes = 6;
  REQUIRE(specdec::build_tree_masks_batched(b).ok());
  CHECK(st == std::vector<std::int32_t>{0, static_cast<std::int32_t>(status_code::empty_input),
                                        static_cast<std::int32_t>(status_code::buffer_too_small),
                                        static_cast<std::int32_t>(status_code::invalid_argument)});
  CHECK(masks == std::vector<std::uint32_t>{1u, 3u, 9u, 9u, 9u, 9u});
  // Negative cache_len is a per-tree error.
  offsets = {0, 2, 2, 2, 2};
  cache_len[0] = -3;
  REQUIRE(specdec::build_tree_masks_batched(b).ok());
  CHECK(st[0] == static_cast<std::int32_t>(status_code::invalid_argument));
  // Decreasing offsets are a per-tree error; no positions or cache_len needed.
  offsets = {0, 2, 1, 1, 1};
  cache_len[0] = 5;
  b.cache_len = nullptr;
  std::fill(masks.begin(), masks.end(), 9u);
  REQUIRE(specdec::build_tree_masks_batched(b).ok());
  CHECK(st == std::vector<std::int32_t>{0, static_cast<std::int32_t>(status_code::invalid_argument),
                                        static_cast<std::int32_t>(status_code::empty_input),
                                        static_cast<std::int32_t>(status_code::empty_input)});
  CHECK(masks == std::vector<std::uint32_t>{1u, 3u, 9u, 9u, 9u, 9u});
  b.cache_len = cache_len.data();
  // Whole-call errors.
  auto c = b;
  c.max_nodes = 33;
  c.row_stride_words = 1;
  CHECK(specdec::build_tree_masks_batched(c) == status_code::invalid_argument);
  c = b;
  c.row_stride_words = INT64_MAX / 4;  // row offsets would overflow int64
  CHECK(specdec::build_tree_masks_batched(c) == status_code::invalid_argument);
  c = b;
  c.request_status = nullptr;
  CHECK(specdec::build_tree_masks_batched(c) == status_code::invalid_argument);
  c = b;
  c.num_requests = -1;
  CHECK(specdec::build_tree_masks_batched(c) == status_code::invalid_argument);
  c = b;
  c.masks = nullptr;
  CHECK(specdec::build_tree_masks_batched(c) == status_code::invalid_argument);
  CHECK(specdec::check_tree_masks_params(b).ok());
}
