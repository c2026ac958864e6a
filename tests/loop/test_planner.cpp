// round_planner and planned_tree_builder: concepts, option and input errors,
// decisions under injected cost curves (speculation off where it cannot pay,
// large trees where passes are flat), predictions against a simulation with
// the same acceptance, greedy sessions with the planner equal plain greedy
// decoding, determinism with injected costs, batched plans under a budget,
// and plan_drafted sizing a drafted tree by its calibrated confidence.
// The law tests with the planner on (and the negative control) are in
// test_session.cpp next to the other law tests.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <limits>
#include <map>
#include <random>
#include <tuple>
#include <vector>

#include "loop/cold_requests.hpp"
#include "loop/loop_models.hpp"
#include "specdec/draft/drafter.hpp"
#include "specdec/draft/static_tree.hpp"
#include "specdec/draft/topk_tree.hpp"
#include "specdec/loop/batch_session.hpp"
#include "specdec/loop/detail/draft_calibration.hpp"
#include "specdec/loop/detail/plan_estimators.hpp"
#include "specdec/loop/planned_builder.hpp"
#include "specdec/loop/session.hpp"

using namespace specdec;

static_assert(round_observing_builder<planned_tree_builder>);
static_assert(batch_plannable_builder<planned_tree_builder>);
static_assert(!round_observing_builder<static_tree_builder>);
static_assert(!round_observing_builder<topk_tree_builder>);
static_assert(tree_builder<planned_tree_builder, looptest::drafter>);
static_assert(tree_builder<planned_tree_builder, looptest::level_drafter>);
static_assert(!tree_builder<planned_tree_builder, int>);

namespace {

// Acceptance p(depth, rank) of the synthetic drafter used for simulations.
struct true_acceptance {
  std::vector<double> rank{0.7, 0.15, 0.05};
  double depth_decay = 0.97;
  double at(std::int32_t d, std::int32_t r) const {
    if (r < 0 || r >= static_cast<std::int32_t>(rank.size())) return 0.0;
    return rank[static_cast<std::size_t>(r)] * std::pow(depth_decay, d - 1);
  }
};

// Walks `shape` as verification would under `a`: at a reached node, one
// uniform picks which child (if any) is accepted. Returns the path.
std::vector<node_id> simulate_path(std::span<const node_id> shape, const true_acceptance& a, std::mt19937_64& rng) {
  std::vector<node_id> path{0};
  std::uniform_real_distribution<double> U(0.0, 1.0);
  for (std::int32_t depth = 1;; ++depth) {
    const node_id u = path.back();
    double x = U(rng), cum = 0.0;
    node_id next = -1;
    std::int32_t r = 0;
    for (std::size_t c = 1; c < shape.size(); ++c) {
      if (shape[c] != u) continue;
      cum += a.at(depth, r++);
      if (x < cum) {
        next = static_cast<node_id>(c);
        break;
      }
    }
    if (next < 0) return path;
    path.push_back(next);
  }
}

struct sim_result {
  double tokens_per_round = 0, predicted_tokens = 0, seconds_per_token = 0, predicted_seconds_per_token = 0;
  std::map<std::pair<int, int>, int> shapes;  // (nodes, depth) -> rounds
};

// One simulated round: the planner's next plan, the path verification
// would accept under `a`, and that round's feedback observed (`fill` sets
// the times).
struct simulated_round {
  plan_summary summary;
  std::vector<node_id> path;
};
template <class Fill>
simulated_round simulate_round(round_planner& p, const true_acceptance& a, std::mt19937_64& rng, Fill&& fill) {
  const round_plan plan = p.next();
  const std::vector<node_id> shape(plan.shape.begin(), plan.shape.end());
  simulated_round r{plan.summary, simulate_path(shape, a, rng)};
  std::vector<token_id> tok(shape.size(), 0);
  round_feedback f;
  f.tree = tree_view{tok.data(), shape.data(), nullptr, nullptr, static_cast<std::int32_t>(shape.size())};
  f.path = r.path;
  f.forward_nodes = static_cast<std::int32_t>(shape.size());
  fill(f, plan.summary);
  REQUIRE(p.observe(f).ok());
  return r;
}

// Runs `rounds` planned rounds against the simulated acceptance with the
// planner's own injected costs as the round time.
sim_result simulate(round_planner& p, const true_acceptance& a, int rounds, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  sim_result s;
  double tokens = 0, seconds = 0, pred_tokens = 0, pred_seconds = 0;
  const int warm = rounds / 2;
  for (int i = 0; i < rounds; ++i) {
    const simulated_round r = simulate_round(p, a, rng, [&](round_feedback& f, const plan_summary&) {
      f.forward_seconds = p.target_seconds(f.forward_nodes);
    });
    if (i < warm) continue;
    ++s.shapes[{r.summary.nodes, r.summary.depth}];
    tokens += static_cast<double>(r.path.size());
    seconds += r.summary.predicted_seconds;
    pred_tokens += r.summary.expected_tokens;
    pred_seconds += r.summary.predicted_seconds;
  }
  const double n = rounds - warm;
  s.tokens_per_round = tokens / n;
  s.predicted_tokens = pred_tokens / n;
  s.seconds_per_token = seconds / tokens;
  s.predicted_seconds_per_token = pred_seconds / pred_tokens;
  return s;
}

}  // namespace

TEST_CASE("planner: option, cost and feedback errors") {
  round_planner p;
  CHECK(p.reset(planner_options{.max_nodes = 0}) == status_code::invalid_argument);
  CHECK(p.reset(planner_options{.max_depth = -1}) == status_code::invalid_argument);
  CHECK(p.reset(planner_options{.max_children = 0}) == status_code::invalid_argument);
  CHECK(p.reset(planner_options{.forget = 0.0}) == status_code::invalid_argument);
  CHECK(p.reset(planner_options{.forget = NAN}) == status_code::invalid_argument);
  CHECK(p.reset(planner_options{.prior_accept = 1.5}) == status_code::invalid_argument);
  CHECK(p.reset(planner_options{.explore = 1.0}) == status_code::invalid_argument);
  CHECK(p.reset(planner_options{.plain_first = -1}) == status_code::invalid_argument);
  CHECK(p.reset(planner_options{.probe_budget = -0.1}) == status_code::invalid_argument);
  CHECK(p.reset(planner_options{.probe_budget = NAN}) == status_code::invalid_argument);
  CHECK(p.reset(planner_options{.cost_quantile = 1.5}) == status_code::invalid_argument);
  CHECK(p.reset(planner_options{.cost_quantile = NAN}) == status_code::invalid_argument);
  REQUIRE(p.reset(planner_options{}).ok());
  const double n[] = {1, 2, 4}, t[] = {1.0, 1.1, 1.3}, bad_n[] = {1, 1, 4}, bad_t[] = {1.0, NAN, 1.3};
  CHECK(p.set_target_cost(std::span<const double>(n, 2), t) == status_code::size_mismatch);
  CHECK(p.set_target_cost(bad_n, t) == status_code::invalid_argument);
  CHECK(p.set_target_cost(n, bad_t) == status_code::invalid_argument);
  CHECK(p.set_drafter_cost(-1, 0, 0) == status_code::invalid_argument);
  CHECK(p.set_loop_cost(0, INFINITY) == status_code::invalid_argument);
  const node_id cyclic[] = {-1, 2, 0};
  CHECK_FALSE(p.fix_plan(cyclic).ok());
  std::vector<node_id> big(40, 0);
  big[0] = -1;
  CHECK(p.fix_plan(big) == status_code::invalid_argument);

  const node_id parents[] = {-1, 0, 1};
  const token_id tokens[] = {0, 0, 0};
  round_feedback f;
  f.tree = tree_view{tokens, parents, nullptr, nullptr, 3};
  const node_id not_linked[] = {0, 2};
  f.path = not_linked;
  f.forward_nodes = 3;
  CHECK(p.observe(f) == status_code::invalid_argument);
  const node_id good[] = {0, 1, 2};
  f.path = good;
  f.forward_seconds = -1;
  CHECK(p.observe(f) == status_code::invalid_argument);
  f.forward_seconds = 1e-3;
  f.forward_nodes = 0;
  CHECK(p.observe(f) == status_code::invalid_argument);
  f.forward_nodes = 3;
  const float short_accept[] = {-1.0f, 0.5f}, nan_accept[] = {-1.0f, NAN, 0.5f}, big_accept[] = {-1.0f, 1.5f, 0.5f};
  f.accept_prob = short_accept;
  CHECK(p.observe(f) == status_code::size_mismatch);
  f.accept_prob = nan_accept;
  CHECK(p.observe(f) == status_code::invalid_argument);
  f.accept_prob = big_accept;
  CHECK(p.observe(f) == status_code::invalid_argument);
  f.accept_prob = {};
  CHECK(p.observe(f).ok());
  CHECK(p.rounds() == 1);
}

TEST_CASE("planner: acceptance counts accept_prob in place of the indicator where it is known") {
  // Chains of 2 drafts, both always accepted; accept_prob says 0.4 for the
  // first draft and nothing (-1) for the second. Depth 1 must read about
  // 0.4 (the expectation counted), depth 2 about 1 (the indicator); without
  // accept_prob both read about 1.
  const node_id chain[] = {-1, 0, 1}, all[] = {0, 1, 2};
  const token_id tokens[] = {0, 0, 0};
  const float accept[] = {-1.0f, 0.4f, -1.0f};
  for (const bool with : {true, false}) {
    round_planner p;
    round_feedback f;
    f.forward_seconds = 1e-3;
    f.forward_nodes = 3;
    f.tree = tree_view{tokens, chain, nullptr, nullptr, 3};
    f.path = all;
    if (with) f.accept_prob = accept;
    for (int i = 0; i < 200; ++i) REQUIRE(p.observe(f).ok());
    CHECK(p.acceptance(1, 0) == Approx(with ? 0.4 : 1.0).margin(0.03));
    CHECK(p.acceptance(2, 0) > 0.95);
  }
  // A rejected first draft whose chance was 0.9 counts 0.9, not 0.
  round_planner p;
  round_feedback f;
  const float likely[] = {-1.0f, 0.9f, -1.0f};
  const node_id root_only[] = {0};
  f.forward_seconds = 1e-3;
  f.forward_nodes = 3;
  f.tree = tree_view{tokens, chain, nullptr, nullptr, 3};
  f.path = root_only;
  f.accept_prob = likely;
  for (int i = 0; i < 200; ++i) REQUIRE(p.observe(f).ok());
  CHECK(p.acceptance(1, 0) == Approx(0.9).margin(0.03));
}

TEST_CASE("planner: acceptance estimates follow the drafted rounds") {
  // Chains of 4 drafts, every draft accepted, with 4 sibling ranks planned:
  // ranks never offered must not shrink the measured rank-0 rate, and plain
  // steps afterwards bring no evidence, so they must not age it.
  round_planner p(planner_options{.max_children = 4});
  const node_id chain[] = {-1, 0, 1, 2, 3}, plain[] = {-1}, all[] = {0, 1, 2, 3, 4}, root[] = {0};
  const token_id tokens[] = {0, 0, 0, 0, 0};
  round_feedback f;
  f.forward_seconds = 1e-3;
  for (int i = 0; i < 40; ++i) {
    f.tree = tree_view{tokens, chain, nullptr, nullptr, 5};
    f.path = all;
    f.forward_nodes = 5;
    REQUIRE(p.observe(f).ok());
  }
  for (std::int32_t d = 1; d <= 4; ++d) CHECK(p.acceptance(d, 0) > 0.95);
  for (std::int32_t d = 1; d <= 4; ++d)
    for (std::int32_t r = 0; r < 4; ++r) CHECK(p.acceptance(d, r) >= 0.0);
  // Ranks of one depth share at most one acceptance.
  CHECK(p.acceptance(1, 0) + p.acceptance(1, 1) + p.acceptance(1, 2) + p.acceptance(1, 3) <= 1.0 + 1e-12);
  const double before = p.acceptance(2, 0);
  for (int i = 0; i < 300; ++i) {
    f.tree = tree_view{tokens, plain, nullptr, nullptr, 1};
    f.path = root;
    f.forward_nodes = 1;
    REQUIRE(p.observe(f).ok());
  }
  CHECK(p.acceptance(2, 0) == Approx(before));
}

TEST_CASE("planner: every candidate is valued as its shape, and the list is the Pareto front by value") {
  // Valuation sums each width tree's levels (products of rank sums) and
  // keeps the Pareto front with a table: checked here against the plain
  // definitions, node by node, on the shape each candidate drafts.
  const std::uint64_t seed = looptest::seeded_rng("[planner] candidates", 20261127)();
  for (const auto& [nodes, depth, kids] : {std::tuple{32, 8, 4}, std::tuple{16, 6, 2}, std::tuple{64, 10, 3}}) {
    CAPTURE(nodes, depth, kids);
    // replan_every = 1: the last round's estimates are valued.
    round_planner p(planner_options{.max_nodes = nodes, .max_depth = depth, .max_children = kids, .replan_every = 1});
    const double n_pts[] = {1, 64}, t_pts[] = {1e-4, 1e-4 + 63 * 4e-6};
    REQUIRE(p.set_target_cost(n_pts, t_pts).ok());
    true_acceptance a;
    a.rank = {0.6, 0.2, 0.1};
    (void)simulate(p, a, 80, seed);
    p.prepare();
    const std::vector<round_planner::candidate> cands(p.candidates().begin(), p.candidates().end());
    REQUIRE(cands.size() > 10);
    for (std::size_t i = 0; i < cands.size(); ++i) {
      CAPTURE(i);
      p.choose(i, 1.0);
      const std::vector<node_id> shape(p.plan().shape.begin(), p.plan().shape.end());
      REQUIRE(validate_topological_parents(shape.data(), static_cast<std::int32_t>(shape.size())).ok());
      std::vector<double> reach(shape.size(), 1.0);
      std::vector<std::int32_t> d(shape.size(), 0), kids_of(shape.size(), 0);
      double value = 0.0;
      std::int32_t deepest = 0;
      for (std::size_t u = 1; u < shape.size(); ++u) {
        const auto par = static_cast<std::size_t>(shape[u]);
        d[u] = d[par] + 1;
        reach[u] = reach[par] * p.acceptance(d[u], kids_of[par]++);
        value += reach[u];
        deepest = std::max(deepest, d[u]);
      }
      const auto expanded = std::count_if(kids_of.begin(), kids_of.end(), [](std::int32_t k) { return k > 0; });
      // Optimal trees keep the value of their last solve (re-solved when an
      // estimate moved by more than 0.05); the families are valued afresh.
      if (cands[i].kind != plan_kind::optimal) CHECK(cands[i].value == Approx(value).epsilon(1e-12).margin(1e-15));
      CHECK(cands[i].nodes == static_cast<std::int32_t>(shape.size()));
      CHECK(cands[i].depth == deepest);
      CHECK(cands[i].expanded == expanded);
      // By decreasing value, none dominated by one listed before it.
      for (std::size_t j = 0; j < i; ++j) {
        CHECK(cands[j].value >= cands[i].value);
        CHECK_FALSE((cands[j].nodes <= cands[i].nodes && cands[j].depth <= cands[i].depth &&
                     cands[j].expanded <= cands[i].expanded));
      }
    }
    // Nothing dropped that the front does not cover: every chain is listed
    // or dominated by a listed candidate of at least its value.
    double chain = 0.0, reach = 1.0;
    for (std::int32_t L = 1; L <= std::min(depth, nodes - 1); ++L) {
      chain += reach *= p.acceptance(L, 0);
      const bool covered = std::any_of(cands.begin(), cands.end(), [&](const round_planner::candidate& c) {
        return c.value >= chain * (1.0 - 1e-12) && c.nodes <= L + 1 && c.depth <= L && c.expanded <= L;
      });
      CHECK(covered);
    }
  }
}

TEST_CASE("planner: optimal trees reach every size once passes or an injected curve allow it") {
  // Valuations solve the tree programs only up to the growth limit; a curve
  // injected later (or a batch plan) must still see the large trees.
  round_planner p(planner_options{.max_nodes = 32, .max_depth = 8});
  const node_id chain3[] = {-1, 0, 1};
  std::vector<token_id> tok;
  for (int i = 0; i < 12; ++i) {
    if (i == 3) REQUIRE(p.fix_plan(chain3).ok());
    const round_plan plan = p.next();
    const std::vector<node_id> shape(plan.shape.begin(), plan.shape.end());
    std::vector<node_id> path(shape.size());
    for (std::size_t k = 0; k < shape.size(); ++k) path[k] = static_cast<node_id>(k);  // every draft accepted
    tok.assign(shape.size(), 0);
    round_feedback f;
    f.tree = tree_view{tok.data(), shape.data(), nullptr, nullptr, static_cast<std::int32_t>(shape.size())};
    f.path = path;
    f.forward_nodes = static_cast<std::int32_t>(shape.size());
    f.forward_seconds = 1e-4 + 5e-6 * static_cast<double>(shape.size());
    f.drafter_calls = plan.summary.depth;
    f.drafted_nodes = plan.summary.nodes - 1;
    f.drafter_seconds = 1e-6 * plan.summary.depth;
    REQUIRE(p.observe(f).ok());
  }
  REQUIRE(p.fix_plan({}).ok());
  const auto largest_optimal = [&] {
    std::int32_t n = 0;
    for (const auto& c : p.candidates())
      if (c.kind == plan_kind::optimal) n = std::max(n, c.nodes);
    return n;
  };
  CHECK(largest_optimal() <= 5);                                       // passes of 3 nodes measured: grows to 5
  const double n_pts[] = {1, 64}, t_pts[] = {1e-4, 1e-4 + 63 * 1e-7};  // nearly flat: large trees pay
  REQUIRE(p.set_target_cost(n_pts, t_pts).ok());
  const round_plan plan = p.next();
  CHECK(plan.summary.kind == plan_kind::optimal);
  CHECK(plan.summary.nodes >= 24);
  CHECK(largest_optimal() >= 24);
}

TEST_CASE("planner: preparing for a batch (every size solved) does not change the single-request plans") {
  // prepare() extends the tree programs to max_nodes; next() extends them
  // only as far as the planner may grow. Both read the table of the last
  // solve, so two planners fed the same rounds plan alike whether or not
  // one is also prepared now and then (as a batched session's would be).
  for (const std::uint64_t seed : {1u, 2u, 3u}) {
    CAPTURE(seed);
    const planner_options o{.max_nodes = 32, .max_depth = 8};
    round_planner a(o), b(o);
    std::mt19937_64 rng(seed);
    true_acceptance acc;
    acc.rank = {0.75, 0.12, 0.05};
    std::vector<token_id> tok;
    for (int i = 0; i < 300; ++i) {
      CAPTURE(i);
      if (i % 9 == 4) {
        b.prepare();
        std::int32_t largest = 0;
        for (const auto& c : b.candidates())
          if (c.kind == plan_kind::optimal) largest = std::max(largest, c.nodes);
        CHECK(largest > 16);  // every size listed, not only up to the growth limit
      }
      const round_plan pa = a.next(), pb = b.next();
      REQUIRE(pa.summary.nodes == pb.summary.nodes);
      REQUIRE(pa.summary.depth == pb.summary.depth);
      REQUIRE(pa.summary.kind == pb.summary.kind);
      REQUIRE(pa.summary.expected_tokens == pb.summary.expected_tokens);
      REQUIRE(std::equal(pa.shape.begin(), pa.shape.end(), pb.shape.begin(), pb.shape.end()));
      const std::vector<node_id> shape(pa.shape.begin(), pa.shape.end());
      const std::vector<node_id> path = simulate_path(shape, acc, rng);
      tok.assign(shape.size(), 0);
      round_feedback f;
      f.tree = tree_view{tok.data(), shape.data(), nullptr, nullptr, static_cast<std::int32_t>(shape.size())};
      f.path = path;
      f.forward_nodes = static_cast<std::int32_t>(shape.size());
      f.forward_seconds = 1e-4 + 6e-6 * static_cast<double>(shape.size()) + 1e-6 * static_cast<double>(i % 5);
      f.drafter_calls = pa.summary.depth;
      f.drafted_nodes = pa.summary.nodes - 1;
      f.drafter_seconds = 4e-6 * pa.summary.depth;
      REQUIRE(a.observe(f).ok());
      REQUIRE(b.observe(f).ok());
    }
  }
}

TEST_CASE("planner estimators: a tree program solved for fewer nodes agrees on every size it covers") {
  // The planner solves the programs up to its growth limit and extends them
  // later: a program's optimum for n nodes must not depend on its bound.
  std::mt19937_64 rng = looptest::seeded_rng("[planner] program bounds", 20261127);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (int trial = 0; trial < 40; ++trial) {
    const std::int32_t D = 1 + static_cast<std::int32_t>(u(rng) * 8), K = 1 + static_cast<std::int32_t>(u(rng) * 4);
    std::vector<double> table(static_cast<std::size_t>(D * K));
    for (std::int32_t d = 0; d < D; ++d) {
      double left = 1.0;
      for (std::int32_t r = 0; r < K; ++r) left -= table[static_cast<std::size_t>(d * K + r)] = left * u(rng) * 0.9;
    }
    const detail::acceptance_table acc{table, D, K};
    const std::int32_t B = 20 + static_cast<std::int32_t>(u(rng) * 30);
    for (std::int32_t L = 1; L <= D; ++L) {
      detail::tree_program full, part;
      full.solve(acc, L, K, B);
      const std::int32_t b = L + 2 + static_cast<std::int32_t>(u(rng) * (B - L - 2));
      part.solve(acc, L, K, b);
      for (std::int32_t n = 1; n <= b; ++n) {
        CAPTURE(trial, D, K, L, B, b, n);
        CHECK(part.value(n) == full.value(n));
        if (part.value(n) == -std::numeric_limits<double>::infinity()) continue;
        CHECK(part.depth(n) == full.depth(n));
        CHECK(part.expanded(n) == full.expanded(n));
        std::vector<node_id> a, c;
        part.emit(n, a);
        full.emit(n, c);
        CHECK(a == c);
      }
    }
  }
}

TEST_CASE("planner estimators: the Pareto front by table equals the pairwise definition") {
  struct cand {
    double value;
    std::int32_t nodes, depth, expanded, id;
  };
  std::mt19937_64 rng = looptest::seeded_rng("[planner] pareto front", 20261127);
  std::uniform_int_distribution<std::int32_t> pick(0, 1 << 20);
  std::vector<std::int32_t> scratch;
  for (int trial = 0; trial < 300; ++trial) {
    const std::int32_t N = 1 + pick(rng) % 40, D = pick(rng) % 10;
    std::vector<cand> c(static_cast<std::size_t>(pick(rng) % 200));
    for (std::size_t i = 0; i < c.size(); ++i) {
      const std::int32_t nodes = 1 + pick(rng) % N;
      // Few distinct values and counts: ties in every field are common.
      c[i] = {static_cast<double>(pick(rng) % 7), nodes, pick(rng) % (D + 1), pick(rng) % nodes,
              static_cast<std::int32_t>(i)};
    }
    std::stable_sort(c.begin(), c.end(), [](const cand& a, const cand& b) { return a.value > b.value; });
    std::vector<cand> want;
    for (const cand& x : c) {
      bool dominated = false;
      for (const cand& k : want)
        dominated = dominated || (k.nodes <= x.nodes && k.depth <= x.depth && k.expanded <= x.expanded);
      if (!dominated) want.push_back(x);
    }
    const std::size_t kept = detail::pareto_front(std::span<cand>(c), N, D, scratch);
    REQUIRE(kept == want.size());
    for (std::size_t i = 0; i < kept; ++i) CHECK(c[i].id == want[i].id);
  }
}

TEST_CASE("planner: plain decoding where speculation cannot pay, large trees where passes are flat") {
  const true_acceptance a;
  SECTION("every node costs a full step and drafting costs more: autoregressive") {
    round_planner p(planner_options{.max_nodes = 32, .max_depth = 6});
    const double n[] = {1, 64}, t[] = {1.0, 64.0};
    REQUIRE(p.set_target_cost(n, t).ok());
    REQUIRE(p.set_drafter_cost(0.2, 0.3, 0.05).ok());
    REQUIRE(p.set_loop_cost(0.01, 0.0).ok());
    const auto s = simulate(p, a, 400, 1);
    std::printf("planner linear t(N) = N: ");
    for (const auto& [k, v] : s.shapes) std::printf("(n %d, depth %d) x%d ", k.first, k.second, v);
    std::printf("\n");
    // Plain steps, but for a speculative probe (six rounds) after 64, then 128, 256, ... of them.
    const int plain = s.shapes.count({1, 0}) ? s.shapes.at({1, 0}) : 0;
    CHECK(plain >= 200 - 6);
  }
  SECTION("flat pass to 64 nodes, cheap drafter: a deep, wide tree") {
    round_planner p(planner_options{.max_nodes = 64, .max_depth = 10});
    const double n[] = {1, 64, 128}, t[] = {1.0, 1.0, 2.0};
    REQUIRE(p.set_target_cost(n, t).ok());
    REQUIRE(p.set_drafter_cost(0.0, 0.02, 0.0).ok());
    REQUIRE(p.set_loop_cost(0.0, 0.0).ok());
    const auto s = simulate(p, a, 400, 2);
    CHECK(p.plan().summary.nodes >= 32);
    CHECK(p.plan().summary.depth >= 5);
    std::printf("planner flat t(N): last plan %s, %d nodes, depth %d, %.2f tokens/round (simulated %.2f)\n",
                plan_kind_name(p.plan().summary.kind), p.plan().summary.nodes, p.plan().summary.depth,
                s.predicted_tokens, s.tokens_per_round);
  }
}

TEST_CASE("planner: a cold planner values shapes from its first drafted rounds, not from the prior") {
  // Drafts accepted at 0.95 per level, each extra node 0.3 of a step: deep
  // chains pay. A planner that kept valuing shapes by its prior (0.5 per
  // level) until replan_every drafted rounds drafted chains of one or two.
  true_acceptance a;
  a.rank = {0.95};
  a.depth_decay = 1.0;
  round_planner p(planner_options{.max_nodes = 16, .max_depth = 8});
  const double n[] = {1, 16}, t[] = {1.0, 5.5};
  REQUIRE(p.set_target_cost(n, t).ok());
  REQUIRE(p.set_drafter_cost(0.0, 0.05, 0.0).ok());
  REQUIRE(p.set_loop_cost(0.0, 0.0).ok());
  std::mt19937_64 rng(20261127);
  std::vector<std::int32_t> depth;
  for (int i = 0; i < 24; ++i)
    depth.push_back(simulate_round(p, a, rng, [](round_feedback&, const plan_summary&) {}).summary.depth);
  std::sort(depth.begin() + 8, depth.end());
  INFO("median depth of rounds 8-23: " << depth[16]);
  CHECK(depth[16] >= 4);
}

namespace {
// Every draft accepted (p = 1) or every draft rejected (p = 0), at every depth.
true_acceptance always(double p) {
  true_acceptance a;
  a.rank = {p};
  a.depth_decay = 1.0;
  return a;
}
// Measured round times where chains pay when accepted: a pass costs 1 ms
// plus 0.2 ms per extra node, the drafter 0.1 ms per level.
void chains_pay_when_accepted(round_feedback& f, const plan_summary& plan) {
  f.forward_seconds = 1e-3 * (1.0 + 0.2 * (f.forward_nodes - 1));
  f.drafter_calls = plan.depth;
  f.drafted_nodes = f.forward_nodes - 1;
  f.drafter_seconds = 0.1e-3 * plan.depth;
}
}  // namespace

TEST_CASE("planner: speculation turned off by a few rejected rounds is tried again soon, not after probe_every") {
  // Every draft is rejected until the planner decodes plainly, every later
  // draft accepted: a verdict resting on a few rounds is checked again
  // after about as many plain rounds (at least probe_every / 8), not after
  // probe_every.
  const true_acceptance reject = always(0.0), accept = always(1.0);
  round_planner p(planner_options{.max_nodes = 16, .max_depth = 4, .probe_every = 64});
  std::mt19937_64 rng(20261127);
  int drafted = 0, first_plain = -1, back = -1;
  for (int i = 0; i < 200 && back < 0; ++i) {
    const bool plain_seen = first_plain >= 0;
    const simulated_round r = simulate_round(p, plain_seen ? accept : reject, rng, chains_pay_when_accepted);
    if (r.summary.nodes > 1) {
      if (plain_seen)
        back = i;
      else
        ++drafted;
    } else if (drafted > 0 && !plain_seen) {
      first_plain = i;
    }
  }
  INFO(drafted << " rejected rounds, plain from round " << first_plain << ", speculating again at round " << back);
  REQUIRE(first_plain >= 0);
  REQUIRE(back >= 0);
  CHECK(back - first_plain <= std::max(drafted, 64 / 8) + 1);
  CHECK(back - first_plain < 64);
}

TEST_CASE("planner: an opening that lost does not hold probes back for the rest of the request") {
  // A request opens with plain steps and six drafted rounds (a probe's
  // worth) whose drafts are all rejected, then every draft is accepted.
  // Those rounds lost more than probe_budget of the time, but a verdict
  // from the opening is checked again: a probe comes after the short gap
  // (probe_every / 8 plain rounds), finds drafting paying and the planner
  // keeps drafting. Before the budget needed two probes' worth of rounds,
  // it held every probe back and decoded the request plainly.
  const true_acceptance reject = always(0.0), accept = always(1.0);
  const std::vector<node_id> root{-1}, chain{-1, 0, 1};
  round_planner p(planner_options{.max_nodes = 16, .max_depth = 4, .probe_every = 64});
  std::mt19937_64 rng(20261201);
  REQUIRE(p.fix_plan(root).ok());
  for (int i = 0; i < 8; ++i) (void)simulate_round(p, reject, rng, chains_pay_when_accepted);
  REQUIRE(p.fix_plan(chain).ok());
  for (int i = 0; i < 6; ++i) (void)simulate_round(p, reject, rng, chains_pay_when_accepted);
  REQUIRE(p.fix_plan({}).ok());
  int first_drafted = -1, drafted = 0;
  for (int i = 0; i < 150; ++i) {
    const bool d = simulate_round(p, accept, rng, chains_pay_when_accepted).summary.nodes > 1;
    if (d && first_drafted < 0) first_drafted = i;
    drafted += d ? 1 : 0;
  }
  std::printf("[planner] opening that lost: drafting again at round %d, %d of 150 rounds drafted\n", first_drafted,
              drafted);
  CHECK(first_drafted >= 0);
  CHECK(first_drafted <= 64 / 8 + 1);
  CHECK(drafted > 100);
}

TEST_CASE("planner: near a request's token limit, no drafts past it and no probe that cannot pay") {
  // round_feedback::tokens_left: drafts deeper than the tokens left cannot
  // all be emitted, and a probe needs its gap of tokens left to pay.
  const true_acceptance reject = always(0.0), accept = always(1.0);
  std::mt19937_64 rng(20261129);
  SECTION("depth") {
    round_planner p(planner_options{.max_nodes = 16, .max_depth = 8});
    const double n[] = {1, 16}, t[] = {1.0, 1.5};  // nearly flat: deep chains pay
    REQUIRE(p.set_target_cost(n, t).ok());
    REQUIRE(p.set_drafter_cost(0.0, 0.01, 0.0).ok());
    REQUIRE(p.set_loop_cost(0.0, 0.0).ok());
    std::int64_t left = -1;
    const auto with_left = [&](round_feedback& f, const plan_summary&) { f.tokens_left = left; };
    for (int i = 0; i < 60; ++i) (void)simulate_round(p, accept, rng, with_left);
    CHECK(p.plan().summary.depth >= 6);  // unknown limit: as deep as pays
    for (const std::int64_t l : {5, 3, 2, 1}) {
      left = l;
      (void)simulate_round(p, accept, rng, with_left);  // reports l tokens left
      INFO(l << " tokens left");
      CHECK(p.next().summary.depth <= l - 1);
      (void)simulate_round(p, accept, rng, with_left);
    }
    left = -1;
    (void)simulate_round(p, accept, rng, with_left);
    CHECK(p.next().summary.depth >= 6);
    left = 2;
    (void)simulate_round(p, accept, rng, with_left);
    left = -7;  // any negative value: unknown
    (void)simulate_round(p, accept, rng, with_left);
    CHECK(p.next().summary.depth >= 6);
  }
  SECTION("probes") {
    // As in the test above, every draft rejected until the planner decodes
    // plainly, then every draft accepted: with fewer tokens left than the
    // probe gap, no probe; with enough left, the probe comes.
    round_planner p(planner_options{.max_nodes = 16, .max_depth = 4, .probe_every = 64});
    std::int64_t left = -1;
    int first_plain = -1, back = -1, drafted = 0;
    for (int i = 0; i < 400 && back < 0; ++i) {
      const bool plain_seen = first_plain >= 0;
      if (plain_seen && i == first_plain + 150) left = 1000;
      const simulated_round r =
          simulate_round(p, plain_seen ? accept : reject, rng, [&](round_feedback& f, const plan_summary& s) {
            chains_pay_when_accepted(f, s);
            f.tokens_left = left;
          });
      if (r.summary.nodes > 1) {
        if (plain_seen) back = i;
        ++drafted;
      } else if (drafted > 0 && !plain_seen) {
        first_plain = i;
        left = 7;  // below the shortest gap, probe_every / 8
      }
    }
    INFO("plain from round " << first_plain << ", speculating again at round " << back);
    REQUIRE(first_plain >= 0);
    REQUIRE(back >= 0);
    CHECK(back >= first_plain + 150);
    CHECK(back <= first_plain + 152);
  }
}

TEST_CASE("planner: where plain steps report skipped drafts, probes keep the full probe_every gap") {
  // As above, but every plain step reports its (root-only) skipped draft
  // through observe_skipped: the planner learns acceptance from plain steps,
  // so a probe would only force a drafted tree through the target. Neither
  // the short gap nor the new request's early probe applies.
  const true_acceptance reject = always(0.0), accept = always(1.0);
  round_planner p(planner_options{.max_nodes = 16, .max_depth = 4, .probe_every = 64});
  std::mt19937_64 rng(20261127);
  drafted_tree root;
  root.reset(0);
  int first_plain = -1, back = -1;
  for (int i = 0; i < 300 && back < 0; ++i) {
    const bool plain_seen = first_plain >= 0;
    if (plain_seen && i == first_plain + 10) p.begin_request();
    const simulated_round r = simulate_round(p, plain_seen ? accept : reject, rng, chains_pay_when_accepted);
    if (r.summary.nodes == 1) {
      REQUIRE(p.observe_skipped(root, 0).ok());
      if (!plain_seen && i > p.options().plain_first) first_plain = i;  // past the plain_first rounds
    } else if (plain_seen) {
      back = i;
    }
  }
  INFO("plain from round " << first_plain << ", speculating again at round " << back);
  REQUIRE(first_plain >= 0);
  REQUIRE(back >= 0);
  CHECK(back - first_plain >= 64);
}

TEST_CASE("planner: a plain verdict carried into a new request is checked again within probe_every / 8 rounds") {
  // Request 1: drafts accepted for 100 rounds, then always rejected until
  // the planner decodes plainly (10 plain rounds). Request 2
  // (begin_request): drafts accepted again; the planner must try them within
  // 64 / 8 rounds, not after the rest of the 64-round gap.
  const true_acceptance reject = always(0.0), accept = always(1.0);
  round_planner p(planner_options{.max_nodes = 16, .max_depth = 4, .probe_every = 64});
  std::mt19937_64 rng(20261127);
  const auto fill = chains_pay_when_accepted;
  for (int i = 0; i < 100; ++i) (void)simulate_round(p, accept, rng, fill);
  int plain = 0;
  for (int i = 0; i < 300 && plain < 10; ++i)
    plain = simulate_round(p, reject, rng, fill).summary.nodes == 1 ? plain + 1 : 0;
  REQUIRE(plain == 10);
  p.begin_request();
  int back = -1;
  for (int i = 0; i < 64 && back < 0; ++i)
    if (simulate_round(p, accept, rng, fill).summary.nodes > 1) back = i;
  INFO("speculating again after " << back << " plain rounds of the new request");
  CHECK(back >= 0);
  CHECK(back <= 64 / 8);
}

TEST_CASE("planner: min_gain keeps the plain step unless speculation beats it by that share") {
  const true_acceptance a;
  auto run = [&](double min_gain, std::uint64_t seed, double& gain) {
    round_planner p(planner_options{.max_nodes = 16, .max_depth = 4, .min_gain = min_gain});
    const double n[] = {1, 16}, t[] = {1.0, 5.5};  // 0.3 of a step per extra node
    REQUIRE(p.set_target_cost(n, t).ok());
    REQUIRE(p.set_drafter_cost(0.0, 0.1, 0.0).ok());
    REQUIRE(p.set_loop_cost(0.0, 0.0).ok());
    const auto s = simulate(p, a, 400, seed);
    const plan_summary& last = p.plan().summary;
    // Predicted rate of the last plan over the plain step's (1 token per t(1)).
    gain = last.nodes > 1 ? last.expected_tokens / last.predicted_seconds * p.target_seconds(1) - 1.0 : 0.0;
    return s.shapes.count({1, 0}) ? s.shapes.at({1, 0}) : 0;
  };
  double g0 = 0.0, g = 0.0;
  const int plain0 = run(0.0, 3, g0);
  INFO("speculation's predicted gain with min_gain 0: " << g0);
  REQUIRE(g0 > 0.1);  // the setting makes speculation pay, so min_gain has something to hold back
  CHECK(plain0 <= 10);
  // A gain above the bar: mostly speculating (an estimate that dips below
  // the bar goes plain until the next probe).
  const int plain_below = run(g0 / 2, 3, g);
  CHECK(plain_below <= 60);
  const int plain_above = run(g0 + 0.1, 3, g);
  CHECK(plain_above >= 190);  // every simulated round but the probes is a plain step
}

TEST_CASE("planner: a request's first drafted round (the drafter's prompt prefill) stays out of the drafter fit") {
  // Drafted rounds of a 3-node chain: 2 levels of 10 us each; a request's
  // first drafted round also prefills the drafter: 5 ms.
  const std::vector<node_id> shape{-1, 0, 1};
  const std::vector<token_id> tok(3, 0);
  const std::vector<node_id> path{0, 1, 2};
  auto feed = [&](round_planner& p, double drafter_seconds) {
    round_feedback f;
    f.tree = tree_view{tok.data(), shape.data(), nullptr, nullptr, 3};
    f.path = path;
    f.forward_nodes = 3;
    f.forward_seconds = 1e-4;
    f.drafter_calls = 2;
    f.drafted_nodes = 2;
    f.drafter_seconds = drafter_seconds;
    REQUIRE(p.observe(f).ok());
  };
  for (const bool told : {true, false}) {
    INFO("begin_request called: " << told);
    round_planner p;
    for (int request = 0; request < 3; ++request) {
      if (told) p.begin_request();
      feed(p, 5e-3);
      for (int i = 0; i < 20; ++i) feed(p, 2e-5);
    }
    const double est = p.drafter_seconds(2, 2, 3.0);
    if (told)
      CHECK(est == Approx(2e-5).margin(2e-6));
    else                     // the prefills of requests 2 and 3 read as drafting cost, each capped at 3x the prediction
      CHECK(est > 2.08e-5);  // with begin_request 2.0e-5
    std::printf("[planner] drafter estimate, begin_request %d: %.3g s\n", told ? 1 : 0, est);
  }
}

TEST_CASE("planner: model-free drafts (no drafter calls) still measure pass times past a request's switch rounds") {
  const std::vector<node_id> shape{-1, 0, 1};
  const std::vector<token_id> tok(3, 0);
  const std::vector<node_id> path{0, 1};
  round_planner p;
  p.begin_request();
  for (int i = 0; i < 6; ++i) {
    round_feedback f;
    f.tree = tree_view{tok.data(), shape.data(), nullptr, nullptr, 3};
    f.path = path;
    f.forward_nodes = 3;
    f.forward_seconds = 3e-4;
    REQUIRE(p.observe(f).ok());
  }
  // Six rounds: the first two are the request's switch, the third is the size's first (dropped), three kept.
  const auto sizes = p.measured_sizes();
  REQUIRE(sizes.size() == 1);
  CHECK(sizes[0] == 3.0);
  CHECK(p.target_seconds(3) == Approx(3e-4));
}

TEST_CASE("planner: predicted tokens and time per token match a simulation with the same acceptance") {
  // Curves: flat to 64 nodes (a GPU running a 7B model); STree's linear SSM
  // fit t = k(N + 15) (from its Mamba2-2.7B ratio t(15)/t(5) = 1.5) and a
  // quadratic hybrid fit with t(15)/t(5) = 1.1 (MambaInLlama-8B).
  struct curve {
    const char* name;
    std::vector<double> n, t;
  };
  std::vector<curve> curves{
      {"flat to 64", {1, 64, 128}, {1.0, 1.0, 2.0}}, {"linear k(N+15)", {}, {}}, {"quadratic hybrid", {}, {}}};
  for (int N = 1; N <= 64; ++N) {
    curves[1].n.push_back(N);
    curves[1].t.push_back((N + 15.0) / 16.0);
    curves[2].n.push_back(N);
    curves[2].t.push_back(1.0 + 0.004 * N + 0.0008 * N * N);
  }
  const true_acceptance a;
  for (const auto& c : curves) {
    round_planner p(planner_options{.max_nodes = 64, .max_depth = 10, .forget = 0.995});
    REQUIRE(p.set_target_cost(c.n, c.t).ok());
    REQUIRE(p.set_drafter_cost(0.0, 0.02, 0.001).ok());
    REQUIRE(p.set_loop_cost(0.0, 0.0).ok());
    const auto s = simulate(p, a, 4000, 3);
    std::printf("planner %-18s tokens/round predicted %.3f simulated %.3f; s/token predicted %.4f simulated %.4f\n",
                c.name, s.predicted_tokens, s.tokens_per_round, s.predicted_seconds_per_token, s.seconds_per_token);
    CHECK(s.predicted_tokens == Approx(s.tokens_per_round).epsilon(0.06));
    CHECK(s.predicted_seconds_per_token == Approx(s.seconds_per_token).epsilon(0.06));
  }
}

TEST_CASE("planner: fixed plan and chosen plans are drafted as planned") {
  looptest::level_drafter ld{{.V = 20, .seed = 5}};
  planned_tree_builder b(planned_tree_options{.planner = {.max_nodes = 8}, .vocab_size = 20});
  const node_id fixed[] = {-1, 0, 0, 1};
  REQUIRE(b.planner().fix_plan(fixed).ok());
  draft_round r;
  r.root_token = 3;
  drafted_tree out;
  REQUIRE(b.build(ld, r, out).ok());
  CHECK(out.size() == 4);
  CHECK(b.last_plan().kind == plan_kind::fixed);
  CHECK(out.tree.parent(3) == 1);
  REQUIRE(b.planner().fix_plan({}).ok());
  (void)b.planner().next();  // a plan stays pending until observe(); ask for a new one
  REQUIRE(b.build(ld, r, out).ok());
  CHECK(b.last_plan().kind != plan_kind::fixed);
  // A chain may be drafted past its plan for the confidence stop; other shapes are not.
  CHECK(out.size() <= (b.last_plan().kind == plan_kind::chain ? b.node_bound() : b.last_plan().nodes));
}

TEST_CASE("planner: the confidence stop cuts only past the planned depth, where the path's reach does not pay") {
  const double n[] = {1, 16}, t[] = {1.0, 1.6};
  const auto make = [&](bool stop) {
    round_planner p({.max_nodes = 16, .prior_accept = 0.9, .confidence_stop = stop, .draft_bonus = 0.0});
    REQUIRE(p.set_target_cost(n, t).ok());
    REQUIRE(p.set_drafter_cost(0.01, 0.02, 0.0).ok());
    REQUIRE(p.set_loop_cost(0.0, 0.0).ok());
    return p;
  };
  round_planner p = make(true);
  const std::int32_t L = p.next().summary.depth;
  REQUIRE(L >= 1);
  // Confident planned levels are kept; past them a child with no chance is
  // refused and a confident one kept.
  // Nodes above the planned depth are expanded whatever their confidence;
  // the node at it only when its confident child would pay for the level.
  p.start_draft();
  for (std::int32_t d = 1; d <= L; ++d) {
    CHECK(p.expand_node(d - 1, d - 1, 0.0f));
    CHECK(p.keep_child(d - 1, d, 1.0f));
  }
  CHECK(p.expand_node(L, L, 1.0f));
  CHECK_FALSE(p.expand_node(L, L, 0.0f));
  CHECK_FALSE(p.expand_node(L + 5, L, 1.0f));  // a node not kept this round
  CHECK_FALSE(p.keep_child(L, L + 1, 0.0f));
  CHECK(p.keep_child(L, L + 1, 1.0f));
  CHECK_FALSE(p.keep_child(L + 5, L + 1, 1.0f));  // a parent not kept this round
  // The planned depth is drafted whatever the confidences; below weak
  // planned levels the path's reach is too small for a confident child,
  // nor worth drafting.
  p.start_draft();
  for (std::int32_t d = 1; d <= L; ++d) CHECK(p.keep_child(d - 1, d, 0.0f));
  CHECK_FALSE(p.expand_node(L, L, 1.0f));
  CHECK_FALSE(p.keep_child(L, L + 1, 1.0f));
  // No stop without the option, and none for a fixed plan.
  round_planner off = make(false);
  (void)off.next();
  off.start_draft();
  CHECK(off.keep_child(0, 1, 0.0f));
  CHECK(off.keep_child(1, 40, 0.0f));
  CHECK(off.expand_node(1, 40, 0.0f));
  const node_id fixed[] = {-1, 0};
  REQUIRE(p.fix_plan(fixed).ok());
  (void)p.next();
  p.start_draft();
  CHECK(p.keep_child(0, 1, 0.0f));
  CHECK(p.keep_child(1, 2, 0.0f));
  CHECK(p.expand_node(1, 1, 0.0f));
}

namespace {
// Every row puts probability q on one token (the depth's) and shares the
// rest; before any feedback the calibration reads a draft's chance as q.
struct conf_drafter {
  float q = 0.5f;
  int calls = 0;
  std::vector<float> rows{};
  status level_probabilities(const draft_level& l, view2d<const float>& out) {
    ++calls;
    constexpr int V = 8;
    rows.assign(l.nodes.size() * V, (1.0f - q) / (V - 1));
    for (std::size_t i = 0; i < l.nodes.size(); ++i) rows[i * V + static_cast<std::size_t>(l.depth % V)] = q;
    out = make_view<const float>(rows.data(), static_cast<std::int64_t>(l.nodes.size()), V);
    return status::success();
  }
};
// Chains only, with injected costs that make the chain of two drafts the plan.
planned_tree_builder stop_chain_builder(draft_mode mode, bool stop = true) {
  planned_tree_builder b({.planner = {.max_nodes = 16,
                                      .max_depth = 12,
                                      .max_children = 1,
                                      .prior_accept = 0.9,
                                      .confidence_stop = stop,
                                      .stop_extend = 2,
                                      .draft_bonus = 0.0},
                          .mode = mode,
                          .vocab_size = 8});
  const double n[] = {1, 2, 3, 4, 16}, t[] = {1.0, 1.1, 1.2, 3.0, 10.0};
  throw_if_error(b.planner().set_target_cost(n, t));
  throw_if_error(b.planner().set_drafter_cost(0.0, 0.01, 0.0));
  throw_if_error(b.planner().set_loop_cost(0.0, 0.0));
  return b;
}
}  // namespace

TEST_CASE("planner: the confidence stop drafts no level it would refuse; sampled chains keep every child drawn") {
  // Confident rows: the chain of two planned drafts runs stop_extend levels
  // past its plan, one drafter call per level. Weak rows, greedy: the level
  // past the plan is not even drafted (the builder used to call the drafter
  // for it and then refuse its child). Weak rows, i.i.d. (each level draws
  // the row's confident token or another): after the first draft no level
  // pays, not even the planned second. A chain ends where a level was not
  // drafted: no drawn child is refused.
  for (const draft_mode mode : {draft_mode::deterministic, draft_mode::iid})
    for (const float q : {0.999f, 0.3f}) {
      planned_tree_builder b = stop_chain_builder(mode);
      conf_drafter d{.q = q};
      draft_round r;
      r.root_token = 1;
      r.rng = rng_stream{20261204, 0, 0};
      drafted_tree out;
      REQUIRE(b.build(d, r, out).ok());
      REQUIRE(b.last_plan().kind == plan_kind::chain);
      const std::int32_t planned = b.last_plan().depth, drafted = out.tree.depth(out.size() - 1);
      INFO(draft_mode_name(mode) << ", q " << q << ", planned depth " << planned << ", drafted " << drafted
                                 << ", drafter calls " << d.calls);
      CHECK(planned == 2);
      CHECK(drafted == (q > 0.5f ? planned + 2 : mode == draft_mode::deterministic ? planned : 1));
      CHECK(d.calls == drafted);
      for (node_id u = 1; u < out.size(); ++u) CHECK(out.tree.parent(u) == u - 1);
    }
  // Without the option the plan is drafted as it is.
  planned_tree_builder off = stop_chain_builder(draft_mode::iid, false);
  conf_drafter d{.q = 0.3f};
  drafted_tree out;
  REQUIRE(off.build(d, draft_round{.root_token = 1}, out).ok());
  CHECK(off.last_plan().depth == 2);
  CHECK(out.tree.depth(out.size() - 1) == 2);
}

TEST_CASE("planned greedy sessions equal plain greedy decoding; same seed and injected costs, same output") {
  const looptest::table tm{.V = 50, .seed = 3, .zero_frac = 0.0};
  const std::vector<token_id> prompt = {4, 8, 15};
  const auto ref = looptest::greedy_decode(tm, prompt, 120);
  looptest::level_drafter close{{.V = 50, .seed = 3, .zero_frac = 0.0}};  // the target itself: accepts all
  looptest::level_drafter far{{.V = 50, .seed = 9, .zero_frac = 0.0}};
  // A greedy planned session of max_tokens; flat injected pass cost: the
  // plans do not depend on this machine's timing.
  const auto greedy_session = [](std::int32_t max_tokens) {
    session_options o;
    o.vocab_size = 50;
    o.max_tokens = max_tokens;
    o.sampling.temperature = 0.0f;
    planned_tree_builder b({.planner = {.max_nodes = 16}, .vocab_size = 50});
    const double n[] = {1, 16}, t[] = {1.0, 1.2};
    REQUIRE(b.planner().set_target_cost(n, t).ok());
    REQUIRE(b.planner().set_drafter_cost(0.0, 0.05, 0.0).ok());
    REQUIRE(b.planner().set_loop_cost(0.0, 0.0).ok());
    return speculative_session(std::move(b), o);
  };
  for (auto* d : {&close, &far}) {
    looptest::target tgt{tm};
    auto s = greedy_session(120);
    const auto out = s.generate(*d, tgt, prompt);
    CHECK(std::vector<token_id>(out.begin(), out.end()) == ref);
    CHECK(s.last_round().plan.kind != plan_kind::none);
    std::printf("planned greedy (%s drafter): %lld rounds for 120 tokens\n", d == &close ? "exact" : "unrelated",
                static_cast<long long>(s.stats().rounds));
    if (d == &close) CHECK(s.stats().rounds < 60);
  }
  {
    // The session reports the tokens left under max_tokens: every round
    // after the first drafts no deeper than can be emitted.
    constexpr std::int32_t limit = 23;
    looptest::target tgt{tm};
    auto s = greedy_session(limit);
    REQUIRE(s.start(prompt).ok());
    std::int32_t deepest = 0;
    for (int r = 0; !s.done(); ++r) {
      const auto left = limit - static_cast<std::int32_t>(s.generated_tokens().size());
      REQUIRE(s.round(close, tgt).ok());
      deepest = std::max(deepest, s.last_round().tree_depth);
      INFO("round " << r << ", " << left << " tokens left");
      if (r > 0) CHECK(s.last_round().tree_depth <= left - 1);
    }
    CHECK(deepest >= 4);  // the limit, not the plan, was what bound the last rounds
    CHECK(std::vector<token_id>(s.generated_tokens().begin(), s.generated_tokens().end()) ==
          std::vector<token_id>(ref.begin(), ref.begin() + limit));
  }
  // Injected costs: the plans depend only on what verification accepted.
  session_options o;
  o.vocab_size = 20;
  o.max_tokens = 60;
  o.sampling.temperature = 1.0f;
  o.seed = 42;
  std::vector<std::vector<token_id>> outs;
  std::vector<std::vector<std::int32_t>> sizes;
  for (int run = 0; run < 2; ++run) {
    looptest::target tgt{{.V = 20, .seed = 3}};
    looptest::level_drafter ld{{.V = 20, .seed = 4}};
    planned_tree_builder b({.planner = {.max_nodes = 12}, .mode = draft_mode::iid, .vocab_size = 20});
    const double n[] = {1, 4, 12}, t[] = {1.0, 1.4, 3.0};
    REQUIRE(b.planner().set_target_cost(n, t).ok());
    REQUIRE(b.planner().set_drafter_cost(0.01, 0.05, 0.01).ok());
    REQUIRE(b.planner().set_loop_cost(0.02, 0.001).ok());
    speculative_session s(std::move(b), o);
    REQUIRE(s.start(std::vector<token_id>{1, 2, 3}).ok());
    std::vector<std::int32_t> sz;
    while (!s.done()) {
      REQUIRE(s.round(ld, tgt).ok());
      sz.push_back(s.last_round().tree_nodes);
    }
    outs.emplace_back(s.generated_tokens().begin(), s.generated_tokens().end());
    sizes.push_back(sz);
  }
  CHECK(outs[0] == outs[1]);
  CHECK(sizes[0] == sizes[1]);
}

TEST_CASE("batched planned sessions: one plan per request under the node budget, greedy equals plain decoding") {
  const looptest::table tm{.V = 40, .seed = 3, .zero_frac = 0.0};
  const std::vector<std::vector<token_id>> prompts = {{1, 2}, {5, 6, 7}, {9}};
  std::vector<planned_tree_builder> builders;
  std::vector<session_options> opts;
  for (std::size_t r = 0; r < prompts.size(); ++r) {
    builders.emplace_back(planned_tree_options{.planner = {.max_nodes = 16}, .vocab_size = 40});
    const double n[] = {1, 64}, t[] = {1.0, 1.5};
    REQUIRE(builders.back().planner().set_target_cost(n, t).ok());
    session_options o;
    o.vocab_size = 40;
    o.max_tokens = 50;
    o.sampling.temperature = 0.0f;
    o.request = static_cast<std::uint32_t>(r);
    opts.push_back(o);
  }
  batched_session s(std::move(builders), opts);
  s.set_node_budget(10);
  looptest::batch_target tgt{{.V = 40, .seed = 3, .zero_frac = 0.0}};
  tgt.cache.assign(prompts.size(), std::vector<std::int32_t>(512, 0));
  tgt.len.assign(prompts.size(), 0);
  for (std::size_t r = 0; r < prompts.size(); ++r) REQUIRE(s.start(r, prompts[r]).ok());
  looptest::level_drafter ld{{.V = 40, .seed = 3, .zero_frac = 0.0}};
  int rounds = 0;
  while (!s.done()) {
    std::vector<std::int64_t> left;  // per active request, in order: tokens it may still emit
    for (std::size_t r = 0; r < prompts.size(); ++r)
      if (!s.done(r)) left.push_back(50 - static_cast<std::int64_t>(s.generated_tokens(r).size()));
    REQUIRE(s.round(ld, tgt).ok());
    CHECK(s.last_round().tree_nodes <= 10);
    CHECK(s.last_plans().size() <= prompts.size());
    // After each request's first round, no plan drafts deeper than can be emitted.
    for (std::size_t b = 0; b < s.last_plans().size() && rounds > 0; ++b) CHECK(s.last_plans()[b].depth <= left[b] - 1);
    ++rounds;
  }
  for (std::size_t r = 0; r < prompts.size(); ++r) {
    const auto ref = looptest::greedy_decode(tm, prompts[r], 50);
    const auto got = s.generated_tokens(r);
    CHECK(std::vector<token_id>(got.begin(), got.end()) == ref);
  }
  CHECK(rounds < 50);  // speculation paid: fewer rounds than tokens
}

namespace {
// A planned builder that keeps what the session fed its planner.
struct recording_builder : planned_tree_builder {
  using planned_tree_builder::planned_tree_builder;
  struct round {
    std::vector<node_id> parent, path;
    std::vector<float> accept;
  };
  std::vector<round> rounds;
  status observe(const round_feedback& f) {
    rounds.push_back({std::vector<node_id>(f.tree.parent, f.tree.parent + f.tree.size),
                      std::vector<node_id>(f.path.begin(), f.path.end()),
                      std::vector<float>(f.accept_prob.begin(), f.accept_prob.end())});
    return planned_tree_builder::observe(f);
  }
};
static_assert(round_observing_builder<recording_builder>);

// Over the recorded rounds: the root's first child's chance of acceptance
// (mean) against how often it was accepted, as a z score; and whether every
// drafted round carried one entry per node, known (in [0, 1]) exactly for
// the first children of path nodes.
double first_child_z(const std::vector<recording_builder::round>& rounds, bool& shaped, int& n) {
  double chance = 0.0, hits = 0.0;
  n = 0;
  shaped = true;
  for (const auto& r : rounds) {
    if (r.parent.size() < 2) {
      shaped &= r.accept.empty();
      continue;
    }
    shaped &= r.accept.size() == r.parent.size();
    if (!shaped) return 0.0;
    for (std::size_t c = 1; c < r.parent.size(); ++c) {
      const node_id u = r.parent[c];
      const bool on_path = std::find(r.path.begin(), r.path.end(), u) != r.path.end();
      bool first = true;
      for (std::size_t k = 1; k < c; ++k) first &= r.parent[k] != u;
      const bool known = on_path && first;
      shaped &= known ? (r.accept[c] >= 0.0f && r.accept[c] <= 1.0f) : r.accept[c] == -1.0f;
    }
    for (std::size_t c = 1; c < r.parent.size(); ++c)
      if (r.parent[c] == 0) {  // the root's first child
        chance += r.accept[c];
        hits += r.path.size() > 1 && r.path[1] == static_cast<node_id>(c) ? 1.0 : 0.0;
        ++n;
        break;
      }
  }
  const double m = chance / n;
  return std::abs(hits / n - m) / std::sqrt(std::max(m * (1.0 - m), 1e-3) / n);
}
}  // namespace

TEST_CASE("sessions hand the planner each child's chance of acceptance at temperature > 0, none when greedy") {
  // Injected costs under which every round drafts: many drafted rounds.
  const auto builder = [](float temperature) {
    recording_builder b(planned_tree_options{.planner = {.max_nodes = 6, .max_children = 2},
                                             .mode = temperature == 0.0f ? draft_mode::deterministic : draft_mode::iid,
                                             .vocab_size = 20});
    const double n[] = {1, 6}, t[] = {1.0, 1.05};
    REQUIRE(b.planner().set_target_cost(n, t).ok());
    REQUIRE(b.planner().set_drafter_cost(0.0, 0.01, 0.0).ok());
    REQUIRE(b.planner().set_loop_cost(0.0, 0.0).ok());
    return b;
  };
  for (const float temperature : {1.0f, 0.0f}) {
    session_options o;
    o.vocab_size = 20;
    o.max_tokens = 1500;
    o.sampling.temperature = temperature;
    o.seed = 21;
    looptest::target tgt{{.V = 20, .seed = 3}};
    looptest::level_drafter ld{{.V = 20, .seed = 4}};
    speculative_session s(builder(temperature), o);
    REQUIRE(s.start(std::vector<token_id>{1, 2, 3}).ok());
    while (!s.done()) REQUIRE(s.round(ld, tgt).ok());
    const auto& rounds = s.builder().rounds;
    if (temperature == 0.0f) {
      CHECK(std::all_of(rounds.begin(), rounds.end(), [](const auto& r) { return r.accept.empty(); }));
      continue;
    }
    bool shaped = false;
    int n = 0;
    const double z = first_child_z(rounds, shaped, n);
    std::printf("session T=1 (seed 21): %d drafted rounds, first child chance vs frequency z = %.2f\n", n, z);
    CHECK(shaped);
    CHECK(n > 200);
    CHECK(z < 4.0);
  }
  // Batched: each request's planner gets its own round's chances.
  std::vector<recording_builder> builders;
  std::vector<session_options> opts;
  for (std::uint32_t r = 0; r < 2; ++r) {
    builders.push_back(builder(1.0f));
    session_options o;
    o.vocab_size = 20;
    o.max_tokens = 600;
    o.sampling.temperature = 1.0f;
    o.seed = 22;
    o.request = r;
    opts.push_back(o);
  }
  batched_session s(std::move(builders), opts);
  looptest::batch_target tgt{{.V = 20, .seed = 3}};
  tgt.cache.assign(2, std::vector<std::int32_t>(2048, 0));
  tgt.len.assign(2, 0);
  for (std::size_t r = 0; r < 2; ++r) REQUIRE(s.start(r, std::vector<token_id>{1, 2, 3}).ok());
  looptest::level_drafter ld{{.V = 20, .seed = 4}};
  while (!s.done()) REQUIRE(s.round(ld, tgt).ok());
  for (std::size_t r = 0; r < 2; ++r) {
    bool shaped = false;
    int n = 0;
    const double z = first_child_z(s.builder(r).rounds, shaped, n);
    std::printf("batched T=1 (seed 22), request %zu: %d drafted rounds, z = %.2f\n", r, n, z);
    CHECK(shaped);
    CHECK(n > 80);
    CHECK(z < 4.0);
  }
}

TEST_CASE("planner: counting the chance of acceptance beats the indicator on cold simulated requests") {
  // Cold 160-token requests on a CPU-like curve (t(2) = 1.5 t(1)) where a
  // chain of one pays 6% at the mean acceptance 0.7, the chance drawn per
  // round and level from a beta law (variance 0.04): the planner that
  // counts the chance learns sooner (bench_planner, BM_planner_expected).
  constexpr std::uint64_t seed = 5;
  std::printf("cold simulated requests seed=%llu\n", static_cast<unsigned long long>(seed));
  const looptest::cold_result indicator = looptest::cold_requests(false, 0.7, 150, seed);
  const looptest::cold_result expected = looptest::cold_requests(true, 0.7, 150, seed);
  REQUIRE(indicator.ok);
  REQUIRE(expected.ok);
  std::printf("cold simulated requests: %.4f (indicator) vs %.4f (chance) tokens per unit time over plain\n",
              indicator.speedup, expected.speedup);
  CHECK(expected.speedup > indicator.speedup + 0.008);
}

TEST_CASE("planner: no predicted time before a pass time is known") {
  // round_stats::plan reports predicted_seconds; before the first kept pass
  // (the first at a size is dropped) the planner's times are placeholders.
  round_planner p(planner_options{.max_nodes = 8, .max_depth = 2});
  const node_id root[1] = {-1};
  const node_id path[1] = {0};
  for (int i = 0; i < 3; ++i) {
    const round_plan plan = p.next();
    REQUIRE(plan.summary.nodes == 1);
    if (i < 2)
      CHECK(plan.summary.predicted_seconds == 0.0);
    else
      CHECK(plan.summary.predicted_seconds >= 1e-3);  // the kept 1 ms pass, plus the loop's fit
    round_feedback f;
    const token_id tok[1] = {0};
    f.tree = tree_view{tok, root, nullptr, nullptr, 1};
    f.path = path;
    f.forward_nodes = 1;
    f.forward_seconds = 1e-3;
    REQUIRE(p.observe(f).ok());
  }
  // An injected curve is a pass time from the start.
  round_planner q(planner_options{.max_nodes = 8, .max_depth = 2, .plain_first = 0});
  const double n[2] = {1, 8}, t[2] = {2e-3, 4e-3};
  REQUIRE(q.set_target_cost(n, t).ok());
  CHECK(q.next().summary.predicted_seconds >= 2e-3);
}

TEST_CASE("planner: a planner that cannot draft (max_depth 0 or max_nodes 1) only steps plainly") {
  const true_acceptance a;
  std::mt19937_64 rng(20261129);
  for (const planner_options& o : {planner_options{.max_nodes = 16, .max_depth = 0, .probe_every = 8},
                                   planner_options{.max_nodes = 1, .max_depth = 4, .probe_every = 8}}) {
    round_planner p(o);
    int plain = 0;
    for (int i = 0; i < 300; ++i) {  // probes would be due every 8 to 64 rounds
      const simulated_round r = simulate_round(p, a, rng, [](round_feedback& f, const plan_summary&) {
        f.forward_seconds = 1e-4;  // speculation would pay if it could draft
      });
      plain += r.summary.nodes == 1 && r.summary.kind == plan_kind::autoregressive ? 1 : 0;
    }
    CHECK(plain == 300);
  }
}

TEST_CASE("planner: the plain step is timed first, probes run two rounds, plain streaks hold") {
  // Measured (not injected) costs where speculation loses: every node costs
  // a full step and each drafter level half of one.
  const true_acceptance a;
  std::mt19937_64 rng(20261125);
  const auto run = [&](round_planner& p, int rounds) {
    std::vector<std::int32_t> nodes;
    for (int i = 0; i < rounds; ++i) {
      std::int32_t n = 0;
      (void)simulate_round(p, a, rng, [&](round_feedback& f, const plan_summary& plan) {
        f.forward_seconds = 1e-3 * f.forward_nodes;
        f.drafter_calls = plan.depth;
        f.drafted_nodes = f.forward_nodes - 1;
        f.drafter_seconds = 0.5e-3 * plan.depth;
        n = f.forward_nodes;
      });
      nodes.push_back(n);
    }
    return nodes;
  };
  // An unbounded probe_budget: these probes are what the test looks at
  // (drafting loses here, so the default budget holds them back).
  round_planner p(planner_options{.max_nodes = 16, .max_depth = 4, .probe_budget = 1e9});
  const auto nodes = run(p, 400);
  // plain_first + 1 plain rounds (the first pass at a size is dropped), then exploration.
  const auto first = static_cast<std::size_t>(p.options().plain_first) + 1;
  for (std::size_t i = 0; i < first; ++i) CHECK(nodes[i] == 1);
  CHECK(nodes[first] > 1);
  CHECK(p.measured_sizes().front() == 1.0);
  // After exploration: plain streaks, broken only by two-round probes.
  int plain = 0, probes = 0;
  for (std::size_t i = 100; i < nodes.size(); ++i) {
    if (nodes[i] == 1) {
      ++plain;
      continue;
    }
    if (nodes[i - 1] == 1) {
      ++probes;
      CHECK(i + 1 < nodes.size());
      if (i + 1 < nodes.size()) CHECK(nodes[i + 1] > 1);  // the probe's second round
    }
  }
  std::printf("planner measured linear costs: %d plain rounds, %d probes in rounds 100-399\n", plain, probes);
  CHECK(plain >= 280);
  CHECK(probes >= 1);
  // plain_first = 0: the first round already explores.
  round_planner q(planner_options{.max_nodes = 16, .max_depth = 4, .plain_first = 0});
  CHECK(run(q, 1)[0] > 1);
}

namespace {

// Observes a round that verified the first n nodes of draft d (accepted
// `path`) with a pass costing 1 + 0.7 (n - 1) (a CPU engine's curve: extra
// nodes cost most of a token each); returns that cost.
double observe_prefix(round_planner& p, const drafted_tree& d, std::int32_t n, std::span<const node_id> path) {
  round_feedback f;
  f.tree = d.tree.view();
  f.tree.size = n;
  f.draft_prob = std::span<const float>(d.prob).first(static_cast<std::size_t>(n));
  f.path = path;
  f.forward_nodes = n;
  f.forward_seconds = 1.0 + 0.7 * (n - 1);
  REQUIRE(p.observe(f).ok());
  return f.forward_seconds;
}

// A model-free drafter whose chains come in two kinds: confident ones
// (q = 0.95 per node, each accepted with probability 0.95 once its parent
// is) and weak ones (q = 0.15, accepted with probability 0.15). Plans come
// from plan_drafted; passes cost as in observe_prefix.
struct drafted_run {
  double tokens = 0, seconds = 0;
  int strong = 0, strong_speculated = 0, weak = 0, weak_plain = 0;
};
drafted_run run_drafted(round_planner& p, int rounds, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> U(0.0, 1.0);
  const std::int32_t L = 6;
  drafted_tree d;
  drafted_run s;
  for (int r = 0; r < rounds; ++r) {
    const bool strong = U(rng) < 0.5;
    const float conf = strong ? 0.95f : 0.15f;
    d.reset(0);
    for (std::int32_t i = 1; i <= L; ++i)
      d.add(i - 1, i, conf, static_cast<float>(i) * std::log(conf), draft_mode::deterministic);
    round_plan plan;
    REQUIRE(p.plan_drafted(d, plan).ok());
    const auto n = static_cast<std::int32_t>(plan.shape.size());
    REQUIRE(n >= 1);
    for (std::int32_t i = 0; i < n; ++i) REQUIRE(plan.shape[static_cast<std::size_t>(i)] == i - 1);  // a prefix
    std::vector<node_id> path{0};
    while (static_cast<std::int32_t>(path.size()) < n && U(rng) < conf) path.push_back(path.back() + 1);
    const double seconds = observe_prefix(p, d, n, path);
    if (r < rounds / 4) continue;
    s.tokens += static_cast<double>(path.size());
    s.seconds += seconds;
    (strong ? s.strong : s.weak) += 1;
    if (strong && n > 1) ++s.strong_speculated;
    if (!strong && n == 1) ++s.weak_plain;
  }
  return s;
}

}  // namespace

TEST_CASE("planner: plan_drafted speculates on confident drafts and steps plainly on weak ones") {
  const std::uint64_t seed = 20261126;
  std::printf("[planner] plan_drafted seed=%llu\n", static_cast<unsigned long long>(seed));
  planner_options o;
  o.max_nodes = 16;
  o.probe_every = 0;  // no forced probes: every decision comes from the draft
  round_planner p(o);
  const double n[2] = {1.0, 16.0}, t[2] = {1.0, 11.5};
  REQUIRE(p.set_target_cost(n, t).ok());
  REQUIRE(p.set_loop_cost(0.0, 0.0).ok());
  const drafted_run s = run_drafted(p, 4000, seed);
  const double rate = s.tokens / s.seconds;
  std::printf(
      "[planner] plan_drafted: %.3f tokens per unit time (plain 1.000, best fixed chain < 1), "
      "confident drafts speculated %d/%d, weak drafts plain %d/%d\n",
      rate, s.strong_speculated, s.strong, s.weak_plain, s.weak);
  CHECK(s.strong_speculated >= 0.9 * s.strong);
  CHECK(s.weak_plain >= 0.9 * s.weak);
  // Speculating on confident drafts only: (6.03 + 1) / (5.2 + 1) = 1.13 per
  // unit time; every fixed chain length loses to plain decoding (1.0) here.
  CHECK(rate > 1.08);

  // Bad input: a clear status.
  round_plan plan;
  drafted_tree bad;
  CHECK(p.plan_drafted(bad, plan) == status_code::invalid_argument);  // no root
  bad.reset(0);
  bad.add(0, 1, 0.5f, std::log(0.5f), draft_mode::deterministic);
  bad.prob.pop_back();
  CHECK(p.plan_drafted(bad, plan) == status_code::size_mismatch);
  drafted_tree sampled;
  sampled.reset(0);
  sampled.add(0, 1, 0.5f, std::log(0.5f), draft_mode::iid);
  const status st = p.plan_drafted(sampled, plan);
  CHECK(st == status_code::invalid_argument);
  CHECK(st.index() == 0);
  drafted_tree ok;
  ok.reset(0);
  ok.add(0, 1, 0.5f, std::log(0.5f), draft_mode::deterministic);
  REQUIRE(p.plan_drafted(ok, plan).ok());
  CHECK(plan.shape.size() <= 2);
}

namespace {

// Text that alternates between phases of 150 rounds: novel (each drafted
// token accepted with probability 0.1 once its parent is) and copied (0.9).
// Every draft is a chain of 6 with the same count-based q = 0.5 predicting
// the next tokens of the text, so only what the planner learned tells the
// phases apart. A plain step emits the draft's first token with the phase's
// probability; with `report` the loop tells the planner (observe_skipped),
// which then also checks the rest of the chain on the next steps.
struct phased_run {
  double tokens = 0, seconds = 0;
  int novel_speculated = 0, copied_speculated = 0, novel = 0, copied = 0;
};
phased_run run_phased(round_planner& p, int rounds, std::uint64_t seed, bool report) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> U(0.0, 1.0);
  drafted_tree d;
  phased_run s;
  std::vector<token_id> text{0};  // token t at position t where the text follows the drafts; `other` elsewhere
  const token_id other = 1 << 30;
  for (int r = 0; r < rounds; ++r) {
    const bool copied = (r / 150) % 2 == 1;
    const double a = copied ? 0.9 : 0.1;
    const auto pos = static_cast<token_id>(text.size());
    d.reset(text.back());
    for (std::int32_t i = 1; i <= 6; ++i)
      d.add(i - 1, pos + i - 1, 0.5f, i * std::log(0.5f), draft_mode::deterministic);
    round_plan plan;
    REQUIRE(p.plan_drafted(d, plan).ok());
    const auto n = static_cast<std::int32_t>(plan.shape.size());
    std::vector<node_id> path{0};
    while (static_cast<std::int32_t>(path.size()) < n && U(rng) < a) path.push_back(path.back() + 1);
    const double seconds = observe_prefix(p, d, n, path);
    for (std::size_t i = 1; i < path.size(); ++i) text.push_back(pos + static_cast<token_id>(i) - 1);
    // The correction or plain token: the next drafted one (a plain step emits it with probability a) or another.
    const bool follows = n == 1 && U(rng) < a;
    text.push_back(follows ? pos : other);
    if (n == 1 && report) REQUIRE(p.observe_skipped(d, text.back()).ok());
    s.tokens += static_cast<double>(path.size());
    s.seconds += seconds;
    (copied ? s.copied : s.novel) += 1;
    if (n > 1) (copied ? s.copied_speculated : s.novel_speculated) += 1;
  }
  return s;
}

}  // namespace

TEST_CASE("planner: observe_skipped learns acceptance from plain steps") {
  const std::uint64_t seed = 20261128;
  std::printf("[planner] observe_skipped seed=%llu\n", static_cast<unsigned long long>(seed));
  const auto run = [&](double bonus, bool report) {
    planner_options o;
    o.max_nodes = 16;
    o.probe_every = 0;
    o.draft_bonus = bonus;
    round_planner p(o);
    const double n[2] = {1.0, 16.0}, t[2] = {1.0, 11.5};
    REQUIRE(p.set_target_cost(n, t).ok());
    REQUIRE(p.set_loop_cost(0.0, 0.0).ok());
    return run_phased(p, 1200, seed, report);
  };
  const phased_run skipped = run(0.0, true), blind = run(0.0, false), optimist = run(0.5, false);
  const auto show = [](const char* what, const phased_run& r) {
    std::printf("[planner] observe_skipped %s: %.3f tokens per unit time, speculated %d/%d copied and %d/%d novel\n",
                what, r.tokens / r.seconds, r.copied_speculated, r.copied, r.novel_speculated, r.novel);
  };
  show("reported, no bonus", skipped);
  show("not reported, no bonus (control)", blind);
  show("not reported, bonus 0.5", optimist);
  // Reported: speculates through most of the copied phases (it learns at
  // each phase's start), hardly in the novel ones. The best possible rate is
  // about 1.08: 6-chains in the copied phases give 5.2 tokens per 4.5 units.
  CHECK(skipped.copied_speculated >= 0.6 * skipped.copied);
  CHECK(skipped.novel_speculated <= 0.1 * skipped.novel);
  CHECK(skipped.tokens / skipped.seconds > 1.03);
  // Negative control: without reports and without optimism, the prior q = 0.5 never pays.
  CHECK(blind.copied_speculated == 0);
  // Optimism finds the copied phases too, but pays for it in the novel ones.
  CHECK(optimist.novel_speculated > skipped.novel_speculated);
  CHECK(skipped.tokens / skipped.seconds > optimist.tokens / optimist.seconds);

  round_planner p;
  drafted_tree bad;
  CHECK(p.observe_skipped(bad, 0) == status_code::invalid_argument);
  bad.reset(0);
  bad.add(0, 1, 0.5f, std::log(0.5f), draft_mode::deterministic);
  bad.prob.pop_back();
  CHECK(p.observe_skipped(bad, 1) == status_code::size_mismatch);
}

TEST_CASE("planner estimators: the skipped-draft follower offers what a brute-force replay offers") {
  // Random drafts (small vocabulary, so emitted tokens often match), random
  // speculative and unreported rounds. Reference: the draft followed kept as
  // a plain copy, each step listing the children of its node and of the new
  // draft's root, in id order, with the first one carrying the emitted token
  // accepted. Both feed an estimator; their estimates must be equal.
  std::mt19937_64 rng = looptest::seeded_rng("[planner] skipped-draft follower", 20261129);
  std::uniform_real_distribution<double> U(0.0, 1.0);
  detail::confidence_estimator got, want;
  got.reset(2.0, 0.0, 0.97);
  want.reset(2.0, 0.0, 0.97);
  detail::skipped_draft_follower follower;
  follower.reset();
  struct copy {
    std::vector<token_id> token;
    std::vector<node_id> parent;
    std::vector<float> prob;
  } followed;
  node_id at = -1;
  std::int32_t depth = 0;
  bool due = false;
  const auto children = [](const copy& c, node_id u) {
    std::vector<node_id> out;
    for (node_id i = 0; i < static_cast<node_id>(c.parent.size()); ++i)
      if (c.parent[static_cast<std::size_t>(i)] == u) out.push_back(i);
    return out;
  };
  // Offers the children of u at depth d; returns the accepted one or -1.
  const auto offer_children = [&](const copy& c, node_id u, std::int32_t d, token_id emitted) {
    node_id hit = -1;
    for (const node_id k : children(c, u)) {
      const bool ok = hit < 0 && c.token[static_cast<std::size_t>(k)] == emitted;
      want.offer(d, c.prob[static_cast<std::size_t>(k)], ok);
      if (ok) hit = k;
    }
    return hit;
  };
  drafted_tree d;
  int steps = 0, hits = 0;
  for (int round = 0; round < 3000; ++round) {
    const bool speculative = U(rng) < 0.1, reported = U(rng) < 0.9, state = U(rng) < 0.5;
    got.set_state(state);
    want.set_state(state);
    follower.round(speculative);
    if (speculative || due) at = -1;
    due = at >= 0;
    if (speculative || !reported) continue;
    d.reset(0);
    const int size = 1 + static_cast<int>(U(rng) * 12);
    for (int i = 1; i < size; ++i)
      d.add(static_cast<node_id>(U(rng) * i), static_cast<token_id>(U(rng) * 3), static_cast<float>(U(rng)), 0.0f,
            draft_mode::deterministic);
    const token_id emitted = static_cast<token_id>(U(rng) * 3);
    const bool predicted = follower.step(got, d.tree.view(), d.prob, emitted);
    bool ref_predicted = false;
    if (at >= 0 && due) {
      const node_id hit = offer_children(followed, at, ++depth, emitted);
      ref_predicted = hit >= 0;
      at = hit >= 0 && !children(followed, hit).empty() ? hit : -1;
    }
    due = false;
    const copy now{{d.tree.view().token, d.tree.view().token + d.size()},
                   {d.tree.view().parent, d.tree.view().parent + d.size()},
                   {d.prob.begin(), d.prob.end()}};
    const node_id hit = offer_children(now, 0, 1, emitted);
    ref_predicted = ref_predicted || hit >= 0;
    if (at < 0 && hit >= 0 && !children(now, hit).empty()) followed = now, at = hit, depth = 1;
    REQUIRE(predicted == ref_predicted);
    ++steps;
    hits += predicted ? 1 : 0;
    for (const bool st : {false, true}) {
      got.set_state(st);
      want.set_state(st);
      for (std::int32_t dd = 1; dd <= 5; ++dd)
        for (const float q : {0.05f, 0.3f, 0.5f, 0.8f, 1.0f}) REQUIRE(got.at(q, dd) == want.at(q, dd));
    }
  }
  std::printf("[planner] skipped-draft follower: %d reported steps, %d emitted a drafted token\n", steps, hits);
  CHECK(hits > steps / 10);  // the replay exercised matches, not only misses
}

TEST_CASE("planner estimators: drafter fit is the non-negative least-squares optimum; outliers are capped") {
  // Reference: projected gradient descent on the same (undecayed) normal
  // equations; the subset solution must reach its residual or better.
  std::mt19937_64 rng = looptest::seeded_rng("[planner] nnls", 20261126);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  int clamp_worse = 0;
  for (int trial = 0; trial < 200; ++trial) {
    INFO("trial " << trial);
    detail::decayed_regression<4> fit, incremental;  // incremental: solved after every sample (warm starts)
    std::vector<std::array<double, 4>> xs;
    std::vector<double> ys;
    double truth[4];
    for (double& t : truth) t = u(rng) < 0.4 ? -u(rng) : u(rng);  // some true weights negative
    for (int i = 0; i < 40; ++i) {
      const double lv = 1 + static_cast<int>(u(rng) * 6);
      std::array<double, 4> x{1.0, lv, lv + static_cast<int>(u(rng) * 4),
                              static_cast<double>(static_cast<int>(u(rng) * 3))};
      double y = 0;
      for (int k = 0; k < 4; ++k) y += truth[k] * x[k];
      y = std::max(y + 0.05 * (u(rng) - 0.5), 0.0);
      xs.push_back(x);
      ys.push_back(y);
      const double xv[4] = {x[0], x[1], x[2], x[3]};
      fit.add(xv, y, 1.0);  // no decay, no cap: plain NNLS over all samples
      incremental.add(xv, y, 1.0);
      (void)incremental.weights();
    }
    auto sse = [&](const double* w) {
      double s = 0;
      for (std::size_t i = 0; i < xs.size(); ++i) {
        double p = 0;
        for (int k = 0; k < 4; ++k) p += w[k] * xs[i][k];
        s += (p - ys[i]) * (p - ys[i]);
      }
      return s;
    };
    const double* w = fit.weights();
    for (int k = 0; k < 4; ++k) CHECK(w[k] >= 0.0);
    double ref[4] = {0, 0, 0, 0};
    for (int it = 0; it < 200000; ++it) {
      double g[4] = {0, 0, 0, 0};
      for (std::size_t i = 0; i < xs.size(); ++i) {
        double p = -ys[i];
        for (int k = 0; k < 4; ++k) p += ref[k] * xs[i][k];
        for (int k = 0; k < 4; ++k) g[k] += p * xs[i][k];
      }
      for (int k = 0; k < 4; ++k) ref[k] = std::max(ref[k] - 2e-4 * g[k], 0.0);
    }
    double syy = 0;
    for (const double y : ys) syy += y * y;
    CHECK(sse(w) <= sse(ref) + 1e-6 * syy);  // the ridge is 1e-6 of the largest diagonal
    // Starting from the last sample's support gives the same optimum as the
    // search over every support.
    const double* wi = incremental.weights();
    for (int k = 0; k < 4; ++k) CHECK(wi[k] == Approx(w[k]).margin(1e-9));
    // Negative control: the unconstrained solution clamped at zero (the old fit).
    double a[4][5] = {};
    for (std::size_t i = 0; i < xs.size(); ++i)
      for (int r = 0; r < 4; ++r) {
        for (int c = 0; c < 4; ++c) a[r][c] += xs[i][r] * xs[i][c];
        a[r][4] += xs[i][r] * ys[i];
      }
    for (int col = 0; col < 4; ++col)
      for (int r = 0; r < 4; ++r)
        if (r != col) {
          const double f = a[r][col] / a[col][col];
          for (int c = col; c < 5; ++c) a[r][c] -= f * a[col][c];
        }
    double clamped[4];
    for (int k = 0; k < 4; ++k) clamped[k] = std::max(a[k][4] / a[k][k], 0.0);
    if (sse(clamped) > 1.01 * sse(ref) + 1e-6 * syy) ++clamp_worse;
  }
  std::printf("[planner] clamped least squares worse than NNLS in %d of 200 trials\n", clamp_worse);
  CHECK(clamp_worse > 20);
  // A chain's levels equal its expanded nodes (collinear): the prediction is
  // right whatever the split. 10 us per level, 20 us per round.
  detail::decayed_regression<4> chain;
  for (int i = 0; i < 50; ++i) {
    const double lv = 1 + i % 5;
    const double x[4] = {1.0, lv, lv, 1.0};
    chain.add(x, 20e-6 + 10e-6 * lv, 0.99);
  }
  const double* w = chain.weights();
  CHECK(w[0] + w[3] + 4 * (w[1] + w[2]) == Approx(60e-6).epsilon(1e-3));
  // One sample 100x the others (a descheduled call) moves the fit by at most its 3x cap.
  const double x[4] = {1.0, 2.0, 2.0, 1.0};
  chain.add(x, chain.capped(x, 4e-3), 0.99);
  w = chain.weights();
  CHECK(w[0] + w[3] + 2 * (w[1] + w[2]) < 1.1 * 40e-6);
}

TEST_CASE("planner estimators: pass times of rarely seen sizes lean on the pooled line") {
  detail::pass_cost_table t;
  t.reset(16, 8, 0.5);
  // t(N) = 100 + 30 N us for N = 1..6, each seen 9 times (the first is dropped).
  for (int rep = 0; rep < 9; ++rep)
    for (int n = 1; n <= 6; ++n) t.add(n, (100 + 30 * n) * 1e-6);
  // Size 8 seen twice (one kept), at 3x its line value: a pass on evicted caches.
  t.add(8, 1e-3);
  t.add(8, 3 * 340e-6);
  t.refresh(0.25);
  CHECK(t.at(1) == Approx(130e-6).epsilon(0.03));
  CHECK(t.at(4) == Approx(220e-6).epsilon(0.03));
  // Its own window alone reads 1020 us; pooled with the line (which the
  // reweighting keeps near 30 us per node), about half of that.
  CHECK(t.at(8) < 560e-6);
  CHECK(t.at(8) > 340e-6);
  // Extrapolation follows the line's slope.
  CHECK(t.at(12) - t.at(8) > 4 * 25e-6);
  CHECK(t.at(12) - t.at(8) < 4 * 60e-6);
  for (int n = 1; n < 16; ++n) CHECK(t.at(n) <= t.at(n + 1));
  // The one-node level is the lower quartile of its window, not its median: half the plain steps slow (median
  // 200 us) do not move it, whatever cost_quantile the larger sizes use.
  detail::pass_cost_table q;
  q.reset(4, 8, 0.5);
  for (int rep = 0; rep < 9; ++rep) q.add(1, rep % 2 == 0 ? 300e-6 : 100e-6);
  q.refresh(0.25);
  CHECK(q.at(1) == Approx(100e-6));  // the median would read 200 us
}

TEST_CASE("planner estimators: a refresh that only rescales the level reads what pooling again reads") {
  // Most passes of steady speculation move only the level, and refresh()
  // then rescales the pooled ratios instead of pooling again. After every
  // pass, a table refreshed so must read exactly what one pooled in full
  // reads (refreshed at another prior first): through plain stretches (new
  // ratios stored), a size's first passes, a one-node window filling and full.
  std::mt19937_64 rng = looptest::seeded_rng("[planner] pass table refresh", 20261201);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (int trial = 0; trial < 50; ++trial) {
    INFO("trial " << trial);
    detail::pass_cost_table every, full;
    const auto window = static_cast<std::int32_t>(1 + u(rng) * 16);
    every.reset(12, window, 0.5);
    full.reset(12, window, 0.5);
    for (int i = 0; i < 300; ++i) {
      // Plain stretches of a few steps between speculative stretches of a few sizes.
      const bool plain = (i / 7) % 3 == 0 || u(rng) < 0.05;
      const auto n = plain ? 1 : static_cast<std::int32_t>(2 + u(rng) * (1 + i % 5));
      const double t = (50.0 + 20.0 * n) * (0.8 + 0.6 * u(rng)) * 1e-6;
      every.add(n, t);
      full.add(n, t);
      every.refresh(0.25);
      full.refresh(0.3);  // another prior pools again in full: the reference
      full.refresh(0.25);
      for (std::int32_t m = 1; m <= 12; ++m)  // NaN before a size is kept
        REQUIRE((every.at(m) == full.at(m) || (std::isnan(every.at(m)) && std::isnan(full.at(m)))));
    }
  }
}

TEST_CASE("planner estimators: a size reads the chosen quantile of its window, one node its lower quartile") {
  // A plain step of 100 us before each 2-node pass (so every ratio is
  // stored); eight 2-node passes kept (the first is dropped), `slow` of them
  // at 300 us, the rest at 200 us. The median (cost_quantile 0.5, the
  // default) reads a cost that most passes pay (caches the drafter
  // evicted), not one that a few pay; the lower quartile reads neither.
  const auto two_nodes = [](int slow, double quantile) {
    detail::pass_cost_table q;
    q.reset(4, 8, quantile);
    q.add(1, 1.0);  // dropped
    q.add(2, 1.0);  // dropped
    for (int k = 0; k < 8; ++k) {
      q.add(1, 100e-6);
      q.add(2, k < slow ? 300e-6 : 200e-6);
    }
    q.refresh(0.25);
    CHECK(q.at(1) == Approx(100e-6));
    return q.at(2);
  };
  CHECK(two_nodes(3, 0.5) == Approx(200e-6));
  CHECK(two_nodes(5, 0.5) == Approx(300e-6));
  CHECK(two_nodes(5, 0.25) == Approx(200e-6));
  CHECK(two_nodes(7, 0.25) == Approx(300e-6));
  CHECK(two_nodes(7, 0.0) == Approx(200e-6));
  CHECK(two_nodes(1, 1.0) == Approx(300e-6));
  // One node: the lower quartile whatever the quantile (five slow plain
  // steps of eight, as a request's first steps on caches its prefill
  // evicted, do not set the level).
  for (const double quantile : {0.0, 0.5, 1.0}) {
    detail::pass_cost_table q;
    q.reset(4, 8, quantile);
    q.add(1, 1.0);  // dropped
    for (int k = 0; k < 8; ++k) q.add(1, k < 5 ? 300e-6 : 100e-6);
    q.refresh(0.25);
    CHECK(q.at(1) == Approx(100e-6));
  }
  CHECK(planner_options{}.cost_quantile == 0.5);
}

TEST_CASE("planner estimators: the one-node time stays as measured when the curve bends at small sizes") {
  // t(1) = 100 us (two passes kept), t(2) / t(3) /
  // t(4) = 125 / 180 / 230 us (eight each): the line fitted through all four
  // crosses one node at 83 us. Pooled toward it, the plain step read 88.8
  // us, and every shape was priced against a plain step cheaper than it is.
  detail::pass_cost_table t;
  t.reset(8, 8, 0.5);
  for (int rep = 0; rep < 3; ++rep) t.add(1, 100e-6);
  const double curve[] = {0, 100e-6, 125e-6, 180e-6, 230e-6};
  for (int rep = 0; rep < 9; ++rep)
    for (int n = 2; n <= 4; ++n) t.add(n, curve[n]);
  t.refresh(0.25);
  CHECK(t.at(1) == Approx(100e-6).epsilon(0.01));
  CHECK(t.at(3) > 150e-6);
  CHECK(t.at(3) < 200e-6);
}

TEST_CASE("planner estimators: a size with a full window reads its own passes, a size seen once leans on the line") {
  // t(N) = 100 + 30 N us for N = 1, 2, 4, 5 (nine passes each, eight kept),
  // but t(3) = 215 us (25 us above that line, a full window, still below
  // t(4)): it must read 215, not a point pulled a third of the way to the
  // line.
  // Size 6, seen twice (one kept) at 400 us against the line's 280, still
  // leans on the line.
  detail::pass_cost_table t;
  t.reset(8, 8, 0.5);
  for (int rep = 0; rep < 9; ++rep)
    for (int n = 1; n <= 5; ++n) t.add(n, n == 3 ? 215e-6 : (100 + 30 * n) * 1e-6);
  t.add(6, 400e-6);
  t.add(6, 400e-6);
  t.refresh(0.25);
  CHECK(t.at(3) == Approx(215e-6).epsilon(0.005));
  CHECK(t.at(6) < 360e-6);
  CHECK(t.at(6) > 280e-6);
}

namespace {
// A pass-cost table (8 sizes, window 8) that saw sizes 1..6 nine times each
// at t(N) = 100 + 30 N us, a plain step before each round of the others.
detail::pass_cost_table linear_table() {
  detail::pass_cost_table t;
  t.reset(8, 8, 0.5);
  for (int rep = 0; rep < 9; ++rep)
    for (int n = 1; n <= 6; ++n) t.add(n, (100 + 30 * n) * 1e-6);
  return t;
}
}  // namespace

TEST_CASE("planner estimators: sizes measured long ago follow the speed of the size measured now") {
  auto t = linear_table();
  t.refresh(0.25);
  CHECK(t.at(4) == Approx(220e-6).epsilon(0.03));
  // The machine slows by 1.5x while only plain steps run.
  for (int rep = 0; rep < 100; ++rep) t.add(1, 1.5 * 130e-6);
  t.refresh(0.25);
  CHECK(t.at(1) == Approx(1.5 * 130e-6).epsilon(0.05));
  CHECK(t.at(4) == Approx(1.5 * 220e-6).epsilon(0.1));  // without the level: 220 us, a third too cheap
  CHECK(t.estimates()[3] == Approx(t.at(4)));
}

TEST_CASE("planner estimators: the one-node time follows the speed of the speculative passes measured now") {
  // The mirror case: passes slow by 1.3x (a longer context, another job)
  // or speed up to 0.7x while only 4-node chains run, no plain step. The
  // plain step must be priced at the new speed too: a one-node time kept
  // from before read 130 us, 23% cheap at 1.3x, and turned chains that paid
  // into plain decoding; at 0.7x, with half a window of ratios stored right
  // after the last plain step, the ratios absorbed the speed-up and the
  // plain step stayed at 130 us, 43% dear.
  for (const double speed : {1.3, 0.7}) {
    INFO("speed " << speed);
    auto t = linear_table();
    for (int rep = 0; rep < 100; ++rep) t.add(4, speed * 220e-6);
    t.refresh(0.25);
    CHECK(t.at(4) == Approx(speed * 220e-6).epsilon(0.05));
    CHECK(t.at(1) == Approx(speed * 130e-6).epsilon(0.05));  // before: 130 us
    CHECK(t.at(2) == Approx(speed * 160e-6).epsilon(0.05));
    // Plain steps measured again set it directly.
    for (int rep = 0; rep < 8; ++rep) t.add(1, 140e-6);
    t.refresh(0.25);
    CHECK(t.at(1) == Approx(140e-6).epsilon(0.01));
  }
}

namespace {
// Acceptance p(depth, rank) from a table, as the tree program reads it.
struct table_acceptance {
  std::int32_t K = 0;
  std::vector<double> p;  // [depth - 1][rank]
  double at(std::int32_t d, std::int32_t r) const { return p[static_cast<std::size_t>((d - 1) * K + r)]; }
};
// Every ordered tree of n nodes whose nodes have at most K children, as
// pre-order parent arrays.
std::vector<std::vector<node_id>> all_trees(std::int32_t n, std::int32_t K) {
  if (n == 1) return {{-1}};
  std::vector<std::vector<node_id>> out;
  // The root's children, in rank order, take sizes s_0, s_1, ... summing to n - 1.
  std::function<void(std::int32_t, std::int32_t, std::vector<node_id>&)> grow =
      [&](std::int32_t left, std::int32_t kids, std::vector<node_id>& t) {
        if (left == 0) {
          out.push_back(t);
          return;
        }
        if (kids == K) return;
        for (std::int32_t s = 1; s <= left; ++s)
          for (const auto& sub : all_trees(s, K)) {
            const auto base = static_cast<node_id>(t.size());
            t.push_back(0);
            for (std::size_t v = 1; v < sub.size(); ++v) t.push_back(base + sub[v]);
            grow(left - s, kids + 1, t);
            t.resize(static_cast<std::size_t>(base));
          }
      };
  std::vector<node_id> t{-1};
  grow(n - 1, 0, t);
  return out;
}
// Expected accepted drafts of a tree: the sum over non-root nodes of the
// product of p(depth, rank) along the path (-inf when deeper than L).
double tree_value(const std::vector<node_id>& parent, const table_acceptance& a, std::int32_t L, std::int32_t& deepest,
                  std::int32_t& expanded) {
  std::vector<std::int32_t> depth(parent.size(), 0), kids(parent.size(), 0);
  std::vector<double> reach(parent.size(), 1.0);
  double value = 0.0;
  deepest = expanded = 0;
  for (std::size_t v = 1; v < parent.size(); ++v) {
    const auto u = static_cast<std::size_t>(parent[v]);
    depth[v] = depth[u] + 1;
    if (depth[v] > L) return -std::numeric_limits<double>::infinity();
    reach[v] = reach[u] * a.at(depth[v], kids[u]++);
    value += reach[v];
    deepest = std::max(deepest, depth[v]);
  }
  for (const std::int32_t c : kids) expanded += c > 0 ? 1 : 0;
  return value;
}
}  // namespace

TEST_CASE("planner estimators: the tree program's optimum equals a brute-force search over every tree") {
  // Random acceptance tables (depth 1..L, ranks 0..K-1, zeros included),
  // every node count up to 9: the program's value must be the best over
  // every ordered tree of that many nodes (enumerated), and the tree it
  // emits must have that value, its depth and its expanded count.
  std::mt19937_64 rng = looptest::seeded_rng("[planner] tree program vs brute force", 20261130);
  std::uniform_real_distribution<double> U(0.0, 1.0);
  int compared = 0;
  for (int trial = 0; trial < 40; ++trial) {
    const std::int32_t L = 1 + static_cast<std::int32_t>(rng() % 4), K = 1 + static_cast<std::int32_t>(rng() % 3);
    const std::int32_t B = 9;
    table_acceptance a{K, {}};
    for (std::int32_t i = 0; i < L * K; ++i) a.p.push_back(trial % 5 == 0 && U(rng) < 0.3 ? 0.0 : U(rng));
    detail::tree_program prog;
    prog.solve(a, L, K, B);
    for (std::int32_t n = 1; n <= B; ++n) {
      std::int32_t d = 0, e = 0;
      double want = -std::numeric_limits<double>::infinity();
      for (const auto& t : all_trees(n, K)) want = std::max(want, tree_value(t, a, L, d, e));
      INFO("trial " << trial << ", L " << L << ", K " << K << ", n " << n);
      if (want == -std::numeric_limits<double>::infinity()) {
        CHECK(prog.value(n) == -std::numeric_limits<double>::infinity());
        continue;
      }
      REQUIRE(prog.value(n) == Approx(want).margin(1e-12));
      // The tree it emits: n nodes in pre-order, that value, its depth and expanded count.
      std::vector<node_id> parent;
      prog.emit(n, parent);
      REQUIRE(static_cast<std::int32_t>(parent.size()) == n);
      REQUIRE(validate_topological_parents(parent.data(), n).ok());
      CHECK(tree_value(parent, a, L, d, e) == Approx(want).margin(1e-12));
      CHECK(prog.depth(n) == d);
      CHECK(prog.expanded(n) == e);
      ++compared;
    }
  }
  std::printf("[planner] tree program: %d optima equal to the brute force\n", compared);
  CHECK(compared > 200);
}

TEST_CASE("planner: probe_budget holds probes back where drafting lost, not where it paid") {
  // 8 plain steps and 100 rounds of a fixed 3-node chain, then the planner
  // is free and every draft is rejected: it decodes plainly (after the
  // accepted chains, once its estimates fell: some 30 rejected rounds). A
  // pass costs 1 + 0.2 per extra node, the drafter 0.1 per level (injected,
  // or measured in ms): a rejected chain round costs 0.6 more than the plain
  // step it replaces, an accepted one 1.4 less than the three plain steps it
  // replaces. Probes come at their gaps after the accepted chains; after the
  // rejected ones, only with an unbounded budget (the negative control).
  const std::vector<node_id> root{-1}, chain{-1, 0, 1};
  const auto probe_rounds = [&](double first_acceptance, double budget, bool injected) {
    round_planner p(planner_options{.max_nodes = 16, .max_depth = 4, .probe_every = 64, .probe_budget = budget});
    if (injected) {
      const double n[] = {1, 16}, t[] = {1.0, 4.0};
      REQUIRE(p.set_target_cost(n, t).ok());
      REQUIRE(p.set_drafter_cost(0.0, 0.1, 0.0).ok());
      REQUIRE(p.set_loop_cost(0.0, 0.0).ok());
    }
    std::mt19937_64 rng(20261129);
    const auto fill = [](round_feedback& f, const plan_summary& plan) {
      f.forward_seconds = 1e-3 * (1.0 + 0.2 * (f.forward_nodes - 1));
      f.drafter_calls = plan.depth;
      f.drafted_nodes = f.forward_nodes - 1;
      f.drafter_seconds = 0.1e-3 * plan.depth;
    };
    REQUIRE(p.fix_plan(root).ok());  // plain steps first, as a request opens: their time is the reference
    for (int i = 0; i < 8; ++i) (void)simulate_round(p, always(first_acceptance), rng, fill);
    REQUIRE(p.fix_plan(chain).ok());
    for (int i = 0; i < 100; ++i) (void)simulate_round(p, always(first_acceptance), rng, fill);
    REQUIRE(p.fix_plan({}).ok());
    int drafted = 0;
    bool plain = false;  // drafted rounds after the first plain one: probes
    for (int i = 0; i < 200; ++i) {
      const bool d = simulate_round(p, always(0.0), rng, fill).summary.nodes > 1;
      plain = plain || !d;
      drafted += plain && d ? 1 : 0;
    }
    REQUIRE(plain);
    return drafted;
  };
  for (const bool injected : {true, false}) {
    const int lost = probe_rounds(0.0, 0.01, injected), lost_unbounded = probe_rounds(0.0, 1e9, injected),
              paid = probe_rounds(1.0, 0.01, injected);
    std::printf(
        "planner probe budget (%s costs): probe rounds in 200 after chains that lost: %d (unbounded budget: %d), "
        "after chains that paid: %d\n",
        injected ? "injected" : "measured", lost, lost_unbounded, paid);
    INFO((injected ? "injected" : "measured") << " costs");
    CHECK(lost == 0);
    CHECK(lost_unbounded >= 6);  // at least one probe
    CHECK(paid >= 6);
  }
}
