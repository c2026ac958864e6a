//! \file
//! Top-k of probability rows split over ranks, for tree drafting on a
//! vocabulary-parallel drafter: every rank selects the top-k of its columns,
//! then the ranks exchange k (value, token) keys per row and merge them.
//! The result is the top-k of the whole row in the specdec ranking
//! (probability descending, then token id ascending), so drafters on split
//! vocabularies pick the same children as on one device.
//!
//! Two forms. sharded_topk_probabilities: one row in host memory on any
//! collective (draft/detail/topk.hpp selects). sharded_topk_rows_on: every
//! frontier row of a tree level at once (the level-batched drafter shape of
//! draft/level_drafter.hpp) on a shard executor, so the rows may stay in
//! GPU memory (parallel/cuda_shard.cuh): one selection pass over the local
//! columns of every row, ONE all-gather of k + 3 int64s per row per rank,
//! one merge pass, one copy of the results to the host. The passes are
//! parallel/detail/topk_passes.hpp, the same code on host and device.
#pragma once

#include <cstdint>
#include <span>
#include <utility>

#include "specdec/core/status.hpp"
#include "specdec/core/view.hpp"
#include "specdec/core/workspace.hpp"
#include "specdec/draft/detail/topk.hpp"
#include "specdec/draft/drafter.hpp"
#include "specdec/draft/level_drafter.hpp"
#include "specdec/parallel/collective.hpp"
#include "specdec/parallel/detail/topk_passes.hpp"
#include "specdec/parallel/partition.hpp"
#include "specdec/parallel/shard_executor.hpp"
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

namespace detail {

//! The result region of sharded_topk_rows_on (the same layout where the
//! passes run and in host memory, so one copy moves it).
struct topk_results {
  topk_row_result* res = nullptr;
  token_id* tok = nullptr;
  float* val = nullptr;
  std::size_t bytes = 0;  //!< from res to the end of val
};

inline topk_results carve_topk_results(workspace_carver& w, std::int32_t rows, std::int32_t k) noexcept {
  const std::size_t before = w.bytes_used();
  const auto rk = static_cast<std::size_t>(rows) * static_cast<std::size_t>(k);
  topk_results t;
  t.res = w.take<topk_row_result>(static_cast<std::size_t>(rows));
  t.tok = w.take<token_id>(rk);
  t.val = w.take<float>(rk);
  t.bytes = w.bytes_used() - before;
  return t;
}

//! The pass-side scratch of sharded_topk_rows_on.
struct topk_exec_scratch {
  double* tiles = nullptr;
  std::int64_t* mine = nullptr;
  std::int64_t* all = nullptr;
  topk_results out{};
};

inline topk_exec_scratch carve_topk_exec(workspace_carver& w, std::int32_t rows, std::int64_t width, std::int32_t k,
                                         int ranks) noexcept {
  topk_exec_scratch s;
  const auto block = static_cast<std::size_t>(topk_block_slots(rows, k));
  s.tiles = w.take<double>(static_cast<std::size_t>(rows) * static_cast<std::size_t>(sum_tile_count(width)));
  s.mine = w.take<std::int64_t>(block);
  s.all = w.take<std::int64_t>(block * static_cast<std::size_t>(ranks));
  s.out = carve_topk_results(w, rows, k);
  return s;
}

inline status topk_row_status(const topk_row_result& r) noexcept {
  switch (static_cast<status_code>(r.code)) {
    case status_code::non_finite:
      return make_status(status_code::non_finite, "a drafter row has NaN or inf", r.index);
    case status_code::negative_probability:
      return make_status(status_code::negative_probability, "a drafter row has a negative entry", r.index);
    case status_code::zero_mass:
      return make_status(status_code::zero_mass, "a drafter row has zero mass (index: the row)", r.index);
    case status_code::invalid_argument:
      return make_status(status_code::invalid_argument, "ranks' columns must cover [0, V) in rank order", r.index);
    default:
      return make_status(static_cast<status_code>(r.code), "a drafter row failed", r.index);
  }
}

}  // namespace detail

//! Workspace of sharded_topk_rows_on for `rows` rows of `width` local
//! columns, top-k and `ranks` ranks: `exec` bytes where the executor's
//! passes run (tile sums, this rank's keys, every rank's keys, the merged
//! results), `host` bytes of host memory (the merged results; pinned
//! memory for a device executor). Any alignment (slack included). False
//! when rows < 0, width < 0, k < 1 or ranks < 1.
inline bool sharded_topk_rows_workspace_parts(std::int32_t rows, std::int64_t width, std::int32_t k, int ranks,
                                              std::size_t& exec, std::size_t& host) noexcept {
  exec = host = 0;
  if (rows < 0 || width < 0 || k < 1 || ranks < 1) return false;
  workspace_carver e, h;
  (void)detail::carve_topk_exec(e, rows, width, k, ranks);
  (void)detail::carve_topk_results(h, rows, k);
  exec = e.bytes_used() + unaligned_workspace_slack;
  host = h.bytes_used() + unaligned_workspace_slack;
  return true;
}

//! Bytes of workspace of sharded_topk_rows (both parts in host memory); 0
//! for invalid sizes.
inline std::size_t sharded_topk_rows_workspace_size(std::int32_t rows, std::int64_t width, std::int32_t k,
                                                    int ranks) noexcept {
  std::size_t e = 0, h = 0;
  return sharded_topk_rows_workspace_parts(rows, width, k, ranks, e, h) ? e + h : 0;
}

//! Top-k of every row of a tree level on a vocabulary split over the
//! executor's ranks. Collective: every rank calls it with the same V, k and
//! row count. `rows`: this rank's n x width columns [v0, v0 + width) of the
//! n drafter rows (any strides; in the memory the executor's passes read:
//! device memory for nccl_shard_executor), width may be 0; the ranks'
//! ranges must tile [0, V) in rank order. Writes, on every rank and in host
//! memory, row i's best counts[i] <= k global tokens and probabilities to
//! row i of tokens / probs (ranked as detail::topk_probabilities ranks the
//! full row: fewer than k when fewer entries are positive) and, when
//! `masses` is not empty, the row's mass (each rank's tiled sum of
//! sample/order.hpp, folded in rank order: the partitioned order of
//! parallel/sharded_verify.hpp). Workspace sizes from
//! sharded_topk_rows_workspace_parts(n, width, k, ranks).
//! Errors, the same on every rank: invalid_argument (k outside [1, V] or
//! above detail::topk_max_k = 64, V
//! outside [1, INT32_MAX], columns outside [0, V), ranks disagreeing on V,
//! k or n, ranges not tiling [0, V): index = the first bad rank),
//! size_mismatch / buffer_too_small (outputs, workspaces), then for the
//! lowest failing row: non_finite / negative_probability (index = the
//! global token of the lowest failing rank's first bad entry), zero_mass
//! (index = the row); executor failures (cuda_error). A failed row gets
//! counts 0; other rows are still written.
//! Traffic: agree_status (three int64 maxima, plus a broadcast when a rank
//! fails its checks), then one all-gather of 2 + n (k + 3) int64s per rank;
//! no row leaves its rank. Work per row: one pass for the mass and one for
//! the selection (each lane keeps its best k keys; O(width) typical, O(k *
//! width) worst case), k reductions over lanes, an O(k^2 * ranks) merge.
//! Deterministic; no allocation.
template <class Exec>
status sharded_topk_rows_on(Exec& ex, std::int64_t v0, std::int64_t V, view2d<const float> rows, std::int32_t k,
                            std::span<std::byte> exec_workspace, std::span<std::byte> host_workspace,
                            view2d<token_id> tokens, view2d<float> probs, std::span<std::int32_t> counts,
                            std::span<double> masses = {}) {
  const int P = ex.size();
  const std::int64_t n64 = rows.extent[0], w = rows.extent[1];
  const auto n = static_cast<std::int32_t>(n64 >= 0 && n64 <= INT32_MAX ? n64 : 0);
  detail::topk_exec_scratch es{};
  detail::topk_results hs{};
  auto local = [&]() -> status {
    if (n64 < 0 || n64 > INT32_MAX || w < 0) return make_status(status_code::invalid_argument, "bad row extents");
    if (V < 1 || V > INT32_MAX) return make_status(status_code::invalid_argument, "V must be in [1, INT32_MAX]");
    if (k < 1 || k > V || k > detail::topk_max_k)
      return make_status(status_code::invalid_argument, "k must be in [1, min(V, 64)]");
    if (v0 < 0 || v0 + w > V) return make_status(status_code::invalid_argument, "columns outside [0, V)");
    if (detail::topk_block_slots(n, k) * P > INT32_MAX)
      return make_status(status_code::invalid_argument, "too many rows for one gather");
    if (n > 0 && w > 0 && rows.data == nullptr) return make_status(status_code::invalid_argument, "rows is null");
    if (tokens.extent[0] < n64 || probs.extent[0] < n64 || tokens.extent[1] < k || probs.extent[1] < k ||
        counts.size() < static_cast<std::size_t>(n) || (!masses.empty() && masses.size() < static_cast<std::size_t>(n)))
      return make_status(status_code::size_mismatch, "outputs need n x k candidates and n counts (and n masses)");
    if (n > 0 && (tokens.data == nullptr || probs.data == nullptr))
      return make_status(status_code::invalid_argument, "outputs are null");
    std::size_t eb = 0, hb = 0;
    (void)sharded_topk_rows_workspace_parts(n, w, k, P, eb, hb);
    if (exec_workspace.size() < eb || host_workspace.size() < hb)
      return make_status(status_code::buffer_too_small, "workspace smaller than sharded_topk_rows_workspace_parts");
    workspace_carver ec = unaligned_carver(exec_workspace.data(), exec_workspace.size());
    workspace_carver hc = unaligned_carver(host_workspace.data(), host_workspace.size());
    es = detail::carve_topk_exec(ec, n, w, k, P);
    hs = detail::carve_topk_results(hc, n, k);
    if (ec.overflowed() || hc.overflowed())
      return make_status(status_code::buffer_too_small, "workspace smaller than sharded_topk_rows_workspace_parts");
    return status::success();
  };
  std::uint64_t fp = 0xcbf29ce484222325ull;
  detail::fingerprint_add(fp, V);
  detail::fingerprint_add(fp, k);
  detail::fingerprint_add(fp, n64);
  SPECDEC_TRY(agree_status(ex.coll(), local(), fp));
  for (std::int32_t i = 0; i < n; ++i) counts[static_cast<std::size_t>(i)] = 0;
  if (n == 0) return detail::executor_error(ex);
  ex.run_rows(detail::topk_select{rows.data, rows.stride[0], rows.stride[1], w, v0, k, es.tiles, es.mine}, n);
  const auto block = static_cast<int>(detail::topk_block_slots(n, k));
  ex.gather(es.mine, block, es.all);
  ex.run_rows(detail::topk_merge{es.all, P, n, k, V, es.out.res, es.out.tok, es.out.val}, n);
  ex.to_host(hs.res, es.out.res, es.out.bytes);
  SPECDEC_TRY(detail::executor_error(ex));  // a failed transport makes every result meaningless
  status first = status::success();
  for (std::int32_t i = 0; i < n; ++i) {
    const detail::topk_row_result& r = hs.res[i];
    if (r.code != 0) {
      if (first.ok()) first = detail::topk_row_status(r);
      continue;
    }
    for (std::int32_t j = 0; j < r.count; ++j) {
      tokens(i, j) = hs.tok[static_cast<std::int64_t>(i) * k + j];
      probs(i, j) = hs.val[static_cast<std::int64_t>(i) * k + j];
    }
    counts[static_cast<std::size_t>(i)] = r.count;
    if (!masses.empty()) masses[static_cast<std::size_t>(i)] = r.mass;
  }
  return first;
}

//! sharded_topk_rows_on with rows in host memory, on any collective.
//! workspace: sharded_topk_rows_workspace_size(n, width, k, size) bytes.
template <collective C>
status sharded_topk_rows(C& coll, std::int64_t v0, std::int64_t V, view2d<const float> rows, std::int32_t k,
                         std::span<std::byte> workspace, view2d<token_id> tokens, view2d<float> probs,
                         std::span<std::int32_t> counts, std::span<double> masses = {}) {
  host_shard_executor<C> ex(coll);
  std::size_t e = 0, h = 0;
  const std::int64_t n = rows.extent[0];
  (void)sharded_topk_rows_workspace_parts(static_cast<std::int32_t>(n >= 0 && n <= INT32_MAX ? n : 0), rows.extent[1],
                                          k, coll.size(), e, h);
  std::span<std::byte> ew = workspace, hw{};
  if (workspace.size() >= e) {
    ew = workspace.first(e);
    hw = workspace.subspan(e);
  }
  return sharded_topk_rows_on(ex, v0, V, rows, k, ew, hw, tokens, probs, counts, masses);
}

//! A level_topk_drafter (draft/level_drafter.hpp) over a drafter whose
//! output layer is split across the executor's ranks: `shard(level)`
//! returns this rank's columns [v0, v0 + width) of the frontier rows
//! (level.nodes.size() x width, in the memory the executor's passes read;
//! valid until the next call). Every rank runs the same builder with its
//! own adapter; each level is one sharded_topk_rows_on call, so all ranks
//! grow the same tree, identical to the tree built from the full rows.
//! Workspaces: sharded_topk_rows_workspace_parts(max frontier, width,
//! max k, ranks).
template <class Exec, class Shard>
class sharded_level_topk_drafter {
 public:
  //! Borrows ex and the workspaces.
  sharded_level_topk_drafter(Exec& ex, Shard shard, std::int64_t v0, std::int64_t vocab,
                             std::span<std::byte> exec_workspace, std::span<std::byte> host_workspace)
      : ex_(&ex), shard_(std::move(shard)), v0_(v0), V_(vocab), ew_(exec_workspace), hw_(host_workspace) {}

  //! The top candidates of every frontier row (collective).
  status level_top_candidates(const draft_level& l, view2d<token_id> tokens, view2d<float> probs,
                              std::span<std::int32_t> counts) {
    const view2d<const float> rows = shard_(l);
    const std::int64_t kk = tokens.extent[1] < probs.extent[1] ? tokens.extent[1] : probs.extent[1];
    const auto k = static_cast<std::int32_t>(kk < INT32_MAX ? kk : INT32_MAX);
    return sharded_topk_rows_on(*ex_, v0_, V_, rows, k, ew_, hw_, tokens, probs, counts);
  }

 private:
  Exec* ex_;
  Shard shard_;
  std::int64_t v0_, V_;
  std::span<std::byte> ew_, hw_;
};

}  // namespace specdec
