// Medusa / EAGLE-1 static-tree buffers (tree_indices, retrieve_indices) and
// Medusa typical acceptance with Medusa's tie-break, against transcriptions
// (written here, on plain vectors) of the peers' Python reference code.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <set>
#include <vector>

#include "specdec/interop/choice_buffers.hpp"
#include "specdec/interop/typical.hpp"
#include "specdec/tree/build.hpp"

using namespace specdec;
using choice = std::vector<int>;

namespace {

// A random prefix-closed choice list (ranks < topk), in random order.
std::vector<choice> random_choices(std::mt19937_64& g, int topk, int max_depth, int count) {
  long possible = 0, level = 1;
  for (int d = 0; d < max_depth; ++d) possible += (level *= topk);
  count = static_cast<int>(std::min<long>(count, possible));
  std::set<choice> s;
  while (static_cast<int>(s.size()) < count) {
    choice c;
    const int d = 1 + static_cast<int>(g() % static_cast<std::uint64_t>(max_depth));
    for (int k = 0; k < d; ++k) c.push_back(static_cast<int>(g() % static_cast<std::uint64_t>(topk)));
    for (std::size_t k = 1; k <= c.size(); ++k) s.insert(choice(c.begin(), c.begin() + static_cast<std::ptrdiff_t>(k)));
  }
  std::vector<choice> v(s.begin(), s.end());
  std::shuffle(v.begin(), v.end(), g);
  return v;
}

bool by_len_then_lex(const choice& a, const choice& b) { return a.size() != b.size() ? a.size() < b.size() : a < b; }

int index_of(const std::vector<choice>& v, const choice& c) {
  return static_cast<int>(std::find(v.begin(), v.end(), c) - v.begin());
}

// Transcription of generate_medusa_buffers / generate_tree_buffers
// (tree_indices and retrieve_indices), following the Python loops.
struct peer_buffers {
  std::vector<int> tree_indices;
  std::vector<std::vector<int>> retrieve;
};

peer_buffers reference(std::vector<choice> choices, int topk, bool eagle) {
  std::sort(choices.begin(), choices.end(), by_len_then_lex);
  peer_buffers b;
  std::vector<int> depth_counts;
  std::size_t prev_depth = 0;
  for (const auto& p : choices) {
    if (p.size() != prev_depth) depth_counts.push_back(0);
    ++depth_counts[p.size() - 1];
    prev_depth = p.size();
  }
  b.tree_indices.assign(choices.size() + 1, 0);
  int start = 0, bias = 0;
  for (std::size_t i = 0; i < depth_counts.size(); ++i) {
    choice parent;
    for (int j = 0; j < depth_counts[i]; ++j) {
      const choice& cur = choices[static_cast<std::size_t>(start + j)];
      if (eagle) {
        const choice cur_parent(cur.begin(), cur.end() - 1);
        if (j != 0) {
          if (cur_parent != parent) {
            ++bias;
            parent = cur_parent;
          }
        } else {
          parent = cur_parent;
        }
        b.tree_indices[static_cast<std::size_t>(start + j + 1)] = cur.back() + topk * (static_cast<int>(i) + bias) + 1;
      } else {
        b.tree_indices[static_cast<std::size_t>(start + j + 1)] = cur.back() + topk * static_cast<int>(i) + 1;
      }
    }
    start += depth_counts[i];
  }
  std::vector<std::vector<int>> nest;
  std::vector<choice> paths;
  for (std::size_t i = 0; i < choices.size(); ++i) {
    const choice& cur = choices[choices.size() - 1 - i];
    if (std::find(paths.begin(), paths.end(), cur) != paths.end()) continue;
    std::vector<int> r;
    for (std::size_t c = 0; c < cur.size(); ++c) {
      const choice pre(cur.begin(), cur.begin() + static_cast<std::ptrdiff_t>(c + 1));
      r.push_back(index_of(choices, pre));
      paths.push_back(pre);
    }
    nest.push_back(r);
  }
  std::size_t width = 0;
  for (const auto& r : nest) width = std::max(width, r.size());
  for (auto r : nest) {
    r.resize(width, -2);  // pad_path(..., -2), then + 1, then the root column
    std::vector<int> row = {0};
    for (int x : r) row.push_back(x + 1);
    b.retrieve.push_back(row);
  }
  if (eagle) {
    int maxitem = 0;
    for (const auto& r : b.retrieve)
      for (int x : r) maxitem = std::max(maxitem, x);
    maxitem += 5;
    std::stable_sort(b.retrieve.begin(), b.retrieve.end(), [&](const std::vector<int>& x, const std::vector<int>& y) {
      for (std::size_t k = 0; k < x.size(); ++k) {
        const int a = x[k] >= 0 ? x[k] : maxitem, c = y[k] >= 0 ? y[k] : maxitem;
        if (a != c) return a < c;
      }
      return false;
    });
  }
  return b;
}

struct built {
  std::vector<node_id> parent;
  std::vector<std::int32_t> rank;
};

built build(const std::vector<choice>& choices) {
  std::vector<std::int32_t> ranks, offsets = {0};
  for (const auto& c : choices) {
    ranks.insert(ranks.end(), c.begin(), c.end());
    offsets.push_back(static_cast<std::int32_t>(ranks.size()));
  }
  built b;
  b.parent.resize(choices.size() + 1);
  b.rank.resize(choices.size() + 1);
  std::vector<std::byte> ws(choices_workspace_size(choices.size()));
  std::vector<std::int32_t> node_choice(choices.size() + 1);
  REQUIRE(from_choices(ranks, offsets, b.parent, ws, node_choice).ok());
  REQUIRE(choice_node_ranks(ranks, offsets, node_choice, b.rank).ok());
  return b;
}

}  // namespace

TEST_CASE("Medusa and EAGLE-1 tree_indices and retrieve_indices equal the peers' buffers") {
  std::mt19937_64 g(4242);
  for (int t = 0; t < 150; ++t) {
    const int topk = 2 + t % 9;
    const auto choices = random_choices(g, topk, 1 + t % 5, 1 + t % 40);
    const built b = build(choices);
    for (const bool eagle : {false, true}) {
      const auto ref = reference(choices, topk, eagle);
      const choice_layout layout = eagle ? choice_layout::eagle1 : choice_layout::medusa;
      std::vector<std::int32_t> ti(b.parent.size());
      REQUIRE(choice_tree_indices(b.parent, b.rank, topk, layout, ti).ok());
      INFO("trial " << t << (eagle ? " eagle" : " medusa"));
      CHECK(std::vector<int>(ti.begin(), ti.end()) == ref.tree_indices);
      std::int32_t leaves = 0, width = 0;
      REQUIRE(retrieve_shape(b.parent, leaves, width).ok());
      REQUIRE(static_cast<std::size_t>(leaves) == ref.retrieve.size());
      REQUIRE(static_cast<std::size_t>(width) == ref.retrieve[0].size());
      std::vector<std::int32_t> ri(static_cast<std::size_t>(leaves * width));
      REQUIRE(retrieve_indices(b.parent, layout, make_view(ri.data(), leaves, width)).ok());
      for (int r = 0; r < leaves; ++r)
        for (int k = 0; k < width; ++k)
          CHECK(ri[static_cast<std::size_t>(r * width + k)] ==
                ref.retrieve[static_cast<std::size_t>(r)][static_cast<std::size_t>(k)]);
      // Tokens from a flat candidate vector: node i's token is the rank-th
      // candidate of its row, in both layouts (brute force over the rows).
      std::vector<token_id> flat(static_cast<std::size_t>(1 + topk * static_cast<int>(b.parent.size())));
      for (std::size_t k = 0; k < flat.size(); ++k) flat[k] = static_cast<token_id>(1000 + k);
      std::vector<token_id> tok(b.parent.size());
      REQUIRE(gather_candidate_tokens(ti, flat, tok).ok());
      for (std::size_t i = 1; i < tok.size(); ++i) CHECK((tok[i] - 1001) % topk == b.rank[i]);
    }
  }
  // Bad inputs.
  const built b = build({{0}, {1}, {0, 0}});
  std::vector<std::int32_t> ti(4);
  CHECK(choice_tree_indices(b.parent, b.rank, 1, choice_layout::medusa, ti) ==
        status_code::out_of_range);  // rank 1 >= topk
  CHECK(choice_tree_indices(b.parent, b.rank, 0, choice_layout::medusa, ti) == status_code::invalid_argument);
  const std::vector<node_id> unsorted = {-1, 0, 1, 0};  // depth 2 before depth 1
  CHECK(choice_tree_indices(unsorted, b.rank, 4, choice_layout::medusa, ti) == status_code::invalid_argument);
  std::vector<std::int32_t> ri(3);
  CHECK(retrieve_indices(b.parent, choice_layout::medusa, make_view(ri.data(), 1, 3)) == status_code::size_mismatch);
  const std::vector<token_id> small = {1, 2};
  std::vector<token_id> tok(4);
  CHECK(gather_candidate_tokens(std::vector<std::int32_t>{0, 5}, small, tok) == status_code::out_of_range);
}

namespace {
// Transcription of Medusa's evaluate_posterior (typical branch) on rows
// without padding: threshold min(eps, exp(-H) * alpha), cumprod mask,
// likelihood tie-break via argmax (first maximum).
void reference_typical(const std::vector<std::vector<int>>& rows, const std::vector<token_id>& tok,
                       const std::vector<float>& p, int V, float eps, float alpha, int& best, int& len) {
  const std::size_t R = rows.size(), L = rows[0].size();
  std::vector<int> acc(R, 0);
  std::vector<std::vector<float>> cand(R, std::vector<float>(L - 1));
  for (std::size_t r = 0; r < R; ++r) {
    int run = 1;
    for (std::size_t k = 0; k + 1 < L; ++k) {
      const auto u = static_cast<std::size_t>(rows[r][k]);
      float h = 0;
      for (int x = 0; x < V; ++x)
        h -= p[u * static_cast<std::size_t>(V) + static_cast<std::size_t>(x)] *
             std::log(p[u * static_cast<std::size_t>(V) + static_cast<std::size_t>(x)] + 1e-5f);
      const float th = std::min(eps, std::exp(-h) * alpha);
      const float pc =
          p[u * static_cast<std::size_t>(V) + static_cast<std::size_t>(tok[static_cast<std::size_t>(rows[r][k + 1])])];
      cand[r][k] = pc;
      run *= pc > th ? 1 : 0;
      acc[r] += run;
    }
  }
  len = *std::max_element(acc.begin(), acc.end());
  best = 0;
  if (len == 0) return;
  float best_like = -INFINITY;
  bool first = true;
  for (std::size_t r = 0; r < R; ++r) {
    if (acc[r] != len) continue;
    float like = 0;
    for (int k = 0; k < len; ++k) like += std::log(cand[r][static_cast<std::size_t>(k)]);
    if (first || like > best_like) {
      best_like = like;
      best = static_cast<int>(r);
      first = false;
    }
  }
}
}  // namespace

TEST_CASE("Medusa typical acceptance: Medusa's likelihood tie-break and the first-row rule") {
  // Full trees (every leaf at the same depth): Medusa's rows carry no padding.
  std::mt19937_64 g(99);
  std::uniform_real_distribution<float> U(0.0f, 1.0f);
  int ties_resolved_differently = 0;
  for (int t = 0; t < 300; ++t) {
    const int k = 2 + t % 2, depth = 1 + t % 3, V = 4 + t % 3;
    std::vector<choice> choices;
    std::vector<choice> level = {{}};
    for (int d = 0; d < depth; ++d) {
      std::vector<choice> next;
      for (const auto& c : level)
        for (int r = 0; r < k; ++r) {
          choice e = c;
          e.push_back(r);
          next.push_back(e);
          choices.push_back(e);
        }
      level = next;
    }
    const built b = build(choices);
    const auto N = static_cast<int>(b.parent.size());
    std::vector<token_id> tok(static_cast<std::size_t>(N));
    for (auto& x : tok) x = static_cast<token_id>(g() % static_cast<std::uint64_t>(V));
    std::vector<float> p(static_cast<std::size_t>(N * V));
    for (int u = 0; u < N; ++u) {
      float s = 0;
      for (int x = 0; x < V; ++x) s += (p[static_cast<std::size_t>(u * V + x)] = 0.05f + U(g) * U(g));
      for (int x = 0; x < V; ++x) p[static_cast<std::size_t>(u * V + x)] /= s;
    }
    std::int32_t leaves = 0, width = 0;
    REQUIRE(retrieve_shape(b.parent, leaves, width).ok());
    std::vector<std::int32_t> ri(static_cast<std::size_t>(leaves * width));
    REQUIRE(retrieve_indices(b.parent, choice_layout::medusa, make_view(ri.data(), leaves, width)).ok());
    std::vector<std::vector<int>> rows(static_cast<std::size_t>(leaves));
    for (int r = 0; r < leaves; ++r)
      rows[static_cast<std::size_t>(r)].assign(ri.begin() + r * width, ri.begin() + (r + 1) * width);
    const float eps = 0.09f + 0.2f * U(g), alpha = 0.3f + U(g);
    int rb = 0, rl = 0;
    reference_typical(rows, tok, p, V, eps, alpha, rb, rl);
    std::vector<float> scratch(static_cast<std::size_t>(N));
    std::int32_t best = -1, len = -1;
    REQUIRE(medusa_typical_select(make_view<const std::int32_t>(ri.data(), leaves, width), tok,
                                  make_view<const float>(p.data(), N, V),
                                  {eps, alpha, typical_tie_break::highest_likelihood}, scratch, best, len)
                .ok());
    INFO("trial " << t);
    CHECK(len == rl);
    CHECK(best == rb);
    std::int32_t best_first = -1, len_first = -1;
    REQUIRE(medusa_typical_select(make_view<const std::int32_t>(ri.data(), leaves, width), tok,
                                  make_view<const float>(p.data(), N, V), {eps, alpha, typical_tie_break::first_row},
                                  scratch, best_first, len_first)
                .ok());
    CHECK(len_first == len);
    if (best_first != best) ++ties_resolved_differently;
  }
  // The two tie-breaks must actually differ somewhere (the option matters).
  CHECK(ties_resolved_differently > 0);
  // Bad inputs.
  const std::vector<std::int32_t> ri = {0, 1};
  const std::vector<token_id> tok = {0, 1};
  const std::vector<float> p = {0.5f, 0.5f, std::nanf(""), 0.5f};
  std::vector<float> scratch(2);
  std::int32_t best = 0, len = 0;
  CHECK(medusa_typical_select(make_view<const std::int32_t>(ri.data(), 1, 2), tok,
                              make_view<const float>(p.data(), 2, 2), {0.0f, 0.3f}, scratch, best,
                              len) == status_code::invalid_argument);
  const std::vector<float> bad = {std::nanf(""), 0.5f, 0.5f, 0.5f};
  CHECK(medusa_typical_select(make_view<const std::int32_t>(ri.data(), 1, 2), tok,
                              make_view<const float>(bad.data(), 2, 2), {}, scratch, best,
                              len) == status_code::non_finite);
  const std::vector<std::int32_t> out_of_tree = {0, 5};
  CHECK(medusa_typical_select(make_view<const std::int32_t>(out_of_tree.data(), 1, 2), tok,
                              make_view<const float>(p.data(), 2, 2), {}, scratch, best,
                              len) == status_code::out_of_range);
}
