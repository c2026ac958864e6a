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

rows_view q_rows(const std::optional<rows_in>& q) { return q ? rows_of(*q, "q") : rows_view{}; }

result_tuple tree(const in1<node_id>& parent, const in1<token_id>& tokens, const rows_in& p,
                  const std::optional<rows_in>& q, const verify_params& vp,
                  const std::optional<in_nd<double, 2>>& uniforms, const out1<node_id>& path_out,
                  const out1<token_id>& tokens_out) {
  require(parent.size() == tokens.size(), status_code::size_mismatch, "parent and tokens differ in size");
  require(parent.size() <= static_cast<std::size_t>(INT32_MAX), status_code::invalid_argument, "tree too large");
  const tree_view t{tokens.data(), parent.data(), nullptr, nullptr, static_cast<std::int32_t>(parent.size())};
  auto ws = scratch(verify_workspace_size(static_cast<std::int64_t>(p.shape(1)), t.size));
  verify_result r{};
  const auto u = uniforms_of(uniforms);
  check(u ? verify_tree(t, rows_of(p, "p"), q_rows(q), vp, *u, ws, span_of(path_out), span_of(tokens_out), r)
          : verify_tree(t, rows_of(p, "p"), q_rows(q), vp, ws, span_of(path_out), span_of(tokens_out), r));
  return {r.accepted, r.last_node, r.next_token};
}

result_tuple chain(const in1<token_id>& drafts, const rows_in& p, const std::optional<rows_in>& q,
                   const verify_params& vp, const std::optional<in_nd<double, 2>>& uniforms,
                   const out1<token_id>& tokens_out) {
  require(drafts.size() < static_cast<std::size_t>(INT32_MAX), status_code::invalid_argument, "too many drafts");
  auto ws = scratch(
      verify_workspace_size(static_cast<std::int64_t>(p.shape(1)), static_cast<std::int32_t>(drafts.size()) + 1));
  verify_result r{};
  const auto u = uniforms_of(uniforms);
  check(u ? verify_chain(span_of(drafts), rows_of(p, "p"), q_rows(q), vp, *u, ws, span_of(tokens_out), r)
          : verify_chain(span_of(drafts), rows_of(p, "p"), q_rows(q), vp, ws, span_of(tokens_out), r));
  return {r.accepted, r.last_node, r.next_token};
}

// Per-request settings arrive as arrays (one entry per request); results as
// an R x 4 int32 array (accepted, last_node, next_token, status code).
// Per-request sampling settings as records of 4 int32 words (the bits of
// specdec::sampling_params: temperature, top_k, top_p, min_p), R x 4,
// dense: what specdec.sampling_table builds.
using sampling_in = nb::ndarray<nb::ro, nb::ndim<2>, nb::c_contig>;
static_assert(sizeof(sampling_params) == 4 * sizeof(std::int32_t) && std::is_standard_layout_v<sampling_params>);

void check_sampling(const sampling_in& a, std::size_t R, const char* name) {
  const nb::dlpack::dtype d = a.dtype();
  require(d.lanes == 1 && d.bits == 32 && d.code == static_cast<std::uint8_t>(nb::dlpack::dtype_code::Int),
          status_code::invalid_argument,
          (std::string(name) + " must be int32 records (specdec.sampling_table)").c_str());
  require(a.shape(0) == R && a.shape(1) == 4, status_code::size_mismatch,
          (std::string(name) + " needs R x 4 entries (one record per request)").c_str());
}

std::span<const sampling_params> sampling_records(const std::optional<sampling_in>& a, std::size_t R,
                                                  const char* name) {
  if (!a) return {};
  check_sampling(*a, R, name);
  require(a->device_type() == nb::device::cpu::value, status_code::invalid_argument,
          (std::string(name) + " must be in host memory like the other arrays").c_str());
  return {static_cast<const sampling_params*>(a->data()), R};
}

void batch(const in1<std::int32_t>& offsets, const in1<node_id>& parent, const in1<token_id>& tokens, const rows_in& p,
           const std::optional<rows_in>& q, const verify_params& base, const in1<std::int32_t>& modes,
           const in1<std::uint64_t>& seeds, const in1<std::uint32_t>& requests, const in1<std::uint32_t>& rounds,
           const std::optional<in_nd<double, 2>>& uniforms, const out_nd<node_id, 2>& paths_out,
           const out_nd<token_id, 2>& tokens_out, const out_nd<std::int32_t, 2>& results_out,
           const std::optional<out1<std::int64_t>>& accepted_per_depth, const std::optional<sampling_in>& sampling,
           const std::optional<sampling_in>& draft_sampling) {
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
  in.p = rows_of(p, "p");
  in.q = q_rows(q);
  in.params = vps;
  if (const auto u = batch_uniforms(uniforms, 0)) {
    in.uniforms = std::span<const double>(u->u, uniforms->size());
    in.draws_per_node = u->draws_per_node;
  }
  in.p_sampling = sampling_records(sampling, R, "sampling");
  in.q_sampling = sampling_records(draft_sampling, R, "draft_sampling");
  const bool logits = !in.p_sampling.empty() || !in.q_sampling.empty();
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
  auto ws = scratch(verify_batch_workspace_size(static_cast<std::int64_t>(p.shape(1)), in.offsets, logits));
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

// What a launch stages from the host (one upload): the offsets when they
// are on the host, and each per-request array given on the host. Nothing
// when everything lives on the device (then the call can be captured).
std::size_t verify_staging(std::size_t R, bool staged) {
  if (!staged) return 0;
  const std::size_t a = workspace_alignment;
  return 7 * a + (R + 1) * sizeof(std::int32_t) +
         R * (sizeof(std::int32_t) + sizeof(std::uint64_t) + 2 * sizeof(std::uint32_t) + 2 * sizeof(sampling_params));
}

std::size_t verify_ws_size(std::int64_t R, std::int32_t vocab, std::int32_t max_nodes, bool staged, bool logits) {
  if (R <= 0) return 0;
  return device_scratch::bytes(
      kernels::verify_batch_workspace_bytes(static_cast<std::int32_t>(R), vocab, std::max(max_nodes, 1), logits),
      verify_staging(static_cast<std::size_t>(R), staged));
}

// A per-request array of a CUDA launch: absent, on the device (pointed to),
// or on the host (staged). Integers of T's width, signed or not.
using any1 = nb::ndarray<nb::ro, nb::ndim<1>, nb::c_contig>;

template <class T>
struct per_request_arg {
  const T* device = nullptr;
  const T* host = nullptr;
};

template <class T>
per_request_arg<T> per_request(device_guard& g, const std::optional<any1>& a, std::size_t R, const char* name) {
  per_request_arg<T> out;
  if (!a) return out;
  const nb::dlpack::dtype d = a->dtype();
  require(d.lanes == 1 && d.bits == 8 * sizeof(T) &&
              (d.code == static_cast<std::uint8_t>(nb::dlpack::dtype_code::Int) ||
               d.code == static_cast<std::uint8_t>(nb::dlpack::dtype_code::UInt)),
          status_code::invalid_argument, (std::string(name) + " has the wrong integer width").c_str());
  require(a->size() == R, status_code::size_mismatch, (std::string(name) + " needs one entry per request").c_str());
  if (a->device_type() == nb::device::cuda::value) {
    g.add(*a, name);
    out.device = static_cast<const T*>(a->data());
  } else {
    out.host = static_cast<const T*>(a->data());
  }
  return out;
}

// Sampling records of a CUDA launch: on the device (pointed to) or on the host (staged).
per_request_arg<sampling_params> sampling_arg(device_guard& g, const std::optional<sampling_in>& a, std::size_t R,
                                              const char* name) {
  per_request_arg<sampling_params> out;
  if (!a) return out;
  check_sampling(*a, R, name);
  if (a->device_type() == nb::device::cuda::value) {
    g.add(*a, name);
    out.device = static_cast<const sampling_params*>(a->data());
  } else {
    out.host = static_cast<const sampling_params*>(a->data());
  }
  return out;
}

void verify(const any_i32& offsets, const dev1<const node_id>& parent, const dev1<const token_id>& tokens,
            const dev_rows& p, const std::optional<dev_rows>& q, const verify_params& base,
            const std::optional<any1>& modes, const std::optional<any1>& seeds, const std::optional<any1>& requests,
            const std::optional<any1>& rounds, const std::optional<dev_nd<const double, 2>>& uniforms,
            const dev_nd<node_id, 2>& paths_out, const dev_nd<token_id, 2>& tokens_out,
            const dev_nd<std::int32_t, 2>& results, const std::optional<dev1<std::int64_t>>& accepted_per_depth,
            const std::optional<dev_bytes>& workspace, std::uintptr_t stream, std::int32_t max_nodes,
            const std::optional<sampling_in>& sampling, const std::optional<sampling_in>& draft_sampling) {
  device_guard g;
  g.add(parent, "parent", tokens, "tokens", p, "p", q, "q", uniforms, "uniforms", paths_out, "paths", tokens_out,
        "tokens_out", results, "results", accepted_per_depth, "accepted_per_depth", workspace, "workspace");
  const cudaStream_t s = stream_of(stream);
  require(parent.size() == tokens.size(), status_code::size_mismatch, "parent and tokens differ in size");
  require(offsets.size() >= 1, status_code::invalid_argument, "offsets needs R + 1 entries");
  const std::size_t R = offsets.size() - 1;
  const bool offsets_on_device = offsets.device_type() == nb::device::cuda::value;
  std::vector<std::int32_t> off;
  if (offsets_on_device) {
    g.add(offsets, "offsets");
    // Read back (one wait) only when the caller does not bound the requests.
    if (max_nodes <= 0) off = host_offsets(offsets, s);
  } else {
    off = host_offsets(offsets, s);
  }
  const auto m = per_request<std::int32_t>(g, modes, R, "modes");
  const auto sd = per_request<std::uint64_t>(g, seeds, R, "seeds");
  const auto rq = per_request<std::uint32_t>(g, requests, R, "requests");
  const auto rd = per_request<std::uint32_t>(g, rounds, R, "rounds");
  const auto ps = sampling_arg(g, sampling, R, "sampling");
  const auto qs = sampling_arg(g, draft_sampling, R, "draft_sampling");
  const rows_view pr = rows_of(p, "p");
  require(pr.extent[1] >= 1 && pr.extent[1] <= INT32_MAX, status_code::invalid_argument, "p needs 1 .. 2^31-1 columns");
  const auto V = static_cast<std::int32_t>(pr.extent[1]);
  const rows_view qr = q ? rows_of(*q, "q") : rows_view{};
  require(!q || qr.extent[1] == pr.extent[1], status_code::size_mismatch, "q needs rows of V entries");
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
  // Rows every node array holds: the kernel keeps each request's span inside them.
  std::size_t capacity = std::min<std::size_t>({parent.size(), static_cast<std::size_t>(pr.extent[0]), INT32_MAX});
  if (q) capacity = std::min<std::size_t>(capacity, static_cast<std::size_t>(qr.extent[0]));
  if (uniforms) capacity = std::min<std::size_t>(capacity, uniforms->shape(0));
  // Offsets read on the host are checked against every node array here, so
  // that a short p, q or uniforms raises before anything is written; offsets
  // left on the device are checked per request by the kernel (node_capacity).
  std::int32_t largest = max_nodes;
  if (!off.empty()) {
    const std::int32_t most = check_offsets(off, capacity, true);
    require(max_nodes <= 0 || most <= max_nodes, status_code::size_mismatch, "a request has more nodes than max_nodes");
    largest = max_nodes > 0 ? max_nodes : most;
  }
  if (R == 0) return;
  const auto u = batch_uniforms(uniforms, 0);
  static_assert(sizeof(verify_result) == 4 * sizeof(std::int32_t) && std::is_standard_layout_v<verify_result>);
  kernels::verify_batch_params P;
  P.token = tokens.data();
  P.parent = parent.data();
  P.p = pr.data;
  P.p_dtype = pr.dtype;
  P.p_row_stride = pr.stride[0];
  P.p_col_stride = pr.stride[1];
  if (q) {
    P.q = qr.data;
    P.q_dtype = qr.dtype;
    P.q_row_stride = qr.stride[0];
    P.q_col_stride = qr.stride[1];
  }
  if (u) {
    P.uniforms = u->u;
    P.draws_per_node = u->draws_per_node;
  }
  P.base = base;
  P.num_requests = static_cast<std::int32_t>(R);
  P.vocab = V;
  P.max_nodes = std::max(largest, 1);
  P.node_capacity = static_cast<std::int32_t>(capacity);
  P.out_stride = static_cast<std::int32_t>(L);
  P.paths = paths_out.data();
  P.tokens = tokens_out.data();
  P.results = reinterpret_cast<verify_result*>(results.data());
  if (accepted_per_depth) {
    P.accepted_per_depth = reinterpret_cast<unsigned long long*>(accepted_per_depth->data());
    P.depth_counters = static_cast<std::int32_t>(accepted_per_depth->size());
  }
  const bool staged = !offsets_on_device || m.host || sd.host || rq.host || rd.host || ps.host || qs.host;
  device_scratch ws(kernels::verify_batch_workspace_bytes(P.num_requests, P.vocab, P.max_nodes,
                                                          sampling.has_value() || draft_sampling.has_value()),
                    verify_staging(R, staged), workspace, s);
  // The staging area: offsets, then each host array, 256-byte aligned apart.
  std::size_t at = 0;
  auto stage = [&](const auto* host, const auto* device, std::size_t count) {
    using T = std::remove_const_t<std::remove_pointer_t<decltype(host)>>;
    if (host == nullptr) return device;
    const T* d = ws.stage(at, host, count);
    at += (count * sizeof(T) + workspace_alignment - 1) / workspace_alignment * workspace_alignment;
    return d;
  };
  P.offsets = offsets_on_device ? offsets.data() : stage(off.data(), static_cast<const std::int32_t*>(nullptr), R + 1);
  P.modes = stage(m.host, m.device, R);
  P.seeds = stage(sd.host, sd.device, R);
  P.requests = stage(rq.host, rq.device, R);
  P.rounds = stage(rd.host, rd.device, R);
  if (sampling) P.p_sampling = stage(ps.host, ps.device, R);
  if (draft_sampling) P.q_sampling = stage(qs.host, qs.device, R);
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
        arg("tokens_out").noconvert(), arg("results").noconvert(), arg("accepted_per_depth").noconvert().none(),
        arg("sampling").none(), arg("draft_sampling").none());
  m.def("philox_uniforms", &philox_table, arg("seed"), arg("request"), arg("round"), arg("draft"),
        arg("out").noconvert());
  m.def("verify_workspace_size", &verify_workspace_size, arg("vocab"), arg("nodes"));
#if defined(SPECDEC_PYTHON_HAS_CUDA)
  m.def("cuda_verify_batch_workspace_size", &verify_ws_size, arg("num_requests"), arg("vocab"), arg("max_nodes"),
        arg("staged"), arg("logits") = false);
  m.def("cuda_verify_batch", &verify, arg("offsets"), arg("parent"), arg("tokens"), arg("p"), arg("q").none(),
        arg("params"), arg("modes").none(), arg("seeds").none(), arg("requests").none(), arg("rounds").none(),
        arg("uniforms").none(), arg("paths").noconvert(), arg("tokens_out").noconvert(), arg("results").noconvert(),
        arg("accepted_per_depth").noconvert().none(), arg("workspace").noconvert().none(), arg("stream"),
        arg("max_nodes"), arg("sampling").none(), arg("draft_sampling").none());
#endif
}

}  // namespace specdec::python
