// Verification: one tree, one chain, and a ragged batch, each with the keyed
// Philox streams or the caller's uniforms. Results come back as tuples; the
// path and token outputs are the caller's arrays.
#include <cstdint>
#include <optional>
#include <tuple>

#include <nanobind/stl/optional.h>
#include <nanobind/stl/tuple.h>

#include "common.hpp"
#include "specdec/verify/batch_verify.hpp"
#include "specdec/verify/tree_verify.hpp"

namespace specdec::python {
namespace {

using result_tuple = std::tuple<std::int32_t, std::int32_t, std::int32_t>;

verify_params params_of(std::int32_t mode, std::uint64_t seed, std::uint32_t request, std::uint32_t round,
                        float typical_epsilon, float typical_delta, float normalization_tolerance) {
  verify_params vp;
  vp.mode = static_cast<verify_mode>(mode);
  vp.seed = seed;
  vp.request = request;
  vp.round = round;
  vp.typical_epsilon = typical_epsilon;
  vp.typical_delta = typical_delta;
  vp.normalization_tolerance = normalization_tolerance;
  return vp;
}

view2d<const float> q_view(const std::optional<in_nd<float, 2>>& q) {
  return q ? view_of<2>(*q) : view2d<const float>{};
}

result_tuple tree(const in1<node_id>& parent, const in1<token_id>& tokens, const in_nd<float, 2>& p,
                  const std::optional<in_nd<float, 2>>& q, std::int32_t mode, std::uint64_t seed, std::uint32_t request,
                  std::uint32_t round, float eps, float delta, float tol,
                  const std::optional<in_nd<double, 2>>& uniforms, const out1<node_id>& path_out,
                  const out1<token_id>& tokens_out) {
  require(parent.size() == tokens.size(), status_code::size_mismatch, "parent and tokens differ in size");
  require(parent.size() <= static_cast<std::size_t>(INT32_MAX), status_code::invalid_argument, "tree too large");
  const tree_view t{tokens.data(), parent.data(), nullptr, nullptr, static_cast<std::int32_t>(parent.size())};
  const verify_params vp = params_of(mode, seed, request, round, eps, delta, tol);
  auto ws = scratch(verify_workspace_size(static_cast<std::int64_t>(p.shape(1)), t.size));
  verify_result r{};
  const auto u = uniforms_of(uniforms);
  check(u ? verify_tree(t, view_of<2>(p), q_view(q), vp, *u, ws, span_of(path_out), span_of(tokens_out), r)
          : verify_tree(t, view_of<2>(p), q_view(q), vp, ws, span_of(path_out), span_of(tokens_out), r));
  return {r.accepted, r.last_node, r.next_token};
}

result_tuple chain(const in1<token_id>& drafts, const in_nd<float, 2>& p, const std::optional<in_nd<float, 2>>& q,
                   std::int32_t mode, std::uint64_t seed, std::uint32_t request, std::uint32_t round, float eps,
                   float delta, float tol, const std::optional<in_nd<double, 2>>& uniforms,
                   const out1<token_id>& tokens_out) {
  require(drafts.size() < static_cast<std::size_t>(INT32_MAX), status_code::invalid_argument, "too many drafts");
  const verify_params vp = params_of(mode, seed, request, round, eps, delta, tol);
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
           const in_nd<float, 2>& p, const std::optional<in_nd<float, 2>>& q, const in1<std::int32_t>& modes,
           const in1<std::uint64_t>& seeds, const in1<std::uint32_t>& requests, const in1<std::uint32_t>& rounds,
           float eps, float delta, float tol, const std::optional<in_nd<double, 2>>& uniforms,
           const out_nd<node_id, 2>& paths_out, const out_nd<token_id, 2>& tokens_out,
           const out_nd<std::int32_t, 2>& results_out, const std::optional<out1<std::int64_t>>& accepted_per_depth) {
  require(offsets.size() >= 1, status_code::invalid_argument, "offsets needs R + 1 entries");
  const std::size_t R = offsets.size() - 1;
  require(modes.size() == R && seeds.size() == R && requests.size() == R && rounds.size() == R,
          status_code::size_mismatch, "modes, seeds, requests and rounds need one entry per request");
  require(parent.size() == tokens.size(), status_code::size_mismatch, "parent and tokens differ in size");
  require(results_out.shape(0) == R && results_out.shape(1) == 4 && results_out.stride(1) == 1 &&
              (R <= 1 || results_out.stride(0) == 4),
          status_code::size_mismatch, "results must be a dense R x 4 int32 array");
  std::vector<verify_params> vps(R);
  for (std::size_t r = 0; r < R; ++r)
    vps[r] = params_of(modes.data()[r], seeds.data()[r], requests.data()[r], rounds.data()[r], eps, delta, tol);
  verify_batch_input in;
  in.offsets = span_of(offsets);
  in.nodes = tree_view{tokens.data(), parent.data(), nullptr, nullptr, static_cast<std::int32_t>(parent.size())};
  in.p = view_of<2>(p);
  in.q = q_view(q);
  in.params = vps;
  if (uniforms) {
    require(uniforms->shape(1) > 0 && uniforms->stride(1) == 1 &&
                (uniforms->shape(0) <= 1 || static_cast<std::size_t>(uniforms->stride(0)) == uniforms->shape(1)),
            status_code::invalid_argument, "uniforms must be a dense nodes x draws array");
    in.uniforms = std::span<const double>(uniforms->data(), uniforms->size());
    in.draws_per_node = static_cast<std::int32_t>(uniforms->shape(1));
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

}  // namespace

void bind_verify(nb::module_& m) {
  using nb::arg;
  m.def("verify_tree", &tree, arg("parent"), arg("tokens"), arg("p"), arg("q").none(), arg("mode"), arg("seed"),
        arg("request"), arg("round"), arg("typical_epsilon"), arg("typical_delta"), arg("normalization_tolerance"),
        arg("uniforms").none(), arg("path").noconvert(), arg("tokens_out").noconvert());
  m.def("verify_chain", &chain, arg("drafts"), arg("p"), arg("q").none(), arg("mode"), arg("seed"), arg("request"),
        arg("round"), arg("typical_epsilon"), arg("typical_delta"), arg("normalization_tolerance"),
        arg("uniforms").none(), arg("tokens_out").noconvert());
  m.def("verify_batch", &batch, arg("offsets"), arg("parent"), arg("tokens"), arg("p"), arg("q").none(), arg("modes"),
        arg("seeds"), arg("requests"), arg("rounds"), arg("typical_epsilon"), arg("typical_delta"),
        arg("normalization_tolerance"), arg("uniforms").none(), arg("paths").noconvert(), arg("tokens_out").noconvert(),
        arg("results").noconvert(), arg("accepted_per_depth").noconvert().none());
  m.def("philox_uniforms", &philox_table, arg("seed"), arg("request"), arg("round"), arg("draft"),
        arg("out").noconvert());
  m.def("verify_workspace_size", &verify_workspace_size, arg("vocab"), arg("nodes"));
}

}  // namespace specdec::python
