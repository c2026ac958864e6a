// The device kernels' request-span checks, run on the host: the same
// functions the verification and batched-prune kernels call before they read
// a request's nodes (kernels/verify.hpp verify_request_span, kernels/draft.hpp
// prune_span_ok). The GPU tests (tests/gpu/) feed the same malformed offsets
// to the kernels and check the codes and that nothing else was written.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "specdec/kernels/draft.hpp"
#include "specdec/kernels/verify.hpp"

using namespace specdec;

TEST_CASE("verify_request_span: every malformed span class, and random offsets against a brute-force bound check") {
  std::vector<std::int32_t> off{0, 3, 3, 2, -1, 5, 12, 9, 20};
  kernels::verify_batch_params P;
  P.offsets = off.data();
  P.node_capacity = 12;
  P.max_nodes = 4;
  auto code = [&](std::int32_t r) {
    std::int32_t b = -7, n = -7;
    const status_code c = kernels::verify_request_span(P, r, b, n);
    CHECK(b == off[static_cast<std::size_t>(r)]);
    CHECK(n == (c == status_code::ok ? off[static_cast<std::size_t>(r) + 1] - b : 0));
    return c;
  };
  CHECK(code(0) == status_code::ok);             // [0, 3)
  CHECK(code(1) == status_code::not_sorted);     // [3, 3): empty
  CHECK(code(2) == status_code::not_sorted);     // [3, 2): reversed
  CHECK(code(3) == status_code::out_of_range);   // [2, -1)
  CHECK(code(4) == status_code::out_of_range);   // [-1, 5)
  CHECK(code(5) == status_code::size_mismatch);  // [5, 12): 7 nodes > max_nodes 4
  CHECK(code(6) == status_code::not_sorted);     // [12, 9): inside the capacity, reversed
  CHECK(code(7) == status_code::out_of_range);   // [9, 20): ends past node_capacity

  const std::uint64_t seed = 20261126;
  std::printf("[spans] seed %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<std::int32_t> v(-3, 40);
  for (int trial = 0; trial < 20000; ++trial) {
    std::vector<std::int32_t> o{v(gen), v(gen)};
    P.offsets = o.data();
    P.node_capacity = 1 + static_cast<std::int32_t>(gen() % 36);
    P.max_nodes = 1 + static_cast<std::int32_t>(gen() % 12);
    std::int32_t b = 0, n = 0;
    const status_code c = kernels::verify_request_span(P, 0, b, n);
    // Brute force: the span is ok iff every node index it covers is in [0, capacity) and it has 1..max_nodes nodes.
    bool inside = o[1] > o[0];
    for (std::int32_t i = o[0]; i < o[1]; ++i) inside = inside && i >= 0 && i < P.node_capacity;
    const bool ok = inside && o[1] - o[0] <= P.max_nodes;
    INFO("span [" << o[0] << ", " << o[1] << ") capacity " << P.node_capacity << " max_nodes " << P.max_nodes);
    CHECK((c == status_code::ok) == ok);
    if (c == status_code::ok) CHECK(n == o[1] - o[0]);
  }
}

TEST_CASE("prune_span_ok: a batch passes iff its spans tile [offsets[0], offsets[R]] inside [0, N] in order") {
  const std::uint64_t seed = 7;
  std::printf("[spans] prune seed %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 gen(seed);
  for (int trial = 0; trial < 20000; ++trial) {
    const auto R = static_cast<std::int32_t>(1 + gen() % 5);
    const auto N = static_cast<std::int32_t>(gen() % 20);
    std::vector<std::int32_t> off(static_cast<std::size_t>(R) + 1);
    for (auto& x : off) x = static_cast<std::int32_t>(gen() % 24) - 2;
    if (trial % 2 == 0) std::sort(off.begin(), off.end());  // half the batches non-decreasing
    bool all = true;
    for (std::int32_t r = 0; r < R; ++r) all = all && kernels::prune_span_ok(off[r], off[r + 1], N);
    // Brute force: no node index outside [0, N) is covered, and no index is covered twice.
    std::vector<int> covered(64, 0);
    bool safe = true;
    for (std::int32_t r = 0; r < R; ++r) {
      if (off[r + 1] < off[r]) safe = false;  // a reversed span: the kernels would compute a negative count
      for (std::int32_t i = off[r]; i < off[r + 1]; ++i) {
        if (i < 0 || i >= N || covered[static_cast<std::size_t>(i)]++ > 0) safe = false;
      }
    }
    if (off.front() < 0 || off.back() > N) safe = false;
    INFO("trial " << trial);
    CHECK(all == safe);
  }
}

TEST_CASE("verify_request_params: the params array, or base with each per-request array") {
  kernels::verify_batch_params P;
  P.base.mode = verify_mode::greedy;
  P.base.seed = 99;
  P.base.request = 40;
  P.base.round = 7;
  P.base.typical_epsilon = 0.25f;
  // Base only: consecutive request keys from base.request, the rest shared.
  for (std::int32_t r = 0; r < 3; ++r) {
    const verify_params vp = kernels::verify_request_params(P, r);
    CHECK(vp.mode == verify_mode::greedy);
    CHECK(vp.seed == 99);
    CHECK(vp.request == 40u + static_cast<std::uint32_t>(r));
    CHECK(vp.round == 7);
    CHECK(vp.typical_epsilon == 0.25f);
  }
  // Each array replaces its field alone.
  const std::int32_t modes[] = {0, 8, 2};
  const std::uint64_t seeds[] = {5, 6, 7};
  const std::uint32_t requests[] = {9, 3, 1};
  const std::uint32_t rounds[] = {11, 12, 13};
  P.modes = modes;
  CHECK(kernels::verify_request_params(P, 1).mode == verify_mode::traversal_without_replacement);
  CHECK(kernels::verify_request_params(P, 1).seed == 99);
  P.seeds = seeds;
  P.rounds = rounds;
  CHECK(kernels::verify_request_params(P, 2).seed == 7);
  CHECK(kernels::verify_request_params(P, 2).round == 13);
  CHECK(kernels::verify_request_params(P, 2).request == 42);
  P.requests = requests;
  CHECK(kernels::verify_request_params(P, 2).request == 1);
  CHECK(kernels::verify_request_params(P, 0).typical_epsilon == 0.25f);
  // A params array takes precedence; can_implement refuses both at once.
  verify_params arr[2];
  arr[1].seed = 1234;
  arr[1].mode = verify_mode::block;
  P.params = arr;
  CHECK(kernels::verify_request_params(P, 1).seed == 1234);
  CHECK(kernels::verify_request_params(P, 1).mode == verify_mode::block);
  int dummy = 0;
  verify_result res{};
  P.num_requests = 2;
  P.vocab = P.max_nodes = P.node_capacity = P.out_stride = 4;
  P.offsets = &dummy;
  P.token = &dummy;
  P.parent = &dummy;
  P.p = &dummy;
  P.paths = &dummy;
  P.tokens = &dummy;
  P.results = &res;
  CHECK(kernels::verify_batch_can_implement(P).code() == status_code::invalid_argument);
  P.modes = nullptr;
  P.seeds = nullptr;
  P.requests = nullptr;
  P.rounds = nullptr;
  CHECK(kernels::verify_batch_can_implement(P).ok());
  P.params = nullptr;  // base alone is a valid launch
  CHECK(kernels::verify_batch_can_implement(P).ok());
}

TEST_CASE("verify tile and split logits pre-passes: which launches run them, and their tables' sizes") {
  // Small launches only (one block per request would leave the GPU idle).
  CHECK(kernels::verify_tiles_prepass(1, 128256, 64));
  CHECK(kernels::verify_tiles_prepass(kernels::verify_tiles_max_requests, 32000, 1));
  CHECK_FALSE(kernels::verify_tiles_prepass(kernels::verify_tiles_max_requests + 1, 32000, 8));
  CHECK_FALSE(kernels::verify_tiles_prepass(0, 32000, 8));
  CHECK(kernels::verify_tiles_prepass(1, 32000, kernels::verify_tiles_max_nodes));
  CHECK_FALSE(kernels::verify_tiles_prepass(1, 32000, kernels::verify_tiles_max_nodes + 1));  // a generous bound
  CHECK(kernels::verify_tiles_table_bytes(64, 32000, 8) == 0);
  // Modes that take row masses.
  for (std::int32_t m = 0; m < verify_mode_count; ++m) {
    const auto mode = static_cast<verify_mode>(m);
    CHECK(kernels::verify_tiles_mode(mode) == (mode != verify_mode::greedy && mode != verify_mode::typical_lossy));
  }
  // An entry: 126 tile sums and 126 flags for V = 128256; p and q per node.
  CHECK(sum_tile_count(128256) == 126);
  CHECK(kernels::verify_tiles_row_bytes(128256) == 126 * 12);
  CHECK(kernels::verify_tiles_row_bytes(10) == 16);  // 12 rounded up to 8-byte alignment
  CHECK(kernels::verify_tiles_table_bytes(3, 128256, 64) == align_up(std::size_t{3} * 64 * 2 * 126 * 12));
  CHECK(kernels::verify_batch_workspace_bytes(3, 128256, 64) ==
        3 * kernels::verify_request_workspace_bytes(128256, 64) + kernels::verify_argmax_table_bytes(3, 128256, 64) +
            kernels::verify_tiles_table_bytes(3, 128256, 64));
  // The split logits pre-pass: small launches only, chunks of whole tiles,
  // at least 4 tiles and 2 chunks a row; its buffers in the workspace.
  CHECK(kernels::verify_transform_chunk_tiles(1, 128256, 1) == 5);  // 126 tiles, at most 31 chunks: 26 of 5
  CHECK(split_chunk_count(128256, 5) == 26);
  CHECK(kernels::verify_transform_chunk_tiles(2, 128256, 8) == 8);  // 16 rows: 16 chunks of 8 tiles
  CHECK(kernels::verify_transform_chunk_tiles(3, 128256, 8) == 0);  // 24 rows: a block per row
  CHECK(kernels::verify_transform_chunk_tiles(1, 7000, 1) == 0);    // 7 tiles: one chunk
  CHECK(kernels::verify_transform_chunk_tiles(1, 8192, 1) == 4);    // 8 tiles: two chunks
  CHECK(kernels::verify_transform_split_bytes(2, 128256, 8, false) == 0);
  const std::size_t rows = 2 * 8 * 2;
  CHECK(kernels::verify_transform_split_bytes(2, 128256, 8, true) ==
        align_up(rows * sizeof(split_transform_sums)) + align_up(rows * sizeof(split_transform_state)) +
            align_up(rows * 126 * sizeof(double)));
  CHECK(kernels::verify_batch_workspace_bytes(2, 128256, 8, true) ==
        kernels::verify_batch_workspace_bytes(2, 128256, 8, false) + kernels::verify_transform_table_bytes(2, 8, true) +
            kernels::verify_transform_split_bytes(2, 128256, 8, true));
}

TEST_CASE("verify_row_index: how the device policy finds a p or q row in its pre-pass tables") {
  // p: 5 rows of bf16, row stride 40 elements, column stride 2; q: fp16 in
  // the same buffer one element over (an interleaved layout), contiguous fp32 elsewhere.
  std::vector<std::uint16_t> buf(5 * 40 + 8);
  std::vector<float> f(3 * 7);
  const auto rows_at = [](const void* at, std::int64_t rs, std::int64_t cs, row_dtype t, std::int64_t u) {
    return detail::row_ref{static_cast<const char*>(at) + u * rs * row_dtype_bytes(t), cs, t};
  };
  for (std::int64_t u = 0; u < 5; ++u) {
    CHECK(kernels::verify_row_index(rows_at(buf.data(), 40, 2, row_dtype::bf16, u), buf.data(), 40, 2, row_dtype::bf16,
                                    5) == u);
    // The q row at the next element: not a p row (misaligned to p's rows), found among q's.
    const auto q = rows_at(buf.data() + 1, 40, 2, row_dtype::f16, u);
    CHECK(kernels::verify_row_index(q, buf.data(), 40, 2, row_dtype::bf16, 5) == -1);
    CHECK(kernels::verify_row_index(q, buf.data() + 1, 40, 2, row_dtype::f16, 5) == u);
  }
  // Same bytes, another type or column stride: not that row.
  const auto p2 = rows_at(buf.data(), 40, 2, row_dtype::bf16, 2);
  CHECK(kernels::verify_row_index(p2, buf.data(), 40, 2, row_dtype::f16, 5) == -1);
  CHECK(kernels::verify_row_index(p2, buf.data(), 40, 1, row_dtype::bf16, 5) == -1);
  // Past the request's rows, before its first row, inside a row, or no table.
  CHECK(kernels::verify_row_index(rows_at(buf.data(), 40, 2, row_dtype::bf16, 5), buf.data(), 40, 2, row_dtype::bf16,
                                  5) == -1);
  CHECK(kernels::verify_row_index(p2, buf.data() + 80, 40, 2, row_dtype::bf16, 5) == 0);    // its own row 0
  CHECK(kernels::verify_row_index(p2, buf.data() + 120, 40, 2, row_dtype::bf16, 5) == -1);  // before the first row
  CHECK(kernels::verify_row_index(detail::row_ref{buf.data() + 82, 2, row_dtype::bf16}, buf.data(), 40, 2,
                                  row_dtype::bf16, 5) == -1);
  CHECK(kernels::verify_row_index(p2, nullptr, 40, 2, row_dtype::bf16, 5) == -1);
  // Row stride 0 (one row broadcast): only the row itself.
  CHECK(kernels::verify_row_index(detail::row_ref{f.data(), 1}, f.data(), 0, 1, row_dtype::f32, 3) == 0);
  CHECK(kernels::verify_row_index(detail::row_ref{f.data() + 7, 1}, f.data(), 0, 1, row_dtype::f32, 3) == -1);
  CHECK(kernels::verify_row_index(detail::row_ref{f.data() + 14, 1}, f.data(), 7, 1, row_dtype::f32, 3) == 2);
}
