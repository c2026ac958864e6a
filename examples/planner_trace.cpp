// One planned request on the demo's models, round by round: the shape the
// round planner chose, what it predicted, what the round took, and the
// planner's estimates once it has observed the round; then each kind of
// round priced against the request's own plain steps (as model_demo prints
// for its planned rows). The instrument for questions that a table of
// speedups cannot answer: why a request went plain, what its opening cost.
//
// Usage: planner_trace [transformer|hybrid] [temperature] [prompt 0-5]
//                      [tokens] [seed] [fixed chain length 0-8, -1 or warm]
//                      [auto|f32|bf16: the matrix products, auto as the demo]
// Prompts 0-3 are the demo's, 4-5 two it does not decode. A fixed chain
// length holds the planner to that shape every round (0: plain steps through
// the session); without one (or -1) the planner chooses; `warm` traces a
// planner carried from the untimed request before (the demo's warm rows). Before the traced
// request, the same request decoded autoregressively (untimed, then timed)
// gives the plain-decoding reference, and an untimed planned one fills the
// caches and buffers every request reuses (a new planner traces). Exits
// non-zero if a temperature-0 trace is not token-identical to
// autoregressive greedy decoding.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "models/prompts.hpp"
#include "models/speculate.hpp"

int main(int argc, char** argv) {
  const std::string model = argc > 1 ? argv[1] : "hybrid";
  const float temperature = argc > 2 ? static_cast<float>(std::atof(argv[2])) : 1.0f;
  const int prompt_index = argc > 3 ? std::atoi(argv[3]) : 0;
  const std::int64_t n_tokens = argc > 4 ? std::atoll(argv[4]) : 160;
  const std::uint64_t seed = argc > 5 ? std::strtoull(argv[5], nullptr, 10) : 7;
  const bool warm = argc > 6 && std::string(argv[6]) == "warm";
  const int fixed_chain = argc > 6 && !warm ? std::atoi(argv[6]) : -1;  // -1: the planner chooses
  models::kernel::precision prec = models::kernel::precision::f32;
  if ((model != "hybrid" && model != "transformer") || !(temperature >= 0.0f) || prompt_index < 0 || prompt_index > 5 ||
      n_tokens < 1 || fixed_chain < -1 || fixed_chain > 8 ||
      !models::kernel::parse_precision(argc > 7 ? argv[7] : "auto", prec)) {
    std::fprintf(stderr,
                 "usage: planner_trace [transformer|hybrid] [temperature] [prompt 0-5] [tokens] [seed] "
                 "[fixed chain length 0-8, -1 or warm] [auto|f32|bf16]\n");
    return 2;
  }
  const std::string dir = SPECDEC_MODELS_DIR;
  const bool hybrid = model == "hybrid";
  const models::weights target = models::load(dir + (hybrid ? "/hybrid.gguf" : "/target.gguf"), prec);
  const models::weights draft = models::load(dir + (hybrid ? "/hybrid_drafter.gguf" : "/drafter.gguf"), prec);
  const std::string_view text = prompt_index < 4 ? models::demo_prompts[static_cast<std::size_t>(prompt_index)]
                                                 : models::extra_prompts[static_cast<std::size_t>(prompt_index - 4)];
  const std::vector<models::token_id> prompt(text.begin(), text.end());

  models::kept_buffers kept;  // as in model_demo: caches kept between requests
  models::spec_options o;
  o.temperature = temperature;
  o.seed = seed;
  o.kept = &kept;
  models::decode_stats ar;
  models::generate_autoregressive(target, prompt, n_tokens, o, ar);  // untimed: warms the caches
  ar = {};
  const auto reference = models::generate_autoregressive(target, prompt, n_tokens, o, ar);
  std::printf("planner_trace: %s, T=%g, prompt %d, %lld tokens, seed %llu%s, %s products\n", model.c_str(),
              static_cast<double>(temperature), prompt_index, static_cast<long long>(n_tokens),
              static_cast<unsigned long long>(seed),
              fixed_chain >= 0 ? ", fixed plan"
              : warm           ? ", warm planner"
                               : "",
              models::kernel::precision_name(prec));
  std::printf("autoregressive: %.1f us per token (CPU time, prefill included)\n\n",
              1e6 * ar.seconds / static_cast<double>(ar.tokens));
  std::printf(
      "round  plan     tokens (planned)   us (planned)  draft forward  | after the round: t(1) us  t(2)/t(1)  "
      "a(1)  a(2)\n");

  o.kind = models::tree_kind::planned;
  if (fixed_chain >= 0) {
    o.fixed_plan = {-1};
    for (int d = 0; d < fixed_chain; ++d) o.fixed_plan.push_back(d);
  }
  specdec::round_planner carried;
  if (warm) o.carry = &carried;
  models::decode_stats untimed;  // allocates the drafter's buffers, as the demo's earlier requests have
  (void)models::generate_speculative(target, draft, prompt, n_tokens, o, untimed);
  int round = 0;
  o.on_plan = [&](const specdec::round_stats& r, specdec::round_planner& p) {
    const specdec::stage_times& t = r.time;
    const double seconds = t.draft + t.flatten + t.forward + t.probs + t.verify + t.commit;
    const double t1 = p.target_seconds(1);  // the prior's unit until a plain step is timed
    std::printf("%5d  %-8s %2d (%5.2f)  %8.0f (%6.0f)  %5.0f %7.0f  | %17.0f  %9.2f  %4.2f  %4.2f\n", round++,
                models::shape_name({r.plan.nodes <= 1                  ? 0
                                    : r.plan.nodes == r.plan.depth + 1 ? 1
                                                                       : 2,
                                    r.plan.nodes, r.plan.depth})
                    .c_str(),
                r.emitted, r.plan.expected_tokens, 1e6 * seconds, 1e6 * r.plan.predicted_seconds, 1e6 * t.draft,
                1e6 * t.forward, 1e6 * t1, p.target_seconds(2) / t1, p.acceptance(1, 0), p.acceptance(2, 0));
  };
  models::decode_stats st;
  const auto out = models::generate_speculative(target, draft, prompt, n_tokens, o, st);
  std::printf("\nplanned: %.1f us per token (CPU time, prefill included), %.3fx autoregressive\n",
              1e6 * st.seconds / static_cast<double>(st.tokens), ar.seconds / st.seconds);
  std::printf("%s\n%s", st.planner_estimates.c_str(), models::describe_round_classes(st).c_str());
  if (temperature == 0.0f && out != reference) {
    std::printf("NOT token-identical to autoregressive greedy decoding\n");
    return 1;
  }
  return 0;
}
