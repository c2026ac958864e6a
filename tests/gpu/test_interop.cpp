// GPU twins of the peers' formats against their host twins: the kernels run
// the host's per-request SPECDEC_HD code (interop/sglang.hpp,
// interop/sglang_verify.hpp), so outputs, per-request status codes and
// per-depth counts must be identical, malformed requests included (their
// outputs stay untouched on both sides).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "gpu_util.hpp"
#include "interop/sglang_reference.hpp"
#include "specdec/interop/results.hpp"
#include "specdec/interop/sglang.hpp"
#include "specdec/interop/sglang_build_tree.hpp"
#include "specdec/interop/sglang_verify.hpp"
#include "specdec/kernels.hpp"

using namespace specdec;
using specdec_test::device_buffer;

namespace {

using I = std::int64_t;

// A random batch with some requests broken in the ways the checks catch.
sglang_ref::batch broken_batch(int bs, int n, int V, std::uint64_t seed) {
  sglang_ref::batch b = sglang_ref::make_batch(bs, n, V, seed, seed % 2 == 0);
  for (int r = 0; r < bs; ++r) {
    const auto o = static_cast<std::size_t>(r * n);
    switch (r % 9) {
      case 3:
        b.next[o] = n + 2;  // link out of range
        break;
      case 5:
        if (n > 2) b.sib[o + 1] = b.next[o + 1] >= 0 ? b.next[o + 1] : 2;  // a slot linked twice (or a stray link)
        break;
      case 7:
        if (n > 1) b.cand[o + static_cast<std::size_t>(n - 1)] = r % 2 == 0 ? -3 : V + 4;  // bad token
        break;
      default:
        break;
    }
  }
  return b;
}

struct host_outputs {
  std::vector<std::int32_t> predicts, accept_index, accept_num;
  host_outputs(int bs, int n, int num_spec)
      : predicts(static_cast<std::size_t>(bs * n), -5),
        accept_index(static_cast<std::size_t>(bs * num_spec), -1),
        accept_num(static_cast<std::size_t>(bs), -1) {}
};

struct device_outputs {
  device_buffer<std::int32_t> predicts, accept_index, accept_num, status;
  device_buffer<unsigned long long> per_depth;
  explicit device_outputs(const host_outputs& h, int bs, int counters)
      : predicts(h.predicts),
        accept_index(h.accept_index),
        accept_num(h.accept_num),
        status(std::vector<std::int32_t>(static_cast<std::size_t>(bs), -1)),
        per_depth(std::vector<unsigned long long>(static_cast<std::size_t>(counters), 0ull)) {}
  sglang_outputs<std::int32_t> view(int bs, int num_spec) const {
    return {std::span<std::int32_t>(predicts.data(), predicts.size()), make_view(accept_index.data(), bs, num_spec),
            std::span<std::int32_t>(accept_num.data(), accept_num.size())};
  }
};

struct device_tree {
  device_buffer<I> cand, ridx, next, sib;
  explicit device_tree(const sglang_ref::batch& b) : cand(b.cand), ridx(b.ridx), next(b.next), sib(b.sib) {}
  sglang_tree_batch<I> view(const sglang_ref::batch& b) const {
    return {b.bs, b.n, cand.data(), ridx.data(), next.data(), sib.data()};
  }
};

std::vector<float> random_rows(std::mt19937_64& g, int rows, int V) {
  std::uniform_real_distribution<float> U(0.0f, 1.0f);
  std::vector<float> p(static_cast<std::size_t>(rows) * static_cast<std::size_t>(V));
  for (int r = 0; r < rows; ++r) {
    float s = 0.0f;
    float* row = p.data() + static_cast<std::size_t>(r) * static_cast<std::size_t>(V);
    for (int x = 0; x < V; ++x) s += (row[x] = U(g) < 0.3f ? 0.0f : U(g));
    if (s == 0.0f) row[0] = s = 1.0f;
    for (int x = 0; x < V; ++x) row[x] /= s;
  }
  return p;
}

void compare(const host_outputs& want, const std::vector<std::int32_t>& want_status,
             const std::vector<std::int64_t>& want_depth, const device_outputs& got) {
  CHECK(got.status.download() == want_status);
  CHECK(got.predicts.download() == want.predicts);
  CHECK(got.accept_index.download() == want.accept_index);
  CHECK(got.accept_num.download() == want.accept_num);
  const auto d = got.per_depth.download();
  std::vector<std::int64_t> depth(d.begin(), d.end());
  CHECK(depth == want_depth);
}

}  // namespace

TEST_CASE("GPU sglang_verify_tree_greedy equals the host twin, malformed requests included") {
  for (std::uint64_t seed = 1; seed <= 24; ++seed) {
    std::mt19937_64 g(seed);
    const int bs = 1 + static_cast<int>(g() % 40), n = 1 + static_cast<int>(g() % 16), V = 8;
    const int num_spec = 1 + static_cast<int>(g() % static_cast<std::uint64_t>(n + 1));
    const sglang_ref::batch b = broken_batch(bs, n, V, seed);
    std::vector<I> target_predict(static_cast<std::size_t>(bs * n));
    for (auto& t : target_predict) t = static_cast<I>(g() % static_cast<std::uint64_t>(V));
    if (seed % 3 == 0) target_predict[0] = V + 100;  // an out-of-range id is still a valid int64
    const sglang_tree_batch<I> hb{bs, n, b.cand.data(), b.ridx.data(), b.next.data(), b.sib.data()};
    host_outputs want(bs, n, num_spec);
    const sglang_outputs<std::int32_t> hout{want.predicts, make_view(want.accept_index.data(), bs, num_spec),
                                            want.accept_num};
    std::vector<std::int32_t> want_status(static_cast<std::size_t>(bs));
    std::vector<std::int64_t> want_depth(static_cast<std::size_t>(n), 0);
    std::vector<std::byte> ws(detail::sglang_request_bytes(n) + workspace_alignment);
    workspace_carver c(unaligned_carver(ws.data(), ws.size()));
    const detail::sglang_scratch s = detail::carve_sglang(c, n);
    for (int r = 0; r < bs; ++r) {
      std::int32_t acc = 0;
      const status st =
          detail::sglang_greedy_request(hb, r, std::span<const I>(target_predict), num_spec, hout, s, acc);
      want_status[static_cast<std::size_t>(r)] = static_cast<std::int32_t>(st.code());
      if (st.ok()) count_acceptance_per_depth(acc, want_depth);
    }

    const device_tree dt(b);
    const device_buffer<I> dtp(target_predict);
    device_outputs got(host_outputs(bs, n, num_spec), bs, n);
    kernels::sglang_greedy_params<I, std::int32_t> p{};
    p.tree = dt.view(b);
    p.target_predict = std::span<const I>(dtp.data(), dtp.size());
    p.num_speculative_tokens = num_spec;
    p.out = got.view(bs, num_spec);
    p.request_status = got.status.data();
    p.accepted_per_depth = got.per_depth.data();
    p.depth_counters = n;
    REQUIRE(kernels::sglang_verify_tree_greedy_can_implement(p).ok());
    device_buffer<unsigned char> dws(kernels::sglang_verify_tree_greedy_workspace_size(p));
    REQUIRE(kernels::sglang_verify_tree_greedy(p, dws.data(), dws.size(), nullptr).ok());
    specdec_test::cuda_check(cudaDeviceSynchronize(), "sync");
    INFO("seed " << seed << " bs " << bs << " n " << n << " num_spec " << num_spec);
    compare(want, want_status, want_depth, got);

    // Refused before launching: no status array, a short workspace.
    kernels::sglang_greedy_params<I, std::int32_t> bad = p;
    bad.request_status = nullptr;
    CHECK(kernels::sglang_verify_tree_greedy(bad, dws.data(), dws.size(), nullptr) == status_code::invalid_argument);
    CHECK(kernels::sglang_verify_tree_greedy(p, dws.data(), dws.size() - 1, nullptr) == status_code::buffer_too_small);
  }
}

TEST_CASE("GPU sglang_tree_sampling_target_only equals the host twin (exact and lossy thresholds)") {
  for (std::uint64_t seed = 1; seed <= 16; ++seed) {
    std::mt19937_64 g(seed + 500);
    const int bs = 1 + static_cast<int>(g() % 24), n = 1 + static_cast<int>(g() % 12);
    // Rows of one, two and 32 tiles of 1024 (the block's tile order).
    const int V = seed % 4 == 1 ? 32000 : seed % 2 == 0 ? 50 : 2000;
    const int num_spec = 1 + static_cast<int>(g() % static_cast<std::uint64_t>(n + 1));
    const sglang_ref::batch b = broken_batch(bs, n, V, seed);
    std::vector<float> probs = random_rows(g, bs * n, V);
    if (bs > 1) probs[static_cast<std::size_t>(n) * static_cast<std::size_t>(V) + 1] = -0.5f;  // request 1: negative
    if (bs > 2) probs[2 * static_cast<std::size_t>(n) * static_cast<std::size_t>(V)] = std::nanf("");  // request 2: NaN
    std::uniform_real_distribution<float> U(0.0f, 1.0f);
    std::vector<float> coins(static_cast<std::size_t>(bs * n)), final_coins(static_cast<std::size_t>(bs));
    for (auto& x : coins) x = U(g);
    for (auto& x : final_coins) x = U(g);
    final_coins[0] = seed % 4 == 0 ? 0.0f : std::nextafter(1.0f, 0.0f);
    const sglang_thresholds th = seed % 3 == 0 ? sglang_thresholds{0.4f, 0.6f} : sglang_thresholds{};
    const float acc = th.threshold_acc;

    const sglang_tree_batch<I> hb{bs, n, b.cand.data(), b.ridx.data(), b.next.data(), b.sib.data()};
    host_outputs want(bs, n, num_spec);
    const sglang_outputs<std::int32_t> hout{want.predicts, make_view(want.accept_index.data(), bs, num_spec),
                                            want.accept_num};
    std::vector<std::int32_t> want_status(static_cast<std::size_t>(bs));
    std::vector<std::int64_t> want_depth(static_cast<std::size_t>(n), 0);
    std::vector<std::byte> ws(detail::sglang_sampling_request_bytes(n, V) + workspace_alignment);
    workspace_carver c(unaligned_carver(ws.data(), ws.size()));
    const detail::sglang_sampling_scratch s = detail::carve_sglang_sampling(c, n, V);
    const view2d<const float> hp = make_view<const float>(probs.data(), bs * n, V);
    for (int r = 0; r < bs; ++r) {
      std::int32_t a = 0;
      const status st =
          detail::sglang_sampling_request(hb, r, hp, coins.data(), final_coins[static_cast<std::size_t>(r)], num_spec,
                                          th.threshold_single, acc, hout, s, a);
      want_status[static_cast<std::size_t>(r)] = static_cast<std::int32_t>(st.code());
      if (st.ok()) count_acceptance_per_depth(a, want_depth);
    }

    const device_tree dt(b);
    const device_buffer<float> dprobs(probs), dcoins(coins), dfinal(final_coins);
    device_outputs got(host_outputs(bs, n, num_spec), bs, n);
    kernels::sglang_sampling_params<I, std::int32_t> p{};
    p.tree = dt.view(b);
    p.target_probs = make_view<const float>(dprobs.data(), bs * n, V);
    p.coins = std::span<const float>(dcoins.data(), dcoins.size());
    p.final_coins = std::span<const float>(dfinal.data(), dfinal.size());
    p.num_speculative_tokens = num_spec;
    p.thresholds = th;
    p.out = got.view(bs, num_spec);
    p.request_status = got.status.data();
    p.accepted_per_depth = got.per_depth.data();
    p.depth_counters = n;
    REQUIRE(kernels::sglang_tree_sampling_target_only_can_implement(p).ok());
    device_buffer<unsigned char> dws(kernels::sglang_tree_sampling_target_only_workspace_size(p));
    REQUIRE(kernels::sglang_tree_sampling_target_only(p, dws.data(), dws.size(), nullptr).ok());
    specdec_test::cuda_check(cudaDeviceSynchronize(), "sync");
    INFO("seed " << seed << " bs " << bs << " n " << n << " V " << V << " num_spec " << num_spec);
    compare(want, want_status, want_depth, got);

    kernels::sglang_sampling_params<I, std::int32_t> bad = p;
    bad.thresholds.threshold_acc = 0.0f;
    CHECK(kernels::sglang_tree_sampling_target_only(bad, dws.data(), dws.size(), nullptr) ==
          status_code::invalid_argument);
    bad = p;
    bad.coins = bad.coins.first(bad.coins.size() - 1);
    CHECK(kernels::sglang_tree_sampling_target_only(bad, dws.data(), dws.size(), nullptr) ==
          status_code::size_mismatch);
  }
}

TEST_CASE("GPU sglang_verify_tree equals the host sglang_verify_tree, every supported mode") {
  const verify_mode modes[] = {
      verify_mode::greedy,        verify_mode::sampled_iid,    verify_mode::sampled_without_replacement,
      verify_mode::deterministic, verify_mode::naive_matching, verify_mode::traversal};
  for (std::uint64_t seed = 1; seed <= 12; ++seed) {
    std::mt19937_64 g(seed + 900);
    const int bs = 1 + static_cast<int>(g() % 20), n = 1 + static_cast<int>(g() % 14);
    const int V = seed % 3 == 0 ? 32000 : (seed % 3 == 1 ? 37 : 1024);
    const sglang_ref::batch b = broken_batch(bs, n, V, seed);
    std::vector<float> P = random_rows(g, bs * n, V), Q = random_rows(g, bs * n, V);
    if (bs > 4) P[4 * static_cast<std::size_t>(n) * static_cast<std::size_t>(V) + 3] = std::nanf("");  // request 4
    const int draws = n + 1;
    std::vector<double> uni(static_cast<std::size_t>(bs * n * draws));
    std::uniform_real_distribution<double> U(0.0, 1.0);
    for (auto& u : uni) u = U(g);
    const int num_spec = std::max(1, n - static_cast<int>(g() % 2));  // n - 1: deep trees are refused
    const device_tree dt(b);
    const device_buffer<float> dP(P), dQ(Q);
    const device_buffer<double> dU(uni);
    for (const verify_mode m : modes) {
      for (const bool caller : {false, true}) {
        std::vector<verify_params> vps(static_cast<std::size_t>(bs));
        for (int r = 0; r < bs; ++r) {
          vps[static_cast<std::size_t>(r)].mode = m;
          vps[static_cast<std::size_t>(r)].seed = seed;
          vps[static_cast<std::size_t>(r)].request = static_cast<std::uint32_t>(r);
        }
        sglang_verify_inputs<I> hin{{bs, n, b.cand.data(), b.ridx.data(), b.next.data(), b.sib.data()},
                                    make_view<const float>(P.data(), bs * n, V),
                                    make_view<const float>(Q.data(), bs * n, V),
                                    vps.data(),
                                    caller ? uni.data() : nullptr,
                                    caller ? draws : 0,
                                    num_spec};
        host_outputs want(bs, n, num_spec);
        std::vector<status_code> codes(static_cast<std::size_t>(bs));
        std::vector<std::int64_t> want_depth(static_cast<std::size_t>(n), 0);
        std::vector<std::byte> ws(sglang_verify_tree_workspace_size(n, V) + workspace_alignment);
        auto* base = reinterpret_cast<std::byte*>(
            (reinterpret_cast<std::uintptr_t>(ws.data()) + workspace_alignment - 1) & ~(workspace_alignment - 1));
        REQUIRE(sglang_verify_tree<I, std::int32_t>(
                    hin, {want.predicts, make_view(want.accept_index.data(), bs, num_spec), want.accept_num},
                    want_depth, codes, std::span<std::byte>(base, sglang_verify_tree_workspace_size(n, V)))
                    .ok());
        std::vector<std::int32_t> want_status(codes.size());
        for (std::size_t r = 0; r < codes.size(); ++r) want_status[r] = static_cast<std::int32_t>(codes[r]);

        const device_buffer<verify_params> dvp(vps);
        device_outputs got(host_outputs(bs, n, num_spec), bs, n);
        kernels::sglang_verify_params<I, std::int32_t> p{};
        p.in = hin;
        p.in.tree = dt.view(b);
        p.in.p = make_view<const float>(dP.data(), bs * n, V);
        p.in.q = make_view<const float>(dQ.data(), bs * n, V);
        p.in.params = dvp.data();
        p.in.uniforms = caller ? dU.data() : nullptr;
        p.out = got.view(bs, num_spec);
        p.request_status = got.status.data();
        p.accepted_per_depth = got.per_depth.data();
        p.depth_counters = n;
        REQUIRE(kernels::sglang_verify_tree_can_implement(p).ok());
        device_buffer<unsigned char> dws(kernels::sglang_verify_tree_workspace_size(p));
        REQUIRE(kernels::sglang_verify_tree(p, dws.data(), dws.size(), nullptr).ok());
        specdec_test::cuda_check(cudaDeviceSynchronize(), "sync");
        INFO("seed " << seed << " mode " << verify_mode_name(m) << " caller uniforms " << caller << " bs " << bs
                     << " n " << n << " V " << V);
        compare(want, want_status, want_depth, got);
      }
    }
  }
}

TEST_CASE("GPU sglang_build_tree equals the host twin, every mask mode, malformed requests included") {
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    std::mt19937_64 g(seed + 3000);
    const int topk = 1 + static_cast<int>(g() % 4), depth = 2 + static_cast<int>(g() % 4);
    const std::int64_t cands = topk + static_cast<std::int64_t>(depth - 1) * topk * topk;
    const int n = 2 + static_cast<int>(g() % static_cast<std::uint64_t>(std::min<std::int64_t>(cands, 30)));
    const int bs = 1 + static_cast<int>(g() % 50);
    sglang_ref::draft_steps d = sglang_ref::make_draft_steps(bs, topk, depth, n, seed);
    const int blocks = topk * (depth - 1) + 1;
    for (int r = 3; r < bs; r += 7) d.selected[static_cast<std::size_t>(r * (n - 1))] = blocks * topk;  // out_of_range
    for (int r = 5; r < bs; r += 7)
      d.parent_list[static_cast<std::size_t>(r * blocks + 1)] = 100000;  // maybe unselected
    for (const auto m : {sglang_tree_mask_mode::full_mask, sglang_tree_mask_mode::qlen_only,
                         sglang_tree_mask_mode::qlen_only_bitpacking}) {
      std::int64_t bytes = static_cast<std::int64_t>(bs) * n * n;
      if (m == sglang_tree_mask_mode::full_mask)
        for (const auto s : d.seq_len) bytes += s * n;
      if (m == sglang_tree_mask_mode::qlen_only_bitpacking)
        bytes = static_cast<std::int64_t>(bs) * n * detail::sglang_packed_row_bytes(n);
      bytes -= seed % 4 == 0 ? 1 : 0;  // the last request's mask does not fit
      std::vector<std::uint8_t> mask(static_cast<std::size_t>(bytes), 9);
      std::vector<std::int64_t> pos(static_cast<std::size_t>(bs * n), -9), ridx = pos, next = pos, sib = pos;
      std::vector<status_code> codes(static_cast<std::size_t>(bs));
      const sglang_build_tree_inputs hin{bs, topk, depth, n, d.parent_list.data(), d.selected.data(), d.seq_len.data(),
                                         m};
      std::vector<std::byte> ws(sglang_build_tree_workspace_size(hin) + workspace_alignment);
      auto* base = reinterpret_cast<std::byte*>(
          (reinterpret_cast<std::uintptr_t>(ws.data()) + workspace_alignment - 1) & ~(workspace_alignment - 1));
      REQUIRE(sglang_build_tree(hin, {mask.data(), bytes, pos.data(), ridx.data(), next.data(), sib.data()}, codes,
                                std::span<std::byte>(base, sglang_build_tree_workspace_size(hin)))
                  .ok());
      std::vector<std::int32_t> want_status(codes.size());
      for (std::size_t r = 0; r < codes.size(); ++r) want_status[r] = static_cast<std::int32_t>(codes[r]);

      const device_buffer<std::int64_t> dpl(d.parent_list), dsel(d.selected), dlen(d.seq_len);
      device_buffer<std::uint8_t> dmask(std::vector<std::uint8_t>(mask.size(), 9));
      const std::vector<std::int64_t> fill(static_cast<std::size_t>(bs * n), -9);
      device_buffer<std::int64_t> dpos(fill), dridx(fill), dnext(fill), dsib(fill);
      device_buffer<std::int32_t> dstatus(std::vector<std::int32_t>(static_cast<std::size_t>(bs), -1));
      kernels::sglang_build_tree_params p{};
      p.in = hin;
      p.in.parent_list = dpl.data();
      p.in.selected_index = dsel.data();
      p.in.verified_seq_len = dlen.data();
      p.out = {dmask.data(), bytes, dpos.data(), dridx.data(), dnext.data(), dsib.data()};
      p.request_status = dstatus.data();
      REQUIRE(kernels::sglang_build_tree_can_implement(p).ok());
      device_buffer<unsigned char> dws(kernels::sglang_build_tree_workspace_size(p));
      REQUIRE(kernels::sglang_build_tree(p, dws.data(), dws.size(), nullptr).ok());
      specdec_test::cuda_check(cudaDeviceSynchronize(), "sync");
      INFO("seed " << seed << " mode " << static_cast<int>(m) << " bs " << bs << " n " << n);
      CHECK(dstatus.download() == want_status);
      CHECK(dmask.download() == mask);
      CHECK(dpos.download() == pos);
      CHECK(dridx.download() == ridx);
      CHECK(dnext.download() == next);
      CHECK(dsib.download() == sib);
    }
  }
}

TEST_CASE("GPU chain_acceptance_counts_batch equals the host twin (FlashInfer accepted_num / emitted)") {
  for (std::uint64_t seed = 1; seed <= 10; ++seed) {
    std::mt19937_64 g(seed + 7000);
    std::uniform_real_distribution<float> U(0.0f, 1.0f);
    const int bs = 1 + static_cast<int>(g() % 300), gamma = static_cast<int>(g() % 8),
              V = 1 + static_cast<int>(g() % 5000);
    std::vector<float> p(static_cast<std::size_t>(bs) * static_cast<std::size_t>((gamma + 1) * V)),
        q(static_cast<std::size_t>(bs) * static_cast<std::size_t>(gamma * V));
    for (auto& x : p) x = U(g);
    for (auto& x : q) x = U(g);
    std::vector<token_id> drafts(static_cast<std::size_t>(bs * gamma));
    for (auto& x : drafts) x = static_cast<token_id>(g() % static_cast<std::uint64_t>(V));
    for (int r = 5; r < bs && gamma > 0; r += 11) drafts[static_cast<std::size_t>(r * gamma)] = -1;  // bad requests
    std::vector<float> coins(static_cast<std::size_t>(bs * (gamma + 1)));
    for (auto& x : coins) x = U(g);
    std::vector<std::int32_t> acc(static_cast<std::size_t>(bs), -1), emit(acc);
    std::vector<status_code> codes(static_cast<std::size_t>(bs));
    chain_counts_batch hb{bs,
                          gamma,
                          drafts.data(),
                          make_view<const float>(p.data(), bs, gamma + 1, V),
                          make_view<const float>(q.data(), bs, gamma, V),
                          coins.data(),
                          gamma + 1,
                          acc.data(),
                          emit.data()};
    REQUIRE(chain_acceptance_counts_batch(hb, codes).ok());
    std::vector<std::int32_t> want_status(codes.size());
    for (std::size_t r = 0; r < codes.size(); ++r) want_status[r] = static_cast<std::int32_t>(codes[r]);

    const device_buffer<float> dp(p), dq(q), dc(coins);
    const device_buffer<token_id> dd(drafts);
    const std::vector<std::int32_t> fill(static_cast<std::size_t>(bs), -1);
    device_buffer<std::int32_t> dacc(fill), demit(fill), dstatus(fill);
    kernels::chain_counts_params kp{};
    kp.batch = hb;
    kp.batch.draft_token_ids = dd.data();
    kp.batch.target_probs = make_view<const float>(dp.data(), bs, gamma + 1, V);
    kp.batch.draft_probs = make_view<const float>(dq.data(), bs, gamma, V);
    kp.batch.coins = dc.data();
    kp.batch.accepted_num = dacc.data();
    kp.batch.emitted_num = demit.data();
    kp.request_status = dstatus.data();
    REQUIRE(kernels::chain_acceptance_counts_batch(kp, nullptr, 0, nullptr).ok());
    specdec_test::cuda_check(cudaDeviceSynchronize(), "sync");
    INFO("seed " << seed << " bs " << bs << " gamma " << gamma << " V " << V);
    CHECK(dstatus.download() == want_status);
    CHECK(dacc.download() == acc);
    CHECK(demit.download() == emit);
  }
}
