// Shared helpers for the SSM tests: random problems, tree shapes and
// float64 references written independently of the library's kernels.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "specdec/ssm/tree_ssm_inputs.hpp"
#include "specdec/tree/token_tree.hpp"

namespace ssm_test {

using specdec::node_id;

struct dims {
  std::int64_t n = 1, heads = 1, headdim = 1, groups = 1, dstate = 1;
};

struct flags {
  bool has_D = true;
  bool d_per_head = false;
  bool has_z = false;
  bool has_h0 = true;
  bool has_bias = true;
};

// A random problem stored in float64; cast() gives other element types.
template <class T>
struct problem {
  dims d;
  flags f;
  std::vector<T> x, dt, A, B, C, D, dt_bias, z, h0;

  specdec::tree_ssm_inputs<T> inputs() const {
    specdec::tree_ssm_inputs<T> in;
    in.x = specdec::make_view(x.data(), d.n, d.heads, d.headdim);
    in.dt = specdec::make_view(dt.data(), d.n, d.heads);
    in.A = specdec::make_view(A.data(), d.heads);
    in.B = specdec::make_view(B.data(), d.n, d.groups, d.dstate);
    in.C = specdec::make_view(C.data(), d.n, d.groups, d.dstate);
    if (f.has_D) in.D = specdec::make_view(D.data(), d.heads, f.d_per_head ? std::int64_t{1} : d.headdim);
    if (f.has_bias) in.dt_bias = specdec::make_view(dt_bias.data(), d.heads);
    if (f.has_z) in.z = specdec::make_view(z.data(), d.n, d.heads, d.headdim);
    if (f.has_h0) in.h0 = specdec::make_view(h0.data(), d.heads, d.headdim, d.dstate);
    return in;
  }

  template <class U>
  problem<U> cast() const {
    problem<U> o;
    o.d = d;
    o.f = f;
    auto cv = [](const std::vector<T>& v) { return std::vector<U>(v.begin(), v.end()); };
    o.x = cv(x), o.dt = cv(dt), o.A = cv(A), o.B = cv(B), o.C = cv(C), o.D = cv(D);
    o.dt_bias = cv(dt_bias), o.z = cv(z), o.h0 = cv(h0);
    return o;
  }
};

inline problem<double> make_problem(dims d, flags f, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_real_distribution<double> uni(0.0, 1.0);
  problem<double> p;
  p.d = d;
  p.f = f;
  auto fill = [&](std::vector<double>& v, std::size_t n, double scale) {
    v.resize(n);
    for (auto& e : v) e = scale * normal(rng);
  };
  const auto n = static_cast<std::size_t>(d.n), h = static_cast<std::size_t>(d.heads);
  const auto hp = static_cast<std::size_t>(d.headdim), g = static_cast<std::size_t>(d.groups);
  const auto s = static_cast<std::size_t>(d.dstate);
  fill(p.x, n * h * hp, 1.0);
  fill(p.dt, n * h, 1.0);
  p.A.resize(h);
  for (auto& a : p.A) a = -std::exp(std::log(0.5) + 2.0 * uni(rng));  // A in [-3.7, -0.5]
  fill(p.B, n * g * s, 0.5);
  fill(p.C, n * g * s, 0.5);
  fill(p.D, h * (f.d_per_head ? 1 : hp), 1.0);
  fill(p.dt_bias, h, 0.5);
  fill(p.z, n * h * hp, 1.0);
  fill(p.h0, h * hp * s, 0.5);
  return p;
}

// ---- trees ------------------------------------------------------------------

inline std::vector<node_id> chain_tree(std::int64_t n) {
  std::vector<node_id> p(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) p[static_cast<std::size_t>(i)] = static_cast<node_id>(i - 1);
  return p;
}

// Full binary tree in BFS order: parent[i] = (i - 1) / 2.
inline std::vector<node_id> binary_tree(std::int64_t n) {
  std::vector<node_id> p(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) p[static_cast<std::size_t>(i)] = i == 0 ? -1 : static_cast<node_id>((i - 1) / 2);
  return p;
}

inline std::vector<node_id> random_tree(std::int64_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<node_id> p(static_cast<std::size_t>(n));
  if (n == 0) return p;
  p[0] = -1;
  for (std::int64_t i = 1; i < n; ++i) {
    // Bias towards recent nodes so trees get some depth.
    std::uniform_int_distribution<std::int64_t> pick(std::max<std::int64_t>(0, i - 4), i - 1);
    std::uniform_int_distribution<std::int64_t> any(0, i - 1);
    p[static_cast<std::size_t>(i)] = static_cast<node_id>((rng() % 2) ? pick(rng) : any(rng));
  }
  return p;
}

inline std::vector<node_id> root_path(const std::vector<node_id>& parent, node_id v) {
  std::vector<node_id> path;
  for (node_id u = v; u >= 0; u = parent[static_cast<std::size_t>(u)]) path.push_back(u);
  std::reverse(path.begin(), path.end());
  return path;
}

inline bool is_ancestor_or_self(const std::vector<node_id>& parent, node_id j, node_id i) {
  for (node_id u = i; u >= 0; u = parent[static_cast<std::size_t>(u)])
    if (u == j) return true;
  return false;
}

// ---- float64 reference: the plain recurrence along one sequence ---------------

inline double ref_softplus(double v) { return v > 30.0 ? v : std::log1p(std::exp(v)); }
inline double ref_silu(double v) { return v / (1.0 + std::exp(-v)); }

struct ref_options {
  bool softplus = true;
  double dt_min = 0.0, dt_max = INFINITY;
};

// Runs h <- exp(dt' A) h + dt' x B^T, y = C h + D x (gate) along `seq` (node
// ids into the problem), returning y of every step [len, heads, headdim]
// and the final state [heads, headdim, dstate].
template <class P>
void ref_sequence(const P& pr, const ref_options& o, const std::vector<node_id>& seq, std::vector<double>& y,
                  std::vector<double>& state) {
  const auto& d = pr.d;
  const std::int64_t hpg = d.heads / d.groups;
  state.assign(static_cast<std::size_t>(d.heads * d.headdim * d.dstate), 0.0);
  if (pr.f.has_h0)
    for (std::size_t e = 0; e < state.size(); ++e) state[e] = static_cast<double>(pr.h0[e]);
  y.assign(seq.size() * static_cast<std::size_t>(d.heads * d.headdim), 0.0);
  for (std::size_t t = 0; t < seq.size(); ++t) {
    const std::int64_t i = seq[t];
    for (std::int64_t h = 0; h < d.heads; ++h) {
      const std::int64_t g = h / hpg;
      double dt = static_cast<double>(pr.dt[static_cast<std::size_t>(i * d.heads + h)]) +
                  (pr.f.has_bias ? static_cast<double>(pr.dt_bias[static_cast<std::size_t>(h)]) : 0.0);
      if (o.softplus) dt = ref_softplus(dt);
      dt = std::min(std::max(dt, o.dt_min), o.dt_max);
      const double decay = std::exp(dt * static_cast<double>(pr.A[static_cast<std::size_t>(h)]));
      for (std::int64_t p = 0; p < d.headdim; ++p) {
        const double xv = static_cast<double>(pr.x[static_cast<std::size_t>((i * d.heads + h) * d.headdim + p)]);
        double acc = 0.0;
        for (std::int64_t k = 0; k < d.dstate; ++k) {
          double& hs = state[static_cast<std::size_t>((h * d.headdim + p) * d.dstate + k)];
          const auto bc = static_cast<std::size_t>((i * d.groups + g) * d.dstate + k);
          hs = decay * hs + dt * xv * static_cast<double>(pr.B[bc]);
          acc += hs * static_cast<double>(pr.C[bc]);
        }
        if (pr.f.has_D)
          acc += static_cast<double>(pr.D[static_cast<std::size_t>(pr.f.d_per_head ? h : h * d.headdim + p)]) * xv;
        if (pr.f.has_z)
          acc *= ref_silu(static_cast<double>(pr.z[static_cast<std::size_t>((i * d.heads + h) * d.headdim + p)]));
        y[(t * static_cast<std::size_t>(d.heads) + static_cast<std::size_t>(h)) * static_cast<std::size_t>(d.headdim) +
          static_cast<std::size_t>(p)] = acc;
      }
    }
  }
}

// k draws of a standard normal, as floats.
inline std::vector<float> normal_floats(std::mt19937_64& rng, std::int64_t k) {
  std::normal_distribution<float> nd;
  std::vector<float> v(static_cast<std::size_t>(k));
  for (auto& e : v) e = nd(rng);
  return v;
}

// ---- ragged batches -----------------------------------------------------------

// R trees of the given sizes concatenated along the node axis of one
// problem (d.n = the capacity: the nodes plus `spare` unused rows at the
// end), local parent ids, and one initial state per request
// ([R, heads, headdim, dstate]; the problem's own h0 is not used). Tree r
// is a chain, a binary tree or a random tree by r % 3.
struct batch_case {
  std::vector<std::int32_t> offsets;
  std::vector<node_id> parent;
  problem<double> pr;
  std::vector<double> h0;
};

inline batch_case make_batch(dims d, const std::vector<std::int64_t>& sizes, flags f, std::uint64_t seed,
                             std::int64_t spare = 0) {
  batch_case b;
  b.offsets.push_back(0);
  for (std::size_t r = 0; r < sizes.size(); ++r) {
    const std::int64_t n = sizes[r];
    const auto t = r % 3 == 0 ? chain_tree(n) : r % 3 == 1 ? binary_tree(n) : random_tree(n, seed + r);
    b.parent.insert(b.parent.end(), t.begin(), t.end());
    b.offsets.push_back(b.offsets.back() + static_cast<std::int32_t>(n));
  }
  b.parent.resize(b.parent.size() + static_cast<std::size_t>(spare), -1);
  d.n = static_cast<std::int64_t>(b.parent.size());
  f.has_h0 = false;
  b.pr = make_problem(d, f, seed);
  std::mt19937_64 rng(seed ^ 0x5eedULL);
  std::normal_distribution<double> normal(0.0, 0.5);
  b.h0.resize(sizes.size() * static_cast<std::size_t>(d.heads * d.headdim * d.dstate));
  for (auto& e : b.h0) e = normal(rng);
  return b;
}

// Largest |a - b| / (atol + rtol |b|) over a range: <= 1 means within tolerance.
template <class A, class B>
double max_scaled_error(const A& a, const B& b, double atol, double rtol) {
  double worst = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double da = static_cast<double>(a[i]), db = static_cast<double>(b[i]);
    if (!std::isfinite(da) || !std::isfinite(db)) return INFINITY;
    worst = std::max(worst, std::abs(da - db) / (atol + rtol * std::abs(db)));
  }
  return worst;
}

}  // namespace ssm_test
