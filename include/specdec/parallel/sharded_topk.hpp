//! \file
//! Top-k of a probability row split over ranks, for tree drafting on a
//! vocabulary-parallel drafter: every rank selects the top-k of its columns
//! (draft/detail/topk.hpp, the builders' own selection), then one
//! all-reduce of k (value, token) keys per rank merges them. The result is
//! the top-k of the whole row in the specdec ranking (probability
//! descending, then token id ascending), so drafters on split vocabularies
//! pick the same children as on one device.
#pragma once

#include <cstdint>
#include <span>
#include <utility>

#include "specdec/core/status.hpp"
#include "specdec/draft/detail/topk.hpp"
#include "specdec/draft/drafter.hpp"
#include "specdec/parallel/collective.hpp"
#include "specdec/tree/token_tree.hpp"

namespace specdec {

//! Bytes of int64 scratch sharded_topk_probabilities needs: k keys per rank.
inline std::size_t sharded_topk_workspace_size(std::int32_t k, int ranks) noexcept {
  return k <= 0 || ranks <= 0 ? 0 : static_cast<std::size_t>(k) * static_cast<std::size_t>(ranks) * 8;
}

//! The top-k tokens of a probability row whose columns [v0, v0 +
//! row.size()) this rank holds (V = the full vocabulary, the same on every
//! rank; a rank may hold no columns). Collective. Writes, on every rank,
//! the `count` (<= k; fewer when fewer tokens have positive probability)
//! best global token ids to tok and their probabilities to val, ranked as
//! detail::topk_probabilities ranks the full row, and the row mass (the
//! ranks' masses folded in rank order) to `*mass` when given.
//! keys: sharded_topk_workspace_size(k, size) bytes as int64.
//! Errors, the same on every rank (agree_status): invalid_argument (k
//! outside [1, V], v0 or V inconsistent), non_finite /
//! negative_probability (with the global token), zero_mass (whole row).
//! Cost: one pass over the local columns, four small collectives and one
//! all-reduce of k * size int64; the merge is O(k * size) per rank.
template <collective C>
status sharded_topk_probabilities(C& coll, std::span<const float> row, std::int64_t v0, std::int64_t V, std::int32_t k,
                                  std::span<std::int64_t> keys, token_id* tok, float* val, std::int32_t& count,
                                  double* mass = nullptr) {
  count = 0;
  const int P = coll.size(), r = coll.rank();
  const auto w = static_cast<std::int64_t>(row.size());
  std::int32_t n = 0;
  double m = 0.0;
  auto local = [&]() -> status {
    if (k <= 0 || k > V) return make_status(status_code::invalid_argument, "k must be in [1, V]");
    if (v0 < 0 || v0 + w > V) return make_status(status_code::invalid_argument, "columns outside [0, V)");
    if (keys.size() < static_cast<std::size_t>(k) * static_cast<std::size_t>(P))
      return make_status(status_code::buffer_too_small, "keys need k * size entries");
    if (w == 0) return status::success();
    const std::int32_t kk = static_cast<std::int64_t>(k) < w ? k : static_cast<std::int32_t>(w);
    // tok and val hold this rank's selection until the merge.
    const status s = detail::topk_probabilities(row, kk, tok, val, n, &m);
    if (s.code() == status_code::zero_mass) {
      n = 0;
      m = 0.0;
      return status::success();
    }
    if (!s.ok()) return make_status(s.code(), s.message(), s.index() + v0);
    return status::success();
  };
  std::uint64_t fp = 0xcbf29ce484222325ull;
  detail::fingerprint_add(fp, V);
  detail::fingerprint_add(fp, k);
  SPECDEC_TRY(agree_status(coll, local(), fp));
  // Columns must tile [0, V) in rank order: each rank's v0 is the sum of lower widths.
  double pos[2] = {static_cast<double>(w), static_cast<double>(w)};
  coll.exclusive_prefix_sum(pos, 1);
  coll.all_reduce_sum(pos + 1, 1);
  const bool tiles = pos[0] == static_cast<double>(v0) && pos[1] == static_cast<double>(V);
  SPECDEC_TRY(
      agree_status(coll,
                   tiles ? status::success()
                         : make_status(status_code::invalid_argument, "ranks' columns must cover [0, V) in rank order"),
                   0));
  double tm = m;
  coll.all_reduce_sum(&tm, 1);
  if (!(tm > 0.0)) return make_status(status_code::zero_mass, "probability row has zero mass");
  const std::size_t kp = static_cast<std::size_t>(k) * static_cast<std::size_t>(P);
  const std::size_t slot = static_cast<std::size_t>(r) * static_cast<std::size_t>(k);
  for (std::size_t i = 0; i < kp; ++i) keys[i] = detail::no_key;
  for (std::int32_t j = 0; j < n; ++j) keys[slot + static_cast<std::size_t>(j)] = detail::rank_key(val[j], v0 + tok[j]);
  coll.all_reduce_max(keys.data(), k * P);
  // Merge: every rank's list is sorted; repeatedly take the largest head.
  for (std::int32_t j = 0; j < k; ++j) {
    std::int64_t best = detail::no_key;
    int who = -1;
    for (int q = 0; q < P; ++q) {
      // A rank's head is its first key not yet taken (taken keys and padding are no_key).
      for (std::int32_t i = 0; i < k; ++i) {
        const std::int64_t key = keys[static_cast<std::size_t>(q * k + i)];
        if (key == detail::no_key) continue;
        if (key > best) {
          best = key;
          who = q * k + i;
        }
        break;
      }
    }
    if (who < 0) break;
    keys[static_cast<std::size_t>(who)] = detail::no_key;
    tok[j] = static_cast<token_id>(detail::key_token(best));
    val[j] = detail::key_value(best);
    count = j + 1;
  }
  if (mass != nullptr) *mass = tm;
  return collective_error(coll);
}

//! A topk_drafter (draft/drafter.hpp) over a drafter whose output layer is
//! split across ranks: `shard(ctx)` returns this rank's columns [v0, v0 +
//! width) of q_ctx as a span of floats (valid until the next call). Every
//! rank runs the same builder (topk_tree_builder, the beam builder...) with
//! its own adapter; each top_candidates call is collective, so all ranks
//! grow the same tree, identical to the tree built from the full rows.
//! A failed call returns -1 (the builders then stop with invalid_argument,
//! on every rank) and keeps the status in last_status().
template <collective C, class Shard>
class sharded_topk_drafter {
 public:
  //! Borrows coll and keys (sharded_topk_workspace_size(k_max, size) bytes
  //! as int64, where k_max is the largest k the builder asks for).
  sharded_topk_drafter(C& coll, Shard shard, std::int64_t v0, std::int64_t vocab, std::span<std::int64_t> keys)
      : coll_(&coll), shard_(std::move(shard)), v0_(v0), V_(vocab), keys_(keys) {}

  //! The top tokens.size() candidates of the whole row (collective).
  std::int32_t top_candidates(const draft_context& ctx, std::span<token_id> tokens, std::span<float> probs) {
    const std::span<const float> row = shard_(ctx);
    std::int32_t n = 0;
    const auto k = static_cast<std::int32_t>(tokens.size() < probs.size() ? tokens.size() : probs.size());
    last_ = sharded_topk_probabilities(*coll_, row, v0_, V_, k, keys_, tokens.data(), probs.data(), n);
    return last_.ok() ? n : -1;
  }
  //! Status of the last call.
  [[nodiscard]] status last_status() const noexcept { return last_; }

 private:
  C* coll_;
  Shard shard_;
  std::int64_t v0_, V_;
  std::span<std::int64_t> keys_;
  status last_ = status::success();
};

}  // namespace specdec
