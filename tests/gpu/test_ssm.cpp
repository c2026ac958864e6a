// GPU tree SSM kernels against their host twins (tree_scan_recurrent,
// tree_conv1d). Float tolerance: 1e-4 absolute + 1e-4 relative on y and on
// the per-node states (the device sums C . h over 32 lanes, the host over 8
// partial sums, nvcc contracts to FMA and expf differs by an ulp or two; a
// wrong parent state or term is an O(1) error, far above this); double: 1e-12.
#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "gpu_util.hpp"
#include "specdec/kernels.hpp"
#include "specdec/ssm/tree_conv1d.hpp"
#include "specdec/ssm/tree_scan.hpp"
#include "specdec/ssm/tree_scan_recurrent.hpp"
#include "specdec/ssm/tree_ssm_batch.hpp"
#include "ssm/ssm_test_util.hpp"

using namespace ssm_test;
using specdec::node_id;
using specdec::status_code;
using specdec_test::device_buffer;

namespace {

// Device copy of a problem; views keep the host layouts.
template <class T>
struct device_problem {
  std::vector<std::unique_ptr<device_buffer<T>>> bufs;
  specdec::tree_ssm_inputs<T> in;

  const T* up(const std::vector<T>& v) {
    bufs.push_back(std::make_unique<device_buffer<T>>(v));
    return bufs.back()->data();
  }
  explicit device_problem(const problem<T>& pr) {
    in = pr.inputs();
    in.x.data = up(pr.x);
    in.dt.data = up(pr.dt);
    in.A.data = up(pr.A);
    in.B.data = up(pr.B);
    in.C.data = up(pr.C);
    if (in.D.data) in.D.data = up(pr.D);
    if (in.dt_bias.data) in.dt_bias.data = up(pr.dt_bias);
    if (in.z.data) in.z.data = up(pr.z);
    if (in.h0.data) in.h0.data = up(pr.h0);
  }
};

template <class T>
void compare_scan(const dims& d, flags f, const std::vector<node_id>& parent, std::uint64_t seed, double tol,
                  bool with_states, specdec::tree_ssm_options<T> opt = {}) {
  INFO("seed " << seed << " n " << d.n << " heads " << d.heads << " dstate " << d.dstate << " states " << with_states);
  const auto pr = make_problem(d, f, seed).cast<T>();
  const specdec::tree_ssm_shape shape{d.n, d.heads, d.headdim, d.groups, d.dstate};
  const auto ny = static_cast<std::size_t>(d.n * d.heads * d.headdim);
  std::vector<T> y_host(ny), st_host(ny * static_cast<std::size_t>(d.dstate));
  std::vector<std::byte> ws(specdec::tree_scan_recurrent_workspace_size<T>(parent, shape));
  REQUIRE(specdec::tree_scan_recurrent<T>(parent, pr.inputs(), opt,
                                          specdec::make_view(y_host.data(), d.n, d.heads, d.headdim),
                                          specdec::make_view(st_host.data(), d.n, d.heads, d.headdim, d.dstate), ws)
              .ok());

  device_problem<T> dp(pr);
  device_buffer<node_id> dparent(parent);
  device_buffer<T> dy(ny), dst(st_host.size());
  device_buffer<std::int32_t> dstatus(std::vector<std::int32_t>{12345});  // stale: the launch resets it
  specdec::kernels::tree_scan_params<T> p;
  p.parent = dparent.data();
  p.in = dp.in;
  p.opt = opt;
  p.y = specdec::make_view(dy.data(), d.n, d.heads, d.headdim);
  if (with_states) p.states = specdec::make_view(dst.data(), d.n, d.heads, d.headdim, d.dstate);
  p.request_status = dstatus.data();
  const std::size_t wbytes = specdec::kernels::tree_scan_workspace_size(p);
  device_buffer<std::byte> dws(wbytes);
  REQUIRE(specdec::kernels::tree_scan(p, dws.data(), wbytes, nullptr).ok());
  REQUIRE(specdec::kernels::synchronize(nullptr).ok());
  CHECK(dstatus.download()[0] == 0);
  CHECK(max_scaled_error(dy.download(), y_host, tol, tol) <= 1.0);
  if (with_states) CHECK(max_scaled_error(dst.download(), st_host, tol, tol) <= 1.0);
}

}  // namespace

TEST_CASE("gpu tree_scan equals the host recurrent scan") {
  compare_scan<float>({15, 8, 64, 1, 128}, flags{}, binary_tree(15), 11, 1e-4, true);
  compare_scan<float>({31, 8, 64, 2, 128}, flags{true, true, true, true, true}, binary_tree(31), 12, 1e-4, false);
  compare_scan<float>({40, 6, 10, 3, 37}, flags{true, false, true, false, false}, random_tree(40, 13), 13, 1e-4, true);
  compare_scan<float>({33, 4, 8, 2, 256}, flags{}, chain_tree(33), 14, 1e-4, false);
  compare_scan<double>({29, 4, 9, 4, 20}, flags{true, false, true, true, true}, random_tree(29, 15), 15, 1e-12, true);
  // dt options reach the kernel: raw dt (no softplus) clamped to [0.05, 1.5].
  compare_scan<float>({21, 4, 16, 2, 64}, flags{}, random_tree(21, 16), 16, 1e-4, true, {false, 0.05f, 1.5f});
}

TEST_CASE("gpu tree_scan reports bad parents and bad shapes") {
  const dims d{7, 2, 4, 1, 8};
  const auto pr = make_problem(d, flags{}, 21).cast<float>();
  device_problem<float> dp(pr);
  device_buffer<node_id> dparent(std::vector<node_id>{-1, 0, 0, 5, 1, 2, 2});  // node 3's parent 5 > 3
  device_buffer<float> dy(static_cast<std::size_t>(d.n * d.heads * d.headdim));
  device_buffer<std::int32_t> dstatus(std::vector<std::int32_t>{12345});  // stale: the launch resets it
  specdec::kernels::tree_scan_params<float> p;
  p.parent = dparent.data();
  p.in = dp.in;
  p.y = specdec::make_view(dy.data(), d.n, d.heads, d.headdim);
  p.request_status = dstatus.data();
  const std::size_t wbytes = specdec::kernels::tree_scan_workspace_size(p);
  device_buffer<std::byte> dws(wbytes);
  REQUIRE(specdec::kernels::tree_scan(p, dws.data(), wbytes, nullptr).ok());
  REQUIRE(specdec::kernels::synchronize(nullptr).ok());
  CHECK(dstatus.download()[0] == static_cast<std::int32_t>(status_code::not_topological));
  CHECK(specdec::kernels::tree_scan(p, dws.data(), wbytes - 4, nullptr) == status_code::buffer_too_small);
  auto bad = p;
  bad.y = specdec::make_view(dy.data(), d.n, d.heads, d.headdim - 1);
  CHECK(specdec::kernels::tree_scan(bad, dws.data(), wbytes, nullptr) == status_code::size_mismatch);
  // Per-node states with a broadcast node dimension would alias the parent states the kernel reads back.
  device_buffer<float> dst(static_cast<std::size_t>(d.heads * d.headdim * d.dstate));
  bad = p;
  bad.states = specdec::make_view(dst.data(), d.n, d.heads, d.headdim, d.dstate);
  bad.states.stride[0] = 0;
  CHECK(specdec::kernels::tree_scan(bad, nullptr, 0, nullptr) == status_code::invalid_argument);
}

TEST_CASE("gpu tree_conv1d equals the host tree conv1d") {
  // Seeds 31, 32: W = 4 with W - 1 and W state columns, bias, SiLU.
  // Seed 33: W = 1 (the node alone), no bias, no conv state, no SiLU.
  for (std::uint64_t seed : {31u, 32u, 33u}) {
    INFO("seed " << seed);
    const bool plain = seed == 33;
    const std::int64_t n = 45, ch = 300, w = plain ? 1 : 4, len = seed % 2 ? w - 1 : w;
    std::mt19937_64 rng(seed);
    auto rnd = [&](std::int64_t k) { return normal_floats(rng, k); };
    const auto parent = random_tree(n, seed);
    const auto x = rnd(n * ch), wt = rnd(ch * w), b = rnd(ch), st = rnd(ch * len);
    specdec::tree_conv1d_inputs<float> in;
    in.x = specdec::make_view(x.data(), n, ch);
    in.weight = specdec::make_view(wt.data(), ch, w);
    if (!plain) {
      in.bias = specdec::make_view(b.data(), ch);
      in.conv_state = specdec::make_view(st.data(), ch, len);
    }
    in.silu = !plain;
    std::vector<float> out_host(static_cast<std::size_t>(n * ch));
    std::vector<std::byte> ws(specdec::tree_conv1d_workspace_size(w));
    REQUIRE(specdec::tree_conv1d<float>(parent, in, specdec::make_view(out_host.data(), n, ch), ws).ok());

    device_buffer<float> dx(x), dw(wt), db(b), dst(st), dout(out_host.size());
    device_buffer<node_id> dparent(parent);
    device_buffer<std::int32_t> dstatus(std::vector<std::int32_t>{12345});  // stale: the launch resets it
    specdec::kernels::tree_conv1d_params<float> p;
    p.parent = dparent.data();
    p.in = in;
    p.in.x.data = dx.data();
    p.in.weight.data = dw.data();
    if (!plain) {
      p.in.bias.data = db.data();
      p.in.conv_state.data = dst.data();
    }
    p.out = specdec::make_view(dout.data(), n, ch);
    p.request_status = dstatus.data();
    REQUIRE(specdec::kernels::tree_conv1d(p, nullptr, 0, nullptr).ok());
    REQUIRE(specdec::kernels::synchronize(nullptr).ok());
    CHECK(dstatus.download()[0] == 0);
    CHECK(max_scaled_error(dout.download(), out_host, 1e-5, 1e-5) <= 1.0);
  }
}

namespace {

// A ragged batch through kernels::tree_scan_batch and its host twin
// specdec::tree_scan_batch (host recurrent with states, else the host's
// own choice: equal up to rounding, tolerances as above). `mutate` may
// break the offsets or parents (both sides get the same arrays); every
// request's status must match, and rows of failed requests stay untouched
// on the device.
// `graph`: the launch is captured into a CUDA graph and replayed instead.
template <class T, class Mutate>
void compare_scan_batch(dims d, const std::vector<std::int64_t>& sizes, flags f, std::uint64_t seed, double tol,
                        bool with_h0, bool with_states, Mutate mutate, bool graph = false) {
  INFO("seed " << seed << " requests " << sizes.size() << " states " << with_states << " h0 " << with_h0);
  batch_case bc = make_batch(d, sizes, f, seed, 2);
  mutate(bc.offsets, bc.parent);
  const auto pr = bc.pr.cast<T>();
  d.n = pr.d.n;
  const std::vector<T> h0(bc.h0.begin(), bc.h0.end());
  const auto R = static_cast<std::int64_t>(sizes.size());
  const auto ny = static_cast<std::size_t>(d.n * d.heads * d.headdim), ns = ny * static_cast<std::size_t>(d.dstate);
  const T fill = T(-777);
  std::vector<T> y_host(ny, fill), st_host(with_states ? ns : 0, fill);
  std::vector<std::int32_t> status_host(sizes.size(), 99);
  specdec::tree_scan_batch_params<T> hp;
  hp.offsets = bc.offsets.data();
  hp.parent = bc.parent.data();
  hp.in = pr.inputs();
  if (with_h0) hp.h0 = specdec::make_view<const T>(h0.data(), R, d.heads, d.headdim, d.dstate);
  hp.y = specdec::make_view(y_host.data(), d.n, d.heads, d.headdim);
  if (with_states) hp.states = specdec::make_view(st_host.data(), d.n, d.heads, d.headdim, d.dstate);
  hp.num_requests = static_cast<std::int32_t>(R);
  hp.request_status = status_host.data();
  std::vector<std::byte> ws(
      specdec::tree_scan_batch_workspace_size<T>(bc.offsets, bc.parent, {d.n, d.heads, d.headdim, d.groups, d.dstate}));
  REQUIRE(specdec::tree_scan_batch(hp, ws).ok());

  device_problem<T> dp(pr);
  device_buffer<std::int32_t> doff(bc.offsets), dstatus(std::vector<std::int32_t>(sizes.size(), 99));
  device_buffer<node_id> dparent(bc.parent);
  device_buffer<T> dh0(h0), dy(std::vector<T>(ny, fill)), dst(std::vector<T>(with_states ? ns : 0, fill));
  auto p = hp;
  p.offsets = doff.data();
  p.parent = dparent.data();
  p.in = dp.in;
  if (with_h0) p.h0.data = dh0.data();
  p.y.data = dy.data();
  if (with_states) p.states.data = dst.data();
  p.request_status = dstatus.data();
  const std::size_t wbytes = specdec::kernels::tree_scan_batch_workspace_size(p);
  device_buffer<std::byte> dws(wbytes);
  if (graph)
    specdec_test::run_in_graph(
        [&](cudaStream_t s) { return specdec::kernels::tree_scan_batch(p, dws.data(), wbytes, s).ok(); });
  else
    REQUIRE(specdec::kernels::tree_scan_batch(p, dws.data(), wbytes, nullptr).ok());
  REQUIRE(specdec::kernels::synchronize(nullptr).ok());
  CHECK(dstatus.download() == status_host);
  const auto y_dev = dy.download();
  const auto st_dev = with_states ? dst.download() : std::vector<T>{};
  const auto HP = static_cast<std::size_t>(d.heads * d.headdim), S = static_cast<std::size_t>(d.dstate);
  // Without states the host twin may run the dual form (another order of
  // sums than the device's recurrence): twice the tolerance.
  tol = with_states ? tol : 2 * tol;
  for (std::size_t r = 0; r < sizes.size(); ++r) {
    if (status_host[r] != 0) continue;
    INFO("request " << r);
    const auto b = static_cast<std::size_t>(bc.offsets[r]) * HP, e = static_cast<std::size_t>(bc.offsets[r + 1]) * HP;
    CHECK(max_scaled_error(std::vector<T>(y_dev.begin() + b, y_dev.begin() + e),
                           std::vector<T>(y_host.begin() + b, y_host.begin() + e), tol, tol) <= 1.0);
    if (with_states)
      CHECK(max_scaled_error(std::vector<T>(st_dev.begin() + b * S, st_dev.begin() + e * S),
                             std::vector<T>(st_host.begin() + b * S, st_host.begin() + e * S), tol, tol) <= 1.0);
  }
  // Rows no successful request owns (failed requests, spare rows) are untouched.
  std::vector<bool> owned(static_cast<std::size_t>(d.n), false);
  for (std::size_t r = 0; r < sizes.size(); ++r)
    if (status_host[r] == 0)
      for (std::int32_t i = bc.offsets[r]; i < bc.offsets[r + 1]; ++i) owned[static_cast<std::size_t>(i)] = true;
  for (std::size_t i = 0; i < owned.size(); ++i)
    if (!owned[i]) {
      for (std::size_t k = i * HP; k < (i + 1) * HP; ++k) REQUIRE(y_dev[k] == fill);
      if (with_states)
        for (std::size_t k = i * HP * S; k < (i + 1) * HP * S; ++k) REQUIRE(st_dev[k] == fill);
    }
}

const auto keep = [](std::vector<std::int32_t>&, std::vector<node_id>&) {};

}  // namespace

TEST_CASE("gpu tree_scan_batch equals its host twin, request by request") {
  compare_scan_batch<float>({0, 8, 64, 1, 128}, {15, 1, 31, 7}, flags{}, 51, 1e-4, true, true, keep);
  compare_scan_batch<float>({0, 4, 16, 2, 64}, {40, 3, 22}, flags{true, true, true, true, true}, 52, 1e-4, false, false,
                            keep);
  compare_scan_batch<double>({0, 3, 9, 3, 20}, {9, 17, 1, 5, 12}, flags{true, false, true, false, false}, 53, 1e-12,
                             true, true, keep);
}

TEST_CASE("gpu tree_scan_batch inside a captured CUDA graph equals its host twin") {
  // The check launch and the scan: nothing synchronized or allocated, so an
  // engine's decode graph can hold them.
  compare_scan_batch<float>({0, 8, 64, 1, 128}, {15, 1, 31, 7}, flags{}, 54, 1e-4, true, true, keep, true);
}

TEST_CASE("gpu tree_scan_batch: malformed offsets and requests get the host twin's statuses") {
  const dims d{0, 2, 8, 1, 16};
  const std::vector<std::int64_t> sizes{6, 4, 7, 5};
  // Offsets that decrease (request 2 would overlap request 0): every request not_sorted.
  compare_scan_batch<float>(d, sizes, flags{}, 61, 1e-4, true, false,
                            [](std::vector<std::int32_t>& o, std::vector<node_id>&) { o[2] = 5; });
  // Past the capacity: every request out_of_range.
  compare_scan_batch<float>(d, sizes, flags{}, 62, 1e-4, true, true,
                            [](std::vector<std::int32_t>& o, std::vector<node_id>&) { o.back() = 1000; });
  // Offsets that start past 0: request 0 becomes the chain on rows [2, 6).
  compare_scan_batch<float>(d, sizes, flags{}, 64, 1e-4, true, true,
                            [](std::vector<std::int32_t>& o, std::vector<node_id>& par) {
                              o[0] = 2;
                              par[2] = -1;
                              for (std::size_t i = 3; i < 6; ++i) par[i] = static_cast<node_id>(i - 3);
                            });
  // A bad parent, a root with a parent, an empty request: those alone fail.
  compare_scan_batch<float>(d, {6, 4, 0, 7, 5}, flags{}, 63, 1e-4, true, true,
                            [](std::vector<std::int32_t>&, std::vector<node_id>& par) {
                              par[6 + 2] = 3;
                              par[10] = 0;
                            });
}

TEST_CASE("gpu tree_conv1d_batch equals its host twin, request by request") {
  // 0: well formed (an empty request among them: the search for a node's
  // request skips it); 1: request 3's parents broken (it alone fails);
  // 2: decreasing offsets (every request not_sorted, nothing written).
  for (const int variant : {0, 1, 2}) {
    const std::uint64_t seed = 71 + static_cast<std::uint64_t>(variant);
    INFO("seed " << seed << " variant " << variant);
    const std::int64_t ch = 300, w = 4, len = 3;
    const std::vector<std::int64_t> sizes{9, 1, 0, 45, 6};
    batch_case bc = make_batch({0, 1, 1, 1, 1}, sizes, flags{}, seed, 2);
    if (variant == 1) bc.parent[static_cast<std::size_t>(bc.offsets[3]) + 3] = 7;
    if (variant == 2) bc.offsets[1] = bc.offsets[3] + 1;
    const auto cap = static_cast<std::int64_t>(bc.parent.size());
    const auto R = static_cast<std::int64_t>(sizes.size());
    std::mt19937_64 rng(seed);
    auto rnd = [&](std::int64_t k) { return normal_floats(rng, k); };
    const auto x = rnd(cap * ch), wt = rnd(ch * w), b = rnd(ch), st = rnd(R * ch * len);
    std::vector<float> out_host(static_cast<std::size_t>(cap * ch), -777.0f);
    std::vector<std::int32_t> status_host(sizes.size(), 99);
    specdec::tree_conv1d_batch_params<float> hp;
    hp.offsets = bc.offsets.data();
    hp.parent = bc.parent.data();
    hp.in.x = specdec::make_view(x.data(), cap, ch);
    hp.in.weight = specdec::make_view(wt.data(), ch, w);
    hp.in.bias = specdec::make_view(b.data(), ch);
    hp.in.silu = true;
    hp.conv_state = specdec::make_view(st.data(), R, ch, len);
    hp.out = specdec::make_view(out_host.data(), cap, ch);
    hp.num_requests = static_cast<std::int32_t>(R);
    hp.request_status = status_host.data();
    std::vector<std::byte> ws(specdec::tree_conv1d_workspace_size(w));
    REQUIRE(specdec::tree_conv1d_batch(hp, ws).ok());

    device_buffer<float> dx(x), dw(wt), db(b), dst(st), dout(std::vector<float>(out_host.size(), -777.0f));
    device_buffer<std::int32_t> doff(bc.offsets), dstatus(std::vector<std::int32_t>(sizes.size(), 99));
    device_buffer<node_id> dparent(bc.parent);
    auto p = hp;
    p.offsets = doff.data();
    p.parent = dparent.data();
    p.in.x.data = dx.data();
    p.in.weight.data = dw.data();
    p.in.bias.data = db.data();
    p.conv_state.data = dst.data();
    p.out.data = dout.data();
    p.request_status = dstatus.data();
    REQUIRE(specdec::kernels::tree_conv1d_batch(p, nullptr, 0, nullptr).ok());
    REQUIRE(specdec::kernels::synchronize(nullptr).ok());
    CHECK(dstatus.download() == status_host);
    // Failed requests' rows and spare rows hold -777 on both sides.
    CHECK(max_scaled_error(dout.download(), out_host, 1e-5, 1e-5) <= 1.0);
  }
}
