// Random verification cases for the vocabulary-parallel tests (threads and
// MPI): a tree whose tokens are drawn from the draft rows (so sampled modes
// accept often and reach every branch of the walk), target and draft rows,
// uneven partitions, and the per-rank shards as exact-size copies (a read
// past a shard is caught by ASan).
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "specdec/core/view.hpp"
#include "specdec/parallel/sharded_verify.hpp"
#include "specdec/tree/token_tree.hpp"
#include "specdec/verify/verify_params.hpp"

namespace sharded_test {

using namespace specdec;

// Every mode that verifies a tree (block verification needs a chain).
inline const verify_mode all_modes[] = {verify_mode::sampled_iid,    verify_mode::sampled_without_replacement,
                                        verify_mode::deterministic,  verify_mode::greedy,
                                        verify_mode::naive_matching, verify_mode::typical_lossy,
                                        verify_mode::traversal,      verify_mode::traversal_without_replacement};
// Every mode, for chains.
inline const verify_mode chain_modes[] = {verify_mode::sampled_iid,
                                          verify_mode::sampled_without_replacement,
                                          verify_mode::deterministic,
                                          verify_mode::greedy,
                                          verify_mode::naive_matching,
                                          verify_mode::typical_lossy,
                                          verify_mode::block,
                                          verify_mode::traversal,
                                          verify_mode::traversal_without_replacement};

struct tree_case {
  std::int64_t V = 0;
  std::int32_t N = 0;
  std::vector<node_id> parent;
  std::vector<token_id> token;
  std::vector<float> p, q;  // N x V each
  tree_view view() const { return tree_view{token.data(), parent.data(), nullptr, nullptr, N}; }
};

// A row with a few heavy tokens, many light ones and exact zeros; `ties`
// quantizes it so equal values occur (top-k and argmax tie order).
inline std::vector<float> random_row(std::mt19937_64& g, std::int64_t V, bool ties) {
  std::uniform_real_distribution<double> U(0.0, 1.0);
  std::vector<double> w(static_cast<std::size_t>(V));
  double s = 0.0;
  for (auto& x : w) {
    const double u = U(g);
    x = u < 0.2 ? 0.0 : (u > 0.995 ? 50.0 * U(g) : U(g));
    if (ties) x = static_cast<double>(static_cast<int>(x * 4.0));
    s += x;
  }
  if (s == 0.0) w[0] = s = 1.0;
  std::vector<float> r(w.size());
  for (std::size_t i = 0; i < r.size(); ++i) r[i] = static_cast<float>(w[i] / s);
  return r;
}

inline token_id draw(std::mt19937_64& g, const float* row, std::int64_t V) {
  std::uniform_real_distribution<double> U(0.0, 1.0);
  double t = U(g), c = 0.0;
  for (std::int64_t i = 0; i < V; ++i) {
    c += row[i];
    if (t < c) return static_cast<token_id>(i);
  }
  return static_cast<token_id>(V - 1);
}

// N nodes, random parents (parent[i] < i); a node's token is drawn from its
// parent's q row; rows may carry ties.
inline tree_case make_tree_case(std::uint64_t seed, std::int64_t V, std::int32_t N, bool ties = false) {
  std::mt19937_64 g(seed);
  tree_case c;
  c.V = V;
  c.N = N;
  c.parent.resize(static_cast<std::size_t>(N));
  c.token.resize(static_cast<std::size_t>(N));
  c.p.resize(static_cast<std::size_t>(N * V));
  c.q.resize(static_cast<std::size_t>(N * V));
  for (std::int32_t u = 0; u < N; ++u) {
    const auto pr = random_row(g, V, ties);
    auto qr = random_row(g, V, ties);
    // A draft close to the target (as real drafters are): drafts get accepted.
    double qs = 0.0;
    for (std::int64_t i = 0; i < V; ++i)
      qs += 0.7 * pr[static_cast<std::size_t>(i)] + 0.3 * qr[static_cast<std::size_t>(i)];
    for (std::int64_t i = 0; i < V; ++i)
      qr[static_cast<std::size_t>(i)] =
          static_cast<float>((0.7 * pr[static_cast<std::size_t>(i)] + 0.3 * qr[static_cast<std::size_t>(i)]) / qs);
    std::copy(pr.begin(), pr.end(), c.p.begin() + u * V);
    std::copy(qr.begin(), qr.end(), c.q.begin() + u * V);
  }
  c.parent[0] = -1;
  c.token[0] = 0;
  for (std::int32_t i = 1; i < N; ++i) {
    // Deep-ish trees: prefer recent nodes as parents.
    std::uniform_int_distribution<std::int32_t> D(i > 4 ? i - 4 : 0, i - 1);
    c.parent[static_cast<std::size_t>(i)] = D(g);
    const node_id par = c.parent[static_cast<std::size_t>(i)];
    // Half the drafts come from q (accepted often), half from p (reach deep).
    c.token[static_cast<std::size_t>(i)] = draw(g, (i % 2 ? c.q.data() : c.p.data()) + par * V, V);
  }
  return c;
}

// Column bounds for P ranks over V: uneven, with an empty range when P >= 3.
inline std::vector<std::int64_t> uneven_bounds(std::int64_t V, int P) {
  std::vector<std::int64_t> b(static_cast<std::size_t>(P) + 1, 0);
  b[static_cast<std::size_t>(P)] = V;
  if (P == 1) return b;
  // Weights 3, 0 (P >= 3), 1, 2, 5, ... : sizes not multiples of anything.
  std::vector<std::int64_t> w(static_cast<std::size_t>(P));
  for (int r = 0; r < P; ++r) w[static_cast<std::size_t>(r)] = (P >= 3 && r == 1) ? 0 : 1 + (3 * r + 2) % 5;
  std::int64_t tot = 0;
  for (auto x : w) tot += x;
  std::int64_t acc = 0;
  for (int r = 0; r < P - 1; ++r) {
    acc += w[static_cast<std::size_t>(r)];
    b[static_cast<std::size_t>(r) + 1] = V * acc / tot + (w[static_cast<std::size_t>(r)] > 0 ? 7 : 0);
    if (b[static_cast<std::size_t>(r) + 1] > V) b[static_cast<std::size_t>(r) + 1] = V;
    if (b[static_cast<std::size_t>(r) + 1] < b[static_cast<std::size_t>(r)])
      b[static_cast<std::size_t>(r) + 1] = b[static_cast<std::size_t>(r)];
  }
  return b;
}

// Columns [b0, b1) of an N x V matrix, as an exact-size copy.
inline std::vector<float> shard_of(const std::vector<float>& m, std::int64_t V, std::int32_t N, std::int64_t b0,
                                   std::int64_t b1) {
  std::vector<float> s(static_cast<std::size_t>(N * (b1 - b0)));
  for (std::int32_t u = 0; u < N; ++u)
    for (std::int64_t i = b0; i < b1; ++i)
      s[static_cast<std::size_t>(u * (b1 - b0) + i - b0)] = m[static_cast<std::size_t>(u * V + i)];
  return s;
}

inline view2d<const float> matrix(const std::vector<float>& m, std::int32_t N, std::int64_t W) {
  return view2d<const float>{m.empty() ? nullptr : m.data(), {N, W}, {W, 1}};
}

// What one verification returned (compared token for token).
struct outcome {
  status_code code = status_code::ok;
  std::int64_t index = -1;
  std::int32_t accepted = -1;
  node_id last = -1;
  std::vector<node_id> path;
  std::vector<token_id> tokens;
  bool operator==(const outcome&) const = default;
};

inline outcome record(const status& s, const verify_result& r, std::span<const node_id> path,
                      std::span<const token_id> tokens) {
  outcome o;
  o.code = s.code();
  o.index = s.index();
  if (s.ok()) {
    o.accepted = r.accepted;
    o.last = r.last_node;
    o.path.assign(path.begin(), path.begin() + r.accepted + 1);
    o.tokens.assign(tokens.begin(), tokens.begin() + r.accepted + 1);
  }
  return o;
}

// Sharded verification of case c on rank r of coll (its shard copied out).
template <class C>
outcome run_sharded(C& coll, const tree_case& c, std::span<const std::int64_t> bounds, const verify_params& vp) {
  const int r = coll.rank();
  // A rank the partition has no range for passes an empty shard.
  const bool has = static_cast<std::size_t>(r) + 1 < bounds.size();
  const std::int64_t b0 = has ? bounds[static_cast<std::size_t>(r)] : 0,
                     b1 = has ? bounds[static_cast<std::size_t>(r) + 1] : 0;
  const auto ps = shard_of(c.p, c.V, c.N, b0, b1), qs = shard_of(c.q, c.V, c.N, b0, b1);
  std::vector<std::byte> ws(sharded_verify_workspace_size(bounds, r, coll.size(), c.N) + 8);
  std::vector<node_id> path(static_cast<std::size_t>(c.N));
  std::vector<token_id> tokens(static_cast<std::size_t>(c.N));
  verify_result res{};
  const status s = verify_tree_sharded(coll, bounds, c.view(), matrix(ps, c.N, b1 - b0), matrix(qs, c.N, b1 - b0), vp,
                                       ws, path, tokens, res);
  return record(s, res, path, tokens);
}

// The single-process partitioned-order verification of case c.
inline outcome run_partitioned(const tree_case& c, std::span<const std::int64_t> bounds, const verify_params& vp) {
  std::vector<std::byte> ws(sharded_verify_workspace_size(bounds, 0, 1, c.N) + 8);
  std::vector<node_id> path(static_cast<std::size_t>(c.N));
  std::vector<token_id> tokens(static_cast<std::size_t>(c.N));
  verify_result res{};
  const status s = verify_tree_partitioned(bounds, c.view(), matrix(c.p, c.N, c.V), matrix(c.q, c.N, c.V), vp, ws, path,
                                           tokens, res);
  return record(s, res, path, tokens);
}

}  // namespace sharded_test
