// Shared helpers for the cache tests (host and GPU): random trees, accepted
// paths and verified batches.
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "specdec/cache/keep_indices.hpp"
#include "specdec/tree/token_tree.hpp"
#include "specdec/verify/verify_params.hpp"

namespace cache_test {

//! Random topological parent array of n nodes (parent[i] uniform in [0, i)).
inline std::vector<specdec::node_id> random_parents(std::mt19937& g, int n) {
  std::vector<specdec::node_id> p(static_cast<std::size_t>(n));
  p[0] = -1;
  for (int i = 1; i < n; ++i) p[static_cast<std::size_t>(i)] = std::uniform_int_distribution<int>(0, i - 1)(g);
  return p;
}

//! A random root-to-node path: from the root, step to a random child with
//! probability 0.8 while one exists.
inline std::vector<specdec::node_id> random_path(std::mt19937& g, const std::vector<specdec::node_id>& parent) {
  std::vector<specdec::node_id> path{0};
  std::bernoulli_distribution go(0.8);
  for (;;) {
    std::vector<specdec::node_id> kids;
    for (std::size_t i = 0; i < parent.size(); ++i)
      if (parent[i] == path.back()) kids.push_back(static_cast<specdec::node_id>(i));
    if (kids.empty() || !go(g)) break;
    path.push_back(kids[std::uniform_int_distribution<std::size_t>(0, kids.size() - 1)(g)]);
  }
  return path;
}

//! BFS order as a slot map (slot_of_node[i] = place of node i in BFS order):
//! a topological order other than the identity.
inline std::vector<std::int32_t> bfs_slots(const std::vector<specdec::node_id>& parent) {
  std::vector<std::int32_t> order{0}, slot(parent.size(), -1);
  for (std::size_t h = 0; h < order.size(); ++h)
    for (std::size_t i = 0; i < parent.size(); ++i)
      if (parent[i] == order[h]) order.push_back(static_cast<std::int32_t>(i));
  for (std::size_t k = 0; k < order.size(); ++k)
    slot[static_cast<std::size_t>(order[k])] = static_cast<std::int32_t>(k);
  return slot;
}

// A verified batch for keep_indices_from_results: random trees, one random
// root path per request as verify_batch writes it (R x L rows, the entries
// past the path garbage), results with accepted = path length - 1 and, for
// about one request in five, a refusal code.
struct verified_batch {
  std::vector<specdec::node_id> parent, paths;
  std::vector<std::int32_t> slots, toff{0};
  std::vector<specdec::verify_result> results;
  std::vector<specdec::position_id> clen;
  std::vector<std::vector<specdec::position_id>> want;  // per request: its keep list (empty when refused)
  std::int32_t L = 0;
};

inline verified_batch make_verified(std::mt19937& g, bool with_slots) {
  verified_batch v;
  const int R = std::uniform_int_distribution<int>(1, 8)(g);
  std::vector<std::vector<specdec::node_id>> rows;
  for (int r = 0; r < R; ++r) {
    const int n = std::uniform_int_distribution<int>(1, 20)(g);
    const auto p = cache_test::random_parents(g, n);
    const auto pa = cache_test::random_path(g, p);
    const auto s = cache_test::bfs_slots(p);
    const int c = std::uniform_int_distribution<int>(0, 50)(g);
    v.parent.insert(v.parent.end(), p.begin(), p.end());
    v.slots.insert(v.slots.end(), s.begin(), s.end());
    v.toff.push_back(static_cast<std::int32_t>(v.parent.size()));
    v.clen.push_back(c);
    specdec::verify_result res;
    res.accepted = static_cast<std::int32_t>(pa.size()) - 1;
    res.code = g() % 5 == 0 ? specdec::status_code::non_finite : specdec::status_code::ok;
    v.results.push_back(res);
    std::vector<specdec::position_id> keep;
    if (res.code == specdec::status_code::ok)
      for (auto u : pa) keep.push_back(c + (with_slots ? s[static_cast<std::size_t>(u)] : u));
    v.want.push_back(keep);
    rows.push_back(pa);
    v.L = std::max(v.L, n);
  }
  for (const auto& pa : rows) {
    for (auto u : pa) v.paths.push_back(u);
    for (auto k = pa.size(); k < static_cast<std::size_t>(v.L); ++k)
      v.paths.push_back(static_cast<specdec::node_id>(g() % 7));
  }
  return v;
}

// The arguments over v and the output buffers.
inline specdec::keep_from_results_batch args(const verified_batch& v, bool with_slots,
                                             std::vector<specdec::position_id>& keep, std::vector<std::int32_t>& koff,
                                             std::vector<std::int32_t>& status) {
  const auto R = v.results.size();
  keep.assign(v.parent.size(), -3);
  koff.assign(R + 1, -3);
  status.assign(R, -3);
  specdec::keep_from_results_batch b;
  b.num_requests = static_cast<std::int32_t>(R);
  b.tree_offsets = v.toff.data();
  b.parent = v.parent.data();
  b.slot_of_node = with_slots ? v.slots.data() : nullptr;
  b.node_capacity = static_cast<std::int32_t>(v.parent.size());
  b.paths = v.paths.data();
  b.path_stride = v.L;
  b.results = v.results.data();
  b.cache_len = v.clen.data();
  b.keep = keep.data();
  b.keep_offsets = koff.data();
  b.request_status = status.data();
  return b;
}

}  // namespace cache_test
