// Decoding with the example models: autoregressive, and speculative
// decoding through specdec's loop layer (speculative_session: draft with a
// level-batched drafter -> positions + packed mask -> target tree forward ->
// verify -> KV / SSM commit). Shared by examples/model_demo.cpp and
// tests/models.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <tuple>
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

//! The drafter model as a specdec::level_probability_drafter: the tree
//! builder hands it every frontier node of one depth at once and it runs
//! them as ONE batched forward (the way a real draft model runs), not one
//! call per node. The k-th node it runs in a round writes its KV to tree
//! slot k (position cache_len + depth) and attends to its committed context
//! and the slots of its root path (mask row = its parent's row plus its own
//! bit). The tokens committed since its last round (draft_level::history)
//! run in the same forward as the round's first level, as a chain in front
//! of it, and are committed to its cache right after: one forward per depth.
struct level_model_drafter {
  const weights* w = nullptr;
  state st;
  scratch sc;
  float temperature = 1.0f;
  std::int64_t calls = 0;  //!< forward invocations (one per level; the catch-up rides on the first)
  static constexpr std::int64_t words = (max_tree_nodes + 63) / 64;
  std::vector<std::uint64_t> masks = std::vector<std::uint64_t>(static_cast<std::size_t>(max_tree_nodes * words));
  std::vector<std::int32_t> slot_of;  //!< tree node -> slot, -1 when not run this round
  std::int32_t slots = 0;             //!< slots used this round
  std::vector<token_id> tokens;
  std::vector<std::int64_t> positions;
  std::vector<node_id> parents;
  std::vector<float> rows;
  std::vector<std::uint64_t> first_masks;  //!< the first level's batch: catch-up chain, then the level
  std::vector<node_id> path;
  //! This round's slots: token and parent slot (-1: the root). At the next
  //! round's start the committed tokens are matched against them: the
  //! accepted drafts' KV is already in the cache, so it is committed in
  //! place instead of recomputed (KV depends only on the tokens of the path).
  std::vector<token_id> slot_token;
  std::vector<std::int32_t> slot_parent;
  std::int64_t reused = 0;  //!< committed tokens whose KV came from an earlier round's slots
  //! Catch-up bound (0: none): a drafter more than `window` committed tokens
  //! behind (a prompt, or plain steps a planner chose) restarts its cache
  //! from the last `window` of them, so a speculative round after any plain
  //! streak costs a bounded catch-up instead of one drafter token per plain
  //! step. Only the drafts' context shrinks; the output law is the target's.
  std::int64_t window = 0;
  std::size_t skipped = 0;  //!< committed tokens before the cache's first position

  level_model_drafter(const weights& m, float temp) : w(&m), temperature(temp) {
    if (m.cfg.kinds.find('m') != std::string::npos)
      throw std::invalid_argument("level_model_drafter: the drafter must be attention-only");
  }

  //! Starts a new request with the cache and scratch kept (what an engine
  //! does between requests): nothing is allocated again.
  void restart() {
    if (st.pages > 0) st.clear();
    calls = reused = 0;
    skipped = 0;
    slots = 0;
  }

  specdec::status level_probabilities(const specdec::draft_level& l, specdec::view2d<const float>& out) {
    try {
      // The cache is allocated by the first call: a request that a planner
      // decodes plainly never zeroes it (page clearing was 0.9% of the
      // samples of such requests in perf).
      if (st.pages == 0) st = state(w->cfg, cache_capacity);
      const auto missing = l.depth == 0 ? start_round(l.history) : std::span<const token_id>{};
      const auto n = static_cast<std::int32_t>(l.nodes.size());
      if (slots + n > max_tree_nodes)
        return specdec::make_status(specdec::status_code::buffer_too_small, "level_model_drafter: tree too large");
      const std::int64_t V = w->cfg.vocab;
      tokens.resize(static_cast<std::size_t>(n));
      positions.assign(static_cast<std::size_t>(n), st.cache_len + l.depth);
      parents.assign(static_cast<std::size_t>(n), -1);
      slot_of.resize(static_cast<std::size_t>(l.tree->size()), -1);
      for (std::int32_t i = 0; i < n; ++i) {
        const node_id u = l.nodes[static_cast<std::size_t>(i)];
        const std::int32_t k = slots + i;
        const node_id par = l.tree->parent(u);
        std::uint64_t* r = masks.data() + k * words;
        if (par >= 0 && slot_of[static_cast<std::size_t>(par)] >= 0)
          std::copy_n(masks.data() + slot_of[static_cast<std::size_t>(par)] * words, words, r);
        else
          std::fill_n(r, words, 0);
        r[k / 64] |= std::uint64_t{1} << (k % 64);
        slot_of[static_cast<std::size_t>(u)] = k;
        tokens[static_cast<std::size_t>(i)] = l.tree->token(u);
        slot_token.resize(static_cast<std::size_t>(k + 1));
        slot_parent.resize(static_cast<std::size_t>(k + 1));
        slot_token[static_cast<std::size_t>(k)] = tokens[static_cast<std::size_t>(i)];
        slot_parent[static_cast<std::size_t>(k)] = par >= 0 ? slot_of[static_cast<std::size_t>(par)] : -1;
      }
      const auto k = static_cast<std::int32_t>(missing.size());
      rows.resize(static_cast<std::size_t>(n * V));
      if (k == 0) {
        forward(*w, st,
                batch{tokens, positions, parents,
                      std::span<const std::uint64_t>(masks.data() + slots * words, static_cast<std::size_t>(n * words)),
                      words, slots},
                rows, sc);
      } else {
        first_level_with_catch_up(missing, n);
      }
      ++calls;
      slots += n;
      const auto rv = specdec::make_view<float>(rows.data(), n, V);
      const specdec::sampling_params sp{temperature, 0, 1.0f, 0.0f};
      SPECDEC_TRY(specdec::logits_to_probs<float>(rv.as_const(), rv, std::span(&sp, 1), {}));
      out = rv.as_const();
      return specdec::status::success();
    } catch (const std::exception&) {
      return specdec::make_status(specdec::status_code::invalid_argument, "level_model_drafter: forward failed");
    }
  }

 private:
  // Starts a round; returns the committed tokens the cache lacks (those of
  // `history`, the committed tokens before the root, past cache_len).
  std::span<const token_id> start_round(std::span<const token_id> history) {
    auto covered = skipped + static_cast<std::size_t>(st.cache_len);
    if (covered > history.size()) {  // a new sequence
      st.clear();
      skipped = covered = 0;
      slots = 0;
    }
    covered += reuse_slots(history.subspan(covered));
    // Emptied in place: a new state's 2 x 128 KB of fresh pages fault in one
    // by one (30-50 us of a switch round's drafting on the demo's CPU).
    if (window > 0 && history.size() - covered > static_cast<std::size_t>(window)) {
      st.clear();
      skipped = covered = history.size() - static_cast<std::size_t>(window);
    }
    std::fill(slot_of.begin(), slot_of.end(), -1);
    slots = 0;
    return history.subspan(covered);
  }

  // Commits the last round's slots along the path whose tokens begin
  // `missing` (root slot first); returns how many tokens that covered.
  std::size_t reuse_slots(std::span<const token_id> missing) {
    path.clear();
    std::int32_t cur = -1;
    for (const token_id t : missing) {
      std::int32_t next = -1;
      for (std::int32_t k = cur + 1; k < slots && next < 0; ++k)  // a child's slot follows its parent's
        if (slot_parent[static_cast<std::size_t>(k)] == cur && slot_token[static_cast<std::size_t>(k)] == t) next = k;
      if (next < 0) break;
      path.push_back(next);
      cur = next;
    }
    if (!path.empty()) {
      commit(*w, st, std::span<const node_id>(slot_parent.data(), static_cast<std::size_t>(slots)), path);
      reused += static_cast<std::int64_t>(path.size());
    }
    slots = 0;
    return path.size();
  }

  // The first level (n nodes, set up in tokens / positions / masks as if the
  // cache were already caught up) behind the k missing tokens, in one
  // forward: the missing tokens as a chain in slots [0, k), the level in
  // slots k + i attending to all of them; then the chain is committed in
  // place, which leaves the level's KV in slots [0, n) as the next levels
  // expect. Logits only for the level's rows (`rows` holds n rows).
  void first_level_with_catch_up(std::span<const token_id> missing, std::int32_t n) {
    const auto k = static_cast<std::int32_t>(missing.size());
    const std::int32_t m = k + n;
    const std::int64_t cw = specdec::mask_words_per_row<std::uint64_t>(m);
    std::vector<token_id> all(missing.begin(), missing.end());
    all.insert(all.end(), tokens.begin(), tokens.end());
    std::vector<std::int64_t> pos(static_cast<std::size_t>(m));
    std::vector<node_id> par(static_cast<std::size_t>(m));
    first_masks.assign(static_cast<std::size_t>(m * cw), 0);
    path.resize(static_cast<std::size_t>(k));
    for (std::int32_t i = 0; i < m; ++i) {
      const bool chain = i < k;
      pos[static_cast<std::size_t>(i)] = st.cache_len + (chain ? i : k);
      par[static_cast<std::size_t>(i)] = chain ? i - 1 : k - 1;
      std::uint64_t* r = first_masks.data() + i * cw;
      for (std::int32_t j = 0; j < std::min(i + 1, k); ++j) r[j / 64] |= std::uint64_t{1} << (j % 64);
      r[i / 64] |= std::uint64_t{1} << (i % 64);
      if (chain) path[static_cast<std::size_t>(i)] = i;
    }
    forward(*w, st, batch{all, pos, par, first_masks, cw, 0, k}, rows, sc);
    commit(*w, st, par, path);
  }
};
static_assert(specdec::level_probability_drafter<level_model_drafter>);

//! The target model as a specdec::kv_committing_target: forward() runs the
//! session's flattened tree (tokens, positions, packed mask) in one pass,
//! commit() keeps the accepted path's KV and SSM / conv states.
struct model_target {
  const weights* w = nullptr;
  state st;
  scratch sc;
  std::vector<node_id> parent, path;

  explicit model_target(const weights& m) : w(&m), st(m.cfg, cache_capacity) {}

  specdec::status forward(const specdec::tree_forward& f) {
    if (f.cache_len != st.cache_len || f.logits.stride[0] != w->cfg.vocab || f.logits.stride[1] != 1)
      return specdec::make_status(specdec::status_code::invalid_argument, "model_target: cache or logits layout");
    try {
      const auto n = static_cast<std::size_t>(f.tree.size);
      parent.assign(f.tree.parent, f.tree.parent + n);
      models::forward(*w, st,
                      batch{std::span<const token_id>(f.tree.token, n), f.positions, parent, f.mask, f.mask_words, 0},
                      std::span<float>(f.logits.data, n * static_cast<std::size_t>(w->cfg.vocab)), sc);
    } catch (const std::exception&) {
      return specdec::make_status(specdec::status_code::invalid_argument, "model_target: forward failed");
    }
    return specdec::status::success();
  }

  specdec::status commit(const specdec::kv_commit_request& c) {
    path.resize(c.keep.size());
    for (std::size_t k = 0; k < c.keep.size(); ++k) path[k] = static_cast<node_id>(c.keep[k] - c.cache_len);
    try {
      models::commit(*w, st, parent, path);
    } catch (const std::exception&) {
      return specdec::make_status(specdec::status_code::invalid_argument, "model_target: commit failed");
    }
    return specdec::status::success();
  }
};
static_assert(specdec::kv_committing_target<model_target>);

//! What an engine keeps between requests: the target's and the drafter's
//! caches and scratch, allocated by the first request that needs them and
//! emptied, not reallocated, for the next (spec_options::kept). Per request,
//! a new drafter's cache and scratch cost 100-200 us of a 15-20 ms request
//! on the demo's CPU (fresh pages, cold lines), which plain decoding does not pay.
struct kept_buffers {
  std::optional<model_target> target;
  std::optional<level_model_drafter> drafter;
};

namespace detail {
// The request's target and drafter: those `kept` holds (emptied), else new
// ones in `own`.
inline model_target& request_target(kept_buffers* kept, const weights& w, std::optional<model_target>& own) {
  std::optional<model_target>& slot = kept != nullptr ? kept->target : own;
  if (!slot || slot->w != &w)
    slot.emplace(w);
  else
    slot->st.clear();
  return *slot;
}
inline level_model_drafter& request_drafter(kept_buffers* kept, const weights& w, float temperature,
                                            std::int64_t window, std::optional<level_model_drafter>& own) {
  std::optional<level_model_drafter>& slot = kept != nullptr ? kept->drafter : own;
  if (!slot || slot->w != &w)
    slot.emplace(w, temperature);
  else
    slot->restart();
  slot->temperature = temperature;
  slot->window = window;
  return *slot;
}
}  // namespace detail

//! Per-stage time of the speculative rounds.
struct stage_times {
  double draft = 0, mask = 0, forward = 0, verify = 0, commit = 0;
  double total() const { return draft + mask + forward + verify + commit; }
};

//! Planned runs: the rounds of one chosen shape, their emitted tokens, their
//! time (the session's stage timers, wall clock) and what the planner
//! predicted for them (plan_summary: tokens and seconds, summed over the
//! rounds it predicted a time for).
struct shape_tally {
  std::int64_t rounds = 0, tokens = 0;
  double seconds = 0, planned_tokens = 0;
  double timed_planned_tokens = 0, planned_seconds = 0;  // rounds with a predicted time only
  shape_tally& operator+=(const shape_tally& o) {
    rounds += o.rounds, tokens += o.tokens, seconds += o.seconds, planned_tokens += o.planned_tokens;
    timed_planned_tokens += o.timed_planned_tokens, planned_seconds += o.planned_seconds;
    return *this;
  }
};

//! Planned runs: a request's rounds by what came before them. A request's
//! first round pays cold caches and a new planner's first valuation; a
//! drafted round right after a plain step (a switch; a request's opening
//! too) pays the drafter's catch-up on the tokens it skipped, or on the
//! prompt; a plain step right after a drafted round may carry the planner's
//! valuation of what that round taught it.
enum round_class : int { first_round, switch_round, steady_drafted, plain_after_drafted, steady_plain, round_classes };

//! Rounds of one round_class: their emitted tokens, time (the session's
//! stage timers, wall clock) and time in the tree builder (the drafter's
//! calls and the planner's choice).
struct class_tally {
  std::int64_t rounds = 0, tokens = 0;
  double seconds = 0, draft_seconds = 0;
  class_tally& operator+=(const class_tally& o) {
    rounds += o.rounds, tokens += o.tokens, seconds += o.seconds, draft_seconds += o.draft_seconds;
    return *this;
  }
};

struct decode_stats {
  std::int64_t tokens = 0, target_calls = 0, drafter_calls = 0, rounds = 0;
  double seconds = 0;  //!< CPU seconds
  stage_times stages;
  //! Planned runs: rounds per chosen shape, keyed (0 AR / 1 chain / 2 tree,
  //! nodes, depth) so that counting inside the timed run costs no string
  //! (shape_name prints them), and the planner's estimates at the end of the run.
  std::map<std::tuple<int, int, int>, shape_tally> plans;
  std::string planner_estimates;
  //! Planned runs: requests decoded, and their rounds by what came before
  //! them (round_class), so that each kind can be priced against plain steps.
  std::int64_t requests = 0;
  std::array<class_tally, round_classes> by_class{};
};

//! Each kind of round of a planned row, per request, priced against the row's
//! own steady plain steps (their time per token): the time it took beyond
//! plain steps emitting the same tokens, and for the drafted kinds the tree
//! builder's time per round (the drafter's calls and the planner's choice; a
//! switch's includes the drafter's catch-up). Empty before any steady plain step.
inline std::string describe_round_classes(const decode_stats& st) {
  const class_tally& plain = st.by_class[steady_plain];
  if (st.requests == 0 || plain.tokens == 0) return {};
  const double price = plain.seconds / static_cast<double>(plain.tokens), requests = static_cast<double>(st.requests);
  const auto count = [&](round_class c) { return static_cast<double>(st.by_class[c].rounds) / requests; };
  const auto excess = [&](round_class c) {
    const class_tally& t = st.by_class[c];
    return 1e6 * (t.seconds - price * static_cast<double>(t.tokens)) / requests;
  };
  const auto building = [&](round_class c) {
    const class_tally& t = st.by_class[c];
    return t.rounds > 0 ? 1e6 * t.draft_seconds / static_cast<double>(t.rounds) : 0.0;
  };
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "    per request, against its %.1f other plain steps (%.0f us per token): first round %+.0f us;\n"
                "    %.1f switches to drafting %+.0f us (tree building %.0f us a round); %.1f other drafted rounds "
                "%+.0f us (%.0f us);\n    %.1f plain steps after drafting %+.0f us\n",
                count(steady_plain), 1e6 * price, excess(first_round), count(switch_round), excess(switch_round),
                building(switch_round), count(steady_drafted), excess(steady_drafted), building(steady_drafted),
                count(plain_after_drafted), excess(plain_after_drafted));
  return buf;
}

//! "AR", "chain 3" or "tree 7/3" (7 nodes, depth 3) for a key of decode_stats::plans.
inline std::string shape_name(const std::tuple<int, int, int>& key) {
  const auto [kind, nodes, depth] = key;
  return kind == 0   ? "AR"
         : kind == 1 ? "chain " + std::to_string(depth)
                     : "tree " + std::to_string(nodes) + "/" + std::to_string(depth);
}

//! Which tree a speculative run drafts (planned: the round planner chooses
//! every round; lookup: prompt lookup, no drafter model; planned_lookup: the
//! planner keeps the part of each lookup draft worth a pass).
enum class tree_kind { chain, iid_tree, topk_tree, beam_tree, planned, lookup, planned_lookup };

struct spec_options {
  tree_kind kind = tree_kind::iid_tree;
  float temperature = 1.0f;                         //!< 0: greedy (argmax, ties to the lowest id)
  std::vector<std::int32_t> widths = {3, 2, 2, 1};  //!< iid tree
  std::int32_t chain_length = 4;
  //! The drafter's catch-up bound (level_model_drafter::window; 0 = none).
  //! 8: a drafter that restarts from the last 8 committed tokens drafts as
  //! well as one that keeps 32 (tokens per pass within 1.5% either way over
  //! 48 requests of each row) and pays a quarter of the prompt prefill and
  //! catch-ups (benchmarks/results/planner-plain-control_2026-11-29.md).
  std::int64_t drafter_window = 8;
  std::int32_t topk_k = 2, topk_depth = 4;
  std::int32_t beam_k = 4, beam_width = 4, beam_depth = 5, beam_budget = 32;
  //! Prompt lookup: the deepest draft and the node budget (root included);
  //! planned_lookup drafts with lookup_planned_nodes and lets the planner cut.
  std::int32_t lookup_depth = 4, lookup_nodes = 5, lookup_planned_nodes = 16;
  specdec::planner_options planner{.max_nodes = 32, .max_depth = 8};  //!< planned runs
  //! Planned runs: every round drafts this shape (round_planner::fix_plan;
  //! {-1}: plain steps through the session); empty: the planner chooses.
  std::vector<specdec::node_id> fixed_plan;
  //! Planned runs: a planner state carried between requests (read at the
  //! start when it has seen rounds, written back at the end); null = cold.
  specdec::round_planner* carry = nullptr;
  //! Planned runs: called after every round with its statistics and the
  //! planner, which has just observed it (examples/planner_trace.cpp).
  std::function<void(const specdec::round_stats&, specdec::round_planner&)> on_plan;
  //! The models' caches and scratch kept between requests (as an engine
  //! keeps them); null: each request allocates its own.
  kept_buffers* kept = nullptr;
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

}  // namespace detail

//! Plain decoding: one target call per token. Sampling (temperature 1) and
//! greedy decoding both go through specdec::verify_tree on a root-only tree,
//! so they use the same Philox streams and tie-break as the speculative runs.
inline std::vector<token_id> generate_autoregressive(const weights& target, std::span<const token_id> prompt,
                                                     std::int64_t n_tokens, const spec_options& o, decode_stats& st) {
  const auto t0 = detail::clock::now();
  const std::int64_t V = target.cfg.vocab;
  std::optional<model_target> own;
  model_target& tgt = detail::request_target(o.kept, target, own);
  state& s = tgt.st;
  scratch& sc = tgt.sc;
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

namespace detail {
// `before`: what the request's previous round was (0 none, 1 plain, 2
// drafted); updated for the next.
inline void tally_plan(const specdec::round_stats& r, decode_stats& st, int& before) {
  const specdec::plan_summary& p = r.plan;
  const bool drafted = p.nodes > 1;
  const double seconds = r.time.draft + r.time.flatten + r.time.forward + r.time.probs + r.time.verify + r.time.commit;
  const round_class c = before == 0 ? first_round
                        : drafted   ? (before == 1 ? switch_round : steady_drafted)
                                    : (before == 2 ? plain_after_drafted : steady_plain);
  st.by_class[c] += {1, r.emitted, seconds, r.time.draft};
  before = drafted ? 2 : 1;
  st.plans[{!drafted                 ? 0
            : p.nodes == p.depth + 1 ? 1
                                     : 2,
            p.nodes, p.depth}] += {
      1, r.emitted, seconds, p.expected_tokens, p.predicted_seconds > 0 ? p.expected_tokens : 0.0, p.predicted_seconds};
}

// The planner's view at the end of a run: pass time per size relative to
// one node (measured medians), drafter and loop costs.
inline void describe_planner(specdec::round_planner& p, decode_stats& st) {
  char buf[160];
  const double t1 = p.target_seconds(1);
  std::string s = "t(N)/t(1) measured:";
  const auto n = p.measured_sizes();
  const auto t = p.measured_seconds();
  for (std::size_t i = 0; i < n.size(); ++i) {
    std::snprintf(buf, sizeof buf, " %g:%.2f", n[i], t[i] / t1);
    s += buf;
  }
  // drafter_seconds(levels, nodes, tokens) = per_round + per_level x levels
  //   + per_node x nodes + per_token x tokens (caught up since it last ran)
  const double per_level = p.drafter_seconds(2, 0, 0) - p.drafter_seconds(1, 0, 0);
  const double per_round = p.drafter_seconds(1, 0, 0) - per_level;
  const double per_node = p.drafter_seconds(1, 1, 0) - p.drafter_seconds(1, 0, 0);
  const double per_token = p.drafter_seconds(1, 0, 1) - p.drafter_seconds(1, 0, 0);
  std::snprintf(buf, sizeof buf,
                " (t(1) = %.0f us); drafter %.0f us/round + %.0f us/level + %.1f us/node + %.1f us/token caught up",
                t1 * 1e6, per_round * 1e6, per_level * 1e6, per_node * 1e6, per_token * 1e6);
  s += buf;
  st.planner_estimates = s;
}

// One run of a speculative_session over the models.
template <class Builder>
std::vector<token_id> run_session(Builder builder, const weights& target, const weights& draft,
                                  std::span<const token_id> prompt, std::int64_t n_tokens, const spec_options& o,
                                  decode_stats& st, const std::function<void(std::int64_t)>& on_round) {
  const auto t_start = clock::now();
  std::optional<model_target> own_target;
  std::optional<level_model_drafter> own_drafter;
  model_target& tgt = detail::request_target(o.kept, target, own_target);
  level_model_drafter& drafter = detail::request_drafter(o.kept, draft, o.temperature == 0.0f ? 1.0f : o.temperature,
                                                         o.drafter_window, own_drafter);
  prefill(target, tgt.st, prompt.first(prompt.size() - 1), tgt.sc);
  specdec::session_options so;
  so.vocab_size = target.cfg.vocab;
  so.sampling.temperature = o.temperature;
  so.seed = o.seed;
  so.request = o.request;
  so.max_tokens = static_cast<std::int32_t>(n_tokens);
  // A named rule for i.i.d. drafts (block, traversal); the session checks it is exact for the tree.
  if (o.temperature != 0.0f && o.sampled_rule != specdec::verify_mode::sampled_iid &&
      (o.kind == tree_kind::chain || o.kind == tree_kind::iid_tree))
    so.rule = o.sampled_rule;
  specdec::speculative_session<Builder> s(std::move(builder), so);
  int before = 0;
  const auto out = s.generate(drafter, tgt, prompt, [&](std::span<const token_id>) {
    if constexpr (specdec::round_observing_builder<Builder>) tally_plan(s.last_round(), st, before);
    if constexpr (specdec::batch_plannable_builder<Builder>)
      if (o.on_plan) o.on_plan(s.last_round(), s.builder().planner());
    if (on_round) on_round(static_cast<std::int64_t>(s.generated_tokens().size()));
  });
  if constexpr (specdec::batch_plannable_builder<Builder>) {
    describe_planner(s.builder().planner(), st);
    if (o.carry != nullptr) *o.carry = s.builder().planner();  // kept for the next request, as an engine would
  }
  const specdec::session_stats& ss = s.stats();
  ++st.requests;
  st.tokens += ss.tokens;
  st.rounds += ss.rounds;
  st.target_calls += ss.target_calls;
  st.drafter_calls += drafter.calls;
  st.stages.draft += ss.time.draft;
  st.stages.mask += ss.time.flatten;
  st.stages.forward += ss.time.forward;
  st.stages.verify += ss.time.probs + ss.time.verify;
  st.stages.commit += ss.time.commit;
  st.seconds += since(t_start);
  return {out.begin(), out.end()};
}
}  // namespace detail

//! Speculative decoding of n_tokens tokens after `prompt` through
//! specdec::speculative_session: the tree builder of `o.kind` drafting from
//! the level-batched drafter model (one forward per depth), one target pass
//! per round, the rule chosen from how the tree was drafted (o.sampled_rule
//! for i.i.d. chains and trees at temperature > 0), the target's KV / SSM
//! commit. `on_round` gets the number of tokens generated so far after
//! every round (progress). Stage times are the session's (wall clock).
inline std::vector<token_id> generate_speculative(const weights& target, const weights& draft,
                                                  std::span<const token_id> prompt, std::int64_t n_tokens,
                                                  const spec_options& o, decode_stats& st,
                                                  const std::function<void(std::int64_t)>& on_round = {}) {
  const std::int64_t V = target.cfg.vocab;
  const bool greedy_chain = o.kind == tree_kind::chain && o.temperature == 0.0f;
  if (o.kind == tree_kind::iid_tree || (o.kind == tree_kind::chain && !greedy_chain)) {
    specdec::sampled_tree_options so;
    so.mode = specdec::draft_mode::iid;
    so.vocab_size = V;
    so.widths =
        o.kind == tree_kind::chain ? std::vector<std::int32_t>(static_cast<std::size_t>(o.chain_length), 1) : o.widths;
    return detail::run_session(specdec::sampled_tree_builder(so), target, draft, prompt, n_tokens, o, st, on_round);
  }
  if (o.kind == tree_kind::planned) {
    specdec::planned_tree_builder b(
        {.planner = o.planner,
         .mode = o.temperature == 0.0f ? specdec::draft_mode::deterministic : specdec::draft_mode::iid,
         .vocab_size = V});
    if (o.carry != nullptr && o.carry->rounds() > 0) b.planner() = *o.carry;  // what earlier requests measured
    specdec::throw_if_error(b.planner().fix_plan(o.fixed_plan));
    return detail::run_session(std::move(b), target, draft, prompt, n_tokens, o, st, on_round);
  }
  if (o.kind == tree_kind::lookup || o.kind == tree_kind::planned_lookup) {
    const bool planned = o.kind == tree_kind::planned_lookup;
    specdec::planner_options po = o.planner;
    po.max_nodes = o.lookup_planned_nodes;
    po.draft_bonus = 0.0;  // the builder reports every skipped draft (observe_skipped)
    specdec::prompt_lookup_builder lookup({.max_ngram = 4,
                                           .max_depth = planned ? po.max_depth : o.lookup_depth,
                                           .max_nodes = planned ? po.max_nodes : o.lookup_nodes,
                                           .vocab_size = V});
    if (!planned) return detail::run_session(std::move(lookup), target, draft, prompt, n_tokens, o, st, on_round);
    specdec::planned_drafts_builder b(std::move(lookup), po);
    if (o.carry != nullptr && o.carry->rounds() > 0) b.planner() = *o.carry;
    return detail::run_session(std::move(b), target, draft, prompt, n_tokens, o, st, on_round);
  }
  if (o.kind == tree_kind::beam_tree)
    return detail::run_session(
        specdec::beam_tree_builder(
            {.k = o.beam_k, .width = o.beam_width, .depth = o.beam_depth, .budget = o.beam_budget, .vocab_size = V}),
        target, draft, prompt, n_tokens, o, st, on_round);
  return detail::run_session(
      specdec::topk_tree_builder(
          {.k = greedy_chain ? 1 : o.topk_k, .depth = greedy_chain ? o.chain_length : o.topk_depth, .vocab_size = V}),
      target, draft, prompt, n_tokens, o, st, on_round);
}

}  // namespace models
