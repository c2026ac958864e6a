// Cold simulated requests for the round planner, shared by
// tests/loop/test_planner.cpp and benchmarks/bench_planner.cpp
// (BM_planner_expected): a new planner per 160-token request on the demo
// CPU's curve, injected (t(N) = t(1) (1 + 0.5 (N - 1)), drafter 0.1 t(1) per
// level); each drafted level accepted with a chance drawn per round from a
// beta law of mean `mean` and variance mean (1 - mean) / 5, the chance fed
// back as round_feedback::accept_prob.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "specdec/loop/planner.hpp"

namespace looptest {

struct cold_result {
  double speedup = 0.0;  // tokens per unit time over plain decoding (t(1) per token)
  double drafted = 0.0;  // share of rounds that drafted
  bool ok = true;        // every cost injection and observe() succeeded
};

inline cold_result cold_requests(bool expected, double mean, int requests, std::uint64_t seed) {
  constexpr double conc = 4.0;
  constexpr std::int64_t tokens_per_request = 160;
  std::mt19937_64 rng(seed);
  std::gamma_distribution<double> ga(mean * conc, 1.0), gb((1.0 - mean) * conc, 1.0);
  std::uniform_real_distribution<double> U(0.0, 1.0);
  std::vector<double> n, t;
  for (int k = 1; k <= 32; ++k) n.push_back(k), t.push_back(1.0 + 0.5 * (k - 1));
  std::vector<specdec::node_id> path;
  std::vector<specdec::token_id> tok;
  std::vector<float> chance;
  double tokens = 0.0, seconds = 0.0, rounds = 0.0, drafted = 0.0;
  cold_result res;
  for (int r = 0; r < requests; ++r) {
    specdec::round_planner p(specdec::planner_options{.expected_acceptance = expected});
    res.ok &= p.set_target_cost(n, t).ok() && p.set_drafter_cost(0.0, 0.1, 0.0).ok() && p.set_loop_cost(0.0, 0.0).ok();
    for (std::int64_t emitted = 0; emitted < tokens_per_request && res.ok;) {
      const specdec::round_plan plan = p.next();
      const std::span<const specdec::node_id> shape = plan.shape;
      const auto N = static_cast<std::int32_t>(shape.size());
      tok.assign(shape.size(), 0);
      chance.assign(shape.size(), -1.0f);
      path.assign(1, 0);
      for (;;) {  // the first child of each reached node, accepted with a fresh chance
        specdec::node_id c = -1;
        for (specdec::node_id k = path.back() + 1; k < N && c < 0; ++k)
          if (shape[static_cast<std::size_t>(k)] == path.back()) c = k;
        if (c < 0) break;
        const double a = ga(rng), s = a / (a + gb(rng));
        chance[static_cast<std::size_t>(c)] = static_cast<float>(s);
        if (!(U(rng) < s)) break;
        path.push_back(c);
      }
      specdec::round_feedback f;
      f.tree = specdec::tree_view{tok.data(), shape.data(), nullptr, nullptr, N};
      f.path = path;
      f.forward_nodes = N;
      f.forward_seconds = t[static_cast<std::size_t>(N - 1)];
      f.drafter_calls = plan.summary.depth;
      f.drafted_nodes = N - 1;
      f.drafter_seconds = 0.1 * plan.summary.depth;
      f.accept_prob = chance;
      emitted += static_cast<std::int64_t>(path.size());
      f.tokens_left = tokens_per_request - emitted;
      res.ok &= p.observe(f).ok();
      tokens += static_cast<double>(path.size());
      seconds += f.forward_seconds + f.drafter_seconds;
      rounds += 1.0;
      drafted += N > 1 ? 1.0 : 0.0;
    }
  }
  res.speedup = tokens / seconds;
  res.drafted = drafted / rounds;
  return res;
}

}  // namespace looptest
