#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "specdec/ssm/tree_scan.hpp"
#include "specdec/ssm/tree_scan_dense_mask.hpp"
#include "ssm_test_util.hpp"

using namespace ssm_test;
using specdec::node_id;
using specdec::status_code;

namespace {

enum class algo { recurrent, dual, automatic, dense_mask };

const char* algo_name(algo a) {
  switch (a) {
    case algo::recurrent:
      return "recurrent";
    case algo::dual:
      return "dual";
    case algo::automatic:
      return "automatic";
    case algo::dense_mask:
      return "dense_mask";
  }
  return "?";
}

// Dense ancestor mask built straight from the parents (row i = row parent + bit i).
std::vector<std::uint8_t> ancestor_mask(const std::vector<node_id>& parent) {
  const std::size_t n = parent.size();
  std::vector<std::uint8_t> m(n * n, 0);
  for (std::size_t i = 0; i < n; ++i) {
    if (parent[i] >= 0)
      for (std::size_t j = 0; j < n; ++j) m[i * n + j] = m[static_cast<std::size_t>(parent[i]) * n + j];
    m[i * n + i] = 1;
  }
  return m;
}

// Runs one algorithm; returns y [N, heads, headdim] and (recurrent only) the states.
template <class T>
specdec::status run_scan(algo a, const std::vector<node_id>& parent, const problem<T>& pr,
                         const specdec::tree_ssm_options<T>& opt, std::vector<T>& y, std::vector<T>* states = nullptr) {
  const auto& d = pr.d;
  y.assign(static_cast<std::size_t>(d.n * d.heads * d.headdim), T(-777));
  auto yv = specdec::make_view(y.data(), d.n, d.heads, d.headdim);
  specdec::view4d<T> sv{};
  if (states != nullptr) {
    states->assign(static_cast<std::size_t>(d.n * d.heads * d.headdim * d.dstate), T(-777));
    sv = specdec::make_view(states->data(), d.n, d.heads, d.headdim, d.dstate);
  }
  const specdec::tree_ssm_shape shape{d.n, d.heads, d.headdim, d.groups, d.dstate};
  if (a == algo::dense_mask) {
    const auto mask = ancestor_mask(parent);
    std::vector<std::byte> ws(specdec::tree_scan_dense_mask_workspace_size<T>(shape));
    return specdec::tree_scan_dense_mask<T>(specdec::make_view(mask.data(), d.n, d.n), pr.inputs(), opt, yv, ws);
  }
  const auto method = a == algo::recurrent ? specdec::tree_scan_method::recurrent
                      : a == algo::dual    ? specdec::tree_scan_method::dual
                                           : specdec::tree_scan_method::automatic;
  std::vector<std::byte> ws(specdec::tree_scan_workspace_size<T>(parent, shape, method));
  return specdec::tree_scan<T>(parent, pr.inputs(), opt, yv, sv, ws, method);
}

// Chunked SSD form (Mamba2) of a chain, in float64: intra-chunk quadratic
// part + state passed between chunks of length q.
std::vector<double> chunked_ssd_chain(const problem<double>& pr, std::int64_t q) {
  const auto& d = pr.d;
  const std::int64_t hpg = d.heads / d.groups;
  std::vector<double> y(static_cast<std::size_t>(d.n * d.heads * d.headdim), 0.0);
  auto X = [&](std::int64_t i, std::int64_t h, std::int64_t p) {
    return pr.x[static_cast<std::size_t>((i * d.heads + h) * d.headdim + p)];
  };
  auto Bv = [&](std::int64_t i, std::int64_t g, std::int64_t k) {
    return pr.B[static_cast<std::size_t>((i * d.groups + g) * d.dstate + k)];
  };
  auto Cv = [&](std::int64_t i, std::int64_t g, std::int64_t k) {
    return pr.C[static_cast<std::size_t>((i * d.groups + g) * d.dstate + k)];
  };
  for (std::int64_t h = 0; h < d.heads; ++h) {
    const std::int64_t g = h / hpg;
    std::vector<double> dt(static_cast<std::size_t>(d.n));
    for (std::int64_t i = 0; i < d.n; ++i)
      dt[static_cast<std::size_t>(i)] = ref_softplus(pr.dt[static_cast<std::size_t>(i * d.heads + h)] +
                                                     (pr.f.has_bias ? pr.dt_bias[static_cast<std::size_t>(h)] : 0.0));
    std::vector<double> H(static_cast<std::size_t>(d.headdim * d.dstate), 0.0);
    if (pr.f.has_h0)
      for (std::size_t e = 0; e < H.size(); ++e) H[e] = pr.h0[static_cast<std::size_t>(h * d.headdim * d.dstate) + e];
    for (std::int64_t c0 = 0; c0 < d.n; c0 += q) {
      const std::int64_t c1 = std::min(d.n, c0 + q);
      std::vector<double> acum(static_cast<std::size_t>(c1 - c0));
      double run = 0.0;
      for (std::int64_t l = c0; l < c1; ++l) {
        run += dt[static_cast<std::size_t>(l)] * pr.A[static_cast<std::size_t>(h)];
        acum[static_cast<std::size_t>(l - c0)] = run;
      }
      for (std::int64_t l = c0; l < c1; ++l) {
        const double al = acum[static_cast<std::size_t>(l - c0)];
        for (std::int64_t p = 0; p < d.headdim; ++p) {
          double v = 0.0;
          for (std::int64_t k = 0; k < d.dstate; ++k) v += Cv(l, g, k) * H[static_cast<std::size_t>(p * d.dstate + k)];
          v *= std::exp(al);  // inter-chunk (off-diagonal) term
          for (std::int64_t s = c0; s <= l; ++s) {
            double cb = 0.0;
            for (std::int64_t k = 0; k < d.dstate; ++k) cb += Cv(l, g, k) * Bv(s, g, k);
            v += std::exp(al - acum[static_cast<std::size_t>(s - c0)]) * dt[static_cast<std::size_t>(s)] * cb *
                 X(s, h, p);
          }
          if (pr.f.has_D) v += pr.D[static_cast<std::size_t>(pr.f.d_per_head ? h : h * d.headdim + p)] * X(l, h, p);
          if (pr.f.has_z) v *= ref_silu(pr.z[static_cast<std::size_t>((l * d.heads + h) * d.headdim + p)]);
          y[static_cast<std::size_t>((l * d.heads + h) * d.headdim + p)] = v;
        }
      }
      // State passing: H <- exp(sum a) H + sum_s exp(acum_end - acum_s) dt_s x_s B_s^T.
      const double aend = acum.back();
      for (std::int64_t p = 0; p < d.headdim; ++p)
        for (std::int64_t k = 0; k < d.dstate; ++k) {
          double v = std::exp(aend) * H[static_cast<std::size_t>(p * d.dstate + k)];
          for (std::int64_t s = c0; s < c1; ++s)
            v += std::exp(aend - acum[static_cast<std::size_t>(s - c0)]) * dt[static_cast<std::size_t>(s)] *
                 X(s, h, p) * Bv(s, g, k);
          H[static_cast<std::size_t>(p * d.dstate + k)] = v;
        }
    }
  }
  return y;
}

// Checks every node's output (and state) against the float64 recurrence on
// its root path alone.
template <class T>
void check_against_root_paths(algo a, const std::vector<node_id>& parent, const problem<double>& pr64, double tol,
                              const ref_options& ro = {}, const specdec::tree_ssm_options<T>& opt = {}) {
  const auto pr = pr64.template cast<T>();
  std::vector<T> y, st;
  const bool want_states = a == algo::recurrent;
  const auto s = run_scan<T>(a, parent, pr, opt, y, want_states ? &st : nullptr);
  REQUIRE(s.ok());
  // The recurrent scan without per-node states runs the folded form (one
  // fused multiply-add per state entry): its outputs are checked too.
  std::vector<T> y_folded;
  if (want_states) REQUIRE(run_scan<T>(a, parent, pr, opt, y_folded).ok());
  const auto& d = pr.d;
  const auto row = static_cast<std::size_t>(d.heads * d.headdim);
  const auto srow = static_cast<std::size_t>(d.heads * d.headdim * d.dstate);
  double worst = 0.0, worst_state = 0.0;
  for (std::int64_t i = 0; i < d.n; ++i) {
    std::vector<double> ry, rs;
    ref_sequence(pr64, ro, root_path(parent, static_cast<node_id>(i)), ry, rs);
    const std::vector<double> last(ry.end() - static_cast<std::ptrdiff_t>(row), ry.end());
    const auto node_row = [&](const std::vector<T>& v) {
      return std::vector<T>(v.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(i) * row),
                            v.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(i + 1) * row));
    };
    worst = std::max(worst, max_scaled_error(node_row(y), last, tol, tol));
    if (want_states) worst = std::max(worst, max_scaled_error(node_row(y_folded), last, tol, tol));
    if (want_states) {
      const std::vector<T> gs(st.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(i) * srow),
                              st.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(i + 1) * srow));
      worst_state = std::max(worst_state, max_scaled_error(gs, rs, tol, tol));
    }
  }
  INFO("algorithm " << algo_name(a) << ", scaled error " << worst << ", state " << worst_state);
  CHECK(worst <= 1.0);
  CHECK(worst_state <= 1.0);
}

}  // namespace

TEST_CASE("tree scan: a chain equals the sequential recurrence and the chunked SSD form") {
  const std::uint64_t seed = 101;
  INFO("seed " << seed);
  const dims d{24, 4, 8, 2, 16};
  for (bool h0 : {false, true}) {
    flags f;
    f.has_h0 = h0;
    f.has_z = h0;
    const auto pr = make_problem(d, f, seed + (h0 ? 1 : 0));
    const auto parent = chain_tree(d.n);
    std::vector<double> ry, rs;
    ref_sequence(pr, {}, parent.empty() ? std::vector<node_id>{} : root_path(parent, static_cast<node_id>(d.n - 1)), ry,
                 rs);
    for (std::int64_t q : {1, 5, 8, 24}) {
      INFO("chunk " << q);
      CHECK(max_scaled_error(chunked_ssd_chain(pr, q), ry, 1e-11, 1e-11) <= 1.0);
    }
    for (algo a : {algo::recurrent, algo::dual, algo::automatic, algo::dense_mask}) {
      INFO(algo_name(a));
      std::vector<double> y;
      REQUIRE(run_scan<double>(a, parent, pr, {}, y).ok());
      CHECK(max_scaled_error(y, ry, 1e-11, 1e-11) <= 1.0);
    }
  }
}

TEST_CASE("tree scan: every node equals the recurrence on its root path alone") {
  struct config {
    dims d;
    flags f;
  };
  std::vector<config> configs;
  configs.push_back({{1, 2, 4, 1, 8}, {}});                                  // root only
  configs.push_back({{17, 4, 8, 2, 16}, {true, true, false, true, true}});   // D per head, groups 2
  configs.push_back({{23, 6, 5, 3, 12}, {true, false, true, true, false}});  // D per dim, z, odd sizes
  configs.push_back({{31, 4, 8, 4, 9}, {false, false, true, false, true}});  // no D, no h0, groups == heads
  configs.push_back({{40, 8, 4, 1, 32}, {true, false, false, true, true}});
  std::uint64_t seed = 2000;
  for (const auto& c : configs) {
    for (int shape = 0; shape < 3; ++shape) {
      ++seed;
      INFO("seed " << seed << " shape " << shape << " n " << c.d.n);
      const auto parent = shape == 0 ? random_tree(c.d.n, seed) : shape == 1 ? binary_tree(c.d.n) : chain_tree(c.d.n);
      const auto pr = make_problem(c.d, c.f, seed);
      for (algo a : {algo::recurrent, algo::dual, algo::automatic, algo::dense_mask}) {
        check_against_root_paths<double>(a, parent, pr, 1e-10);
        check_against_root_paths<float>(a, parent, pr, 2e-4);  // float tolerance: 2e-4 abs + 2e-4 rel
      }
    }
  }
}

namespace {

// A random topological relabelling: new_id[old] with parent[new] < new.
std::vector<node_id> random_topological_relabel(const std::vector<node_id>& parent, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  const std::size_t n = parent.size();
  std::vector<std::vector<node_id>> kids(n);
  for (std::size_t i = 1; i < n; ++i) kids[static_cast<std::size_t>(parent[i])].push_back(static_cast<node_id>(i));
  std::vector<node_id> ready{0}, new_id(n, -1);
  node_id next = 0;
  while (!ready.empty()) {
    const std::size_t k = static_cast<std::size_t>(rng() % ready.size());
    const node_id v = ready[k];
    ready.erase(ready.begin() + static_cast<std::ptrdiff_t>(k));
    new_id[static_cast<std::size_t>(v)] = next++;
    for (node_id c : kids[static_cast<std::size_t>(v)]) ready.push_back(c);
  }
  return new_id;
}

template <class T>
problem<T> permute_nodes(const problem<T>& pr, const std::vector<node_id>& new_id) {
  problem<T> o = pr;
  const auto& d = pr.d;
  auto move_rows = [&](const std::vector<T>& src, std::vector<T>& dst, std::int64_t row) {
    for (std::int64_t i = 0; i < d.n; ++i)
      for (std::int64_t e = 0; e < row; ++e)
        dst[static_cast<std::size_t>(new_id[static_cast<std::size_t>(i)] * row + e)] =
            src[static_cast<std::size_t>(i * row + e)];
  };
  move_rows(pr.x, o.x, d.heads * d.headdim);
  move_rows(pr.z, o.z, d.heads * d.headdim);
  move_rows(pr.dt, o.dt, d.heads);
  move_rows(pr.B, o.B, d.groups * d.dstate);
  move_rows(pr.C, o.C, d.groups * d.dstate);
  return o;
}

}  // namespace

TEST_CASE("tree scan: any topological order gives the same per-node outputs") {
  // 23 nodes: the dual form's h0 GEMM pads the node axis to 24, one wide
  // tile and one narrow one where the target has 32 vector registers, so a
  // node that moves between them must still get the same bits; 29: 32.
  flags f;
  f.has_z = true;
  for (std::uint64_t seed : {31u, 32u, 33u, 34u}) {
    const dims d{seed % 2 ? 29 : 23, 4, 6, 2, 10};
    INFO("seed " << seed << " nodes " << d.n);
    const auto parent = random_tree(d.n, seed);
    const auto pr = make_problem(d, f, seed).cast<float>();
    const auto new_id = random_topological_relabel(parent, seed * 7);
    std::vector<node_id> parent2(parent.size());
    for (std::size_t i = 0; i < parent.size(); ++i)
      parent2[static_cast<std::size_t>(new_id[i])] = parent[i] < 0 ? -1 : new_id[static_cast<std::size_t>(parent[i])];
    REQUIRE(specdec::validate_topological_parents(parent2).ok());
    const auto pr2 = permute_nodes(pr, new_id);
    for (algo a : {algo::recurrent, algo::dual}) {
      INFO(algo_name(a));
      std::vector<float> y1, y2;
      REQUIRE(run_scan<float>(a, parent, pr, {}, y1).ok());
      REQUIRE(run_scan<float>(a, parent2, pr2, {}, y2).ok());
      const auto row = static_cast<std::size_t>(d.heads * d.headdim);
      bool same = true;
      for (std::size_t i = 0; i < parent.size(); ++i)
        for (std::size_t e = 0; e < row; ++e)
          same = same && y1[i * row + e] == y2[static_cast<std::size_t>(new_id[i]) * row + e];
      CHECK(same);  // bitwise: each node performs the same operations in the same order
    }
  }
}

TEST_CASE("tree scan: changing a non-ancestor leaves a node unchanged") {
  const dims d{25, 4, 6, 2, 12};
  flags f;
  f.has_z = true;
  const std::uint64_t seed = 404;
  INFO("seed " << seed);
  const auto parent = random_tree(d.n, seed);
  const auto pr = make_problem(d, f, seed).cast<float>();
  for (algo a : {algo::recurrent, algo::dual, algo::dense_mask}) {
    INFO(algo_name(a));
    std::vector<float> base;
    REQUIRE(run_scan<float>(a, parent, pr, {}, base).ok());
    for (node_id j : {node_id{3}, node_id{11}, node_id{24}}) {
      auto pr2 = pr;
      const auto row = static_cast<std::size_t>(d.heads * d.headdim);
      for (std::size_t e = 0; e < row; ++e) pr2.x[static_cast<std::size_t>(j) * row + e] += 5.0f;
      for (std::int64_t h = 0; h < d.heads; ++h) pr2.dt[static_cast<std::size_t>(j * d.heads + h)] += 3.0f;
      for (std::size_t e = 0; e < static_cast<std::size_t>(d.groups * d.dstate); ++e) {
        pr2.B[static_cast<std::size_t>(j * d.groups * d.dstate) + e] *= -2.0f;
        pr2.C[static_cast<std::size_t>(j * d.groups * d.dstate) + e] += 1.0f;
      }
      std::vector<float> y;
      REQUIRE(run_scan<float>(a, parent, pr2, {}, y).ok());
      int unchanged_ok = 0, changed = 0;
      for (std::int64_t i = 0; i < d.n; ++i) {
        bool same = true;
        for (std::size_t e = 0; e < row; ++e)
          same = same && y[static_cast<std::size_t>(i) * row + e] == base[static_cast<std::size_t>(i) * row + e];
        if (is_ancestor_or_self(parent, j, static_cast<node_id>(i))) {
          changed += same ? 0 : 1;
        } else {
          INFO("node " << i << " changed when non-ancestor " << j << " did");
          CHECK(same);
          ++unchanged_ok;
        }
      }
      CHECK(changed >= 1);  // the modified node itself must move: the check can fail
    }
  }
}

TEST_CASE("tree scan: long chains renormalise the folded recurrent form and stay exact") {
  // Along a chain of 160 nodes with A = -5 and -6 the decays' product
  // falls by far more than 2^-60 (double's renormalisation bound; float's
  // is 2^-30) between the nodes given a huge dt (every 37th: a decay under
  // 2^-60 on its own, a plain step), checked below for head 0: the folded
  // form renormalises its scaled state many times. Headdim 6: the 4- and
  // the 2-row blocks.
  for (std::uint64_t seed : {901u, 902u}) {
    INFO("seed " << seed);
    const dims d{160, 2, 6, 1, 12};
    const auto parent = chain_tree(d.n);
    auto pr = make_problem(d, flags{}, seed);
    pr.A = {-5.0, -6.0};
    for (std::size_t e = 0; e < pr.dt.size(); e += 37) pr.dt[e] = 120.0;  // dt' |A| >= 300
    double stretch = 0.0, longest = 0.0;  // head 0: -log2 of the decay product since the last plain step
    for (std::int64_t i = 0; i < d.n; ++i) {
      const double dt = pr.dt[static_cast<std::size_t>(i * d.heads)] + pr.dt_bias[0];
      const double soft = dt > 20.0 ? dt : std::log1p(std::exp(dt));
      const double bits = -soft * pr.A[0] / std::log(2.0);
      stretch = bits > 60.0 ? 0.0 : stretch + bits;
      longest = std::max(longest, stretch);
    }
    INFO("most bits between plain steps " << longest);
    REQUIRE(longest > 2 * 60.0);  // at least two renormalisations in double, four in float
    check_against_root_paths<double>(algo::recurrent, parent, pr, 1e-10);
    check_against_root_paths<float>(algo::recurrent, parent, pr, 2e-4);
    // A random tree of the same size: runs start from stored scaled states.
    const auto tree = random_tree(d.n, seed);
    check_against_root_paths<double>(algo::recurrent, tree, pr, 1e-10);
    check_against_root_paths<float>(algo::recurrent, tree, pr, 2e-4);
  }
}

TEST_CASE("tree scan: large dt neither overflows nor produces NaN") {
  const dims d{21, 4, 8, 2, 16};
  const std::uint64_t seed = 555;
  INFO("seed " << seed);
  const auto parent = random_tree(d.n, seed);
  for (double big : {50.0, 1e4, 1e20}) {
    INFO("dt scale " << big);
    auto pr = make_problem(d, flags{}, seed);
    for (std::size_t e = 0; e < pr.dt.size(); ++e) pr.dt[e] = (e % 3 == 0) ? big : pr.dt[e];
    for (algo a : {algo::recurrent, algo::dual, algo::dense_mask}) {
      INFO(algo_name(a));
      std::vector<float> y;
      const auto prf = pr.cast<float>();
      REQUIRE(run_scan<float>(a, parent, prf, {}, y).ok());
      bool finite = true;
      for (float v : y) finite = finite && std::isfinite(v);
      CHECK(finite);
      check_against_root_paths<double>(a, parent, pr, 1e-9);
    }
  }
}

TEST_CASE("tree scan: dt clamp and no softplus follow the options") {
  const dims d{15, 2, 4, 1, 8};
  const std::uint64_t seed = 606;
  INFO("seed " << seed);
  const auto parent = binary_tree(d.n);
  const auto pr = make_problem(d, flags{}, seed);
  ref_options ro;
  ro.dt_min = 0.2;
  ro.dt_max = 0.9;
  specdec::tree_ssm_options<double> opt;
  opt.dt_min = 0.2;
  opt.dt_max = 0.9;
  for (algo a : {algo::recurrent, algo::dual, algo::dense_mask})
    check_against_root_paths<double>(a, parent, pr, 1e-10, ro, opt);
  // Without softplus dt + bias may be negative: keep it positive for the test.
  auto pr2 = pr;
  for (auto& v : pr2.dt) v = std::abs(v) + 0.1;
  for (auto& v : pr2.dt_bias) v = std::abs(v);
  ro = {};
  ro.softplus = false;
  opt = {};
  opt.dt_softplus = false;
  for (algo a : {algo::recurrent, algo::dual, algo::dense_mask})
    check_against_root_paths<double>(a, parent, pr2, 1e-10, ro, opt);
}

TEST_CASE("tree scan: strided (non-contiguous) views give the same result") {
  const dims d{13, 4, 6, 2, 8};
  const std::uint64_t seed = 707;
  INFO("seed " << seed);
  const auto parent = random_tree(d.n, seed);
  const auto pr = make_problem(d, flags{true, false, true, true, true}, seed);
  std::vector<double> y_ref;
  REQUIRE(run_scan<double>(algo::recurrent, parent, pr, {}, y_ref).ok());
  // x stored head-major [heads, N, headdim]; B and C interleaved in one [N, 2, groups, dstate] buffer.
  std::vector<double> xt(pr.x.size()), bc(pr.B.size() * 2);
  for (std::int64_t i = 0; i < d.n; ++i)
    for (std::int64_t h = 0; h < d.heads; ++h)
      for (std::int64_t p = 0; p < d.headdim; ++p)
        xt[static_cast<std::size_t>((h * d.n + i) * d.headdim + p)] =
            pr.x[static_cast<std::size_t>((i * d.heads + h) * d.headdim + p)];
  const std::int64_t gs = d.groups * d.dstate;
  for (std::int64_t i = 0; i < d.n; ++i)
    for (std::int64_t e = 0; e < gs; ++e) {
      bc[static_cast<std::size_t>(i * 2 * gs + e)] = pr.B[static_cast<std::size_t>(i * gs + e)];
      bc[static_cast<std::size_t>(i * 2 * gs + gs + e)] = pr.C[static_cast<std::size_t>(i * gs + e)];
    }
  auto in = pr.inputs();
  in.x = specdec::make_strided_view<const double, 3>(xt.data(), {d.n, d.heads, d.headdim},
                                                     {d.headdim, d.n * d.headdim, 1});
  in.B = specdec::make_strided_view<const double, 3>(bc.data(), {d.n, d.groups, d.dstate}, {2 * gs, d.dstate, 1});
  in.C = specdec::make_strided_view<const double, 3>(bc.data() + gs, {d.n, d.groups, d.dstate}, {2 * gs, d.dstate, 1});
  const specdec::tree_ssm_shape shape{d.n, d.heads, d.headdim, d.groups, d.dstate};
  for (auto method : {specdec::tree_scan_method::recurrent, specdec::tree_scan_method::dual}) {
    // Output head-major too.
    std::vector<double> yt(y_ref.size());
    auto yv =
        specdec::make_strided_view<double, 3>(yt.data(), {d.n, d.heads, d.headdim}, {d.headdim, d.n * d.headdim, 1});
    std::vector<std::byte> ws(specdec::tree_scan_workspace_size<double>(parent, shape, method));
    REQUIRE(specdec::tree_scan<double>(parent, in, {}, yv, {}, ws, method).ok());
    double worst = 0.0;
    for (std::int64_t i = 0; i < d.n; ++i)
      for (std::int64_t h = 0; h < d.heads; ++h)
        for (std::int64_t p = 0; p < d.headdim; ++p)
          worst = std::max(worst,
                           std::abs(yv(i, h, p) - y_ref[static_cast<std::size_t>((i * d.heads + h) * d.headdim + p)]));
    CHECK(worst < 1e-12);
  }
}

TEST_CASE("tree scan: dispatcher picks recurrent for states and rejects dual with states") {
  const dims d{15, 4, 8, 1, 16};
  const auto parent = binary_tree(d.n);
  const specdec::tree_ssm_shape shape{d.n, d.heads, d.headdim, d.groups, d.dstate};
  CHECK(specdec::tree_scan_choose(parent, shape, true, true) == specdec::tree_scan_method::recurrent);
  const auto pr = make_problem(d, flags{}, 808);
  std::vector<double> y(static_cast<std::size_t>(d.n * d.heads * d.headdim)),
      st(y.size() * static_cast<std::size_t>(d.dstate));
  std::vector<std::byte> ws(specdec::tree_scan_workspace_size<double>(parent, shape));
  const auto s = specdec::tree_scan<double>(
      parent, pr.inputs(), {}, specdec::make_view(y.data(), d.n, d.heads, d.headdim),
      specdec::make_view(st.data(), d.n, d.heads, d.headdim, d.dstate), ws, specdec::tree_scan_method::dual);
  CHECK(s == status_code::invalid_argument);
  // A deep chain with tiny heads favours the recurrence; a wide shallow tree with many heads the dual form.
  const auto chain = chain_tree(512);
  CHECK(specdec::tree_scan_choose(chain, {512, 1, 64, 1, 128}, false, false) == specdec::tree_scan_method::recurrent);
  std::vector<node_id> star(64, 0);
  star[0] = -1;
  CHECK(specdec::tree_scan_choose(star, {64, 16, 64, 1, 128}, false, false) == specdec::tree_scan_method::dual);
}

TEST_CASE("tree scan: negative control, the seed's formula without the dt' correction is wrong") {
  // STree eq. (5)-(6) read literally for Mamba2: A_tree = L A (no dt') and
  // input terms C_i B_j x_j without dt'_j. It must NOT match the recurrence
  // (while the corrected form, checked above, does), so the correction is
  // load-bearing and the reference comparison can fail.
  const dims d{15, 2, 4, 1, 8};
  const std::uint64_t seed = 1701;
  INFO("seed " << seed);
  const auto parent = binary_tree(d.n);
  const auto pr = make_problem(d, flags{false, false, false, false, false}, seed);
  const auto row = static_cast<std::size_t>(d.heads * d.headdim);
  double worst_uncorrected = 0.0;
  for (node_id i = 0; i < d.n; ++i) {
    std::vector<double> ry, rs;
    const auto path = root_path(parent, i);
    ref_sequence(pr, {}, path, ry, rs);
    std::vector<double> a_tree(path.size());
    for (std::int64_t h = 0; h < d.heads; ++h) {
      double run = 0.0;
      for (std::size_t k = 0; k < path.size(); ++k) a_tree[k] = (run += pr.A[static_cast<std::size_t>(h)]);
      for (std::int64_t p = 0; p < d.headdim; ++p) {
        double y = 0.0;
        for (std::size_t k = 0; k < path.size(); ++k) {
          const auto j = static_cast<std::size_t>(path[k]);
          double cb = 0.0;
          for (std::int64_t q = 0; q < d.dstate; ++q)
            cb += pr.C[static_cast<std::size_t>(i) * static_cast<std::size_t>(d.dstate) + static_cast<std::size_t>(q)] *
                  pr.B[j * static_cast<std::size_t>(d.dstate) + static_cast<std::size_t>(q)];
          y += std::exp(a_tree.back() - a_tree[k]) * cb *
               pr.x[(j * static_cast<std::size_t>(d.heads) + static_cast<std::size_t>(h)) *
                        static_cast<std::size_t>(d.headdim) +
                    static_cast<std::size_t>(p)];
        }
        const double ref = ry[ry.size() - row + static_cast<std::size_t>(h * d.headdim + p)];
        worst_uncorrected = std::max(worst_uncorrected, std::abs(y - ref) / (1e-6 + std::abs(ref)));
      }
    }
  }
  INFO("largest relative error of the uncorrected formula " << worst_uncorrected);
  CHECK(worst_uncorrected > 0.1);
}

TEST_CASE("tree scan: workspace bounds need no tree and serve every tree of that size") {
  for (std::int64_t n : {1, 2, 7, 33}) {
    const specdec::tree_ssm_shape shape{.nodes = n, .heads = 4, .headdim = 8, .groups = 2, .dstate = 16};
    for (int kind = 0; kind < 3; ++kind) {
      const auto parent = kind == 0   ? random_tree(n, 77 + static_cast<std::uint64_t>(n))
                          : kind == 1 ? binary_tree(n)
                                      : chain_tree(n);
      const std::span<const node_id> ps(parent);
      for (auto m : {specdec::tree_scan_method::recurrent, specdec::tree_scan_method::dual,
                     specdec::tree_scan_method::automatic}) {
        const std::size_t exact = specdec::tree_scan_workspace_size<float>(ps, shape, m);
        CHECK(specdec::tree_scan_workspace_bound<float>(n, shape, m) >= exact);
      }
      // A depth bound tightens it and still covers the tree.
      std::int64_t depth = 0;
      for (std::int64_t i = 0; i < n; ++i) {
        std::int64_t d = 0;
        for (node_id u = static_cast<node_id>(i); u > 0; u = parent[static_cast<std::size_t>(u)]) ++d;
        depth = std::max(depth, d);
      }
      CHECK(specdec::tree_scan_workspace_bound<float>(n, shape, specdec::tree_scan_method::automatic, depth) >=
            specdec::tree_scan_workspace_size<float>(ps, shape));
      CHECK(specdec::tree_scan_workspace_bound<float>(n, shape, specdec::tree_scan_method::automatic, depth) <=
            specdec::tree_scan_workspace_bound<float>(n, shape));
    }
  }
  // And a scan given exactly the bound succeeds (chain: the worst case).
  const dims d{9, 2, 4, 1, 8};
  const auto pr = make_problem(d, {}, 5).cast<float>();
  const auto parent = random_tree(d.n, 5);
  const specdec::tree_ssm_shape s{
      .nodes = d.n, .heads = d.heads, .headdim = d.headdim, .groups = d.groups, .dstate = d.dstate};
  std::vector<float> y(static_cast<std::size_t>(d.n * d.heads * d.headdim));
  for (auto m : {specdec::tree_scan_method::recurrent, specdec::tree_scan_method::dual}) {
    std::vector<std::byte> ws(specdec::tree_scan_workspace_bound<float>(d.n, s, m));
    specdec::tree_ssm_options<float> opt;
    CHECK(specdec::tree_scan<float>(parent, pr.inputs(), opt, specdec::make_view(y.data(), d.n, d.heads, d.headdim),
                                    specdec::view4d<float>{}, ws, m)
              .ok());
  }
  CHECK(specdec::tree_scan_workspace_bound<float>(0, s) == 0);
}
