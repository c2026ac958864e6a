// The synthetic round of bench_overhead.py, in C++: packed mask + positions
// of a 16-node tree, tree verification (sampled_iid, V = 4096), keep indices
// and the KV commit on a [1][L=4][H=4][T=512][D=64] 16-bit cache. Prints the
// median time per round in microseconds. Inputs are built by the same rules
// as the Python side (same sizes, same formulas, same Philox keys).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "specdec/cache/keep_indices.hpp"
#include "specdec/cache/kv_commit.hpp"
#include "specdec/tree/mask.hpp"
#include "specdec/tree/positions.hpp"
#include "specdec/verify/tree_verify.hpp"

int main() {
  constexpr std::int32_t N = 16;
  constexpr std::int64_t V = 4096, L = 4, H = 4, T = 512, D = 64, cache_len = 100;
  std::vector<specdec::node_id> parent(N);
  std::vector<specdec::token_id> tokens(N);
  for (std::int32_t i = 0; i < N; ++i) {
    parent[static_cast<std::size_t>(i)] = i == 0 ? -1 : (i - 1) / 2;  // binary tree
    tokens[static_cast<std::size_t>(i)] = (i * 37) % static_cast<std::int32_t>(V);
  }
  // Rows by a fixed formula (the Python side uses the same one), so both
  // languages verify identical inputs and must accept identically.
  std::vector<float> p(static_cast<std::size_t>(N * V)), q(p.size());
  for (std::int32_t r = 0; r < N; ++r) {
    float sp = 0, sq = 0;
    for (std::int64_t v = 0; v < V; ++v) {
      sp += p[static_cast<std::size_t>(r * V + v)] = static_cast<float>(1 + (r * 131 + v * 71) % 97);
      sq += q[static_cast<std::size_t>(r * V + v)] = static_cast<float>(1 + (r * 53 + v * 29) % 89);
    }
    for (std::int64_t v = 0; v < V; ++v) {
      p[static_cast<std::size_t>(r * V + v)] /= sp;
      q[static_cast<std::size_t>(r * V + v)] /= sq;
    }
  }
  std::vector<std::uint16_t> kc(static_cast<std::size_t>(L * H * T * D)), vc(kc.size());
  std::vector<std::uint64_t> mask(N);
  std::vector<specdec::position_id> pos(N), keep(N);
  std::vector<std::uint64_t> ws((specdec::verify_workspace_size(V, N) + 7) / 8);
  std::vector<specdec::node_id> path(N);
  std::vector<specdec::token_id> out(N);
  const specdec::kv_tensor<std::uint16_t> tens[2] = {specdec::make_kv_tensor_lhsd(kc.data(), 1, L, H, T, D),
                                                     specdec::make_kv_tensor_lhsd(vc.data(), 1, L, H, T, D)};
  const auto map = specdec::contiguous_positions(T);
  std::vector<double> times;
  std::int64_t accepted = 0;
  for (int it = 0; it < 3000; ++it) {
    const auto t0 = std::chrono::steady_clock::now();
    if (!specdec::build_packed_mask<std::uint64_t>(parent, mask).ok()) return 1;
    if (!specdec::build_positions<specdec::position_id>(parent, cache_len, pos).ok()) return 1;
    specdec::verify_params vp;
    vp.seed = 1;
    vp.round = static_cast<std::uint32_t>(it);
    specdec::verify_result r{};
    const specdec::tree_view t{tokens.data(), parent.data(), nullptr, nullptr, N};
    if (!specdec::verify_tree(t, specdec::make_view(p.data(), N, V).as_const(),
                              specdec::make_view(q.data(), N, V).as_const(), vp, std::as_writable_bytes(std::span(ws)),
                              path, out, r)
             .ok())
      return 1;
    std::int32_t count = 0;
    if (!specdec::keep_indices_from_path(parent, std::span(path).first(static_cast<std::size_t>(r.accepted) + 1), {},
                                         cache_len, keep, count)
             .ok())
      return 1;
    if (!specdec::commit_kv<std::uint16_t>(tens, map, cache_len, std::span(keep).first(static_cast<std::size_t>(count)))
             .ok())
      return 1;
    const auto t1 = std::chrono::steady_clock::now();
    times.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    accepted += r.accepted;
  }
  std::sort(times.begin(), times.end());
  std::printf("%.3f %.4f\n", times[times.size() / 2], static_cast<double>(accepted) / 3000.0);
  return 0;
}
