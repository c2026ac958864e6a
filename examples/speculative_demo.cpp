// End-to-end speculative decoding on the shipped default model.
//
// The target is an order-6 character n-gram model and the drafter an
// order-3 one, both trained at start-up on examples/data/corpus.txt. Each
// round: the drafter grows a token tree, the tree's ancestor mask and depth
// positions drive one "forward pass" of the target over all nodes (each node
// sees only its ancestors, read from the mask), the verifier accepts a path
// plus one token, and the accepted entries of a paged KV cache are compacted
// in place. Two runs:
//   1. sampled drafts (i.i.d.) verified with multi-step speculative sampling:
//      the output follows the target distribution exactly;
//   2. top-k drafts verified greedily: the output is token-identical to plain
//      greedy decoding of the target, which the demo checks;
//   3. a measurement of 1: the first emitted token's law over 20000 rounds
//      against the target's own distribution (total variation distance).
// Exits non-zero if a check fails.
// Usage: speculative_demo [corpus.txt] [tokens=400] [seed=7]
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

#include <specdec/specdec.hpp>

#include "ngram_model.hpp"

#ifndef SPECDEC_DEMO_CORPUS
#define SPECDEC_DEMO_CORPUS "examples/data/corpus.txt"
#endif

namespace {

using specdec::node_id;
using specdec::token_id;
constexpr int V = demo::vocab_size;

// A probability drafter over the n-gram model: the context of a tree node is
// the committed text followed by the node's root-to-node path (whose first
// token, the root, is the last committed token itself).
struct ngram_drafter {
  const demo::ngram_model* model;
  const std::vector<token_id>* committed;
  std::vector<token_id> ctx;
  std::vector<float> row = std::vector<float>(V);

  std::span<const float> probabilities(const specdec::draft_context& c) {
    ctx.assign(committed->begin(), committed->end());
    ctx.insert(ctx.end(), c.path.begin() + 1, c.path.end());
    model->next_distribution(ctx, row);
    return row;
  }
};
static_assert(specdec::probability_drafter<ngram_drafter>);

// The toy model's key/value for a token at a position: what a real target
// would write into its KV cache during the forward pass.
float kv_value(token_id t, std::int64_t pos, std::int64_t layer, std::int64_t head, std::int64_t d) {
  return static_cast<float>(t) + 0.001f * static_cast<float>(pos) + 0.1f * static_cast<float>(layer * 4 + head) +
         0.01f * static_cast<float>(d);
}

// A paged KV cache (pages of 16 positions, scattered through the pool).
struct paged_cache {
  static constexpr std::int64_t layers = 2, heads = 2, head_dim = 8, page = 16, pages = 64;
  std::vector<float> pool = std::vector<float>(pages * layers * page * heads * head_dim, -1.0f);
  std::vector<std::int32_t> block_table;
  paged_cache() {
    for (std::int32_t b = 0; b < pages; ++b) block_table.push_back((b * 37) % static_cast<std::int32_t>(pages));
  }
  specdec::kv_tensor<float> tensor() {
    return specdec::make_kv_tensor_paged_nhd(pool.data(), pages, layers, page, heads, head_dim);
  }
  specdec::kv_position_map map() const { return specdec::paged_positions(block_table.data(), pages, page, pages); }
  float& at(std::int64_t pos, std::int64_t l, std::int64_t h, std::int64_t d) {
    const std::int64_t phys = block_table[static_cast<std::size_t>(pos / page)];
    return pool[static_cast<std::size_t>((((phys * layers + l) * page + pos % page) * heads + h) * head_dim + d)];
  }
  std::int64_t capacity() const { return pages * page; }
};

struct run_stats {
  std::int64_t rounds = 0, tokens = 0, nodes = 0;
  std::vector<std::int64_t> accepted_hist = std::vector<std::int64_t>(16, 0);
};

// One speculative decoding run. Returns the generated tokens.
template <class Builder>
std::vector<token_id> speculate(const demo::ngram_model& target, const demo::ngram_model& draft_model,
                                const std::vector<token_id>& prompt, std::int64_t n_tokens, Builder& builder,
                                specdec::verify_mode mode, std::uint64_t seed, run_stats& st) {
  paged_cache cache;
  std::vector<token_id> committed(prompt);
  // The KV of every committed token but the last is in the cache; the last
  // is the root of the next tree and is scored in the verification pass.
  specdec::position_id cache_len = static_cast<specdec::position_id>(committed.size()) - 1;
  for (specdec::position_id pos = 0; pos < cache_len; ++pos)
    for (std::int64_t l = 0; l < paged_cache::layers; ++l)
      for (std::int64_t h = 0; h < paged_cache::heads; ++h)
        for (std::int64_t d = 0; d < paged_cache::head_dim; ++d)
          cache.at(pos, l, h, d) = kv_value(committed[static_cast<std::size_t>(pos)], pos, l, h, d);

  ngram_drafter drafter{&draft_model, &committed, {}};
  specdec::drafted_tree tree;
  std::vector<std::byte> workspace;
  std::vector<float> p, q;
  std::vector<std::uint64_t> mask;
  std::vector<std::int64_t> positions;
  std::vector<node_id> path(64);
  std::vector<token_id> emitted(64);
  std::vector<specdec::position_id> keep(64);
  std::vector<token_id> ctx;

  while (static_cast<std::int64_t>(committed.size() - prompt.size()) < n_tokens) {
    const auto round = static_cast<std::uint32_t>(st.rounds);
    // 1. Draft. The builder derives its own stream (rng_purpose::draft) from
    //    the round's key, so drafting never reuses the verifier's uniforms.
    builder.set_rng(specdec::rng_stream{seed, 0, round});
    specdec::throw_if_error(builder.build(drafter, committed.back(), tree));
    const std::int32_t n = tree.size();
    const auto parent = tree.tree.parents();
    const auto tokens = tree.tree.tokens();

    // 2. Lay out: positions and the packed ancestor mask.
    positions.resize(static_cast<std::size_t>(n));
    specdec::throw_if_error(specdec::build_positions<specdec::position_id>(parent, cache_len, positions));
    const std::int64_t words = specdec::mask_words_per_row<std::uint64_t>(n);
    mask.resize(static_cast<std::size_t>(n * words));
    specdec::throw_if_error(specdec::build_packed_mask<std::uint64_t>(parent, mask));

    // 3. Target "forward pass" over all nodes: node i's context is the cache
    //    plus the nodes its mask row allows (its ancestors and itself), in
    //    position order; its KV goes to verification slot cache_len + i.
    p.resize(static_cast<std::size_t>(n) * V);
    q.resize(static_cast<std::size_t>(n) * V);
    for (std::int32_t i = 0; i < n; ++i) {
      ctx.assign(committed.begin(), committed.end() - 1);
      for (std::int32_t j = 0; j < n; ++j)
        if (specdec::mask_test(mask.data() + i * words, j)) ctx.push_back(tokens[static_cast<std::size_t>(j)]);
      target.next_distribution(ctx, std::span<float>(p).subspan(static_cast<std::size_t>(i) * V, V));
      // q row i: the draft distribution that produced node i's children.
      draft_model.next_distribution(ctx, std::span<float>(q).subspan(static_cast<std::size_t>(i) * V, V));
      for (std::int64_t l = 0; l < paged_cache::layers; ++l)
        for (std::int64_t h = 0; h < paged_cache::heads; ++h)
          for (std::int64_t d = 0; d < paged_cache::head_dim; ++d)
            cache.at(cache_len + i, l, h, d) =
                kv_value(tokens[static_cast<std::size_t>(i)], positions[static_cast<std::size_t>(i)], l, h, d);
    }

    // 4. Verify.
    workspace.resize(specdec::verify_workspace_size(V, n));
    specdec::verify_params vp;
    vp.mode = mode;
    vp.seed = seed;
    vp.round = round;
    specdec::verify_result res;
    specdec::throw_if_error(specdec::verify_tree(tree.tree.view(), specdec::make_view<const float>(p.data(), n, V),
                                                 specdec::make_view<const float>(q.data(), n, V), vp, workspace, path,
                                                 emitted, res));

    // 5. Commit: keep the root and the accepted nodes' KV, compacted in place.
    std::int32_t kept = 0;
    specdec::throw_if_error(specdec::keep_indices_from_path(
        parent, std::span<const node_id>(path).first(static_cast<std::size_t>(res.accepted) + 1), {}, cache_len, keep,
        kept));
    const specdec::kv_tensor<float> tensors[1] = {cache.tensor()};
    specdec::throw_if_error(
        specdec::commit_kv<float>(tensors, cache.map(), cache_len,
                                  std::span<const specdec::position_id>(keep).first(static_cast<std::size_t>(kept))));
    committed.insert(committed.end(), emitted.begin(), emitted.begin() + res.accepted + 1);
    cache_len += kept;
    if (cache_len + 64 >= cache.capacity()) break;  // the demo's cache is small

    ++st.rounds;
    st.tokens += res.accepted + 1;
    st.nodes += n;
    ++st.accepted_hist[static_cast<std::size_t>(res.accepted)];
  }

  // The compacted cache must hold exactly the committed tokens at their positions.
  for (specdec::position_id pos = 0; pos < cache_len; ++pos)
    for (std::int64_t l = 0; l < paged_cache::layers; ++l)
      for (std::int64_t h = 0; h < paged_cache::heads; ++h)
        for (std::int64_t d = 0; d < paged_cache::head_dim; ++d)
          if (cache.at(pos, l, h, d) != kv_value(committed[static_cast<std::size_t>(pos)], pos, l, h, d)) {
            std::fprintf(stderr, "KV cache mismatch at position %lld\n", static_cast<long long>(pos));
            std::exit(1);
          }
  return {committed.begin() + static_cast<std::ptrdiff_t>(prompt.size()), committed.end()};
}

// topk_tree_builder is deterministic (no rng): give it the sampled builder's interface.
struct topk_adapter {
  specdec::topk_tree_builder b;
  void set_rng(specdec::rng_stream) {}
  specdec::status build(ngram_drafter& d, token_id root, specdec::drafted_tree& out) { return b.build(d, root, out); }
};

// Losslessness, measured: verify `trials` fresh trees after the same context
// and compare the law of the first emitted token with the target's own next-
// token distribution. Returns the total variation distance.
double first_token_tv(const demo::ngram_model& target, const demo::ngram_model& draft_model,
                      const std::vector<token_id>& context, std::uint64_t seed, int trials) {
  specdec::sampled_tree_options so;
  so.widths = {3, 2};
  so.vocab_size = V;
  specdec::sampled_tree_builder builder(so);
  ngram_drafter drafter{&draft_model, &context, {}};
  specdec::drafted_tree tree;
  std::vector<float> p, q;
  std::vector<std::byte> workspace;
  std::vector<node_id> path(8);
  std::vector<token_id> emitted(8), ctx;
  std::vector<double> counts(V, 0.0);
  for (int r = 0; r < trials; ++r) {
    builder.set_rng(specdec::rng_stream{seed, 1, static_cast<std::uint32_t>(r)});
    specdec::throw_if_error(builder.build(drafter, context.back(), tree));
    const std::int32_t n = tree.size();
    p.resize(static_cast<std::size_t>(n) * V);
    q.resize(static_cast<std::size_t>(n) * V);
    for (std::int32_t i = 0; i < n; ++i) {  // context + the node's root path (root = context.back())
      ctx.assign(context.begin(), context.end() - 1);
      std::vector<token_id> up;
      for (node_id u = i; u >= 0; u = tree.tree.parent(u)) up.push_back(tree.tree.token(u));
      ctx.insert(ctx.end(), up.rbegin(), up.rend());
      target.next_distribution(ctx, std::span<float>(p).subspan(static_cast<std::size_t>(i) * V, V));
      draft_model.next_distribution(ctx, std::span<float>(q).subspan(static_cast<std::size_t>(i) * V, V));
    }
    workspace.resize(specdec::verify_workspace_size(V, n));
    specdec::verify_params vp;
    vp.seed = seed;
    vp.request = 1;
    vp.round = static_cast<std::uint32_t>(r);
    specdec::verify_result res;
    specdec::throw_if_error(specdec::verify_tree(tree.tree.view(), specdec::make_view<const float>(p.data(), n, V),
                                                 specdec::make_view<const float>(q.data(), n, V), vp, workspace, path,
                                                 emitted, res));
    counts[static_cast<std::size_t>(emitted[0])] += 1.0;
  }
  std::vector<float> want(V);
  target.next_distribution(context, want);
  double tv = 0;
  for (int t = 0; t < V; ++t)
    tv += 0.5 * std::abs(counts[static_cast<std::size_t>(t)] / trials - want[static_cast<std::size_t>(t)]);
  return tv;
}

std::string decode(const std::vector<token_id>& t) {
  std::string s;
  for (auto x : t) s += demo::token_to_char(x);
  return s;
}

void report(const char* name, const run_stats& st) {
  std::printf("%s: %lld tokens in %lld target passes = %.2f tokens/pass (%.1f tree nodes/pass)\n", name,
              static_cast<long long>(st.tokens), static_cast<long long>(st.rounds),
              static_cast<double>(st.tokens) / static_cast<double>(st.rounds),
              static_cast<double>(st.nodes) / static_cast<double>(st.rounds));
  std::printf("  accepted drafts per pass:");
  for (std::size_t a = 0; a < st.accepted_hist.size(); ++a)
    if (st.accepted_hist[a] > 0) std::printf("  %zu:%lld", a, static_cast<long long>(st.accepted_hist[a]));
  std::printf("\n");
}

}  // namespace

int main(int argc, char** argv) {
  const std::string corpus_path = argc > 1 ? argv[1] : SPECDEC_DEMO_CORPUS;
  const std::int64_t n_tokens = argc > 2 ? std::atoll(argv[2]) : 400;
  const std::uint64_t seed = argc > 3 ? std::strtoull(argv[3], nullptr, 10) : 7;

  const auto corpus = demo::encode(demo::read_file(corpus_path));
  const demo::ngram_model target(corpus, 6, 1.0f);
  const demo::ngram_model draft(corpus, 3, 1.0f);
  const auto prompt = demo::encode("Speculative decoding");
  std::printf("specdec %d.%d.%d demo: target = order-6 char n-gram, drafter = order-3, V = %d, corpus %zu chars\n",
              specdec::header_version().major, specdec::header_version().minor, specdec::header_version().patch, V,
              corpus.size());

  // 1. Sampled tree (widths 3,2,2,1: up to 34 nodes), MSS verification.
  specdec::sampled_tree_options so;
  so.mode = specdec::draft_mode::iid;
  so.widths = {3, 2, 2, 1};
  so.vocab_size = V;
  specdec::sampled_tree_builder sampled(so);
  run_stats s1;
  const auto out1 = speculate(target, draft, prompt, n_tokens, sampled, specdec::verify_mode::sampled_iid, seed, s1);
  std::printf("\n--- sampled drafts + multi-step speculative sampling (lossless) ---\n%s%s\n", decode(prompt).c_str(),
              decode(out1).c_str());
  report("sampled", s1);

  // 2. Top-2 tree of depth 4 (31 nodes), greedy verification, against plain greedy decoding.
  topk_adapter topk{specdec::topk_tree_builder({.k = 2, .depth = 4, .vocab_size = V})};
  run_stats s2;
  const auto out2 = speculate(target, draft, prompt, n_tokens, topk, specdec::verify_mode::greedy, seed, s2);
  std::vector<token_id> ref(prompt);
  std::vector<float> row(V);
  while (ref.size() < prompt.size() + out2.size()) {
    target.next_distribution(ref, row);
    token_id best = 0;
    for (token_id t = 1; t < V; ++t)
      if (row[static_cast<std::size_t>(t)] > row[static_cast<std::size_t>(best)]) best = t;
    ref.push_back(best);
  }
  const bool identical = std::equal(out2.begin(), out2.end(), ref.begin() + static_cast<std::ptrdiff_t>(prompt.size()));
  std::printf("\n--- top-2 drafts + greedy verification ---\n%s%s\n", decode(prompt).c_str(), decode(out2).c_str());
  report("greedy", s2);
  std::printf("greedy speculative output identical to plain greedy decoding: %s\n", identical ? "yes" : "NO");

  // 3. The law of the first emitted token after "...decoding is t" over 20000
  //    independent rounds, against the target's own next-token distribution.
  //    Sampling noise alone stays below 0.01 here; the drafter's own
  //    law is much further away, so a biased verifier would show.
  const auto ctx = demo::encode("Speculative decoding is t");
  const double tv = first_token_tv(target, draft, ctx, seed, 20000);
  std::vector<float> pt(V), pd(V);
  target.next_distribution(ctx, pt);
  draft.next_distribution(ctx, pd);
  double tv_draft = 0;
  for (int t = 0; t < V; ++t)
    tv_draft += 0.5 * std::abs(pt[static_cast<std::size_t>(t)] - pd[static_cast<std::size_t>(t)]);
  std::printf("first-token law over 20000 verified trees: TV to target %.4f (draft vs target: %.4f)\n", tv, tv_draft);
  std::printf("KV cache after in-place compaction matches the committed text: yes\n");
  return identical && tv < 0.03 ? 0 : 1;
}
