//! \file
//! The speculative round as a layer: `speculative_session` owns the scratch
//! of one sequence and runs draft -> flatten -> target forward -> verify ->
//! commit with the primitives of draft/, tree/, verify/ and cache/, in that
//! order (docs/loop.md lists the calls, for engines that keep their own loop).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "specdec/cache/keep_indices.hpp"
#include "specdec/core/error.hpp"
#include "specdec/core/philox.hpp"
#include "specdec/core/status.hpp"
#include "specdec/core/view.hpp"
#include "specdec/draft/drafter.hpp"
#include "specdec/draft/level_drafter.hpp"
#include "specdec/draft/verify_mode.hpp"
#include "specdec/loop/concepts.hpp"
#include "specdec/loop/detail/lazy_probs.hpp"
#include "specdec/loop/planned_builder.hpp"
#include "specdec/tree/mask.hpp"
#include "specdec/tree/positions.hpp"
#include "specdec/verify/child_acceptance.hpp"
#include "specdec/verify/distribution.hpp"
#include "specdec/verify/tree_verify.hpp"
#include "specdec/verify/verify_params.hpp"

namespace specdec {

//! Named opt-ins to verification that is NOT distributed as the target.
//! - none: only rules that are exact for how the tree was drafted.
//! - typical_acceptance: allows verify_mode::typical_lossy (Medusa).
//! - mismatched_rule: allows any verify_mode, also one that does not match
//!   the drafted tree (e.g. the one-hot rule on sampled drafts); biased.
enum class lossy_opt_in : std::uint8_t { none = 0, typical_acceptance = 1, mismatched_rule = 2 };

//! Options of a speculative_session (copied at construction).
struct session_options {
  //! Vocabulary size V of target and drafter rows (> 0).
  std::int64_t vocab_size = 0;
  //! How target logits become the distribution the output follows:
  //! temperature (0 = greedy decoding), top-k, top-p, min-p.
  sampling_params sampling{};
  //! Philox key: round r of this sequence drafts and verifies with
  //! rng_stream{seed, request, r} (draft and verify purposes never collide).
  std::uint64_t seed = 0;
  //! Sequence id in the Philox key rng_stream{seed, request, r}.
  std::uint32_t request = 0;
  //! Tokens to generate after the prompt (>= 1).
  std::int32_t max_tokens = 128;
  //! Generation stops after emitting any of these (the stop token is kept).
  std::vector<token_id> stop_tokens{};
  //! Empty: the exact rule for the drafted tree (greedy at temperature 0,
  //! else matching_verify_mode). Set: must be exact for the tree at
  //! temperature > 0 (check_verify_mode: e.g. traversal or block for
  //! i.i.d. drafts, naive_matching for any tree), unless `lossy` opts in.
  std::optional<verify_mode> rule{};
  //! Which non-exact rule, if any, `rule` may name (lossy_opt_in).
  lossy_opt_in lossy = lossy_opt_in::none;
  //! typical_lossy parameter epsilon (see verify_params).
  float typical_epsilon = 0.09f;
  //! typical_lossy parameter delta (see verify_params).
  float typical_delta = 0.3f;
};

//! The verification rule a session uses for `tree` under `o` (see
//! session_options::rule). Errors: invalid_argument when the requested rule
//! does not match the drafted tree and `o.lossy` does not name it, or when
//! the tree mixes draft modes; size_mismatch for an inconsistent tree. O(N).
inline status choose_verify_mode(const drafted_tree& tree, const session_options& o, verify_mode& out) noexcept {
  verify_mode exact = verify_mode::greedy;
  if (!o.sampling.is_greedy()) SPECDEC_TRY(matching_verify_mode(tree, exact));
  if (!o.rule) {
    out = exact;
    return status::success();
  }
  const verify_mode r = *o.rule;
  if (!is_valid_mode(r)) return make_status(status_code::invalid_argument, "unknown verify_mode");
  // Sampling: any rule check_verify_mode finds exact for how the tree was
  // drafted (e.g. traversal or block next to sampled_iid for i.i.d. drafts).
  const bool exact_for_tree = r == exact || (!o.sampling.is_greedy() && r != verify_mode::greedy &&
                                             r != verify_mode::typical_lossy && check_verify_mode(tree, r).ok());
  if (r == verify_mode::typical_lossy) {
    if (o.lossy != lossy_opt_in::typical_acceptance && o.lossy != lossy_opt_in::mismatched_rule)
      return make_status(status_code::invalid_argument,
                         "typical_lossy is lossy: opt in with lossy_opt_in::typical_acceptance");
  } else if (!exact_for_tree && o.lossy != lossy_opt_in::mismatched_rule) {
    return make_status(
        status_code::invalid_argument,
        "verify rule does not match how the tree was drafted: opt in with lossy_opt_in::mismatched_rule");
  }
  out = r;
  return status::success();
}

//! Uniforms an engine supplies for one round instead of the session's keyed
//! Philox streams (each half optional: an unset `u` keeps Philox for that
//! half). `draft` is handed to the builder as draft_round::uniforms (its
//! layout is documented there); `verify` feeds the verification walk,
//! u[node * draws_per_node + draw] as in verify/policy.hpp's
//! caller_uniforms, node ids those of the drafted tree. Both must cover the
//! builder's node_bound() nodes (a node or draw past the buffer is
//! invalid_argument from the builder or the walk). Copying the session's own
//! Philox draws into the buffers reproduces a seeded round exactly.
struct round_uniforms {
  caller_uniforms draft{nullptr, 0, 0};   //!< drafting uniforms (draft_round::uniforms)
  caller_uniforms verify{nullptr, 0, 0};  //!< verification uniforms (verify/policy.hpp)
};

//! Seconds spent in each stage (one round, or summed over rounds). The
//! session's own overhead is `overhead()`: everything but the caller's
//! drafter, target forward and KV commit.
struct stage_times {
  double draft = 0;    //!< tree building, drafter calls included
  double drafter = 0;  //!< inside the caller's drafter
  double flatten = 0;  //!< positions and ancestor mask
  double forward = 0;  //!< inside the caller's target forward
  double probs = 0;    //!< logits to probabilities (sampling params), rows the walk reads only
  double verify = 0;   //!< verification walk, conversions excluded
  double commit = 0;   //!< keep indices, history, caller's KV commit included
  double kv = 0;       //!< inside the caller's KV commit

  //! Seconds spent in the session itself: all stages except the caller's drafter, forward and KV commit.
  [[nodiscard]] double overhead() const noexcept { return draft - drafter + flatten + probs + verify + commit - kv; }
  //! Adds o's times stage by stage.
  stage_times& operator+=(const stage_times& o) noexcept {
    draft += o.draft;
    drafter += o.drafter;
    flatten += o.flatten;
    forward += o.forward;
    probs += o.probs;
    verify += o.verify;
    commit += o.commit;
    kv += o.kv;
    return *this;
  }
};

//! Statistics of one round.
struct round_stats {
  std::int32_t tree_nodes = 0;             //!< nodes in the drafted tree (root included)
  std::int32_t tree_depth = 0;             //!< deepest node's depth
  std::int32_t accepted = 0;               //!< accepted draft nodes (before stop/max truncation)
  std::int32_t emitted = 0;                //!< tokens appended to the sequence this round
  std::int32_t drafter_calls = 0;          //!< level-drafter calls (one per grown depth)
  std::int32_t drafted_nodes = 0;          //!< frontier nodes the drafter answered for
  std::int32_t target_calls = 0;           //!< target forward passes (1)
  std::int32_t probs_rows = 0;             //!< target rows converted to probabilities (those the walk read)
  verify_mode mode = verify_mode::greedy;  //!< verification rule the round used
  stage_times time{};                      //!< per-stage seconds of the round
  plan_summary plan{};                     //!< the planner's decision (kind none without a planner)
};

//! Statistics summed over the rounds since start().
struct session_stats {
  std::int64_t rounds = 0, tokens = 0, tree_nodes = 0, accepted = 0;
  std::int64_t drafter_calls = 0, drafted_nodes = 0, target_calls = 0, probs_rows = 0;
  //! Entry d - 1: rounds whose tree had a node at depth d / rounds that
  //! accepted a node at depth d. Their ratio is the acceptance rate at depth
  //! d given that the tree reached it.
  std::vector<std::int64_t> depth_drafted{}, depth_accepted{};
  stage_times time{};  //!< per-stage seconds, summed

  //! \var rounds
  //! Rounds run.
  //! \var tokens
  //! Tokens emitted (round_stats::emitted, summed).
  //! \var tree_nodes
  //! Drafted tree nodes, roots included (summed).
  //! \var accepted
  //! Accepted draft nodes (summed).
  //! \var drafter_calls
  //! Level-drafter calls (summed).
  //! \var drafted_nodes
  //! Frontier nodes the drafter answered for (summed).
  //! \var target_calls
  //! Target forward passes (summed).
  //! \var probs_rows
  //! Target rows converted to probabilities (summed).
  //! \var depth_accepted
  //! Entry d - 1: rounds that accepted a node at depth d (see depth_drafted).
};

namespace detail {

//! A grow-only array whose new storage is left uninitialized (pages the
//! round never touches are never faulted in).
template <class T>
class grow_buffer {
 public:
  T* get(std::size_t n) {
    if (n > cap_) {
      p_.reset(new T[n]);
      cap_ = n;
    }
    return p_.get();
  }

 private:
  std::unique_ptr<T[]> p_;
  std::size_t cap_ = 0;
};

inline double seconds_since(std::chrono::steady_clock::time_point t0) noexcept {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
//! Seconds since `t0`, which then moves to now: consecutive stages share
//! one clock read per boundary (a read costs 20-40 ns on a VM, a few
//! percent of a plain round's own work).
inline double lap(std::chrono::steady_clock::time_point& t0) noexcept {
  const auto t1 = std::chrono::steady_clock::now();
  const double s = std::chrono::duration<double>(t1 - t0).count();
  t0 = t1;
  return s;
}

//! A planner's view of one round (see round_feedback): the target pass ran
//! `pass_nodes` nodes in `pass_seconds`; st holds the request's drafter
//! counts and the round's stage times.
inline round_feedback feedback_of(const drafted_tree& t, std::span<const node_id> path, std::int32_t pass_nodes,
                                  double pass_seconds, const round_stats& st) noexcept {
  round_feedback f;
  f.tree = t.tree.view();
  f.draft_prob = t.prob;
  f.path = path;
  f.forward_nodes = pass_nodes;
  f.forward_seconds = pass_seconds;
  f.drafter_calls = st.drafter_calls;
  f.drafted_nodes = st.drafted_nodes;
  f.drafter_seconds = st.time.drafter;
  f.other_seconds = std::max(st.time.overhead() + st.time.kv, 0.0);
  return f;
}

//! Whether every round of a session with options `o` verifies greedily
//! (choose_verify_mode): greedy sampling and no named rule. Such rounds
//! never read q rows, so the builders are not asked to write them (V floats
//! per expanded node: more than half of a static tree's drafting at
//! V = 32000, bench_loop's BM_loop_round_static).
inline bool verifies_greedily(const session_options& o) noexcept { return o.sampling.is_greedy() && !o.rule; }

//! Presents any drafter as a level drafter and counts and times its calls.
template <any_drafter D>
class counting_drafter {
 public:
  counting_drafter(D& d, level_adapter_scratch& s, round_stats& st) noexcept : d_(&d), s_(&s), st_(&st) {}

  status level_probabilities(const draft_level& l, view2d<const float>& rows) requires level_probability_drafter<D> ||
      (!level_drafter<D> && probability_drafter<D>) {
    return timed(l, [&](auto& ld) { return ld.level_probabilities(l, rows); });
  }

  status level_top_candidates(const draft_level& l, view2d<token_id> tokens, view2d<float> probs,
                              std::span<std::int32_t> counts) requires level_topk_drafter<D> ||
      (!level_drafter<D> && !probability_drafter<D> && topk_drafter<D>) {
    return timed(l, [&](auto& ld) { return ld.level_top_candidates(l, tokens, probs, counts); });
  }

 private:
  template <class F>
  status timed(const draft_level& l, F&& f) {
    const auto t0 = std::chrono::steady_clock::now();
    const status s = with_level_drafter(*d_, *s_, f);
    st_->time.drafter += seconds_since(t0);
    ++st_->drafter_calls;
    st_->drafted_nodes += static_cast<std::int32_t>(l.nodes.size());
    return s;
  }

  D* d_;
  level_adapter_scratch* s_;
  round_stats* st_;
};

//! Whether the session can count and time the drafter's calls: the source is
//! a drafter and the builder accepts any level drafter.
template <class Builder, class Source>
concept countable = any_drafter<Source> && tree_builder<Builder, counting_drafter<Source>>;

}  // namespace detail

//! One sequence's speculative decoding loop over a caller's builder, drafter
//! (or other draft source) and target model.
//!
//! Usage: construct with a builder and options; `start(prompt)` after the
//! caller's cache holds the KV of prompt[0, size - 1) (the last prompt token
//! is the first tree's root and is scored by the first forward); then
//! `round(source, target)` until `done()`, or `generate(...)`.
//!
//! Each round: build the tree (key {seed, request, round}); choose the rule
//! (choose_verify_mode); positions and packed mask; one target forward;
//! verify_tree, where each target row is converted from logits to
//! probabilities when the walk first reads it (so only the rows of visited
//! nodes are converted or checked; greedy reads the logits); truncate at a
//! stop token or max_tokens; keep indices; the target's commit() when it is
//! a kv_committing_target; append the tokens. Output law: the target's
//! (under `sampling`) for exact rules; token-identical to greedy decoding at
//! temperature 0. Same options, prompt and models: same tokens.
//!
//! Memory: buffers grow to the largest round seen (node_bound() x V floats
//! for logits, probabilities and q rows; no q rows where every round
//! verifies greedily) and are reused; after the first
//! round at a given size nothing is allocated (provided the builder, the
//! drafter and the target allocate nothing either). Throwing convenience
//! (generate) and status-returning core (round).
template <class Builder>
class speculative_session {
 public:
  //! Takes the tree builder and the options; call start() before round().
  speculative_session(Builder builder, session_options o) : builder_(std::move(builder)), opt_(std::move(o)) {}

  //! Starts a new sequence with another Philox seed (same as setting
  //! session_options::seed, then start(prompt)).
  status start(std::span<const token_id> prompt, std::uint64_t seed) {
    opt_.seed = seed;
    return start(prompt);
  }

  //! Starts a new sequence. Errors: invalid_argument (empty prompt, V < 1,
  //! max_tokens < 1, bad sampling params or stop tokens), token_out_of_range.
  status start(std::span<const token_id> prompt) {
    if (opt_.vocab_size < 1) return make_status(status_code::invalid_argument, "vocab_size must be > 0");
    if (opt_.max_tokens < 1) return make_status(status_code::invalid_argument, "max_tokens must be >= 1");
    SPECDEC_TRY(validate_sampling_params(opt_.sampling));
    if (prompt.empty()) return make_status(status_code::invalid_argument, "the prompt needs at least one token");
    for (std::size_t i = 0; i < prompt.size(); ++i)
      if (prompt[i] < 0 || prompt[i] >= opt_.vocab_size)
        return make_status(status_code::token_out_of_range, "prompt token out of range", static_cast<std::int64_t>(i));
    for (const token_id t : opt_.stop_tokens)
      if (t < 0 || t >= opt_.vocab_size) return make_status(status_code::token_out_of_range, "stop token out of range");
    history_.reserve(prompt.size() + static_cast<std::size_t>(opt_.max_tokens));
    history_.assign(prompt.begin(), prompt.end());
    prompt_len_ = prompt.size();
    stopped_ = false;
    stats_.rounds = stats_.tokens = stats_.tree_nodes = stats_.accepted = 0;
    stats_.drafter_calls = stats_.drafted_nodes = stats_.target_calls = stats_.probs_rows = 0;
    std::fill(stats_.depth_drafted.begin(), stats_.depth_drafted.end(), 0);
    std::fill(stats_.depth_accepted.begin(), stats_.depth_accepted.end(), 0);
    stats_.time = {};
    last_ = {};
    if constexpr (requires { builder_.begin_request(); }) builder_.begin_request();
    return status::success();
  }

  //! True once max_tokens were generated or a stop token was emitted.
  [[nodiscard]] bool done() const noexcept {
    return stopped_ || generated() >= static_cast<std::size_t>(opt_.max_tokens);
  }

  //! One round (a no-op when done()). On error the sequence and the caller's
  //! cache are unchanged unless the error came from the target's commit().
  template <class Source, target_model Target>
  status round(Source& source, Target& target) {
    return round(source, target, round_uniforms{});
  }

  //! One round drafted and verified with the caller's uniforms (see
  //! round_uniforms) instead of the keyed Philox streams.
  template <class Source, target_model Target>
  status round(Source& source, Target& target, const round_uniforms& uniforms) {
    using clock = std::chrono::steady_clock;
    if (history_.empty()) return make_status(status_code::invalid_argument, "start() the session first");
    if (done()) return status::success();
    round_stats st{};
    const std::int64_t V = opt_.vocab_size;
    const auto bound = static_cast<std::size_t>(std::max<std::int32_t>(builder_.node_bound(), 1));
    const auto cache_len = static_cast<position_id>(history_.size() - 1);
    const std::span<const token_id> before_root(history_.data(), history_.size() - 1);
    const auto round_key = static_cast<std::uint32_t>(stats_.rounds);

    // 1. Draft.
    auto t0 = clock::now();
    draft_round dr;
    dr.root_token = history_.back();
    dr.rng = rng_stream{opt_.seed, opt_.request, round_key};
    dr.uniforms = uniforms.draft;
    dr.history = before_root;
    float* q = nullptr;
    if (!detail::verifies_greedily(opt_)) {
      q = q_.get(bound * static_cast<std::size_t>(V));
      dr.q_rows = make_view(q, static_cast<std::int64_t>(bound), V);
      // Sentinel: a builder that writes q rows overwrites row 0 whenever the
      // root has children (valid rows never hold NaN).
      q[0] = std::numeric_limits<float>::quiet_NaN();
    }
    if constexpr (detail::countable<Builder, Source>) {
      detail::counting_drafter<Source> cd(source, adapter_, st);
      SPECDEC_TRY(builder_.build(cd, dr, tree_));
    } else {
      SPECDEC_TRY(builder_.build(source, dr, tree_));
    }
    st.time.draft = detail::lap(t0);
    const std::int32_t n = tree_.size();
    if (static_cast<std::size_t>(n) > bound)
      return make_status(status_code::invalid_argument, "builder produced more nodes than its node_bound()");
    SPECDEC_TRY(choose_verify_mode(tree_, opt_, st.mode));
    if (uses_draft_probs(st.mode) && n > 1 && (q == nullptr || q[0] != q[0]))
      return make_status(status_code::invalid_argument, "the sampled rules need q rows and the builder wrote none");

    // 2. Flatten: positions and the packed ancestor mask, slot i = node i.
    //    A root-only tree (a plain step) has nothing to check or build.
    const auto parents = tree_.tree.parents();
    positions_.resize(static_cast<std::size_t>(n));
    const std::int64_t words = mask_words_per_row<std::uint64_t>(n);
    mask_.resize(static_cast<std::size_t>(n * words));
    std::int32_t depth = 0;
    const bool root_only = n == 1 && parents[0] == -1;  // anything else goes through the checks
    if (root_only) {
      positions_[0] = cache_len;
      mask_[0] = 1;
    } else {
      SPECDEC_TRY(build_positions<position_id>(parents, cache_len, positions_));
      SPECDEC_TRY(build_packed_mask<std::uint64_t>(parents, mask_));
      for (const auto p : positions_) depth = std::max(depth, static_cast<std::int32_t>(p - cache_len));
    }
    st.time.flatten = detail::lap(t0);

    // 3. Target forward over every node.
    float* logits = logits_.get(bound * static_cast<std::size_t>(V));
    const view2d<float> lv = make_view(logits, std::int64_t{n}, V);
    SPECDEC_TRY(target.forward(tree_forward{before_root, cache_len, tree_.tree.view(), positions_, mask_, words, lv}));
    ++st.target_calls;
    st.time.forward = detail::lap(t0);

    // 4. Verification; the walk converts a target row to probabilities
    //    when it first reads it (greedy reads the logits).
    verify_params vp;
    vp.mode = st.mode;
    vp.seed = opt_.seed;
    vp.request = opt_.request;
    vp.round = round_key;
    vp.typical_epsilon = opt_.typical_epsilon;
    vp.typical_delta = opt_.typical_delta;
    const view2d<const float> qv =
        uses_draft_probs(st.mode) ? make_view<const float>(q, std::int64_t{n}, V) : view2d<const float>{};
    verify_ws_.resize(verify_workspace_size(V, n));
    path_.resize(static_cast<std::size_t>(depth) + 1);
    emitted_.resize(static_cast<std::size_t>(depth) + 1);
    verify_result res;
    float* probs = nullptr;  // target rows as probabilities, converted as the walk reads them
    const auto verify_with = [&](const auto& uni) -> status {
      if (st.mode == verify_mode::greedy)
        return detail::verify_tree_with(tree_.tree.view(), lv.as_const(), qv, vp, uni, verify_ws_, path_, emitted_,
                                        res);
      probs = probs_.get(bound * static_cast<std::size_t>(V));
      filter_ws_.resize(logits_to_probs_workspace_size(V, opt_.sampling));
      ready_.assign(static_cast<std::size_t>(n), 0);
      detail::lazy_prob_state lz{lv.as_const(), probs, ready_.data(),
                                 std::span<const sampling_params>(&opt_.sampling, 1), filter_ws_};
      const status vs =
          detail::verify_tree_with(tree_.tree.view(), make_view<const float>(probs, std::int64_t{n}, V), qv, vp, uni,
                                   verify_ws_, path_, emitted_, res, detail::lazy_prob_ops(lz));
      SPECDEC_TRY(lz.error);  // a row that failed to convert, before what the walk made of it
      st.probs_rows = lz.converted;
      st.time.probs = lz.seconds;
      return vs;
    };
    if (uniforms.verify.u != nullptr) {
      SPECDEC_TRY(verify_with(uniforms.verify));
    } else {
      SPECDEC_TRY(verify_with(philox_uniforms{rng_stream{vp.seed, vp.request, vp.round}}));
    }
    st.time.verify = detail::lap(t0) - st.time.probs;

    // 5. Commit: the emitted tokens up to a stop token and max_tokens; the
    //    cache keeps the root and the accepted nodes before the last kept token.
    auto m = static_cast<std::size_t>(res.accepted) + 1;
    bool stop = false;
    for (std::size_t k = 0; k < m; ++k)
      if (std::find(opt_.stop_tokens.begin(), opt_.stop_tokens.end(), emitted_[k]) != opt_.stop_tokens.end()) {
        m = k + 1;
        stop = true;
        break;
      }
    m = std::min(m, static_cast<std::size_t>(opt_.max_tokens) - generated());
    keep_.resize(m);
    std::int32_t kept = 1;
    if (root_only)
      keep_[0] = cache_len;  // the root alone
    else
      SPECDEC_TRY(
          keep_indices_from_path(parents, std::span<const node_id>(path_).first(m), {}, cache_len, keep_, kept));
    if constexpr (kv_committing_target<Target>) {
      const auto tk = clock::now();
      SPECDEC_TRY(target.commit(kv_commit_request{cache_len, keep_, cache_len + kept}));
      st.time.kv = detail::seconds_since(tk);
    }
    history_.insert(history_.end(), emitted_.begin(), emitted_.begin() + static_cast<std::ptrdiff_t>(m));
    stopped_ = stop;
    st.time.commit = detail::lap(t0);

    st.tree_nodes = n;
    st.tree_depth = depth;
    st.accepted = res.accepted;
    st.emitted = static_cast<std::int32_t>(m);
    if constexpr (round_observing_builder<Builder>) {
      st.plan = builder_.last_plan();
      const std::span<const node_id> path(path_.data(), static_cast<std::size_t>(res.accepted) + 1);
      round_feedback f = detail::feedback_of(tree_, path, n, st.time.forward, st);
      if (probs != nullptr && n > 1) {
        // Acceptance as its expectation over this round's draws: the rows
        // of the path's nodes are converted (the walk read them).
        accept_.resize(static_cast<std::size_t>(n));
        SPECDEC_TRY(child_acceptance(tree_.tree.view(), path, st.mode,
                                     make_view<const float>(probs, std::int64_t{n}, V), qv, accept_));
        f.accept_prob = accept_;
      }
      f.tokens_left =
          stopped_ ? 0 : static_cast<std::int64_t>(opt_.max_tokens) - static_cast<std::int64_t>(generated());
      SPECDEC_TRY(builder_.observe(f));
    }
    account(st);
    return status::success();
  }

  //! start(prompt), then rounds until done(); `on_tokens(span)` receives the
  //! tokens of each round as they are committed. Returns the generated
  //! tokens (valid until the next start). Throws specdec::error.
  template <class Source, target_model Target, class OnTokens>
  std::span<const token_id> generate(Source& source, Target& target, std::span<const token_id> prompt,
                                     OnTokens&& on_tokens) {
    throw_if_error(start(prompt));
    while (!done()) {
      throw_if_error(round(source, target));
      on_tokens(last_tokens());
    }
    return generated_tokens();
  }
  template <class Source, target_model Target>
  //! generate() without a per-round callback.
  std::span<const token_id> generate(Source& source, Target& target, std::span<const token_id> prompt) {
    return generate(source, target, prompt, [](std::span<const token_id>) {});
  }

  //! Prompt and generated tokens.
  [[nodiscard]] std::span<const token_id> tokens() const noexcept { return history_; }
  //! Generated tokens only.
  [[nodiscard]] std::span<const token_id> generated_tokens() const noexcept {
    return std::span<const token_id>(history_).subspan(prompt_len_);
  }
  //! Tokens appended by the last round.
  [[nodiscard]] std::span<const token_id> last_tokens() const noexcept {
    return std::span<const token_id>(history_).last(static_cast<std::size_t>(last_.emitted));
  }
  //! The tree drafted by the last round.
  [[nodiscard]] const drafted_tree& last_tree() const noexcept { return tree_; }
  //! Statistics of the last round.
  [[nodiscard]] const round_stats& last_round() const noexcept { return last_; }
  //! Totals since start().
  [[nodiscard]] const session_stats& stats() const noexcept { return stats_; }
  //! The options given at construction.
  [[nodiscard]] const session_options& options() const noexcept { return opt_; }
  //! The tree builder (e.g. to change its options between rounds).
  [[nodiscard]] Builder& builder() noexcept { return builder_; }

 private:
  [[nodiscard]] std::size_t generated() const noexcept { return history_.size() - prompt_len_; }

  void account(const round_stats& st) {
    last_ = st;
    ++stats_.rounds;
    stats_.tokens += st.emitted;
    stats_.tree_nodes += st.tree_nodes;
    stats_.accepted += st.accepted;
    stats_.drafter_calls += st.drafter_calls;
    stats_.drafted_nodes += st.drafted_nodes;
    stats_.target_calls += st.target_calls;
    stats_.probs_rows += st.probs_rows;
    if (stats_.depth_drafted.size() < static_cast<std::size_t>(st.tree_depth)) {
      stats_.depth_drafted.resize(static_cast<std::size_t>(st.tree_depth), 0);
      stats_.depth_accepted.resize(static_cast<std::size_t>(st.tree_depth), 0);
    }
    for (std::int32_t d = 0; d < st.tree_depth; ++d) ++stats_.depth_drafted[static_cast<std::size_t>(d)];
    for (std::int32_t d = 0; d < st.accepted; ++d) ++stats_.depth_accepted[static_cast<std::size_t>(d)];
    stats_.time += st.time;
  }

  Builder builder_;
  session_options opt_;
  std::vector<token_id> history_;
  std::size_t prompt_len_ = 0;
  bool stopped_ = false;
  drafted_tree tree_;
  level_adapter_scratch adapter_;
  std::vector<position_id> positions_;
  std::vector<std::uint64_t> mask_;
  detail::grow_buffer<float> logits_, probs_, q_;
  std::vector<std::byte> filter_ws_, verify_ws_;
  std::vector<std::uint8_t> ready_;
  std::vector<float> accept_;  // child_acceptance of the last round, for a round-observing builder
  std::vector<node_id> path_;
  std::vector<token_id> emitted_;
  std::vector<position_id> keep_;
  round_stats last_{};
  session_stats stats_{};
};

}  // namespace specdec
