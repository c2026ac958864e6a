//! \file
//! Drafting into an arbitrary static shape: any parent array (a Medusa /
//! vLLM choice list through from_choices, a Sequoia tree, a hand-made one)
//! gives every shape node its own number of children, and each expanded
//! node draws that many children from its draft row in one draft mode:
//! top-k (deterministic), i.i.d. sampling or sampling without replacement
//! (Gumbel-top-k). The drafted tree records the mode per node, so
//! matching_verify_mode picks the exact verification rule.
#pragma once

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "specdec/core/error.hpp"
#include "specdec/core/philox.hpp"
#include "specdec/core/status.hpp"
#include "specdec/core/view.hpp"
#include "specdec/draft/detail/candidates.hpp"
#include "specdec/draft/detail/children.hpp"
#include "specdec/draft/drafter.hpp"
#include "specdec/draft/level_drafter.hpp"
#include "specdec/sample/row.hpp"
#include "specdec/tree/validate.hpp"

namespace specdec {

//! Options of static_tree_builder.
struct static_tree_options {
  //! The shape: a topological parent array (root -1 at 0). Shape node s has
  //! as many children as nodes name it as parent, in ascending id: its j-th
  //! shape child receives its j-th drawn token.
  std::vector<node_id> shape = {-1};
  //! deterministic (top-k), iid or without_replacement.
  draft_mode mode = draft_mode::deterministic;
  //! > 0: drafter rows must have this length (and candidate tokens be below it).
  std::int64_t vocab_size = 0;
  //! Early stop per depth (EAGLE-2's dynamic trees): a drafted node at depth
  //! d < size() whose path draft probability (exp of its log joint score) is
  //! below entry d is not expanded, so the shape below it is dropped. Empty:
  //! every shape node is expanded. Lossless for every rule: whether a node
  //! gets children is decided from draft rows of earlier levels, before its
  //! children are drawn, and never from the target.
  std::vector<double> min_path_probability{};
};

//! A drafted child's keep-or-refuse rule for static_tree_builder::build:
//! keep(tree so far, parent id, child token, child draft probability).
template <class K>
concept child_filter = std::predicate<K&, const drafted_tree&, node_id, token_id, float>;

//! Decides, before a level's drafter call, which nodes of the level are
//! expanded: keep.expand(tree so far, node id, its depth). A node refused
//! gets no drafter row and no children. Lossless in every draft mode: the
//! decision is made from earlier levels' drafts, before the children are
//! drawn (as min_path_probability).
template <class K>
concept level_filter = requires(K& k, const drafted_tree& t, node_id u, std::int32_t depth) {
  { k.expand(t, u, depth) } -> std::convertible_to<bool>;
};

//! A child filter that is also a level filter, so that a stop that would
//! refuse the children anyway does not pay for drafting them.
template <class K>
concept expansion_filter = child_filter<K> && level_filter<K>;

//! What static_tree_builder::build takes as a filter: a child filter, a
//! level filter or both.
template <class K>
concept draft_filter = child_filter<K> || level_filter<K>;

//! Grows the static shape level by level with one level-drafter call per
//! depth. A node that gets fewer tokens than its shape asks for (top-k or
//! without replacement over fewer positive-probability tokens) drops the
//! shape below the missing children. Node ids of the result are in level
//! order. Randomness: for_purpose(round.rng, rng_purpose::draft), keyed by
//! the drafted node id (as sampled_tree_builder), or the caller's
//! round.uniforms (layout in draft_round::uniforms). Scratch kept between builds.
class static_tree_builder : public owning_build<static_tree_builder> {
 public:
  //! Builds with options `o` (checked by build()).
  explicit static_tree_builder(static_tree_options o = {}) : opt_(std::move(o)) {}

  //! Errors: invalid_argument (bad shape, mode leaf, a sampled mode with a
  //! drafter that gives only top-k candidates), drafter errors, size_mismatch
  //! (q_rows too small), invalid_argument for a caller uniform outside
  //! [0, 1). `round.q_rows`, when set, receives the normalized q
  //! row of every expanded node whose drafter gave rows.
  template <any_drafter D>
  status build(D& d, const draft_round& round, drafted_tree& out) {
    return build(d, round, out, keep_every_child{});
  }

  //! As build(), with a filter. A child_filter (deterministic mode only):
  //! each drawn child is first offered to `keep(out, parent, token, q)` (its
  //! parent's node id in `out`, its token, its draft probability): a child
  //! refused is not added, nor are the later (less probable) children of its
  //! parent, nor anything below them. Lossless: top-k children and the choice
  //! are functions of the draft rows, never of the target, and a
  //! deterministic draft may be any such function (docs/loop.md). keep is
  //! called in the order children are added, so a kept child's node id is
  //! out.size() at the call. A level_filter (every mode) is asked, for each
  //! node of a level that the shape expands, whether to expand it (before
  //! the level's drafter call, in node id order); a node refused is drafted
  //! no children.
  //! Errors: as build(); invalid_argument for a child filter in a sampled mode.
  template <any_drafter D, draft_filter Keep>
  status build(D& d, const draft_round& round, drafted_tree& out, Keep&& keep) {
    SPECDEC_TRY(prepare());
    if (opt_.mode == draft_mode::leaf)
      return make_status(status_code::invalid_argument, "draft mode leaf draws nothing");
    if constexpr (child_filter<Keep> && !std::same_as<std::remove_cvref_t<Keep>, keep_every_child>)
      if (opt_.mode != draft_mode::deterministic)
        return make_status(status_code::invalid_argument, "a child filter needs deterministic drafts");
    const auto n = static_cast<std::int32_t>(opt_.shape.size());
    if (round.q_rows.data != nullptr &&
        (round.q_rows.extent[0] < n || (opt_.vocab_size > 0 && round.q_rows.extent[1] != opt_.vocab_size)))
      return make_status(status_code::size_mismatch, "q_rows must hold one V-row per shape node");
    const detail::draft_uniforms uni{for_purpose(round.rng, rng_purpose::draft), round.uniforms};
    out.reset(round.root_token);
    out.reserve(static_cast<std::size_t>(n));
    frontier_.assign(1, 0);  // shape node of each drafted frontier node (drafted ids begin..end)
    return with_level_drafter(d, lv_.adapter, [&](auto& ld) -> status {
      using L = std::remove_reference_t<decltype(ld)>;
      node_id begin = 0;
      for (std::int32_t depth = 0; !frontier_.empty(); ++depth) {
        // Expanded nodes of this level: those whose shape node has children.
        lv_.nodes.clear();
        shape_of_.clear();
        std::int32_t wmax = 0;
        for (std::size_t i = 0; i < frontier_.size(); ++i) {
          const node_id s = frontier_[i];
          const std::int32_t k =
              first_child_[static_cast<std::size_t>(s) + 1] - first_child_[static_cast<std::size_t>(s)];
          if (k == 0 || pruned(out, begin + static_cast<node_id>(i), depth)) continue;
          if constexpr (level_filter<Keep>)
            if (!keep.expand(std::as_const(out), begin + static_cast<node_id>(i), depth)) continue;
          lv_.nodes.push_back(begin + static_cast<node_id>(i));
          shape_of_.push_back(s);
          wmax = std::max(wmax, k);
        }
        const node_id end = out.size();
        next_.clear();
        if (lv_.nodes.empty()) break;
        tok_.resize(static_cast<std::size_t>(wmax));
        val_.resize(static_cast<std::size_t>(wmax));
        key_.resize(static_cast<std::size_t>(wmax));
        const draft_level level{depth, std::span<const node_id>(lv_.nodes), &out.tree, round.history};
        if constexpr (level_probability_drafter<L>) {
          view2d<const float> rows{};
          SPECDEC_TRY(ld.level_probabilities(level, rows));
          SPECDEC_TRY(detail::check_level_rows(rows, lv_.nodes.size(), opt_.vocab_size));
          tiles_.resize(static_cast<std::size_t>(sum_tile_count(rows.extent[1])));
          for (std::size_t i = 0; i < lv_.nodes.size(); ++i) {
            const node_id u = lv_.nodes[i];
            view1d<const float> rv{};
            double total = 0.0;
            SPECDEC_TRY(detail::take_level_row(rows, i, u, round.q_rows, rv, total, tiles_.data()));
            const node_id s = shape_of_[i];
            const std::int32_t k =
                first_child_[static_cast<std::size_t>(s) + 1] - first_child_[static_cast<std::size_t>(s)];
            std::int32_t got = 0;
            SPECDEC_TRY(detail::draw_children(opt_.mode, rv, total, uni, u, k, tok_.data(), val_.data(), key_.data(),
                                              got, tiles_.data()));
            add_children(out, u, s, got, keep);
          }
        } else {
          if (opt_.mode != draft_mode::deterministic)
            return make_status(status_code::invalid_argument, "sampled modes need a drafter that returns rows");
          SPECDEC_TRY(detail::level_topk(ld, out.tree, depth, round.history, wmax, opt_.vocab_size, lv_));
          const auto kk = static_cast<std::size_t>(wmax);
          for (std::size_t i = 0; i < lv_.nodes.size(); ++i) {
            const node_id s = shape_of_[i];
            const std::int32_t k =
                first_child_[static_cast<std::size_t>(s) + 1] - first_child_[static_cast<std::size_t>(s)];
            const std::int32_t got = std::min(k, lv_.count[i]);
            std::copy_n(lv_.tok.begin() + static_cast<std::ptrdiff_t>(i * kk), got, tok_.begin());
            std::copy_n(lv_.val.begin() + static_cast<std::ptrdiff_t>(i * kk), got, val_.begin());
            add_children(out, lv_.nodes[i], s, got, keep);
          }
        }
        frontier_.swap(next_);
        begin = end;
      }
      return status::success();
    });
  }

  //! Nodes of the shape: the most a build produces.
  [[nodiscard]] std::int32_t node_bound() const noexcept { return static_cast<std::int32_t>(opt_.shape.size()); }
  //! The options given at construction.
  const static_tree_options& options() const noexcept { return opt_; }
  //! The options, to change between builds (a planner's next shape); the
  //! next build() checks them. Keeps the capacity of the shape vector.
  static_tree_options& options() noexcept { return opt_; }

 private:
  // Validates the shape and builds its child lists (CSR, ascending ids).
  status prepare() {
    const auto n = static_cast<std::int32_t>(opt_.shape.size());
    if (n < 1) return make_status(status_code::empty_input, "the shape needs a root");
    SPECDEC_TRY(validate_topological_parents(opt_.shape.data(), n));
    for (std::size_t d = 0; d < opt_.min_path_probability.size(); ++d)
      if (!(opt_.min_path_probability[d] >= 0.0 && opt_.min_path_probability[d] <= 1.0))
        return make_status(status_code::invalid_argument, "min_path_probability entries must lie in [0, 1]",
                           static_cast<std::int64_t>(d));
    first_child_.assign(static_cast<std::size_t>(n) + 1, 0);
    for (std::int32_t i = 1; i < n; ++i)
      ++first_child_[static_cast<std::size_t>(opt_.shape[static_cast<std::size_t>(i)]) + 1];
    for (std::int32_t i = 0; i < n; ++i)
      first_child_[static_cast<std::size_t>(i) + 1] += first_child_[static_cast<std::size_t>(i)];
    child_.resize(static_cast<std::size_t>(n));
    fill_.assign(first_child_.begin(), first_child_.end() - 1);
    for (std::int32_t i = 1; i < n; ++i) {
      const auto p = static_cast<std::size_t>(opt_.shape[static_cast<std::size_t>(i)]);
      child_[static_cast<std::size_t>(fill_[p]++)] = i;
    }
    return status::success();
  }

  [[nodiscard]] bool pruned(const drafted_tree& out, node_id u, std::int32_t depth) const noexcept {
    const auto d = static_cast<std::size_t>(depth);
    if (depth == 0 || d >= opt_.min_path_probability.size()) return false;
    return std::exp(static_cast<double>(out.tree.score(u))) < opt_.min_path_probability[d];
  }

  struct keep_every_child {
    constexpr bool operator()(const drafted_tree&, node_id, token_id, float) const noexcept { return true; }
  };

  template <class Keep>
  void add_children(drafted_tree& out, node_id u, node_id s, std::int32_t got, Keep& keep) {
    const float base = out.tree.score(u);
    const std::int32_t c0 = first_child_[static_cast<std::size_t>(s)];
    for (std::int32_t j = 0; j < got; ++j) {
      if constexpr (child_filter<Keep>)
        if (!keep(out, u, tok_[static_cast<std::size_t>(j)], val_[static_cast<std::size_t>(j)])) return;
      out.add(u, tok_[static_cast<std::size_t>(j)], val_[static_cast<std::size_t>(j)],
              base + detail::log_prob(val_[static_cast<std::size_t>(j)]), opt_.mode);
      next_.push_back(child_[static_cast<std::size_t>(c0 + j)]);
    }
  }

  static_tree_options opt_;
  std::vector<std::int32_t> first_child_, child_, fill_;
  std::vector<node_id> frontier_, next_, shape_of_;
  std::vector<token_id> tok_;
  std::vector<float> val_;
  std::vector<double> key_, tiles_;  // tiles_: the tile sums of the row being drawn from
  detail::level_scratch lv_;
};

}  // namespace specdec
