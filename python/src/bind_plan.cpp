// Planning models (include/specdec/plan): Sequoia's tree DP, the STree
// cost model fits and tree-size choice, acceptance estimation
// (plan/acceptance.hpp) and SpecMemo's memory budgeting
// (plan/memory_model.hpp).
#include <cstdint>
#include <tuple>
#include <vector>

#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include "common.hpp"
#include "specdec/plan/acceptance.hpp"
#include "specdec/plan/cost_model.hpp"
#include "specdec/plan/memory_model.hpp"
#include "specdec/plan/sequoia.hpp"

namespace specdec::python {
namespace {

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

acceptance_model model_of(const in_nd<double, 2>& probs) {
  acceptance_model m;
  m.depths = static_cast<std::int32_t>(probs.shape(0));
  m.ranks = static_cast<std::int32_t>(probs.shape(1));
  m.p.resize(probs.shape(0) * probs.shape(1));
  for (std::size_t d = 0; d < probs.shape(0); ++d)
    for (std::size_t r = 0; r < probs.shape(1); ++r)
      m.p[d * probs.shape(1) + r] =
          probs.data()[d * static_cast<std::size_t>(probs.stride(0)) + r * static_cast<std::size_t>(probs.stride(1))];
  return m;
}

double expected_length(const in1<node_id>& parent, const in_nd<double, 2>& probs, const out1<double>& reach) {
  const tree_view t{nullptr, parent.data(), nullptr, nullptr, static_cast<std::int32_t>(parent.size())};
  std::vector<std::int32_t> sc(2 * parent.size());
  double out = 0;
  check(expected_accepted_length(t, model_of(probs), span_of(reach), sc, out));
  return out;
}

void bind_acceptance_counts(nb::module_& m) {
  using nb::arg;
  nb::class_<acceptance_counts>(m, "AcceptanceCounts")
      .def(nb::init<std::int32_t, std::int32_t>(), arg("depths"), arg("ranks"))
      .def(
          "record",
          [](acceptance_counts& c, const in1<node_id>& parent, const in1<node_id>& path) {
            const tree_view t{nullptr, parent.data(), nullptr, nullptr, static_cast<std::int32_t>(parent.size())};
            check(c.record(t, span_of(path)));
          },
          arg("parent"), arg("path"))
      .def(
          "estimate",
          [](const acceptance_counts& c, double alpha, double beta) {
            const acceptance_model e = c.estimate(alpha, beta);
            return std::make_tuple(e.depths, e.ranks, e.p);
          },
          arg("alpha") = 0.0, arg("beta") = 0.0)
      .def("positional_estimate", &acceptance_counts::positional_estimate)
      .def_ro("depths", &acceptance_counts::depths)
      .def_ro("ranks", &acceptance_counts::ranks)
      .def_ro("offered", &acceptance_counts::offered)
      .def_ro("accepted", &acceptance_counts::accepted)
      .def_ro("rounds", &acceptance_counts::rounds)
      .def_ro("accepted_tokens", &acceptance_counts::accepted_tokens);
}

void bind_memory(nb::module_& m) {
  using nb::arg;
  nb::class_<memory_config>(m, "MemoryConfig")
      .def(nb::init<>())
      .def_rw("layers", &memory_config::layers)
      .def_rw("batch", &memory_config::batch)
      .def_rw("kv_heads", &memory_config::kv_heads)
      .def_rw("head_dim", &memory_config::head_dim)
      .def_rw("kv_bytes_per_element", &memory_config::kv_bytes_per_element)
      .def_rw("tokens_per_turn", &memory_config::tokens_per_turn)
      .def_rw("vocab_size", &memory_config::vocab_size)
      .def_rw("buffer_bytes_per_element", &memory_config::buffer_bytes_per_element)
      .def_rw("head_bytes", &memory_config::head_bytes)
      .def_rw("model_parameters", &memory_config::model_parameters)
      .def_rw("model_bytes_per_parameter", &memory_config::model_bytes_per_parameter);
  m.def(
      "memory_total_bytes",
      [](const memory_config& c, double turns, double nodes, double leaves, double heads) {
        check(c.validate());
        return total_bytes(c, turns, nodes, leaves, heads);
      },
      arg("config"), arg("turns"), arg("nodes"), arg("leaves"), arg("heads"));
  m.def(
      "plan_memory",
      [](const memory_config& c, double budget, std::int64_t turns, std::int64_t max_heads, std::int64_t min_heads,
         std::int64_t arity, double leaf_fraction, std::int64_t max_nodes) {
        memory_plan_options o;
        o.turns = turns;
        o.max_heads = max_heads;
        o.min_heads = min_heads;
        o.arity = arity;
        o.leaf_fraction = leaf_fraction;
        o.max_nodes = max_nodes;
        memory_plan out;
        check(plan_memory(c, budget, o, out));
        return std::make_tuple(out.heads, out.nodes, out.leaves, out.kv_bytes, out.total);
      },
      arg("config"), arg("budget"), arg("turns"), arg("max_heads"), arg("min_heads"), arg("arity"),
      arg("leaf_fraction"), arg("max_nodes"));
}

}  // namespace

void bind_plan(nb::module_& m) {
  using nb::arg;
  m.def("sequoia_tree", &sequoia, arg("p"), arg("budget"), arg("max_depth"));
  m.def("fit_linear_cost", &fit_linear, arg("n"), arg("t"));
  m.def("fit_quadratic_cost", &fit_quadratic, arg("n"), arg("t"));
  m.def("best_tree_size", &best_size, arg("cost"), arg("tau"), arg("draft_time"));
  m.def("expected_accepted_length", &expected_length, arg("parent"), arg("probs"), arg("reach").noconvert());
  bind_acceptance_counts(m);
  bind_memory(m);
}

}  // namespace specdec::python
