// Paired A/B runs of round-planner options on the demo's models: a sharper
// instrument than the demo's table for differences of a few percent.
//
// For each target (transformer, hybrid) and temperature (0, 1), every repeat
// decodes six prompts (the demo's four and two it does not use), each first
// autoregressively, then every row in a fresh random order: the fixed
// chains of 1, 4 and 2 drafts, plain steps through the session (the planner
// fixed to root-only rounds: what the session and planner cost a request
// decoded plainly), the chain of 1 draft through the planner fixed to it
// ("fixed 1": what the planned path costs without planning), and for each
// option set the planner cold (a new planner per prompt), warm (carried
// from prompt to prompt after an untimed request) and cutting prompt-lookup
// drafts. Option set 0 is the defaults, set 1 the defaults again (a null
// control: its ratios to set 0 show what noise alone reads), then the sets
// given on the command line, each a comma list of planner_options fields:
// "explore=0,plain_first=2" (and drafter_window, the example drafter's
// catch-up bound; fresh_buffers=1,
// rows that allocate their models' caches per request instead of keeping
// them between requests as every other row does).
//
// Prints each row's median speedup over the autoregressive run before it
// (as the demo does), over all runs and per prompt, each planned row's
// median ratio to the best fixed chain in the same prompt and repeat (the
// measure the planner is held to): of the chains of 1 and 4 drafts, as
// results files before 2026-12-01 read it, then of all three where the
// chain of 2 is faster still, and for every set the
// median over runs of the ratio of its tokens per CPU second to set 0's in
// the same prompt and repeat, with how many of those ratios are above 1.
// Exits non-zero if a temperature-0 run is not token-identical to
// autoregressive greedy decoding.
// The matrix products are the demo's (bf16 where the build has AVX512-BF16,
// else f32) unless the third argument names them (auto, f32 or bf16).
// Usage: planner_ab [repeats=10] [seed=1] [auto|f32|bf16] [option set ...]
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "models/prompts.hpp"
#include "models/speculate.hpp"

namespace {

// An option set: planner fields, the drafter's window, and whether the rows
// allocate their models' caches per request instead of keeping them.
struct options {
  models::spec_options spec;
  bool fresh_buffers = false;
};
auto as_int(double x) { return static_cast<std::int32_t>(x); }

// The fields an option set may name: planner_options', and the drafter's window.
struct field {
  const char* name;
  void (*set)(options&, double);
};
const field fields[] = {
    {"max_nodes", [](options& p, double x) { p.spec.planner.max_nodes = as_int(x); }},
    {"max_depth", [](options& p, double x) { p.spec.planner.max_depth = as_int(x); }},
    {"max_children", [](options& p, double x) { p.spec.planner.max_children = as_int(x); }},
    {"forget", [](options& p, double x) { p.spec.planner.forget = x; }},
    {"prior_weight", [](options& p, double x) { p.spec.planner.prior_weight = x; }},
    {"prior_accept", [](options& p, double x) { p.spec.planner.prior_accept = x; }},
    {"replan_every", [](options& p, double x) { p.spec.planner.replan_every = as_int(x); }},
    {"cost_window", [](options& p, double x) { p.spec.planner.cost_window = as_int(x); }},
    {"cost_quantile", [](options& p, double x) { p.spec.planner.cost_quantile = x; }},
    {"explore", [](options& p, double x) { p.spec.planner.explore = x; }},
    {"prior_node_cost", [](options& p, double x) { p.spec.planner.prior_node_cost = x; }},
    {"probe_every", [](options& p, double x) { p.spec.planner.probe_every = as_int(x); }},
    {"probe_budget", [](options& p, double x) { p.spec.planner.probe_budget = x; }},
    {"rescore_every", [](options& p, double x) { p.spec.planner.rescore_every = as_int(x); }},
    {"prune", [](options& p, double x) { p.spec.planner.prune = x != 0.0; }},
    {"confidence_stop", [](options& p, double x) { p.spec.planner.confidence_stop = x != 0.0; }},
    {"stop_extend", [](options& p, double x) { p.spec.planner.stop_extend = as_int(x); }},
    {"plain_first", [](options& p, double x) { p.spec.planner.plain_first = as_int(x); }},
    {"min_gain", [](options& p, double x) { p.spec.planner.min_gain = x; }},
    {"draft_bonus", [](options& p, double x) { p.spec.planner.draft_bonus = x; }},
    {"expected_acceptance", [](options& p, double x) { p.spec.planner.expected_acceptance = x != 0.0; }},
    {"drafter_window", [](options& p, double x) { p.spec.drafter_window = static_cast<std::int64_t>(x); }},
    {"fresh_buffers", [](options& p, double x) { p.fresh_buffers = x != 0.0; }},
};

bool set_option(options& p, const std::string& key, double x) {
  for (const field& f : fields)
    if (key == f.name) {
      f.set(p, x);
      return true;
    }
  return false;
}

// "key=value,key=value" over the demo's planner options (and drafter_window,
// fresh_buffers).
options parse(const std::string& spec) {
  options p;
  for (std::size_t i = 0; i < spec.size();) {
    std::size_t j = spec.find(',', i);
    if (j == std::string::npos) j = spec.size();
    const std::string kv = spec.substr(i, j - i);
    const std::size_t eq = kv.find('=');
    if (eq == std::string::npos || !set_option(p, kv.substr(0, eq), std::atof(kv.c_str() + eq + 1))) {
      std::fprintf(stderr, "planner_ab: not an option: %s\n", kv.c_str());
      std::exit(2);
    }
    i = j + 1;
  }
  specdec::throw_if_error(specdec::validate_planner_options(p.spec.planner));
  return p;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return 0.5 * (v[(v.size() - 1) / 2] + v[v.size() / 2]);
}

}  // namespace

int main(int argc, char** argv) {
  const int repeats = argc > 1 ? std::atoi(argv[1]) : 10;
  const unsigned seed = argc > 2 ? static_cast<unsigned>(std::atoi(argv[2])) : 1u;
  models::kernel::precision prec = models::kernel::precision::f32;
  (void)models::kernel::parse_precision("auto", prec);
  int first_set = 3;
  if (argc > 3 && models::kernel::parse_precision(argv[3], prec)) first_set = 4;
  std::vector<std::string> sets = {"", ""};
  for (int a = first_set; a < argc; ++a) sets.emplace_back(argv[a]);
  std::vector<options> option_sets;
  for (const auto& s : sets) option_sets.push_back(parse(s));

  const std::string dir = SPECDEC_MODELS_DIR;
  const models::weights target = models::load(dir + "/target.gguf", prec);
  const models::weights draft = models::load(dir + "/drafter.gguf", prec);
  const models::weights hybrid = models::load(dir + "/hybrid.gguf", prec);
  const models::weights hybrid_draft = models::load(dir + "/hybrid_drafter.gguf", prec);
  std::vector<std::string> texts(models::demo_prompts.begin(), models::demo_prompts.end());
  texts.insert(texts.end(), models::extra_prompts.begin(), models::extra_prompts.end());  // not in the demo
  const std::vector<models::token_id> warm_prompt(models::warm_prompt_text.begin(), models::warm_prompt_text.end());
  constexpr std::int64_t n_tokens = 160;

  struct row {
    std::string name;
    models::tree_kind kind;
    std::int32_t chain = 4;
    int set = -1;  // option set (planned rows)
    bool warm = false;
    bool plain = false;  // the planner fixed to root-only rounds
    bool fixed = false;  // the planner fixed to the chain of `chain` drafts
  };
  // "plain": the planner fixed to root-only rounds, so every token is a plain
  // step through the session: its ratio to autoregressive decoding is what
  // the session and the planner cost a request they decode plainly.
  std::vector<row> rows = {{"chain 1", models::tree_kind::chain, 1},
                           {"chain 4", models::tree_kind::chain, 4},
                           {"chain 2", models::tree_kind::chain, 2},
                           {"plain", models::tree_kind::planned, 4, -1, false, true},
                           {"fixed 1", models::tree_kind::planned, 1, -1, false, false, true}};
  const std::size_t first_set_row = rows.size();
  for (int s = 0; s < static_cast<int>(sets.size()); ++s) {
    const std::string tag = " #" + std::to_string(s);
    rows.push_back({"cold" + tag, models::tree_kind::planned, 4, s, false});
    rows.push_back({"warm" + tag, models::tree_kind::planned, 4, s, true});
    rows.push_back({"lookup" + tag, models::tree_kind::planned_lookup, 4, s, true});
  }
  struct config {
    const char* name;
    const models::weights* t;
    const models::weights* d;
    float temperature;
  };
  const config configs[] = {{"transformer T=0", &target, &draft, 0.0f},
                            {"transformer T=1", &target, &draft, 1.0f},
                            {"hybrid T=0", &hybrid, &hybrid_draft, 0.0f},
                            {"hybrid T=1", &hybrid, &hybrid_draft, 1.0f}};
  std::printf(
      "planner_ab: %d repeats, order seed %u, %s products; option sets: #0 defaults, #1 defaults again (null control)",
      repeats, seed, models::kernel::precision_name(prec));
  for (std::size_t s = 2; s < sets.size(); ++s) std::printf(", #%zu %s", s, sets[s].c_str());
  std::printf("\n");

  std::mt19937 rng(seed);
  std::map<const models::weights*, models::kept_buffers> kept;  // as model_demo: caches kept between requests
  std::map<std::pair<int, std::size_t>, std::vector<double>> speedup, paired;          // (config, row)
  std::map<std::tuple<int, std::size_t, std::size_t>, std::vector<double>> by_prompt;  // (config, row, prompt)
  bool identical = true;
  for (int rep = 0; rep < repeats; ++rep) {
    for (int c = 0; c < 4; ++c) {
      const config& cf = configs[c];
      const auto options_of = [&](const row& r) {
        const options set = r.set >= 0 ? option_sets[static_cast<std::size_t>(r.set)] : options{};
        models::spec_options o = set.spec;
        if (!set.fresh_buffers) o.kept = &kept[cf.t];
        o.kind = r.kind;
        o.chain_length = r.chain;
        if (r.plain) o.fixed_plan = {-1};
        if (r.fixed)
          for (std::int32_t i = 0; i <= r.chain; ++i) o.fixed_plan.push_back(i - 1);
        o.temperature = cf.temperature;
        o.seed = 7 + static_cast<std::uint64_t>(rep);
        return o;
      };
      std::vector<specdec::round_planner> carried(rows.size());
      for (std::size_t j = 0; j < rows.size(); ++j) {
        if (!rows[j].warm) continue;
        models::spec_options o = options_of(rows[j]);
        o.carry = &carried[j];
        models::decode_stats untimed;
        (void)models::generate_speculative(*cf.t, *cf.d, warm_prompt, n_tokens, o, untimed);
      }
      for (std::size_t k = 0; k < texts.size(); ++k) {
        const std::vector<models::token_id> prompt(texts[k].begin(), texts[k].end());
        models::decode_stats ar;
        const auto reference = models::generate_autoregressive(*cf.t, prompt, n_tokens, options_of(rows[0]), ar);
        const double ar_rate = static_cast<double>(ar.tokens) / ar.seconds;
        std::vector<std::size_t> order(rows.size());
        for (std::size_t j = 0; j < order.size(); ++j) order[j] = j;
        std::shuffle(order.begin(), order.end(), rng);
        std::vector<double> rate(rows.size());
        for (const std::size_t j : order) {
          models::spec_options o = options_of(rows[j]);
          if (rows[j].warm) o.carry = &carried[j];
          models::decode_stats st;
          const auto out = models::generate_speculative(*cf.t, *cf.d, prompt, n_tokens, o, st);
          if (cf.temperature == 0.0f && out != reference) identical = false;
          rate[j] = static_cast<double>(st.tokens) / st.seconds;
          speedup[{c, j}].push_back(rate[j] / ar_rate);
          by_prompt[{c, j, k}].push_back(rate[j] / ar_rate);
        }
        // Set s's row against set 0's row of the same kind (rows first_set_row + 3 s + k).
        for (std::size_t j = first_set_row + 3; j < rows.size(); ++j)
          paired[{c, j}].push_back(rate[j] / rate[first_set_row + (j - first_set_row) % 3]);
      }
    }
    std::fprintf(stderr, "repeat %d/%d\n", rep + 1, repeats);
  }
  for (int c = 0; c < 4; ++c) {
    std::printf("\n%s, speedup over autoregressive (median; then per prompt):\n  %-10s %6s", configs[c].name, "row",
                "all");
    for (std::size_t k = 0; k < texts.size(); ++k) std::printf(" %5s%zu", "p", k + 1);
    for (std::size_t j = 0; j < rows.size(); ++j) {
      std::printf("\n  %-10s %6.3f", rows[j].name.c_str(), median(speedup[{c, j}]));
      for (std::size_t k = 0; k < texts.size(); ++k) std::printf(" %6.3f", median(by_prompt[{c, j, k}]));
    }
    std::printf("\n");
    // Each planned row against the best fixed chain of this configuration
    // (by median), paired by prompt and repeat: of the chains of 1 and 4
    // drafts, then of all three where the chain of 2 is faster still.
    for (const std::size_t chains : {std::size_t{2}, std::size_t{3}}) {
      std::size_t best = 0;
      for (std::size_t j = 1; j < chains; ++j)
        if (median(speedup[{c, j}]) > median(speedup[{c, best}])) best = j;
      if (chains == 3 && best != 2) break;
      std::printf("  against %s (paired medians):", rows[best].name.c_str());
      for (std::size_t j = first_set_row; j < rows.size(); ++j) {
        const std::vector<double>& a = speedup[{c, j}];
        const std::vector<double>& b = speedup[{c, best}];
        std::vector<double> r(a.size());
        for (std::size_t i = 0; i < a.size(); ++i) r[i] = a[i] / b[i];
        std::printf("%s %s %.3f", j == first_set_row ? "" : ",", rows[j].name.c_str(), median(r));
      }
      std::printf("\n");
    }
    for (std::size_t j = first_set_row + 3; j < rows.size(); ++j) {
      const std::vector<double>& v = paired[{c, j}];
      const auto above = std::count_if(v.begin(), v.end(), [](double x) { return x > 1.0; });
      std::printf("  %-10s / %s #0: median %.3f (%lld of %zu above 1)\n", rows[j].name.c_str(),
                  rows[j].name.substr(0, rows[j].name.find(' ')).c_str(), median(v), static_cast<long long>(above),
                  v.size());
    }
  }
  std::printf("\nAll temperature-0 runs token-identical to autoregressive: %s\n", identical ? "yes" : "NO");
  return identical ? 0 : 1;
}
