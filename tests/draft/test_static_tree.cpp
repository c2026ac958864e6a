// static_tree_builder: any parent array with per-node child counts, in each
// draft mode; equals the top-k and sampled builders on their shapes and a
// brute-force top-k on irregular (Medusa choice list) shapes and on rows of
// many blocks with ties, zeros and a stride; a drafter row's mass and q row
// against validate_probability_row and the division, bad rows included.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "draft_test_util.hpp"
#include "specdec/draft/detail/candidates.hpp"
#include "specdec/draft/detail/children.hpp"
#include "specdec/draft/sampled_tree.hpp"
#include "specdec/draft/static_tree.hpp"
#include "specdec/draft/topk_tree.hpp"
#include "specdec/draft/verify_mode.hpp"
#include "specdec/tree/build.hpp"

using namespace specdec;

namespace {
constexpr auto keep_all = [](const drafted_tree&, node_id, token_id, float) { return true; };
static_assert(child_filter<decltype(keep_all)>);
static_assert(!child_filter<int>);
static_assert(!child_filter<bool (*)(node_id, float)>);                               // too few arguments
static_assert(!child_filter<bool (*)(const drafted_tree&, node_id, float*, float)>);  // no token
static_assert(!expansion_filter<decltype(keep_all)>);                                 // a child filter without expand()
struct expand_even {
  bool operator()(const drafted_tree&, node_id, token_id, float) const { return true; }
  bool expand(const drafted_tree&, node_id u, std::int32_t) const { return u % 2 == 0; }
};
static_assert(expansion_filter<expand_even>);
struct expand_only {  // expand() without the child rule
  bool expand(const drafted_tree&, node_id, std::int32_t) const { return true; }
};
static_assert(!expansion_filter<expand_only>);
static_assert(level_filter<expand_only> && !child_filter<expand_only>);
static_assert(level_filter<expand_even>);
static_assert(!level_filter<decltype(keep_all)>);
struct expand_without_depth {
  bool expand(const drafted_tree&, node_id) const { return true; }
};
static_assert(!level_filter<expand_without_depth>);
static_assert(draft_filter<expand_only> && draft_filter<expand_even> && draft_filter<decltype(keep_all)>);
static_assert(!draft_filter<expand_without_depth> && !draft_filter<int>);

// Full tree with widths[d] children per node at depth d, in level order.
std::vector<node_id> full_shape(const std::vector<int>& widths) {
  std::vector<node_id> parent = {-1};
  std::vector<node_id> level = {0};
  for (int w : widths) {
    std::vector<node_id> next;
    for (node_id u : level)
      for (int j = 0; j < w; ++j) {
        parent.push_back(u);
        next.push_back(static_cast<node_id>(parent.size() - 1));
      }
    level = next;
  }
  return parent;
}
}  // namespace

TEST_CASE("static shape = full k-ary tree reproduces the top-k and sampled builders exactly") {
  draft_test::path_drafter d{.V = 9, .seed = 4};
  for (auto mode : {draft_mode::deterministic, draft_mode::iid, draft_mode::without_replacement}) {
    const std::vector<int> widths = {3, 2, 2};
    static_tree_builder sb({.shape = full_shape(widths), .mode = mode, .vocab_size = 9});
    drafted_tree a, b;
    const draft_round round{.root_token = 2, .rng = {11, 3, 5}};
    REQUIRE(sb.build(d, round, a).ok());
    if (mode == draft_mode::deterministic) {
      // topk_tree_builder has one k for all levels: compare on widths {3, 3}.
      static_tree_builder s2({.shape = full_shape({3, 3}), .mode = mode, .vocab_size = 9});
      REQUIRE(s2.build(d, round, a).ok());
      REQUIRE(topk_tree_builder({.k = 3, .depth = 2, .vocab_size = 9}).build(d, round, b).ok());
    } else {
      REQUIRE(sampled_tree_builder({.mode = mode, .widths = {3, 2, 2}, .vocab_size = 9}).build(d, round, b).ok());
    }
    INFO(draft_mode_name(mode));
    CHECK(a.tree == b.tree);
    CHECK(a.prob == b.prob);
    CHECK(a.child_mode == b.child_mode);
  }
}

TEST_CASE("static shape from a Medusa choice list: children are the brute-force top-k of each node") {
  // Irregular shape: (0) (1) (2) (0,0) (0,1) (0,2) (1,0) (0,0,0) (0,1,0) (2,0)
  const std::vector<std::vector<int>> choices = {{0},    {1},    {2},       {0, 0},    {0, 1},
                                                 {0, 2}, {1, 0}, {0, 0, 0}, {0, 1, 0}, {2, 0}};
  std::vector<std::int32_t> ranks, offsets = {0};
  for (const auto& c : choices) {
    ranks.insert(ranks.end(), c.begin(), c.end());
    offsets.push_back(static_cast<std::int32_t>(ranks.size()));
  }
  std::vector<node_id> shape(choices.size() + 1);
  std::vector<std::byte> ws(choices_workspace_size(choices.size()));
  REQUIRE(from_choices(ranks, offsets, shape, ws).ok());
  for (int zero : {0, 1}) {
    draft_test::path_drafter d{.V = 7, .seed = 8, .zero_frac = zero ? 0.8 : 0.0};
    static_tree_builder sb({.shape = shape, .mode = draft_mode::deterministic, .vocab_size = 7});
    drafted_tree t;
    REQUIRE(sb.build(d, {.root_token = 1}, t).ok());
    if (!zero) CHECK(t.size() == static_cast<std::int32_t>(shape.size()));
    std::vector<int> kids_of_shape(shape.size(), 0);
    for (std::size_t i = 1; i < shape.size(); ++i) ++kids_of_shape[static_cast<std::size_t>(shape[i])];
    // Brute force per drafted node: sort its row (prob desc, id asc), take the first k positive ones.
    for (node_id u = 0; u < t.size(); ++u) {
      const auto row = d.make(draft_test::path_of(t.tree, u));
      std::vector<int> idx(row.size());
      std::iota(idx.begin(), idx.end(), 0);
      std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) {
        return row[static_cast<std::size_t>(a)] > row[static_cast<std::size_t>(b)];
      });
      std::vector<token_id> kids;
      for (node_id c = u + 1; c < t.size(); ++c)
        if (t.tree.parent(c) == u) kids.push_back(t.tree.token(c));
      for (std::size_t j = 0; j < kids.size(); ++j) CHECK(kids[j] == idx[j]);
      if (!kids.empty()) CHECK(t.child_mode[static_cast<std::size_t>(u)] == draft_mode::deterministic);
    }
    verify_mode m{};
    REQUIRE(matching_verify_mode(t, m).ok());
    CHECK(m == verify_mode::deterministic);
  }
  // Errors.
  draft_test::path_drafter d{.V = 7, .seed = 8};
  drafted_tree t;
  CHECK(static_tree_builder({.shape = {-1, 1}}).build(d, {}, t) == status_code::not_topological);
  CHECK(static_tree_builder({.shape = {}}).build(d, {}, t) == status_code::empty_input);
  CHECK(static_tree_builder({.shape = {-1, 0}, .mode = draft_mode::leaf}).build(d, {}, t) ==
        status_code::invalid_argument);
  draft_test::topk_path_drafter td{d};
  CHECK(static_tree_builder({.shape = {-1, 0}, .mode = draft_mode::iid}).build(td, {}, t) ==
        status_code::invalid_argument);
  CHECK(static_tree_builder({.shape = {-1, 0, 0}, .mode = draft_mode::deterministic, .vocab_size = 7})
            .build(td, {}, t)
            .ok());
  CHECK(t.size() == 3);
}

TEST_CASE("drafter rows: the vector tile sums and mass are the scalar ones bit for bit, i.i.d. draws the same") {
  // take_level_row sums rows with the vector tile sums and sends only bad
  // rows through validate_probability_row: same mass, same codes; i.i.d.
  // children walk those tile sums to sample_row's tokens.
  const std::uint64_t seed = 20261130;
  std::printf("drafter rows seed %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> uni(0.0f, 1.0f);
  for (const std::int64_t V : {1, 2, 5, 1023, 1024, 1025, 3000, 4113}) {
    for (int rep = 0; rep < 4; ++rep) {
      std::vector<float> row(static_cast<std::size_t>(V)), q(static_cast<std::size_t>(2 * V), -1.0f);
      for (auto& x : row) {
        const auto k = rng() % 8;
        x = k == 0 ? 0.0f : k == 1 ? -0.0f : uni(rng) * (k == 2 ? 1e-30f : 1.0f);
      }
      row[static_cast<std::size_t>(rng() % static_cast<std::uint64_t>(V))] = 0.5f;  // some mass
      const auto rows = make_view<const float>(row.data(), 1, V);
      double want = 0.0;
      REQUIRE(validate_probability_row(rows.slice(0), &want).ok());
      view1d<const float> rv{};
      double total = -1.0;
      std::vector<double> tiles(static_cast<std::size_t>(sum_tile_count(V)));
      REQUIRE(detail::take_level_row(rows, 0, 1, make_view(q.data(), 2, V), rv, total, tiles.data()).ok());
      CHECK(total == want);  // exact, not approximate
      for (std::int64_t t = 0; t < sum_tile_count(V); ++t) {
        const std::int64_t b = t * sum_tile, n = std::min<std::int64_t>(sum_tile, V - b);
        CHECK(tiles[static_cast<std::size_t>(t)] ==
              detail::tile_tree_sum([&](std::int64_t i) { return row[static_cast<std::size_t>(b + i)]; }, n));
      }
      // i.i.d. children from the tile sums: the tokens of sample_row's walk
      // (uniforms near tile edges included), probabilities as well.
      std::vector<double> xs = {0.0, 0.25, 0.5, 0.75, std::nextafter(1.0, 0.0)};
      double before = 0.0;  // a uniform whose target is the mass before a tile
      for (std::int64_t t = 1; t < sum_tile_count(V); ++t)
        xs.push_back(std::min((before += tiles[static_cast<std::size_t>(t - 1)]) / total, xs[4]));
      for (int j = 0; j < 48; ++j) xs.push_back(std::uniform_real_distribution<double>(0.0, 1.0)(rng));
      for (const double x : xs) {
        const detail::draft_uniforms draws{rng_stream{seed, 0, 0}, caller_uniforms{&x, 1, 1}};
        token_id a[1], b[1];
        float va[1], vb[1];
        double key[1];
        std::int32_t na = 0, nb = 0;
        REQUIRE(detail::draw_children(draft_mode::iid, rv, total, draws, 0, 1, a, va, key, na, tiles.data()).ok());
        REQUIRE(detail::draw_children(draft_mode::iid, rv, total, draws, 0, 1, b, vb, key, nb).ok());
        CHECK(a[0] == b[0]);
        CHECK(va[0] == vb[0]);
      }
      for (std::int64_t t = 0; t < V; ++t) {
        CHECK(q[static_cast<std::size_t>(V + t)] ==
              static_cast<float>(static_cast<double>(row[static_cast<std::size_t>(t)]) / want));
        CHECK(q[static_cast<std::size_t>(t)] == -1.0f);  // row 0 (another node's) untouched
      }
      // One bad entry (or a negative before a NaN, and the reverse): the
      // code is the scalar pass's, the index the node.
      const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
      for (const int bad : {0, 1, 2, 3, 4}) {
        std::vector<float> b = row;
        const auto at = static_cast<std::size_t>(rng() % static_cast<std::uint64_t>(V));
        const auto at2 = static_cast<std::size_t>(rng() % static_cast<std::uint64_t>(V));
        if (bad == 0) b[at] = nan;
        if (bad == 1) b[at] = inf;
        if (bad == 2) b[at] = -1e-20f;
        if (bad == 3) b[at] = -0.5f, b[at2] = nan;
        if (bad == 4) std::fill(b.begin(), b.end(), 0.0f);
        const auto brows = make_view<const float>(b.data(), 1, V);
        const status ref = validate_probability_row(brows.slice(0));
        REQUIRE(!ref.ok());
        const status got = detail::take_level_row(brows, 0, 7, make_view(q.data(), 2, V), rv, total, tiles.data());
        CHECK(got.code() == ref.code());
        CHECK(got.index() == 7);
      }
    }
  }
}

TEST_CASE("deterministic children: the brute-force top-w over many blocks, ties and zeros, any row stride") {
  // draw_children skips blocks of 16 entries whose largest cannot enter the
  // w best so far; the result must stay the w largest, ties to the lower id.
  std::mt19937_64 rng(20261129);
  const float levels[] = {0.0f, 0.0f, 0.1f, 0.2f, 0.2f, 0.5f, 0.7f};  // many ties and zeros
  for (const std::int64_t V : {1, 15, 16, 17, 100, 1000}) {
    for (const std::int64_t stride : {1, 3}) {
      for (const std::int32_t w : {1, 2, 3, 5, 40}) {
        std::vector<float> buf(static_cast<std::size_t>(V * stride), -1.0f);  // -1 between entries: never read
        std::vector<float> q(static_cast<std::size_t>(V));
        double total = 0.0;
        for (std::int64_t t = 0; t < V; ++t) {
          q[static_cast<std::size_t>(t)] = levels[rng() % 7] * (t == V / 2 ? 2.0f : 1.0f);
          total += q[static_cast<std::size_t>(t)];
        }
        if (total == 0.0) q[0] = 1.0f, total = 1.0;
        for (std::int64_t t = 0; t < V; ++t) buf[static_cast<std::size_t>(t * stride)] = q[static_cast<std::size_t>(t)];
        view1d<const float> row{buf.data(), {V}, {stride}};
        std::vector<token_id> tok(static_cast<std::size_t>(w));
        std::vector<float> val(static_cast<std::size_t>(w));
        std::vector<double> key(static_cast<std::size_t>(w));
        std::int32_t n = -1;
        REQUIRE(detail::draw_children(draft_mode::deterministic, row, total, detail::draft_uniforms{}, 0, w, tok.data(),
                                      val.data(), key.data(), n)
                    .ok());
        std::vector<token_id> want;
        for (std::int64_t t = 0; t < V; ++t)
          if (q[static_cast<std::size_t>(t)] > 0.0f) want.push_back(static_cast<token_id>(t));
        std::stable_sort(want.begin(), want.end(), [&](token_id a, token_id b) {
          return q[static_cast<std::size_t>(a)] > q[static_cast<std::size_t>(b)];
        });
        want.resize(std::min<std::size_t>(want.size(), static_cast<std::size_t>(w)));
        INFO("V " << V << ", stride " << stride << ", w " << w);
        REQUIRE(n == static_cast<std::int32_t>(want.size()));
        for (std::int32_t j = 0; j < n; ++j) {
          CHECK(tok[static_cast<std::size_t>(j)] == want[static_cast<std::size_t>(j)]);
          CHECK(val[static_cast<std::size_t>(j)] ==
                static_cast<float>(q[static_cast<std::size_t>(tok[static_cast<std::size_t>(j)])] / total));
        }
      }
    }
  }
}

namespace {
// The tree a filtered build must give, by brute force over the full
// (unfiltered) tree of `shape`, in level order with children by rank: a
// kept node is expanded when its shape node has children and
// expand(its id in the kept tree, depth, its q; 1 for the root) says so; a
// child of an expanded node stays while no earlier sibling was refused and
// keep(parent's id in the kept tree, depth, token, q) keeps it. `calls`:
// the expanded nodes (drafter rows a per-node drafter is asked for).
struct cut_tree {
  std::vector<node_id> parent{-1};
  std::vector<token_id> token{};
  int calls = 0;
};
template <class Keep, class Expand>
cut_tree brute_force_cut(const drafted_tree& full, const std::vector<node_id>& shape, Keep&& keep, Expand&& expand) {
  cut_tree r;
  r.token.push_back(full.tree.token(0));
  const auto n = static_cast<std::size_t>(full.size());
  std::vector<node_id> id(n, -1);
  std::vector<char> refused(n, 0), expanded(n, 0);
  const auto decide = [&](node_id c) {
    const bool has_kids = std::find(shape.begin() + c + 1, shape.end(), c) != shape.end();
    const float q = c == 0 ? 1.0f : full.prob[static_cast<std::size_t>(c)];
    expanded[static_cast<std::size_t>(c)] =
        has_kids && expand(id[static_cast<std::size_t>(c)], full.tree.depth(c), q) ? 1 : 0;
    r.calls += expanded[static_cast<std::size_t>(c)];
  };
  id[0] = 0;
  decide(0);
  for (node_id c = 1; c < full.size(); ++c) {
    const node_id u = full.tree.parent(c);
    const node_id pu = id[static_cast<std::size_t>(u)];
    if (pu < 0 || !expanded[static_cast<std::size_t>(u)] || refused[static_cast<std::size_t>(u)]) continue;
    if (!keep(pu, full.tree.depth(c), full.tree.token(c), full.prob[static_cast<std::size_t>(c)])) {
      refused[static_cast<std::size_t>(u)] = 1;
      continue;
    }
    id[static_cast<std::size_t>(c)] = static_cast<node_id>(r.parent.size());
    r.parent.push_back(pu);
    r.token.push_back(full.tree.token(c));
    decide(c);
  }
  return r;
}
// A level filter asking `rule(node, depth, q)` (q = 1 for the root) of
// each node the builder offers, recording the depths asked in order.
template <class Rule>
struct recorded_level_rule {
  Rule& e;
  std::vector<std::int32_t>* asked;
  bool expand(const drafted_tree& t, node_id u, std::int32_t depth) const {
    asked->push_back(depth);
    return u < t.size() && t.tree.depth(u) == depth && e(u, depth, u == 0 ? 1.0f : t.prob[static_cast<std::size_t>(u)]);
  }
};
void check_cut(const drafted_tree& kept, const cut_tree& want) {
  REQUIRE(kept.size() == static_cast<std::int32_t>(want.parent.size()));
  for (node_id i = 0; i < kept.size(); ++i) {
    CHECK(kept.tree.parent(i) == want.parent[static_cast<std::size_t>(i)]);
    CHECK(kept.tree.token(i) == want.token[static_cast<std::size_t>(i)]);
  }
}
}  // namespace

TEST_CASE("a child filter drops the refused child, its later siblings and all below them; sampled modes refuse it") {
  const std::uint64_t seed = 20261201;
  std::printf("static tree child filter: seed %llu\n", static_cast<unsigned long long>(seed));
  draft_test::path_drafter d{.V = 9, .seed = 6};
  const std::vector<node_id> shape = full_shape({3, 2, 2});
  static_tree_builder sb({.shape = shape, .mode = draft_mode::deterministic, .vocab_size = 9});
  const draft_round round{.root_token = 4};
  drafted_tree full, kept;
  REQUIRE(sb.build(d, round, full).ok());
  // Keeping every child is the plain build.
  REQUIRE(sb.build(d, round, kept, keep_all).ok());
  CHECK(kept.tree == full.tree);
  CHECK(kept.prob == full.prob);
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 50; ++trial) {
    const double cut[4] = {0.0, std::uniform_real_distribution<double>(0.0, 0.4)(rng),
                           std::uniform_real_distribution<double>(0.0, 0.4)(rng),
                           std::uniform_real_distribution<double>(0.0, 0.4)(rng)};
    const auto keep = [&](node_id parent, std::int32_t depth, token_id token, float q) {
      return q >= cut[depth] && (parent + depth + trial) % 7 != 0 && (token + trial) % 11 != 0;
    };
    bool ids_ok = true;
    REQUIRE(sb.build(d, round, kept, [&](const drafted_tree& out, node_id parent, token_id token, float q) {
                ids_ok = ids_ok && parent < out.size();
                return keep(parent, out.tree.depth(parent) + 1, token, q);
              }).ok());
    CHECK(ids_ok);
    // Every shape node with children is expanded (no expand rule).
    check_cut(kept, brute_force_cut(full, shape, keep, [](node_id, std::int32_t, float) { return true; }));
  }
  for (const draft_mode mode : {draft_mode::iid, draft_mode::without_replacement}) {
    static_tree_builder ss({.shape = full_shape({2, 2}), .mode = mode, .vocab_size = 9});
    CHECK(ss.build(d, round, kept, keep_all) == status_code::invalid_argument);
  }
}

TEST_CASE("an expansion filter drafts no children for the nodes it refuses, and asks before the drafter call") {
  const std::uint64_t seed = 20261202;
  std::printf("static tree expansion filter: seed %llu\n", static_cast<unsigned long long>(seed));
  draft_test::path_drafter d{.V = 9, .seed = 8};
  const std::vector<node_id> shape = full_shape({3, 2, 2});
  static_tree_builder sb({.shape = shape, .mode = draft_mode::deterministic, .vocab_size = 9});
  const draft_round round{.root_token = 2};
  drafted_tree full, kept;
  REQUIRE(sb.build(d, round, full).ok());
  // Expanding every node and keeping every child is the plain build.
  struct keep_and_expand_all {
    bool operator()(const drafted_tree&, node_id, token_id, float) const { return true; }
    bool expand(const drafted_tree&, node_id, std::int32_t) const { return true; }
  };
  d.calls = 0;
  REQUIRE(sb.build(d, round, kept, keep_and_expand_all{}).ok());
  CHECK(kept.tree == full.tree);
  const int all_calls = d.calls;
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 50; ++trial) {
    const double cut = std::uniform_real_distribution<double>(0.0, 0.3)(rng);
    const int mod = 2 + trial % 4;
    // Pure functions of what the builder passes (ids in the kept tree).
    const auto keep_rule = [&](node_id parent, std::int32_t depth, token_id token, float q) {
      return q >= cut * (depth == 1 ? 0.0 : 1.0) && (token + parent + trial) % 13 != 0;
    };
    const auto expand_rule = [&](node_id u, std::int32_t depth, float q) {
      return (u + depth + trial) % mod != 0 && q >= 0.5 * cut;
    };
    struct filter : recorded_level_rule<decltype(expand_rule)> {
      decltype(keep_rule)& k;
      bool operator()(const drafted_tree& t, node_id parent, token_id token, float q) const {
        return k(parent, t.tree.depth(parent) + 1, token, q);
      }
    };
    std::vector<std::int32_t> asked;
    d.calls = 0;
    REQUIRE(sb.build(d, round, kept, filter{{expand_rule, &asked}, keep_rule}).ok());
    CHECK(std::is_sorted(asked.begin(), asked.end()));  // level by level
    INFO("trial " << trial);
    const cut_tree want = brute_force_cut(full, shape, keep_rule, expand_rule);
    check_cut(kept, want);
    // The drafter ran for the expanded nodes only.
    CHECK(d.calls == want.calls);
    CHECK(d.calls <= all_calls);
  }
}

namespace {
// `shape` without the descendants of node c (c stays, as a leaf), renumbered
// in the same level order.
std::vector<node_id> cut_below(const std::vector<node_id>& shape, node_id c) {
  std::vector<node_id> out, id(shape.size(), -1);
  std::vector<char> gone(shape.size(), 0);
  for (std::size_t i = 0; i < shape.size(); ++i) {
    const node_id p = shape[i];
    if (p >= 0 && (p == c || gone[static_cast<std::size_t>(p)])) {
      gone[i] = 1;
      continue;
    }
    id[i] = static_cast<node_id>(out.size());
    out.push_back(p < 0 ? -1 : id[static_cast<std::size_t>(p)]);
  }
  return out;
}
}  // namespace

TEST_CASE("a level filter draws children only for the nodes it expands, in every draft mode") {
  const std::uint64_t seed = 20261203;
  std::printf("static tree level filter: seed %llu\n", static_cast<unsigned long long>(seed));
  draft_test::path_drafter d{.V = 9, .seed = 10};
  const std::vector<node_id> shape = full_shape({3, 2, 2});
  const draft_round round{.root_token = 5, .rng = rng_stream{seed, 3}};
  std::mt19937_64 rng(seed);
  for (const draft_mode mode : {draft_mode::iid, draft_mode::without_replacement, draft_mode::deterministic}) {
    INFO("mode " << static_cast<int>(mode));
    static_tree_builder sb({.shape = shape, .mode = mode, .vocab_size = 9});
    drafted_tree full, kept, want;
    REQUIRE(sb.build(d, round, full).ok());
    // Expanding every node is the plain build, draws included.
    REQUIRE(sb.build(d, round, kept, expand_only{}).ok());
    CHECK(kept.tree == full.tree);
    CHECK(kept.prob == full.prob);
    for (int trial = 0; trial < 40; ++trial) {
      INFO("trial " << trial);
      const double cut = std::uniform_real_distribution<double>(0.0, 0.4)(rng);
      const int mod = 2 + trial % 4;
      // A pure function of what the builder passes: the node's id, depth and draw.
      const auto rule = [&](node_id u, std::int32_t depth, float q) {
        return (u + depth + trial) % mod != 0 && q >= cut;
      };
      std::vector<std::int32_t> asked;
      d.calls = 0;
      REQUIRE(sb.build(d, round, kept, recorded_level_rule<decltype(rule)>{rule, &asked}).ok());
      const int calls = d.calls;
      CHECK(std::is_sorted(asked.begin(), asked.end()));  // level by level
      // Brute force: the plain build of the shape cut below the first node
      // (lowest id, so lowest level) that the rule refuses, until none is:
      // a cut changes nothing at or above the cut node's level, and draws
      // are keyed by node id, which the filtered build assigns alike.
      std::vector<node_id> s = shape;
      for (;;) {
        static_tree_builder ref({.shape = s, .mode = mode, .vocab_size = 9});
        REQUIRE(ref.build(d, round, want).ok());
        REQUIRE(want.size() == static_cast<std::int32_t>(s.size()));  // nothing dropped: every token drawable
        node_id c = -1;
        for (node_id u = 0; u < want.size() && c < 0; ++u) {
          const bool has_kids = std::find(s.begin() + u + 1, s.end(), u) != s.end();
          if (has_kids && !rule(u, want.tree.depth(u), u == 0 ? 1.0f : want.prob[static_cast<std::size_t>(u)])) c = u;
        }
        if (c < 0) break;
        s = cut_below(s, c);
      }
      CHECK(kept.tree == want.tree);
      CHECK(kept.prob == want.prob);
      // The drafter ran for the expanded nodes only.
      int expanded = 0;
      for (node_id u = 0; u < want.size(); ++u) expanded += std::find(s.begin() + u + 1, s.end(), u) != s.end() ? 1 : 0;
      CHECK(calls == expanded);
    }
  }
}
