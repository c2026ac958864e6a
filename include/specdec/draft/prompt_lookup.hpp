//! \file
//! Prompt lookup as a tree builder (no model, no state): the longest suffix
//! of the context (history followed by the root) that occurred earlier in
//! it proposes what followed it, as far as the matches support; where the
//! most recent occurrences continue differently the draft branches into a
//! tree. Each drafted token carries a count-based confidence, the share of
//! the merged occurrences that continue with it, and the tree keeps the
//! continuations of highest joint confidence under a node budget. Drafts are
//! a function of the committed context only, so every expanded node is
//! `draft_mode::deterministic` and the one-hot rule (or greedy at
//! temperature 0) verifies them exactly.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>
#if defined(__AVX2__) && !defined(__CUDACC__) && !defined(SPECDEC_NO_SIMD)
#include <immintrin.h>
#endif

#include "specdec/core/error.hpp"
#include "specdec/core/status.hpp"
#include "specdec/draft/detail/count_trie.hpp"
#include "specdec/draft/drafter.hpp"
#include "specdec/tree/token_tree.hpp"

namespace specdec {

//! Options of `prompt_lookup_builder`.
struct prompt_lookup_options {
  std::int32_t max_ngram = 4;    //!< longest context suffix searched for (>= min_ngram)
  std::int32_t min_ngram = 1;    //!< shortest context suffix searched for (>= 1)
  std::int32_t max_matches = 8;  //!< most recent occurrences whose continuations are merged (>= 1)
  std::int32_t max_depth = 16;   //!< deepest drafted token (>= 0)
  std::int32_t max_nodes = 32;   //!< node budget of the tree, root included (>= 1)
  //! > 0: the depth limit is also ceil(depth_per_match * matched n-gram
  //! length) (SuffixDecoding's speculation length scaled by match length).
  float depth_per_match = 0.0f;
  //! Nodes whose joint confidence is below this are not drafted ([0, 1]).
  float min_prob = 0.0f;
  //! Pseudo-count: a continuation seen c times out of n merged occurrences
  //! has confidence c / (n + prior) (>= 0; 0 = plain frequency, so a single
  //! occurrence drafts with confidence 1).
  float prior = 1.0f;
  //! > 0: every context token must lie in [0, vocab_size).
  std::int64_t vocab_size = 0;
};

//! What the last build of a prompt_lookup_builder found.
struct prompt_lookup_match {
  std::int32_t ngram = 0;    //!< length of the matched suffix (0 = no match, root-only tree)
  std::int32_t matches = 0;  //!< occurrences merged (<= max_matches)
};

//! Prompt lookup with count-based trees. Scans the context once per build,
//! backwards (O(n * max_ngram) comparisons worst case, n = history.size() +
//! 1; about n where few positions hold the last token), merges
//! the continuations of the `max_matches` most recent occurrences of the
//! longest matching suffix into a counted trie (each continuation runs to
//! the end of the context or the depth limit) and grows the drafted tree
//! best-first by joint confidence. Scratch is kept between builds (no
//! allocation once warm). It has the loop layer's `tree_builder` signature
//! for any source (the source is not read: everything comes from the
//! round's history and root), so `speculative_session` can run it.
class prompt_lookup_builder : public owning_build<prompt_lookup_builder> {
 public:
  //! A builder with these options.
  explicit prompt_lookup_builder(prompt_lookup_options o = {}) : opt_(o) {}

  //! Builds into `out` (cleared first) from `round.history` followed by
  //! `round.root_token`. Errors: invalid_argument (an option outside its
  //! domain), token_out_of_range (vocab_size > 0 and a context token outside
  //! [0, vocab_size); the index counts from the first history token, the
  //! root is history.size()). On error `out` holds at most the root.
  status build(const draft_round& round, drafted_tree& out) {
    out.clear();
    last_ = {};
    SPECDEC_TRY(validate());
    const std::span<const token_id> h = round.history;
    const auto n = static_cast<std::int64_t>(h.size()) + 1;
    const auto at = [&](std::int64_t i) { return i + 1 < n ? h[static_cast<std::size_t>(i)] : round.root_token; };
    if (opt_.vocab_size > 0) {
      // The largest token as unsigned (negative ones wrap to 2^31 or more,
      // outside any vocabulary an int32 id can index): one vectorized pass;
      // the first bad index only if any.
      const auto bad = [&](token_id t) { return t < 0 || t >= opt_.vocab_size; };
      auto largest = static_cast<std::uint32_t>(round.root_token);
      for (const token_id t : h) largest = std::max(largest, static_cast<std::uint32_t>(t));
      if (static_cast<std::int64_t>(largest) >= std::min<std::int64_t>(opt_.vocab_size, std::int64_t{1} << 31))
        return make_status(status_code::token_out_of_range, "context token outside [0, vocab_size)",
                           std::find_if(h.begin(), h.end(), bad) - h.begin());
    }
    out.reset(round.root_token);
    if (opt_.max_nodes <= 1 || opt_.max_depth == 0) return status::success();
    find_occurrences(h, round.root_token);
    if (starts_.empty()) return status::success();
    const std::int32_t g = last_.ngram;

    // Counted trie of the continuations (scratch), then best-first growth.
    const std::int32_t depth = detail::depth_limit(opt_.max_depth, opt_.depth_per_match, g);
    trie_.assign(1, detail::count_node{round.root_token, static_cast<std::uint32_t>(starts_.size()), -1, -1});
    for (const std::int64_t s : starts_) {
      std::int32_t u = 0;
      for (std::int64_t i = s; i < n && i < s + depth; ++i) u = child(u, at(i));
    }
    detail::grow_best_first(trie_, 0, detail::growth_limits{opt_.max_nodes, depth, opt_.min_prob, opt_.prior}, out,
                            heap_);
    return status::success();
  }

  //! The `tree_builder` signature: `source` is not read.
  template <class Source>
  status build(Source& /*source*/, const draft_round& round, drafted_tree& out) {
    return build(round, out);
  }

  //! Most nodes a build can produce (max_nodes, at least 1).
  [[nodiscard]] std::int32_t node_bound() const noexcept { return std::max(opt_.max_nodes, 1); }

  //! What the last build matched.
  [[nodiscard]] const prompt_lookup_match& last_match() const noexcept { return last_; }

  //! The options it was built with.
  [[nodiscard]] const prompt_lookup_options& options() const noexcept { return opt_; }
  //! Replaces the options (checked by the next build).
  void set_options(const prompt_lookup_options& o) noexcept { opt_ = o; }

 private:
  status validate() const noexcept {
    if (opt_.min_ngram < 1 || opt_.max_ngram < opt_.min_ngram)
      return make_status(status_code::invalid_argument, "need 1 <= min_ngram <= max_ngram");
    if (opt_.max_matches < 1) return make_status(status_code::invalid_argument, "max_matches must be >= 1");
    return detail::check_growth(opt_.max_nodes, opt_.max_depth, opt_.min_prob, opt_.prior, opt_.depth_per_match);
  }

  // The longest suffix of the context (max_ngram down to min_ngram) with an
  // earlier occurrence, and its max_matches most recent occurrences, as the
  // positions that continue them (into starts_, most recent first). One
  // backward pass for every length at once: a position holding the root
  // token ends an occurrence of each length up to its common suffix with
  // the context (a scan per length read a context without repeats
  // max_ngram times). It stops once the longest length has its matches.
  void find_occurrences(std::span<const token_id> h, token_id root) {
    starts_.clear();
    const auto n = static_cast<std::int64_t>(h.size()) + 1;
    const auto longest = static_cast<std::int32_t>(std::min<std::int64_t>(opt_.max_ngram, n - 1));
    if (longest < opt_.min_ngram) return;
    const auto lengths = static_cast<std::size_t>(longest - opt_.min_ngram + 1);
    const auto m = static_cast<std::size_t>(opt_.max_matches);
    suffix_.resize(static_cast<std::size_t>(longest));  // suffix_[k]: the context's k-th token from the end
    suffix_[0] = root;
    for (std::int32_t k = 1; k < longest; ++k)
      suffix_[static_cast<std::size_t>(k)] = h[static_cast<std::size_t>(n - 1 - k)];
    found_.resize(lengths * m);
    count_.assign(lengths, 0);
    auto& full = count_.back();  // matches of the longest length
    const token_id* t = h.data();
    for (std::int64_t e = n - 2; e >= 0 && full < m; --e) {
      // Blocks of 16 without the root token are skipped whole.
      while (e >= 15) {
        if (holds(t + (e - 15), root)) break;
        e -= 16;
      }
      if (e < 0 || t[e] != root) continue;
      std::int32_t common = 1;  // tokens h[e - common + 1 .. e] equal the context's last ones
      while (common < longest && common <= e && t[e - common] == suffix_[static_cast<std::size_t>(common)]) ++common;
      for (std::int32_t g = opt_.min_ngram; g <= common; ++g) {
        const auto l = static_cast<std::size_t>(g - opt_.min_ngram);
        if (count_[l] < m) found_[l * m + count_[l]++] = e + 1;
      }
    }
    for (std::size_t l = lengths; l-- > 0;)
      if (count_[l] > 0) {
        starts_.assign(found_.begin() + static_cast<std::ptrdiff_t>(l * m),
                       found_.begin() + static_cast<std::ptrdiff_t>(l * m + count_[l]));
        last_ = {opt_.min_ngram + static_cast<std::int32_t>(l), static_cast<std::int32_t>(count_[l])};
        return;
      }
  }

  // Whether b[0, 16) holds `root` (AVX2, unless SPECDEC_NO_SIMD: two
  // compares and a test; GCC leaves the plain loop scalar, about 0.5 ns a
  // token).
  static bool holds(const token_id* b, token_id root) noexcept {
#if defined(__AVX2__) && !defined(__CUDACC__) && !defined(SPECDEC_NO_SIMD)
    const __m256i r = _mm256_set1_epi32(root);
    const __m256i hit =
        _mm256_or_si256(_mm256_cmpeq_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b)), r),
                        _mm256_cmpeq_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 8)), r));
    return _mm256_testz_si256(hit, hit) == 0;
#else
    std::uint32_t any = 0;
    for (int k = 0; k < 16; ++k) any |= static_cast<std::uint32_t>(b[k] == root);
    return any != 0;
#endif
  }

  // Child of u carrying t (created with count 1, or counted once more).
  std::int32_t child(std::int32_t u, token_id t) {
    std::int32_t* link = &trie_[static_cast<std::size_t>(u)].first_child;
    while (*link >= 0) {
      detail::count_node& c = trie_[static_cast<std::size_t>(*link)];
      if (c.token == t) {
        ++c.count;
        return *link;
      }
      link = &c.next_sibling;
    }
    const auto id = static_cast<std::int32_t>(trie_.size());
    *link = id;  // before push_back: the link points into trie_
    trie_.push_back(detail::count_node{t, 1, -1, -1});
    return id;
  }

  prompt_lookup_options opt_;
  prompt_lookup_match last_{};
  std::vector<std::int64_t> starts_, found_;
  std::vector<std::size_t> count_;
  std::vector<token_id> suffix_;
  std::vector<detail::count_node> trie_;
  std::vector<detail::growth_candidate> heap_;
};

}  // namespace specdec
