// The host kernels' layout fallbacks: every tensor with a non-unit innermost
// stride (gaps filled with NaN, which a stray read would propagate or the
// finiteness check would reject) gives the contiguous result, for every
// scan form, per-node states, the state commit and the tree conv1d (also
// its scalar path for W > 8). The gaps of the outputs stay untouched.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "specdec/ssm/state_commit.hpp"
#include "specdec/ssm/tree_conv1d.hpp"
#include "specdec/ssm/tree_scan.hpp"
#include "ssm_test_util.hpp"

using namespace ssm_test;
using specdec::node_id;

namespace {

// v[2k] = src[k], NaN in between.
template <class T>
std::vector<T> spread(const std::vector<T>& src) {
  std::vector<T> v(2 * src.size(), std::numeric_limits<T>::quiet_NaN());
  for (std::size_t k = 0; k < src.size(); ++k) v[2 * k] = src[k];
  return v;
}

template <class T, int R>
specdec::strided_view<T, R> gapped(T* data, const std::int64_t (&ext)[R]) {
  specdec::strided_view<T, R> v;
  v.data = data;
  std::int64_t s = 2;
  for (int d = R - 1; d >= 0; --d) {
    v.extent[d] = ext[d];
    v.stride[d] = s;
    s *= ext[d];
  }
  return v;
}

template <class T>
bool gaps_untouched(const std::vector<T>& v) {
  for (std::size_t k = 1; k < v.size(); k += 2)
    if (!std::isnan(v[k])) return false;
  return true;
}

template <class T>
void check_layouts(dims d, std::vector<node_id> parent, std::uint64_t seed, double tol) {
  const auto pr = make_problem(d, flags{true, false, true, true, true}, seed).template cast<T>();
  const auto in = pr.inputs();
  const specdec::tree_ssm_shape shape{d.n, d.heads, d.headdim, d.groups, d.dstate};
  const auto ny = static_cast<std::size_t>(d.n * d.heads * d.headdim);
  const auto ns = ny * static_cast<std::size_t>(d.dstate);
  auto x2 = spread(pr.x), dt2 = spread(pr.dt), a2 = spread(pr.A), b2 = spread(pr.B), c2 = spread(pr.C);
  auto dd2 = spread(pr.D), bias2 = spread(pr.dt_bias), z2 = spread(pr.z), h02 = spread(pr.h0);
  specdec::tree_ssm_inputs<T> g;
  g.x = gapped<const T, 3>(x2.data(), {d.n, d.heads, d.headdim});
  g.dt = gapped<const T, 2>(dt2.data(), {d.n, d.heads});
  g.A = gapped<const T, 1>(a2.data(), {d.heads});
  g.B = gapped<const T, 3>(b2.data(), {d.n, d.groups, d.dstate});
  g.C = gapped<const T, 3>(c2.data(), {d.n, d.groups, d.dstate});
  g.D = gapped<const T, 2>(dd2.data(), {d.heads, d.headdim});
  g.dt_bias = gapped<const T, 1>(bias2.data(), {d.heads});
  g.z = gapped<const T, 3>(z2.data(), {d.n, d.heads, d.headdim});
  g.h0 = gapped<const T, 3>(h02.data(), {d.heads, d.headdim, d.dstate});
  using method = specdec::tree_scan_method;
  for (auto m : {method::recurrent, method::dual, method::automatic}) {
    for (bool states : {false, true}) {
      if (states && m == method::dual) continue;
      INFO("method " << static_cast<int>(m) << " states " << states);
      std::vector<T> y(ny), st(states ? ns : 0);
      std::vector<std::byte> ws(specdec::tree_scan_workspace_size<T>(parent, shape, m));
      specdec::view4d<T> sv{};
      if (states) sv = specdec::make_view(st.data(), d.n, d.heads, d.headdim, d.dstate);
      REQUIRE(
          specdec::tree_scan<T>(parent, in, {}, specdec::make_view(y.data(), d.n, d.heads, d.headdim), sv, ws, m).ok());
      std::vector<T> y2(2 * ny, std::numeric_limits<T>::quiet_NaN()),
          st2(states ? 2 * ns : 0, std::numeric_limits<T>::quiet_NaN());
      specdec::view4d<T> sv2{};
      if (states) sv2 = gapped<T, 4>(st2.data(), {d.n, d.heads, d.headdim, d.dstate});
      REQUIRE(
          specdec::tree_scan<T>(parent, g, {}, gapped<T, 3>(y2.data(), {d.n, d.heads, d.headdim}), sv2, ws, m).ok());
      std::vector<T> yg(ny), sg(states ? ns : 0);
      for (std::size_t k = 0; k < ny; ++k) yg[k] = y2[2 * k];
      for (std::size_t k = 0; k < sg.size(); ++k) sg[k] = st2[2 * k];
      CHECK(max_scaled_error(yg, y, tol, tol) <= 1.0);
      CHECK(max_scaled_error(sg, st, tol, tol) <= 1.0);
      CHECK(gaps_untouched(y2));
      CHECK(gaps_untouched(st2));
    }
  }
  // State commit of the deepest path, into a gapped state that is also h0 (in place).
  const auto path = root_path(parent, static_cast<node_id>(d.n - 1));
  std::vector<T> h(pr.h0.size());
  REQUIRE(
      specdec::tree_ssm_commit_path<T>(parent, in, {}, path, specdec::make_view(h.data(), d.heads, d.headdim, d.dstate))
          .ok());
  auto hv = gapped<T, 3>(h02.data(), {d.heads, d.headdim, d.dstate});
  REQUIRE(specdec::tree_ssm_commit_path<T>(parent, g, {}, path, hv).ok());
  std::vector<T> hg(h.size());
  for (std::size_t k = 0; k < h.size(); ++k) hg[k] = h02[2 * k];
  CHECK(max_scaled_error(hg, h, tol, tol) <= 1.0);
  CHECK(gaps_untouched(h02));
}

template <class T>
void check_conv(std::int64_t n, std::int64_t ch, std::int64_t w, std::uint64_t seed, double tol) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> nd;
  auto rnd = [&](std::int64_t k) {
    std::vector<T> v(static_cast<std::size_t>(k));
    for (auto& e : v) e = static_cast<T>(nd(rng));
    return v;
  };
  const auto parent = random_tree(n, seed);
  auto x = rnd(n * ch), weight = rnd(ch * w), bias = rnd(ch), state = rnd(ch * w);
  specdec::tree_conv1d_inputs<T> in;
  in.x = specdec::make_view<const T>(x.data(), n, ch);
  in.weight = specdec::make_view<const T>(weight.data(), ch, w);
  in.bias = specdec::make_view<const T>(bias.data(), ch);
  in.conv_state = specdec::make_view<const T>(state.data(), ch, w);
  in.silu = true;
  std::vector<std::byte> ws(specdec::tree_conv1d_workspace_size(w));
  std::vector<T> out(static_cast<std::size_t>(n * ch));
  REQUIRE(specdec::tree_conv1d<T>(parent, in, specdec::make_view(out.data(), n, ch), ws).ok());
  // Column 0 of the W-column state is never read: a NaN there is accepted.
  state[0] = std::numeric_limits<T>::quiet_NaN();
  auto x2 = spread(x);
  auto g = in;
  g.x = gapped<const T, 2>(x2.data(), {n, ch});
  std::vector<T> out2(2 * out.size(), std::numeric_limits<T>::quiet_NaN());
  REQUIRE(specdec::tree_conv1d<T>(parent, g, gapped<T, 2>(out2.data(), {n, ch}), ws).ok());
  std::vector<T> og(out.size());
  for (std::size_t k = 0; k < out.size(); ++k) og[k] = out2[2 * k];
  CHECK(max_scaled_error(og, out, tol, tol) <= 1.0);
  CHECK(gaps_untouched(out2));
}

}  // namespace

TEST_CASE("host layouts: non-unit innermost strides give the contiguous results") {
  check_layouts<double>({13, 4, 6, 2, 9}, random_tree(13, 31), 31, 1e-12);
  check_layouts<double>({9, 2, 5, 1, 7}, chain_tree(9), 32, 1e-12);
  check_layouts<float>({21, 4, 8, 2, 16}, binary_tree(21), 33, 1e-5);
}

TEST_CASE("host layouts: tree conv1d scalar path (strided rows, W > 8) equals the vector path") {
  for (std::int64_t w : {1, 3, 4, 9}) {
    INFO("W " << w);
    check_conv<double>(11, 70, w, 40 + static_cast<std::uint64_t>(w), 1e-13);
    check_conv<float>(11, 70, w, 50 + static_cast<std::uint64_t>(w), 1e-6);
  }
}
