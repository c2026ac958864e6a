// specdec inside llama.cpp: plain decoding against specdec's chain and tree
// speculation on one model, prompt and settings. Prints one table row per
// method: tokens/s, tokens and accepted drafts per target call, target calls
// per token, and at temperature 0 whether the text equals plain greedy
// decoding; where it does not, at which token the texts part and how close
// plain decoding was to a tie there (a batched tree pass and a one-token
// pass do not round alike, see docs/llama_cpp.md).
// Usage: specdec_llama_compare --help
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "speculate.hpp"

namespace {

using namespace specdec_llama;

struct cli {
  std::string model = SPECDEC_LLAMA_MODEL;
  std::string draft_model;        // empty = the target drafts for itself
  std::int32_t draft_layers = 0;  // > 0: draft with the target's first layers (layer_skip_copy)
  std::string prompt;
  std::int32_t n_predict = 128;
  float temperature = 0.0f;
  std::uint64_t seed = 1;
  std::int32_t threads = 2;
  std::int32_t depth = 6;
  bool show_text = false;
  bool repack = false;           // llama.cpp weight repacking (extra buffer types); off = safe on AMX Xeons
  bool curve = true;             // print the pass cost curve t(n) / t(1)
  std::string methods = "all";   // besides plain decoding: ",lookup,suffix,...," or all
  std::int32_t probe_every = 0;  // planner_options::probe_every of the planned methods
  // planner_options::min_gain of the planned methods: rounds predicted to
  // beat a plain step by under 10% realized 0.91-1.02x of it (docs/llama_cpp.md)
  double min_gain = 0.1;
  std::string plain_out;    // file for the plain decoding text
  std::string format;       // non-empty: decode with a copy of the model in this weight format
  bool ignore_eos = false;  // generate n_predict tokens past end-of-generation tokens
  std::string warm;         // --warm: a prompt the warm planned methods' planners decode first, untimed
};

[[noreturn]] void usage(int code) {
  std::fprintf(
      code == 0 ? stdout : stderr,
      "usage: specdec_llama_compare [-m MODEL.gguf] [-md DRAFT.gguf] (-p PROMPT | -f FILE) [-n N]\n"
      "                             [--temp T] [--seed S] [-t THREADS] [--depth D] [--show-text]\n"
      "                             [--plain-out FILE] [--repack 0|1] [--no-curve] [--format F] [--ignore-eos]\n"
      "  -m      target model (default: the cached SmolLM2-135M-Instruct.Q4_1.gguf)\n"
      "  -md     draft model for the model drafter (default: the target itself)\n"
      "  --draft-layers K  draft with the target's first K blocks and its head (a copy made next to it; not with -md)\n"
      "  --depth draft depth of every speculative method (default 6)\n"
      "  --plain-out  write the plain decoding text to FILE\n"
      "  --repack     llama.cpp weight repacking / extra buffer types (default 0: off, as run.sh's -nr)\n"
      "  --no-curve   skip the pass cost curve (time of a pass over 1, 2, 4, ... tokens)\n"
      "  --ignore-eos generate -n tokens whatever the model emits (at T > 0 every method then decodes as\n"
      "               many tokens; otherwise each stops at its own sample's end-of-generation token)\n"
      "  --format     F32, F16, Q8_0 or Q4_0: a copy of the model in that weight format, made next to it\n"
      "               by llama.cpp's quantizer on first use (<name>.<F>.gguf; its path is printed)\n"
      "  --probe-every  planner: one speculative round after this many plain steps (default 0: none)\n"
      "  --min-gain   planner: a speculative round must promise this much more than a plain step (default 0.1)\n"
      "  --warm FILE  also run the planned methods warm (planned-lookup-warm, planned-suffix-warm): their\n"
      "               planner first decodes FILE's prompt, untimed, as an engine's planner after a request\n"
      "  --methods    comma list of lookup,suffix,planned-lookup,planned-suffix,planned-lookup-warm,\n"
      "               planned-suffix-warm,plain-again (plain decoding once more, after them),chain,tree\n"
      "               (default all); only when listed, at temperature 0: oracle-lookup, oracle-suffix (the\n"
      "               planned methods' drafts cut each round to the path the target accepts, found by a\n"
      "               pass that is not counted: a bound on what planning these drafts can reach)\n");
  std::exit(code);
}

bool listed(const cli& c, const char* m) { return c.methods.find("," + std::string(m) + ",") != std::string::npos; }
bool wants(const cli& c, const char* m) { return c.methods == "all" || listed(c, m); }

cli parse(int argc, char** argv) {
  cli c;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) usage(2);
      return argv[++i];
    };
    if (a == "-m")
      c.model = val();
    else if (a == "-md")
      c.draft_model = val();
    else if (a == "-p")
      c.prompt = val();
    else if (a == "-f" || a == "--warm") {
      std::ifstream in(val());
      if (!in) usage(2);
      std::stringstream ss;
      ss << in.rdbuf();
      (a == "-f" ? c.prompt : c.warm) = ss.str();
    } else if (a == "-n")
      c.n_predict = std::atoi(val().c_str());
    else if (a == "--temp")
      c.temperature = std::strtof(val().c_str(), nullptr);
    else if (a == "--seed")
      c.seed = std::strtoull(val().c_str(), nullptr, 10);
    else if (a == "-t")
      c.threads = std::atoi(val().c_str());
    else if (a == "--depth")
      c.depth = std::atoi(val().c_str());
    else if (a == "--show-text")
      c.show_text = true;
    else if (a == "--plain-out")
      c.plain_out = val();
    else if (a == "--repack")
      c.repack = std::atoi(val().c_str()) != 0;
    else if (a == "--draft-layers") {
      c.draft_layers = std::atoi(val().c_str());
      if (c.draft_layers < 1) usage(2);
    } else if (a == "--format")
      c.format = val();
    else if (a == "--no-curve")
      c.curve = false;
    else if (a == "--ignore-eos")
      c.ignore_eos = true;
    else if (a == "--probe-every")
      c.probe_every = std::atoi(val().c_str());
    else if (a == "--min-gain")
      c.min_gain = std::atof(val().c_str());
    else if (a == "--methods")
      c.methods = "," + val() + ",";
    else if (a == "-h" || a == "--help")
      usage(0);
    else
      usage(2);
  }
  if (c.prompt.empty() || c.n_predict <= 0 || c.depth <= 0 || c.threads <= 0 || !(c.temperature >= 0.0f)) usage(2);
  if (c.draft_layers > 0 && !c.draft_model.empty()) usage(2);  // -md or --draft-layers, not both
  return c;
}

void quiet_log(ggml_log_level level, const char* text, void*) {
  if (level == GGML_LOG_LEVEL_ERROR) std::fputs(text, stderr);
}

}  // namespace

int main(int argc, char** argv) {
  const cli c = parse(argc, argv);
  llama_log_set(quiet_log, nullptr);
  llama_backend_init();
  int rc = 0;
  try {
    const model_options mo{c.repack};
    const std::string model_path = c.format.empty() ? c.model : model_copy(c.model, c.format);
    if (!c.format.empty()) std::printf("model copy (%s): %s\n", c.format.c_str(), model_path.c_str());
    const model target(model_path, mo);
    const model* draft_model = &target;
    std::unique_ptr<model> owned_draft;
    const std::string draft_path = c.draft_layers > 0 ? layer_skip_copy(model_path, c.draft_layers) : c.draft_model;
    if (c.draft_layers > 0) std::printf("draft model (first %d blocks): %s\n", c.draft_layers, draft_path.c_str());
    if (!draft_path.empty()) {
      owned_draft = std::make_unique<model>(draft_path, mo);
      draft_model = owned_draft.get();
    }
    const std::vector<llama_token> prompt = target.tokenize(c.prompt);
    const std::vector<llama_token> warm = c.warm.empty() ? std::vector<llama_token>{} : target.tokenize(c.warm);
    const std::size_t longest = std::max(prompt.size(), warm.size());
    // Largest tree of any method: the model-free drafters' budget and the
    // self-draft tree 2x2 (2 + 4 (depth - 1) nodes + root).
    const std::int32_t kModelFreeNodes = 16;
    const std::int32_t max_tree = std::max(kModelFreeNodes, 3 + 4 * c.depth);
    context_options co;
    co.threads = c.threads;
    co.n_ctx = context_cells(longest, c.n_predict, max_tree, c.depth);
    co.n_batch = std::max<std::int32_t>({64, max_tree, static_cast<std::int32_t>(longest)});
    tree_target tgt(target, co);
    const gen_options go{c.n_predict, c.temperature, c.seed, !c.ignore_eos};

    std::vector<run_stats> runs;
    runs.push_back(plain_decode(target, tgt, prompt, go));

    // Pass cost curve t(n) on the committed text of plain decoding: printed,
    // and handed to the planner of the planned methods (the planner takes
    // the times the caller reports).
    std::vector<double> curve_n, curve_t;
    if (c.curve) {
      // Sizes interleaved, 9 rounds, median per size: a change of load on a
      // shared machine moves every size alike.
      const std::vector<std::int32_t> sizes{1, 2, 3, 4, 6, 8, 12, 16, 24, 32};
      std::vector<std::vector<double>> times(sizes.size());
      for (int rep = 0; rep < 9; ++rep)
        for (std::size_t i = 0; i < sizes.size(); ++i) times[i].push_back(tgt.time_pass(sizes[i], 1));
      std::printf("\npass cost t(n) / t(1), median of 9 interleaved (target, after the prompt):");
      for (std::size_t i = 0; i < sizes.size(); ++i) {
        std::sort(times[i].begin(), times[i].end());
        curve_n.push_back(sizes[i]);
        curve_t.push_back(times[i][times[i].size() / 2]);
        std::printf(" %d: %.2f", sizes[i], curve_t.back() / curve_t.front());
      }
      std::printf("  (t(1) = %.2f ms)\n", curve_t.front() * 1e3);
    }
    const auto planned = [&](std::int32_t max_nodes) {
      specdec::planner_options po;
      po.max_nodes = max_nodes;
      po.max_depth = c.depth;
      // plan_drafted needs no probes: speculate() reports every plain step's
      // skipped draft (observe_skipped), which keeps its calibration learning.
      po.probe_every = c.probe_every;
      po.min_gain = c.min_gain;
      po.draft_bonus = 0.0;  // speculate() reports the drafts it skipped (observe_skipped): no optimism needed
      auto p = std::make_unique<specdec::round_planner>(po);
      if (!curve_n.empty()) check(p->set_target_cost(curve_n, curve_t), "set_target_cost");
      return p;
    };

    lookup_drafter lookup{specdec::prompt_lookup_builder(
        {.max_ngram = 4, .max_depth = c.depth, .max_nodes = kModelFreeNodes, .min_prob = 0.25f})};
    if (wants(c, "lookup"))
      runs.push_back(speculate(
          "specdec prompt lookup tree", target, tgt,
          [&](std::span<const llama_token> ctx, draft_output& d) { lookup.draft(ctx, d); }, nullptr, prompt, go));
    suffix_drafter suffix{
        specdec::suffix_index({.depth = 32, .capacity = 1 << 18}),
        specdec::suffix_tree_builder(
            {.max_pattern = 8, .max_depth = c.depth, .max_nodes = kModelFreeNodes, .min_prob = 0.25f})};
    suffix.start();
    if (wants(c, "suffix"))
      runs.push_back(speculate(
          "specdec suffix tree", target, tgt,
          [&](std::span<const llama_token> ctx, draft_output& d) { suffix.draft(ctx, d); }, nullptr, prompt, go));

    {
      lookup_drafter pl{
          specdec::prompt_lookup_builder({.max_ngram = 4, .max_depth = c.depth, .max_nodes = kModelFreeNodes})};
      std::optional<suffix_drafter> ps;
      const auto fresh_suffix = [&] {
        ps.emplace(
            specdec::suffix_index({.depth = 32, .capacity = 1 << 18}),
            specdec::suffix_tree_builder({.max_pattern = 8, .max_depth = c.depth, .max_nodes = kModelFreeNodes}));
        ps->start();
      };
      const auto draft_lookup = [&](std::span<const llama_token> ctx, draft_output& d) { pl.draft(ctx, d); };
      const auto draft_suffix = [&](std::span<const llama_token> ctx, draft_output& d) { ps->draft(ctx, d); };
      // Cold: a fresh planner per method. Warm: the planner first decodes
      // the --warm prompt (untimed), then begin_request(), as an engine's
      // planner meets its next request: the pass times and the calibration
      // of the drafts' confidences carry over, the text does not (the
      // suffix index starts empty again).
      for (const bool is_warm : {false, true}) {
        if (is_warm && warm.empty()) break;
        const std::string tail = is_warm ? ", warm" : "";
        if (wants(c, is_warm ? "planned-lookup-warm" : "planned-lookup")) {
          auto planner = planned(kModelFreeNodes);
          if (is_warm) {
            (void)speculate("warm-up", target, tgt, draft_lookup, nullptr, warm, go, planner.get());
            planner->begin_request();
          }
          runs.push_back(speculate("specdec planned prompt lookup" + tail, target, tgt, draft_lookup, nullptr, prompt,
                                   go, planner.get()));
        }
        if (wants(c, is_warm ? "planned-suffix-warm" : "planned-suffix")) {
          auto planner = planned(kModelFreeNodes);
          fresh_suffix();
          if (is_warm) {
            (void)speculate("warm-up", target, tgt, draft_suffix, nullptr, warm, go, planner.get());
            planner->begin_request();
            fresh_suffix();
          }
          runs.push_back(speculate("specdec planned suffix tree" + tail, target, tgt, draft_suffix, nullptr, prompt, go,
                                   planner.get()));
        }
      }
      // The bound of the planned methods: the same drafts, each round cut
      // to the path the target accepts (speculate's oracle_cut).
      if (c.temperature == 0.0f) {
        if (listed(c, "oracle-lookup"))
          runs.push_back(speculate("oracle-cut prompt lookup (bound)", target, tgt, draft_lookup, nullptr, prompt, go,
                                   nullptr, true));
        if (listed(c, "oracle-suffix")) {
          fresh_suffix();
          runs.push_back(speculate("oracle-cut suffix tree (bound)", target, tgt, draft_suffix, nullptr, prompt, go,
                                   nullptr, true));
        }
      }
    }

    // Plain decoding again, after the model-free methods: the harness takes
    // the machine's speed around them as the geometric mean of both plain
    // runs, so a drift within the process no longer reads as a method's
    // cost, and this row's ratio to the first is that drift.
    if (wants(c, "plain-again")) {
      runs.push_back(plain_decode(target, tgt, prompt, go));
      runs.back().name = "plain decoding, again";
    }

    const std::string who = owned_draft ? "draft model" : "self-draft";
    std::vector<std::int32_t> chain_w(static_cast<std::size_t>(c.depth), 1);
    std::vector<std::int32_t> tree_w = chain_w;
    tree_w[0] = 2;  // two candidates at the first two levels, then chains: 2 + 4 (depth - 1) nodes
    if (tree_w.size() > 1) tree_w[1] = 2;
    for (const auto& [label, widths] : {std::pair{who + " chain", chain_w}, std::pair{who + " tree 2x2", tree_w}}) {
      if (!wants(c, label.ends_with("chain") ? "chain" : "tree")) continue;
      level_drafter md(*draft_model, co, widths, c.temperature, c.seed);
      md.start();
      runs.push_back(speculate(
          "specdec " + label, target, tgt, [&](std::span<const llama_token> ctx, draft_output& d) { md.draft(ctx, d); },
          &md.ctx(), prompt, go));
    }

    std::printf("\nmodel %s, prompt %zu tokens, n_predict %d, temperature %g, threads %d, flash_attn off, repack %s\n",
                model_path.c_str(), prompt.size(), c.n_predict, static_cast<double>(c.temperature), c.threads,
                c.repack ? "on" : "off");
    std::printf(
        "| method | tokens | tokens/s | target calls | tokens/target call | accepted/target call | "
        "target calls/token | tree nodes/call | draft calls | plain steps | us/token outside llama_decode | "
        "text == plain greedy |\n");
    std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (const run_stats& r : runs) {
      std::string same = "n/a (T>0)";
      if (c.temperature == 0.0f) same = r.tokens == runs[0].tokens ? "yes" : "NO";
      if (c.temperature == 0.0f && r.tokens != runs[0].tokens) {
        // Where the texts part and how close plain decoding was to a tie there.
        std::size_t k = 0;
        while (k < r.tokens.size() && k < runs[0].tokens.size() && r.tokens[k] == runs[0].tokens[k]) ++k;
        if (k < runs[0].top2_gap.size()) {
          char buf[96];
          std::snprintf(buf, sizeof buf, "NO (from token %zu; plain top-2 logit gap there %.3g)", k,
                        static_cast<double>(runs[0].top2_gap[k]));
          same = buf;
        }
      }
      std::printf("| %s | %zu | %.1f | %lld | %.2f | %.2f | %.3f | %.2f | %lld | %lld | %.1f | %s |\n", r.name.c_str(),
                  r.tokens.size(), r.tokens_per_second(), static_cast<long long>(r.target_calls), r.tokens_per_call(),
                  r.accepted_per_call(), r.calls_per_token(),
                  r.target_calls ? static_cast<double>(r.target_tokens) / static_cast<double>(r.target_calls) : 0.0,
                  static_cast<long long>(r.draft_calls), static_cast<long long>(r.plain_rounds),
                  r.tokens.empty() ? 0.0 : 1e6 * (r.seconds - r.decode_seconds) / static_cast<double>(r.tokens.size()),
                  same.c_str());
    }
    if (!c.plain_out.empty()) {
      std::ofstream out(c.plain_out, std::ios::binary);
      out << target.detokenize(runs[0].tokens);
    }
    if (c.show_text)
      for (const run_stats& r : runs)
        std::printf("\n--- %s ---\n%s\n", r.name.c_str(), target.detokenize(r.tokens).c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "specdec_llama_compare: %s\n", e.what());
    rc = 2;
  }
  llama_backend_free();
  return rc;
}
