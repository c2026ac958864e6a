//! \file
//! Verification results in the caller's index space, in the layouts the
//! peers' kernels write: SGLang's `accept_index` / `accept_token_num` /
//! `predicts` scatter, FlashInfer's `accepted_num` (acceptances counted past
//! the first rejection) next to the emitted count, and acceptance per depth.
//! A specdec result names tree nodes; `node_slot` (node -> the caller's slot,
//! e.g. new_to_old from tree_from_linked_list) and `slot_row` (slot -> the
//! caller's row, e.g. SGLang's retrive_index row) translate them back.
#pragma once

#include <concepts>
#include <cstdint>
#include <span>

#include "specdec/core/config.hpp"
#include "specdec/core/philox.hpp"
#include "specdec/core/status.hpp"
#include "specdec/core/view.hpp"
#include "specdec/interop/detail/request_status.hpp"
#include "specdec/tree/token_tree.hpp"
#include "specdec/verify/verify_params.hpp"

namespace specdec {

namespace detail {
template <std::integral I>
SPECDEC_HD bool row_of_node(node_id u, std::span<const std::int32_t> node_slot, std::span<const I> slot_row,
                            std::int64_t& row) noexcept {
  std::int64_t s = u;
  if (!node_slot.empty()) {
    if (static_cast<std::size_t>(u) >= node_slot.size()) return false;
    s = node_slot[static_cast<std::size_t>(u)];
  }
  if (slot_row.empty()) {
    row = s;
    return s >= 0;
  }
  if (s < 0 || static_cast<std::size_t>(s) >= slot_row.size()) return false;
  row = static_cast<std::int64_t>(slot_row[static_cast<std::size_t>(s)]);
  return row >= 0;
}
}  // namespace detail

//! SGLang's per-request outputs from a specdec path (path[0..accepted],
//! root first) and its emitted tokens (tokens[0..accepted]):
//! accept_index[k] = row of path[k] for k <= accepted (the rest untouched),
//! accept_token_num = accepted, and predicts[row of path[k]] = tokens[k]
//! (the token the target emits after node path[k]: the next accepted
//! draft, or the correction / bonus token after the last node). Empty
//! node_slot / slot_row mean identity. Errors (nothing written):
//! buffer_too_small (accept_index shorter than accepted + 1), out_of_range
//! (a node without a row, or a row outside predicts; index = k). O(accepted).
//! Host and device (one thread).
template <std::integral I, std::integral P>
SPECDEC_HD status write_sglang_results(std::span<const node_id> path, std::span<const token_id> tokens,
                                       std::int32_t accepted, std::span<const std::int32_t> node_slot,
                                       std::span<const I> slot_row, std::span<P> accept_index, P& accept_token_num,
                                       std::span<P> predicts) noexcept {
  if (accepted < 0 || path.size() <= static_cast<std::size_t>(accepted) ||
      tokens.size() <= static_cast<std::size_t>(accepted))
    return make_status(status_code::size_mismatch, "path and tokens need accepted + 1 entries");
  if (accept_index.size() <= static_cast<std::size_t>(accepted))
    return make_status(status_code::buffer_too_small, "accept_index needs accepted + 1 entries");
  for (std::int32_t k = 0; k <= accepted; ++k) {
    std::int64_t row = 0;
    if (!detail::row_of_node(path[static_cast<std::size_t>(k)], node_slot, slot_row, row) ||
        (!predicts.empty() && static_cast<std::size_t>(row) >= predicts.size()))
      return make_status(status_code::out_of_range, "accepted node has no row in the caller's index space", k);
  }
  for (std::int32_t k = 0; k <= accepted; ++k) {
    std::int64_t row = 0;
    detail::row_of_node(path[static_cast<std::size_t>(k)], node_slot, slot_row, row);
    accept_index[static_cast<std::size_t>(k)] = static_cast<P>(row);
    if (!predicts.empty())
      predicts[static_cast<std::size_t>(row)] = static_cast<P>(tokens[static_cast<std::size_t>(k)]);
  }
  accept_token_num = static_cast<P>(accepted);
  return status::success();
}

//! Adds one request's acceptance to per-depth counters: entry d - 1 counts
//! requests whose accepted path reaches depth d (deeper ones are ignored).
inline void count_acceptance_per_depth(std::int32_t accepted, std::span<std::int64_t> per_depth) noexcept {
  for (std::int32_t d = 1; d <= accepted && static_cast<std::size_t>(d) <= per_depth.size(); ++d)
    ++per_depth[static_cast<std::size_t>(d - 1)];
}

//! FlashInfer's chain counters for gamma drafts: `emitted` = drafts accepted
//! before the first rejection (what verification emits) and `accepted` =
//! emitted plus the positions after the first rejection whose own test
//! would pass (an acceptance-rate statistic). Position i passes when
//! coins[i] * q_i(x_i) < p_i(x_i), with p the target rows (gamma + 1 rows
//! read up to gamma) and q the draft rows (row i produced draft i) -- the
//! test specdec's chain verification applies, so with specdec's coins
//! (chain_coins) `emitted` equals verify_chain's accepted whenever every
//! draft has q_i(x_i) > 0 (true for drafts sampled from q; specdec rejects a
//! draft with q(x) = 0 outright, FlashInfer's test would accept it).
//! Errors: size_mismatch, token_out_of_range (index = position). O(gamma).
//! Host and device (one thread; see chain_acceptance_counts_batch).
SPECDEC_HD status chain_acceptance_counts(std::span<const token_id> drafts, view2d<const float> p,
                                          view2d<const float> q, std::span<const float> coins, std::int32_t& accepted,
                                          std::int32_t& emitted) noexcept {
  const std::size_t g = drafts.size();
  if (static_cast<std::size_t>(p.extent[0]) < g || static_cast<std::size_t>(q.extent[0]) < g || coins.size() < g)
    return make_status(status_code::size_mismatch, "p, q and coins need one entry per draft");
  std::int32_t acc = 0, emit = -1;
  for (std::size_t i = 0; i < g; ++i) {
    const token_id x = drafts[i];
    if (x < 0 || x >= p.extent[1] || x >= q.extent[1])
      return make_status(status_code::token_out_of_range, "draft token out of range", static_cast<std::int64_t>(i));
    const auto ii = static_cast<std::int64_t>(i);
    const bool pass = coins[i] * q(ii, x) < p(ii, x);
    if (pass) ++acc;
    if (!pass && emit < 0) emit = static_cast<std::int32_t>(i);
  }
  emitted = emit < 0 ? static_cast<std::int32_t>(g) : emit;
  accepted = acc;
  return status::success();
}

//! A batch of FlashInfer chains (host memory; device memory for the CUDA
//! twin kernels::chain_acceptance_counts_batch). Trivially copyable.
struct chain_counts_batch {
  std::int32_t num_requests = 0;              //!< requests
  std::int32_t num_speculative_tokens = 0;    //!< gamma: drafts per request
  const token_id* draft_token_ids = nullptr;  //!< [batch][gamma]
  view3d<const float> target_probs{};         //!< [batch][>= gamma][V] (FlashInfer: gamma + 1 rows)
  view3d<const float> draft_probs{};          //!< [batch][>= gamma][V]
  const float* coins = nullptr;               //!< coins of request r at coins + r * coins_stride
  std::int64_t coins_stride = 0;              //!< >= gamma (FlashInfer's uniform_samples: gamma + 1)
  std::int32_t* accepted_num = nullptr;       //!< [batch] FlashInfer's accepted_num
  std::int32_t* emitted_num = nullptr;        //!< [batch] drafts emitted (before the first rejection)
};

namespace detail {

//! Whole-call checks of a chain_counts_batch (no element read).
SPECDEC_HD constexpr status check_chain_counts(const chain_counts_batch& b) noexcept {
  if (b.num_requests < 0 || b.num_speculative_tokens < 0)
    return make_status(status_code::invalid_argument, "num_requests and num_speculative_tokens must be >= 0");
  if (b.num_requests == 0) return status::success();
  if (b.accepted_num == nullptr || b.emitted_num == nullptr)
    return make_status(status_code::invalid_argument, "accepted_num and emitted_num must not be null");
  if (b.num_speculative_tokens == 0) return status::success();
  if (b.draft_token_ids == nullptr || b.coins == nullptr || b.target_probs.data == nullptr ||
      b.draft_probs.data == nullptr)
    return make_status(status_code::invalid_argument, "arrays must not be null");
  if (b.target_probs.extent[0] < b.num_requests || b.draft_probs.extent[0] < b.num_requests ||
      b.target_probs.extent[1] < b.num_speculative_tokens || b.draft_probs.extent[1] < b.num_speculative_tokens ||
      b.coins_stride < b.num_speculative_tokens)
    return make_status(status_code::size_mismatch, "rows and coins need num_requests requests of gamma entries");
  return status::success();
}

//! Request r of a chain_counts_batch (one thread; host and device). Writes
//! accepted_num[r] and emitted_num[r] on success, nothing otherwise.
SPECDEC_HD status chain_counts_request(const chain_counts_batch& b, std::int32_t r) noexcept {
  const auto g = static_cast<std::size_t>(b.num_speculative_tokens);
  std::int32_t a = 0, e = 0;
  if (g > 0)
    SPECDEC_TRY(chain_acceptance_counts(std::span<const token_id>(b.draft_token_ids + r * g, g),
                                        b.target_probs.slice(r), b.draft_probs.slice(r),
                                        std::span<const float>(b.coins + r * b.coins_stride, g), a, e));
  b.accepted_num[r] = a;
  b.emitted_num[r] = e;
  return status::success();
}

}  // namespace detail

//! chain_acceptance_counts over a batch (FlashInfer's output_accepted_token_num
//! and output_emitted_draft_token_num). request_status: empty = stop at the
//! first failing request and return its status (index = request); else
//! num_requests entries receive each request's code and the call goes on (as
//! the CUDA twin does). O(batch * gamma).
inline status chain_acceptance_counts_batch(const chain_counts_batch& b,
                                            std::span<status_code> request_status) noexcept {
  SPECDEC_TRY(detail::check_chain_counts(b));
  SPECDEC_TRY(detail::check_request_status(request_status, b.num_requests));
  return detail::raise_or_record(b.num_requests, request_status,
                                 [&](std::int32_t r) { return detail::chain_counts_request(b, r); });
}

//! The coins specdec's chain verification uses for the acceptance tests
//! (verify_params.hpp: node i's draw 1 tests its child i + 1), so that
//! chain_acceptance_counts reproduces a specdec run. coins needs gamma entries.
inline void chain_coins(const verify_params& vp, std::span<float> coins) noexcept {
  const rng_stream rng{vp.seed, vp.request, vp.round};
  for (std::size_t i = 0; i < coins.size(); ++i) coins[i] = rng.uniform(static_cast<std::uint32_t>(i), 1);
}

}  // namespace specdec
