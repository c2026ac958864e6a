// SGLang's and FlashInfer's batch entry points (include/specdec/interop/
// sglang.hpp, sglang_build_tree.hpp, sglang_verify.hpp, results.hpp), on the
// host and, with the kernels (kernels/interop.hpp), on CUDA arrays: SGLang's
// layouts (int64 trees and ids, int32 outputs as SGLang), EAGLE's tree
// builder, the greedy and target-only sampling walks, specdec's lossless walk
// on SGLang's linked lists, and FlashInfer's chain counters. The C++ entry
// points take raw pointers, so every array length is checked here first,
// by one argument builder per entry point shared by both sides.
#include <cstdint>
#include <optional>
#include <tuple>
#include <vector>

#include <nanobind/stl/optional.h>
#include <nanobind/stl/tuple.h>

#include "common.hpp"
#include "common_cuda.hpp"
#include "specdec/interop/results.hpp"
#include "specdec/interop/sglang.hpp"
#include "specdec/interop/sglang_build_tree.hpp"
#include "specdec/interop/sglang_verify.hpp"
#if defined(SPECDEC_PYTHON_HAS_CUDA)
#include "specdec/kernels/interop.hpp"
#endif

namespace specdec::python {
namespace {

using i64_2d = in_nd<std::int64_t, 2>;

// ---- argument builders (host and device arrays alike) -----------------------

//! SGLang's linked-list trees: four dense [num_requests][num_draft_tokens]
//! int64 arrays.
template <class A>
sglang_tree_batch<std::int64_t> sglang_batch_of(const A& candidates, const A& retrive_index, const A& next_token,
                                                const A& next_sibling) {
  const std::size_t B = candidates.shape(0), n = candidates.shape(1);
  require(dense_rows(candidates, B, n) && dense_rows(retrive_index, B, n) && dense_rows(next_token, B, n) &&
              dense_rows(next_sibling, B, n),
          status_code::size_mismatch,
          "candidates, retrive_index, retrive_next_token and retrive_next_sibling must be dense "
          "[num_requests][num_draft_tokens] arrays");
  require(B <= static_cast<std::size_t>(INT32_MAX) && n <= static_cast<std::size_t>(INT32_MAX),
          status_code::invalid_argument, "batch too large");
  return {static_cast<std::int32_t>(B),
          static_cast<std::int32_t>(n),
          candidates.data(),
          retrive_index.data(),
          next_token.data(),
          next_sibling.data()};
}

template <class P1, class P2, class N>
sglang_outputs<std::int32_t> sglang_out(const P1& predicts, const P2& accept_index, const N& accept_token_num) {
  return {span_of(predicts), view_of<2>(accept_index), span_of(accept_token_num)};
}

//! EAGLE's tree builder: inputs and outputs after the shape checks.
template <class A2, class A1, class M, class O>
std::tuple<sglang_build_tree_inputs, sglang_build_tree_outputs> build_tree_args(
    const A2& parent_list, const A2& selected_index, const A1& verified_seq_len, std::int32_t topk, std::int32_t depth,
    std::int32_t draft_token_num, std::int32_t mode, const M& tree_mask, const O& positions, const O& retrive_index,
    const O& retrive_next_token, const O& retrive_next_sibling) {
  const std::size_t B = verified_seq_len.size();
  require(topk >= 1 && depth >= 1 && draft_token_num >= 1, status_code::invalid_argument,
          "topk, depth and draft_token_num must be >= 1");
  require(B <= static_cast<std::size_t>(INT32_MAX), status_code::invalid_argument, "batch too large");
  const auto n = static_cast<std::size_t>(draft_token_num);
  require(dense_rows(parent_list, B, static_cast<std::size_t>(topk) * static_cast<std::size_t>(depth - 1) + 1),
          status_code::size_mismatch, "parent_list must be a dense [batch][topk * (depth - 1) + 1] array");
  require(dense_rows(selected_index, B, n - 1), status_code::size_mismatch,
          "selected_index must be a dense [batch][draft_token_num - 1] array");
  for (const std::size_t s :
       {positions.size(), retrive_index.size(), retrive_next_token.size(), retrive_next_sibling.size()})
    require(s >= B * n, status_code::buffer_too_small,
            "positions and the retrive_* outputs need batch * draft_token_num entries");
  // Without the full mask the mask's size is known here: a short one raises
  // before any request is written (full_mask's depends on verified_seq_len).
  const auto m = static_cast<sglang_tree_mask_mode>(mode);
  if (m == sglang_tree_mask_mode::qlen_only ||
      (m == sglang_tree_mask_mode::qlen_only_bitpacking && draft_token_num <= 32))
    require(tree_mask.size() >=
                B * n * static_cast<std::size_t>(specdec::detail::sglang_tree_row_bytes(m, draft_token_num)),
            status_code::buffer_too_small, "tree_mask needs batch * draft_token_num rows of the mode's row bytes");
  sglang_build_tree_inputs in;
  in.num_requests = static_cast<std::int32_t>(B);
  in.topk = topk;
  in.depth = depth;
  in.draft_token_num = draft_token_num;
  in.parent_list = parent_list.data();
  in.selected_index = selected_index.data();
  in.verified_seq_len = verified_seq_len.data();
  in.mode = static_cast<sglang_tree_mask_mode>(mode);
  sglang_build_tree_outputs out;
  out.tree_mask = tree_mask.data();
  out.tree_mask_bytes = static_cast<std::int64_t>(tree_mask.size());
  out.positions = positions.data();
  out.retrive_index = retrive_index.data();
  out.retrive_next_token = retrive_next_token.data();
  out.retrive_next_sibling = retrive_next_sibling.data();
  return {in, out};
}

//! specdec's walk on SGLang's trees: the trees, rows and uniforms after the
//! shape checks; `params` is filled by the caller (host or staged).
template <class A, class F, class U>
sglang_verify_inputs<std::int64_t> verify_inputs_of(const A& candidates, const A& retrive_index, const A& next_token,
                                                    const A& next_sibling, const F& p, const std::optional<F>& q,
                                                    const std::optional<U>& uniforms,
                                                    std::int32_t num_speculative_tokens) {
  sglang_verify_inputs<std::int64_t> in;
  in.tree = sglang_batch_of(candidates, retrive_index, next_token, next_sibling);
  in.p = view_of<2>(p);
  if (q) in.q = view_of<2>(*q);
  const std::size_t slots = candidates.shape(0) * candidates.shape(1);
  if (const auto u = batch_uniforms(uniforms, slots)) {
    in.uniforms = u->u;
    in.draws_per_node = u->draws_per_node;
  }
  in.num_speculative_tokens = num_speculative_tokens;
  return in;
}

//! FlashInfer's chain counters over a batch after the shape checks.
template <class D, class T3, class C, class O>
chain_counts_batch counts_batch_of(const D& drafts, const T3& target_probs, const T3& draft_probs, const C& coins,
                                   const O& accepted_num, const O& emitted_num) {
  const std::size_t B = drafts.shape(0), g = drafts.shape(1);
  require(B <= static_cast<std::size_t>(INT32_MAX) && g <= static_cast<std::size_t>(INT32_MAX),
          status_code::invalid_argument, "batch too large");
  require(dense_rows(drafts, B, g), status_code::size_mismatch, "draft_token_ids must be a dense [batch][gamma] array");
  require(coins.shape(0) >= B && coins.shape(1) >= g && (coins.shape(1) <= 1 || coins.stride(1) == 1),
          status_code::size_mismatch, "coins must be [batch][>= gamma] with contiguous rows");
  require(accepted_num.size() >= B && emitted_num.size() >= B, status_code::buffer_too_small,
          "accepted_num and emitted_num need one entry per request");
  chain_counts_batch b;
  b.num_requests = static_cast<std::int32_t>(B);
  b.num_speculative_tokens = static_cast<std::int32_t>(g);
  b.draft_token_ids = drafts.data();
  b.target_probs = view_of<3>(target_probs);
  b.draft_probs = view_of<3>(draft_probs);
  b.coins = coins.data();
  b.coins_stride = B <= 1 ? static_cast<std::int64_t>(coins.shape(1)) : static_cast<std::int64_t>(coins.stride(0));
  b.accepted_num = accepted_num.data();
  b.emitted_num = emitted_num.data();
  return b;
}

// ---- host ---------------------------------------------------------------------

// Per-request codes: empty (stop at the first failure and raise) or the
// caller's int32 array (each request's code, no raise).
struct request_codes {
  std::vector<status_code> codes;
  std::span<status_code> span() { return codes; }
  void copy_to(const std::optional<out1<std::int32_t>>& out) const {
    if (!out) return;
    for (std::size_t r = 0; r < codes.size(); ++r) out->data()[r] = static_cast<std::int32_t>(codes[r]);
  }
};

request_codes codes_for(const std::optional<out1<std::int32_t>>& out, std::size_t batch) {
  request_codes c;
  if (out) {
    require(out->size() >= batch, status_code::size_mismatch, "request_status needs one entry per request");
    c.codes.assign(batch, status_code::ok);
  }
  return c;
}

void sglang_greedy(const i64_2d& candidates, const i64_2d& retrive_index, const i64_2d& next_token,
                   const i64_2d& next_sibling, const in1<std::int64_t>& target_predict,
                   std::int32_t num_speculative_tokens, const out1<std::int32_t>& predicts,
                   const out_nd<std::int32_t, 2>& accept_index, const out1<std::int32_t>& accept_token_num) {
  const auto b = sglang_batch_of(candidates, retrive_index, next_token, next_sibling);
  auto ws = scratch(sglang_workspace_size(b.num_draft_tokens));
  check(sglang_verify_tree_greedy<std::int64_t, std::int32_t>(
      b, span_of(target_predict), num_speculative_tokens, sglang_out(predicts, accept_index, accept_token_num), ws));
}

void sglang_sampling(const i64_2d& candidates, const i64_2d& retrive_index, const i64_2d& next_token,
                     const i64_2d& next_sibling, const in_nd<float, 2>& target_probs, const in1<float>& coins,
                     const in1<float>& final_coins, std::int32_t num_speculative_tokens, float threshold_single,
                     float threshold_acc, const out1<std::int32_t>& predicts,
                     const out_nd<std::int32_t, 2>& accept_index, const out1<std::int32_t>& accept_token_num) {
  const auto b = sglang_batch_of(candidates, retrive_index, next_token, next_sibling);
  auto ws =
      scratch(sglang_sampling_workspace_size(b.num_draft_tokens, static_cast<std::int64_t>(target_probs.shape(1))));
  check(sglang_tree_sampling_target_only<std::int64_t, std::int32_t>(
      b, view_of<2>(target_probs), span_of(coins), span_of(final_coins), num_speculative_tokens,
      sglang_thresholds{threshold_single, threshold_acc}, sglang_out(predicts, accept_index, accept_token_num), ws));
}

// coins: the caller's, or (empty) specdec's own for (seed, request, round).
std::tuple<std::int32_t, std::int32_t> chain_counts(const in1<token_id>& drafts, const in_nd<float, 2>& p,
                                                    const in_nd<float, 2>& q, const in1<float>& coins,
                                                    std::uint64_t seed, std::uint32_t request, std::uint32_t round) {
  std::vector<float> own;
  std::span<const float> c = span_of(coins);
  if (coins.size() == 0) {
    own.resize(drafts.size());
    chain_coins(key_params(seed, request, round), own);
    c = own;
  }
  std::int32_t accepted = 0, emitted = 0;
  check(chain_acceptance_counts(span_of(drafts), view_of<2>(p), view_of<2>(q), c, accepted, emitted));
  return {accepted, emitted};
}

void build_tree(const i64_2d& parent_list, const i64_2d& selected_index, const in1<std::int64_t>& verified_seq_len,
                std::int32_t topk, std::int32_t depth, std::int32_t draft_token_num, std::int32_t mode,
                const out1<std::uint8_t>& tree_mask, const out1<std::int64_t>& positions,
                const out1<std::int64_t>& retrive_index, const out1<std::int64_t>& retrive_next_token,
                const out1<std::int64_t>& retrive_next_sibling,
                const std::optional<out1<std::int32_t>>& request_status) {
  auto [in, out] = build_tree_args(parent_list, selected_index, verified_seq_len, topk, depth, draft_token_num, mode,
                                   tree_mask, positions, retrive_index, retrive_next_token, retrive_next_sibling);
  request_codes codes = codes_for(request_status, static_cast<std::size_t>(in.num_requests));
  auto ws = scratch(sglang_build_tree_workspace_size(in));
  check(sglang_build_tree(in, out, codes.span(), ws));
  codes.copy_to(request_status);
}

void verify_tree(const i64_2d& candidates, const i64_2d& retrive_index, const i64_2d& next_token,
                 const i64_2d& next_sibling, const in_nd<float, 2>& p, const std::optional<in_nd<float, 2>>& q,
                 const verify_params& base, const in1<std::int32_t>& modes, const in1<std::uint64_t>& seeds,
                 const in1<std::uint32_t>& requests, const in1<std::uint32_t>& rounds,
                 const std::optional<in_nd<double, 2>>& uniforms, std::int32_t num_speculative_tokens,
                 const out1<std::int32_t>& predicts, const out_nd<std::int32_t, 2>& accept_index,
                 const out1<std::int32_t>& accept_token_num,
                 const std::optional<out1<std::int64_t>>& accepted_per_depth,
                 const std::optional<out1<std::int32_t>>& request_status) {
  sglang_verify_inputs<std::int64_t> in =
      verify_inputs_of(candidates, retrive_index, next_token, next_sibling, p, q, uniforms, num_speculative_tokens);
  const auto B = static_cast<std::size_t>(in.tree.num_requests);
  const std::vector<verify_params> vps = params_batch(base, modes, seeds, requests, rounds, B);
  in.params = vps.data();
  request_codes codes = codes_for(request_status, B);
  auto ws = scratch(sglang_verify_tree_workspace_size(in.tree.num_draft_tokens, in.p.extent[1]));
  check(sglang_verify_tree<std::int64_t, std::int32_t>(
      in, sglang_out(predicts, accept_index, accept_token_num),
      accepted_per_depth ? span_of(*accepted_per_depth) : std::span<std::int64_t>{}, codes.span(), ws));
  codes.copy_to(request_status);
}

void counts_batch(const in_nd<token_id, 2>& drafts, const in_nd<float, 3>& target_probs,
                  const in_nd<float, 3>& draft_probs, const in_nd<float, 2>& coins,
                  const out1<std::int32_t>& accepted_num, const out1<std::int32_t>& emitted_num,
                  const std::optional<out1<std::int32_t>>& request_status) {
  const chain_counts_batch b = counts_batch_of(drafts, target_probs, draft_probs, coins, accepted_num, emitted_num);
  request_codes codes = codes_for(request_status, static_cast<std::size_t>(b.num_requests));
  check(chain_acceptance_counts_batch(b, codes.span()));
  codes.copy_to(request_status);
}

#if defined(SPECDEC_PYTHON_HAS_CUDA)
// ---- CUDA: the kernels/interop.hpp entry points on the caller's stream; -----
// per-request codes in request_status

using dev_i64_2d = dev_nd<const std::int64_t, 2>;

// Request codes (int32, one per request) and optional int64 per-depth
// counters (added to atomically; int64 and unsigned long long share bits).
struct dev_codes {
  std::int32_t* status = nullptr;
  unsigned long long* per_depth = nullptr;
  std::int32_t depth_counters = 0;
};

dev_codes codes_of(device_guard& g, std::size_t B, const dev1<std::int32_t>& request_status,
                   const std::optional<dev1<std::int64_t>>& accepted_per_depth) {
  g.add(request_status, "request_status", accepted_per_depth, "accepted_per_depth");
  require(request_status.size() >= B, status_code::size_mismatch, "request_status needs one entry per request");
  require(!accepted_per_depth ||
              (accepted_per_depth->size() >= 1 && accepted_per_depth->size() <= static_cast<std::size_t>(INT32_MAX)),
          status_code::invalid_argument, "accepted_per_depth needs at least one counter");
  dev_codes c;
  c.status = request_status.data();
  if (accepted_per_depth) {
    c.per_depth = reinterpret_cast<unsigned long long*>(accepted_per_depth->data());
    c.depth_counters = static_cast<std::int32_t>(accepted_per_depth->size());
  }
  return c;
}

//! The arrays every linked-list walk shares, on the call's device.
void add_walk(device_guard& g, const dev_i64_2d& candidates, const dev_i64_2d& retrive_index,
              const dev_i64_2d& next_token, const dev_i64_2d& next_sibling, const dev1<std::int32_t>& predicts,
              const dev_nd<std::int32_t, 2>& accept_index, const dev1<std::int32_t>& accept_token_num,
              const std::optional<dev_bytes>& workspace) {
  g.add(candidates, "candidates", retrive_index, "retrive_index", next_token, "retrive_next_token", next_sibling,
        "retrive_next_sibling", predicts, "predicts", accept_index, "accept_index", accept_token_num,
        "accept_token_num", workspace, "workspace");
}

std::size_t cuda_greedy_ws_size(std::int64_t B, std::int64_t n) {
  kernels::sglang_greedy_params<std::int64_t, std::int32_t> P;
  P.tree.num_requests = static_cast<std::int32_t>(B);
  P.tree.num_draft_tokens = static_cast<std::int32_t>(n);
  return device_scratch::bytes(kernels::sglang_verify_tree_greedy_workspace_size(P), 0);
}

std::size_t cuda_sampling_ws_size(std::int64_t B, std::int64_t n, std::int64_t V) {
  kernels::sglang_sampling_params<std::int64_t, std::int32_t> P;
  P.tree.num_requests = static_cast<std::int32_t>(B);
  P.tree.num_draft_tokens = static_cast<std::int32_t>(n);
  P.target_probs.extent[1] = V;
  return device_scratch::bytes(kernels::sglang_tree_sampling_target_only_workspace_size(P), 0);
}

// The outputs and per-request codes, as the greedy and sampling params both hold them.
template <class Params>
void set_outputs(Params& P, device_guard& g, std::size_t batch, const dev1<std::int32_t>& predicts,
                 const dev_nd<std::int32_t, 2>& accept_index, const dev1<std::int32_t>& accept_token_num,
                 const std::optional<dev1<std::int64_t>>& accepted_per_depth,
                 const dev1<std::int32_t>& request_status) {
  P.out = sglang_out(predicts, accept_index, accept_token_num);
  const dev_codes c = codes_of(g, batch, request_status, accepted_per_depth);
  P.request_status = c.status;
  P.accepted_per_depth = c.per_depth;
  P.depth_counters = c.depth_counters;
}

void cuda_greedy(const dev_i64_2d& candidates, const dev_i64_2d& retrive_index, const dev_i64_2d& next_token,
                 const dev_i64_2d& next_sibling, const dev1<const std::int64_t>& target_predict,
                 std::int32_t num_speculative_tokens, const dev1<std::int32_t>& predicts,
                 const dev_nd<std::int32_t, 2>& accept_index, const dev1<std::int32_t>& accept_token_num,
                 const std::optional<dev1<std::int64_t>>& accepted_per_depth, const dev1<std::int32_t>& request_status,
                 const std::optional<dev_bytes>& workspace, std::uintptr_t stream) {
  device_guard g;
  add_walk(g, candidates, retrive_index, next_token, next_sibling, predicts, accept_index, accept_token_num, workspace);
  g.add(target_predict, "target_predict");
  kernels::sglang_greedy_params<std::int64_t, std::int32_t> P;
  P.tree = sglang_batch_of(candidates, retrive_index, next_token, next_sibling);
  P.target_predict = span_of(target_predict);
  P.num_speculative_tokens = num_speculative_tokens;
  set_outputs(P, g, candidates.shape(0), predicts, accept_index, accept_token_num, accepted_per_depth, request_status);
  check(kernels::sglang_verify_tree_greedy_can_implement(P));
  const cudaStream_t s = stream_of(stream);
  device_scratch ws(kernels::sglang_verify_tree_greedy_workspace_size(P), 0, workspace, s);
  check(kernels::sglang_verify_tree_greedy(P, ws.kernel(), ws.kernel_bytes(), s));
}

void cuda_sampling(const dev_i64_2d& candidates, const dev_i64_2d& retrive_index, const dev_i64_2d& next_token,
                   const dev_i64_2d& next_sibling, const dev_nd<const float, 2>& target_probs,
                   const dev1<const float>& coins, const dev1<const float>& final_coins,
                   std::int32_t num_speculative_tokens, float threshold_single, float threshold_acc,
                   const dev1<std::int32_t>& predicts, const dev_nd<std::int32_t, 2>& accept_index,
                   const dev1<std::int32_t>& accept_token_num,
                   const std::optional<dev1<std::int64_t>>& accepted_per_depth,
                   const dev1<std::int32_t>& request_status, const std::optional<dev_bytes>& workspace,
                   std::uintptr_t stream) {
  device_guard g;
  add_walk(g, candidates, retrive_index, next_token, next_sibling, predicts, accept_index, accept_token_num, workspace);
  g.add(target_probs, "target_probs", coins, "coins", final_coins, "final_coins");
  kernels::sglang_sampling_params<std::int64_t, std::int32_t> P;
  P.tree = sglang_batch_of(candidates, retrive_index, next_token, next_sibling);
  P.target_probs = view_of<2>(target_probs);
  P.coins = span_of(coins);
  P.final_coins = span_of(final_coins);
  P.num_speculative_tokens = num_speculative_tokens;
  P.thresholds = sglang_thresholds{threshold_single, threshold_acc};
  set_outputs(P, g, candidates.shape(0), predicts, accept_index, accept_token_num, accepted_per_depth, request_status);
  check(kernels::sglang_tree_sampling_target_only_can_implement(P));
  const cudaStream_t s = stream_of(stream);
  device_scratch ws(kernels::sglang_tree_sampling_target_only_workspace_size(P), 0, workspace, s);
  check(kernels::sglang_tree_sampling_target_only(P, ws.kernel(), ws.kernel_bytes(), s));
}

std::size_t cuda_verify_ws_size(std::int64_t B, std::int64_t n, std::int64_t vocab) {
  kernels::sglang_verify_params<std::int64_t, std::int32_t> P;
  P.in.tree.num_requests = static_cast<std::int32_t>(B);
  P.in.tree.num_draft_tokens = static_cast<std::int32_t>(n);
  P.in.p.extent[1] = vocab;
  return device_scratch::bytes(kernels::sglang_verify_tree_workspace_size(P),
                               static_cast<std::size_t>(std::max<std::int64_t>(B, 0)) * sizeof(verify_params));
}

void cuda_verify(const dev_i64_2d& candidates, const dev_i64_2d& retrive_index, const dev_i64_2d& next_token,
                 const dev_i64_2d& next_sibling, const dev_nd<const float, 2>& p,
                 const std::optional<dev_nd<const float, 2>>& q, const verify_params& base,
                 const in1<std::int32_t>& modes, const in1<std::uint64_t>& seeds, const in1<std::uint32_t>& requests,
                 const in1<std::uint32_t>& rounds, const std::optional<dev_nd<const double, 2>>& uniforms,
                 std::int32_t num_speculative_tokens, const dev1<std::int32_t>& predicts,
                 const dev_nd<std::int32_t, 2>& accept_index, const dev1<std::int32_t>& accept_token_num,
                 const std::optional<dev1<std::int64_t>>& accepted_per_depth, const dev1<std::int32_t>& request_status,
                 const std::optional<dev_bytes>& workspace, std::uintptr_t stream) {
  device_guard g;
  add_walk(g, candidates, retrive_index, next_token, next_sibling, predicts, accept_index, accept_token_num, workspace);
  g.add(p, "p", q, "q", uniforms, "uniforms");
  kernels::sglang_verify_params<std::int64_t, std::int32_t> P;
  P.in = verify_inputs_of(candidates, retrive_index, next_token, next_sibling, p, q, uniforms, num_speculative_tokens);
  const auto B = static_cast<std::size_t>(P.in.tree.num_requests);
  const std::vector<verify_params> vps = params_batch(base, modes, seeds, requests, rounds, B);
  P.out = sglang_out(predicts, accept_index, accept_token_num);
  const dev_codes c = codes_of(g, B, request_status, accepted_per_depth);
  P.request_status = c.status;
  P.accepted_per_depth = c.per_depth;
  P.depth_counters = c.depth_counters;
  verify_params placeholder{};
  P.in.params = &placeholder;  // host address for the host checks only; the staged copy is launched
  check(kernels::sglang_verify_tree_can_implement(P));
  if (B == 0) return;
  const cudaStream_t s = stream_of(stream);
  device_scratch ws(kernels::sglang_verify_tree_workspace_size(P), B * sizeof(verify_params), workspace, s);
  P.in.params = ws.stage(0, vps.data(), B);
  ws.upload();
  check(kernels::sglang_verify_tree(P, ws.kernel(), ws.kernel_bytes(), s));
}

std::size_t cuda_build_tree_ws_size(std::int64_t B, std::int64_t n) {
  kernels::sglang_build_tree_params P;
  P.in.num_requests = static_cast<std::int32_t>(B);
  P.in.draft_token_num = static_cast<std::int32_t>(n);
  return device_scratch::bytes(kernels::sglang_build_tree_workspace_size(P), 0);
}

void cuda_build_tree(const dev_i64_2d& parent_list, const dev_i64_2d& selected_index,
                     const dev1<const std::int64_t>& verified_seq_len, std::int32_t topk, std::int32_t depth,
                     std::int32_t draft_token_num, std::int32_t mode, const dev1<std::uint8_t>& tree_mask,
                     const dev1<std::int64_t>& positions, const dev1<std::int64_t>& retrive_index,
                     const dev1<std::int64_t>& retrive_next_token, const dev1<std::int64_t>& retrive_next_sibling,
                     const dev1<std::int32_t>& request_status, const std::optional<dev_bytes>& workspace,
                     std::uintptr_t stream) {
  device_guard g;
  g.add(parent_list, "parent_list", selected_index, "selected_index", verified_seq_len, "verified_seq_len", tree_mask,
        "tree_mask", positions, "positions", retrive_index, "retrive_index", retrive_next_token, "retrive_next_token",
        retrive_next_sibling, "retrive_next_sibling", workspace, "workspace");
  kernels::sglang_build_tree_params P;
  std::tie(P.in, P.out) =
      build_tree_args(parent_list, selected_index, verified_seq_len, topk, depth, draft_token_num, mode, tree_mask,
                      positions, retrive_index, retrive_next_token, retrive_next_sibling);
  P.request_status = codes_of(g, verified_seq_len.size(), request_status, std::nullopt).status;
  check(kernels::sglang_build_tree_can_implement(P));
  const cudaStream_t s = stream_of(stream);
  device_scratch ws(kernels::sglang_build_tree_workspace_size(P), 0, workspace, s);
  check(kernels::sglang_build_tree(P, ws.kernel(), ws.kernel_bytes(), s));
}

void cuda_counts_batch(const dev_nd<const token_id, 2>& drafts, const dev_nd<const float, 3>& target_probs,
                       const dev_nd<const float, 3>& draft_probs, const dev_nd<const float, 2>& coins,
                       const dev1<std::int32_t>& accepted_num, const dev1<std::int32_t>& emitted_num,
                       const dev1<std::int32_t>& request_status, std::uintptr_t stream) {
  device_guard g;
  g.add(drafts, "draft_token_ids", target_probs, "target_probs", draft_probs, "draft_probs", coins, "coins",
        accepted_num, "accepted_num", emitted_num, "emitted_num");
  kernels::chain_counts_params P;
  P.batch = counts_batch_of(drafts, target_probs, draft_probs, coins, accepted_num, emitted_num);
  P.request_status = codes_of(g, drafts.shape(0), request_status, std::nullopt).status;
  check(kernels::chain_acceptance_counts_batch_can_implement(P));
  check(kernels::chain_acceptance_counts_batch(P, nullptr, 0, stream_of(stream)));
}
#endif

}  // namespace

void bind_interop_sglang(nb::module_& m) {
  using nb::arg;
  m.def("sglang_verify_tree_greedy", &sglang_greedy, arg("candidates"), arg("retrive_index"), arg("retrive_next_token"),
        arg("retrive_next_sibling"), arg("target_predict"), arg("num_speculative_tokens"), arg("predicts").noconvert(),
        arg("accept_index").noconvert(), arg("accept_token_num").noconvert());
  m.def("sglang_tree_sampling_target_only", &sglang_sampling, arg("candidates"), arg("retrive_index"),
        arg("retrive_next_token"), arg("retrive_next_sibling"), arg("target_probs"), arg("coins"), arg("final_coins"),
        arg("num_speculative_tokens"), arg("threshold_single"), arg("threshold_acc"), arg("predicts").noconvert(),
        arg("accept_index").noconvert(), arg("accept_token_num").noconvert());
  m.def("chain_acceptance_counts", &chain_counts, arg("drafts"), arg("p"), arg("q"), arg("coins"), arg("seed"),
        arg("request"), arg("round"));
  m.def("sglang_build_tree", &build_tree, arg("parent_list"), arg("selected_index"), arg("verified_seq_len"),
        arg("topk"), arg("depth"), arg("draft_token_num"), arg("mode"), arg("tree_mask").noconvert(),
        arg("positions").noconvert(), arg("retrive_index").noconvert(), arg("retrive_next_token").noconvert(),
        arg("retrive_next_sibling").noconvert(), arg("request_status").noconvert().none());
  m.def("sglang_verify_tree", &verify_tree, arg("candidates"), arg("retrive_index"), arg("retrive_next_token"),
        arg("retrive_next_sibling"), arg("p"), arg("q").none(), arg("params"), arg("modes"), arg("seeds"),
        arg("requests"), arg("rounds"), arg("uniforms").none(), arg("num_speculative_tokens"),
        arg("predicts").noconvert(), arg("accept_index").noconvert(), arg("accept_token_num").noconvert(),
        arg("accepted_per_depth").noconvert().none(), arg("request_status").noconvert().none());
  m.def("chain_acceptance_counts_batch", &counts_batch, arg("draft_token_ids"), arg("target_probs"), arg("draft_probs"),
        arg("coins"), arg("accepted_num").noconvert(), arg("emitted_num").noconvert(),
        arg("request_status").noconvert().none());
#if defined(SPECDEC_PYTHON_HAS_CUDA)
  m.def("cuda_sglang_tree_workspace_size", &cuda_greedy_ws_size, arg("num_requests"), arg("num_draft_tokens"));
  m.def("cuda_sglang_tree_sampling_workspace_size", &cuda_sampling_ws_size, arg("num_requests"),
        arg("num_draft_tokens"), arg("vocab"));
  m.def("cuda_sglang_verify_tree_greedy", &cuda_greedy, arg("candidates"), arg("retrive_index"),
        arg("retrive_next_token"), arg("retrive_next_sibling"), arg("target_predict"), arg("num_speculative_tokens"),
        arg("predicts").noconvert(), arg("accept_index").noconvert(), arg("accept_token_num").noconvert(),
        arg("accepted_per_depth").noconvert().none(), arg("request_status").noconvert(),
        arg("workspace").noconvert().none(), arg("stream"));
  m.def("cuda_sglang_tree_sampling_target_only", &cuda_sampling, arg("candidates"), arg("retrive_index"),
        arg("retrive_next_token"), arg("retrive_next_sibling"), arg("target_probs"), arg("coins"), arg("final_coins"),
        arg("num_speculative_tokens"), arg("threshold_single"), arg("threshold_acc"), arg("predicts").noconvert(),
        arg("accept_index").noconvert(), arg("accept_token_num").noconvert(),
        arg("accepted_per_depth").noconvert().none(), arg("request_status").noconvert(),
        arg("workspace").noconvert().none(), arg("stream"));
  m.def("cuda_sglang_verify_tree_workspace_size", &cuda_verify_ws_size, arg("num_requests"), arg("num_draft_tokens"),
        arg("vocab"));
  m.def("cuda_sglang_verify_tree", &cuda_verify, arg("candidates"), arg("retrive_index"), arg("retrive_next_token"),
        arg("retrive_next_sibling"), arg("p"), arg("q").none(), arg("params"), arg("modes"), arg("seeds"),
        arg("requests"), arg("rounds"), arg("uniforms").none(), arg("num_speculative_tokens"),
        arg("predicts").noconvert(), arg("accept_index").noconvert(), arg("accept_token_num").noconvert(),
        arg("accepted_per_depth").noconvert().none(), arg("request_status").noconvert(),
        arg("workspace").noconvert().none(), arg("stream"));
  m.def("cuda_sglang_build_tree_workspace_size", &cuda_build_tree_ws_size, arg("num_requests"), arg("draft_token_num"));
  m.def("cuda_sglang_build_tree", &cuda_build_tree, arg("parent_list"), arg("selected_index"), arg("verified_seq_len"),
        arg("topk"), arg("depth"), arg("draft_token_num"), arg("mode"), arg("tree_mask").noconvert(),
        arg("positions").noconvert(), arg("retrive_index").noconvert(), arg("retrive_next_token").noconvert(),
        arg("retrive_next_sibling").noconvert(), arg("request_status").noconvert(), arg("workspace").noconvert().none(),
        arg("stream"));
  m.def("cuda_chain_acceptance_counts_batch", &cuda_counts_batch, arg("draft_token_ids"), arg("target_probs"),
        arg("draft_probs"), arg("coins"), arg("accepted_num").noconvert(), arg("emitted_num").noconvert(),
        arg("request_status").noconvert(), arg("stream"));
#endif
}

}  // namespace specdec::python
