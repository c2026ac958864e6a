#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "specdec/cache/batch_layout.hpp"
#include "specdec/cache/forest.hpp"
#include "specdec/tree/mask.hpp"
#include "test_util.hpp"

using specdec::node_id;
using specdec::status_code;

namespace {

// Ancestor-or-self relation by transitive closure (Warshall), independent of
// the parent-walk the library uses. anc[i][j] == 1 iff j is an
// ancestor-or-self of i (forests allowed).
std::vector<std::vector<int>> closure(const std::vector<node_id>& parent) {
  const std::size_t n = parent.size();
  std::vector<std::vector<int>> a(n, std::vector<int>(n, 0));
  for (std::size_t i = 0; i < n; ++i) {
    a[i][i] = 1;
    if (parent[i] >= 0) a[i][static_cast<std::size_t>(parent[i])] = 1;
  }
  for (std::size_t k = 0; k < n; ++k)
    for (std::size_t i = 0; i < n; ++i)
      if (a[i][k])
        for (std::size_t j = 0; j < n; ++j) a[i][j] |= a[k][j];
  return a;
}

int depth_of(const std::vector<node_id>& parent, std::size_t i) {
  int d = 0;
  for (node_id u = parent[i]; u >= 0; u = parent[static_cast<std::size_t>(u)]) ++d;
  return d;
}

struct batch {
  std::vector<node_id> parent;
  std::vector<specdec::token_id> tokens;
  std::vector<std::int32_t> offsets{0};
  std::vector<specdec::position_id> clen;
  std::vector<std::vector<node_id>> trees;
};

batch random_batch(std::mt19937& g, int R) {
  batch b;
  for (int r = 0; r < R; ++r) {
    const int n = std::uniform_int_distribution<int>(1, 12)(g);
    auto p = cache_test::random_parents(g, n);
    b.parent.insert(b.parent.end(), p.begin(), p.end());
    for (int i = 0; i < n; ++i) b.tokens.push_back(std::uniform_int_distribution<int>(0, 999)(g));
    b.offsets.push_back(static_cast<std::int32_t>(b.parent.size()));
    b.clen.push_back(std::uniform_int_distribution<int>(0, 7)(g));
    b.trees.push_back(std::move(p));
  }
  return b;
}

}  // namespace

static_assert(specdec::batch_mask_element<std::uint8_t>);
static_assert(specdec::batch_mask_element<bool>);
static_assert(specdec::batch_mask_element<float>);
static_assert(specdec::batch_mask_element<double>);
static_assert(!specdec::batch_mask_element<int>);
static_assert(!specdec::batch_mask_element<std::uint64_t>);
static_assert(!specdec::batch_mask_element<const float>);

TEST_CASE("pack_ragged_batch: positions and block-diagonal masks match brute force") {
  for (std::uint32_t seed = 1; seed <= 40; ++seed) {
    INFO("seed " << seed);
    std::mt19937 g(seed);
    const auto b = random_batch(g, std::uniform_int_distribution<int>(1, 5)(g));
    specdec::ragged_batch_sizes sz;
    REQUIRE(specdec::ragged_batch_size(b.parent, b.offsets, b.clen, sz).ok());
    std::vector<specdec::position_id> pos(static_cast<std::size_t>(sz.tokens));
    std::vector<std::int64_t> kvo(b.clen.size() + 1), mo(b.clen.size() + 1);
    std::vector<std::uint8_t> mask(static_cast<std::size_t>(sz.mask), 7);
    REQUIRE(specdec::pack_ragged_batch<std::uint8_t>(b.parent, b.offsets, b.clen, pos, kvo, mo, mask, 1, 0).ok());
    std::int64_t kv_total = 0, mask_total = 0;
    for (std::size_t r = 0; r < b.clen.size(); ++r) {
      const auto& p = b.trees[r];
      const auto anc = closure(p);
      const std::size_t n = p.size();
      const std::size_t c = static_cast<std::size_t>(b.clen[r]);
      CHECK(kvo[r] == kv_total);
      CHECK(mo[r] == mask_total);
      for (std::size_t i = 0; i < n; ++i) {
        CHECK(pos[static_cast<std::size_t>(b.offsets[r]) + i] == b.clen[r] + depth_of(p, i));
        for (std::size_t j = 0; j < c + n; ++j) {
          const int want = j < c ? 1 : anc[i][j - c];
          CHECK(mask[static_cast<std::size_t>(mo[r]) + i * (c + n) + j] == want);
        }
      }
      kv_total += static_cast<std::int64_t>(c + n);
      mask_total += static_cast<std::int64_t>(n * (c + n));
    }
    CHECK(kvo.back() == kv_total);
    CHECK(mo.back() == sz.mask);
  }
}

TEST_CASE("pack_padded_batch: pads masked with -inf, positions skip pads") {
  const float ninf = -std::numeric_limits<float>::infinity();
  for (std::uint32_t seed = 1; seed <= 40; ++seed) {
    INFO("seed " << seed);
    std::mt19937 g(seed);
    const int R = std::uniform_int_distribution<int>(1, 4)(g);
    const auto b = random_batch(g, R);
    int width = 0;
    for (auto& t : b.trees) width = std::max(width, static_cast<int>(t.size()));
    width += static_cast<int>(seed % 3);
    const int pw = 9;
    std::vector<std::uint8_t> holes(static_cast<std::size_t>(R * pw));
    for (auto& h : holes) h = std::bernoulli_distribution(0.3)(g) ? 1 : 0;
    const std::size_t slots = static_cast<std::size_t>(R * width), kvw = static_cast<std::size_t>(pw + width);
    std::vector<specdec::token_id> tok(slots);
    std::vector<specdec::position_id> pos(slots);
    std::vector<float> mask(slots * kvw);
    REQUIRE(specdec::pack_padded_batch<float>(b.parent, b.tokens, b.offsets, b.clen, pw, holes, width, -5, tok, pos,
                                              mask, 0.0f, ninf)
                .ok());
    for (int r = 0; r < R; ++r) {
      const auto& p = b.trees[static_cast<std::size_t>(r)];
      const auto anc = closure(p);
      const int n = static_cast<int>(p.size());
      int real = 0;
      for (int j = 0; j < b.clen[static_cast<std::size_t>(r)]; ++j)
        real += holes[static_cast<std::size_t>(r * pw + j)] == 0;
      for (int i = 0; i < width; ++i) {
        const std::size_t q = static_cast<std::size_t>(r * width + i);
        if (i < n) {
          CHECK(tok[q] == b.tokens[static_cast<std::size_t>(b.offsets[static_cast<std::size_t>(r)] + i)]);
          CHECK(pos[q] == real + depth_of(p, static_cast<std::size_t>(i)));
        } else {
          CHECK(tok[q] == -5);
        }
        for (int j = 0; j < pw + width; ++j) {
          bool allow;
          if (i >= n)
            allow = j == pw + i;
          else if (j < pw)
            allow = j < b.clen[static_cast<std::size_t>(r)] && holes[static_cast<std::size_t>(r * pw + j)] == 0;
          else
            allow = j - pw < n && anc[static_cast<std::size_t>(i)][static_cast<std::size_t>(j - pw)];
          const float m = mask[q * kvw + static_cast<std::size_t>(j)];
          CHECK((allow ? m == 0.0f : (std::isinf(m) && m < 0)));
        }
      }
    }
    // unpad(pad(x)) == x on per-node rows, pads filled.
    std::vector<float> ragged(b.parent.size() * 3), padded(slots * 3, 1.5f), back(b.parent.size() * 3);
    for (std::size_t i = 0; i < ragged.size(); ++i) ragged[i] = static_cast<float>(i);
    const auto rv = specdec::make_view(static_cast<const float*>(ragged.data()), b.parent.size(), 3);
    REQUIRE(specdec::pad_rows(rv, b.offsets, width, specdec::make_view(padded.data(), slots, 3), -1.0f).ok());
    for (int r = 0; r < R; ++r)
      for (int i = static_cast<int>(b.trees[static_cast<std::size_t>(r)].size()); i < width; ++i)
        CHECK(padded[static_cast<std::size_t>(r * width + i) * 3] == -1.0f);
    REQUIRE(specdec::unpad_rows(specdec::make_view(static_cast<const float*>(padded.data()), slots, 3), b.offsets,
                                width, specdec::make_view(back.data(), b.parent.size(), 3))
                .ok());
    CHECK(back == ragged);
    const auto last = specdec::ragged_rows(specdec::make_view(back.data(), b.parent.size(), 3), b.offsets,
                                           static_cast<std::size_t>(R - 1));
    CHECK(last.extent[0] == b.offsets[static_cast<std::size_t>(R)] - b.offsets[static_cast<std::size_t>(R) - 1]);
    CHECK(last(0, 0) == static_cast<float>(b.offsets[static_cast<std::size_t>(R) - 1] * 3));
  }
}

TEST_CASE("batch packing rejects bad input without writing") {
  const std::vector<node_id> parent{-1, 0, -1, 0, 1};  // second tree: root, child, grandchild
  const std::vector<std::int32_t> off{0, 2, 5};
  const std::vector<specdec::position_id> clen{3, 1};
  std::vector<specdec::position_id> pos(5, -9);
  std::vector<std::int64_t> kvo(3, -9), mo(3, -9);
  std::vector<std::uint8_t> mask(64, 9);
  auto ragged = [&](std::vector<node_id> p, std::vector<std::int32_t> o, std::vector<specdec::position_id> c) {
    return specdec::pack_ragged_batch<std::uint8_t>(p, o, c, pos, kvo, mo, mask, 1, 0);
  };
  CHECK(ragged({-1, 0, 0, 0, 1}, off, clen) == status_code::no_root);
  CHECK(ragged({-1, 0, -1, -1, 1}, off, clen) == status_code::multiple_roots);
  CHECK(ragged({-1, 0, -1, 5, 1}, off, clen) == status_code::parent_out_of_range);
  CHECK(ragged({-1, 0, -1, 2, 1}, off, clen) == status_code::not_topological);
  CHECK(ragged(parent, {0, 3, 5}, clen) == status_code::multiple_roots);
  CHECK(ragged(parent, {0, 2, 4}, clen) == status_code::size_mismatch);
  CHECK(ragged(parent, off, {3, -1}) == status_code::invalid_argument);
  CHECK(specdec::pack_ragged_batch<std::uint8_t>(parent, off, clen, pos, kvo, mo, std::span(mask).first(10), 1, 0) ==
        status_code::buffer_too_small);
  for (auto x : pos) CHECK(x == -9);
  for (auto x : mask) CHECK(x == 9);
  std::vector<specdec::token_id> tok(6, -9), tokens{1, 2, 3, 4, 5};
  std::vector<float> fm(6 * 7, 3.0f);
  std::vector<specdec::position_id> pp(6, -9);
  CHECK(specdec::pack_padded_batch<float>(parent, tokens, off, clen, 4, {}, 2, 0, tok, pp, fm, 0.0f, -1.0f) ==
        status_code::buffer_too_small);  // width 2 < tree of 3
  CHECK(specdec::pack_padded_batch<float>(parent, tokens, off, clen, 2, {}, 3, 0, tok, pp, fm, 0.0f, -1.0f) ==
        status_code::out_of_range);  // cache_len 3 > prefix_width 2
  for (auto x : fm) CHECK(x == 3.0f);
  for (auto x : tok) CHECK(x == -9);
}

TEST_CASE("forest layout: fused trees keep separate masks and positions") {
  for (std::uint32_t seed = 1; seed <= 40; ++seed) {
    INFO("seed " << seed);
    std::mt19937 g(seed);
    const int T = std::uniform_int_distribution<int>(1, 4)(g);
    std::vector<node_id> local;
    std::vector<std::int32_t> off{0};
    std::vector<specdec::position_id> base, prefix;
    for (int t = 0; t < T; ++t) {
      const auto p = cache_test::random_parents(g, std::uniform_int_distribution<int>(1, 20)(g));
      local.insert(local.end(), p.begin(), p.end());
      off.push_back(static_cast<std::int32_t>(local.size()));
      base.push_back(std::uniform_int_distribution<int>(0, 50)(g));
      prefix.push_back(std::uniform_int_distribution<int>(0, 6)(g));
    }
    std::vector<node_id> forest(local.size());
    REQUIRE(specdec::fuse_trees(local, off, forest).ok());
    std::int32_t trees = 0;
    REQUIRE(specdec::validate_forest(forest, trees).ok());
    CHECK(trees == T);
    const std::size_t n = forest.size();
    std::vector<std::int32_t> tid(n);
    std::vector<specdec::position_id> pos(n);
    REQUIRE(specdec::forest_layout(forest, base, tid, pos).ok());
    const int pw = 6;
    std::vector<std::uint8_t> mask(n * (pw + n));
    REQUIRE(specdec::forest_mask<std::uint8_t>(forest, prefix, pw, mask, 1, 0).ok());
    const int words = static_cast<int>((n + 63) / 64) + static_cast<int>(seed % 2);
    std::vector<std::uint64_t> bits(n * static_cast<std::size_t>(words));
    REQUIRE(specdec::forest_mask_bits<std::uint64_t>(forest, words, bits).ok());
    const auto anc = closure(forest);
    for (int t = 0; t < T; ++t)
      for (int i = off[static_cast<std::size_t>(t)]; i < off[static_cast<std::size_t>(t) + 1]; ++i) {
        const auto ui = static_cast<std::size_t>(i);
        CHECK(tid[ui] == t);
        CHECK(forest[ui] == (local[ui] < 0 ? -1 : local[ui] + off[static_cast<std::size_t>(t)]));
        CHECK(pos[ui] == base[static_cast<std::size_t>(t)] + depth_of(forest, ui));
        for (int j = 0; j < pw; ++j)
          CHECK(mask[ui * (pw + n) + static_cast<std::size_t>(j)] == (j < prefix[static_cast<std::size_t>(t)] ? 1 : 0));
        for (std::size_t j = 0; j < n; ++j) {
          CHECK(mask[ui * (pw + n) + pw + j] == anc[ui][j]);
          const bool bit = (bits[ui * static_cast<std::size_t>(words) + j / 64] >> (j % 64)) & 1u;
          CHECK(bit == (anc[ui][j] == 1));
        }
      }
  }
}

TEST_CASE("forest functions reject malformed forests") {
  std::int32_t trees = -1;
  CHECK(specdec::validate_forest(std::vector<node_id>{}, trees) == status_code::empty_input);
  CHECK(specdec::validate_forest(std::vector<node_id>{0, -1}, trees) == status_code::not_topological);
  CHECK(specdec::validate_forest(std::vector<node_id>{-1, 2, -1}, trees) == status_code::not_topological);
  CHECK(specdec::validate_forest(std::vector<node_id>{-1, -2}, trees) == status_code::parent_out_of_range);
  CHECK(trees == -1);
  std::vector<node_id> out(3, 5);
  CHECK(specdec::fuse_trees(std::vector<node_id>{-1, 0, 0}, std::vector<std::int32_t>{0, 1, 3}, out) ==
        status_code::not_topological);
  CHECK(out == std::vector<node_id>(3, 5));
  // An offset past the end before a smaller last one: rejected before reading.
  CHECK(specdec::fuse_trees(std::vector<node_id>{-1, 0, 0}, std::vector<std::int32_t>{0, 100, 3}, out) ==
        status_code::not_sorted);
  CHECK(out == std::vector<node_id>(3, 5));
  std::vector<std::int32_t> tid(3);
  std::vector<specdec::position_id> pos(3);
  CHECK(specdec::forest_layout(std::vector<node_id>{-1, 0, -1}, std::vector<specdec::position_id>{1}, tid, pos) ==
        status_code::size_mismatch);
  std::vector<std::uint64_t> bits(200);
  CHECK(specdec::forest_mask_bits<std::uint64_t>(std::vector<node_id>(100, -1), 1, bits) ==
        status_code::buffer_too_small);
}

TEST_CASE("forest_mask_bits of a single tree equals tree/mask.hpp's packed mask") {
  for (std::uint32_t seed = 1; seed <= 10; ++seed) {
    INFO("seed " << seed);
    std::mt19937 g(seed);
    const auto p = cache_test::random_parents(g, std::uniform_int_distribution<int>(1, 100)(g));
    const auto words = static_cast<std::int32_t>((p.size() + 31) / 32);
    std::vector<std::uint32_t> a(p.size() * static_cast<std::size_t>(words)), b(a.size());
    REQUIRE(specdec::forest_mask_bits<std::uint32_t>(p, words, a).ok());
    REQUIRE(specdec::build_packed_mask<std::uint32_t>(p, b).ok());
    CHECK(a == b);
  }
}
