// Decoding with the example models: autoregressive, and speculative rounds
// composed from specdec's primitives (draft -> positions + packed mask ->
// target tree forward -> verify -> KV / SSM commit). Shared by
// examples/model_demo.cpp and tests/models.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <ctime>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include <specdec/specdec.hpp>

#include "model.hpp"

namespace models {

//! Positions the KV caches hold: the models' context plus room for a tree.
inline constexpr std::int64_t cache_capacity = 512;
//! Largest tree (before any pruning) a drafter call may address.
inline constexpr std::int32_t max_tree_nodes = 128;

//! Row-wise softmax of logits / temperature (temperature > 0), in place.
inline void softmax_rows(std::span<float> rows, std::int64_t vocab, float temperature) {
  for (std::size_t r = 0; r * static_cast<std::size_t>(vocab) < rows.size(); ++r) {
    float* x = rows.data() + r * static_cast<std::size_t>(vocab);
    float mx = -INFINITY;
    for (std::int64_t t = 0; t < vocab; ++t) mx = std::max(mx, x[t] / temperature);
    double sum = 0.0;
    for (std::int64_t t = 0; t < vocab; ++t) sum += (x[t] = std::exp(x[t] / temperature - mx));
    const auto inv = static_cast<float>(1.0 / sum);
    for (std::int64_t t = 0; t < vocab; ++t) x[t] *= inv;
  }
}

//! The drafter model as a specdec::probability_drafter. Node u of the tree
//! being built is one forward step at position cache_len + depth whose KV
//! goes to tree slot u and whose mask row is its parent's row plus bit u,
//! so every node attends to exactly its committed context and root path.
//! After a round, catch_up() replaces the tree slots by the committed tokens.
struct model_drafter {
  const weights* w = nullptr;
  state st;
  scratch sc;
  const specdec::drafted_tree* tree = nullptr;  //!< the tree being grown (read for parents)
  float temperature = 1.0f;
  std::int64_t calls = 0;  //!< forward invocations
  static constexpr std::int64_t words = (max_tree_nodes + 63) / 64;
  std::vector<std::uint64_t> rows = std::vector<std::uint64_t>(static_cast<std::size_t>(max_tree_nodes * words));
  std::vector<float> row;

  model_drafter(const weights& m, float temp) : w(&m), st(m.cfg, cache_capacity), temperature(temp) {}

  std::span<const float> probabilities(const specdec::draft_context& c) {
    const node_id u = c.node;
    if (u < 0 || u >= max_tree_nodes) throw std::invalid_argument("model_drafter: tree too large");
    std::uint64_t* r = rows.data() + u * words;
    const node_id par = tree->tree.parent(u);
    if (par >= 0)
      std::copy_n(rows.data() + par * words, words, r);
    else
      std::fill_n(r, words, 0);
    r[u / 64] |= std::uint64_t{1} << (u % 64);
    const token_id tok = c.path.back();
    const std::int64_t pos = st.cache_len + c.depth;
    const node_id none = -1;
    row.resize(static_cast<std::size_t>(w->cfg.vocab));
    forward(*w, st, batch{{&tok, 1}, {&pos, 1}, {&none, 1}, {r, static_cast<std::size_t>(words)}, words, u}, row, sc);
    ++calls;
    softmax_rows(row, w->cfg.vocab, temperature);
    return row;
  }

  //! Commits the round's accepted tokens (root first) by recomputing them as a chain.
  void catch_up(std::span<const token_id> accepted) {
    prefill(*w, st, accepted, sc);
    ++calls;
  }
};
static_assert(specdec::probability_drafter<model_drafter>);

//! Per-stage time of the speculative rounds.
struct stage_times {
  double draft = 0, mask = 0, forward = 0, verify = 0, commit = 0;
  double total() const { return draft + mask + forward + verify + commit; }
};

struct decode_stats {
  std::int64_t tokens = 0, target_calls = 0, drafter_calls = 0, rounds = 0;
  double seconds = 0;  //!< CPU seconds
  stage_times stages;
};

//! Which tree a speculative run drafts.
enum class tree_kind { chain, iid_tree, topk_tree, beam_tree };

struct spec_options {
  tree_kind kind = tree_kind::iid_tree;
  float temperature = 1.0f;                         //!< 0: greedy (argmax, ties to the lowest id)
  std::vector<std::int32_t> widths = {3, 2, 2, 1};  //!< iid tree
  std::int32_t chain_length = 4;
  std::int32_t topk_k = 2, topk_depth = 4;
  std::int32_t beam_k = 4, beam_width = 4, beam_depth = 5, beam_budget = 32;
  std::uint64_t seed = 7;
  std::uint32_t request = 0;
  //! Rule for i.i.d.-drafted chains and trees at temperature > 0: sampled_iid
  //! (token-wise / MSS), block (chains only) or traversal. All lossless.
  specdec::verify_mode sampled_rule = specdec::verify_mode::sampled_iid;
};

namespace detail {
// Process CPU time: the machines this runs on are often shared, and CPU time
// is what the decoding itself costs (equal to wall time on an idle machine).
struct clock {
  using time_point = double;
  static double now() { return static_cast<double>(std::clock()) / CLOCKS_PER_SEC; }
};
inline double since(double t0) { return clock::now() - t0; }

// Verification rows for the target: logits for greedy, else probabilities.
inline specdec::verify_mode target_mode(const spec_options& o) {
  if (o.temperature == 0.0f) return specdec::verify_mode::greedy;
  return o.kind == tree_kind::chain || o.kind == tree_kind::iid_tree ? o.sampled_rule
                                                                     : specdec::verify_mode::deterministic;
}
}  // namespace detail

//! Plain decoding: one target call per token. Sampling (temperature 1) and
//! greedy decoding both go through specdec::verify_tree on a root-only tree,
//! so they use the same Philox streams and tie-break as the speculative runs.
inline std::vector<token_id> generate_autoregressive(const weights& target, std::span<const token_id> prompt,
                                                     std::int64_t n_tokens, const spec_options& o, decode_stats& st) {
  const auto t0 = detail::clock::now();
  const std::int64_t V = target.cfg.vocab;
  state s(target.cfg, cache_capacity);
  scratch sc;
  prefill(target, s, prompt.first(prompt.size() - 1), sc);
  std::vector<token_id> out(prompt.begin(), prompt.end());
  std::vector<float> p(static_cast<std::size_t>(V));
  std::vector<std::byte> ws(specdec::verify_workspace_size(V, 1));
  const node_id parent[1] = {-1};
  const std::uint64_t mask[1] = {1};
  node_id path[1];
  token_id emitted[1];
  specdec::verify_params vp;
  vp.mode = o.temperature == 0.0f ? specdec::verify_mode::greedy : specdec::verify_mode::sampled_iid;
  vp.seed = o.seed;
  vp.request = o.request;
  for (std::int64_t i = 0; i < n_tokens; ++i) {
    const token_id root = out.back();
    const std::int64_t pos = s.cache_len;
    forward(target, s, batch{{&root, 1}, {&pos, 1}, parent, mask, 1, 0}, p, sc);
    if (o.temperature != 0.0f) softmax_rows(p, V, o.temperature);
    vp.round = static_cast<std::uint32_t>(i);
    specdec::verify_result res;
    const specdec::tree_view tv{&root, parent, nullptr, nullptr, 1};
    specdec::throw_if_error(
        specdec::verify_tree(tv, specdec::make_view<const float>(p.data(), 1, V), {}, vp, ws, path, emitted, res));
    commit(target, s, parent, path);
    out.push_back(emitted[0]);
    ++st.target_calls;
  }
  st.tokens += n_tokens;
  st.rounds += n_tokens;
  st.seconds += detail::since(t0);
  return {out.begin() + static_cast<std::ptrdiff_t>(prompt.size()), out.end()};
}

//! Speculative decoding of at least n_tokens tokens after `prompt` (the
//! last round may overshoot; the result is cut to n_tokens). `on_round` is
//! called after every round with the tokens emitted so far (progress).
inline std::vector<token_id> generate_speculative(const weights& target, const weights& draft,
                                                  std::span<const token_id> prompt, std::int64_t n_tokens,
                                                  const spec_options& o, decode_stats& st,
                                                  const std::function<void(std::int64_t)>& on_round = {}) {
  using detail::clock;
  using detail::since;
  const auto t_start = clock::now();
  const std::int64_t V = target.cfg.vocab;
  state s(target.cfg, cache_capacity);
  scratch sc;
  model_drafter drafter(draft, o.temperature == 0.0f ? 1.0f : o.temperature);
  const auto head = prompt.first(prompt.size() - 1);
  prefill(target, s, head, sc);
  prefill(draft, drafter.st, head, drafter.sc);
  std::vector<token_id> out(prompt.begin(), prompt.end());

  specdec::sampled_tree_options so;
  so.mode = specdec::draft_mode::iid;
  so.vocab_size = V;
  so.widths =
      o.kind == tree_kind::chain ? std::vector<std::int32_t>(static_cast<std::size_t>(o.chain_length), 1) : o.widths;
  specdec::sampled_tree_builder sampled(so);
  const bool greedy_chain = o.kind == tree_kind::chain && o.temperature == 0.0f;
  specdec::topk_tree_builder topk(
      {.k = greedy_chain ? 1 : o.topk_k, .depth = greedy_chain ? o.chain_length : o.topk_depth, .vocab_size = V});
  specdec::beam_tree_builder beam(
      {.k = o.beam_k, .width = o.beam_width, .depth = o.beam_depth, .budget = o.beam_budget, .vocab_size = V});
  specdec::drafted_tree tree;
  drafter.tree = &tree;
  std::vector<float> p, q;
  std::vector<std::int64_t> positions;
  std::vector<std::uint64_t> mask;
  std::vector<std::byte> ws;
  std::vector<node_id> path(max_tree_nodes);
  std::vector<token_id> emitted(max_tree_nodes);
  specdec::verify_params vp;
  vp.mode = detail::target_mode(o);
  vp.seed = o.seed;
  vp.request = o.request;
  const std::int64_t calls0 = drafter.calls;

  while (static_cast<std::int64_t>(out.size() - prompt.size()) < n_tokens) {
    const auto round = static_cast<std::uint32_t>(st.rounds);
    // 1. Draft.
    auto t0 = clock::now();
    const bool use_sampled = o.kind == tree_kind::iid_tree || (o.kind == tree_kind::chain && !greedy_chain);
    if (use_sampled) {
      q.assign(static_cast<std::size_t>(max_tree_nodes * V), 1.0f / static_cast<float>(V));
      specdec::draft_round dr;
      dr.root_token = out.back();
      dr.rng = specdec::rng_stream{o.seed, o.request, round};
      dr.q_rows = specdec::make_view<float>(q.data(), max_tree_nodes, V);
      specdec::throw_if_error(sampled.build(drafter, dr, tree));
    } else if (o.kind == tree_kind::beam_tree) {
      specdec::throw_if_error(beam.build(drafter, out.back(), tree));
    } else {
      specdec::throw_if_error(topk.build(drafter, out.back(), tree));
    }
    st.stages.draft += since(t0);
    const std::int32_t n = tree.size();
    const auto parent = tree.tree.parents();
    const auto tokens = tree.tree.tokens();

    // 2. Positions (cache_len + depth) and the packed ancestor mask.
    t0 = clock::now();
    positions.resize(static_cast<std::size_t>(n));
    specdec::throw_if_error(specdec::build_positions<std::int64_t>(parent, s.cache_len, positions));
    const std::int64_t words = specdec::mask_words_per_row<std::uint64_t>(n);
    mask.resize(static_cast<std::size_t>(n * words));
    specdec::throw_if_error(specdec::build_packed_mask<std::uint64_t>(parent, mask));
    st.stages.mask += since(t0);

    // 3. One target pass over every node.
    t0 = clock::now();
    p.resize(static_cast<std::size_t>(n * V));
    forward(target, s, batch{tokens, positions, parent, mask, words, 0}, p, sc);
    ++st.target_calls;
    st.stages.forward += since(t0);

    // 4. Verify (greedy reads logits; the sampled modes read probabilities).
    t0 = clock::now();
    if (o.temperature != 0.0f) softmax_rows(p, V, o.temperature);
    ws.resize(specdec::verify_workspace_size(V, n));
    vp.round = round;
    specdec::verify_result res;
    const auto qv = use_sampled ? specdec::make_view<const float>(q.data(), n, V) : specdec::view2d<const float>{};
    specdec::throw_if_error(specdec::verify_tree(tree.tree.view(), specdec::make_view<const float>(p.data(), n, V), qv,
                                                 vp, ws, path, emitted, res));
    st.stages.verify += since(t0);

    // 5. Commit: the target keeps the accepted path's KV / SSM states; the
    //    drafter recomputes the committed tokens (root + accepted drafts).
    t0 = clock::now();
    const auto acc = static_cast<std::size_t>(res.accepted) + 1;
    commit(target, s, parent, std::span<const node_id>(path).first(acc));
    st.stages.commit += since(t0);
    t0 = clock::now();
    std::vector<token_id> kept{out.back()};
    kept.insert(kept.end(), emitted.begin(), emitted.begin() + res.accepted);
    drafter.catch_up(kept);
    st.stages.draft += since(t0);
    out.insert(out.end(), emitted.begin(), emitted.begin() + static_cast<std::ptrdiff_t>(acc));
    ++st.rounds;
    if (on_round) on_round(static_cast<std::int64_t>(out.size() - prompt.size()));
  }
  out.resize(prompt.size() + static_cast<std::size_t>(n_tokens));
  st.tokens += n_tokens;
  st.drafter_calls += drafter.calls - calls0;
  st.seconds += since(t_start);
  return {out.begin() + static_cast<std::ptrdiff_t>(prompt.size()), out.end()};
}

}  // namespace models
