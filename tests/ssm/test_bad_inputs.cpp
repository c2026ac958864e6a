#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "specdec/ssm/tree_decay.hpp"
#include "specdec/ssm/tree_scan.hpp"
#include "specdec/ssm/tree_scan_dense_mask.hpp"
#include "specdec/ssm/tree_scan_dual.hpp"
#include "specdec/ssm/tree_scan_recurrent.hpp"
#include "ssm_test_util.hpp"

using namespace ssm_test;
using specdec::node_id;
using specdec::status_code;

static_assert(specdec::ssm_scalar<float>);
static_assert(specdec::ssm_scalar<double>);
static_assert(!specdec::ssm_scalar<int>);
static_assert(!specdec::ssm_scalar<long double>);

namespace {

struct fixture {
  dims d{7, 4, 3, 2, 5};
  std::vector<node_id> parent = binary_tree(7);
  problem<double> pr = make_problem(d, flags{true, false, true, true, true}, 4242);
  std::vector<double> y = std::vector<double>(static_cast<std::size_t>(7 * 4 * 3), 11.0);
  std::vector<std::byte> ws = std::vector<std::byte>(1 << 16);

  specdec::view3d<double> yv() { return specdec::make_view(y.data(), d.n, d.heads, d.headdim); }
  bool untouched() const {
    for (double v : y)
      if (v != 11.0) return false;
    return true;
  }
  specdec::status all(const specdec::tree_ssm_inputs<double>& in, const std::vector<node_id>& par,
                      specdec::tree_ssm_options<double> opt = {}) {
    // Every scan entry point must agree on the verdict.
    const auto a = specdec::tree_scan<double>(par, in, opt, yv(), {}, ws, specdec::tree_scan_method::recurrent);
    const auto b = specdec::tree_scan<double>(par, in, opt, yv(), {}, ws, specdec::tree_scan_method::dual);
    const auto c = specdec::tree_scan<double>(par, in, opt, yv(), {}, ws);
    CHECK(a.code() == b.code());
    CHECK(a.code() == c.code());
    return a;
  }
};

}  // namespace

TEST_CASE("tree scan bad inputs: trees") {
  fixture f;
  const auto in = f.pr.inputs();
  CHECK(f.all(in, {-1, 0, 0, 4, 1, 2, 2}) == status_code::not_topological);
  CHECK(f.all(in, {-1, 0, -1, 1, 1, 2, 2}) == status_code::multiple_roots);
  CHECK(f.all(in, {0, 0, 0, 1, 1, 2, 2}) == status_code::no_root);
  CHECK(f.all(in, {-1, 0, 0, 1, 1, 2, -3}) == status_code::parent_out_of_range);
  CHECK(f.all(in, {-1, 0, 0}) == status_code::size_mismatch);
  CHECK(f.untouched());
}

TEST_CASE("tree scan bad inputs: shapes") {
  fixture f;
  auto in = f.pr.inputs();
  const auto d = f.d;
  auto with = [&](auto mutate) {
    auto c = in;
    mutate(c);
    return f.all(c, f.parent);
  };
  CHECK(with([&](auto& c) { c.dt = specdec::make_view<const double>(f.pr.dt.data(), d.n, d.heads - 1); }) ==
        status_code::size_mismatch);
  CHECK(with([&](auto& c) { c.A = specdec::make_view<const double>(f.pr.A.data(), d.heads - 1); }) ==
        status_code::size_mismatch);
  CHECK(with([&](auto& c) { c.C = specdec::make_view<const double>(f.pr.C.data(), d.n, d.groups, d.dstate - 1); }) ==
        status_code::size_mismatch);
  CHECK(with([&](auto& c) { c.B = specdec::make_view<const double>(f.pr.B.data(), d.n - 1, d.groups, d.dstate); }) ==
        status_code::size_mismatch);
  CHECK(with([&](auto& c) { c.B = specdec::make_view<const double>(f.pr.B.data(), d.n, 3, 2); }) ==
        status_code::invalid_argument);  // heads % groups != 0
  CHECK(with([&](auto& c) { c.D = specdec::make_view<const double>(f.pr.D.data(), d.heads, 2); }) ==
        status_code::size_mismatch);
  CHECK(with([&](auto& c) { c.z = specdec::make_view<const double>(f.pr.z.data(), d.n, d.heads, 2); }) ==
        status_code::size_mismatch);
  CHECK(with([&](auto& c) { c.h0 = specdec::make_view<const double>(f.pr.h0.data(), d.heads, d.headdim, 4); }) ==
        status_code::size_mismatch);
  CHECK(with([&](auto& c) { c.dt_bias = specdec::make_view<const double>(f.pr.dt_bias.data(), 1); }) ==
        status_code::size_mismatch);
  CHECK(with([&](auto& c) { c.x.data = nullptr; }) == status_code::invalid_argument);
  CHECK(with([&](auto& c) { c.x.stride[0] = -1; }) == status_code::invalid_argument);
  // Output of the wrong shape, too-small workspace, states of the wrong shape.
  std::vector<double> small(5);
  CHECK(specdec::tree_scan<double>(f.parent, in, {}, specdec::make_view(small.data(), 1, 1, 5), {}, f.ws) ==
        status_code::size_mismatch);
  CHECK(specdec::tree_scan<double>(f.parent, in, {}, f.yv(), {}, std::span<std::byte>(f.ws.data(), 8)) ==
        status_code::buffer_too_small);
  CHECK(specdec::tree_scan<double>(f.parent, in, {}, f.yv(), {}, {}, specdec::tree_scan_method::dual) ==
        status_code::buffer_too_small);
  CHECK(specdec::tree_scan<double>(f.parent, in, {}, f.yv(), specdec::make_view(small.data(), 1, 1, 1, 5), f.ws) ==
        status_code::size_mismatch);
  CHECK(f.untouched());
}

TEST_CASE("tree scan bad inputs: the recurrent workspace at its exact size, and one slot short") {
  // Exactly the queried bytes, in a buffer of its own (the sanitizer build
  // catches any write past it), for the folded walk (no states: runs, branch
  // slots, scales) and the per-node walk (states); with too few bytes for
  // the depth slots (carved last) the scan refuses and writes nothing.
  for (const auto& parent : {binary_tree(15), chain_tree(15), random_tree(15, 77)}) {
    const dims d{15, 2, 5, 1, 6};
    const auto pr = make_problem(d, flags{}, 78);
    const specdec::tree_ssm_shape shape{d.n, d.heads, d.headdim, d.groups, d.dstate};
    const std::size_t bytes = specdec::tree_scan_recurrent_workspace_size<double>(parent, shape);
    const std::size_t slot = static_cast<std::size_t>(d.headdim * d.dstate) * sizeof(double);
    for (const bool with_states : {false, true}) {
      INFO("states " << with_states);
      std::vector<double> y(static_cast<std::size_t>(d.n * d.heads * d.headdim), 11.0), ref(y.size());
      std::vector<double> st(with_states ? static_cast<std::size_t>(d.n * d.heads * d.headdim * d.dstate) : 0);
      const auto sv =
          with_states ? specdec::make_view(st.data(), d.n, d.heads, d.headdim, d.dstate) : specdec::view4d<double>{};
      // Short by a slot beyond the alignment slack, whatever the allocator's alignment.
      std::vector<std::byte> big(bytes + 4096), exact(bytes),
          short_ws(bytes - slot - specdec::unaligned_workspace_slack);
      REQUIRE(specdec::tree_scan_recurrent<double>(parent, pr.inputs(), {},
                                                   specdec::make_view(ref.data(), d.n, d.heads, d.headdim), sv, big)
                  .ok());
      REQUIRE(specdec::tree_scan_recurrent<double>(parent, pr.inputs(), {},
                                                   specdec::make_view(y.data(), d.n, d.heads, d.headdim), sv, exact)
                  .ok());
      CHECK(y == ref);
      std::fill(y.begin(), y.end(), 11.0);
      CHECK(specdec::tree_scan_recurrent<double>(parent, pr.inputs(), {},
                                                 specdec::make_view(y.data(), d.n, d.heads, d.headdim), sv,
                                                 short_ws) == status_code::buffer_too_small);
      bool untouched = true;
      for (double v : y) untouched = untouched && v == 11.0;
      CHECK(untouched);
    }
  }
}

TEST_CASE("tree scan bad inputs: the dual workspace at its exact size, and short") {
  // Exactly the queried bytes, in a buffer of its own (the sanitizer build
  // catches any write past it): N = 13 and 15 leave padded node columns in
  // the h0 C^T tiles, at sizes whose padding exceeds the 256-byte alignment
  // between workspace regions (smaller ones hide a region carved short for
  // the padding); with and without h0; x and h0 also strided along
  // headdim / dstate, so that the scratch after the GEMM's output holds the
  // copies it reads (regions that overlap give wrong outputs). Checked
  // against the recurrent scan. Short by the last region (the D and z rows)
  // beyond the alignment slack: refused, nothing written.
  for (const std::int64_t n : {13, 15})
    for (const bool h0 : {true, false})
      for (const bool strided : {false, true}) {
        INFO("n " << n << " h0 " << h0 << " strided " << strided);
        const dims d{n, 2, 9, 1, 40};
        flags f;
        f.has_h0 = h0;
        f.has_z = true;
        const auto parent = random_tree(n, 81);
        const auto pr = make_problem(d, f, 82);
        auto in = pr.inputs();
        // x as [N, headdim, heads] and h0 as [heads, dstate, headdim] in memory:
        // an [A, B, C] array stored with its last two axes swapped.
        const auto swap_last_axes = [](const std::vector<double>& src, std::int64_t A, std::int64_t B, std::int64_t C) {
          std::vector<double> out(src.size());
          for (std::int64_t a = 0; a < A; ++a)
            for (std::int64_t b = 0; b < B; ++b)
              for (std::int64_t c = 0; c < C; ++c)
                out[static_cast<std::size_t>((a * C + c) * B + b)] = src[static_cast<std::size_t>((a * B + b) * C + c)];
          return out;
        };
        std::vector<double> xt, h0t;
        if (strided) {
          xt = swap_last_axes(pr.x, d.n, d.heads, d.headdim);
          in.x = {xt.data(), {d.n, d.heads, d.headdim}, {d.headdim * d.heads, 1, d.heads}};
          if (h0) {
            h0t = swap_last_axes(pr.h0, d.heads, d.headdim, d.dstate);
            in.h0 = {h0t.data(), {d.heads, d.headdim, d.dstate}, {d.dstate * d.headdim, 1, d.headdim}};
          }
        }
        const specdec::tree_ssm_shape shape{d.n, d.heads, d.headdim, d.groups, d.dstate};
        const std::size_t bytes = specdec::tree_scan_dual_workspace_size<double>(parent, shape);
        std::vector<std::byte> exact(bytes), short_ws(bytes - 2 * static_cast<std::size_t>(d.headdim) * sizeof(double) -
                                                      specdec::unaligned_workspace_slack);
        std::vector<double> y(static_cast<std::size_t>(d.n * d.heads * d.headdim), 11.0), ref(y.size());
        std::vector<std::byte> rws(specdec::tree_scan_recurrent_workspace_size<double>(parent, shape));
        REQUIRE(specdec::tree_scan_recurrent<double>(parent, in, {},
                                                     specdec::make_view(ref.data(), d.n, d.heads, d.headdim), {}, rws)
                    .ok());
        REQUIRE(specdec::tree_scan_dual<double>(parent, in, {}, specdec::make_view(y.data(), d.n, d.heads, d.headdim),
                                                exact)
                    .ok());
        CHECK(max_scaled_error(y, ref, 1e-12, 1e-12) <= 1.0);
        std::fill(y.begin(), y.end(), 11.0);
        CHECK(specdec::tree_scan_dual<double>(parent, in, {}, specdec::make_view(y.data(), d.n, d.heads, d.headdim),
                                              short_ws) == status_code::buffer_too_small);
        bool untouched = true;
        for (double v : y) untouched = untouched && v == 11.0;
        CHECK(untouched);
      }
}

TEST_CASE("tree scan bad inputs: values and options") {
  fixture f;
  auto poke = [&](std::vector<double>& v, double value) {
    const double old = v[1];
    v[1] = value;
    const auto s = f.all(f.pr.inputs(), f.parent);
    v[1] = old;
    return s;
  };
  for (double bad : {std::nan(""), static_cast<double>(INFINITY)}) {
    CHECK(poke(f.pr.x, bad) == status_code::non_finite);
    CHECK(poke(f.pr.dt, bad) == status_code::non_finite);
    CHECK(poke(f.pr.B, bad) == status_code::non_finite);
    CHECK(poke(f.pr.C, bad) == status_code::non_finite);
    CHECK(poke(f.pr.D, bad) == status_code::non_finite);
    CHECK(poke(f.pr.z, bad) == status_code::non_finite);
    CHECK(poke(f.pr.h0, bad) == status_code::non_finite);
    CHECK(poke(f.pr.dt_bias, bad) == status_code::non_finite);
    CHECK(poke(f.pr.A, bad) == status_code::non_finite);
  }
  CHECK(poke(f.pr.A, 0.5) == status_code::invalid_argument);  // a growing "decay"
  CHECK(poke(f.pr.A, 0.0).ok());                              // no decay is allowed
  f.y.assign(f.y.size(), 11.0);
  specdec::tree_ssm_options<double> opt;
  opt.dt_min = 1.0;
  opt.dt_max = 0.5;
  CHECK(f.all(f.pr.inputs(), f.parent, opt) == status_code::invalid_argument);
  opt.dt_min = -1.0;
  opt.dt_max = 1.0;
  CHECK(f.all(f.pr.inputs(), f.parent, opt) == status_code::invalid_argument);
  opt.dt_min = std::nan("");
  CHECK(f.all(f.pr.inputs(), f.parent, opt) == status_code::invalid_argument);
  CHECK(f.untouched());
}

TEST_CASE("tree scan bad inputs: dense mask and decay outputs") {
  fixture f;
  const auto n = static_cast<std::size_t>(f.d.n);
  std::vector<std::uint8_t> mask(n * n, 0);
  for (std::size_t i = 0; i < n; ++i) mask[i * n + i] = 1;
  const specdec::tree_ssm_shape shape{f.d.n, f.d.heads, f.d.headdim, f.d.groups, f.d.dstate};
  auto run = [&]() {
    return specdec::tree_scan_dense_mask<double>(specdec::make_view<const std::uint8_t>(mask.data(), f.d.n, f.d.n),
                                                 f.pr.inputs(), {}, f.yv(), f.ws);
  };
  mask[1 * n + 3] = 1;
  CHECK(run() == status_code::not_topological);
  mask[1 * n + 3] = 0;
  mask[2 * n + 2] = 0;
  CHECK(run() == status_code::invalid_argument);
  mask[2 * n + 2] = 2;
  CHECK(run() == status_code::invalid_argument);
  mask[2 * n + 2] = 1;
  // Not closed: row 2 holds node 1, whose row holds node 0, but row 2 lacks 0.
  // A_tree[2] - A_tree[1] = a_2 - a_0 may be positive (exp overflow): rejected.
  mask[1 * n + 0] = 1;
  mask[2 * n + 1] = 1;
  CHECK(run() == status_code::invalid_argument);
  mask[1 * n + 0] = mask[2 * n + 1] = 0;
  CHECK(specdec::tree_scan_dense_mask<double>(specdec::make_view<const std::uint8_t>(mask.data(), 3, 3), f.pr.inputs(),
                                              {}, f.yv(), f.ws) == status_code::size_mismatch);
  CHECK(specdec::tree_scan_dense_mask<double>(specdec::make_view<const std::uint8_t>(mask.data(), f.d.n, f.d.n),
                                              f.pr.inputs(), {}, f.yv(),
                                              std::span<std::byte>(f.ws.data(), 4)) == status_code::buffer_too_small);
  CHECK(f.untouched());
  CHECK(run().ok());  // identity mask: every node alone
  mask[1 * n + 0] = mask[2 * n + 1] = mask[2 * n + 0] = 1;
  CHECK(run().ok());  // the closed version of the rejected mask above
  (void)shape;
  std::vector<double> a(n * static_cast<std::size_t>(f.d.heads));
  CHECK(specdec::tree_cumulative_decay<double>(f.parent, f.pr.inputs(), {}, {}, {}) == status_code::invalid_argument);
  CHECK(specdec::tree_cumulative_decay<double>(f.parent, f.pr.inputs(), {}, {},
                                               specdec::make_view(a.data(), f.d.n, f.d.heads - 1)) ==
        status_code::size_mismatch);
  REQUIRE(specdec::tree_cumulative_decay<double>(f.parent, f.pr.inputs(), {}, {},
                                                 specdec::make_view(a.data(), f.d.n, f.d.heads))
              .ok());
  // A_tree is monotone along root paths (A <= 0, dt' >= 0) and equals dt' * A summed over the path.
  for (std::size_t i = 1; i < n; ++i)
    for (std::int64_t h = 0; h < f.d.heads; ++h) {
      const double dtp =
          ref_softplus(f.pr.dt[i * 4 + static_cast<std::size_t>(h)] + f.pr.dt_bias[static_cast<std::size_t>(h)]);
      CHECK(a[i * 4 + static_cast<std::size_t>(h)] ==
            Approx(a[static_cast<std::size_t>(f.parent[i]) * 4 + static_cast<std::size_t>(h)] +
                   dtp * f.pr.A[static_cast<std::size_t>(h)])
                .epsilon(1e-12));
    }
}
