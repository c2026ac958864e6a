// Model-free drafters: prompt_lookup_builder and suffix_index /
// suffix_tree_builder against brute-force scans of random token sequences
// (fixed, printed seeds), budgets, bad inputs, and losslessness through a
// speculative_session (greedy equals plain greedy; at temperature 1 the
// output follows the target's law).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <map>
#include <random>
#include <span>
#include <vector>

#include "loop/loop_models.hpp"
#include "specdec/draft/prompt_lookup.hpp"
#include "specdec/draft/suffix_index.hpp"
#include "specdec/draft/verify_mode.hpp"
#include "specdec/loop/concepts.hpp"
#include "specdec/loop/session.hpp"
#include "verify/exactness_harness.hpp"

using namespace specdec;

namespace {

using seq = std::vector<token_id>;

seq random_seq(std::mt19937_64& g, int V, int n) {
  std::uniform_int_distribution<int> d(0, V - 1);
  seq s(static_cast<std::size_t>(n));
  for (auto& t : s) t = d(g);
  return s;
}

// Every drafted root-to-node path (root excluded) with its node's prob.
std::map<seq, float> drafted_paths(const drafted_tree& t) {
  std::map<seq, float> out;
  for (node_id u = 1; u < t.size(); ++u) {
    seq p;
    for (node_id v = u; v > 0; v = t.tree.parent(v)) p.push_back(t.tree.token(v));
    std::reverse(p.begin(), p.end());
    out[p] = t.prob[static_cast<std::size_t>(u)];
  }
  return out;
}

// Confidence of every continuation prefix in a counted map (count of each
// continuation prefix): count(p) / (sum of counts of p's parent's children + prior).
std::map<seq, float> confidences(const std::map<seq, std::int64_t>& counts, float prior) {
  std::map<seq, double> child_total;
  for (const auto& [p, c] : counts) child_total[seq(p.begin(), p.end() - 1)] += static_cast<double>(c);
  std::map<seq, float> out;
  for (const auto& [p, c] : counts)
    out[p] = static_cast<float>(static_cast<double>(c) / (child_total[seq(p.begin(), p.end() - 1)] + prior));
  return out;
}

void check_same(const std::map<seq, float>& got, const std::map<seq, float>& want) {
  REQUIRE(got.size() == want.size());
  for (const auto& [p, c] : want) {
    const auto it = got.find(p);
    REQUIRE(it != got.end());
    CHECK(it->second == Approx(c).epsilon(1e-5));
  }
}

// Joint confidence of each node of a drafted tree (product of probs).
std::vector<double> joints(const drafted_tree& t) {
  std::vector<double> j(static_cast<std::size_t>(t.size()), 1.0);
  for (node_id u = 1; u < t.size(); ++u)
    j[static_cast<std::size_t>(u)] =
        j[static_cast<std::size_t>(t.tree.parent(u))] * t.prob[static_cast<std::size_t>(u)];
  return j;
}

// Tree structure every model-free build must have: topological, siblings
// distinct and in descending confidence, every expanded node deterministic.
void check_shape(const drafted_tree& t) {
  REQUIRE(t.size() >= 1);
  CHECK(t.tree.parent(0) == -1);
  for (node_id u = 1; u < t.size(); ++u) {
    const node_id p = t.tree.parent(u);
    CHECK(p < u);
    CHECK(t.child_mode[static_cast<std::size_t>(p)] == draft_mode::deterministic);
    for (node_id v = u + 1; v < t.size(); ++v)
      if (t.tree.parent(v) == p) {
        CHECK(t.tree.token(v) != t.tree.token(u));
        CHECK(t.prob[static_cast<std::size_t>(v)] <= t.prob[static_cast<std::size_t>(u)]);
      }
  }
  verify_mode m = verify_mode::greedy;
  REQUIRE(matching_verify_mode(t, m).ok());
  CHECK(m == verify_mode::deterministic);
}

// Brute-force prompt lookup: longest suffix g in [min, max] with an earlier
// occurrence, the `matches` most recent occurrences, their continuations
// truncated at `depth` counted prefix by prefix.
std::map<seq, std::int64_t> naive_lookup(const seq& ctx, int min_g, int max_g, int matches, int depth, int& g_out) {
  const auto n = static_cast<int>(ctx.size());
  std::map<seq, std::int64_t> counts;
  g_out = 0;
  for (int g = std::min(max_g, n - 1); g >= min_g; --g) {
    int found = 0;
    for (int i = n - g - 1; i >= 0 && found < matches; --i) {
      if (!std::equal(ctx.begin() + i, ctx.begin() + i + g, ctx.end() - g)) continue;
      ++found;
      seq p;
      for (int k = i + g; k < n && k < i + g + depth; ++k) {
        p.push_back(ctx[static_cast<std::size_t>(k)]);
        ++counts[p];
      }
    }
    if (found > 0) {
      g_out = g;
      return counts;
    }
  }
  return counts;
}

// Brute-force substring counts of sequences (no substring spans two).
std::map<seq, std::int64_t> naive_substrings(const std::vector<seq>& seqs, int depth) {
  std::map<seq, std::int64_t> counts;
  for (const seq& s : seqs)
    for (std::size_t i = 0; i < s.size(); ++i)
      for (std::size_t l = 1; l <= static_cast<std::size_t>(depth) && i + l <= s.size(); ++l)
        ++counts[seq(s.begin() + static_cast<std::ptrdiff_t>(i), s.begin() + static_cast<std::ptrdiff_t>(i + l))];
  return counts;
}

// A target whose next-token law depends on the last two tokens only, so
// greedy decoding falls into cycles that lookups can predict.
struct markov_target {
  looptest::table m;
  std::vector<float> row = std::vector<float>(static_cast<std::size_t>(m.V));
  void law(std::span<const token_id> ctx, float* out) const {
    const std::size_t n = ctx.size();
    const token_id a = n >= 2 ? ctx[n - 2] : -1, b = n >= 1 ? ctx[n - 1] : -1;
    const token_id key[2] = {a, b};
    m.row(key, {}, out);
  }
  status forward(const tree_forward& f) {
    row.resize(static_cast<std::size_t>(m.V));
    seq ctx;
    for (node_id i = 0; i < f.tree.size; ++i) {
      ctx.assign(f.history.begin(), f.history.end());
      seq path;
      for (node_id v = i; v >= 0; v = f.tree.parent[v]) path.push_back(f.tree.token[v]);
      ctx.insert(ctx.end(), path.rbegin(), path.rend());
      law(ctx, row.data());
      for (int t = 0; t < m.V; ++t)
        f.logits(i, t) = row[static_cast<std::size_t>(t)] > 0.0f ? std::log(row[static_cast<std::size_t>(t)])
                                                                 : -std::numeric_limits<float>::infinity();
    }
    return status::success();
  }
};

}  // namespace

static_assert(tree_builder<prompt_lookup_builder, int>);
static_assert(tree_builder<suffix_tree_builder, suffix_index>);
static_assert(!tree_builder<suffix_tree_builder, int>);

TEST_CASE("prompt_lookup_builder equals a brute-force scan on random sequences") {
  const std::uint64_t seed = 20261125;
  std::printf("prompt lookup brute force: seed %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 g(seed);
  prompt_lookup_builder b;
  drafted_tree out;
  // Builds over ctx (its last token the root) with options drawn from
  // `trial` and checks the draft against the scan; returns whether it matched.
  auto agrees = [&](const seq& ctx, int V, int trial, float prior) {
    const int min_g = 1 + trial % 2, max_g = min_g + trial % 4, matches = 1 + trial % 6, depth = 1 + trial % 9;
    b.set_options({.max_ngram = max_g,
                   .min_ngram = min_g,
                   .max_matches = matches,
                   .max_depth = depth,
                   .max_nodes = 1 << 20,
                   .prior = prior,
                   .vocab_size = V});
    draft_round r;
    r.root_token = ctx.back();
    r.history = std::span<const token_id>(ctx).first(ctx.size() - 1);
    REQUIRE(b.build(r, out).ok());
    check_shape(out);
    CHECK(out.tree.token(0) == ctx.back());
    int g_ref = 0;
    const auto counts = naive_lookup(ctx, min_g, max_g, matches, depth, g_ref);
    CHECK(b.last_match().ngram == g_ref);
    check_same(drafted_paths(out), confidences(counts, prior));
    return g_ref > 0;
  };
  int matched = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const int V = 2 + trial % 5;
    matched += agrees(random_seq(g, V, 1 + static_cast<int>(g() % 120)), V, trial, trial % 3 == 0 ? 0.0f : 1.0f);
  }
  CHECK(matched > 200);
  // Long contexts over many ids: the last token is rare, so the scan skips
  // most of the context in blocks of 16 and finds what remains near either
  // end of it.
  int sparse = 0;
  for (int trial = 0; trial < 200; ++trial) {
    const int V = trial % 2 == 0 ? 40 : 700;
    seq ctx = random_seq(g, V, 17 + static_cast<int>(g() % 700));
    if (trial % 4 == 1) ctx.insert(ctx.end(), ctx.begin(), ctx.begin() + 1 + trial % 5);  // a match at the start
    sparse += agrees(ctx, V, trial, 1.0f);
  }
  CHECK(sparse > 100);
}

// The budgeted tree must be the best (max_nodes - 1) nodes of the unbudgeted
// one by joint confidence (ancestor-closed because joints fall with depth).
void check_budget(const drafted_tree& full, const drafted_tree& cut, int max_nodes) {
  const auto fp = drafted_paths(full), cp = drafted_paths(cut);
  REQUIRE(cut.size() == std::min(max_nodes, full.size()));
  const auto jf = joints(full), jc = joints(cut);
  std::map<seq, double> joint_of;
  for (node_id u = 1; u < full.size(); ++u) {
    seq p;
    for (node_id v = u; v > 0; v = full.tree.parent(v)) p.push_back(full.tree.token(v));
    std::reverse(p.begin(), p.end());
    joint_of[p] = jf[static_cast<std::size_t>(u)];
  }
  double min_in = 2.0, max_out = -1.0;
  for (const auto& [p, j] : joint_of) {
    if (cp.count(p)) {
      min_in = std::min(min_in, j);
      CHECK(cp.at(p) == Approx(fp.at(p)));
    } else {
      max_out = std::max(max_out, j);
    }
  }
  for (const auto& [p, c] : cp) CHECK(fp.count(p) == 1);
  CHECK(min_in >= max_out * (1 - 1e-6));
  (void)jc;
}

TEST_CASE("prompt lookup: budget keeps the most confident continuations; thresholds and depth scaling") {
  const std::uint64_t seed = 7;
  std::printf("prompt lookup budget: seed %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 g(seed);
  drafted_tree full, cut;
  for (int trial = 0; trial < 100; ++trial) {
    const seq ctx = random_seq(g, 3, 200);
    draft_round r;
    r.root_token = ctx.back();
    r.history = std::span<const token_id>(ctx).first(ctx.size() - 1);
    prompt_lookup_options o{.max_ngram = 2, .max_matches = 16, .max_depth = 6, .max_nodes = 1 << 20};
    REQUIRE(prompt_lookup_builder(o).build(r, full).ok());
    const int budget = 1 + trial % 12;
    o.max_nodes = budget;
    REQUIRE(prompt_lookup_builder(o).build(r, cut).ok());
    check_shape(cut);
    check_budget(full, cut, budget);
    // min_prob: exactly the nodes of joint >= min_prob.
    o.max_nodes = 1 << 20;
    o.min_prob = 0.21f;
    REQUIRE(prompt_lookup_builder(o).build(r, cut).ok());
    std::int32_t want = 0;
    for (const double j : joints(full)) want += j >= static_cast<double>(0.21f) ? 1 : 0;  // the root's joint is 1
    CHECK(cut.size() == want);
    // depth_per_match: depth <= ceil(alpha * matched length).
    o.min_prob = 0.0f;
    o.depth_per_match = 1.5f;
    prompt_lookup_builder scaled(o);
    REQUIRE(scaled.build(r, cut).ok());
    const int lim = std::min(6, static_cast<int>(std::ceil(1.5 * scaled.last_match().ngram)));
    for (node_id u = 0; u < cut.size(); ++u) CHECK(cut.tree.depth(u) <= lim);
  }
}

TEST_CASE("suffix_index counts every substring like a brute-force scan") {
  const std::uint64_t seed = 424242;
  std::printf("suffix index brute force: seed %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 g(seed);
  for (int trial = 0; trial < 60; ++trial) {
    const int V = 2 + trial % 4, depth = 2 + trial % 7;
    suffix_index idx({.depth = depth, .capacity = 1 << 16, .vocab_size = V});
    std::vector<seq> seqs;
    const int n_seqs = 1 + trial % 3;
    for (int k = 0; k < n_seqs; ++k) {
      seqs.push_back(random_seq(g, V, static_cast<int>(g() % 150)));
      idx.begin_sequence();
      REQUIRE(idx.append(seqs.back()).ok());
      CHECK(idx.sequence_length() == static_cast<std::int64_t>(seqs.back().size()));
    }
    const auto counts = naive_substrings(seqs, depth);
    // Exactly one node per distinct substring (plus the empty string).
    CHECK(idx.size() == static_cast<std::int32_t>(counts.size()) + 1);
    std::int64_t total = 0;
    for (const seq& s : seqs) total += static_cast<std::int64_t>(s.size());
    CHECK(idx.count(0) == static_cast<std::uint32_t>(total));
    for (const auto& [s, c] : counts) {
      const std::int32_t u = idx.find(s);
      REQUIRE(u > 0);
      CHECK(idx.count(u) == static_cast<std::uint32_t>(c));
      CHECK(idx.token(u) == s.back());
      // Children: the continuations counted by the scan.
      std::int64_t child_sum = 0;
      for (std::int32_t ch = idx.first_child(u); ch >= 0; ch = idx.next_sibling(ch)) {
        seq e = s;
        e.push_back(idx.token(ch));
        CHECK(counts.at(e) == idx.count(ch));
        child_sum += idx.count(ch);
      }
      std::int64_t want = 0;
      for (token_id t = 0; t < V; ++t) {
        seq e = s;
        e.push_back(t);
        if (auto it = counts.find(e); it != counts.end()) want += it->second;
      }
      CHECK(child_sum == want);
    }
    // Strings that never occurred, or longer than depth, have no node.
    for (int k = 0; k < 50; ++k) {
      const seq s = random_seq(g, V, 1 + static_cast<int>(g() % static_cast<unsigned>(depth + 2)));
      const bool present = static_cast<int>(s.size()) <= depth && counts.count(s);
      CHECK((idx.find(s) > 0) == present);
    }
    // longest_match: the longest current suffix (<= depth - 1) continued before.
    const seq& cur = seqs.back();
    for (int max_len = 1; max_len < depth; ++max_len) {
      std::int32_t node = -1;
      const std::int32_t m = idx.longest_match(max_len, 1, node);
      int want = 0;
      for (int k = std::min<int>(max_len, static_cast<int>(cur.size())); k >= 1 && want == 0; --k) {
        seq s(cur.end() - k, cur.end());
        for (token_id t = 0; t < V && want == 0; ++t) {
          seq e = s;
          e.push_back(t);
          if (counts.count(e)) want = k;
        }
      }
      CHECK(m == want);
      if (m > 0) CHECK(node == idx.find(seq(cur.end() - m, cur.end())));
    }
  }
}

TEST_CASE("suffix_tree_builder drafts the counted continuations of the longest match") {
  const std::uint64_t seed = 99;
  std::printf("suffix tree brute force: seed %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 g(seed);
  drafted_tree out, cut;
  int matched = 0;
  for (int trial = 0; trial < 150; ++trial) {
    const int V = 2 + trial % 4, depth = 4 + trial % 8;
    suffix_index idx({.depth = depth, .capacity = 1 << 16, .vocab_size = V});
    std::vector<seq> seqs;
    // An earlier request, kept across requests, and the current one.
    seqs.push_back(random_seq(g, V, static_cast<int>(g() % 100)));
    REQUIRE(idx.append(seqs.back()).ok());
    idx.begin_sequence();
    seqs.push_back(random_seq(g, V, 1 + static_cast<int>(g() % 100)));
    const seq& cur = seqs.back();
    const int max_pattern = 1 + trial % (depth - 1);
    const float prior = trial % 2 ? 1.0f : 0.0f;
    suffix_tree_options o{.max_pattern = max_pattern, .max_depth = 1 << 10, .max_nodes = 1 << 20, .prior = prior};
    suffix_tree_builder b(o);
    draft_round r;
    r.root_token = cur.back();
    r.history = std::span<const token_id>(cur).first(cur.size() - 1);
    REQUIRE(b.build(idx, r, out).ok());  // syncs the index with the context
    CHECK(idx.sequence_length() == static_cast<std::int64_t>(cur.size()));
    check_shape(out);
    const auto counts = naive_substrings(seqs, depth);
    const int m = b.last_match().length;
    std::map<seq, std::int64_t> cont;
    if (m > 0) {
      ++matched;
      const seq pat(cur.end() - m, cur.end());
      for (const auto& [s, c] : counts)
        if (s.size() > pat.size() && std::equal(pat.begin(), pat.end(), s.begin()))
          cont[seq(s.begin() + m, s.end())] = c;
    }
    check_same(drafted_paths(out), confidences(cont, prior));
    // Budget: the best nodes by joint confidence.
    const int budget = 1 + trial % 10;
    o.max_nodes = budget;
    suffix_tree_builder bb(o);
    REQUIRE(bb.draft(idx, cur.back(), cut).ok());
    check_shape(cut);
    check_budget(out, cut, budget);
    // A second build on the same context appends nothing.
    const std::int32_t nodes = idx.size();
    REQUIRE(b.build(idx, r, out).ok());
    CHECK(idx.size() == nodes);
  }
  CHECK(matched > 100);
}

TEST_CASE("model-free drafters: bad inputs get clear statuses") {
  const seq ctx = {1, 2, 3, 1, 2};
  draft_round r;
  r.root_token = 2;
  r.history = std::span<const token_id>(ctx).first(4);
  drafted_tree out;
  SECTION("prompt lookup options and tokens") {
    CHECK(prompt_lookup_builder({.max_nodes = 0}).build(r, out).code() == status_code::invalid_argument);
    CHECK(prompt_lookup_builder({.min_ngram = 0}).build(r, out).code() == status_code::invalid_argument);
    CHECK(prompt_lookup_builder({.max_ngram = 1, .min_ngram = 2}).build(r, out).code() ==
          status_code::invalid_argument);
    CHECK(prompt_lookup_builder({.max_matches = 0}).build(r, out).code() == status_code::invalid_argument);
    CHECK(prompt_lookup_builder({.max_depth = -1}).build(r, out).code() == status_code::invalid_argument);
    CHECK(prompt_lookup_builder({.min_prob = 1.5f}).build(r, out).code() == status_code::invalid_argument);
    CHECK(prompt_lookup_builder({.prior = -1.0f}).build(r, out).code() == status_code::invalid_argument);
    CHECK(prompt_lookup_builder({.depth_per_match = std::nanf("")}).build(r, out).code() ==
          status_code::invalid_argument);
    const status s = prompt_lookup_builder({.vocab_size = 3}).build(r, out);
    CHECK(s.code() == status_code::token_out_of_range);
    CHECK(s.index() == 2);
    r.root_token = 7;
    const status root_bad = prompt_lookup_builder({.vocab_size = 4}).build(r, out);
    CHECK(root_bad.code() == status_code::token_out_of_range);
    CHECK(root_bad.index() == 4);  // the root counts after the history
    r.root_token = -1;
    CHECK(prompt_lookup_builder({.vocab_size = std::int64_t{1} << 40}).build(r, out).code() ==
          status_code::token_out_of_range);  // negative ids fail whatever the vocabulary
    r.root_token = 2;
    // max_nodes 1 and max_depth 0: a root-only tree, no error.
    REQUIRE(prompt_lookup_builder({.max_nodes = 1}).build(r, out).ok());
    CHECK(out.size() == 1);
    REQUIRE(prompt_lookup_builder({.max_depth = 0}).build(r, out).ok());
    CHECK(out.size() == 1);
    // The throwing form.
    prompt_lookup_builder bad({.max_nodes = 0});
    int src = 0;
    CHECK_THROWS_AS(bad(src, r), specdec::error);
    prompt_lookup_builder good;
    CHECK(good(src, r).size() > 1);
  }
  SECTION("suffix index") {
    CHECK_THROWS_AS(suffix_index({.depth = 1}), specdec::error);
    CHECK_THROWS_AS(suffix_index({.depth = 8, .capacity = 8}), specdec::error);
    suffix_index idx({.depth = 4, .capacity = 12, .vocab_size = 5});
    CHECK(idx.append(-1).code() == status_code::token_out_of_range);
    CHECK(idx.append(5).code() == status_code::token_out_of_range);
    const seq bad = {1, 2, 9};
    const status s = idx.append(bad);
    CHECK(s.code() == status_code::token_out_of_range);
    CHECK(s.index() == 2);
    // Full: fewer than depth free nodes left; the index is unchanged.
    idx.clear();
    status st = status::success();
    int appended = 0;
    for (token_id t = 0; st.ok(); t = (t + 1) % 5) {
      st = idx.append(t);
      appended += st.ok();
    }
    CHECK(st.code() == status_code::buffer_too_small);
    const std::int32_t nodes = idx.size();
    CHECK(idx.append(0).code() == status_code::buffer_too_small);
    CHECK(idx.size() == nodes);
    CHECK(idx.sequence_length() == appended);
    // sync: a context that does not extend the sequence.
    suffix_index j({.depth = 4, .capacity = 64});
    REQUIRE(j.sync(r.history, r.root_token).ok());
    const seq other = {3, 3};
    CHECK(j.sync(std::span<const token_id>(other).first(1), 3).code() == status_code::invalid_argument);
    const seq changed = {1, 2, 3, 1, 9, 4};
    CHECK(j.sync(std::span<const token_id>(changed).first(5), 4).code() == status_code::invalid_argument);
    j.begin_sequence();
    CHECK(j.sync(std::span<const token_id>(other).first(1), 3).ok());
  }
  SECTION("suffix tree builder") {
    suffix_index idx({.depth = 4, .capacity = 64});
    CHECK(suffix_tree_builder({.max_pattern = 4}).build(idx, r, out).code() == status_code::invalid_argument);
    CHECK(suffix_tree_builder({.min_pattern = 0}).build(idx, r, out).code() == status_code::invalid_argument);
    CHECK(suffix_tree_builder({.max_pattern = 2, .max_nodes = 0}).build(idx, r, out).code() ==
          status_code::invalid_argument);
    CHECK(idx.sequence_length() == 0);  // nothing appended on a bad option
    // draft() needs the root as the newest indexed token.
    suffix_tree_builder b({.max_pattern = 2});
    CHECK(b.draft(idx, 2, out).code() == status_code::invalid_argument);
    REQUIRE(b.build(idx, r, out).ok());
    CHECK(b.draft(idx, 1, out).code() == status_code::invalid_argument);
    REQUIRE(b.draft(idx, 2, out).ok());
    // "1 2" occurred before, followed by 3: a drafted 3 (then 1, 2 up to depth 4 - 2).
    REQUIRE(out.size() >= 2);
    CHECK(out.tree.token(1) == 3);
    CHECK(b.last_match().length == 2);
  }
}

TEST_CASE("model-free drafts are lossless through a speculative_session") {
  SECTION("greedy equals plain greedy decoding; drafts get accepted on a cycling target") {
    markov_target tgt{{.V = 6, .seed = 17, .zero_frac = 0.0}};
    const seq prompt = {1, 4, 2, 5, 1, 4};
    // Plain greedy reference.
    seq ref, ctx = prompt;
    std::vector<float> row(6);
    for (int k = 0; k < 120; ++k) {
      tgt.law(ctx, row.data());
      const auto t = static_cast<token_id>(std::max_element(row.begin(), row.end()) - row.begin());
      ref.push_back(t);
      ctx.push_back(t);
    }
    session_options o;
    o.vocab_size = 6;
    o.max_tokens = 120;
    o.sampling.temperature = 0.0f;
    speculative_session s1(prompt_lookup_builder({.max_depth = 8, .max_nodes = 16, .vocab_size = 6}), o);
    int none = 0;
    const auto out1 = s1.generate(none, tgt, prompt);
    CHECK(std::equal(out1.begin(), out1.end(), ref.begin(), ref.end()));
    CHECK(s1.stats().accepted > 60);
    suffix_index idx({.depth = 16, .capacity = 4096, .vocab_size = 6});
    speculative_session s2(suffix_tree_builder({.max_depth = 8, .max_nodes = 16}), o);
    const auto out2 = s2.generate(idx, tgt, prompt);
    CHECK(std::equal(out2.begin(), out2.end(), ref.begin(), ref.end()));
    CHECK(s2.stats().accepted > 60);
    std::printf("lossless greedy: prompt lookup %lld rounds, suffix %lld rounds for 120 tokens\n",
                static_cast<long long>(s1.stats().rounds), static_cast<long long>(s2.stats().rounds));
  }
  SECTION("temperature 1: the first three tokens follow the target's law (chi-square, seed printed)") {
    const std::uint64_t seed = 20261126;
    std::printf("model-free law: seed %llu\n", static_cast<unsigned long long>(seed));
    markov_target tgt{{.V = 3, .seed = 5, .zero_frac = 0.1}};
    const seq prompt = {0, 1, 2, 0, 1, 2, 0, 1};
    // Exact law of 3 tokens.
    std::vector<double> law(27);
    std::vector<float> r0(3), r1(3), r2(3);
    for (int c = 0; c < 27; ++c) {
      seq ctx = prompt;
      const token_id a = c / 9, b = c / 3 % 3, d = c % 3;
      tgt.law(ctx, r0.data());
      ctx.push_back(a);
      tgt.law(ctx, r1.data());
      ctx.push_back(b);
      tgt.law(ctx, r2.data());
      law[static_cast<std::size_t>(c)] = static_cast<double>(r0[static_cast<std::size_t>(a)]) *
                                         r1[static_cast<std::size_t>(b)] * r2[static_cast<std::size_t>(d)];
    }
    session_options o;
    o.vocab_size = 3;
    o.max_tokens = 3;
    o.sampling.temperature = 1.0f;
    for (int which = 0; which < 2; ++which) {
      std::vector<std::int64_t> counts(27, 0);
      std::int64_t accepted = 0;
      speculative_session s1(prompt_lookup_builder({.max_depth = 3, .max_nodes = 8}), o);
      speculative_session s2(suffix_tree_builder({.max_depth = 3, .max_nodes = 8}), o);
      suffix_index idx({.depth = 12, .capacity = 1 << 16});
      int none = 0;
      for (int t = 0; t < 60000; ++t) {
        seq out;
        if (which == 0) {
          REQUIRE(s1.start(prompt, seed + static_cast<std::uint64_t>(t)).ok());
          while (!s1.done()) REQUIRE(s1.round(none, tgt).ok());
          const auto g = s1.generated_tokens();
          out.assign(g.begin(), g.end());
          accepted += s1.stats().accepted;
        } else {
          REQUIRE(s2.start(prompt, seed + static_cast<std::uint64_t>(t)).ok());
          idx.begin_sequence();  // the index keeps earlier trials' text
          while (!s2.done()) {
            const status st = s2.round(idx, tgt);
            if (!st.ok()) FAIL(st.message());
          }
          const auto g = s2.generated_tokens();
          out.assign(g.begin(), g.end());
          accepted += s2.stats().accepted;
          if (idx.size() + 64 > idx.capacity()) idx.clear();
        }
        REQUIRE(out.size() == 3);
        ++counts[static_cast<std::size_t>(out[0] * 9 + out[1] * 3 + out[2])];
      }
      const auto f = vtest::chi_square(counts, law, 0);
      std::printf("model-free law %s: chi2 %.1f df %d p %.3g tv %.4f, accepted drafts %lld\n",
                  which == 0 ? "prompt lookup" : "suffix tree", f.chi2, f.df, f.p_value, f.tv,
                  static_cast<long long>(accepted));
      CHECK_FALSE(f.impossible);
      CHECK(f.p_value > 1e-4);
      CHECK(accepted > 1000);
    }
  }
}
