// Verification: one tree, one chain, and a ragged batch, each with the keyed
// Philox streams or the caller's uniforms. Results come back as tuples; the
// path and token outputs are the caller's arrays.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>

#include "common.hpp"
#include "common_cuda.hpp"
#include "specdec/verify/batch_verify.hpp"
#include "specdec/verify/tree_verify.hpp"
#if defined(SPECDEC_PYTHON_HAS_CUDA)
#include "specdec/kernels/verify.hpp"
#endif

namespace specdec::python {
namespace {

using result_tuple = std::tuple<std::int32_t, std::int32_t, std::int32_t>;

view2d<const float> q_view(const std::optional<in_nd<float, 2>>& q) {
  return q ? view_of<2>(*q) : view2d<const float>{};
}

result_tuple tree(const in1<node_id>& parent, const in1<token_id>& tokens, const in_nd<float, 2>& p,
                  const std::optional<in_nd<float, 2>>& q, const verify_params& vp,
                  const std::optional<in_nd<double, 2>>& uniforms, const out1<node_id>& path_out,
                  const out1<token_id>& tokens_out) {
  require(parent.size() == tokens.size(), status_code::size_mismatch, "parent and tokens differ in size");
  require(parent.size() <= static_cast<std::size_t>(INT32_MAX), status_code::invalid_argument, "tree too large");
  const tree_view t{tokens.data(), parent.data(), nullptr, nullptr, static_cast<std::int32_t>(parent.size())};
  auto ws = scratch(verify_workspace_size(static_cast<std::int64_t>(p.shape(1)), t.size));
  verify_result r{};
  const auto u = uniforms_of(uniforms);
  check(u ? verify_tree(t, view_of<2>(p), q_view(q), vp, *u, ws, span_of(path_out), span_of(tokens_out), r)
          : verify_tree(t, view_of<2>(p), q_view(q), vp, ws, span_of(path_out), span_of(tokens_out), r));
  return {r.accepted, r.last_node, r.next_token};
}

result_tuple chain(const in1<token_id>& drafts, const in_nd<float, 2>& p, const std::optional<in_nd<float, 2>>& q,
                   const verify_params& vp, const std::optional<in_nd<double, 2>>& uniforms,
                   const out1<token_id>& tokens_out) {
  require(drafts.size() < static_cast<std::size_t>(INT32_MAX), status_code::invalid_argument, "too many drafts");
  auto ws = scratch(
      verify_workspace_size(static_cast<std::int64_t>(p.shape(1)), static_cast<std::int32_t>(drafts.size()) + 1));
  verify_result r{};
  const auto u = uniforms_of(uniforms);
  check(u ? verify_chain(span_of(drafts), view_of<2>(p), q_view(q), vp, *u, ws, span_of(tokens_out), r)
          : verify_chain(span_of(drafts), view_of<2>(p), q_view(q), vp, ws, span_of(tokens_out), r));
  return {r.accepted, r.last_node, r.next_token};
}

// Per-request settings arrive as arrays (one entry per request); results as
// an R x 4 int32 array (accepted, last_node, next_token, status code).
void batch(const in1<std::int32_t>& offsets, const in1<node_id>& parent, const in1<token_id>& tokens,
           const in_nd<float, 2>& p, const std::optional<in_nd<float, 2>>& q, const verify_params& base,
           const in1<std::int32_t>& modes, const in1<std::uint64_t>& seeds, const in1<std::uint32_t>& requests,
           const in1<std::uint32_t>& rounds, const std::optional<in_nd<double, 2>>& uniforms,
           const out_nd<node_id, 2>& paths_out, const out_nd<token_id, 2>& tokens_out,
           const out_nd<std::int32_t, 2>& results_out, const std::optional<out1<std::int64_t>>& accepted_per_depth) {
  require(offsets.size() >= 1, status_code::invalid_argument, "offsets needs R + 1 entries");
  const std::size_t R = offsets.size() - 1;
  const std::vector<verify_params> vps = params_batch(base, modes, seeds, requests, rounds, R);
  require(parent.size() == tokens.size(), status_code::size_mismatch, "parent and tokens differ in size");
  require(results_out.shape(0) == R && results_out.shape(1) == 4 && results_out.stride(1) == 1 &&
              (R <= 1 || results_out.stride(0) == 4),
          status_code::size_mismatch, "results must be a dense R x 4 int32 array");
  verify_batch_input in;
  in.offsets = span_of(offsets);
  in.nodes = tree_view{tokens.data(), parent.data(), nullptr, nullptr, static_cast<std::int32_t>(parent.size())};
  in.p = view_of<2>(p);
  in.q = q_view(q);
  in.params = vps;
  if (const auto u = batch_uniforms(uniforms, 0)) {
    in.uniforms = std::span<const double>(u->u, uniforms->size());
    in.draws_per_node = u->draws_per_node;
  }
  std::vector<verify_result> res(R);
  // Start from the caller's values so that rows of failed requests come back unchanged.
  for (std::size_t r = 0; r < R; ++r) {
    const std::int32_t* row = results_out.data() + r * 4;
    res[r] = verify_result{row[0], row[1], row[2], static_cast<status_code>(row[3])};
  }
  verify_batch_output out;
  out.paths = view_of<2>(paths_out);
  out.tokens = view_of<2>(tokens_out);
  out.results = res;
  if (accepted_per_depth) out.accepted_per_depth = span_of(*accepted_per_depth);
  auto ws = scratch(verify_batch_workspace_size(static_cast<std::int64_t>(p.shape(1)), in.offsets));
  const status s = verify_batch(in, ws, out);
  // A request whose own inputs are bad fails alone (its code in results, its
  // rows untouched) and does not raise; a batch-level failure wrote nothing
  // and raises.
  bool request_failed = false;
  for (std::size_t r = 0; r < R; ++r) request_failed = request_failed || res[r].code != status_code::ok;
  if (!s.ok() && !request_failed) check(s);
  for (std::size_t r = 0; r < R; ++r) {
    std::int32_t* row = results_out.data() + r * 4;
    row[0] = res[r].accepted;
    row[1] = res[r].last_node;
    row[2] = res[r].next_token;
    row[3] = static_cast<std::int32_t>(res[r].code);
  }
}

// The keyed Philox draws in the caller-uniforms layout u[node][draw]: what
// verification (purpose verify: philox_uniforms) or a sampling tree builder
// (purpose draft: for_purpose(rng, draft).uniform_double) reads when no
// uniforms are given, so an engine can hand the same numbers back.
void philox_table(std::uint64_t seed, std::uint32_t request, std::uint32_t round, bool draft,
                  const out_nd<double, 2>& out) {
  require(out.shape(0) <= static_cast<std::size_t>(INT32_MAX) && out.shape(1) <= static_cast<std::size_t>(INT32_MAX),
          status_code::invalid_argument, "too many nodes or draws");
  const rng_stream rng{seed, request, round};
  const philox_uniforms verify{rng};
  const rng_stream drafting = for_purpose(rng, rng_purpose::draft);
  auto v = view_of<2>(out);
  for (std::int64_t u = 0; u < v.extent[0]; ++u)
    for (std::int64_t d = 0; d < v.extent[1]; ++d) {
      const auto node = static_cast<std::uint32_t>(u), draw = static_cast<std::uint32_t>(d);
      v(u, d) = draft ? drafting.uniform_double(node, draw) : verify(node, draw);
    }
}

#if defined(SPECDEC_PYTHON_HAS_CUDA)
// ---- CUDA: the verify_batch kernel on the caller's stream -----------------

std::size_t verify_staging(std::size_t R, bool upload_offsets) {
  return R * sizeof(verify_params) + (upload_offsets ? workspace_alignment + (R + 1) * sizeof(std::int32_t) : 0);
}

std::size_t verify_ws_size(std::int64_t R, std::int32_t vocab, std::int32_t max_nodes, bool upload_offsets) {
  if (R <= 0) return 0;
  return device_scratch::bytes(
      kernels::verify_batch_workspace_bytes(static_cast<std::int32_t>(R), vocab, std::max(max_nodes, 1)),
      verify_staging(static_cast<std::size_t>(R), upload_offsets));
}

void verify(const any_i32& offsets, const dev1<const node_id>& parent, const dev1<const token_id>& tokens,
            const dev_nd<const float, 2>& p, const std::optional<dev_nd<const float, 2>>& q, const verify_params& base,
            const in1<std::int32_t>& modes, const in1<std::uint64_t>& seeds, const in1<std::uint32_t>& requests,
            const in1<std::uint32_t>& rounds, const std::optional<dev_nd<const double, 2>>& uniforms,
            const dev_nd<node_id, 2>& paths_out, const dev_nd<token_id, 2>& tokens_out,
            const dev_nd<std::int32_t, 2>& results, const std::optional<dev1<std::int64_t>>& accepted_per_depth,
            const std::optional<dev_bytes>& workspace, std::uintptr_t stream) {
  device_guard g;
  g.add(parent, "parent", tokens, "tokens", p, "p", q, "q", uniforms, "uniforms", paths_out, "paths", tokens_out,
        "tokens_out", results, "results", accepted_per_depth, "accepted_per_depth", workspace, "workspace");
  const cudaStream_t s = stream_of(stream);
  const offsets_arg o = offsets_of(g, offsets, s);
  const std::vector<std::int32_t>& off = o.host;
  require(parent.size() == tokens.size(), status_code::size_mismatch, "parent and tokens differ in size");
  const std::int32_t largest = check_offsets(off, parent.size(), true);
  const std::size_t R = off.size() - 1;
  const std::vector<verify_params> vps = params_batch(base, modes, seeds, requests, rounds, R);
  const auto nodes = static_cast<std::size_t>(off.back());
  require(p.shape(0) >= nodes, status_code::size_mismatch, "p needs one row per node");
  require(p.shape(1) >= 1 && p.shape(1) <= static_cast<std::size_t>(INT32_MAX), status_code::invalid_argument,
          "p needs 1 .. 2^31-1 columns");
  const auto V = static_cast<std::int32_t>(p.shape(1));
  require(!q || (q->shape(0) >= nodes && q->shape(1) == p.shape(1)), status_code::size_mismatch,
          "q needs one row of V entries per node");
  const auto u = batch_uniforms(uniforms, nodes);
  const auto L = paths_out.shape(1);
  require(paths_out.shape(0) == R && tokens_out.shape(0) == R && tokens_out.shape(1) == L && L >= 1 &&
              paths_out.stride(1) == 1 && tokens_out.stride(1) == 1 &&
              (R <= 1 || (static_cast<std::size_t>(paths_out.stride(0)) == L &&
                          static_cast<std::size_t>(tokens_out.stride(0)) == L)),
          status_code::size_mismatch, "paths and tokens_out must be dense R x L int32 arrays");
  require(
      results.shape(0) == R && results.shape(1) == 4 && results.stride(1) == 1 && (R <= 1 || results.stride(0) == 4),
      status_code::size_mismatch, "results must be a dense R x 4 int32 array");
  require(!accepted_per_depth || accepted_per_depth->size() >= 1, status_code::invalid_argument,
          "accepted_per_depth needs at least one counter");
  if (R == 0) return;
  static_assert(sizeof(verify_result) == 4 * sizeof(std::int32_t) && std::is_standard_layout_v<verify_result>);
  kernels::verify_batch_params P;
  P.token = tokens.data();
  P.parent = parent.data();
  P.p = p.data();
  P.p_row_stride = static_cast<std::int64_t>(p.stride(0));
  P.p_col_stride = static_cast<std::int64_t>(p.stride(1));
  if (q) {
    P.q = q->data();
    P.q_row_stride = static_cast<std::int64_t>(q->stride(0));
    P.q_col_stride = static_cast<std::int64_t>(q->stride(1));
  }
  if (u) {
    P.uniforms = u->u;
    P.draws_per_node = u->draws_per_node;
  }
  P.num_requests = static_cast<std::int32_t>(R);
  P.vocab = V;
  P.max_nodes = std::max(largest, 1);
  // Rows every node array holds: the kernel keeps each request's span inside them.
  std::size_t capacity = std::min<std::size_t>({parent.size(), p.shape(0), INT32_MAX});
  if (q) capacity = std::min<std::size_t>(capacity, q->shape(0));
  if (uniforms) capacity = std::min<std::size_t>(capacity, uniforms->shape(0));
  P.node_capacity = static_cast<std::int32_t>(capacity);
  P.out_stride = static_cast<std::int32_t>(L);
  P.paths = paths_out.data();
  P.tokens = tokens_out.data();
  P.results = reinterpret_cast<verify_result*>(results.data());
  if (accepted_per_depth) {
    P.accepted_per_depth = reinterpret_cast<unsigned long long*>(accepted_per_depth->data());
    P.depth_counters = static_cast<std::int32_t>(accepted_per_depth->size());
  }
  const std::size_t kernel_bytes = kernels::verify_batch_workspace_size(P);
  device_scratch ws(kernel_bytes, verify_staging(R, !o.on_device), workspace, s);
  P.params = ws.stage(0, vps.data(), R);
  if (o.on_device) {
    P.offsets = offsets.data();
  } else {
    const std::size_t at =
        (R * sizeof(verify_params) + workspace_alignment - 1) / workspace_alignment * workspace_alignment;
    P.offsets = ws.stage(at, off.data(), R + 1);
  }
  check(kernels::verify_batch_can_implement(P));
  ws.upload();
  check(kernels::verify_batch(P, ws.kernel(), ws.kernel_bytes(), s));
}
#endif

}  // namespace

void bind_verify(nb::module_& m) {
  using nb::arg;
  nb::class_<verify_params>(
      m, "VerifyParams",
      "One request's verification settings (C++ specdec::verify_params): the mode (a Mode), "
      "the Philox key (seed, request, round), the typical-acceptance epsilon and delta, and the "
      "normalization tolerance. Batched calls take one as the shared settings and the per-request "
      "modes, seeds, requests and rounds as arrays.")
      .def(
          "__init__",
          [](verify_params* t, std::int32_t mode, std::uint64_t seed, std::uint32_t request, std::uint32_t round,
             float typical_epsilon, float typical_delta, float normalization_tolerance) {
            new (t) verify_params{static_cast<verify_mode>(mode), request, seed, round, typical_epsilon, typical_delta,
                                  normalization_tolerance};
          },
          arg("mode") = 0, arg("seed") = 0, arg("request") = 0, arg("round") = 0, arg("typical_epsilon") = 0.09f,
          arg("typical_delta") = 0.3f, arg("normalization_tolerance") = 1e-3f)
      .def_prop_rw(
          "mode", [](const verify_params& v) { return static_cast<std::int32_t>(v.mode); },
          [](verify_params& v, std::int32_t mode) { v.mode = static_cast<verify_mode>(mode); })
      .def_rw("seed", &verify_params::seed)
      .def_rw("request", &verify_params::request)
      .def_rw("round", &verify_params::round)
      .def_rw("typical_epsilon", &verify_params::typical_epsilon)
      .def_rw("typical_delta", &verify_params::typical_delta)
      .def_rw("normalization_tolerance", &verify_params::normalization_tolerance)
      .def("__repr__", [](const verify_params& v) {
        return "VerifyParams(mode=" + std::to_string(static_cast<int>(v.mode)) + ", seed=" + std::to_string(v.seed) +
               ", request=" + std::to_string(v.request) + ", round=" + std::to_string(v.round) +
               ", typical_epsilon=" + std::to_string(v.typical_epsilon) +
               ", typical_delta=" + std::to_string(v.typical_delta) +
               ", normalization_tolerance=" + std::to_string(v.normalization_tolerance) + ")";
      });
  m.def("verify_tree", &tree, arg("parent"), arg("tokens"), arg("p"), arg("q").none(), arg("params"),
        arg("uniforms").none(), arg("path").noconvert(), arg("tokens_out").noconvert());
  m.def("verify_chain", &chain, arg("drafts"), arg("p"), arg("q").none(), arg("params"), arg("uniforms").none(),
        arg("tokens_out").noconvert());
  m.def("verify_batch", &batch, arg("offsets"), arg("parent"), arg("tokens"), arg("p"), arg("q").none(), arg("params"),
        arg("modes"), arg("seeds"), arg("requests"), arg("rounds"), arg("uniforms").none(), arg("paths").noconvert(),
        arg("tokens_out").noconvert(), arg("results").noconvert(), arg("accepted_per_depth").noconvert().none());
  m.def("philox_uniforms", &philox_table, arg("seed"), arg("request"), arg("round"), arg("draft"),
        arg("out").noconvert());
  m.def("verify_workspace_size", &verify_workspace_size, arg("vocab"), arg("nodes"));
#if defined(SPECDEC_PYTHON_HAS_CUDA)
  m.def("cuda_verify_batch_workspace_size", &verify_ws_size, arg("num_requests"), arg("vocab"), arg("max_nodes"),
        arg("upload_offsets"));
  m.def("cuda_verify_batch", &verify, arg("offsets"), arg("parent"), arg("tokens"), arg("p"), arg("q").none(),
        arg("params"), arg("modes"), arg("seeds"), arg("requests"), arg("rounds"), arg("uniforms").none(),
        arg("paths").noconvert(), arg("tokens_out").noconvert(), arg("results").noconvert(),
        arg("accepted_per_depth").noconvert().none(), arg("workspace").noconvert().none(), arg("stream"));
#endif
}

}  // namespace specdec::python
