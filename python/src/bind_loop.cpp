// The round planner (loop/planner.hpp) for engines with their own loop in
// Python: next() gives the shape to draft (plan_drafted() sizes a
// deterministic draft made first), observe() takes the round's times
// and accepted path, and the estimates can be read back.
#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include "common.hpp"
#include "specdec/draft/drafter.hpp"
#include "specdec/loop/planner.hpp"
#include "specdec/tree/validate.hpp"

namespace specdec::python {
namespace {

// A plan as Python receives it: (shape, thresholds, kind, nodes, depth, expected tokens, predicted seconds).
auto plan_tuple(const round_plan& r) {
  const plan_summary& s = r.summary;
  return std::make_tuple(std::vector<node_id>(r.shape.begin(), r.shape.end()),
                         std::vector<double>(r.min_path_probability.begin(), r.min_path_probability.end()),
                         std::string(plan_kind_name(s.kind)), s.nodes, s.depth, s.expected_tokens, s.predicted_seconds);
}

// Python drafts are deterministic: the caller's model-free candidates
// (tokens: one per node, or null for zeros).
drafted_tree deterministic_draft(const in1<node_id>& parent, const in1<float>& draft_prob, const token_id* tokens) {
  require(parent.size() >= 1 && parent.size() == draft_prob.size(), status_code::size_mismatch,
          "parent and draft_prob need one entry per node, root included");
  check(validate_topological_parents(parent.data(), static_cast<std::int32_t>(parent.size())));
  drafted_tree d;
  d.reset(tokens != nullptr ? tokens[0] : 0);
  for (std::size_t i = 1; i < parent.size(); ++i)
    d.add(parent.data()[i], tokens != nullptr ? tokens[i] : 0, draft_prob.data()[i], 0.0f, draft_mode::deterministic);
  return d;
}

}  // namespace

void bind_loop(nb::module_& m) {
  using nb::arg;
  nb::class_<round_planner>(m, "RoundPlanner")
      .def(
          "__init__",
          [](round_planner* p, std::int32_t max_nodes, std::int32_t max_depth, std::int32_t max_children, double forget,
             double prior_weight, double prior_accept, std::int32_t replan_every, std::int32_t cost_window,
             double cost_quantile, double explore, double prior_node_cost, std::int32_t probe_every,
             double probe_budget, std::int32_t rescore_every, bool prune, std::int32_t plain_first, double min_gain,
             double draft_bonus, bool expected_acceptance, bool confidence_stop, std::int32_t stop_extend) {
            new (p) round_planner();
            check(p->reset(planner_options{.max_nodes = max_nodes,
                                           .max_depth = max_depth,
                                           .max_children = max_children,
                                           .forget = forget,
                                           .prior_weight = prior_weight,
                                           .prior_accept = prior_accept,
                                           .replan_every = replan_every,
                                           .cost_window = cost_window,
                                           .cost_quantile = cost_quantile,
                                           .explore = explore,
                                           .prior_node_cost = prior_node_cost,
                                           .probe_every = probe_every,
                                           .probe_budget = probe_budget,
                                           .rescore_every = rescore_every,
                                           .prune = prune,
                                           .confidence_stop = confidence_stop,
                                           .stop_extend = stop_extend,
                                           .plain_first = plain_first,
                                           .min_gain = min_gain,
                                           .draft_bonus = draft_bonus,
                                           .expected_acceptance = expected_acceptance}));
          },
          arg("max_nodes") = 32, arg("max_depth") = 8, arg("max_children") = 4, arg("forget") = 0.97,
          arg("prior_weight") = 2.0, arg("prior_accept") = 0.5, arg("replan_every") = 32, arg("cost_window") = 8,
          arg("cost_quantile") = 0.5, arg("explore") = 0.05, arg("prior_node_cost") = 0.25, arg("probe_every") = 64,
          arg("probe_budget") = 0.01, arg("rescore_every") = 4, arg("prune") = false, arg("plain_first") = 6,
          arg("min_gain") = 0.0, arg("draft_bonus") = 0.5, arg("expected_acceptance") = true,
          arg("confidence_stop") = true, arg("stop_extend") = 2)
      .def("next", [](round_planner& p) { return plan_tuple(p.next()); })
      .def("start_draft", &round_planner::start_draft, arg("sampled") = false)
      .def("keep_child", &round_planner::keep_child, arg("parent"), arg("depth"), arg("q"))
      .def("note_child", &round_planner::note_child, arg("parent"), arg("depth"), arg("q"))
      .def("expand_node", &round_planner::expand_node, arg("node"), arg("depth"), arg("q"))
      .def(
          "plan_drafted",
          [](round_planner& p, const in1<node_id>& parent, const in1<float>& draft_prob) {
            const drafted_tree d = deterministic_draft(parent, draft_prob, nullptr);
            round_plan r;
            check(p.plan_drafted(d, r));
            return plan_tuple(r);
          },
          arg("parent"), arg("draft_prob"))
      .def(
          "observe_skipped",
          [](round_planner& p, const in1<node_id>& parent, const in1<float>& draft_prob, const in1<token_id>& tokens,
             token_id emitted) {
            require(tokens.size() == parent.size(), status_code::size_mismatch, "tokens needs one entry per node");
            check(p.observe_skipped(deterministic_draft(parent, draft_prob, tokens.data()), emitted));
          },
          arg("parent"), arg("draft_prob"), arg("tokens"), arg("emitted"))
      .def(
          "observe",
          [](round_planner& p, const in1<node_id>& parent, const in1<node_id>& path, std::int32_t forward_nodes,
             double forward_seconds, std::int32_t drafter_calls, std::int32_t drafted_nodes, double drafter_seconds,
             double other_seconds, const std::optional<in1<float>>& draft_prob, std::int64_t tokens_left,
             const std::optional<in1<float>>& accept_prob) {
            round_feedback f;
            f.tree = tree_view{nullptr, parent.data(), nullptr, nullptr, static_cast<std::int32_t>(parent.size())};
            f.path = span_of(path);
            if (draft_prob) {
              require(draft_prob->size() == parent.size(), status_code::size_mismatch,
                      "draft_prob needs one entry per node");
              f.draft_prob = span_of(*draft_prob);
            }
            if (accept_prob) f.accept_prob = span_of(*accept_prob);  // sizes checked by observe()
            f.forward_nodes = forward_nodes;
            f.forward_seconds = forward_seconds;
            f.drafter_calls = drafter_calls;
            f.drafted_nodes = drafted_nodes;
            f.drafter_seconds = drafter_seconds;
            f.other_seconds = other_seconds;
            f.tokens_left = tokens_left;
            check(p.observe(f));
          },
          arg("parent"), arg("path"), arg("forward_nodes"), arg("forward_seconds"), arg("drafter_calls") = 0,
          arg("drafted_nodes") = 0, arg("drafter_seconds") = 0.0, arg("other_seconds") = 0.0,
          arg("draft_prob") = nb::none(), arg("tokens_left") = -1, arg("accept_prob") = nb::none())
      .def(
          "set_target_cost",
          [](round_planner& p, const in1<double>& n, const in1<double>& seconds) {
            check(p.set_target_cost(span_of(n), span_of(seconds)));
          },
          arg("n"), arg("seconds"))
      .def(
          "set_drafter_cost",
          [](round_planner& p, double per_round, double per_level, double per_node) {
            check(p.set_drafter_cost(per_round, per_level, per_node));
          },
          arg("per_round"), arg("per_level"), arg("per_node"))
      .def(
          "set_loop_cost",
          [](round_planner& p, double per_round, double per_node) { check(p.set_loop_cost(per_round, per_node)); },
          arg("per_round"), arg("per_node"))
      .def(
          "fix_plan", [](round_planner& p, const in1<node_id>& shape) { check(p.fix_plan(span_of(shape))); },
          arg("shape"))
      .def("target_seconds", &round_planner::target_seconds, arg("n"))
      .def("drafter_seconds", &round_planner::drafter_seconds, arg("levels"), arg("nodes"), arg("tokens") = 1.0)
      .def("loop_seconds", &round_planner::loop_seconds, arg("n"))
      .def("acceptance", &round_planner::acceptance, arg("depth"), arg("rank"))
      .def_prop_ro("rounds", &round_planner::rounds);
}

}  // namespace specdec::python
