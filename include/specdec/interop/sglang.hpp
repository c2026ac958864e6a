//! \file
//! SGLang's two tree-verification entry points, on the host, on SGLang's own
//! batch layout (linked-list trees, `retrive_index` rows, `predicts`,
//! `accept_index`, `accept_token_num`), built from specdec primitives:
//! tree_from_linked_list, then a specdec walk, then write_sglang_results.
//! - sglang_verify_tree_greedy: greedy from precomputed target argmax ids
//!   (`target_predict`), lossless (token-identical to greedy decoding).
//! - sglang_tree_sampling_target_only: SGLang's coin rule. Each expanded
//!   node draws ONE coin and accepts the first child whose running sum of
//!   target probabilities over the siblings visited so far reaches it
//!   (`coin <= sum / threshold_acc`), or any child whose own probability is
//!   `>= threshold_single`; after the walk one more coin samples the last
//!   node's target row with the rejected children of that node removed.
//!   With threshold_single = threshold_acc = 1 and distinct sibling tokens
//!   this is exact (inverse-CDF sampling of p with the children first);
//!   any threshold below 1 is LOSSY (it accepts more than p allows).
//! See docs/interop.md for the coin conventions side by side.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>

#include "specdec/core/status.hpp"
#include "specdec/core/view.hpp"
#include "specdec/core/workspace.hpp"
#include "specdec/interop/greedy_ids.hpp"
#include "specdec/interop/linked_tree.hpp"
#include "specdec/interop/results.hpp"
#include "specdec/sample/order.hpp"
#include "specdec/tree/token_tree.hpp"
#include "specdec/verify/detail/row_ops.hpp"

namespace specdec {

//! A batch of SGLang trees: num_requests requests of num_draft_tokens slots
//! each, every array row-major [num_requests][num_draft_tokens].
template <std::integral I>
struct sglang_tree_batch {
  std::int32_t num_requests = 0;            //!< requests in the batch
  std::int32_t num_draft_tokens = 0;        //!< slots per request (slot 0 is the root)
  const I* candidates = nullptr;            //!< token of each slot
  const I* retrive_index = nullptr;         //!< row (in predicts / target_predict) of each slot
  const I* retrive_next_token = nullptr;    //!< first child slot of each slot, or -1
  const I* retrive_next_sibling = nullptr;  //!< next sibling slot of each slot, or -1
};

//! SGLang's outputs: predicts [rows] (indexed by retrive_index),
//! accept_index [num_requests][num_speculative_tokens] (entries past the
//! accepted path untouched), accept_token_num [num_requests].
template <std::integral P>
struct sglang_outputs {
  std::span<P> predicts{};          //!< per row, the token the target emits after it (written on accepted paths)
  view2d<P> accept_index{};         //!< [num_requests][num_speculative_tokens]: rows of the accepted path, root first
  std::span<P> accept_token_num{};  //!< per request, accepted draft tokens (root and bonus token not counted)
};

//! SGLang's lossy thresholds (1, 1 = the exact rule).
struct sglang_thresholds {
  float threshold_single = 1.0f;  //!< a child whose own target probability is >= this is accepted; in (0, 1]
  float threshold_acc = 1.0f;     //!< running sibling sums are divided by this before the coin test; in (0, 1]
};

namespace detail {

//! One request's scratch of the SGLang entry points (n entries each).
struct sglang_scratch {
  node_id* parent;
  token_id* token;
  std::int32_t* old_to_new;
  std::int32_t* new_to_old;
  node_id* path;
  token_id* tokens;
  token_id* ids;  // per node: target id (greedy) or rejected token list (sampling)
};

SPECDEC_HD sglang_scratch carve_sglang(workspace_carver& c, std::int32_t n) noexcept {
  const auto un = static_cast<std::size_t>(n);
  sglang_scratch s{};
  s.parent = c.take<node_id>(un);
  s.token = c.take<token_id>(un);
  s.old_to_new = c.take<std::int32_t>(un);
  s.new_to_old = c.take<std::int32_t>(un);
  s.path = c.take<node_id>(un);
  s.tokens = c.take<token_id>(un);
  s.ids = c.take<token_id>(un);
  return s;
}

//! Bytes of one request's sglang_scratch (a multiple of workspace_alignment).
SPECDEC_HD std::size_t sglang_request_bytes(std::int32_t n) noexcept {
  if (n < 1) return 0;
  workspace_carver c;
  (void)carve_sglang(c, n);
  return c.bytes_used();
}

//! One request's scratch of sglang_tree_sampling_target_only: the common
//! scratch, then the last node's row with the rejected children zeroed (V
//! floats) and its tile sums.
struct sglang_sampling_scratch {
  sglang_scratch base;
  float* row;
  double* tiles;
};

SPECDEC_HD sglang_sampling_scratch carve_sglang_sampling(workspace_carver& c, std::int32_t n, std::int64_t V) noexcept {
  sglang_sampling_scratch s{};
  s.base = carve_sglang(c, n);
  s.row = c.take<float>(static_cast<std::size_t>(V));
  s.tiles = c.take<double>(static_cast<std::size_t>(sum_tile_count(V)));
  return s;
}

//! Bytes of one request's sglang_sampling_scratch (a multiple of
//! workspace_alignment).
SPECDEC_HD std::size_t sglang_sampling_request_bytes(std::int32_t n, std::int64_t V) noexcept {
  if (n < 1 || V < 1) return 0;
  workspace_carver c;
  (void)carve_sglang_sampling(c, n, V);
  return c.bytes_used();
}

//! The whole-batch shape checks of both entry points (host and device
//! launchers), without the workspace.
template <std::integral I, std::integral P>
SPECDEC_HD status check_sglang_shapes(const sglang_tree_batch<I>& b, std::int32_t num_spec_steps,
                                      const sglang_outputs<P>& out, std::size_t rows) noexcept {
  if (b.num_requests < 0 || b.num_draft_tokens < 1)
    return make_status(status_code::invalid_argument, "num_requests >= 0 and num_draft_tokens >= 1 required");
  if (b.num_requests > 0 && (b.candidates == nullptr || b.retrive_index == nullptr || b.retrive_next_token == nullptr ||
                             b.retrive_next_sibling == nullptr))
    return make_status(status_code::invalid_argument, "tree arrays must not be null");
  if (num_spec_steps < 1) return make_status(status_code::invalid_argument, "num_speculative_tokens must be >= 1");
  if (out.accept_index.extent[0] != b.num_requests || out.accept_index.extent[1] < num_spec_steps ||
      out.accept_token_num.size() < static_cast<std::size_t>(b.num_requests))
    return make_status(status_code::size_mismatch, "accept_index needs [batch][num_speculative_tokens]");
  if (num_spec_steps > 1 && b.num_requests > 0 && out.accept_index.stride[1] != 1)
    return make_status(status_code::invalid_argument, "accept_index rows must be contiguous");
  if (out.predicts.size() < rows) return make_status(status_code::size_mismatch, "predicts needs one entry per row");
  return status::success();
}

template <std::integral I, std::integral P>
status check_sglang(const sglang_tree_batch<I>& b, std::int32_t num_spec_steps, const sglang_outputs<P>& out,
                    std::size_t rows, std::span<std::byte> workspace) noexcept {
  SPECDEC_TRY(check_sglang_shapes(b, num_spec_steps, out, rows));
  if (workspace.size() < sglang_request_bytes(b.num_draft_tokens))
    return make_status(status_code::buffer_too_small, "workspace smaller than the sglang workspace size");
  workspace_carver c(workspace.data(), workspace.size());
  if (!c.base_aligned()) return make_status(status_code::invalid_argument, "workspace must be 256-byte aligned");
  return status::success();
}

//! Request r's linked lists as a specdec tree in s (SGLang's root is unused).
template <std::integral I>
SPECDEC_HD status sglang_convert(const sglang_tree_batch<I>& b, std::int32_t r, const sglang_scratch& s,
                                 std::int32_t& count) noexcept {
  const std::int32_t n = b.num_draft_tokens;
  const auto un = static_cast<std::size_t>(n);
  const std::size_t o = static_cast<std::size_t>(r) * un;
  const linked_tree<I> lt{b.candidates + o, b.retrive_next_token + o, b.retrive_next_sibling + o, n};
  return tree_from_linked_list(lt, linked_tree_options{.unused_root = true, .root_token = 0, .require_all = false},
                               std::span<node_id>(s.parent, un), std::span<token_id>(s.token, un),
                               std::span<std::int32_t>(s.old_to_new, un), std::span<std::int32_t>(s.new_to_old, un),
                               count);
}

//! Writes request r's outputs from the path / tokens in s (nodes mapped to
//! slots by new_to_old, slots to rows by retrive_index).
template <std::integral I, std::integral P>
SPECDEC_HD status sglang_write(const sglang_tree_batch<I>& b, std::int32_t r, std::int32_t num_spec,
                               const sglang_outputs<P>& out, const sglang_scratch& s, std::int32_t accepted) noexcept {
  const auto un = static_cast<std::size_t>(b.num_draft_tokens);
  const std::size_t o = static_cast<std::size_t>(r) * un;
  const view1d<P> ai = out.accept_index.slice(r);
  return write_sglang_results<I, P>(std::span<const node_id>(s.path, un), std::span<const token_id>(s.tokens, un),
                                    accepted, std::span<const std::int32_t>(s.new_to_old, un),
                                    std::span<const I>(b.retrive_index + o, un),
                                    std::span<P>(ai.data, static_cast<std::size_t>(num_spec)),
                                    out.accept_token_num[static_cast<std::size_t>(r)], out.predicts);
}

//! Request r of sglang_verify_tree_greedy (shapes already checked); the
//! CUDA kernel runs this very function, one thread per request. Returns
//! the request's status (without the request index) and its accepted count.
template <std::integral I, std::integral P>
SPECDEC_HD status sglang_greedy_request(const sglang_tree_batch<I>& b, std::int32_t r,
                                        std::span<const I> target_predict, std::int32_t num_speculative_tokens,
                                        const sglang_outputs<P>& out, const sglang_scratch& s,
                                        std::int32_t& accepted) noexcept {
  const std::int32_t n = b.num_draft_tokens;
  const auto un = static_cast<std::size_t>(n);
  const std::size_t o = static_cast<std::size_t>(r) * un;
  std::int32_t count = 0;
  SPECDEC_TRY(sglang_convert(b, r, s, count));
  for (std::int32_t u = 0; u < count; ++u) {
    const I row = b.retrive_index[o + static_cast<std::size_t>(s.new_to_old[u])];
    if (row < 0 || static_cast<std::size_t>(row) >= target_predict.size())
      return make_status(status_code::out_of_range, "retrive_index outside target_predict");
    const I id = target_predict[static_cast<std::size_t>(row)];
    s.ids[u] = id < 0 || id > static_cast<I>(INT32_MAX) ? -1 : static_cast<token_id>(id);
  }
  verify_result res{};
  SPECDEC_TRY(verify_greedy_ids(tree_view{s.token, s.parent, nullptr, nullptr, count},
                                std::span<const token_id>(s.ids, un), 0,
                                greedy_ids_options{.unused_root = true, .max_accept = num_speculative_tokens - 1},
                                std::span<node_id>(s.path, un), std::span<token_id>(s.tokens, un), res));
  SPECDEC_TRY(sglang_write(b, r, num_speculative_tokens, out, s, res.accepted));
  accepted = res.accepted;
  return status::success();
}

//! The coin walk of request r of sglang_tree_sampling_target_only (one
//! thread; shapes, sizes and thresholds already checked, `acc` =
//! threshold_acc floored at 1e-9): one coin per expanded node, a running
//! float sum of target probabilities over the siblings visited. On success
//! `u` is the last accepted node (converted ids), `accepted` the drafts
//! accepted and s.ids[0..rejected) the children rejected at u.
template <std::integral I>
SPECDEC_HD status sglang_sampling_walk(const sglang_tree_batch<I>& b, std::int32_t r, view2d<const float> target_probs,
                                       const float* coins, std::int32_t num_speculative_tokens, float threshold_single,
                                       float acc, const sglang_scratch& s, node_id& u, std::int32_t& accepted,
                                       std::int32_t& rejected) noexcept {
  const std::size_t o = static_cast<std::size_t>(r) * static_cast<std::size_t>(b.num_draft_tokens);
  const std::int64_t V = target_probs.extent[1];
  std::int32_t count = 0;
  SPECDEC_TRY(sglang_convert(b, r, s, count));
  for (std::int32_t k = 1; k < count; ++k)
    if (s.token[k] >= V) return make_status(status_code::token_out_of_range, "candidate token >= V");
  auto prob = [&](node_id v, token_id x, float& p) -> status {
    p = target_probs(static_cast<std::int64_t>(o) + s.new_to_old[v], x);
    if (p != p) return make_status(status_code::non_finite, "target probability is NaN");
    if (p < 0.0f) return make_status(status_code::negative_probability, "target probability < 0");
    return status::success();
  };
  u = 0;
  accepted = 0;
  rejected = 0;
  while (accepted < num_speculative_tokens - 1) {
    const float coin = coins[o + static_cast<std::size_t>(s.new_to_old[u])];
    float sum = 0.0f;
    node_id next = -1;
    rejected = 0;
    for (node_id ch = u + 1; ch < count; ++ch) {
      if (s.parent[ch] != u) continue;
      float pt = 0.0f;
      SPECDEC_TRY(prob(u, s.token[ch], pt));
      sum += pt;
      if (coin <= sum / acc || pt >= threshold_single) {
        next = ch;
        break;
      }
      s.ids[rejected++] = s.token[ch];
    }
    if (next < 0) break;
    u = next;
    ++accepted;
    rejected = 0;
  }
  return status::success();
}

//! The last sample of a request: `row` (the last accepted node's target
//! row) with the `rejected` tokens zeroed, copied into R, its mass in the
//! fixed tile order of sample/order.hpp (tile sums into `tiles`) and the
//! inverse-CDF sample at final_coin * mass; SGLang's fallback, token V - 1,
//! when no mass is left. A NaN, infinite or negative entry gives its status
//! (row_status order: non_finite first). Collective on the device (every
//! thread of the block calls it with the same arguments; `ops` is the
//! block's row policy), plain on the host (host_row_ops).
SPECDEC_NO_EXEC_CHECK
template <class Ops>
SPECDEC_HD status sglang_sampling_final(const Ops& ops, row_ref row, std::int64_t V, const token_id* rejected_ids,
                                        std::int32_t rejected, float final_coin, float* R, double* tiles,
                                        token_id& pick) noexcept {
  ops.copy(row, R, V);
  ops.sync();
  for (std::int32_t k = 0; k < rejected; ++k) ops.put(R, static_cast<std::int64_t>(rejected_ids[k]), 0.0f);
  ops.sync();
  double mass = 0.0;
  if (!ops.mass(row_ref{R, 1}, V, tiles, mass))
    return make_status(ops.classify(row_ref{R, 1}, V), "bad entry in the last node's target row");
  pick = mass > 0.0 ? ops.sample(row_ref{R, 1}, V, tiles, static_cast<double>(final_coin) * mass) : token_id{-1};
  if (pick < 0) pick = static_cast<token_id>(V - 1);
  return status::success();
}

//! After the last sample (one thread): path, emitted tokens and SGLang's
//! outputs of request r.
template <std::integral I, std::integral P>
SPECDEC_HD status sglang_sampling_finish(const sglang_tree_batch<I>& b, std::int32_t r,
                                         std::int32_t num_speculative_tokens, const sglang_outputs<P>& out,
                                         const sglang_scratch& s, node_id u, std::int32_t accepted,
                                         token_id pick) noexcept {
  node_id v = u;
  for (std::int32_t k = accepted; k >= 1; --k) {
    s.path[k] = v;
    s.tokens[k - 1] = s.token[v];
    v = s.parent[v];
  }
  s.path[0] = 0;
  s.tokens[accepted] = pick;
  return sglang_write(b, r, num_speculative_tokens, out, s, accepted);
}

//! The target row of slot `slot` of request r, as the walk reads it.
SPECDEC_HD row_ref sglang_slot_row(view2d<const float> target_probs, std::int32_t r, std::int32_t num_draft_tokens,
                                   std::int32_t slot) noexcept {
  const std::int64_t row = static_cast<std::int64_t>(r) * num_draft_tokens + slot;
  return row_ref{target_probs.data + row * target_probs.stride[0], target_probs.stride[1]};
}

//! Request r on the host: the walk, the last sample (host_row_ops) and the
//! outputs; the CUDA kernel runs the same three steps, the middle one with
//! a thread block.
template <std::integral I, std::integral P>
status sglang_sampling_request(const sglang_tree_batch<I>& b, std::int32_t r, view2d<const float> target_probs,
                               const float* coins, float final_coin, std::int32_t num_speculative_tokens,
                               float threshold_single, float acc, const sglang_outputs<P>& out,
                               const sglang_sampling_scratch& s, std::int32_t& accepted) noexcept {
  node_id u = 0;
  std::int32_t rejected = 0;
  token_id pick = -1;
  SPECDEC_TRY(sglang_sampling_walk(b, r, target_probs, coins, num_speculative_tokens, threshold_single, acc, s.base, u,
                                   accepted, rejected));
  SPECDEC_TRY(sglang_sampling_final(host_row_ops{},
                                    sglang_slot_row(target_probs, r, b.num_draft_tokens, s.base.new_to_old[u]),
                                    target_probs.extent[1], s.base.ids, rejected, final_coin, s.row, s.tiles, pick));
  return sglang_sampling_finish(b, r, num_speculative_tokens, out, s.base, u, accepted, pick);
}

//! The whole-call checks of sglang_tree_sampling_target_only beyond the
//! shapes (sizes of rows and coins, thresholds, V).
SPECDEC_HD status check_sglang_sampling(std::size_t slots, std::int32_t num_requests, view2d<const float> target_probs,
                                        std::size_t coins, std::size_t final_coins,
                                        const sglang_thresholds& th) noexcept {
  if (static_cast<std::size_t>(target_probs.extent[0]) < slots || coins < slots ||
      final_coins < static_cast<std::size_t>(num_requests))
    return make_status(status_code::size_mismatch, "target_probs and coins need one entry per slot");
  if (!(th.threshold_single > 0.0f && th.threshold_single <= 1.0f) ||
      !(th.threshold_acc > 0.0f && th.threshold_acc <= 1.0f))
    return make_status(status_code::invalid_argument, "thresholds must be in (0, 1]");
  if (target_probs.extent[1] < 1) return make_status(status_code::empty_input, "target rows are empty");
  return status::success();
}

}  // namespace detail

//! Bytes of workspace sglang_verify_tree_greedy needs for trees of
//! `num_draft_tokens` slots (reused by every request; 256-byte aligned).
inline std::size_t sglang_workspace_size(std::int32_t num_draft_tokens) noexcept {
  return detail::sglang_request_bytes(num_draft_tokens);
}

//! Bytes of workspace sglang_tree_sampling_target_only needs for trees of
//! `num_draft_tokens` slots and rows of `vocab` entries (one request's
//! scratch, reused; 256-byte aligned): sglang_workspace_size plus the last
//! row's copy and tile sums.
inline std::size_t sglang_sampling_workspace_size(std::int32_t num_draft_tokens, std::int64_t vocab) noexcept {
  return detail::sglang_sampling_request_bytes(num_draft_tokens, vocab);
}

//! SGLang's verify_tree_greedy: target_predict holds the target's argmax id
//! of every row (indexed like predicts by retrive_index). Request b accepts
//! at most num_speculative_tokens - 1 drafts; its root token is unused.
//! Errors: shape errors, the conversion errors of tree_from_linked_list and
//! the range errors of verify_greedy_ids / write_sglang_results, each with
//! the request as index; requests before it are written. O(sum N * depth).
//! The CUDA twin is kernels::sglang_verify_tree_greedy (same per-request code).
template <std::integral I, std::integral P>
status sglang_verify_tree_greedy(const sglang_tree_batch<I>& b, std::span<const I> target_predict,
                                 std::int32_t num_speculative_tokens, const sglang_outputs<P>& out,
                                 std::span<std::byte> workspace) noexcept {
  SPECDEC_TRY(detail::check_sglang(b, num_speculative_tokens, out, target_predict.size(), workspace));
  workspace_carver c(workspace.data(), workspace.size());
  const detail::sglang_scratch s = detail::carve_sglang(c, b.num_draft_tokens);
  for (std::int32_t r = 0; r < b.num_requests; ++r) {
    std::int32_t accepted = 0;
    const status st = detail::sglang_greedy_request(b, r, target_predict, num_speculative_tokens, out, s, accepted);
    if (!st.ok()) return make_status(st.code(), st.message(), r);
  }
  return status::success();
}

//! SGLang's tree_speculative_sampling_target_only (see the file comment).
//! - target_probs: [batch * num_draft_tokens] x V, row of request b, slot s
//!   at b * num_draft_tokens + s (by slot, as in SGLang; not retrive_index).
//! - coins: [batch * num_draft_tokens], the coin of each expanded slot;
//!   final_coins: [batch], the coin of the last sampling.
//! - workspace: sglang_sampling_workspace_size(num_draft_tokens, V) bytes.
//! Rows are read as given (not renormalized); a NaN or negative entry that
//! is read gives non_finite / negative_probability (an infinite entry of
//! the last row too). The walk's sibling sums are SGLang's running float
//! sums; the last sample sums the row in specdec's fixed tile order (in
//! double), which the CUDA twin's block reproduces exactly. The thresholds
//! must be in (0, 1] (threshold_acc is floored at 1e-9 as SGLang does).
//! The CUDA twin is kernels::sglang_tree_sampling_target_only (same
//! per-request code, a thread block per request).
template <std::integral I, std::integral P>
status sglang_tree_sampling_target_only(const sglang_tree_batch<I>& b, view2d<const float> target_probs,
                                        std::span<const float> coins, std::span<const float> final_coins,
                                        std::int32_t num_speculative_tokens, const sglang_thresholds& th,
                                        const sglang_outputs<P>& out, std::span<std::byte> workspace) noexcept {
  const std::size_t slots = static_cast<std::size_t>(b.num_requests) * static_cast<std::size_t>(b.num_draft_tokens);
  SPECDEC_TRY(detail::check_sglang(b, num_speculative_tokens, out, 0, workspace));
  SPECDEC_TRY(detail::check_sglang_sampling(slots, b.num_requests, target_probs, coins.size(), final_coins.size(), th));
  const std::int64_t V = target_probs.extent[1];
  if (b.num_requests > 0 && workspace.size() < detail::sglang_sampling_request_bytes(b.num_draft_tokens, V))
    return make_status(status_code::buffer_too_small, "workspace smaller than sglang_sampling_workspace_size");
  const float acc = th.threshold_acc > 1e-9f ? th.threshold_acc : 1e-9f;
  workspace_carver c(workspace.data(), workspace.size());
  const detail::sglang_sampling_scratch s = detail::carve_sglang_sampling(c, b.num_draft_tokens, V);
  for (std::int32_t r = 0; r < b.num_requests; ++r) {
    std::int32_t accepted = 0;
    const status st =
        detail::sglang_sampling_request(b, r, target_probs, coins.data(), final_coins[static_cast<std::size_t>(r)],
                                        num_speculative_tokens, th.threshold_single, acc, out, s, accepted);
    if (!st.ok()) return make_status(st.code(), st.message(), r);
  }
  return status::success();
}

}  // namespace specdec
