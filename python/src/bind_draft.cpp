// Drafting (include/specdec/draft): tree builders driven by a Python
// drafter (top-k, beam, sampled, static shape), prune to a node budget, and
// the batched prune (host, and on CUDA arrays when built with the kernels).
#include <cstdint>
#include <optional>
#include <tuple>
#include <vector>

#include <nanobind/stl/optional.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include "common.hpp"
#include "common_cuda.hpp"
#include "specdec/draft/batch_prune.hpp"
#include "specdec/draft/beam_tree.hpp"
#include "specdec/draft/prune.hpp"
#include "specdec/draft/sampled_tree.hpp"
#include "specdec/draft/static_tree.hpp"
#include "specdec/draft/topk_tree.hpp"
#if defined(SPECDEC_PYTHON_HAS_CUDA)
#include "specdec/kernels/draft.hpp"
#endif

namespace specdec::python {
namespace {

// A probability_drafter over a Python callable fn(node, depth, path) that
// returns a 1-D float32 row over the vocabulary. The returned array is kept
// alive until the next call, as the concept asks of a row.
struct py_drafter {
  nb::callable fn;
  in1<float> row;
  std::span<const float> probabilities(const draft_context& c) {
    const std::size_t shape[1] = {c.path.size()};
    nb::ndarray<nb::numpy, const token_id, nb::ndim<1>> path(c.path.data(), 1, shape, nb::handle());
    row = nb::cast<in1<float>>(fn(c.node, c.depth, path));
    return {row.data(), row.size()};
  }
};

template <class T>
nb::ndarray<nb::numpy, T, nb::ndim<1>> to_numpy(std::vector<T> v) {
  auto* heap = new std::vector<T>(std::move(v));
  nb::capsule owner(heap, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  const std::size_t shape[1] = {heap->size()};
  return nb::ndarray<nb::numpy, T, nb::ndim<1>>(heap->data(), 1, shape, owner);
}

// (parent, tokens, scores, prob, child_mode) of a drafted tree as numpy arrays.
auto drafted_arrays(const drafted_tree& t) {
  std::vector<std::uint8_t> mode(t.child_mode.size());
  for (std::size_t i = 0; i < mode.size(); ++i) mode[i] = static_cast<std::uint8_t>(t.child_mode[i]);
  const auto p = t.tree.parents(), tk = t.tree.tokens();
  const auto sc = t.tree.scores();
  return std::make_tuple(to_numpy(std::vector<node_id>(p.begin(), p.end())),
                         to_numpy(std::vector<token_id>(tk.begin(), tk.end())),
                         to_numpy(std::vector<float>(sc.begin(), sc.end())), to_numpy(t.prob), to_numpy(mode));
}

auto topk(const nb::callable& fn, token_id root_token, std::int32_t k, std::int32_t depth, std::int64_t vocab_size,
          std::int32_t max_nodes) {
  topk_tree_builder b(topk_tree_options{k, depth, vocab_size, max_nodes});
  py_drafter d{fn, {}};
  drafted_tree out;
  check(b.build(d, root_token, out));
  return drafted_arrays(out);
}

// The q rows a sampling build wrote (row u = the normalized draft
// distribution of expanded node u, what the sampled verifiers read), as an
// N x V numpy array; leaf rows are zero.
nb::ndarray<nb::numpy, float, nb::ndim<2>> q_numpy(std::vector<float> q, std::size_t rows, std::size_t V) {
  q.resize(rows * V);
  auto* heap = new std::vector<float>(std::move(q));
  nb::capsule owner(heap, [](void* p) noexcept { delete static_cast<std::vector<float>*>(p); });
  const std::size_t shape[2] = {rows, V};
  return nb::ndarray<nb::numpy, float, nb::ndim<2>>(heap->data(), 2, shape, owner);
}

template <class Builder>
auto build_sampling(Builder& b, const nb::callable& fn, token_id root_token, std::int64_t vocab_size,
                    std::uint64_t seed, std::uint32_t request, std::uint32_t round,
                    const std::optional<in_nd<double, 2>>& uniforms) {
  require(vocab_size > 0, status_code::invalid_argument, "vocab_size is required (it sizes the q rows)");
  const auto bound = static_cast<std::size_t>(b.node_bound());
  const auto V = static_cast<std::size_t>(vocab_size);
  std::vector<float> q(bound * V, 0.0f);
  draft_round dr;
  dr.root_token = root_token;
  dr.rng = rng_stream{seed, request, round};
  dr.q_rows = make_view<float>(q.data(), static_cast<std::int64_t>(bound), vocab_size);
  if (const auto u = uniforms_of(uniforms)) dr.uniforms = *u;
  py_drafter d{fn, {}};
  drafted_tree out;
  check(b.build(d, dr, out));
  return std::tuple_cat(drafted_arrays(out),
                        std::make_tuple(q_numpy(std::move(q), static_cast<std::size_t>(out.size()), V)));
}

auto sampled(const nb::callable& fn, token_id root_token, std::int32_t mode, const std::vector<std::int32_t>& widths,
             std::int64_t vocab_size, std::int32_t max_nodes, std::uint64_t seed, std::uint32_t request,
             std::uint32_t round, const std::optional<in_nd<double, 2>>& uniforms) {
  sampled_tree_options o;
  o.mode = static_cast<draft_mode>(mode);
  o.widths = widths;
  o.vocab_size = vocab_size;
  o.max_nodes = max_nodes;
  sampled_tree_builder b(o);
  require(static_cast<double>(b.node_bound()) * static_cast<double>(vocab_size) < 1e10, status_code::invalid_argument,
          "tree x vocabulary too large for the q rows");
  return build_sampling(b, fn, root_token, vocab_size, seed, request, round, uniforms);
}

auto static_shape(const nb::callable& fn, token_id root_token, const std::vector<node_id>& shape, std::int32_t mode,
                  std::int64_t vocab_size, std::uint64_t seed, std::uint32_t request, std::uint32_t round,
                  const std::optional<in_nd<double, 2>>& uniforms) {
  static_tree_options o;
  o.shape = shape;
  o.mode = static_cast<draft_mode>(mode);
  o.vocab_size = vocab_size;
  static_tree_builder b(o);
  return build_sampling(b, fn, root_token, vocab_size, seed, request, round, uniforms);
}

auto beam(const nb::callable& fn, token_id root_token, std::int32_t k, std::int32_t width, std::int32_t depth,
          std::int32_t budget, std::int64_t vocab_size, std::int32_t max_nodes) {
  beam_tree_builder b(beam_tree_options{k, width, depth, budget, vocab_size, max_nodes});
  py_drafter d{fn, {}};
  drafted_tree out;
  check(b.build(d, root_token, out));
  return drafted_arrays(out);
}

std::int32_t prune(const in1<node_id>& parent, const in1<float>& scores, std::int32_t budget,
                   const out1<node_id>& new_index) {
  require(parent.size() == scores.size(), status_code::size_mismatch, "parent and scores differ in size");
  require(parent.size() <= static_cast<std::size_t>(INT32_MAX), status_code::invalid_argument, "tree too large");
  const auto n = static_cast<std::int32_t>(parent.size());
  const tree_view t{nullptr, parent.data(), nullptr, scores.data(), n};
  auto ws = scratch(prune_workspace_size(n));
  std::int32_t kept = 0;
  check(prune_to_budget(t, budget, span_of(new_index), ws, kept));
  return kept;
}

// A ragged batch (request r owns nodes offsets[r]..offsets[r+1], local
// parent ids); per-request failures land in request_status.
void prune_many(const in1<node_id>& parent, const in1<float>& scores, const in1<std::int32_t>& offsets,
                const in1<std::int32_t>& budgets, const out1<node_id>& new_index, const out1<std::int32_t>& kept,
                const out1<std::int32_t>& request_status) {
  check(batch_prune_to_budget(span_of(parent), span_of(scores), span_of(offsets), span_of(budgets), span_of(new_index),
                              span_of(kept), span_of(request_status)));
}

#if defined(SPECDEC_PYTHON_HAS_CUDA)
// ---- CUDA: the batched prune on the caller's stream ------------------------

kernels::batch_prune_params prune_params(std::int64_t R, std::int64_t N) {
  kernels::batch_prune_params P;
  P.num_requests = static_cast<std::int32_t>(R);
  P.total_nodes = static_cast<std::int32_t>(N);
  return P;
}

std::size_t prune_ws_size(std::int64_t R, std::int64_t N, bool upload_offsets) {
  return device_scratch::bytes(kernels::batch_prune_workspace_size(prune_params(R, N)),
                               upload_offsets ? static_cast<std::size_t>(R + 1) * sizeof(std::int32_t) : 0);
}

void cuda_prune_batch(const dev1<const node_id>& parent, const dev1<const float>& score, const any_i32& offsets,
                      const std::optional<dev1<const std::int32_t>>& budgets, std::int32_t uniform_budget,
                      const dev1<node_id>& new_index, const dev1<std::int32_t>& kept,
                      const dev1<std::int32_t>& request_status, const std::optional<dev_bytes>& workspace,
                      std::uintptr_t stream) {
  device_guard g;
  g.add(parent, "parent", score, "score", budgets, "budgets", new_index, "new_index", kept, "kept", request_status,
        "request_status", workspace, "workspace");
  const cudaStream_t s = stream_of(stream);
  require(parent.size() == score.size(), status_code::size_mismatch, "parent and score sizes differ");
  require(offsets.size() >= 1, status_code::invalid_argument, "offsets needs R + 1 entries");
  const std::size_t R = offsets.size() - 1;
  // Host offsets are checked here and uploaded; device offsets are used in
  // place, unread (the kernel checks every span before it reads a request).
  const bool on_device = offsets.device_type() == nb::device::cuda::value;
  std::vector<std::int32_t> off;
  if (on_device) {
    g.add(offsets, "offsets");
  } else {
    off = host_offsets(offsets, s);
    (void)check_offsets(off, parent.size(), false);
    require(static_cast<std::size_t>(off.back()) == parent.size(), status_code::invalid_argument,
            "offsets must run from 0 to the node count");
  }
  require(!budgets || budgets->size() == R, status_code::size_mismatch, "one budget per request");
  require(new_index.size() >= parent.size() && kept.size() >= R && request_status.size() >= R,
          status_code::buffer_too_small, "outputs too small");
  if (R == 0) return;
  kernels::batch_prune_params P = prune_params(static_cast<std::int64_t>(R), static_cast<std::int64_t>(parent.size()));
  P.parent = parent.data();
  P.score = score.data();
  P.budget = budgets ? budgets->data() : nullptr;
  P.uniform_budget = uniform_budget;
  P.new_index = new_index.data();
  P.kept = kept.data();
  P.request_status = request_status.data();
  device_scratch ws(kernels::batch_prune_workspace_size(P), on_device ? 0 : (R + 1) * sizeof(std::int32_t), workspace,
                    s);
  P.offsets = on_device ? offsets.data() : ws.stage(0, off.data(), R + 1);
  check(kernels::batch_prune_can_implement(P));
  ws.upload();
  check(kernels::batch_prune_to_budget(P, ws.kernel(), ws.kernel_bytes(), s));
}
#endif

}  // namespace

void bind_draft(nb::module_& m) {
  using nb::arg;
  m.def("topk_tree", &topk, arg("drafter"), arg("root_token"), arg("k"), arg("depth"), arg("vocab_size"),
        arg("max_nodes"));
  m.def("beam_tree", &beam, arg("drafter"), arg("root_token"), arg("k"), arg("width"), arg("depth"), arg("budget"),
        arg("vocab_size"), arg("max_nodes"));
  m.def("sampled_tree", &sampled, arg("drafter"), arg("root_token"), arg("mode"), arg("widths"), arg("vocab_size"),
        arg("max_nodes"), arg("seed"), arg("request"), arg("round"), arg("uniforms").none());
  m.def("static_tree", &static_shape, arg("drafter"), arg("root_token"), arg("shape"), arg("mode"), arg("vocab_size"),
        arg("seed"), arg("request"), arg("round"), arg("uniforms").none());
  m.def("prune_batch", &prune_many, arg("parent"), arg("scores"), arg("offsets"), arg("budgets"),
        arg("new_index").noconvert(), arg("kept").noconvert(), arg("request_status").noconvert());
  m.def("prune_to_budget", &prune, arg("parent"), arg("scores"), arg("budget"), arg("new_index").noconvert());
#if defined(SPECDEC_PYTHON_HAS_CUDA)
  m.def("cuda_prune_batch_workspace_size", &prune_ws_size, arg("num_requests"), arg("total_nodes"),
        arg("upload_offsets"));
  m.def("cuda_prune_batch", &cuda_prune_batch, arg("parent"), arg("score"), arg("offsets"), arg("budgets").none(),
        arg("uniform_budget"), arg("new_index").noconvert(), arg("kept").noconvert(), arg("request_status").noconvert(),
        arg("workspace").noconvert().none(), arg("stream"));
#endif
}

}  // namespace specdec::python
