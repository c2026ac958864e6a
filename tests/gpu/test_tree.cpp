// GPU kernel vs host twin: batched tree masks and positions must be
// bit-identical (masks, positions, untouched padding) with the same
// per-tree status codes.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "gpu_util.hpp"
#include "specdec/kernels.hpp"
#include "specdec/tree/batch.hpp"

using specdec::node_id;
using specdec::status_code;

namespace {

struct batch_input {
  std::vector<node_id> parents;
  std::vector<std::int32_t> offsets{0};
  std::vector<std::int64_t> cache_len;
  std::int32_t max_nodes = 0;
};

std::vector<node_id> random_tree(std::mt19937_64& rng, int n, int style) {
  std::vector<node_id> p(static_cast<std::size_t>(n));
  p[0] = -1;
  for (int i = 1; i < n; ++i)
    p[static_cast<std::size_t>(i)] = style == 1 ? std::max(0, i - 1 - static_cast<int>(rng() % 3))
                                                : static_cast<int>(rng() % static_cast<std::uint64_t>(i));
  return p;
}

batch_input make_batch(std::uint64_t seed, int num_requests, int max_n, bool with_big) {
  std::mt19937_64 rng(seed);
  batch_input in;
  for (int t = 0; t < num_requests; ++t) {
    int n = 1 + static_cast<int>(rng() % static_cast<std::uint64_t>(max_n));
    if (with_big && t == num_requests / 2) n = 4096;
    auto p = random_tree(rng, n, t % 2);
    // Broken trees of every kind among good ones.
    switch (t % 12) {
      case 5:
        if (n > 2) p[static_cast<std::size_t>(n - 1)] = n - 1;  // not_topological
        break;
      case 7:
        if (n > 1) p[static_cast<std::size_t>(n / 2 + (n > 2 ? 1 : 0))] = -1;  // multiple_roots
        break;
      case 9:
        p[0] = 0;  // not_topological or no_root
        break;
      case 11:
        if (n > 3) p[3] = n + 5;  // parent_out_of_range
        break;
      default:
        break;
    }
    in.max_nodes = std::max(in.max_nodes, n);
    in.parents.insert(in.parents.end(), p.begin(), p.end());
    in.offsets.push_back(static_cast<std::int32_t>(in.parents.size()));
    in.cache_len.push_back(static_cast<std::int64_t>(rng() % 1000000));
  }
  return in;
}

// `graph`: the launch is captured into a CUDA graph and replayed instead.
template <class Word>
void compare(const batch_input& in, std::int64_t extra_stride, bool with_positions, bool graph = false) {
  const auto total = static_cast<std::int32_t>(in.parents.size());
  const auto num_requests = static_cast<std::int32_t>(in.cache_len.size());
  const std::int64_t stride = specdec::mask_words_per_row<Word>(in.max_nodes) + extra_stride;
  const Word sentinel = static_cast<Word>(0xC3C3C3C3C3C3C3C3ull);
  std::vector<Word> h_masks(static_cast<std::size_t>(total * stride), sentinel);
  std::vector<std::int64_t> h_pos(static_cast<std::size_t>(total), -9);
  std::vector<std::int32_t> h_status(static_cast<std::size_t>(num_requests), -1);

  specdec::tree_masks_params<Word> hb;
  hb.parents = in.parents.data();
  hb.offsets = in.offsets.data();
  hb.cache_len = in.cache_len.data();
  hb.masks = h_masks.data();
  hb.positions = with_positions ? h_pos.data() : nullptr;
  hb.request_status = h_status.data();
  hb.num_requests = num_requests;
  hb.max_nodes = in.max_nodes;
  hb.capacity_nodes = total;
  hb.row_stride_words = stride;
  REQUIRE(specdec::build_tree_masks_batched(hb).ok());

  specdec_test::device_buffer<node_id> d_parents(in.parents);
  specdec_test::device_buffer<std::int32_t> d_offsets(in.offsets);
  specdec_test::device_buffer<std::int64_t> d_cache(in.cache_len);
  specdec_test::device_buffer<Word> d_masks(std::vector<Word>(h_masks.size(), sentinel));
  specdec_test::device_buffer<std::int64_t> d_pos(std::vector<std::int64_t>(h_pos.size(), -9));
  specdec_test::device_buffer<std::int32_t> d_status(std::vector<std::int32_t>(h_status.size(), -1));
  auto db = hb;
  db.parents = d_parents.data();
  db.offsets = d_offsets.data();
  db.cache_len = d_cache.data();
  db.masks = d_masks.data();
  db.positions = with_positions ? d_pos.data() : nullptr;
  db.request_status = d_status.data();
  REQUIRE(specdec::kernels::build_tree_masks_batched_can_implement(db).ok());
  const std::size_t wbytes = specdec::kernels::build_tree_masks_batched_workspace_size(db);
  if (graph)
    specdec_test::run_in_graph(
        [&](cudaStream_t s) { return specdec::kernels::build_tree_masks_batched(db, nullptr, wbytes, s).ok(); });
  else
    REQUIRE(specdec::kernels::build_tree_masks_batched(db, nullptr, wbytes, nullptr).ok());
  REQUIRE(specdec::kernels::synchronize(nullptr).ok());

  CHECK(d_status.download() == h_status);
  CHECK(d_masks.download() == h_masks);  // whole buffer: written words and untouched padding
  CHECK(d_pos.download() == h_pos);
  // The batch really exercised good and bad trees.
  CHECK(std::count(h_status.begin(), h_status.end(), 0) > 0);
  CHECK(std::count_if(h_status.begin(), h_status.end(), [](std::int32_t s) { return s != 0; }) > 0);
}

}  // namespace

TEST_CASE("tree masks: kernel equals host twin (32- and 64-bit words)") {
  const auto small = make_batch(11, 200, 300, false);
  compare<std::uint32_t>(small, 0, true);
  compare<std::uint64_t>(small, 1, true);
  compare<std::uint64_t>(small, 0, false);
  const auto big = make_batch(12, 24, 300, true);  // one 4096-node tree
  compare<std::uint32_t>(big, 3, true);
  compare<std::uint64_t>(big, 0, true);
}

TEST_CASE("tree masks inside a captured CUDA graph equal the host twin") {
  compare<std::uint64_t>(make_batch(14, 64, 200, false), 0, true, true);
}

TEST_CASE("tree masks: trees above the shared-memory limit read parents from global memory") {
  batch_input in;
  std::mt19937_64 rng(13);
  for (int n : {13000, 70, 1}) {
    auto p = random_tree(rng, n, n == 13000 ? 1 : 0);
    in.max_nodes = std::max(in.max_nodes, n);
    in.parents.insert(in.parents.end(), p.begin(), p.end());
    in.offsets.push_back(static_cast<std::int32_t>(in.parents.size()));
    in.cache_len.push_back(5);
  }
  in.offsets.push_back(in.offsets.back());  // an empty tree: empty_input
  in.cache_len.push_back(0);
  compare<std::uint64_t>(in, 0, true);
}

TEST_CASE("tree masks: whole-call errors are reported before launching") {
  specdec::tree_masks_params<std::uint32_t> b;
  CHECK(specdec::kernels::build_tree_masks_batched(b, nullptr, 0, nullptr) ==
        status_code::invalid_argument);  // no offsets/status
  specdec_test::device_buffer<std::int32_t> off(std::vector<std::int32_t>{0});
  specdec_test::device_buffer<std::int32_t> st(1);
  b.offsets = off.data();
  b.request_status = st.data();
  CHECK(specdec::kernels::build_tree_masks_batched(b, nullptr, 0, nullptr).ok());  // zero trees: nothing to do
  b.max_nodes = 65535 * specdec::kernels::tree_mask_rows_per_block + 1;
  b.row_stride_words = specdec::mask_words_per_row<std::uint32_t>(b.max_nodes);
  CHECK(specdec::kernels::build_tree_masks_batched_can_implement(b) == status_code::unsupported);
}
