// SGLang's and FlashInfer's batch entry points that have CUDA twins
// (kernels/interop.hpp), host side: SGLang's EAGLE tree builder
// (interop/sglang_build_tree.hpp), specdec's lossless walk on SGLang's
// linked lists (interop/sglang_verify.hpp) and FlashInfer's chain counters
// over a batch (interop/results.hpp). The C++ entry points take raw
// pointers, so every array length is checked here first.
#include <cstdint>
#include <optional>
#include <vector>

#include <nanobind/stl/optional.h>

#include "common.hpp"
#include "specdec/interop/results.hpp"
#include "specdec/interop/sglang_build_tree.hpp"
#include "specdec/interop/sglang_verify.hpp"

namespace specdec::python {
namespace {

using i64_2d = in_nd<std::int64_t, 2>;

bool dense2(std::size_t rows, std::size_t cols, std::size_t r, std::size_t c, std::int64_t s0, std::int64_t s1) {
  return r == rows && c == cols && (c <= 1 || s1 == 1) && (r <= 1 || static_cast<std::size_t>(s0) == c);
}

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

void build_tree(const i64_2d& parent_list, const i64_2d& selected_index, const in1<std::int64_t>& verified_seq_len,
                std::int32_t topk, std::int32_t depth, std::int32_t draft_token_num, std::int32_t mode,
                const out1<std::uint8_t>& tree_mask, const out1<std::int64_t>& positions,
                const out1<std::int64_t>& retrive_index, const out1<std::int64_t>& retrive_next_token,
                const out1<std::int64_t>& retrive_next_sibling,
                const std::optional<out1<std::int32_t>>& request_status) {
  const std::size_t B = verified_seq_len.size();
  require(topk >= 1 && depth >= 1 && draft_token_num >= 1, status_code::invalid_argument,
          "topk, depth and draft_token_num must be >= 1");
  require(B <= static_cast<std::size_t>(INT32_MAX), status_code::invalid_argument, "batch too large");
  const auto n = static_cast<std::size_t>(draft_token_num);
  const std::size_t blocks = static_cast<std::size_t>(topk) * static_cast<std::size_t>(depth - 1) + 1;
  require(dense2(B, blocks, parent_list.shape(0), parent_list.shape(1), parent_list.stride(0), parent_list.stride(1)),
          status_code::size_mismatch, "parent_list must be a dense [batch][topk * (depth - 1) + 1] array");
  require(dense2(B, n - 1, selected_index.shape(0), selected_index.shape(1), selected_index.stride(0),
                 selected_index.stride(1)),
          status_code::size_mismatch, "selected_index must be a dense [batch][draft_token_num - 1] array");
  for (const std::size_t s :
       {positions.size(), retrive_index.size(), retrive_next_token.size(), retrive_next_sibling.size()})
    require(s >= B * n, status_code::size_mismatch,
            "positions and the retrive_* outputs need batch * draft_token_num entries");
  sglang_build_tree_inputs in;
  in.batch_size = static_cast<std::int32_t>(B);
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
  request_codes codes = codes_for(request_status, B);
  auto ws = scratch(sglang_build_tree_workspace_size(in));
  check(sglang_build_tree(in, out, codes.span(), ws));
  codes.copy_to(request_status);
}

void verify_tree(const i64_2d& candidates, const i64_2d& retrive_index, const i64_2d& next_token,
                 const i64_2d& next_sibling, const in_nd<float, 2>& p, const std::optional<in_nd<float, 2>>& q,
                 const in1<std::int32_t>& modes, const in1<std::uint64_t>& seeds, const in1<std::uint32_t>& requests,
                 const in1<std::uint32_t>& rounds, float eps, float delta, float tol,
                 const std::optional<in_nd<double, 2>>& uniforms, std::int32_t num_speculative_tokens,
                 const out1<std::int32_t>& predicts, const out_nd<std::int32_t, 2>& accept_index,
                 const out1<std::int32_t>& accept_token_num,
                 const std::optional<out1<std::int64_t>>& accepted_per_depth,
                 const std::optional<out1<std::int32_t>>& request_status) {
  const std::size_t B = candidates.shape(0), n = candidates.shape(1);
  for (const i64_2d* a : {&candidates, &retrive_index, &next_token, &next_sibling})
    require(dense2(B, n, a->shape(0), a->shape(1), a->stride(0), a->stride(1)), status_code::size_mismatch,
            "candidates, retrive_index, retrive_next_token and retrive_next_sibling must be dense "
            "[batch_size][num_draft_tokens] arrays");
  require(B <= static_cast<std::size_t>(INT32_MAX) && n <= static_cast<std::size_t>(INT32_MAX),
          status_code::invalid_argument, "batch too large");
  require(modes.size() == B && seeds.size() == B && requests.size() == B && rounds.size() == B,
          status_code::size_mismatch, "modes, seeds, requests and rounds need one entry per request");
  std::vector<verify_params> vps(B);
  for (std::size_t r = 0; r < B; ++r) {
    vps[r].mode = static_cast<verify_mode>(modes.data()[r]);
    vps[r].seed = seeds.data()[r];
    vps[r].request = requests.data()[r];
    vps[r].round = rounds.data()[r];
    vps[r].typical_epsilon = eps;
    vps[r].typical_delta = delta;
    vps[r].normalization_tolerance = tol;
  }
  sglang_verify_inputs<std::int64_t> in;
  in.tree = {static_cast<std::int32_t>(B),
             static_cast<std::int32_t>(n),
             candidates.data(),
             retrive_index.data(),
             next_token.data(),
             next_sibling.data()};
  in.p = view_of<2>(p);
  if (q) in.q = view_of<2>(*q);
  in.params = vps.data();
  if (const auto u = uniforms_of(uniforms)) {
    require(static_cast<std::size_t>(u->nodes) >= B * n, status_code::size_mismatch,
            "uniforms need one row per slot (batch_size * num_draft_tokens)");
    in.uniforms = u->u;
    in.draws_per_node = u->draws_per_node;
  }
  in.num_speculative_tokens = num_speculative_tokens;
  const sglang_outputs<std::int32_t> out{span_of(predicts), view_of<2>(accept_index), span_of(accept_token_num)};
  request_codes codes = codes_for(request_status, B);
  auto ws = scratch(sglang_verify_tree_workspace_size(static_cast<std::int32_t>(n), in.p.extent[1]));
  check(sglang_verify_tree<std::int64_t, std::int32_t>(
      in, out, accepted_per_depth ? span_of(*accepted_per_depth) : std::span<std::int64_t>{}, codes.span(), ws));
  codes.copy_to(request_status);
}

void counts_batch(const in_nd<token_id, 2>& drafts, const in_nd<float, 3>& target_probs,
                  const in_nd<float, 3>& draft_probs, const in_nd<float, 2>& coins,
                  const out1<std::int32_t>& accepted_num, const out1<std::int32_t>& emitted_num,
                  const std::optional<out1<std::int32_t>>& request_status) {
  const std::size_t B = drafts.shape(0), g = drafts.shape(1);
  require(dense2(B, g, drafts.shape(0), drafts.shape(1), drafts.stride(0), drafts.stride(1)),
          status_code::size_mismatch, "draft_token_ids must be a dense [batch][gamma] array");
  require(B <= static_cast<std::size_t>(INT32_MAX) && g <= static_cast<std::size_t>(INT32_MAX),
          status_code::invalid_argument, "batch too large");
  require(coins.shape(0) >= B && coins.shape(1) >= g && (coins.shape(1) <= 1 || coins.stride(1) == 1),
          status_code::size_mismatch, "coins must be [batch][>= gamma] with contiguous rows");
  require(accepted_num.size() >= B && emitted_num.size() >= B, status_code::size_mismatch,
          "accepted_num and emitted_num need one entry per request");
  specdec::chain_counts_batch b;
  b.batch_size = static_cast<std::int32_t>(B);
  b.num_speculative_tokens = static_cast<std::int32_t>(g);
  b.draft_token_ids = drafts.data();
  b.target_probs = view_of<3>(target_probs);
  b.draft_probs = view_of<3>(draft_probs);
  b.coins = coins.data();
  b.coins_stride = B <= 1 ? static_cast<std::int64_t>(coins.shape(1)) : static_cast<std::int64_t>(coins.stride(0));
  b.accepted_num = accepted_num.data();
  b.emitted_num = emitted_num.data();
  request_codes codes = codes_for(request_status, B);
  check(chain_acceptance_counts_batch(b, codes.span()));
  codes.copy_to(request_status);
}

}  // namespace

void bind_sglang(nb::module_& m) {
  using nb::arg;
  m.def("sglang_build_tree", &build_tree, arg("parent_list"), arg("selected_index"), arg("verified_seq_len"),
        arg("topk"), arg("depth"), arg("draft_token_num"), arg("mode"), arg("tree_mask").noconvert(),
        arg("positions").noconvert(), arg("retrive_index").noconvert(), arg("retrive_next_token").noconvert(),
        arg("retrive_next_sibling").noconvert(), arg("request_status").noconvert().none());
  m.def("sglang_verify_tree", &verify_tree, arg("candidates"), arg("retrive_index"), arg("retrive_next_token"),
        arg("retrive_next_sibling"), arg("p"), arg("q").none(), arg("modes"), arg("seeds"), arg("requests"),
        arg("rounds"), arg("typical_epsilon"), arg("typical_delta"), arg("normalization_tolerance"),
        arg("uniforms").none(), arg("num_speculative_tokens"), arg("predicts").noconvert(),
        arg("accept_index").noconvert(), arg("accept_token_num").noconvert(),
        arg("accepted_per_depth").noconvert().none(), arg("request_status").noconvert().none());
  m.def("chain_acceptance_counts_batch", &counts_batch, arg("draft_token_ids"), arg("target_probs"), arg("draft_probs"),
        arg("coins"), arg("accepted_num").noconvert(), arg("emitted_num").noconvert(),
        arg("request_status").noconvert().none());
}

}  // namespace specdec::python
