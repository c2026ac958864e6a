//! \file
//! The round over many sequences at once: `batched_session` drafts one tree
//! per active request (ragged, each with its own builder options, seed,
//! sampling and verification rule), lays all trees out back to back (the
//! CSR batch layout of verify_batch and keep_indices_batch), runs ONE target
//! forward over the whole batch, verifies every request and commits every
//! request's KV in one call. Request r of a batch produces exactly the
//! tokens a speculative_session with the same options produces.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <utility>
#include <vector>

#include "specdec/cache/keep_indices.hpp"
#include "specdec/core/status.hpp"
#include "specdec/loop/session.hpp"
#include "specdec/verify/batch_verify.hpp"
#include "specdec/verify/child_acceptance.hpp"

namespace specdec {

//! One target forward over the trees of several requests.
//! - requests: the request index (into the session) of each batch entry b.
//! - offsets: B + 1 entries; entry b owns nodes [offsets[b], offsets[b + 1]).
//! - nodes: concatenated trees, parents local to each tree.
//! - histories[b]: entry b's committed tokens before its root (its KV is in
//!   the cache, cache_len[b] = histories[b].size()).
//! - positions: per node, cache_len + depth.
//! - mask: per node a row of mask_words words over its own tree's local ids
//!   (bit j of node i's row: local node j is an ancestor of i or i).
//! - logits: offsets[B] x V; row i receives node i's next-token logits.
struct batch_tree_forward {
  std::span<const std::int32_t> requests{};  //!< Request index (into the session) of each batch entry b.
  std::span<const std::int32_t> offsets{};   //!< B + 1 entries; entry b owns nodes [offsets[b], offsets[b + 1]).
  tree_view nodes{};                         //!< Concatenated trees, parents local to each tree.
  std::span<const std::span<const token_id>> histories{};  //!< Per entry, committed tokens before its root.
  std::span<const position_id> cache_len{};                //!< Per entry, cached KV entries (= histories[b].size()).
  std::span<const position_id> positions{};                //!< Per node, cache_len + depth.
  std::span<const std::uint64_t> mask{};  //!< Per node, mask_words words over its own tree's local ids.
  std::int64_t mask_words = 0;            //!< 64-bit words per mask row.
  view2d<float> logits{};                 //!< offsets[B] x V output: row i receives node i's next-token logits.
};

//! A target model that scores a whole batch of trees in one pass.
template <class T>
concept batch_target_model = requires(T& t, const batch_tree_forward& f) {
  { t.forward_batch(f) } -> std::same_as<status>;
};

//! KV commit of a whole batch: entry b (request requests[b]) keeps the
//! absolute positions keep[keep_offsets[b] .. keep_offsets[b + 1]), the k-th
//! moving to cache_len[b] + k (the layout commit_kv takes).
struct batch_kv_commit_request {
  std::span<const std::int32_t> requests{};      //!< Request index of each batch entry b.
  std::span<const position_id> cache_len{};      //!< Per entry, cache length before the round.
  std::span<const std::int32_t> keep_offsets{};  //!< B + 1 entries delimiting each entry's slice of keep.
  std::span<const position_id> keep{};           //!< Concatenated absolute positions to keep, per entry increasing.
};

//! A batch target that also owns the KV caches.
template <class T>
concept batch_kv_committing_target = batch_target_model<T> && requires(T& t, const batch_kv_commit_request& c) {
  { t.commit_batch(c) } -> std::same_as<status>;
};

//! Many sequences, one target pass per round. `Builder` is one builder type
//! (its options may differ per request: ragged trees). Not thread-safe.
template <class Builder>
class batched_session {
 public:
  //! One builder and one options struct per request (same vocab_size).
  batched_session(std::vector<Builder> builders, std::vector<session_options> options)
      : builders_(std::move(builders)), opt_(std::move(options)), seq_(opt_.size()) {}

  //! Number of requests.
  [[nodiscard]] std::size_t size() const noexcept { return opt_.size(); }

  //! Starts request r. Errors as speculative_session::start, and
  //! invalid_argument for a bad r, mismatched builder count or vocab sizes.
  status start(std::size_t r, std::span<const token_id> prompt) {
    if (builders_.size() != opt_.size()) return make_status(status_code::size_mismatch, "one builder per request");
    if (r >= opt_.size()) return make_status(status_code::invalid_argument, "request out of range");
    const session_options& o = opt_[r];
    if (o.vocab_size < 1 || o.vocab_size != opt_[0].vocab_size)
      return make_status(status_code::invalid_argument, "every request needs the same vocab_size > 0");
    if (o.max_tokens < 1) return make_status(status_code::invalid_argument, "max_tokens must be >= 1");
    SPECDEC_TRY(validate_sampling_params(o.sampling));
    if (prompt.empty()) return make_status(status_code::invalid_argument, "the prompt needs at least one token");
    for (const token_id t : prompt)
      if (t < 0 || t >= o.vocab_size) return make_status(status_code::token_out_of_range, "prompt token out of range");
    sequence& s = seq_[r];
    s.history.reserve(prompt.size() + static_cast<std::size_t>(o.max_tokens));
    s.history.assign(prompt.begin(), prompt.end());
    s.prompt_len = prompt.size();
    s.stopped = false;
    s.rounds = 0;
    s.last_emitted = 0;
    s.started = true;
    if constexpr (requires { builders_[r].begin_request(); }) builders_[r].begin_request();
    return status::success();
  }

  //! True when request r has finished (or was never started).
  [[nodiscard]] bool done(std::size_t r) const noexcept {
    const sequence& s = seq_[r];
    return !s.started || s.stopped || s.history.size() - s.prompt_len >= static_cast<std::size_t>(opt_[r].max_tokens);
  }
  //! True when every request is done.
  [[nodiscard]] bool done() const noexcept {
    for (std::size_t r = 0; r < seq_.size(); ++r)
      if (!done(r)) return false;
    return true;
  }

  //! One round over every active request: per-request drafting, one
  //! forward_batch, verification per request (target rows converted to
  //! probabilities as the walk reads them),
  //! keep_indices_batch, commit_batch (when the target has it), append.
  //! A failing request fails the round before anything is committed.
  template <class Source, batch_target_model Target>
  status round(Source& source, Target& target) {
    return round(source, target, std::span<const round_uniforms>{});
  }

  //! One round on the caller's uniforms: `uniforms[r]` for request r (see
  //! round_uniforms; a request whose entry leaves a half unset, or every
  //! request when the span is empty, uses its keyed Philox streams).
  //! invalid_argument when the span is neither empty nor one per request.
  template <class Source, batch_target_model Target>
  status round(Source& source, Target& target, std::span<const round_uniforms> uniforms) {
    using clock = std::chrono::steady_clock;
    if (!uniforms.empty() && uniforms.size() != seq_.size())
      return make_status(status_code::invalid_argument, "round uniforms: one entry per request (or none)");
    const round_uniforms philox_only{};
    const auto uniforms_of = [&](std::size_t r) -> const round_uniforms& {
      return uniforms.empty() ? philox_only : uniforms[r];
    };
    const std::int64_t V = opt_.empty() ? 0 : opt_[0].vocab_size;
    active_.clear();
    for (std::size_t r = 0; r < seq_.size(); ++r)
      if (!done(r)) active_.push_back(static_cast<std::int32_t>(r));
    const std::size_t B = active_.size();
    if (B == 0) return status::success();
    last_ = {};

    // 0. Planned builders: one plan per request for the shared pass.
    auto t0 = clock::now();
    if constexpr (batch_plannable_builder<Builder>) {
      planners_.clear();
      std::int32_t budget = 0;
      for (const auto r : active_) {
        round_planner& p = builders_[static_cast<std::size_t>(r)].planner();
        planners_.push_back(&p);
        budget += p.options().max_nodes;
      }
      if (node_budget_ > 0) budget = std::min(budget, std::max(node_budget_, static_cast<std::int32_t>(B)));
      SPECDEC_TRY(plan_batch(planners_, budget));
    }

    // 1. Draft every active request's tree, concatenated.
    std::size_t bound_total = 0;
    for (const auto r : active_)
      bound_total +=
          static_cast<std::size_t>(std::max<std::int32_t>(builders_[static_cast<std::size_t>(r)].node_bound(), 1));
    float* q = q_.get(bound_total * static_cast<std::size_t>(V));
    offsets_.assign(1, 0);
    tokens_.clear();
    parents_.clear();
    cache_len_.clear();
    histories_.clear();
    modes_.clear();
    for (std::size_t b = 0; b < B; ++b) {
      const auto r = static_cast<std::size_t>(active_[b]);
      sequence& s = seq_[r];
      const auto bound = static_cast<std::size_t>(std::max<std::int32_t>(builders_[r].node_bound(), 1));
      const auto off = static_cast<std::int64_t>(offsets_.back());
      draft_round dr;
      dr.root_token = s.history.back();
      dr.rng = rng_stream{opt_[r].seed, opt_[r].request, s.rounds};
      dr.uniforms = uniforms_of(r).draft;
      dr.history = std::span<const token_id>(s.history.data(), s.history.size() - 1);
      const bool wants_q = !detail::verifies_greedily(opt_[r]);
      if (wants_q) {
        dr.q_rows = make_view(q + off * V, static_cast<std::int64_t>(bound), V);
        q[off * V] = std::numeric_limits<float>::quiet_NaN();  // see speculative_session
      }
      round_stats st{};
      if constexpr (detail::countable<Builder, Source>) {
        detail::counting_drafter<Source> cd(source, adapter_, st);
        SPECDEC_TRY(indexed(builders_[r].build(cd, dr, tree_), r));
      } else {
        SPECDEC_TRY(indexed(builders_[r].build(source, dr, tree_), r));
      }
      last_.drafter_calls += st.drafter_calls;
      last_.drafted_nodes += st.drafted_nodes;
      last_.time.drafter += st.time.drafter;
      if constexpr (round_observing_builder<Builder>) {
        drafted_.resize(b + 1);
        drafted_[b] = st;
        tree_probs_.resize(static_cast<std::size_t>(offsets_.back()) + static_cast<std::size_t>(tree_.size()));
        std::copy(tree_.prob.begin(), tree_.prob.end(),
                  tree_probs_.begin() + static_cast<std::ptrdiff_t>(offsets_.back()));
      }
      const std::int32_t n = tree_.size();
      if (static_cast<std::size_t>(n) > bound)
        return make_status(status_code::invalid_argument, "builder produced more nodes than its node_bound()",
                           static_cast<std::int64_t>(r));
      verify_mode m{};
      SPECDEC_TRY(indexed(choose_verify_mode(tree_, opt_[r], m), r));
      if (uses_draft_probs(m) && n > 1 && (!wants_q || q[off * V] != q[off * V]))
        return make_status(status_code::invalid_argument, "the sampled rules need q rows and the builder wrote none",
                           static_cast<std::int64_t>(r));
      modes_.push_back(m);
      const auto tk = tree_.tree.tokens();
      const auto pa = tree_.tree.parents();
      tokens_.insert(tokens_.end(), tk.begin(), tk.end());
      parents_.insert(parents_.end(), pa.begin(), pa.end());
      offsets_.push_back(offsets_.back() + n);
      cache_len_.push_back(static_cast<position_id>(s.history.size() - 1));
      histories_.push_back(dr.history);
    }
    last_.time.draft = detail::lap(t0);
    const std::int32_t total = offsets_.back();

    // 2. Flatten: positions and per-tree packed masks (one row width: the largest tree's).
    std::int32_t nmax = 0;
    for (std::size_t b = 0; b < B; ++b) nmax = std::max(nmax, offsets_[b + 1] - offsets_[b]);
    const std::int64_t words = mask_words_per_row<std::uint64_t>(nmax);
    positions_.resize(static_cast<std::size_t>(total));
    mask_.assign(static_cast<std::size_t>(total * words), 0);
    std::int32_t depth_max = 0;
    for (std::size_t b = 0; b < B; ++b) {
      const auto o = static_cast<std::size_t>(offsets_[b]);
      const auto n = static_cast<std::size_t>(offsets_[b + 1]) - o;
      const std::span<const node_id> pa(parents_.data() + o, n);
      SPECDEC_TRY(build_positions<position_id>(pa, cache_len_[b], std::span<position_id>(positions_.data() + o, n)));
      SPECDEC_TRY(
          build_packed_mask<std::uint64_t>(pa,
                                           std::span<std::uint64_t>(mask_.data() + o * static_cast<std::size_t>(words),
                                                                    n * static_cast<std::size_t>(words)),
                                           words));
      for (std::size_t i = 0; i < n; ++i)
        depth_max = std::max(depth_max, static_cast<std::int32_t>(positions_[o + i] - cache_len_[b]));
    }
    last_.time.flatten = detail::lap(t0);

    // 3. One forward over the whole batch.
    float* logits = logits_.get(static_cast<std::size_t>(total) * static_cast<std::size_t>(V));
    const view2d<float> lv = make_view(logits, std::int64_t{total}, V);
    const tree_view nodes{tokens_.data(), parents_.data(), nullptr, nullptr, total};
    SPECDEC_TRY(target.forward_batch(
        batch_tree_forward{active_, offsets_, nodes, histories_, cache_len_, positions_, mask_, words, lv}));
    ++last_.target_calls;
    last_.time.forward = detail::lap(t0);

    // 4. Verify each request; a target row is converted to probabilities
    //    (with its request's sampling parameters) when the walk first reads
    //    it, greedy requests read the logits.
    row_params_.resize(static_cast<std::size_t>(total));
    std::size_t filter_bytes = 0;
    for (std::size_t b = 0; b < B; ++b) {
      const sampling_params& sp = opt_[static_cast<std::size_t>(active_[b])].sampling;
      std::fill(row_params_.begin() + offsets_[b], row_params_.begin() + offsets_[b + 1], sp);
      filter_bytes = std::max(filter_bytes, logits_to_probs_workspace_size(V, sp));
    }
    filter_ws_.resize(filter_bytes);
    float* probs = probs_.get(static_cast<std::size_t>(total) * static_cast<std::size_t>(V));
    ready_.assign(static_cast<std::size_t>(total), 0);
    detail::lazy_prob_state lz{lv.as_const(), probs, ready_.data(), row_params_, filter_ws_};
    const detail::lazy_prob_ops lazy(lz);
    const auto L = static_cast<std::size_t>(depth_max) + 1;
    paths_.resize(B * L);
    emitted_.resize(B * L);
    results_.resize(B);
    verify_ws_.resize(verify_batch_workspace_size(V, offsets_));
    for (std::size_t b = 0; b < B; ++b) {
      const auto r = static_cast<std::size_t>(active_[b]);
      verify_params vp;
      vp.mode = modes_[b];
      vp.seed = opt_[r].seed;
      vp.request = opt_[r].request;
      vp.round = seq_[r].rounds;
      vp.typical_epsilon = opt_[r].typical_epsilon;
      vp.typical_delta = opt_[r].typical_delta;
      const std::int64_t o = offsets_[b], n = offsets_[b + 1] - offsets_[b];
      const tree_view t{tokens_.data() + o, parents_.data() + o, nullptr, nullptr, static_cast<std::int32_t>(n)};
      const view2d<const float> qv =
          uses_draft_probs(vp.mode) ? make_view<const float>(q + o * V, n, V) : view2d<const float>{};
      const std::span<node_id> path(paths_.data() + b * L, L);
      const std::span<token_id> toks(emitted_.data() + b * L, L);
      const auto verify_with = [&](const auto& uni) -> status {
        if (vp.mode == verify_mode::greedy)
          return detail::verify_tree_with(t, make_view<const float>(logits + o * V, n, V), qv, vp, uni, verify_ws_,
                                          path, toks, results_[b]);
        const status vs = detail::verify_tree_with(t, make_view<const float>(probs + o * V, n, V), qv, vp, uni,
                                                   verify_ws_, path, toks, results_[b], lazy);
        SPECDEC_TRY(lz.error);  // a row that failed to convert, before what the walk made of it
        return vs;
      };
      const caller_uniforms& cu = uniforms_of(r).verify;
      SPECDEC_TRY(indexed(
          cu.u != nullptr ? verify_with(cu) : verify_with(philox_uniforms{rng_stream{vp.seed, vp.request, vp.round}}),
          r));
    }
    last_.probs_rows = lz.converted;
    last_.time.probs = lz.seconds;
    last_.time.verify = detail::lap(t0) - last_.time.probs;

    // 5. Truncate (stop tokens, max_tokens), keep indices for all, one commit.
    path_offsets_.assign(1, 0);
    kept_paths_.clear();
    for (std::size_t b = 0; b < B; ++b) {
      const auto r = static_cast<std::size_t>(active_[b]);
      sequence& s = seq_[r];
      const token_id* e = emitted_.data() + b * L;
      auto m = static_cast<std::size_t>(results_[b].accepted) + 1;
      s.stop_next = false;
      for (std::size_t k = 0; k < m; ++k)
        if (std::find(opt_[r].stop_tokens.begin(), opt_[r].stop_tokens.end(), e[k]) != opt_[r].stop_tokens.end()) {
          m = k + 1;
          s.stop_next = true;
          break;
        }
      m = std::min(m, static_cast<std::size_t>(opt_[r].max_tokens) - (s.history.size() - s.prompt_len));
      kept_paths_.insert(kept_paths_.end(), paths_.begin() + static_cast<std::ptrdiff_t>(b * L),
                         paths_.begin() + static_cast<std::ptrdiff_t>(b * L + m));
      path_offsets_.push_back(static_cast<std::int32_t>(kept_paths_.size()));
      last_.accepted += results_[b].accepted;
    }
    keep_.resize(kept_paths_.size());
    keep_offsets_.resize(B + 1);
    SPECDEC_TRY(
        keep_indices_batch(parents_, offsets_, {}, kept_paths_, path_offsets_, cache_len_, keep_, keep_offsets_));
    if constexpr (batch_kv_committing_target<Target>) {
      const auto tk = clock::now();
      SPECDEC_TRY(target.commit_batch(batch_kv_commit_request{active_, cache_len_, keep_offsets_, keep_}));
      last_.time.kv = detail::seconds_since(tk);
    }
    for (std::size_t b = 0; b < B; ++b) {
      sequence& s = seq_[static_cast<std::size_t>(active_[b])];
      const token_id* e = emitted_.data() + b * L;
      const auto m = static_cast<std::size_t>(path_offsets_[b + 1] - path_offsets_[b]);
      s.history.insert(s.history.end(), e, e + m);
      s.last_emitted = m;
      s.stopped = s.stop_next;
      ++s.rounds;
      last_.emitted += static_cast<std::int32_t>(m);
    }
    last_.time.commit = detail::lap(t0);
    last_.tree_nodes = total;
    last_.tree_depth = depth_max;
    if constexpr (round_observing_builder<Builder>) {
      // Every request's planner sees the shared pass and the batch's loop time.
      const double other = std::max(last_.time.overhead() + last_.time.kv, 0.0);
      for (std::size_t b = 0; b < B; ++b) {
        Builder& bl = builders_[static_cast<std::size_t>(active_[b])];
        const auto o = static_cast<std::size_t>(offsets_[b]);
        const auto n = static_cast<std::size_t>(offsets_[b + 1]) - o;
        round_feedback f;
        f.tree = tree_view{tokens_.data() + o, parents_.data() + o, nullptr, nullptr, static_cast<std::int32_t>(n)};
        f.draft_prob = std::span<const float>(tree_probs_.data() + o, n);
        f.path = std::span<const node_id>(paths_.data() + b * L, static_cast<std::size_t>(results_[b].accepted) + 1);
        f.forward_nodes = total;
        f.forward_seconds = last_.time.forward;
        f.drafter_calls = drafted_[b].drafter_calls;
        f.drafted_nodes = drafted_[b].drafted_nodes;
        f.drafter_seconds = drafted_[b].time.drafter;
        f.other_seconds = other;
        const sequence& rs = seq_[static_cast<std::size_t>(active_[b])];
        if (modes_[b] != verify_mode::greedy && n > 1) {
          // Acceptance as its expectation over this round's draws (see speculative_session).
          const auto rows = static_cast<std::int64_t>(n);
          const view2d<const float> qv = uses_draft_probs(modes_[b])
                                             ? make_view<const float>(q + static_cast<std::int64_t>(o) * V, rows, V)
                                             : view2d<const float>{};
          accept_.resize(n);
          SPECDEC_TRY(indexed(
              child_acceptance(f.tree, f.path, modes_[b],
                               make_view<const float>(probs + static_cast<std::int64_t>(o) * V, rows, V), qv, accept_),
              static_cast<std::size_t>(active_[b])));
          f.accept_prob = accept_;
        }
        f.tokens_left = rs.stopped ? 0
                                   : static_cast<std::int64_t>(opt_[static_cast<std::size_t>(active_[b])].max_tokens) -
                                         static_cast<std::int64_t>(rs.history.size() - rs.prompt_len);
        last_plans_.resize(B);
        last_plans_[b] = bl.last_plan();
        SPECDEC_TRY(indexed(bl.observe(f), static_cast<std::size_t>(active_[b])));
      }
    }
    return status::success();
  }

  //! Prompt and generated tokens of request r.
  [[nodiscard]] std::span<const token_id> tokens(std::size_t r) const noexcept { return seq_[r].history; }
  //! Generated tokens (after the prompt) of request r.
  [[nodiscard]] std::span<const token_id> generated_tokens(std::size_t r) const noexcept {
    return std::span<const token_id>(seq_[r].history).subspan(seq_[r].prompt_len);
  }
  //! Tokens that request r's last round appended.
  [[nodiscard]] std::span<const token_id> last_tokens(std::size_t r) const noexcept {
    return std::span<const token_id>(seq_[r].history).last(seq_[r].last_emitted);
  }
  //! Batch-wide statistics of the last round (tree_nodes and accepted are
  //! summed over the batch, tree_depth is the deepest tree's).
  [[nodiscard]] const round_stats& last_round() const noexcept { return last_; }
  //! With planned builders: the plan of each batch entry of the last round
  //! (entry b is the b-th active request). Empty otherwise.
  [[nodiscard]] std::span<const plan_summary> last_plans() const noexcept { return last_plans_; }
  //! Caps the nodes of one shared target pass when the builders plan
  //! (plan_batch); 0 (default) = the sum of the planners' max_nodes. At
  //! least one node per active request is always planned.
  void set_node_budget(std::int32_t nodes) noexcept { node_budget_ = nodes; }
  //! Request r's builder (e.g. its planner).
  [[nodiscard]] Builder& builder(std::size_t r) noexcept { return builders_[r]; }

 private:
  struct sequence {
    std::vector<token_id> history;
    std::size_t prompt_len = 0;
    std::uint32_t rounds = 0;
    std::size_t last_emitted = 0;
    bool started = false, stopped = false, stop_next = false;
  };

  static status indexed(const status& s, std::size_t r) noexcept {
    return s.ok() ? s : make_status(s.code(), s.message(), static_cast<std::int64_t>(r));
  }

  std::vector<Builder> builders_;
  std::vector<session_options> opt_;
  std::vector<sequence> seq_;
  drafted_tree tree_;
  level_adapter_scratch adapter_;
  std::vector<std::int32_t> active_, offsets_, path_offsets_, keep_offsets_;
  std::vector<position_id> cache_len_, keep_;
  std::vector<token_id> tokens_, emitted_;
  std::vector<node_id> parents_, paths_, kept_paths_;
  std::vector<std::span<const token_id>> histories_;
  std::vector<verify_mode> modes_;
  std::vector<position_id> positions_;
  std::vector<std::uint64_t> mask_;
  detail::grow_buffer<float> logits_, probs_, q_;
  std::vector<sampling_params> row_params_;
  std::vector<verify_result> results_;
  std::vector<std::byte> filter_ws_, verify_ws_;
  std::vector<std::uint8_t> ready_;
  round_stats last_{};
  std::vector<round_planner*> planners_;
  std::vector<round_stats> drafted_;
  std::vector<float> tree_probs_;
  std::vector<float> accept_;  // child_acceptance of one request's round, for its planner
  std::vector<plan_summary> last_plans_;
  std::int32_t node_budget_ = 0;
};

}  // namespace specdec
