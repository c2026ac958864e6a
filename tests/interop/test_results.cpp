// Results in the caller's index space: SGLang outputs from a specdec path,
// FlashInfer's accepted/emitted counters against a transcription of its
// chain kernel loop and against specdec's verify_chain, per-depth counts.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "specdec/interop/results.hpp"
#include "specdec/verify/tree_verify.hpp"

using namespace specdec;

TEST_CASE("write_sglang_results scatters predicts and accept_index through the caller's maps") {
  // Path root(node 0) -> node 2 -> node 5; node -> slot and slot -> row maps.
  const std::vector<node_id> path = {0, 2, 5};
  const std::vector<token_id> tokens = {11, 12, 13};
  const std::vector<std::int32_t> node_slot = {0, 3, 1, 4, 5, 2};
  const std::vector<std::int64_t> slot_row = {60, 61, 62, 63, 64, 65};
  std::vector<int> ai(4, -1), pred(70, -1);
  int num = -1;
  REQUIRE(write_sglang_results<std::int64_t, int>(path, tokens, 2, node_slot, slot_row, ai, num, pred).ok());
  CHECK(num == 2);
  CHECK(ai == std::vector<int>{60, 61, 62, -1});
  CHECK(pred[60] == 11);
  CHECK(pred[61] == 12);
  CHECK(pred[62] == 13);
  std::vector<int> short_ai(2);
  CHECK(write_sglang_results<std::int64_t, int>(path, tokens, 2, node_slot, slot_row, short_ai, num, pred) ==
        status_code::buffer_too_small);
  std::vector<int> small_pred(61);
  CHECK(write_sglang_results<std::int64_t, int>(path, tokens, 2, node_slot, slot_row, ai, num, small_pred) ==
        status_code::out_of_range);
  std::vector<std::int64_t> per_depth(2, 0);
  count_acceptance_per_depth(3, per_depth);
  count_acceptance_per_depth(1, per_depth);
  CHECK(per_depth == std::vector<std::int64_t>{2, 1});
}

namespace {
// Transcription of FlashInfer's ChainSpeculativeSampling counters (its "q"
// is the target, its "p" the draft): accept while u * draft < target, then
// keep counting the later positions that would pass.
void reference_counts(const std::vector<token_id>& drafts, const std::vector<float>& target,
                      const std::vector<float>& draft, const std::vector<float>& u, int d, int& accepted,
                      int& emitted) {
  const auto g = static_cast<int>(drafts.size());
  int pos = g;
  for (int i = 0; i < g; ++i) {
    const auto id = static_cast<std::size_t>(drafts[static_cast<std::size_t>(i)]);
    const float q = target[static_cast<std::size_t>(i * d) + id], p = draft[static_cast<std::size_t>(i * d) + id];
    if (!(u[static_cast<std::size_t>(i)] * p < q)) {
      pos = i;
      break;
    }
  }
  emitted = pos;
  accepted = pos;
  for (int i = pos; i < g; ++i) {
    const auto id = static_cast<std::size_t>(drafts[static_cast<std::size_t>(i)]);
    if (u[static_cast<std::size_t>(i)] * draft[static_cast<std::size_t>(i * d) + id] <
        target[static_cast<std::size_t>(i * d) + id])
      ++accepted;
  }
}
}  // namespace

TEST_CASE("FlashInfer accepted_num next to the emitted count; emitted equals verify_chain's accepted") {
  std::mt19937_64 g(17);
  std::uniform_real_distribution<float> U(0.0f, 1.0f);
  int past_first = 0;
  for (int t = 0; t < 2000; ++t) {
    const int gamma = 1 + t % 6, V = 3 + t % 5;
    std::vector<float> p(static_cast<std::size_t>((gamma + 1) * V)), q(static_cast<std::size_t>(gamma * V));
    auto fill = [&](float* row) {
      float s = 0;
      for (int x = 0; x < V; ++x) s += (row[x] = U(g) < 0.2f ? 0.0f : U(g));
      if (s == 0) row[0] = s = 1;
      for (int x = 0; x < V; ++x) row[x] /= s;
    };
    for (int i = 0; i <= gamma; ++i) fill(p.data() + i * V);
    for (int i = 0; i < gamma; ++i) fill(q.data() + i * V);
    std::vector<token_id> drafts(static_cast<std::size_t>(gamma));
    // Drafts come from q, so q(x) > 0 (specdec rejects a draft with q(x) = 0
    // without dividing; FlashInfer's u * 0 < p would accept it).
    for (int i = 0; i < gamma; ++i) do
        drafts[static_cast<std::size_t>(i)] = static_cast<token_id>(g() % static_cast<std::uint64_t>(V));
      while (!(q[static_cast<std::size_t>(i * V + drafts[static_cast<std::size_t>(i)])] > 0.0f));
    verify_params vp;
    vp.seed = 5;
    vp.round = static_cast<std::uint32_t>(t);
    std::vector<float> coins(static_cast<std::size_t>(gamma));
    chain_coins(vp, coins);
    int ra = 0, re = 0;
    reference_counts(drafts, p, q, coins, V, ra, re);
    std::int32_t a = 0, e = 0;
    REQUIRE(chain_acceptance_counts(drafts, make_view<const float>(p.data(), gamma + 1, V),
                                    make_view<const float>(q.data(), gamma, V), coins, a, e)
                .ok());
    CHECK(a == ra);
    CHECK(e == re);
    past_first += a - e;
    // specdec's own chain verifier with the same key emits exactly `e` drafts
    // (the residual rows only matter after the first rejection).
    std::vector<std::byte> ws(verify_workspace_size(V, gamma + 1));
    std::vector<token_id> out(static_cast<std::size_t>(gamma) + 1);
    verify_result res;
    vp.normalization_tolerance = 1e-3f;
    REQUIRE(verify_chain(drafts, make_view<const float>(p.data(), gamma + 1, V),
                         make_view<const float>(q.data(), gamma, V), vp, ws, out, res)
                .ok());
    CHECK(res.accepted == e);
  }
  CHECK(past_first > 0);  // the statistic does count acceptances after a rejection
  const std::vector<token_id> bad = {9};
  std::vector<float> one(4, 0.25f), c1(1, 0.5f);
  std::int32_t a = 0, e = 0;
  CHECK(chain_acceptance_counts(bad, make_view<const float>(one.data(), 1, 4), make_view<const float>(one.data(), 1, 4),
                                c1, a, e) == status_code::token_out_of_range);
}

TEST_CASE("chain_acceptance_counts_batch equals per-chain calls; a bad request gets its code and writes nothing") {
  std::mt19937_64 g(29);
  std::uniform_real_distribution<float> U(0.0f, 1.0f);
  for (int t = 0; t < 50; ++t) {
    const int bs = 1 + t % 7, gamma = t % 5, V = 4 + t % 9;
    std::vector<float> p(static_cast<std::size_t>(bs * (gamma + 1) * V)), q(static_cast<std::size_t>(bs * gamma * V));
    for (auto& x : p) x = U(g);
    for (auto& x : q) x = U(g);
    std::vector<token_id> drafts(static_cast<std::size_t>(bs * gamma));
    for (auto& x : drafts) x = static_cast<token_id>(g() % static_cast<std::uint64_t>(V));
    if (bs > 2 && gamma > 0) drafts[static_cast<std::size_t>(2 * gamma)] = V;  // request 2: token out of range
    std::vector<float> coins(static_cast<std::size_t>(bs * (gamma + 1)));      // FlashInfer: gamma + 1 per request
    for (auto& x : coins) x = U(g);
    std::vector<std::int32_t> acc(static_cast<std::size_t>(bs), -1), emit(acc);
    std::vector<status_code> codes(static_cast<std::size_t>(bs));
    const chain_counts_batch b{bs,
                               gamma,
                               drafts.data(),
                               make_view<const float>(p.data(), bs, gamma + 1, V),
                               make_view<const float>(q.data(), bs, gamma, V),
                               coins.data(),
                               gamma + 1,
                               acc.data(),
                               emit.data()};
    REQUIRE(chain_acceptance_counts_batch(b, codes).ok());
    INFO("trial " << t << " bs " << bs << " gamma " << gamma);
    for (int r = 0; r < bs; ++r) {
      const auto ur = static_cast<std::size_t>(r);
      std::int32_t a = -1, e = -1;
      const status st = chain_acceptance_counts(
          std::span<const token_id>(drafts.data() + ur * static_cast<std::size_t>(gamma),
                                    static_cast<std::size_t>(gamma)),
          make_view<const float>(p.data() + ur * static_cast<std::size_t>((gamma + 1) * V), gamma + 1, V),
          make_view<const float>(q.data() + ur * static_cast<std::size_t>(gamma * V), gamma, V),
          std::span<const float>(coins.data() + ur * static_cast<std::size_t>(gamma + 1),
                                 static_cast<std::size_t>(gamma)),
          a, e);
      CHECK(codes[ur] == st.code());
      CHECK(acc[ur] == (st.ok() ? a : -1));
      CHECK(emit[ur] == (st.ok() ? e : -1));
    }
    if (bs > 2 && gamma > 0) {
      CHECK(codes[2] == status_code::token_out_of_range);
      const status first = chain_acceptance_counts_batch(b, {});
      CHECK(first.code() == status_code::token_out_of_range);
      CHECK(first.index() == 2);
    }
  }
  chain_counts_batch bad{};
  bad.num_requests = 1;
  CHECK(chain_acceptance_counts_batch(bad, {}) == status_code::invalid_argument);
  // Fewer rows per request than drafts (p or q): the whole batch is refused
  // before any request runs, and nothing is written.
  const int bs = 3, gamma = 4, V = 5;
  std::vector<float> rows(static_cast<std::size_t>(bs * (gamma + 1) * V), 0.5f),
      coins(static_cast<std::size_t>(bs * (gamma + 1)), 0.5f);
  std::vector<token_id> drafts(static_cast<std::size_t>(bs * gamma), 1);
  std::vector<std::int32_t> acc(static_cast<std::size_t>(bs), -1), emit(acc);
  for (const int short_p : {1, 0}) {
    const chain_counts_batch b{bs,
                               gamma,
                               drafts.data(),
                               make_view<const float>(rows.data(), bs, short_p ? gamma - 1 : gamma + 1, V),
                               make_view<const float>(rows.data(), bs, short_p ? gamma : gamma - 1, V),
                               coins.data(),
                               gamma + 1,
                               acc.data(),
                               emit.data()};
    std::vector<status_code> codes(static_cast<std::size_t>(bs), status_code::internal_error);
    CHECK(chain_acceptance_counts_batch(b, codes) == status_code::size_mismatch);
    CHECK(std::count(codes.begin(), codes.end(), status_code::internal_error) == bs);
    CHECK(std::count(acc.begin(), acc.end(), -1) == bs);
  }
}
