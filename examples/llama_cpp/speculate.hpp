//! \file
//! The generation loops of the llama.cpp example: plain decoding (one token
//! per llama_decode) and speculation with any drafter (draft -> one tree
//! pass -> specdec verification -> commit), with the counters the
//! comparison prints.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "drafters.hpp"
#include "llama_adapter.hpp"
#include "specdec/draft/verify_mode.hpp"
#include "specdec/loop/planned_drafts.hpp"
#include "specdec/loop/planner.hpp"
#include "specdec/verify/child_acceptance.hpp"

namespace specdec_llama {

//! Generation settings shared by every method of one comparison.
struct gen_options {
  std::int32_t n_predict = 128;
  float temperature = 0.0f;  //!< 0 = greedy
  std::uint64_t seed = 1;
  bool stop_at_eog = true;
};

//! What one method did.
struct run_stats {
  std::string name;
  std::vector<llama_token> tokens;  //!< generated tokens (at most n_predict)
  std::int64_t target_calls = 0;    //!< llama_decode calls on the target after the prompt
  std::int64_t target_tokens = 0;   //!< tokens (tree nodes) those calls decoded
  std::int64_t draft_calls = 0;     //!< llama_decode calls of a model drafter
  std::int64_t rounds = 0;
  std::int64_t drafted = 0;       //!< draft nodes proposed (root excluded)
  std::int64_t accepted = 0;      //!< draft tokens accepted
  std::int64_t shrunk = 0;        //!< rounds whose tree was cut because llama_decode found no KV cells
  std::int64_t plain_rounds = 0;  //!< planned rounds that were plain decoding steps (no draft, or nothing paid)
  double seconds = 0.0;           //!< wall time of generation (prompt excluded)
  double decode_seconds = 0.0;    //!< of which inside the target's llama_decode
  //! Plain decoding only: per token, the gap between the two largest
  //! logits (how close the greedy choice was to a tie).
  std::vector<float> top2_gap;

  double tokens_per_second() const { return seconds > 0 ? static_cast<double>(tokens.size()) / seconds : 0.0; }
  //! Emitted tokens per target call (accepted drafts + the correction/bonus token).
  double tokens_per_call() const {
    return target_calls > 0 ? static_cast<double>(tokens.size()) / static_cast<double>(target_calls) : 0.0;
  }
  double accepted_per_call() const {
    return target_calls > 0 ? static_cast<double>(accepted) / static_cast<double>(target_calls) : 0.0;
  }
  double calls_per_token() const {
    return tokens.empty() ? 0.0 : static_cast<double>(target_calls) / static_cast<double>(tokens.size());
  }
};

namespace detail {

//! Cuts a drafted tree in place (specdec::keep_draft_within): at most
//! max_nodes nodes in id order, none deeper than max_depth, no children
//! under a node whose path probability is below the planner's threshold for
//! its depth. Without depth or thresholds it keeps the first max_nodes
//! nodes with their ids, so q rows (if any) stay aligned: how a round
//! shrinks when llama_decode finds no KV cells for the whole tree.
inline void cut_draft(specdec::drafted_tree& t, std::int32_t max_nodes,
                      std::int32_t max_depth = std::numeric_limits<std::int32_t>::max(),
                      std::span<const double> min_path_probability = {}) {
  specdec::drafted_tree cut;
  std::vector<specdec::node_id> id;
  check(specdec::keep_draft_within(t, max_nodes, max_depth, min_path_probability, cut, id), "keep_draft_within");
  t = std::move(cut);
}

//! Generated tokens after the prompt, cut at n_predict and after the first
//! end-of-generation token.
inline std::vector<llama_token> generated(const model& m, const std::vector<llama_token>& committed, std::size_t n0,
                                          const gen_options& o) {
  std::vector<llama_token> out;
  for (std::size_t i = n0; i < committed.size() && out.size() < static_cast<std::size_t>(o.n_predict); ++i) {
    out.push_back(committed[i]);
    if (o.stop_at_eog && llama_vocab_is_eog(m.vocab(), committed[i])) break;
  }
  return out;
}

//! Whether the generation is over: n_predict tokens, or an end-of-generation
//! token anywhere among them (a round may commit tokens past it: they are
//! not output, and the loop must stop rather than decode on behind it).
inline bool done(const model& m, const std::vector<llama_token>& committed, std::size_t n0, const gen_options& o) {
  const std::vector<llama_token> g = generated(m, committed, n0, o);
  return g.size() >= static_cast<std::size_t>(o.n_predict) ||
         (o.stop_at_eog && !g.empty() && llama_vocab_is_eog(m.vocab(), g.back()));
}

}  // namespace detail

//! Plain decoding: one llama_decode per token; argmax (lowest id on ties)
//! at temperature 0, otherwise a sample of softmax(logits / T) with the
//! specdec Philox stream (seed, 0, step).
inline run_stats plain_decode(const model& m, tree_target& tgt, std::span<const llama_token> prompt,
                              const gen_options& o) {
  run_stats s;
  s.name = "plain decoding";
  tgt.start(prompt);
  const auto V = static_cast<std::int64_t>(m.n_vocab());
  std::vector<float> probs(static_cast<std::size_t>(V));
  const double d0 = tgt.ctx().decode_seconds();
  std::chrono::steady_clock::duration diagnostics{};
  const auto t0 = std::chrono::steady_clock::now();
  for (std::uint32_t step = 0; !detail::done(m, tgt.committed(), prompt.size(), o); ++step) {
    const auto row = specdec::make_view(tgt.plain_step(), V);
    llama_token t = 0;
    if (o.temperature == 0.0f) {
      t = specdec::argmax_row(row);
      // The top-2 gap is a diagnostic, not decoding: its scan of the
      // vocabulary (about 0.1 ms a token here) is left out of the time.
      const auto g0 = std::chrono::steady_clock::now();
      float second = -INFINITY;
      for (std::int64_t i = 0; i < V; ++i)
        if (i != t) second = std::max(second, row(i));
      s.top2_gap.push_back(row(t) - second);
      diagnostics += std::chrono::steady_clock::now() - g0;
    } else {
      const specdec::sampling_params sp{o.temperature, 0, 1.0f, 0.0f};
      check(specdec::logits_to_probs_row(row, specdec::make_view(probs.data(), V), sp, {}), "logits_to_probs_row");
      const float u = specdec::rng_stream{o.seed, 0, step}.uniform(0, 0);
      check(specdec::sample_row_checked(specdec::make_view(static_cast<const float*>(probs.data()), V), u, &t),
            "sample_row_checked");
    }
    tgt.push(t);
    ++s.rounds;
  }
  s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0 - diagnostics).count();
  s.decode_seconds = tgt.ctx().decode_seconds() - d0;
  s.tokens = detail::generated(m, tgt.committed(), prompt.size(), o);
  s.target_calls = tgt.ctx().calls();
  s.target_tokens = tgt.ctx().decoded_tokens();
  return s;
}

//! Speculation: `draft(committed, out)` proposes a tree each round, the
//! target scores it in one llama_decode, specdec verifies it (greedy at
//! temperature 0, otherwise the lossless mode that matches how the drafts
//! were made, matching_verify_mode) and the accepted path is committed.
//! `draft_ctx` (may be null) is the drafter's context, for its call count.
//! With a `planner` (specdec/loop/planner.hpp), a round that drafted
//! something asks it to size the drafted tree (plan_drafted: the drafts
//! cost microseconds, so the plan can read them): a root-only plan is a
//! plain decoding step, otherwise the tree keeps its first plan-size nodes
//! (model-free builders emit them most confident first); after
//! verification and the commit the planner observes the round (tree, draft
//! confidences, accepted path, llama_decode time of the pass, drafting
//! time, the rest, commit included) and, after a plain step, the draft it
//! skipped with the token the step emitted (observe_skipped).
//! Plans depend on earlier rounds and this round's drafts only, never on
//! this round's target rows, so verification stays exact.
//!
//! `oracle_cut` (temperature 0 only) makes the run a bound rather than a
//! method: each round first scores and verifies the whole draft in a pass
//! that is neither timed nor counted, drops it, and then runs only the path
//! that pass accepted (a plain step when it accepted nothing). That is what
//! a planner that knew this round's target rows would run with this
//! drafter, so no planner of its drafts does better (less the untimed
//! pass's effect on the caches, and batched numerics that may accept a
//! little less in the shorter pass).
template <class Draft>
run_stats speculate(const std::string& name, const model& m, tree_target& tgt, Draft&& draft, context* draft_ctx,
                    std::span<const llama_token> prompt, const gen_options& o,
                    specdec::round_planner* planner = nullptr, bool oracle_cut = false) {
  if (oracle_cut && (planner != nullptr || o.temperature != 0.0f))
    throw llama_error("oracle_cut: temperature 0 and no planner only");
  run_stats s;
  s.name = name;
  tgt.start(prompt);
  const auto V = static_cast<std::int64_t>(m.n_vocab());
  draft_output d;
  std::vector<float> probs;
  std::vector<float> chance;      // child_acceptance of a sampled round, for the planner
  std::vector<std::uint64_t> ws;  // 8-byte aligned verification workspace
  std::vector<specdec::node_id> path;
  std::vector<specdec::token_id> emitted;
  specdec::drafted_tree skipped;  // a draft the planner chose not to verify this round
  specdec::drafted_tree cut;      // oracle_cut: the accepted path of the uncounted pass
  std::chrono::steady_clock::duration uncounted{};
  double uncounted_decode = 0.0;
  std::int64_t uncounted_calls = 0, uncounted_tokens = 0;
  const auto verify_greedy = [&](specdec::view2d<const float> rows, const specdec::tree_view& tree,
                                 specdec::verify_result& r) {
    specdec::verify_params vp;
    vp.mode = specdec::verify_mode::greedy;
    ws.resize((specdec::verify_workspace_size(V, tree.size) + 7) / 8);
    path.resize(static_cast<std::size_t>(tree.size));
    emitted.resize(static_cast<std::size_t>(tree.size));
    check(specdec::verify_tree(tree, rows, {}, vp, std::as_writable_bytes(std::span(ws)), path, emitted, r),
          "verify_tree");
  };
  const double d0 = tgt.ctx().decode_seconds();
  const auto t0 = std::chrono::steady_clock::now();
  for (std::uint32_t round = 0; !detail::done(m, tgt.committed(), prompt.size(), o); ++round) {
    const auto r0 = std::chrono::steady_clock::now();
    // Model-free drafts cost microseconds: draft first with the drafter's
    // own budget; a round without a draft is a plain step. Otherwise the
    // planner sizes the round (it may also make it a plain step).
    skipped.reset(0);
    draft(std::span<const llama_token>(tgt.committed()), d);
    if (planner != nullptr && d.tree.size() > 1) {
      specdec::round_plan plan;
      check(planner->plan_drafted(d.tree, plan), "round_planner::plan_drafted");
      if (plan.summary.nodes <= 1 || plan.summary.depth == 0) {
        std::swap(skipped, d.tree);  // observe_skipped reads it after the plain step
        d.tree.reset(tgt.committed().back());
        d.q.clear();
      } else if (plan.summary.kind == specdec::plan_kind::drafted) {
        detail::cut_draft(d.tree, plan.summary.nodes);
      } else {  // a fixed plan (fix_plan)
        detail::cut_draft(d.tree, plan.summary.nodes, plan.summary.depth, plan.min_path_probability);
      }
    }
    if (oracle_cut && d.tree.size() > 1) {
      const auto u0 = std::chrono::steady_clock::now();
      const double ud0 = tgt.ctx().decode_seconds();
      const specdec::tree_view full = d.tree.tree.view();
      specdec::verify_result r;
      verify_greedy(tgt.score_tree(full), full, r);
      tgt.discard();
      cut.reset(full.token[0]);
      for (std::int32_t k = 1; k <= r.accepted; ++k) {
        const specdec::node_id u = path[static_cast<std::size_t>(k)];
        cut.add(k - 1, full.token[u], d.tree.prob[static_cast<std::size_t>(u)], 0.0f,
                specdec::draft_mode::deterministic);
      }
      std::swap(d.tree, cut);
      d.q.clear();
      uncounted += std::chrono::steady_clock::now() - u0;
      uncounted_decode += tgt.ctx().decode_seconds() - ud0;
      ++uncounted_calls;
      uncounted_tokens += full.size;
    }
    const bool planned = planner != nullptr || oracle_cut;
    if (planned && d.tree.size() == 1) ++s.plain_rounds;
    const double drafter_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - r0).count();
    const double f0 = tgt.ctx().decode_seconds();
    specdec::view2d<const float> p;
    // A planned plain step decodes the root in sequence 0 directly (no leaf
    // sequence to copy and remove): the cost of plain decoding.
    const bool plain_step = planned && d.tree.size() == 1;
    if (plain_step) p = specdec::make_view(tgt.plain_step(), std::int64_t{1}, V);
    for (; !plain_step;) {  // a round that finds no KV cells is cut in half until it fits
      try {
        p = tgt.score_tree(d.tree.tree.view());
        break;
      } catch (const kv_full_error&) {
        if (d.tree.size() <= 1) throw;
        detail::cut_draft(d.tree, (d.tree.size() + 1) / 2);
        ++s.shrunk;
      }
    }
    const specdec::tree_view tree = d.tree.tree.view();
    const std::int32_t n = tree.size;
    specdec::view2d<const float> q{};
    specdec::verify_params vp;
    vp.seed = o.seed;
    vp.round = round;
    if (o.temperature == 0.0f) {
      vp.mode = specdec::verify_mode::greedy;  // reads logits directly
    } else {
      check(specdec::matching_verify_mode(d.tree, vp.mode), "matching_verify_mode");
      probs.resize(static_cast<std::size_t>(n) * static_cast<std::size_t>(V));
      const specdec::sampling_params sp{o.temperature, 0, 1.0f, 0.0f};
      check(
          specdec::logits_to_probs(p, specdec::make_view(probs.data(), static_cast<std::int64_t>(n), V), {&sp, 1}, {}),
          "logits_to_probs");
      p = specdec::make_view(static_cast<const float*>(probs.data()), static_cast<std::int64_t>(n), V);
      if (specdec::uses_draft_probs(vp.mode))
        q = specdec::make_view(static_cast<const float*>(d.q.data()), static_cast<std::int64_t>(n), V);
    }
    ws.resize((specdec::verify_workspace_size(V, n) + 7) / 8);
    path.resize(static_cast<std::size_t>(n));
    emitted.resize(static_cast<std::size_t>(n));
    specdec::verify_result r;
    check(specdec::verify_tree(tree, p, q, vp, std::as_writable_bytes(std::span(ws)), path, emitted, r), "verify_tree");
    const double forward_seconds = tgt.ctx().decode_seconds() - f0;
    if (plain_step)
      tgt.push(r.next_token);
    else
      tgt.commit(tree, path, r);
    if (planner != nullptr) {  // what this round cost and accepted, for the next plans
      specdec::round_feedback f;
      f.tree = tree;
      f.draft_prob = d.tree.prob;
      f.path = std::span<const specdec::node_id>(path).first(static_cast<std::size_t>(r.accepted) + 1);
      f.forward_nodes = n;
      f.forward_seconds = forward_seconds;
      f.drafter_calls = n > 1 ? 1 : 0;
      f.drafted_nodes = n - 1;
      f.drafter_seconds = drafter_seconds;
      f.other_seconds = std::max(std::chrono::duration<double>(std::chrono::steady_clock::now() - r0).count() -
                                     drafter_seconds - forward_seconds,
                                 0.0);
      f.tokens_left = detail::done(m, tgt.committed(), prompt.size(), o)
                          ? 0
                          : o.n_predict - static_cast<std::int64_t>(tgt.committed().size() - prompt.size());
      if (vp.mode != specdec::verify_mode::greedy && n > 1) {  // acceptance as its expectation, less noisy
        chance.resize(static_cast<std::size_t>(n));
        check(specdec::child_acceptance(tree, f.path, vp.mode, p, q, chance), "child_acceptance");
        f.accept_prob = chance;
      }
      check(planner->observe(f), "round_planner::observe");
      // A plain step checks for free the draft it skipped (and the next
      // level of one skipped earlier): the planner keeps learning.
      if (plain_step)
        check(planner->observe_skipped(skipped.size() > 1 ? skipped : d.tree, r.next_token), "observe_skipped");
    }
    ++s.rounds;
    s.drafted += n - 1;
    s.accepted += r.accepted;
  }
  s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0 - uncounted).count();
  s.decode_seconds = tgt.ctx().decode_seconds() - d0 - uncounted_decode;
  s.tokens = detail::generated(m, tgt.committed(), prompt.size(), o);
  s.target_calls = tgt.ctx().calls() - uncounted_calls;
  s.target_tokens = tgt.ctx().decoded_tokens() - uncounted_tokens;
  if (draft_ctx != nullptr) s.draft_calls = draft_ctx->calls();
  return s;
}

}  // namespace specdec_llama
