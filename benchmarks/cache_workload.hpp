// The KV-commit workload shared by bench_cache and bench_gpu_cache, so the
// host and GPU figures measure the same thing: Llama-8B-like caches
// (32 layers, 8 KV heads, head dim 128), cache_len 2048, a 64-node tree.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "specdec/tree/token_tree.hpp"

namespace cache_bench {

constexpr std::int64_t kLayers = 32, kHeads = 8, kDim = 128, kTree = 64, kPage = 16;
constexpr specdec::position_id kCacheLen = 2048;
constexpr std::int64_t kCapacity = kCacheLen + kTree;

// A 64-node tree whose parents are among the 8 previous nodes (deep enough
// for 4-8 token paths), an accepted path to a node of depth 3..7, and the
// resulting keep positions.
inline std::vector<specdec::position_id> accepted_keep(std::mt19937& g) {
  std::vector<int> parent(kTree), depth(kTree);
  parent[0] = -1;
  depth[0] = 0;
  for (int i = 1; i < kTree; ++i) {
    parent[static_cast<std::size_t>(i)] = std::uniform_int_distribution<int>(std::max(0, i - 8), i - 1)(g);
    depth[static_cast<std::size_t>(i)] = depth[static_cast<std::size_t>(parent[static_cast<std::size_t>(i)])] + 1;
  }
  std::vector<int> candidates;
  for (int i = 0; i < kTree; ++i)
    if (depth[static_cast<std::size_t>(i)] >= 3 && depth[static_cast<std::size_t>(i)] <= 7) candidates.push_back(i);
  int u = candidates[std::uniform_int_distribution<std::size_t>(0, candidates.size() - 1)(g)];
  std::vector<specdec::position_id> keep;
  for (; u >= 0; u = parent[static_cast<std::size_t>(u)]) keep.push_back(kCacheLen + u);
  std::reverse(keep.begin(), keep.end());
  return keep;
}

// The batch both benchmarks commit: R requests at kCacheLen, their keep
// lists (CSR), and for a paged cache the block table: physical pages only
// for the blocks the tree occupies, shuffled; the blocks before cache_len
// point at a shared page 0 the commit never touches.
struct workload {
  std::vector<specdec::position_id> clen, keep;
  std::vector<std::int32_t> koff{0}, table;
  std::int64_t moved_rows = 0;  // kept entries whose source != destination, per (layer, head, tensor)
  std::int64_t pages = 0;       // paged: physical pages; contiguous: 0
  std::int64_t per_row = 0;     // paged: block-table entries per request

  workload(std::int64_t R, bool paged) {
    std::mt19937 g(1234);
    for (std::int64_t r = 0; r < R; ++r) {
      const auto k = accepted_keep(g);
      for (std::size_t j = 0; j < k.size(); ++j) moved_rows += k[j] != kCacheLen + static_cast<std::int64_t>(j) ? 1 : 0;
      clen.push_back(kCacheLen);
      keep.insert(keep.end(), k.begin(), k.end());
      koff.push_back(static_cast<std::int32_t>(keep.size()));
    }
    if (!paged) return;
    per_row = kCapacity / kPage + 1;
    const std::int64_t first = kCacheLen / kPage, tail = per_row - first;
    pages = 1 + R * tail;
    std::vector<std::int32_t> perm(static_cast<std::size_t>(pages - 1));
    std::iota(perm.begin(), perm.end(), 1);
    std::shuffle(perm.begin(), perm.end(), g);
    table.assign(static_cast<std::size_t>(R * per_row), 0);
    for (std::int64_t r = 0; r < R; ++r)
      for (std::int64_t b = 0; b < tail; ++b)
        table[static_cast<std::size_t>(r * per_row + first + b)] = perm[static_cast<std::size_t>(r * tail + b)];
  }
};

}  // namespace cache_bench
