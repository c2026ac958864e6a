// GPU batched verification against the host twin (specdec::verify_batch):
// identical accepted paths, tokens and codes for the same Philox keys.
//
// Tolerance policy: the kernel reduces row masses and prefix sums in a
// different order than the host (see include/specdec/kernels/verify.hpp),
// so masses agree to ~1e-7 relative and a token could differ only if a
// uniform fell that close to a boundary: ~1e-7 per draw. These inputs use a
// few hundred draws on random rows without engineered ties, so exact token
// equality is required (a rare mismatch would show up as one request, not a
// pattern; rerun with another seed to tell the two apart).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "gpu_util.hpp"
#include "specdec/kernels.hpp"
#include "specdec/verify/batch_verify.hpp"

using namespace specdec;
using specdec_test::device_buffer;

namespace {

struct batch {
  std::int64_t V = 0;
  std::vector<std::int32_t> offsets{0};
  std::vector<token_id> token;
  std::vector<node_id> parent;
  std::vector<float> P, Q;
  std::vector<verify_params> params;
  std::int32_t max_nodes = 0;
};

std::vector<float> random_row(std::mt19937& gen, std::int64_t V, double zero_frac) {
  std::uniform_real_distribution<double> U(0.0, 1.0);
  std::vector<double> w(static_cast<std::size_t>(V));
  double s = 0;
  for (auto& x : w) {
    x = U(gen) < zero_frac ? 0.0 : std::pow(U(gen), 3.0);
    s += x;
  }
  if (s == 0) {
    w[0] = 1;
    s = 1;
  }
  std::vector<float> r(static_cast<std::size_t>(V));
  for (std::size_t i = 0; i < r.size(); ++i) r[i] = static_cast<float>(w[i] / s);
  return r;
}

// R requests with random trees; q rows sometimes close to p so that paths get accepted.
batch make_batch(std::mt19937& gen, int R, std::int64_t V, int max_n) {
  batch b;
  b.V = V;
  for (int r = 0; r < R; ++r) {
    const int n = 1 + static_cast<int>(gen() % static_cast<unsigned>(max_n));
    b.max_nodes = std::max(b.max_nodes, n);
    std::vector<std::vector<float>> prow;
    for (int i = 0; i < n; ++i) prow.push_back(random_row(gen, V, 0.3));
    for (int i = 0; i < n; ++i) {
      const node_id par = i == 0 ? -1 : static_cast<node_id>(gen() % static_cast<unsigned>(i));
      token_id x = static_cast<token_id>(gen() % V);
      if (i > 0 && gen() % 2) {  // a likely token under the parent's p
        const auto& pr = prow[static_cast<std::size_t>(par)];
        x = static_cast<token_id>(std::max_element(pr.begin(), pr.end()) - pr.begin());
        if (gen() % 2) x = static_cast<token_id>((x + 1) % V);
      }
      b.token.push_back(x);
      b.parent.push_back(par);
      b.P.insert(b.P.end(), prow[static_cast<std::size_t>(i)].begin(), prow[static_cast<std::size_t>(i)].end());
      auto q = gen() % 3 == 0 ? prow[static_cast<std::size_t>(i)] : random_row(gen, V, 0.3);
      b.Q.insert(b.Q.end(), q.begin(), q.end());
    }
    b.offsets.push_back(b.offsets.back() + n);
    verify_params vp;
    vp.mode = static_cast<verify_mode>(r % 6);
    vp.seed = 0xabc0 + static_cast<std::uint64_t>(r);
    vp.request = static_cast<std::uint32_t>(1000 + r);
    vp.round = 7;
    b.params.push_back(vp);
  }
  return b;
}

void compare(const batch& b, int L) {
  const int R = static_cast<int>(b.params.size());
  const std::int32_t total = b.offsets.back();
  // Host.
  std::vector<node_id> hpaths(static_cast<std::size_t>(R * L), -3);
  std::vector<token_id> htoks(static_cast<std::size_t>(R * L), -3);
  std::vector<verify_result> hres(static_cast<std::size_t>(R));
  std::vector<std::byte> ws(verify_batch_workspace_size(b.V, b.offsets));
  const verify_batch_input in{b.offsets, tree_view{b.token.data(), b.parent.data(), nullptr, nullptr, total},
                              make_view(b.P.data(), total, b.V).as_const(),
                              make_view(b.Q.data(), total, b.V).as_const(), b.params};
  const verify_batch_output out{make_view(hpaths.data(), R, L), make_view(htoks.data(), R, L), hres, {}};
  (void)verify_batch(in, ws, out);
  // Device.
  device_buffer<std::int32_t> d_off(b.offsets);
  device_buffer<token_id> d_tok(b.token);
  device_buffer<node_id> d_par(b.parent);
  device_buffer<float> d_p(b.P), d_q(b.Q);
  device_buffer<verify_params> d_params(b.params);
  device_buffer<node_id> d_paths(std::vector<node_id>(static_cast<std::size_t>(R * L), -3));
  device_buffer<token_id> d_toks(std::vector<token_id>(static_cast<std::size_t>(R * L), -3));
  device_buffer<verify_result> d_res(static_cast<std::size_t>(R));
  const std::size_t wbytes = kernels::verify_batch_workspace_size(R, static_cast<std::int32_t>(b.V), b.max_nodes);
  device_buffer<unsigned char> d_ws(wbytes);
  kernels::verify_batch_params kp;
  kp.offsets = d_off.data();
  kp.token = d_tok.data();
  kp.parent = d_par.data();
  kp.p = d_p.data();
  kp.p_row_stride = b.V;
  kp.q = d_q.data();
  kp.q_row_stride = b.V;
  kp.params = d_params.data();
  kp.num_requests = R;
  kp.vocab = static_cast<std::int32_t>(b.V);
  kp.max_nodes = b.max_nodes;
  kp.out_stride = L;
  kp.paths = d_paths.data();
  kp.tokens = d_toks.data();
  kp.results = d_res.data();
  kp.workspace = d_ws.data();
  kp.workspace_bytes = wbytes;
  REQUIRE(kernels::verify_batch(kp, nullptr).ok());
  REQUIRE(kernels::synchronize(nullptr).ok());
  const auto dres = d_res.download();
  const auto dpaths = d_paths.download();
  const auto dtoks = d_toks.download();
  for (int r = 0; r < R; ++r) {
    const auto& h = hres[static_cast<std::size_t>(r)];
    const auto& d = dres[static_cast<std::size_t>(r)];
    INFO("V " << b.V << " request " << r << " mode " << verify_mode_name(b.params[static_cast<std::size_t>(r)].mode));
    if (is_traversal(b.params[static_cast<std::size_t>(r)].mode)) {  // host-only modes for now
      CHECK(d.code == status_code::unsupported);
      continue;
    }
    CHECK(d.code == h.code);
    CHECK(d.accepted == h.accepted);
    CHECK(d.last_node == h.last_node);
    CHECK(d.next_token == h.next_token);
    if (h.code != status_code::ok) continue;
    for (int k = 0; k <= h.accepted; ++k) {
      const auto i = static_cast<std::size_t>(r * L + k);
      CHECK(dpaths[i] == hpaths[i]);
      CHECK(dtoks[i] == htoks[i]);
    }
  }
}

}  // namespace

TEST_CASE("GPU verify_batch matches the host path token for token") {
  std::mt19937 gen(4242);
  INFO("seed 4242");
  // Aligned (V % 4 == 0, float4 path) and unaligned vocabularies, small and large.
  for (std::int64_t V : {8, 100, 1001, 8193, 32000, 128256}) {
    const int R = V > 10000 ? 12 : 48;
    const auto b = make_batch(gen, R, V, V > 10000 ? 16 : 24);
    compare(b, 32);
  }
}

TEST_CASE("GPU verify_batch reports per-request errors like the host") {
  std::mt19937 gen(99);
  auto b = make_batch(gen, 12, 64, 8);
  // NaN in request 2's root row, a token out of range in request 4.
  b.P[static_cast<std::size_t>(b.offsets[2] * 64)] = std::numeric_limits<float>::quiet_NaN();
  if (b.offsets[5] - b.offsets[4] > 1) b.token[static_cast<std::size_t>(b.offsets[4] + 1)] = 64;
  compare(b, 16);
}

TEST_CASE("GPU verify_batch answers unsupported for block and traversal requests, verifies the rest") {
  std::mt19937 gen(7);
  auto b = make_batch(gen, 12, 64, 8);
  b.params[1].mode = verify_mode::traversal;
  b.params[4].mode = verify_mode::traversal_without_replacement;
  b.params[7].mode = verify_mode::block;
  compare(b, 16);
}

TEST_CASE("GPU verify_batch can_implement rejects bad launches") {
  kernels::verify_batch_params kp;
  kp.num_requests = 1;
  CHECK(kernels::verify_batch_can_implement(kp) == status_code::invalid_argument);
  CHECK(kernels::verify_batch(kp, nullptr) == status_code::invalid_argument);
  kp.num_requests = 0;
  CHECK(kernels::verify_batch(kp, nullptr).ok());
  CHECK(kernels::verify_batch_workspace_size(2, 10, 3) == 2 * (48 + 24));
}
