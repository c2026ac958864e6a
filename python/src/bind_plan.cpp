// Drafting and planning: tree builders driven by a Python drafter, prune to
// a node budget, Sequoia's tree DP, and the STree cost model fits and
// tree-size choice.
#include <cstdint>
#include <optional>
#include <tuple>
#include <vector>

#include <nanobind/stl/optional.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include "common.hpp"
#include "specdec/draft/batch_prune.hpp"
#include "specdec/draft/beam_tree.hpp"
#include "specdec/draft/prune.hpp"
#include "specdec/draft/sampled_tree.hpp"
#include "specdec/draft/static_tree.hpp"
#include "specdec/draft/topk_tree.hpp"
#include "specdec/plan/cost_model.hpp"
#include "specdec/plan/sequoia.hpp"

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

std::tuple<std::vector<node_id>, std::vector<std::int32_t>, double> sequoia(const in1<double>& p, std::int32_t budget,
                                                                            std::int32_t max_depth) {
  sequoia_plan plan;
  check(plan.solve(span_of(p), budget, max_depth));
  std::int32_t n = 0;
  const double v = plan.value(budget, &n);
  tree_shape s;
  check(plan.tree(n, s));
  return {s.parent, s.rank, v};
}

std::tuple<double, double> fit_linear(const in1<double>& n, const in1<double>& t) {
  linear_cost c;
  check(fit_linear_cost(span_of(n), span_of(t), c));
  return {c.k, c.C};
}

std::tuple<double, double, double> fit_quadratic(const in1<double>& n, const in1<double>& t) {
  quadratic_cost c;
  check(fit_quadratic_cost(span_of(n), span_of(t), c));
  return {c.a, c.b, c.c};
}

// cost: (k, C) for a linear model or (a, b, c) for a quadratic one.
std::tuple<std::int32_t, double> best_size(const std::vector<double>& cost, const in1<double>& tau, double draft_time) {
  std::int32_t best = 0;
  double tpt = 0.0;
  if (cost.size() == 2)
    check(best_tree_size(linear_cost{cost[0], cost[1]}, span_of(tau), draft_time, best, tpt));
  else if (cost.size() == 3)
    check(best_tree_size(quadratic_cost{cost[0], cost[1], cost[2]}, span_of(tau), draft_time, best, tpt));
  else
    check(make_status(status_code::invalid_argument, "cost needs (k, C) or (a, b, c)"));
  return {best, tpt};
}

// A ragged batch (request r owns nodes offsets[r]..offsets[r+1], local
// parent ids); per-request failures land in request_status.
void prune_many(const in1<node_id>& parent, const in1<float>& scores, const in1<std::int32_t>& offsets,
                const in1<std::int32_t>& budgets, const out1<node_id>& new_index, const out1<std::int32_t>& kept,
                const out1<std::int32_t>& request_status) {
  check(batch_prune_to_budget(span_of(parent), span_of(scores), span_of(offsets), span_of(budgets), span_of(new_index),
                              span_of(kept), span_of(request_status)));
}

}  // namespace

void bind_plan(nb::module_& m) {
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
  m.def("sequoia_tree", &sequoia, arg("p"), arg("budget"), arg("max_depth"));
  m.def("fit_linear_cost", &fit_linear, arg("n"), arg("t"));
  m.def("fit_quadratic_cost", &fit_quadratic, arg("n"), arg("t"));
  m.def("best_tree_size", &best_size, arg("cost"), arg("tau"), arg("draft_time"));
}

}  // namespace specdec::python
