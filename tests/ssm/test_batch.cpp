// Ragged batches (ssm/tree_ssm_batch.hpp): the host twins of the batched
// kernels against one call per request on the request's own arrays (same
// code and layouts, so equal bit for bit), and every per-request status.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "specdec/ssm/tree_conv1d.hpp"
#include "specdec/ssm/tree_scan.hpp"
#include "specdec/ssm/tree_ssm_batch.hpp"
#include "ssm_test_util.hpp"

using namespace ssm_test;
using specdec::node_id;
using specdec::status_code;

namespace {

constexpr float sentinel = -12345.0f;

// A float batch with its views: x, dt, B, C (and z) over the capacity,
// per-request h0, outputs filled with a sentinel.
struct scan_batch {
  dims d;
  batch_case bc;
  problem<float> pr;
  std::vector<float> h0, y, states;
  std::vector<std::int32_t> status;
  specdec::tree_scan_batch_params<float> p;

  scan_batch(dims shape, const std::vector<std::int64_t>& sizes, flags f, std::uint64_t seed, bool with_h0,
             bool with_states, std::int64_t spare = 0)
      : d(shape), bc(make_batch(shape, sizes, f, seed, spare)), pr(bc.pr.cast<float>()) {
    d.n = pr.d.n;
    h0.assign(bc.h0.begin(), bc.h0.end());
    const auto ny = static_cast<std::size_t>(d.n * d.heads * d.headdim);
    y.assign(ny, sentinel);
    if (with_states) states.assign(ny * static_cast<std::size_t>(d.dstate), sentinel);
    status.assign(sizes.size(), 777);
    p.offsets = bc.offsets.data();
    p.parent = bc.parent.data();
    p.in = pr.inputs();
    const auto R = static_cast<std::int64_t>(sizes.size());
    if (with_h0) p.h0 = specdec::make_view<const float>(h0.data(), R, d.heads, d.headdim, d.dstate);
    p.y = specdec::make_view(y.data(), d.n, d.heads, d.headdim);
    if (with_states) p.states = specdec::make_view(states.data(), d.n, d.heads, d.headdim, d.dstate);
    p.num_requests = static_cast<std::int32_t>(R);
    p.request_status = status.data();
  }

  std::size_t workspace_size() const {
    return specdec::tree_scan_batch_workspace_size<float>(bc.offsets, bc.parent,
                                                          {d.n, d.heads, d.headdim, d.groups, d.dstate});
  }

  status_code run() {
    std::vector<std::byte> ws(workspace_size());
    return specdec::tree_scan_batch(p, ws).code();
  }

  // Request r alone: its rows copied into arrays of its own, tree_scan.
  void expect_request_equal(std::int32_t r) const {
    INFO("request " << r);
    const std::int64_t b = bc.offsets[static_cast<std::size_t>(r)];
    const std::int64_t n = bc.offsets[static_cast<std::size_t>(r) + 1] - b;
    const std::int64_t HP = d.heads * d.headdim, GS = d.groups * d.dstate, HPS = HP * d.dstate;
    auto rows = [&](const std::vector<float>& v, std::int64_t row) {
      return std::vector<float>(v.begin() + b * row, v.begin() + (b + n) * row);
    };
    problem<float> one = pr;
    one.d.n = n;
    one.x = rows(pr.x, HP);
    one.dt = rows(pr.dt, d.heads);
    one.B = rows(pr.B, GS);
    one.C = rows(pr.C, GS);
    if (pr.f.has_z) one.z = rows(pr.z, HP);
    auto in = one.inputs();
    if (p.h0.data != nullptr)
      in.h0 = specdec::make_view<const float>(h0.data() + r * HPS, d.heads, d.headdim, d.dstate);
    const std::vector<node_id> par(bc.parent.begin() + b, bc.parent.begin() + b + n);
    std::vector<float> y1(static_cast<std::size_t>(n * HP)),
        st1(states.empty() ? 0 : static_cast<std::size_t>(n * HPS));
    specdec::view4d<float> sv{};
    if (!states.empty()) sv = specdec::make_view(st1.data(), n, d.heads, d.headdim, d.dstate);
    specdec::tree_ssm_shape s{n, d.heads, d.headdim, d.groups, d.dstate};
    std::vector<std::byte> ws(specdec::tree_scan_workspace_size<float>(par, s));
    REQUIRE(
        specdec::tree_scan<float>(par, in, p.opt, specdec::make_view(y1.data(), n, d.heads, d.headdim), sv, ws).ok());
    CHECK(std::vector<float>(y.begin() + b * HP, y.begin() + (b + n) * HP) == y1);
    if (!states.empty()) CHECK(std::vector<float>(states.begin() + b * HPS, states.begin() + (b + n) * HPS) == st1);
  }

  // Every output row of request r (or of the spare rows: r = -1) still holds the sentinel.
  bool untouched(std::int64_t begin, std::int64_t end) const {
    const std::int64_t HP = d.heads * d.headdim;
    for (std::int64_t i = begin * HP; i < end * HP; ++i)
      if (y[static_cast<std::size_t>(i)] != sentinel) return false;
    return true;
  }
};

}  // namespace

TEST_CASE("tree_scan_batch equals tree_scan on each request's own arrays") {
  struct config {
    dims d;
    std::vector<std::int64_t> sizes;
    flags f;
    bool h0, states;
    std::int64_t spare;
  };
  const config configs[] = {
      {{0, 4, 8, 2, 16}, {5, 1, 17, 9}, flags{true, false, true, true, true}, true, true, 0},
      {{0, 2, 6, 1, 12}, {12, 30, 3}, flags{true, true, false, true, false}, false, false, 3},
      {{0, 3, 4, 3, 8}, {1, 1, 1, 40, 2, 7}, flags{false, false, true, false, false}, true, false, 1},
      {{0, 2, 5, 2, 10}, {64, 9}, flags{}, false, true, 0},  // 64: the dual form when there are no states
  };
  std::uint64_t seed = 4100;
  for (const auto& c : configs) {
    INFO("seed " << seed);
    scan_batch sb(c.d, c.sizes, c.f, seed++, c.h0, c.states, c.spare);
    REQUIRE(sb.run() == status_code::ok);
    for (std::int32_t r = 0; r < sb.p.num_requests; ++r) {
      CHECK(sb.status[static_cast<std::size_t>(r)] == 0);
      sb.expect_request_equal(r);
    }
    CHECK(sb.untouched(sb.bc.offsets.back(), sb.d.n));  // spare rows
  }
}

TEST_CASE("tree_scan_batch gives each malformed request its status and writes nothing for it") {
  const dims d{0, 2, 4, 1, 8};
  const std::vector<std::int64_t> sizes{6, 4, 7};
  auto all_are = [](const scan_batch& sb, status_code c) {
    for (const auto s : sb.status)
      if (s != static_cast<std::int32_t>(c)) return false;
    return sb.untouched(0, sb.d.n);
  };
  SECTION("offsets that decrease: every request not_sorted") {
    scan_batch sb(d, sizes, flags{}, 4200, true, false);
    sb.bc.offsets[2] = 5;  // [0, 6, 5, 17]: request 1 reversed, request 2 overlaps request 0
    REQUIRE(sb.run() == status_code::ok);
    CHECK(all_are(sb, status_code::not_sorted));
  }
  SECTION("offsets past the capacity or below 0: every request out_of_range") {
    scan_batch sb(d, sizes, flags{}, 4201, true, false);
    sb.bc.offsets.back() += 1;
    REQUIRE(sb.run() == status_code::ok);
    CHECK(all_are(sb, status_code::out_of_range));
    scan_batch neg(d, sizes, flags{}, 4202, true, false);
    neg.bc.offsets[0] = -1;
    REQUIRE(neg.run() == status_code::ok);
    CHECK(all_are(neg, status_code::out_of_range));
  }
  SECTION("a bad parent or an empty request fails alone") {
    scan_batch sb(d, {6, 4, 7, 0}, flags{}, 4203, true, true);
    sb.bc.parent[6 + 2] = 3;  // request 1, node 2: parent 3 > 2
    REQUIRE(sb.run() == status_code::ok);
    CHECK(sb.status == std::vector<std::int32_t>{0, static_cast<std::int32_t>(status_code::not_topological), 0,
                                                 static_cast<std::int32_t>(status_code::empty_input)});
    CHECK(sb.untouched(6, 10));
    sb.expect_request_equal(0);
    sb.expect_request_equal(2);
    scan_batch root(d, sizes, flags{}, 4204, true, false);
    root.bc.parent[10] = 0;  // request 2's root with a parent
    REQUIRE(root.run() == status_code::ok);
    CHECK(root.status[2] == static_cast<std::int32_t>(status_code::not_topological));
    CHECK(root.untouched(10, 17));
  }
  SECTION("offsets that start past 0: the rows before the first span are not touched") {
    scan_batch sb(d, sizes, flags{}, 4208, true, true);
    // Request 0, a chain on rows [0, 6), becomes the chain on rows [2, 6).
    sb.bc.offsets[0] = 2;
    sb.bc.parent[2] = -1;
    for (std::size_t i = 3; i < 6; ++i) sb.bc.parent[i] = static_cast<node_id>(i - 3);
    REQUIRE(sb.run() == status_code::ok);
    CHECK(sb.status == std::vector<std::int32_t>(3, 0));
    CHECK(sb.untouched(0, 2));
    for (std::int32_t r = 0; r < 3; ++r) sb.expect_request_equal(r);
  }
  SECTION("a NaN in one request's inputs fails that request (host twin: values checked)") {
    scan_batch sb(d, sizes, flags{}, 4205, false, false);
    sb.pr.x[static_cast<std::size_t>(7 * d.heads * d.headdim)] = NAN;  // request 1, node 1
    REQUIRE(sb.run() == status_code::ok);
    CHECK(sb.status == std::vector<std::int32_t>{0, static_cast<std::int32_t>(status_code::non_finite), 0});
    CHECK(sb.untouched(6, 10));
    sb.expect_request_equal(2);
  }
  SECTION("a workspace too small fails the requests that need it") {
    scan_batch sb(d, {2, 30}, flags{}, 4206, false, false);
    // Enough for request 0 (a chain of 2) alone.
    const std::vector<node_id> two = chain_tree(2);
    std::vector<std::byte> ws(
        specdec::tree_scan_workspace_size<float>(two, {2, d.heads, d.headdim, d.groups, d.dstate}));
    REQUIRE(ws.size() < sb.workspace_size());
    REQUIRE(specdec::tree_scan_batch(sb.p, ws).ok());
    CHECK(sb.status == std::vector<std::int32_t>{0, static_cast<std::int32_t>(status_code::buffer_too_small)});
    CHECK(sb.untouched(2, 32));
  }
  SECTION("shape errors stop the batch before anything is read") {
    scan_batch sb(d, sizes, flags{}, 4207, true, false);
    auto bad = sb.p;
    bad.in.h0 = sb.p.h0.slice(0);
    CHECK(specdec::tree_scan_batch(bad, {}) == status_code::invalid_argument);
    bad = sb.p;
    bad.h0.extent[0] = 2;
    CHECK(specdec::tree_scan_batch(bad, {}) == status_code::size_mismatch);
    bad = sb.p;
    bad.request_status = nullptr;
    CHECK(specdec::tree_scan_batch(bad, {}) == status_code::invalid_argument);
    bad = sb.p;
    bad.y.extent[0] -= 1;
    CHECK(specdec::tree_scan_batch(bad, {}) == status_code::size_mismatch);
    bad = sb.p;
    bad.num_requests = -1;
    CHECK(specdec::tree_scan_batch(bad, {}) == status_code::invalid_argument);
    bad = sb.p;
    bad.num_requests = 0;  // an empty batch: nothing read or written
    bad.offsets = nullptr;
    CHECK(specdec::tree_scan_batch(bad, {}).ok());
    CHECK(sb.status == std::vector<std::int32_t>(3, 777));
    CHECK(sb.untouched(0, sb.d.n));
  }
}

TEST_CASE("tree_conv1d_batch equals tree_conv1d on each request, statuses per request") {
  const std::uint64_t seed = 4300;
  INFO("seed " << seed);
  const std::int64_t ch = 37, w = 4, len = 5;
  const std::vector<std::int64_t> sizes{9, 1, 20, 6};
  const batch_case bc = make_batch({0, 1, 1, 1, 1}, sizes, flags{}, seed, 2);
  const auto cap = static_cast<std::int64_t>(bc.parent.size());
  const auto R = static_cast<std::int64_t>(sizes.size());
  std::mt19937_64 rng(seed);
  auto rnd = [&](std::int64_t k) { return normal_floats(rng, k); };
  const auto x = rnd(cap * ch), wt = rnd(ch * w), bias = rnd(ch), st = rnd(R * ch * len);
  std::vector<std::int32_t> offsets = bc.offsets;
  std::vector<node_id> parent = bc.parent;
  std::vector<float> out(static_cast<std::size_t>(cap * ch), sentinel);
  std::vector<std::int32_t> status(sizes.size(), 777);
  specdec::tree_conv1d_batch_params<float> p;
  p.offsets = offsets.data();
  p.parent = parent.data();
  p.in.x = specdec::make_view(x.data(), cap, ch);
  p.in.weight = specdec::make_view(wt.data(), ch, w);
  p.in.bias = specdec::make_view(bias.data(), ch);
  p.in.silu = true;
  p.conv_state = specdec::make_view(st.data(), R, ch, len);
  p.out = specdec::make_view(out.data(), cap, ch);
  p.num_requests = static_cast<std::int32_t>(R);
  p.request_status = status.data();
  std::vector<std::byte> ws(specdec::tree_conv1d_workspace_size(w));
  auto alone = [&](std::int32_t r) {
    const std::int64_t b = offsets[static_cast<std::size_t>(r)], n = offsets[static_cast<std::size_t>(r) + 1] - b;
    const std::vector<float> x1(x.begin() + b * ch, x.begin() + (b + n) * ch);
    const std::vector<float> s1(st.begin() + r * ch * len, st.begin() + (r + 1) * ch * len);
    const std::vector<node_id> par(parent.begin() + b, parent.begin() + b + n);
    auto in = p.in;
    in.x = specdec::make_view(x1.data(), n, ch);
    in.conv_state = specdec::make_view(s1.data(), ch, len);
    std::vector<float> o(static_cast<std::size_t>(n * ch));
    REQUIRE(specdec::tree_conv1d<float>(par, in, specdec::make_view(o.data(), n, ch), ws).ok());
    return o;
  };
  auto rows = [&](std::int32_t r) {
    const std::int64_t b = offsets[static_cast<std::size_t>(r)], e = offsets[static_cast<std::size_t>(r) + 1];
    return std::vector<float>(out.begin() + b * ch, out.begin() + e * ch);
  };
  REQUIRE(specdec::tree_conv1d_batch(p, ws).ok());
  for (std::int32_t r = 0; r < p.num_requests; ++r) {
    INFO("request " << r);
    CHECK(status[static_cast<std::size_t>(r)] == 0);
    CHECK(rows(r) == alone(r));
  }
  CHECK(std::all_of(out.begin() + offsets.back() * ch, out.end(), [](float v) { return v == sentinel; }));

  std::fill(out.begin(), out.end(), sentinel);
  parent[static_cast<std::size_t>(offsets[2]) + 3] = 5;  // request 2, node 3: parent 5 > 3
  REQUIRE(specdec::tree_conv1d_batch(p, ws).ok());
  CHECK(status == std::vector<std::int32_t>{0, 0, static_cast<std::int32_t>(status_code::not_topological), 0});
  CHECK(
      std::all_of(out.begin() + offsets[2] * ch, out.begin() + offsets[3] * ch, [](float v) { return v == sentinel; }));
  CHECK(rows(3) == alone(3));

  std::fill(out.begin(), out.end(), sentinel);
  offsets[1] = offsets[2] + 1;  // decreasing at request 1
  REQUIRE(specdec::tree_conv1d_batch(p, ws).ok());
  CHECK(status == std::vector<std::int32_t>(4, static_cast<std::int32_t>(status_code::not_sorted)));
  CHECK(std::all_of(out.begin(), out.end(), [](float v) { return v == sentinel; }));

  auto bad = p;
  bad.conv_state.extent[0] = R - 1;
  CHECK(specdec::tree_conv1d_batch(bad, ws) == status_code::size_mismatch);
  bad = p;
  bad.in.conv_state = p.conv_state.slice(0);
  CHECK(specdec::tree_conv1d_batch(bad, ws) == status_code::invalid_argument);
  bad = p;
  bad.conv_state = {};
  CHECK(specdec::tree_conv1d_batch(bad, ws) == status_code::invalid_argument);  // W > 1 needs states
}
