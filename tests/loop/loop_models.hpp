// Small synthetic models for the loop tests: random probability tables keyed
// by the whole context (a hash of every token), so every tree node has its
// own target and draft distributions, and a plain (non-speculative) decoder
// to compare against.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <span>
#include <vector>

#include "specdec/core/status.hpp"
#include "specdec/core/view.hpp"
#include "specdec/draft/drafter.hpp"
#include "specdec/draft/level_drafter.hpp"
#include "specdec/loop/batch_session.hpp"
#include "specdec/loop/concepts.hpp"

namespace looptest {

using specdec::node_id;
using specdec::token_id;

// p(. | context): skewed random rows with some exact zeros.
struct table {
  int V = 4;
  std::uint64_t seed = 1;
  double zero_frac = 0.2;

  static std::uint64_t mix(std::uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
  }
  // Writes the row for history followed by path.
  void row(std::span<const token_id> history, std::span<const token_id> path, float* out) const {
    std::uint64_t h = mix(seed);
    for (auto t : history) h = mix(h ^ static_cast<std::uint64_t>(t + 1));
    for (auto t : path) h = mix(h ^ static_cast<std::uint64_t>(t + 1));
    double s = 0;
    for (int i = 0; i < V; ++i) {
      h = mix(h);
      const double u = static_cast<double>(h >> 11) * 0x1.0p-53;
      h = mix(h);
      const double z = static_cast<double>(h >> 11) * 0x1.0p-53;
      const double v = z < zero_frac ? 0.0 : 0.05 + u * u * u;
      out[i] = static_cast<float>(v);
      s += v;
    }
    if (s == 0) {
      out[0] = 1.0f;
      s = 1.0;
    }
    for (int i = 0; i < V; ++i) out[i] = static_cast<float>(out[i] / s);
  }
};

// Root-to-node token path of node u of a tree view.
inline void path_of(const specdec::tree_view& t, node_id u, std::vector<token_id>& path) {
  path.clear();
  for (node_id v = u; v >= 0; v = t.parent[v]) path.push_back(t.token[v]);
  for (std::size_t i = 0, j = path.size() - 1; i < j; ++i, --j) std::swap(path[i], path[j]);
}

// The target: logits = log p (-inf where p = 0). Keeps its scratch.
struct target {
  table m;
  int forwards = 0;
  std::vector<token_id> path{};
  std::vector<float> row = std::vector<float>(static_cast<std::size_t>(m.V));

  specdec::status forward(const specdec::tree_forward& f) {
    ++forwards;
    row.resize(static_cast<std::size_t>(m.V));
    for (node_id i = 0; i < f.tree.size; ++i) {
      path_of(f.tree, i, path);
      m.row(f.history, path, row.data());
      for (int t = 0; t < m.V; ++t)
        f.logits(i, t) = row[static_cast<std::size_t>(t)] > 0.0f ? std::log(row[static_cast<std::size_t>(t)])
                                                                 : -std::numeric_limits<float>::infinity();
    }
    return specdec::status::success();
  }
};

// Per-node probability drafter over another table.
struct drafter {
  table m;
  std::vector<float> row = std::vector<float>(static_cast<std::size_t>(m.V));
  std::span<const float> probabilities(const specdec::draft_context& c) {
    row.resize(static_cast<std::size_t>(m.V));
    m.row(c.history, c.path, row.data());
    return row;
  }
};

// The same drafter, level-batched: one call per depth.
struct level_drafter {
  table m;
  int calls = 0;
  std::vector<float> rows{};
  std::vector<token_id> path{};
  specdec::status level_probabilities(const specdec::draft_level& l, specdec::view2d<const float>& out) {
    ++calls;
    rows.resize(l.nodes.size() * static_cast<std::size_t>(m.V));
    for (std::size_t i = 0; i < l.nodes.size(); ++i) {
      path_of(l.tree->view(), l.nodes[i], path);
      m.row(l.history, path, rows.data() + i * static_cast<std::size_t>(m.V));
    }
    out = specdec::make_view<const float>(rows.data(), static_cast<std::int64_t>(l.nodes.size()),
                                          static_cast<std::int64_t>(m.V));
    return specdec::status::success();
  }
};

// A generator seeded with `seed`, the seed printed first so that a failing
// randomized test can be replayed.
inline std::mt19937_64 seeded_rng(const char* what, std::uint64_t seed) {
  std::printf("%s seed=%llu\n", what, static_cast<unsigned long long>(seed));
  return std::mt19937_64(seed);
}

// Plain greedy decoding of the table (lowest id on ties).
inline std::vector<token_id> greedy_decode(const table& m, std::vector<token_id> ctx, int n) {
  std::vector<token_id> out;
  std::vector<float> row(static_cast<std::size_t>(m.V));
  for (int k = 0; k < n; ++k) {
    m.row(ctx, {}, row.data());
    token_id best = 0;
    for (token_id t = 1; t < m.V; ++t)
      if (row[static_cast<std::size_t>(t)] > row[static_cast<std::size_t>(best)]) best = t;
    out.push_back(best);
    ctx.push_back(best);
  }
  return out;
}

}  // namespace looptest

namespace looptest {

// The same target, scoring a whole batch of trees in one call; it also keeps
// one "KV cache" per request (the token at each position) and commits it.
struct batch_target {
  table m;
  int forwards = 0;
  std::vector<std::vector<std::int32_t>> cache{};
  std::vector<std::int32_t> len{};
  std::vector<token_id> path{};
  std::vector<float> row{};

  specdec::status forward_batch(const specdec::batch_tree_forward& f) {
    ++forwards;
    row.resize(static_cast<std::size_t>(m.V));
    for (std::size_t b = 0; b + 1 < f.offsets.size(); ++b) {
      const std::int32_t o = f.offsets[b];
      const specdec::tree_view t{f.nodes.token + o, f.nodes.parent + o, nullptr, nullptr, f.offsets[b + 1] - o};
      auto& c = cache[static_cast<std::size_t>(f.requests[b])];
      for (node_id i = 0; i < t.size; ++i) {
        c[static_cast<std::size_t>(f.cache_len[b] + i)] = t.token[i];
        path_of(t, i, path);
        m.row(f.histories[b], path, row.data());
        for (int v = 0; v < m.V; ++v)
          f.logits(o + i, v) = row[static_cast<std::size_t>(v)] > 0.0f ? std::log(row[static_cast<std::size_t>(v)])
                                                                       : -std::numeric_limits<float>::infinity();
      }
    }
    return specdec::status::success();
  }
  specdec::status commit_batch(const specdec::batch_kv_commit_request& c) {
    for (std::size_t b = 0; b < c.requests.size(); ++b) {
      auto& kv = cache[static_cast<std::size_t>(c.requests[b])];
      const std::int32_t base = c.cache_len[b];
      for (std::int32_t k = c.keep_offsets[b]; k < c.keep_offsets[b + 1]; ++k)
        kv[static_cast<std::size_t>(base + k - c.keep_offsets[b])] =
            kv[static_cast<std::size_t>(c.keep[static_cast<std::size_t>(k)])];
      len[static_cast<std::size_t>(c.requests[b])] = base + c.keep_offsets[b + 1] - c.keep_offsets[b];
    }
    return specdec::status::success();
  }
};

}  // namespace looptest
