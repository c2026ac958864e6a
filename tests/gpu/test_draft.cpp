// GPU equality test: batched ancestor-closed top-B pruning against its host twin.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "gpu_util.hpp"
#include "specdec/draft/batch_prune.hpp"
#include "specdec/kernels.hpp"

using specdec_test::device_buffer;

namespace {

struct batch {
  std::vector<specdec::node_id> parent;
  std::vector<float> score;
  std::vector<std::int32_t> offsets{0};
  std::vector<std::int32_t> budget;
};

// Random requests with tied scores, zero probabilities (-inf), -0.0 and a
// few deliberately broken requests (bad parent, NaN, budget < 1).
batch make_batch(std::uint32_t seed, int requests, int max_nodes) {
  std::mt19937 g(seed);
  batch b;
  for (int r = 0; r < requests; ++r) {
    const int n = 1 + static_cast<int>(g() % static_cast<unsigned>(max_nodes));
    const auto off = static_cast<std::size_t>(b.offsets.back());
    for (int i = 0; i < n; ++i) {
      const specdec::node_id p = i == 0 ? -1 : static_cast<specdec::node_id>(g() % static_cast<unsigned>(i));
      b.parent.push_back(p);
      const int l = static_cast<int>(g() % 5);
      float s = l == 0 ? -std::numeric_limits<float>::infinity() : (l == 1 ? -0.0f : -static_cast<float>(l) * 0.5f);
      if (i > 0 && g() % 3 == 0) s = b.score[off + static_cast<std::size_t>(p)];  // tie with the parent
      b.score.push_back(s);
    }
    if (r % 17 == 5 && n > 1) b.parent[off + 1] = 5 + n;  // parent_out_of_range
    if (r % 19 == 7) b.score[off + static_cast<std::size_t>(n - 1)] = std::numeric_limits<float>::quiet_NaN();
    b.budget.push_back(r % 23 == 11 ? 0 : 1 + static_cast<std::int32_t>(g() % static_cast<unsigned>(n + 3)));
    b.offsets.push_back(b.offsets.back() + n);
  }
  return b;
}

}  // namespace

TEST_CASE("batched top-B pruning: kernel equals host twin (ties, zeros, -0, broken requests)") {
  for (std::uint32_t seed : {1u, 2u, 3u}) {
    const int R = seed == 3 ? 300 : 64, maxn = seed == 2 ? 700 : 80;
    const auto b = make_batch(seed, R, maxn);
    INFO("seed " << seed);
    const auto N = static_cast<std::int32_t>(b.parent.size());
    std::vector<specdec::node_id> host_idx(b.parent.size(), -7);
    std::vector<std::int32_t> host_kept(static_cast<std::size_t>(R)), host_status(static_cast<std::size_t>(R));
    REQUIRE(
        specdec::batch_prune_to_budget(b.parent, b.score, b.offsets, b.budget, host_idx, host_kept, host_status).ok());

    device_buffer<specdec::node_id> d_parent(b.parent);
    device_buffer<float> d_score(b.score);
    device_buffer<std::int32_t> d_off(b.offsets), d_budget(b.budget);
    device_buffer<specdec::node_id> d_idx(std::vector<specdec::node_id>(b.parent.size(), -7));
    device_buffer<std::int32_t> d_kept(static_cast<std::size_t>(R)), d_status(static_cast<std::size_t>(R));
    specdec::kernels::batch_prune_params p;
    p.parent = d_parent.data();
    p.score = d_score.data();
    p.offsets = d_off.data();
    p.budget = d_budget.data();
    p.num_requests = R;
    p.total_nodes = N;
    p.new_index = d_idx.data();
    p.kept = d_kept.data();
    p.request_status = d_status.data();
    const std::size_t ws_bytes = specdec::kernels::batch_prune_workspace_size(p);
    REQUIRE(ws_bytes > 0);
    device_buffer<unsigned char> ws(ws_bytes);
    CHECK(specdec::kernels::batch_prune_to_budget(p, ws.data(), ws_bytes - 1, nullptr) ==
          specdec::status_code::buffer_too_small);
    REQUIRE(specdec::kernels::batch_prune_to_budget(p, ws.data(), ws_bytes, nullptr).ok());
    REQUIRE(specdec::kernels::synchronize(nullptr).ok());
    CHECK(d_status.download() == host_status);
    CHECK(d_kept.download() == host_kept);
    CHECK(d_idx.download() == host_idx);
    int failed = 0;
    for (auto s : host_status) failed += s != 0;
    CHECK(failed > 0);  // the broken requests were exercised
  }
}

TEST_CASE("batched pruning: can_implement rejects bad parameters") {
  specdec::kernels::batch_prune_params p;
  p.num_requests = -1;
  CHECK(specdec::kernels::batch_prune_can_implement(p) == specdec::status_code::invalid_argument);
  p.num_requests = 2;
  p.total_nodes = 10;
  CHECK(specdec::kernels::batch_prune_can_implement(p) == specdec::status_code::invalid_argument);
}

TEST_CASE("batched pruning: malformed offsets give every request out_of_range and write nothing else") {
  // 3 requests over N = 8 nodes (three valid chains), then each malformed
  // offsets class: past N, negative, decreasing (overlapping spans).
  const std::vector<specdec::node_id> parent{-1, 0, 1, -1, 0, -1, 0, 1};
  const std::vector<float> score(parent.size(), 0.5f);
  for (const std::vector<std::int32_t>& off :
       {std::vector<std::int32_t>{0, 3, 5, 8}, {0, 3, 5, 40}, {-4, 3, 5, 8}, {0, 5, 3, 8}}) {
    const bool valid = off[3] == 8 && off[0] == 0 && off[1] <= off[2];
    INFO("offsets " << off[0] << " " << off[1] << " " << off[2] << " " << off[3]);
    CHECK(valid ==
          (specdec::kernels::prune_span_ok(off[0], off[1], 8) && specdec::kernels::prune_span_ok(off[1], off[2], 8) &&
           specdec::kernels::prune_span_ok(off[2], off[3], 8)));
    device_buffer<specdec::node_id> d_parent(parent);
    device_buffer<float> d_score(score);
    device_buffer<std::int32_t> d_off(off);
    device_buffer<specdec::node_id> d_idx(std::vector<specdec::node_id>(parent.size(), -7));
    device_buffer<std::int32_t> d_kept(std::vector<std::int32_t>(3, -3)), d_status(std::vector<std::int32_t>(3, -3));
    specdec::kernels::batch_prune_params p;
    p.parent = d_parent.data();
    p.score = d_score.data();
    p.offsets = d_off.data();
    p.uniform_budget = 2;
    p.num_requests = 3;
    p.total_nodes = 8;
    p.new_index = d_idx.data();
    p.kept = d_kept.data();
    p.request_status = d_status.data();
    const std::size_t ws_bytes = specdec::kernels::batch_prune_workspace_size(p);
    device_buffer<unsigned char> ws(ws_bytes);
    REQUIRE(specdec::kernels::batch_prune_to_budget(p, ws.data(), ws_bytes, nullptr).ok());
    REQUIRE(specdec::kernels::synchronize(nullptr).ok());
    const auto status = d_status.download();
    const auto kept = d_kept.download();
    const auto idx = d_idx.download();
    for (int r = 0; r < 3; ++r) {
      CHECK(status[static_cast<std::size_t>(r)] ==
            static_cast<std::int32_t>(valid ? specdec::status_code::ok : specdec::status_code::out_of_range));
      CHECK(kept[static_cast<std::size_t>(r)] == (valid ? 2 : 0));
    }
    if (!valid)
      for (const auto i : idx) CHECK(i == -7);  // new_index untouched
  }
}
