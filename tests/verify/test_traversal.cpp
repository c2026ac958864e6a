// Block and traversal verification (verify_mode::block, traversal,
// traversal_without_replacement):
// - exact enumeration (traversal_reference.hpp): over every drafted tree of
//   small random models, the output completed by the target has the target
//   law to 1e-12; block == traversal on chains draft by draft; the expected
//   accepted length is never below token-wise verification; the paper's
//   two-token example (10/9 vs 11/9); the wrong rules are biased;
// - the library walk emits the sampling reference's tokens for the same
//   uniforms (V up to 1000, strided rows, chain and tree entry points);
// - whole-sequence chi-square at >= 10^6 generations per mode, several
//   shapes and vocabularies (V = 32 runs the vectorised passes), with
//   negative controls that must fail;
// - bad inputs get their status.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <functional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "exactness_harness.hpp"
#include "specdec/draft/verify_mode.hpp"
#include "specdec/verify/batch_verify.hpp"
#include "specdec/verify/tree_verify.hpp"
#include "traversal_reference.hpp"

using namespace specdec;
using vtest::drafting;

#ifndef SPECDEC_VERIFY_TRIAL_SCALE
#define SPECDEC_VERIFY_TRIAL_SCALE 1
#endif

namespace {

constexpr std::uint64_t verify_seed = 0x7a5e0001ULL;
constexpr std::uint64_t draft_seed = 0xd4af7002ULL;
constexpr std::uint64_t completion_seed = 0xc0de0003ULL;

struct shape {
  const char* name;
  int V;
  std::vector<int> widths;
  drafting how;
};

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double d = 0;
  for (std::size_t i = 0; i < a.size(); ++i) d = std::max(d, std::fabs(a[i] - b[i]));
  return d;
}

double law_diff(const vtest::law& a, const vtest::law& b) {
  double d = 0;
  for (const auto& [k, v] : a) d = std::max(d, std::fabs(v - (b.count(k) ? b.at(k) : 0.0)));
  for (const auto& [k, v] : b) d = std::max(d, a.count(k) ? 0.0 : v);
  return d;
}

bool is_chain(std::span<const int> widths) {
  for (int w : widths)
    if (w != 1) return false;
  return true;
}

// Runs the library on one round tree; returns the emitted tokens.
std::vector<token_id> library_tokens(const vtest::round_tree& rt, verify_mode mode, const verify_params& base,
                                     bool chain, std::int64_t p_stride = 0) {
  const int n = rt.tree.size();
  const auto V = static_cast<std::int64_t>(rt.P.size()) / n;
  std::vector<float> padded;
  view2d<const float> p = make_view(rt.P.data(), n, V).as_const();
  if (p_stride > V) {  // the same rows, padded (exercises the strided passes)
    padded.assign(static_cast<std::size_t>(n * p_stride), -1.0f);
    for (int u = 0; u < n; ++u) std::copy_n(rt.P.begin() + u * V, V, padded.begin() + u * p_stride);
    p = view2d<const float>{padded.data(), {n, V}, {p_stride, 1}};
  }
  const auto q = make_view(rt.Q.data(), n, V).as_const();
  std::vector<std::byte> ws(verify_workspace_size(V, n));
  std::vector<node_id> path(static_cast<std::size_t>(n));
  std::vector<token_id> toks(static_cast<std::size_t>(n));
  verify_params vp = base;
  vp.mode = mode;
  verify_result r;
  const status st = chain ? verify_chain(rt.tree.tokens().subspan(1), p, q, vp, ws, toks, r)
                          : verify_tree(rt.tree.view(), p, q, vp, ws, path, toks, r);
  if (!st.ok()) FAIL("verify failed: " << status_code_name(st.code()) << ": " << st.message());
  return std::vector<token_id>(toks.begin(), toks.begin() + r.accepted + 1);
}

}  // namespace

TEST_CASE("traversal enumeration: the output law is the target law, and acceptance never drops") {
  const shape shapes[] = {
      {"chain 3", 3, {1, 1, 1}, drafting::iid},    {"chain 4", 2, {1, 1, 1, 1}, drafting::iid},
      {"chain 2", 4, {1, 1}, drafting::iid},       {"tree 2x1", 3, {2, 1}, drafting::iid},
      {"tree 2x2", 3, {2, 2}, drafting::iid},      {"tree 3x1", 2, {3, 1}, drafting::iid},
      {"tree 2x1x1", 2, {2, 1, 1}, drafting::iid}, {"wor 2x1", 3, {2, 1}, drafting::gumbel},
      {"wor 3x1", 4, {3, 1}, drafting::gumbel},    {"wor 2x2", 3, {2, 2}, drafting::gumbel},
  };
  for (const auto& sh : shapes) {
    const int L = static_cast<int>(sh.widths.size()) + 1;
    double sum_t = 0, sum_w = 0, worst_err = 0, worst_chain = 0;
    int instances = 0;
    for (std::uint64_t seed = 1; seed <= 20; ++seed) {
      const std::uint64_t model_seed = 1000 * seed + static_cast<std::uint64_t>(sh.V);
      const auto m = vtest::make_model(sh.V, L, model_seed);
      std::vector<double> lt(static_cast<std::size_t>(std::pow(sh.V, L) + 0.5), 0.0);
      double acc_t = 0, acc_w = 0, chain_diff = 0, mass_err = 0;
      vtest::enumerate_drafts(m, sh.widths, sh.how, [&](double pr, const vtest::dtree& t) {
        const auto law = vtest::traversal_law(m, t, sh.how);
        double total = 0;
        for (const auto& kv : law) total += kv.second;
        mass_err = std::max(mass_err, std::fabs(total - 1.0));
        const auto c = vtest::completed(m, law, L);
        for (std::size_t i = 0; i < c.size(); ++i) lt[i] += pr * c[i];
        acc_t += pr * vtest::mean_accepted(law);
        acc_w += pr * vtest::mean_accepted(vtest::tokenwise_law(m, t, sh.how));
        // On a chain, the paper's block rule gives the same law draft by draft.
        if (is_chain(sh.widths)) chain_diff = std::max(chain_diff, law_diff(law, vtest::block_law(m, t)));
      });
      const double err = max_abs_diff(lt, vtest::target_law(m, L));
      INFO(sh.name << ", model seed " << model_seed);
      CHECK(mass_err < 1e-12);
      CHECK(err < 1e-12);
      CHECK(chain_diff < 1e-12);
      CHECK(acc_t >= acc_w - 1e-12);
      worst_err = std::max(worst_err, err);
      worst_chain = std::max(worst_chain, chain_diff);
      sum_t += acc_t;
      sum_w += acc_w;
      ++instances;
    }
    std::printf(
        "[enumeration] %-10s V=%d %-9s: max|law - target| = %.1e, mean accepted %.4f vs token-wise %.4f "
        "(gain %+.4f, %+.2f%%, %d models)%s\n",
        sh.name, sh.V, is_chain(sh.widths) ? "block" : "traversal", worst_err, sum_t / instances, sum_w / instances,
        (sum_t - sum_w) / instances, 100.0 * (sum_t - sum_w) / sum_w, instances,
        is_chain(sh.widths) ? (worst_chain < 1e-12 ? ", block == traversal" : ", block != traversal") : "");
  }
}

TEST_CASE("traversal enumeration: the paper's two-token example (10/9 vs 11/9)") {
  // Sun et al. 2025: p = (1/3, 2/3), q = (2/3, 1/3) at every position, gamma = 2.
  const auto m = vtest::constant_model({1.0f / 3, 2.0f / 3}, {2.0f / 3, 1.0f / 3}, 3);
  const int widths[] = {1, 1};
  double tok = 0, blk = 0, trav = 0;
  std::vector<double> lt(8, 0.0);
  vtest::enumerate_drafts(m, widths, drafting::iid, [&](double pr, const vtest::dtree& t) {
    tok += pr * vtest::mean_accepted(vtest::tokenwise_law(m, t, drafting::iid));
    blk += pr * vtest::mean_accepted(vtest::block_law(m, t));
    const auto law = vtest::traversal_law(m, t, drafting::iid);
    trav += pr * vtest::mean_accepted(law);
    const auto c = vtest::completed(m, law, 3);
    for (std::size_t i = 0; i < c.size(); ++i) lt[i] += pr * c[i];
  });
  std::printf("[enumeration] paper example: token-wise %.9f (10/9 = %.9f), block %.9f, traversal %.9f (11/9 = %.9f)\n",
              tok, 10.0 / 9, blk, trav, 11.0 / 9);
  // The rows are floats, so 1/3 is not exact: compare to 1e-6.
  CHECK(tok == Approx(10.0 / 9).margin(1e-6));
  CHECK(blk == Approx(11.0 / 9).margin(1e-6));
  CHECK(trav == Approx(11.0 / 9).margin(1e-6));
  CHECK(max_abs_diff(lt, vtest::target_law(m, 3)) < 1e-12);
}

TEST_CASE("traversal enumeration: the wrong rules are biased (negative controls)") {
  struct control {
    const char* name;
    shape sh;
    vtest::bugs b;
  };
  vtest::bugs wrong_residual, no_conditioning;
  wrong_residual.residual_ignores_weight = true;
  no_conditioning.no_conditioning = true;
  const control controls[] = {
      {"block rule, residual max(p - q, 0)", {"chain 3", 3, {1, 1, 1}, drafting::iid}, wrong_residual},
      {"traversal, residual max(w p - q, 0)", {"tree 2x2", 3, {2, 2}, drafting::iid}, wrong_residual},
      {"traversal without the 1/rho", {"tree 2x2", 3, {2, 2}, drafting::iid}, no_conditioning},
      {"traversal iid rule on wor drafts", {"wor 3x1", 4, {3, 1}, drafting::gumbel}, vtest::bugs{}},
  };
  for (const auto& c : controls) {
    const int L = static_cast<int>(c.sh.widths.size()) + 1;
    const auto m = vtest::make_model(c.sh.V, L, 4242);
    std::vector<double> lt(static_cast<std::size_t>(std::pow(c.sh.V, L) + 0.5), 0.0);
    const bool wrong_drafting = c.sh.how == drafting::gumbel;
    vtest::enumerate_drafts(m, c.sh.widths, c.sh.how, [&](double pr, const vtest::dtree& t) {
      const auto law = vtest::traversal_law(m, t, wrong_drafting ? drafting::iid : c.sh.how, c.b);
      double total = 0;
      for (const auto& kv : law) total += kv.second;
      const auto cl = vtest::completed(m, law, L);
      for (std::size_t i = 0; i < cl.size(); ++i) lt[i] += pr * cl[i] / total;
    });
    const auto target = vtest::target_law(m, L);
    double tv = 0;
    for (std::size_t i = 0; i < lt.size(); ++i) tv += 0.5 * std::fabs(lt[i] - target[i]);
    std::printf("[enumeration] negative control %-38s %s: TV(whole sequence) = %.4f\n", c.name, c.sh.name, tv);
    INFO(c.name);
    CHECK(tv > 1e-3);
  }
}

namespace {

// A round tree with its own random rows per node (no context model, so V
// can be large): skewed rows with ~25% zeros, every 5th node has q == p;
// children drawn from q_u i.i.d. or without replacement (Gumbel-top-k).
void random_round(int V, std::span<const int> widths, drafting how, std::uint64_t seed, vtest::round_tree& rt) {
  const rng_stream rng{seed, 7, 0};
  rt.tree.clear();
  rt.tree.add_root(0);
  rt.P.clear();
  rt.Q.clear();
  auto fill = [&](std::vector<float>& out, std::uint32_t node, std::uint32_t which) {
    std::vector<double> x(static_cast<std::size_t>(V));
    double s = 0;
    for (int i = 0; i < V; ++i) {
      const float u = rng.uniform(node, which * 4096u + static_cast<std::uint32_t>(2 * i));
      const float z = rng.uniform(node, which * 4096u + static_cast<std::uint32_t>(2 * i + 1));
      x[static_cast<std::size_t>(i)] = z < 0.25f ? 0.0 : 0.05 + static_cast<double>(u) * u * u;
      s += x[static_cast<std::size_t>(i)];
    }
    if (s == 0) x[0] = s = 1.0;
    for (int i = 0; i < V; ++i) out.push_back(static_cast<float>(x[static_cast<std::size_t>(i)] / s));
  };
  for (node_id u = 0; u < rt.tree.size(); ++u) {
    const auto uu = static_cast<std::uint32_t>(u);
    fill(rt.P, uu, 0);
    if (u % 5 == 4)
      rt.Q.insert(rt.Q.end(), rt.P.end() - V, rt.P.end());
    else
      fill(rt.Q, uu, 1);
    const int d = rt.tree.depth(u);
    if (d >= static_cast<int>(widths.size())) continue;
    const int k = widths[static_cast<std::size_t>(d)];
    const float* q = rt.Q.data() + static_cast<std::ptrdiff_t>(u) * V;
    if (how == drafting::iid) {
      for (int j = 0; j < k; ++j)
        rt.tree.add_child(u,
                          sample_row(make_view(q, V), rng.uniform(uu, 1u << 20 | static_cast<std::uint32_t>(j)), 1.0));
    } else {
      rt.keys.clear();
      for (int i = 0; i < V; ++i) {
        if (q[i] <= 0.0f) continue;
        const double un = static_cast<double>(rng.uniform(uu, 1u << 21 | static_cast<std::uint32_t>(i))) + 0x1p-25;
        rt.keys.emplace_back(std::log(static_cast<double>(q[i])) - std::log(-std::log(un)), i);
      }
      std::sort(rt.keys.begin(), rt.keys.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
      for (int j = 0; j < k && j < static_cast<int>(rt.keys.size()); ++j)
        rt.tree.add_child(u, rt.keys[static_cast<std::size_t>(j)].second);
    }
  }
}

}  // namespace

TEST_CASE("traversal: the library walk emits the sampling reference's tokens for the same uniforms") {
  struct cfg {
    int V;
    std::vector<int> widths;
    drafting how;
    verify_mode mode;
    int rounds;
  };
  const cfg cfgs[] = {
      {5, {1, 1, 1}, drafting::iid, verify_mode::block, 3000},
      {5, {2, 2}, drafting::iid, verify_mode::traversal, 3000},
      {40, {1, 1, 1, 1}, drafting::iid, verify_mode::block, 2000},
      {40, {3, 2}, drafting::iid, verify_mode::traversal, 2000},
      {40, {3, 2}, drafting::gumbel, verify_mode::traversal_without_replacement, 2000},
      {1003, {2, 2, 1}, drafting::iid, verify_mode::traversal, 300},
      {1003, {4, 1}, drafting::gumbel, verify_mode::traversal_without_replacement, 300},
      {1003, {1, 1, 1, 1, 1}, drafting::iid, verify_mode::block, 300},
  };
  vtest::round_tree rt;
  for (const auto& c : cfgs) {
    std::int64_t agree = 0, total = 0, accepted = 0;
    for (int r = 0; r < c.rounds; ++r) {
      const auto seed = static_cast<std::uint64_t>(r) * 7919u + static_cast<std::uint64_t>(c.V);
      random_round(c.V, c.widths, c.how, seed, rt);
      verify_params vp;
      vp.seed = verify_seed;
      vp.request = static_cast<std::uint32_t>(r);
      vp.round = 3;
      const auto ref = vtest::traversal_sample(rt, c.V, c.how, rng_stream{vp.seed, vp.request, vp.round});
      const bool chain = c.mode == verify_mode::block;
      const auto lib = library_tokens(rt, c.mode, vp, chain);
      const auto lib_strided = library_tokens(rt, c.mode, vp, false, c.V + 3);
      INFO("V=" << c.V << " mode " << verify_mode_name(c.mode) << " round seed " << seed);
      CHECK(lib == lib_strided);
      agree += lib == ref ? 1 : 0;
      accepted += static_cast<std::int64_t>(lib.size()) - 1;
      ++total;
    }
    std::printf("[reference] V=%-4d %-29s %d rounds: identical tokens in %lld, mean accepted %.3f\n", c.V,
                verify_mode_name(c.mode), c.rounds, static_cast<long long>(agree),
                static_cast<double>(accepted) / static_cast<double>(total));
    // The reference works in double on whole vectors, the library in float
    // residuals with closed-form coefficients: a token may differ only when
    // a uniform lands within rounding of a boundary.
    CHECK(agree == total);
  }
}

namespace {

using emit_fn = std::function<std::vector<token_id>(const vtest::round_tree&, std::uint32_t trial)>;

// One round from the empty context per trial; the emitted tokens are
// completed to L tokens by sampling the target; counts over V^L sequences.
std::vector<std::int64_t> count_sequences(const vtest::model& m, std::span<const int> widths, drafting how,
                                          std::int64_t trials, int L, const emit_fn& emit) {
  std::vector<std::int64_t> counts(static_cast<std::size_t>(std::pow(m.V, L) + 0.5), 0);
  vtest::round_tree rt;
  for (std::int64_t t = 0; t < trials; ++t) {
    const auto tt = static_cast<std::uint32_t>(t);
    vtest::build_tree(rt, m, 0, 0, widths, how, rng_stream{draft_seed, tt, 0});
    const auto out = emit(rt, tt);
    std::int64_t num = 0;
    int len = 0;
    for (token_id y : out) {
      if (len == L) break;
      num = num * m.V + y;
      ++len;
    }
    const rng_stream comp{completion_seed, tt, 0};
    for (; len < L; ++len) {
      const float* p = m.prow(m.index(len, num));
      double total = 0;
      for (int i = 0; i < m.V; ++i) total += static_cast<double>(p[i]);
      num = num * m.V + sample_row(make_view(p, m.V), comp.uniform(static_cast<std::uint32_t>(len), 0), total);
    }
    ++counts[static_cast<std::size_t>(num)];
  }
  return counts;
}

emit_fn library_emit(verify_mode mode, bool chain) {
  return [mode, chain](const vtest::round_tree& rt, std::uint32_t trial) {
    verify_params vp;
    vp.seed = verify_seed;
    vp.request = trial;
    return library_tokens(rt, mode, vp, chain);
  };
}

vtest::fit report(const char* what, const char* cfg, const vtest::model& m, std::span<const int> widths, drafting how,
                  std::int64_t trials, const emit_fn& emit) {
  const int L = static_cast<int>(widths.size()) + 1;
  const auto counts = count_sequences(m, widths, how, trials, L, emit);
  const auto expect = vtest::target_law(m, L);
  const auto f = vtest::chi_square(counts, expect, m.V);
  std::printf("[exactness] %-38s %-10s V=%-2d L=%d trials=%-7lld chi2=%.1f df=%d p=%.4g TV=%.5f%s\n", what, cfg, m.V, L,
              static_cast<long long>(trials), f.chi2, f.df, f.p_value, f.tv, f.impossible ? " IMPOSSIBLE" : "");
  return f;
}

}  // namespace

TEST_CASE("traversal exactness: whole sequences follow the target law (chi-square, >= 10^6 generations per mode)") {
  struct cfg {
    const char* name;
    int V;
    std::vector<int> widths;
    std::int64_t trials;
  };
  struct mode_case {
    verify_mode mode;
    drafting how;
    bool chain;
    std::vector<cfg> cfgs;
  };
  const mode_case cases[] = {
      {verify_mode::block,
       drafting::iid,
       true,
       {{"chain 3", 4, {1, 1, 1}, 350000}, {"chain 4", 3, {1, 1, 1, 1}, 300000}, {"chain 2", 32, {1, 1}, 400000}}},
      {verify_mode::traversal,
       drafting::iid,
       false,
       {{"tree 2", 8, {2}, 150000},
        {"tree 2x2", 5, {2, 2}, 250000},
        {"tree 4x2x1", 6, {4, 2, 1}, 300000},
        {"tree 3x1", 32, {3, 1}, 350000}}},
      {verify_mode::traversal_without_replacement,
       drafting::gumbel,
       false,
       {{"tree 2x2", 5, {2, 2}, 250000}, {"tree 3x1", 6, {3, 1}, 300000}, {"tree 4x2", 32, {4, 2}, 450000}}},
  };
  std::uint64_t model_seed = 77;
  for (const auto& mc : cases) {
    std::int64_t total = 0;
    for (const auto& c : mc.cfgs) {
      const auto m = vtest::make_model(c.V, static_cast<int>(c.widths.size()), model_seed++);
      const std::int64_t trials = c.trials / SPECDEC_VERIFY_TRIAL_SCALE;
      INFO("mode " << verify_mode_name(mc.mode) << ", " << c.name << ", model seed " << model_seed - 1
                   << ", verify seed " << verify_seed << ", draft seed " << draft_seed << ", completion seed "
                   << completion_seed);
      const auto f =
          report(verify_mode_name(mc.mode), c.name, m, c.widths, mc.how, trials, library_emit(mc.mode, mc.chain));
      CHECK_FALSE(f.impossible);
      CHECK(f.p_value > 1e-3);
      total += trials;
    }
    CHECK(total * SPECDEC_VERIFY_TRIAL_SCALE >= 1000000);
  }
}

TEST_CASE("traversal exactness: negative controls fail the same whole-sequence test") {
  vtest::bugs wrong_residual, no_conditioning;
  wrong_residual.residual_ignores_weight = true;
  no_conditioning.no_conditioning = true;
  auto reference = [](drafting how, vtest::bugs b) -> emit_fn {
    return [how, b](const vtest::round_tree& rt, std::uint32_t trial) {
      const int V = static_cast<int>(static_cast<std::int64_t>(rt.P.size()) / rt.tree.size());
      return vtest::traversal_sample(rt, V, how, rng_stream{verify_seed, trial, 0}, b);
    };
  };
  const std::int64_t trials = 400000 / SPECDEC_VERIFY_TRIAL_SCALE;
  // The models and shapes of the enumerated controls (TV 0.006, 0.018, 0.135, 0.148).
  const auto chain_model = vtest::make_model(3, 3, 4242);
  const auto tree_model = vtest::make_model(3, 2, 4242);
  const auto wor_model = vtest::make_model(4, 2, 4242);
  const int chain3[] = {1, 1, 1}, tree22[] = {2, 2}, tree31[] = {3, 1};
  const auto f1 = report("block rule, residual max(p - q, 0)", "chain 3", chain_model, chain3, drafting::iid, trials,
                         reference(drafting::iid, wrong_residual));
  CHECK(f1.p_value < 1e-3);
  const auto f2 = report("traversal, residual max(w p - q, 0)", "tree 2x2", tree_model, tree22, drafting::iid, trials,
                         reference(drafting::iid, wrong_residual));
  CHECK(f2.p_value < 1e-3);
  const auto f3 = report("traversal without the 1/rho", "tree 2x2", tree_model, tree22, drafting::iid, trials,
                         reference(drafting::iid, no_conditioning));
  CHECK(f3.p_value < 1e-3);
  const auto f4 = report("library traversal (iid) on wor drafts", "tree 3x1", wor_model, tree31, drafting::gumbel,
                         trials, library_emit(verify_mode::traversal, false));
  CHECK(f4.p_value < 1e-3);
  // The same configurations pass with the right rule.
  const auto ok1 = report("reference, right rule", "chain 3", chain_model, chain3, drafting::iid, trials,
                          reference(drafting::iid, vtest::bugs{}));
  CHECK(ok1.p_value > 1e-3);
  const auto ok2 = report("library block", "chain 3", chain_model, chain3, drafting::iid, trials,
                          library_emit(verify_mode::block, true));
  CHECK(ok2.p_value > 1e-3);
  const auto ok3 = report("library traversal_without_replacement", "tree 3x1", wor_model, tree31, drafting::gumbel,
                          trials, library_emit(verify_mode::traversal_without_replacement, false));
  CHECK(ok3.p_value > 1e-3);
}

TEST_CASE("traversal: the drafted tree's record decides whether a mode applies") {
  drafted_tree t;
  t.reset(0);
  t.add(0, 1, 0.5f, -0.7f, draft_mode::iid);
  t.add(1, 2, 0.5f, -1.4f, draft_mode::iid);
  CHECK(check_verify_mode(t, verify_mode::block).ok());  // a chain drafted i.i.d.
  CHECK(check_verify_mode(t, verify_mode::traversal).ok());
  CHECK(check_verify_mode(t, verify_mode::sampled_iid).ok());
  CHECK(check_verify_mode(t, verify_mode::greedy).ok());
  CHECK(check_verify_mode(t, verify_mode::traversal_without_replacement) == status_code::invalid_argument);
  CHECK(check_verify_mode(t, verify_mode::deterministic) == status_code::invalid_argument);
  verify_mode m{};
  REQUIRE(matching_traversal_mode(t, m).ok());
  CHECK(m == verify_mode::traversal);
  t.add(0, 3, 0.5f, -0.7f, draft_mode::iid);  // the root now has two children: not a chain
  const status st = check_verify_mode(t, verify_mode::block);
  CHECK(st == status_code::invalid_argument);
  CHECK(st.index() == 3);
  CHECK(check_verify_mode(t, verify_mode::traversal).ok());
  CHECK(check_verify_mode(t, static_cast<verify_mode>(99)) == status_code::invalid_argument);

  drafted_tree w;
  w.reset(0);
  w.add(0, 1, 0.5f, -0.7f, draft_mode::without_replacement);
  w.add(0, 2, 0.3f, -1.2f, draft_mode::without_replacement);
  REQUIRE(matching_traversal_mode(w, m).ok());
  CHECK(m == verify_mode::traversal_without_replacement);
  CHECK(check_verify_mode(w, verify_mode::traversal_without_replacement).ok());
  CHECK(check_verify_mode(w, verify_mode::traversal) == status_code::invalid_argument);

  drafted_tree d;
  d.reset(0);
  d.add(0, 1, 0.5f, -0.7f, draft_mode::deterministic);
  REQUIRE(matching_traversal_mode(d, m).ok());
  CHECK(m == verify_mode::deterministic);  // no traversal rule for top-k children
  CHECK(check_verify_mode(d, verify_mode::traversal) == status_code::invalid_argument);
  CHECK(check_verify_mode(d, verify_mode::typical_lossy).ok());  // the caller's explicit lossy choice

  static_assert(is_traversal(verify_mode::block) && is_traversal(verify_mode::traversal) &&
                is_traversal(verify_mode::traversal_without_replacement) && !is_traversal(verify_mode::sampled_iid));
  static_assert(uses_draft_probs(verify_mode::block) && uses_draft_probs(verify_mode::traversal));
  static_assert(is_lossless(verify_mode::traversal_without_replacement));
  CHECK(std::string(verify_mode_name(verify_mode::block)) == "block");
  CHECK(std::string(verify_mode_name(verify_mode::traversal_without_replacement)) == "traversal_without_replacement");
}

TEST_CASE("traversal: bad inputs get a clear status and leave the outputs untouched") {
  const int V = 6;
  const int widths[] = {2, 1};
  vtest::round_tree rt;
  random_round(V, widths, drafting::iid, 99, rt);
  const int n = rt.tree.size();
  REQUIRE(n == 5);
  std::vector<std::byte> ws(verify_workspace_size(V, n));
  std::vector<node_id> path(static_cast<std::size_t>(n), -7);
  std::vector<token_id> toks(static_cast<std::size_t>(n), -7);
  verify_result r{};
  verify_params vp;
  vp.mode = verify_mode::traversal;
  auto run = [&](const std::vector<float>& P, const std::vector<float>& Q, std::span<std::byte> w) {
    return verify_tree(rt.tree.view(), make_view(P.data(), n, V).as_const(), make_view(Q.data(), n, V).as_const(), vp,
                       w, path, toks, r);
  };
  auto untouched = [&] {
    for (std::size_t i = 0; i < path.size(); ++i)
      if (path[i] != -7 || toks[i] != -7) return false;
    return true;
  };
  SECTION("block on a branching tree") {
    vp.mode = verify_mode::block;
    CHECK(run(rt.P, rt.Q, ws) == status_code::invalid_argument);
    CHECK(untouched());
  }
  SECTION("NaN in the root's q row") {
    auto Q = rt.Q;
    Q[3] = std::nanf("");
    const status st = run(rt.P, Q, ws);
    CHECK(st == status_code::non_finite);
    CHECK(st.index() == 0);
    CHECK(untouched());
  }
  SECTION("negative entry in the internal nodes' p rows") {
    auto P = rt.P;
    for (node_id u = 1; u <= 2; ++u) P[static_cast<std::size_t>(u * V + 2)] = -0.25f;  // nodes 1, 2 have children
    for (const verify_mode m : {verify_mode::traversal, verify_mode::traversal_without_replacement}) {
      vp.mode = m;
      const status st = run(P, rt.Q, ws);  // node 1 is entered (its weight is positive) before any draw
      CHECK(st == status_code::negative_probability);
      CHECK(st.index() == 1);
      CHECK(untouched());
    }
  }
  SECTION("unnormalized rows") {
    auto P = rt.P;
    for (int i = 0; i < V; ++i) P[static_cast<std::size_t>(i)] *= 1.5f;
    CHECK(run(P, rt.Q, ws) == status_code::invalid_argument);
    CHECK(untouched());
  }
  SECTION("missing q, small workspace") {
    CHECK(verify_tree(rt.tree.view(), make_view(rt.P.data(), n, V).as_const(), view2d<const float>{}, vp, ws, path,
                      toks, r) == status_code::invalid_argument);
    CHECK(run(rt.P, rt.Q, std::span<std::byte>(ws).first(ws.size() - 1)) == status_code::buffer_too_small);
    CHECK(untouched());
  }
  SECTION("a root-only tree emits one token") {
    token_tree root(0);
    REQUIRE(
        verify_tree(root.view(), make_view(rt.P.data(), 1, V).as_const(), view2d<const float>{}, vp, ws, path, toks, r)
            .ok());
    CHECK(r.accepted == 0);
    CHECK(toks[0] == r.next_token);
    CHECK(r.next_token >= 0);
    CHECK(r.next_token < V);
  }
}

TEST_CASE("traversal: batched requests match single calls and mix with other modes") {
  const int V = 40;
  const int widths[] = {3, 2};
  std::vector<vtest::round_tree> rts(4);
  std::vector<verify_params> params(4);
  const verify_mode modes[] = {verify_mode::traversal, verify_mode::sampled_iid, verify_mode::traversal,
                               verify_mode::greedy};
  std::vector<std::int32_t> offsets{0};
  std::vector<token_id> tok;
  std::vector<node_id> par;
  std::vector<float> P, Q;
  for (std::size_t r = 0; r < rts.size(); ++r) {
    random_round(V, widths, drafting::iid, 500 + r, rts[r]);
    params[r].mode = modes[r];
    params[r].seed = 3;
    params[r].request = static_cast<std::uint32_t>(r);
    for (node_id i = 0; i < rts[r].tree.size(); ++i) {
      tok.push_back(rts[r].tree.token(i));
      par.push_back(rts[r].tree.parent(i));
    }
    P.insert(P.end(), rts[r].P.begin(), rts[r].P.end());
    Q.insert(Q.end(), rts[r].Q.begin(), rts[r].Q.end());
    offsets.push_back(offsets.back() + rts[r].tree.size());
  }
  const std::int32_t total = offsets.back();
  std::vector<node_id> paths(4 * 8, -1);
  std::vector<token_id> tokens(4 * 8, -1);
  std::vector<verify_result> results(4);
  std::vector<std::int64_t> per_depth(8, 0);
  verify_batch_input in{offsets, tree_view{tok.data(), par.data(), nullptr, nullptr, total},
                        make_view(P.data(), total, V).as_const(), make_view(Q.data(), total, V).as_const(), params};
  verify_batch_output out{make_view(paths.data(), 4, 8), make_view(tokens.data(), 4, 8), results, per_depth};
  std::vector<std::byte> ws(verify_batch_workspace_size(V, offsets));
  REQUIRE(verify_batch(in, ws, out).ok());
  for (std::size_t r = 0; r < rts.size(); ++r) {
    const auto single = library_tokens(rts[r], modes[r], params[r], false);
    REQUIRE(results[r].code == status_code::ok);
    CHECK(std::vector<token_id>(tokens.begin() + static_cast<std::ptrdiff_t>(r * 8),
                                tokens.begin() + static_cast<std::ptrdiff_t>(r * 8) + results[r].accepted + 1) ==
          single);
  }
}

TEST_CASE("traversal: caller-supplied uniforms give the Philox tokens when they hold the same values") {
  const int V = 40;
  const int widths[] = {3, 2};
  vtest::round_tree rt;
  for (int r = 0; r < 200; ++r) {
    random_round(V, widths, drafting::iid, 900 + static_cast<std::uint64_t>(r), rt);
    const int n = rt.tree.size();
    verify_params vp;
    vp.mode = verify_mode::traversal;
    vp.seed = 5;
    vp.request = static_cast<std::uint32_t>(r);
    const philox_uniforms ph{rng_stream{vp.seed, vp.request, vp.round}};
    const int draws = 4;  // at most 3 children per node
    std::vector<double> u(static_cast<std::size_t>(n * draws));
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < draws; ++j)
        u[static_cast<std::size_t>(i * draws + j)] = ph(static_cast<std::uint32_t>(i), static_cast<std::uint32_t>(j));
    std::vector<std::byte> ws(verify_workspace_size(V, n));
    std::vector<node_id> path(static_cast<std::size_t>(n));
    std::vector<token_id> toks(static_cast<std::size_t>(n));
    verify_result res{};
    REQUIRE(verify_tree(rt.tree.view(), make_view(rt.P.data(), n, V).as_const(),
                        make_view(rt.Q.data(), n, V).as_const(), vp, caller_uniforms{u.data(), n, draws}, ws, path,
                        toks, res)
                .ok());
    const std::vector<token_id> got(toks.begin(), toks.begin() + res.accepted + 1);
    CHECK(got == library_tokens(rt, verify_mode::traversal, vp, false));
    // A uniform outside [0, 1) in a draw the walk takes is reported.
    std::fill(u.begin(), u.end(), 1.0);
    CHECK(verify_tree(rt.tree.view(), make_view(rt.P.data(), n, V).as_const(), make_view(rt.Q.data(), n, V).as_const(),
                      vp, caller_uniforms{u.data(), n, draws}, ws, path, toks, res) == status_code::invalid_argument);
  }
}

TEST_CASE("traversal: the host one-pass residual equals copy + update_residual bit for bit") {
  const detail::host_row_ops ops{};
  std::mt19937 gen(31);
  std::uniform_real_distribution<float> U(0.0f, 1.0f);
  for (const std::int64_t V : {5, 40, 1003, 5000}) {
    for (const std::int64_t stride : {std::int64_t{1}, std::int64_t{3}}) {
      std::vector<float> p(static_cast<std::size_t>(V * stride)), q(p.size());
      for (auto& x : p) x = U(gen) < 0.3f ? 0.0f : U(gen) / static_cast<float>(V);
      for (auto& x : q) x = U(gen) < 0.3f ? 0.0f : U(gen) / static_cast<float>(V);
      const detail::row_ref pr{p.data(), stride}, qr{q.data(), stride};
      const auto nt = static_cast<std::size_t>(sum_tile_count(V));
      std::vector<float> R1(static_cast<std::size_t>(V)), R2(R1.size());
      std::vector<double> t1(nt), t2(nt);
      const float s = 1.37f;
      const double m1 = ops.scaled_residual(pr, qr, R1.data(), s, V, t1.data());
      ops.copy(pr, R2.data(), V);
      const double m2 = ops.update_residual(qr, R2.data(), s, V, t2.data());
      INFO("V=" << V << " stride " << stride);
      CHECK(m1 == m2);
      CHECK(R1 == R2);
      CHECK(t1 == t2);
    }
  }
}
