//! \file
//! The drafters of the llama.cpp example, each filling a draft_output for
//! the round whose root is the newest committed token: prompt lookup and
//! SuffixDecoding through specdec's model-free primitives, and a llama.cpp
//! model drafting one batched llama_decode per tree level.
#pragma once

#include <llama.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "llama_adapter.hpp"
#include "specdec/core/philox.hpp"
#include "specdec/draft/drafter.hpp"
#include "specdec/draft/prompt_lookup.hpp"
#include "specdec/draft/suffix_index.hpp"
#include "specdec/tree/token_tree.hpp"

namespace specdec_llama {

//! What a drafter produced for one round: the tree (root = newest committed
//! token) with per-node draft modes, and for sampled drafts the N x V draft
//! rows q (row u = the distribution u's children were sampled from).
struct draft_output {
  specdec::drafted_tree tree;
  std::vector<float> q;  //!< empty unless children were sampled
  //! A planner's budget for this round (0 = the drafter's own options):
  //! nodes including the root, and depth. Drafters that size their trees
  //! (lookup_drafter, suffix_drafter) honour it.
  std::int32_t max_nodes = 0;
  std::int32_t max_depth = 0;  //!< see max_nodes
};

//! The round of a context whose newest token is the root.
inline specdec::draft_round round_of(std::span<const llama_token> ctx) {
  specdec::draft_round r;
  r.root_token = ctx.back();
  r.history = ctx.first(ctx.size() - 1);
  return r;
}

//! Runs `build()` with the builder's node and depth limits replaced by the
//! round's (`out.max_nodes` > 0: the planner sized this round), then puts
//! the builder's own options back.
template <class Builder, class Build>
specdec::status build_sized(Builder& builder, const draft_output& out, Build build) {
  const auto own = builder.options();
  if (out.max_nodes > 0) {
    auto o = own;
    o.max_nodes = out.max_nodes;
    o.max_depth = out.max_depth;
    builder.set_options(o);
  }
  const specdec::status st = build();
  builder.set_options(own);
  return st;
}

//! Prompt lookup with specdec's library primitive (specdec/draft/
//! prompt_lookup.hpp): the longest suffix of the committed text that
//! occurred before, the continuations of its most recent occurrences merged
//! into a tree of the most confident ones. Deterministic drafts.
struct lookup_drafter {
  specdec::prompt_lookup_builder builder;  //!< options: max_nodes, max_depth, min_prob, ...

  void start() {}
  void draft(std::span<const llama_token> ctx, draft_output& out) {
    out.q.clear();
    check(build_sized(builder, out, [&] { return builder.build(round_of(ctx), out.tree); }), "prompt_lookup_builder");
  }
};

//! SuffixDecoding with specdec's library primitives (specdec/draft/
//! suffix_index.hpp): a suffix trie over the prompt and all text generated
//! so far, kept across runs (start() begins a new sequence), drafting the
//! most frequent continuations of the longest matched suffix. Deterministic
//! drafts.
struct suffix_drafter {
  specdec::suffix_index index;           //!< kept across start() calls
  specdec::suffix_tree_builder builder;  //!< options: max_nodes, max_depth, min_prob, ...

  void start() { index.begin_sequence(); }
  void draft(std::span<const llama_token> ctx, draft_output& out) {
    out.q.clear();
    const specdec::status st = build_sized(builder, out, [&] {
      specdec::status s = builder.build(index, round_of(ctx), out.tree);
      if (s.code() == specdec::status_code::buffer_too_small) {  // full: forget older text, index this one again
        index.clear();
        s = builder.build(index, round_of(ctx), out.tree);
      }
      return s;
    });
    check(st, "suffix_tree_builder");
  }
};

//! Up to `width` distinct tokens drawn one after another from the
//! probability row `row`, each from what is left after zeroing the tokens
//! drawn before (sampling without replacement; `row` is consumed). Draw k
//! uses uniform (node, k) of `rng`. Stops early when no mass is left.
inline std::vector<llama_token> sample_without_replacement(std::span<float> row, std::int32_t width,
                                                           const specdec::rng_stream& rng, std::uint32_t node) {
  std::vector<llama_token> out;
  const auto V = static_cast<std::int64_t>(row.size());
  for (std::int32_t k = 0; k < width; ++k) {
    double total = 0.0;
    for (float x : row) total += static_cast<double>(x);
    if (!(total > 0.0)) break;
    const float un = rng.uniform(node, static_cast<std::uint32_t>(k));
    const llama_token x = specdec::sample_row(specdec::make_view(static_cast<const float*>(row.data()), V), un, total);
    if (x < 0) break;
    row[static_cast<std::size_t>(x)] = 0.0f;
    out.push_back(x);
  }
  return out;
}

//! A model drafter with one batched llama_decode per tree level: level 0
//! catches the draft cache up with the committed text and scores the root;
//! level d scores every node of depth d at once, each in its own sequence
//! (a copy of its parent's sequence plus itself). `widths[d]` children are
//! drafted below each node of depth d: the top-`widths[d]` tokens of the
//! draft logits (deterministic) at temperature 0, or that many samples
//! without replacement from q = softmax(logits / temperature) otherwise.
//! Nodes of the last level are never decoded (their rows are not needed).
class level_drafter {
 public:
  level_drafter(const model& m, const context_options& o, std::vector<std::int32_t> widths, float temperature = 0.0f,
                std::uint64_t seed = 1)
      : ctx_(m, o), widths_(std::move(widths)), temperature_(temperature), seed_(seed) {
    if (widths_.empty()) throw llama_error("level_drafter needs at least one level");
    for (std::int32_t w : widths_)
      if (w < 1) throw llama_error("level_drafter widths must be >= 1");
  }

  context& ctx() noexcept { return ctx_; }

  //! Largest tree this drafter builds: 1 + w0 + w0 w1 + ...
  std::size_t max_nodes() const noexcept {
    std::size_t total = 1, level = 1;
    for (std::int32_t w : widths_) total += (level *= static_cast<std::size_t>(w));
    return total;
  }

  void start() {
    ctx_.reset_memory();
    n_past_ = 0;
    round_ = 0;
    ctx_.reset_counters();
  }

  void draft(std::span<const llama_token> committed, draft_output& out) {
    const auto V = static_cast<std::size_t>(ctx_.n_vocab());
    const bool sampled = temperature_ > 0.0f;
    out.tree.reset(committed.back());
    out.q.clear();
    // Level 0: the committed tokens the draft cache lacks, root last.
    const auto n = static_cast<llama_pos>(committed.size());
    if (n <= n_past_) throw llama_error("level_drafter: the committed text did not grow since the last draft");
    ctx_.prefill(committed.subspan(static_cast<std::size_t>(n_past_)), n_past_);
    n_past_ = n;
    const llama_pos root_pos = n - 1;
    std::vector<specdec::node_id> frontier{0};
    std::vector<llama_seq_id> seq_of{0};  // per node; 0 = committed sequence
    std::vector<const float*> row_of_frontier{ctx_.logits(ctx_.batch_size() - 1)};
    std::vector<float> row(V);
    const specdec::rng_stream rng =
        specdec::for_purpose(specdec::rng_stream{seed_, 0, round_++}, specdec::rng_purpose::draft);
    for (std::size_t level = 0; level < widths_.size(); ++level) {
      std::vector<specdec::node_id> next;
      for (std::size_t f = 0; f < frontier.size(); ++f) {
        const specdec::node_id u = frontier[f];
        expand(out, u, row_of_frontier[f], widths_[level], sampled, rng, row, next);
      }
      if (level + 1 == widths_.size() || next.empty()) break;
      // Decode the new level: each node in a fresh sequence copied from its
      // parent's (the parents' sequences are still alive during the copies).
      std::vector<llama_seq_id> free_ids;
      for (llama_seq_id s = ctx_.options().n_seq_max - 1; s >= 1; --s)
        if (std::none_of(frontier.begin(), frontier.end(),
                         [&](specdec::node_id v) { return seq_of[static_cast<std::size_t>(v)] == s; }))
          free_ids.push_back(s);
      if (free_ids.size() < next.size()) throw llama_error("draft level wider than context_options::n_seq_max allows");
      seq_of.resize(static_cast<std::size_t>(out.tree.size()), -1);
      ctx_.batch_clear();
      for (specdec::node_id c : next) {
        const llama_seq_id s = free_ids.back();
        free_ids.pop_back();
        seq_of[static_cast<std::size_t>(c)] = s;
        llama_memory_seq_cp(ctx_.memory(), seq_of[static_cast<std::size_t>(out.tree.tree.parent(c))], s, -1, -1);
        ctx_.batch_add(out.tree.tree.token(c), root_pos + out.tree.tree.depth(c), {&s, 1}, true);
      }
      for (specdec::node_id v : frontier)  // the parents' sequences are no longer needed
        if (seq_of[static_cast<std::size_t>(v)] > 0)
          llama_memory_seq_rm(ctx_.memory(), seq_of[static_cast<std::size_t>(v)], -1, -1);
      ctx_.decode();
      frontier = next;
      row_of_frontier.clear();
      for (std::int32_t i = 0; i < ctx_.batch_size(); ++i) row_of_frontier.push_back(ctx_.logits(i));
    }
    for (llama_seq_id s = 1; s < ctx_.options().n_seq_max; ++s) llama_memory_seq_rm(ctx_.memory(), s, -1, -1);
    out.q.resize(sampled ? static_cast<std::size_t>(out.tree.size()) * V : 0);
  }

 private:
  // Adds the children of u from its draft logits; for sampled drafts also
  // stores q_u (row u of out.q).
  void expand(draft_output& out, specdec::node_id u, const float* logits, std::int32_t width, bool sampled,
              const specdec::rng_stream& rng, std::vector<float>& row, std::vector<specdec::node_id>& next) {
    const auto V = static_cast<std::int64_t>(row.size());
    const auto lv = specdec::make_view(logits, V);
    if (!sampled) {
      // Top-width by the specdec tie order (value descending, id ascending).
      std::vector<llama_token> best;
      for (std::int32_t k = 0; k < width && k < V; ++k) {
        llama_token b = -1;
        for (std::int64_t i = 0; i < V; ++i) {
          if (std::find(best.begin(), best.end(), static_cast<llama_token>(i)) != best.end()) continue;
          if (b < 0 || logits[i] > logits[b]) b = static_cast<llama_token>(i);
        }
        best.push_back(b);
      }
      for (llama_token x : best) next.push_back(out.tree.add(u, x, 1.0f, 0.0f, specdec::draft_mode::deterministic));
      return;
    }
    const specdec::sampling_params sp{temperature_, 0, 1.0f, 0.0f};
    check(specdec::logits_to_probs_row(lv, specdec::make_view(row.data(), V), sp, {}), "draft logits_to_probs_row");
    if (out.q.size() < static_cast<std::size_t>(u + 1) * row.size()) out.q.resize(max_nodes() * row.size(), 0.0f);
    std::copy(row.begin(), row.end(),
              out.q.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(u) * row.size()));
    for (llama_token x : sample_without_replacement(row, width, rng, static_cast<std::uint32_t>(u)))
      next.push_back(out.tree.add(u, x, 1.0f, 0.0f, specdec::draft_mode::without_replacement));
  }

  context ctx_;
  std::vector<std::int32_t> widths_;
  float temperature_ = 0.0f;
  std::uint64_t seed_ = 1;
  llama_pos n_past_ = 0;
  std::uint32_t round_ = 0;
};

}  // namespace specdec_llama
