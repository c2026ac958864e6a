#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

#include "specdec/ssm/tree_conv1d.hpp"
#include "ssm_test_util.hpp"

using namespace ssm_test;
using specdec::node_id;
using specdec::status_code;

namespace {

struct conv_problem {
  std::int64_t n, ch, w, len;
  std::vector<double> x, weight, bias, state;  // x [n, ch]; weight [ch, w]; state [ch, len]
};

conv_problem make_conv(std::int64_t n, std::int64_t ch, std::int64_t w, std::int64_t len, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> nd;
  conv_problem c{n, ch, w, len, {}, {}, {}, {}};
  auto fill = [&](std::vector<double>& v, std::int64_t k) {
    v.resize(static_cast<std::size_t>(k));
    for (auto& e : v) e = nd(rng);
  };
  fill(c.x, n * ch);
  fill(c.weight, ch * w);
  fill(c.bias, ch);
  fill(c.state, ch * len);
  return c;
}

specdec::tree_conv1d_inputs<double> conv_inputs(const conv_problem& c, bool silu) {
  specdec::tree_conv1d_inputs<double> in;
  in.x = specdec::make_view(c.x.data(), c.n, c.ch);
  in.weight = specdec::make_view(c.weight.data(), c.ch, c.w);
  in.bias = specdec::make_view(c.bias.data(), c.ch);
  if (c.len > 0) in.conv_state = specdec::make_view(c.state.data(), c.ch, c.len);
  in.silu = silu;
  return in;
}

// Plain causal conv1d of the token sequence `seq` (rows of x) after the
// state's columns: out[t][c] = bias + sum_k w[c][k] * full[t + k][c] over
// full = [state columns..., seq...].
std::vector<double> causal_conv(const conv_problem& c, const std::vector<node_id>& seq, bool silu) {
  std::vector<double> out(seq.size() * static_cast<std::size_t>(c.ch));
  for (std::int64_t ch = 0; ch < c.ch; ++ch) {
    std::vector<double> full;
    for (std::int64_t k = 0; k < c.len; ++k) full.push_back(c.state[static_cast<std::size_t>(ch * c.len + k)]);
    for (node_id v : seq) full.push_back(c.x[static_cast<std::size_t>(v * c.ch + ch)]);
    for (std::size_t t = 0; t < seq.size(); ++t) {
      double acc = c.bias[static_cast<std::size_t>(ch)];
      const std::int64_t end = c.len + static_cast<std::int64_t>(t);  // index of token t in full
      for (std::int64_t k = 0; k < c.w; ++k) {
        const std::int64_t idx = end - (c.w - 1 - k);
        if (idx >= 0) acc += c.weight[static_cast<std::size_t>(ch * c.w + k)] * full[static_cast<std::size_t>(idx)];
      }
      out[t * static_cast<std::size_t>(c.ch) + static_cast<std::size_t>(ch)] = silu ? ref_silu(acc) : acc;
    }
  }
  return out;
}

std::vector<double> run_tree_conv(const std::vector<node_id>& parent, const conv_problem& c, bool silu) {
  std::vector<double> out(static_cast<std::size_t>(c.n * c.ch), -5.0);
  std::vector<std::byte> ws(specdec::tree_conv1d_workspace_size(c.w));
  const auto s =
      specdec::tree_conv1d<double>(parent, conv_inputs(c, silu), specdec::make_view(out.data(), c.n, c.ch), ws);
  REQUIRE(s.ok());
  return out;
}

}  // namespace

TEST_CASE("tree conv1d: a chain equals the causal conv1d") {
  std::uint64_t seed = 900;
  for (std::int64_t w : {1, 2, 4}) {
    for (std::int64_t extra : {0, 1}) {  // conv state with W-1 or W columns
      const std::int64_t len = w - 1 + extra;
      if (len == 0 && w > 1) continue;
      ++seed;
      INFO("seed " << seed << " W " << w << " L " << len);
      const auto c = make_conv(9, 5, w, len, seed);
      const auto parent = chain_tree(c.n);
      const auto got = run_tree_conv(parent, c, w % 2 == 0);
      CHECK(max_scaled_error(got, causal_conv(c, root_path(parent, static_cast<node_id>(c.n - 1)), w % 2 == 0), 1e-13,
                             1e-13) <= 1.0);
    }
  }
}

TEST_CASE("tree conv1d: each node's window comes from its ancestors, then the conv state") {
  std::uint64_t seed = 950;
  for (int shape = 0; shape < 2; ++shape) {
    for (std::int64_t w : {2, 4, 5}) {
      ++seed;
      INFO("seed " << seed << " W " << w << " shape " << shape);
      const auto c = make_conv(27, 6, w, w, seed);
      const auto parent = shape == 0 ? random_tree(c.n, seed) : binary_tree(c.n);
      const auto got = run_tree_conv(parent, c, true);
      double worst = 0.0;
      for (node_id v = 0; v < c.n; ++v) {
        const auto ref = causal_conv(c, root_path(parent, v), true);
        const std::vector<double> last(ref.end() - c.ch, ref.end());
        const std::vector<double> mine(got.begin() + v * c.ch, got.begin() + (v + 1) * c.ch);
        worst = std::max(worst, max_scaled_error(mine, last, 1e-13, 1e-13));
      }
      CHECK(worst <= 1.0);
    }
  }
}

TEST_CASE("tree conv1d: committed conv state continues the sequence exactly") {
  for (std::int64_t extra : {0, 1}) {
    const std::uint64_t seed = 990 + static_cast<std::uint64_t>(extra);
    INFO("seed " << seed << " state columns W-1+" << extra);
    const std::int64_t w = 4;
    auto c = make_conv(15, 3, w, w - 1 + extra, seed);
    const auto parent = binary_tree(c.n);
    const auto path = root_path(parent, 11);  // 0, 2, 5, 11
    const auto before = c;
    // Expected: the newest L columns of [state..., x[path]...].
    std::vector<double> expect(c.state.size());
    for (std::int64_t ch = 0; ch < c.ch; ++ch) {
      std::vector<double> full;
      for (std::int64_t k = 0; k < c.len; ++k) full.push_back(c.state[static_cast<std::size_t>(ch * c.len + k)]);
      for (node_id v : path) full.push_back(c.x[static_cast<std::size_t>(v * c.ch + ch)]);
      for (std::int64_t k = 0; k < c.len; ++k)
        expect[static_cast<std::size_t>(ch * c.len + k)] = full[full.size() - static_cast<std::size_t>(c.len - k)];
    }
    REQUIRE(specdec::tree_conv1d_commit_state<double>(parent, specdec::make_view<const double>(c.x.data(), c.n, c.ch),
                                                      path, specdec::make_view(c.state.data(), c.ch, c.len))
                .ok());
    CHECK(c.state == expect);
    // Next round: a fresh chain from the committed state equals one long conv over both rounds.
    auto next = make_conv(6, 3, w, c.len, seed + 100);
    next.weight = c.weight;
    next.bias = c.bias;
    next.state = c.state;
    const auto got = run_tree_conv(chain_tree(next.n), next, false);
    conv_problem joint = before;
    std::vector<node_id> seq = path;
    for (std::int64_t i = 0; i < next.n; ++i) {
      joint.x.insert(joint.x.end(), next.x.begin() + i * next.ch, next.x.begin() + (i + 1) * next.ch);
      seq.push_back(static_cast<node_id>(before.n + i));
    }
    joint.n = before.n + next.n;
    const auto ref = causal_conv(joint, seq, false);
    const std::vector<double> tail(ref.end() - next.n * next.ch, ref.end());
    CHECK(max_scaled_error(got, tail, 1e-13, 1e-13) <= 1.0);
  }
}

TEST_CASE("tree conv1d: the state commit equals its definition for packed and strided layouts") {
  // The packed [channels, L] block takes a block move, column-major
  // states column moves, other layouts the channel loop. All must give
  // exactly the newest L columns of [state..., x[path]...], for paths
  // shorter than, as long as and longer than L, and leave padding entries
  // alone.
  std::uint64_t seed = 5100;
  for (std::int64_t len : {1, 2, 3, 5})
    for (std::int64_t ch : {1, 4, 13, 37})
      for (int layout = 0; layout < 4; ++layout) {  // packed, padded rows, column-major, padded columns
        ++seed;
        INFO("seed " << seed << " L " << len << " channels " << ch << " layout " << layout);
        const auto c = make_conv(9, ch, 4, len, seed);
        const auto parent = random_tree(c.n, seed);
        for (node_id v = 0; v < c.n; ++v) {
          const auto path = root_path(parent, v);
          INFO("path to node " << v << ", " << path.size() << " nodes");
          const std::int64_t s0 = layout == 0 ? len : layout == 1 ? len + 2 : 1;
          const std::int64_t s1 = layout == 2 ? ch : layout == 3 ? ch + 3 : 1;
          std::vector<double> mem(static_cast<std::size_t>((ch + 3) * (len + 2)), -7.0);  // -7: padding
          for (std::int64_t k = 0; k < ch; ++k)
            for (std::int64_t j = 0; j < len; ++j)
              mem[static_cast<std::size_t>(k * s0 + j * s1)] = c.state[static_cast<std::size_t>(k * len + j)];
          std::vector<double> expect = mem;
          for (std::int64_t k = 0; k < ch; ++k) {
            std::vector<double> full(c.state.begin() + k * len, c.state.begin() + (k + 1) * len);
            for (const node_id u : path) full.push_back(c.x[static_cast<std::size_t>(u * ch + k)]);
            for (std::int64_t j = 0; j < len; ++j)
              expect[static_cast<std::size_t>(k * s0 + j * s1)] = full[full.size() - static_cast<std::size_t>(len - j)];
          }
          specdec::view2d<double> state{mem.data(), {ch, len}, {s0, s1}};
          REQUIRE(specdec::tree_conv1d_commit_state<double>(
                      parent, specdec::make_view<const double>(c.x.data(), c.n, ch), path, state)
                      .ok());
          CHECK(mem == expect);
        }
      }
}

// The vector path reads channel-contiguous weights ([W][channels]), bias
// and a column-major state in place and gathers other layouts: the same
// sums in the same order, so the same bits.
template <class T>
void check_channel_contiguous(const conv_problem& c, const std::vector<node_id>& parent) {
  const auto cast = [](const std::vector<double>& v) { return std::vector<T>(v.begin(), v.end()); };
  const auto x = cast(c.x), weight = cast(c.weight), bias = cast(c.bias), state = cast(c.state);
  std::vector<T> weight_t(weight.size()), state_t(state.size());
  for (std::int64_t k = 0; k < c.ch; ++k) {
    for (std::int64_t j = 0; j < c.w; ++j)
      weight_t[static_cast<std::size_t>(j * c.ch + k)] = weight[static_cast<std::size_t>(k * c.w + j)];
    for (std::int64_t j = 0; j < c.len; ++j)
      state_t[static_cast<std::size_t>(j * c.ch + k)] = state[static_cast<std::size_t>(k * c.len + j)];
  }
  std::vector<std::byte> ws(specdec::tree_conv1d_workspace_size(c.w));
  const auto run = [&](bool weight_rows, bool state_rows, bool with_bias) {
    specdec::tree_conv1d_inputs<T> in;
    in.x = specdec::make_view<const T>(x.data(), c.n, c.ch);
    in.weight = weight_rows ? specdec::view2d<const T>{weight_t.data(), {c.ch, c.w}, {1, c.ch}}
                            : specdec::make_view<const T>(weight.data(), c.ch, c.w);
    if (with_bias) in.bias = specdec::make_view<const T>(bias.data(), c.ch);
    if (c.len > 0)
      in.conv_state = state_rows ? specdec::view2d<const T>{state_t.data(), {c.ch, c.len}, {1, c.ch}}
                                 : specdec::make_view<const T>(state.data(), c.ch, c.len);
    in.silu = true;
    std::vector<T> out(static_cast<std::size_t>(c.n * c.ch));
    REQUIRE(specdec::tree_conv1d<T>(parent, in, specdec::make_view(out.data(), c.n, c.ch), ws).ok());
    return out;
  };
  for (const bool with_bias : {true, false}) {
    const auto want = run(false, false, with_bias);
    CHECK(run(true, false, with_bias) == want);
    CHECK(run(false, true, with_bias) == want);
    CHECK(run(true, true, with_bias) == want);
  }
}

TEST_CASE("tree conv1d: channel-contiguous weights and state give the bits of row-major ones") {
  // Channel counts with a vector tail and more than one 64-channel tile;
  // every width of the vector path's range and the state's column counts.
  std::uint64_t seed = 6100;
  for (const std::int64_t ch : {5, 70, 131})
    for (const std::int64_t w : {1, 2, 4, 8})
      for (const std::int64_t extra : {0, 2}) {
        ++seed;
        const std::int64_t len = w - 1 + extra;
        INFO("seed " << seed << " channels " << ch << " W " << w << " L " << len);
        const auto c = make_conv(9, ch, w, len, seed);
        const auto parent = random_tree(c.n, seed);
        check_channel_contiguous<double>(c, parent);
        check_channel_contiguous<float>(c, parent);
      }
}

TEST_CASE("tree conv1d: bad inputs return a status and leave the output untouched") {
  auto c = make_conv(7, 3, 4, 3, 1234);
  const auto parent = binary_tree(c.n);
  std::vector<double> out(static_cast<std::size_t>(c.n * c.ch), 3.0);
  std::vector<std::byte> ws(specdec::tree_conv1d_workspace_size(c.w));
  auto run = [&](const specdec::tree_conv1d_inputs<double>& in, std::vector<node_id> par, std::span<std::byte> w) {
    return specdec::tree_conv1d<double>(par, in, specdec::make_view(out.data(), c.n, c.ch), w);
  };
  auto in = conv_inputs(c, false);
  CHECK(run(in, {-1, 0, 0, 5, 1, 2, 2}, ws) == status_code::not_topological);
  CHECK(run(in, {-1, 0, 0}, ws) == status_code::size_mismatch);
  CHECK(run(in, parent, std::span<std::byte>(ws.data(), 1)) == status_code::buffer_too_small);
  auto short_state = in;
  short_state.conv_state = specdec::make_view<const double>(c.state.data(), c.ch, 2);  // L < W - 1
  CHECK(run(short_state, parent, ws) == status_code::size_mismatch);
  auto no_state = in;
  no_state.conv_state = {};
  CHECK(run(no_state, parent, ws) == status_code::invalid_argument);
  auto bad_w = in;
  bad_w.weight = specdec::make_view<const double>(c.weight.data(), c.ch - 1, c.w);
  CHECK(run(bad_w, parent, ws) == status_code::size_mismatch);
  c.x[4] = std::nan("");
  CHECK(run(conv_inputs(c, false), parent, ws) == status_code::non_finite);
  bool untouched = true;
  for (double v : out) untouched = untouched && v == 3.0;
  CHECK(untouched);
  // Channel-contiguous views take the in-place path and its one-row
  // finiteness check: a NaN in the weight or in a state column the conv
  // reads is still non_finite with nothing written; one in the column it
  // never reads (the oldest of W) is accepted.
  c.x[4] = 0.5;
  const auto cm = make_conv(7, 3, 4, 4, 1235);  // L = W columns
  std::vector<double> weight_t(cm.weight.size()), state_t(cm.state.size());
  for (std::int64_t k = 0; k < cm.ch; ++k) {
    for (std::int64_t j = 0; j < cm.w; ++j)
      weight_t[static_cast<std::size_t>(j * cm.ch + k)] = cm.weight[static_cast<std::size_t>(k * cm.w + j)];
    for (std::int64_t j = 0; j < cm.len; ++j)
      state_t[static_cast<std::size_t>(j * cm.ch + k)] = cm.state[static_cast<std::size_t>(k * cm.len + j)];
  }
  auto cin = conv_inputs(cm, true);
  cin.weight = specdec::view2d<const double>{weight_t.data(), {cm.ch, cm.w}, {1, cm.ch}};
  cin.conv_state = specdec::view2d<const double>{state_t.data(), {cm.ch, cm.len}, {1, cm.ch}};
  weight_t[5] = std::nan("");
  CHECK(run(cin, parent, ws) == status_code::non_finite);
  weight_t[5] = 0.25;
  state_t[static_cast<std::size_t>(2 * cm.ch + 1)] = std::nan("");  // column 2: read
  CHECK(run(cin, parent, ws) == status_code::non_finite);
  for (double v : out) untouched = untouched && v == 3.0;
  CHECK(untouched);
  state_t[static_cast<std::size_t>(2 * cm.ch + 1)] = 1.0;
  state_t[1] = std::nan("");  // column 0: never read
  CHECK(run(cin, parent, ws).ok());
  std::vector<node_id> bad_path{0, 3};
  CHECK(specdec::tree_conv1d_commit_state<double>(parent, specdec::make_view<const double>(c.x.data(), c.n, c.ch),
                                                  bad_path, specdec::make_view(c.state.data(), c.ch, c.len)) ==
        status_code::invalid_argument);
}
