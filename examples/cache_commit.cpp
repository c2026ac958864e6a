// Committing a verification round into a paged fp16 KV cache for two
// requests, plus the drafter's hidden states, then packing the next round's
// trees into one ragged verification batch.
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <vector>

#include "specdec/specdec.hpp"

int main() {
  using specdec::node_id;
  constexpr std::int64_t L = 2, H = 2, D = 4, P = 4, pages = 8, blocks = 4;

  // Two requests, each with a cache of 5 tokens and a 6-node draft tree
  // written at positions 5..10 (slot = node id: nodes stored in DFS order).
  //   tree: 0 -> {1, 4}; 1 -> {2, 3}; 4 -> {5}
  const std::vector<node_id> tree{-1, 0, 1, 1, 0, 4};
  std::vector<node_id> parent(tree);
  parent.insert(parent.end(), tree.begin(), tree.end());
  const std::vector<std::int32_t> tree_offsets{0, 6, 12};
  const std::vector<specdec::position_id> cache_len{5, 5};
  // The verifier accepted 0 -> 4 -> 5 for request 0 and 0 -> 1 -> 3 for request 1.
  const std::vector<node_id> path{0, 4, 5, 0, 1, 3};
  const std::vector<std::int32_t> path_offsets{0, 3, 6};

  std::vector<specdec::position_id> keep(path.size());
  std::vector<std::int32_t> keep_offsets(3);
  specdec::throw_if_error(
      specdec::keep_indices_batch(parent, tree_offsets, {}, path, path_offsets, cache_len, keep, keep_offsets));
  std::printf("keep positions: request 0 {%lld %lld %lld}, request 1 {%lld %lld %lld}\n",
              static_cast<long long>(keep[0]), static_cast<long long>(keep[1]), static_cast<long long>(keep[2]),
              static_cast<long long>(keep[3]), static_cast<long long>(keep[4]), static_cast<long long>(keep[5]));

  // Paged K and V pools [pages][L][P][H][D] of fp16 bits; request r owns pages 4r..4r+3.
  std::vector<std::uint16_t> k_pool(pages * L * P * H * D), v_pool(k_pool.size());
  std::vector<std::int32_t> block_table{0, 1, 2, 3, 4, 5, 6, 7};
  const auto map = specdec::paged_positions(block_table.data(), blocks, P, pages);
  const specdec::kv_tensor<std::uint16_t> kv[2] = {specdec::make_kv_tensor_paged_nhd(k_pool.data(), pages, L, P, H, D),
                                                   specdec::make_kv_tensor_paged_nhd(v_pool.data(), pages, L, P, H, D)};
  // Mark every K entry with its logical position so the move is visible.
  for (std::int64_t r = 0; r < 2; ++r)
    for (std::int64_t pos = 0; pos < blocks * P; ++pos)
      for (std::int64_t l = 0; l < L; ++l)
        for (std::int64_t h = 0; h < H; ++h)
          for (std::int64_t d = 0; d < D; ++d)
            k_pool[static_cast<std::size_t>(specdec::detail::kv_offset(kv[0], map, r, l, h, pos) + d)] =
                static_cast<std::uint16_t>(100 * r + pos);
  specdec::throw_if_error(specdec::commit_kv<std::uint16_t>(kv, map, cache_len, keep_offsets, keep));
  for (std::int64_t r = 0; r < 2; ++r) {
    std::printf("request %lld, layer 1 head 1, positions 5..7 now hold:", static_cast<long long>(r));
    for (std::int64_t pos = 5; pos < 8; ++pos)
      std::printf(" %d", k_pool[static_cast<std::size_t>(specdec::detail::kv_offset(kv[0], map, r, 1, 1, pos))]);
    std::printf("   (new length %lld)\n", static_cast<long long>(cache_len[static_cast<std::size_t>(r)] +
                                                                 keep_offsets[static_cast<std::size_t>(r) + 1] -
                                                                 keep_offsets[static_cast<std::size_t>(r)]));
  }

  // The drafter's hidden states of the 12 nodes (3 floats each): keep the accepted ones.
  std::vector<float> hidden(12 * 3);
  std::iota(hidden.begin(), hidden.end(), 0.0f);
  specdec::throw_if_error(specdec::commit_rows_batch(specdec::make_view(hidden.data(), 12, 3), tree_offsets,
                                                     keep_offsets, keep, cache_len));
  std::printf("request 1 hidden rows kept: %.0f %.0f %.0f (nodes 0, 1, 3 of its tree)\n", hidden[18], hidden[21],
              hidden[24]);

  // Next round: pack both trees into one ragged batch with the new cache lengths.
  const std::vector<specdec::position_id> next_len{8, 8};
  specdec::ragged_batch_sizes sizes;
  specdec::throw_if_error(specdec::ragged_batch_size(parent, tree_offsets, next_len, sizes));
  std::vector<specdec::position_id> positions(static_cast<std::size_t>(sizes.tokens));
  std::vector<std::int64_t> kv_offsets(3), mask_offsets(3);
  std::vector<std::uint8_t> mask(static_cast<std::size_t>(sizes.mask));
  specdec::throw_if_error(specdec::pack_ragged_batch<std::uint8_t>(parent, tree_offsets, next_len, positions,
                                                                   kv_offsets, mask_offsets, mask, 1, 0));
  std::printf("ragged batch: %lld tokens, %lld KV entries, %lld mask entries; positions of request 0:",
              static_cast<long long>(sizes.tokens), static_cast<long long>(sizes.kv),
              static_cast<long long>(sizes.mask));
  for (int i = 0; i < 6; ++i) std::printf(" %lld", static_cast<long long>(positions[static_cast<std::size_t>(i)]));
  std::printf("\n");
  return 0;
}
