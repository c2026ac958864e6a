// SGLang's EAGLE tree builder (build_tree_kernel_efficient): against the
// transcription of SGLang's kernel (all three mask modes; the bit-packed one
// against the byte mask), against brute force (parents recomputed from the
// candidate blocks, ancestors by climbing, the linked lists converted back
// with tree_from_linked_list), and on malformed requests.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "interop/sglang_reference.hpp"
#include "specdec/interop/linked_tree.hpp"
#include "specdec/interop/sglang_build_tree.hpp"

using namespace specdec;

namespace {

std::span<std::byte> aligned(std::vector<std::byte>& storage, std::size_t bytes) {
  storage.assign(bytes + workspace_alignment, std::byte{0});
  const auto p = reinterpret_cast<std::uintptr_t>(storage.data());
  const std::size_t shift = (workspace_alignment - p % workspace_alignment) % workspace_alignment;
  return std::span<std::byte>(storage.data() + shift, bytes);
}

struct built {
  std::vector<std::uint8_t> mask;
  std::vector<std::int64_t> positions, ridx, next, sib;
  std::vector<status_code> codes;
  built(const sglang_ref::draft_steps& d, std::int64_t mask_bytes)
      : mask(static_cast<std::size_t>(mask_bytes), 1),
        positions(static_cast<std::size_t>(d.bs * d.n), -9),
        ridx(positions),
        next(static_cast<std::size_t>(d.bs * d.n), -1),
        sib(next),
        codes(static_cast<std::size_t>(d.bs)) {}
  sglang_build_tree_outputs view() {
    return {mask.data(), static_cast<std::int64_t>(mask.size()), positions.data(), ridx.data(), next.data(),
            sib.data()};
  }
};

std::int64_t mask_bytes(const sglang_ref::draft_steps& d, sglang_tree_mask_mode m) {
  const std::int64_t n = d.n;
  if (m == sglang_tree_mask_mode::qlen_only) return d.bs * n * n;
  if (m == sglang_tree_mask_mode::qlen_only_bitpacking) return d.bs * n * detail::sglang_packed_row_bytes(d.n);
  std::int64_t total = d.bs * n * n;
  for (const auto s : d.seq_len) total += s * n;
  return total;
}

sglang_build_tree_inputs inputs(const sglang_ref::draft_steps& d, sglang_tree_mask_mode m) {
  return {d.bs, d.topk, d.depth, d.n, d.parent_list.data(), d.selected.data(), d.seq_len.data(), m};
}

}  // namespace

TEST_CASE("sglang_build_tree equals SGLang's build_tree_efficient and brute force, every mask mode") {
  std::vector<std::byte> storage;
  for (std::uint64_t seed = 1; seed <= 120; ++seed) {
    std::mt19937_64 g(seed);
    const int topk = 1 + static_cast<int>(g() % 4), depth = 1 + static_cast<int>(g() % 5);
    const std::int64_t cands = topk + static_cast<std::int64_t>(depth - 1) * topk * topk;
    const int n = 1 + static_cast<int>(g() % static_cast<std::uint64_t>(std::min<std::int64_t>(cands, 31) + 1));
    const int bs = 1 + static_cast<int>(g() % 5);
    const sglang_ref::draft_steps d = sglang_ref::make_draft_steps(bs, topk, depth, n, seed);
    INFO("seed " << seed << " bs " << bs << " topk " << topk << " depth " << depth << " n " << n);
    const auto ws = aligned(storage, sglang_build_tree_workspace_size(inputs(d, sglang_tree_mask_mode::full_mask)));
    for (const auto m : {sglang_tree_mask_mode::full_mask, sglang_tree_mask_mode::qlen_only}) {
      built want(d, mask_bytes(d, m)), got(d, mask_bytes(d, m));
      sglang_ref::reference_build_tree(d, static_cast<int>(m), want.mask, want.positions, want.ridx, want.next,
                                       want.sib);
      std::fill(got.mask.begin(), got.mask.end(), std::uint8_t{7});  // specdec writes every byte of its rows
      REQUIRE(sglang_build_tree(inputs(d, m), got.view(), got.codes, ws).ok());
      CHECK(got.codes == std::vector<status_code>(static_cast<std::size_t>(bs), status_code::ok));
      CHECK(got.mask == want.mask);
      CHECK(got.positions == want.positions);
      CHECK(got.ridx == want.ridx);
      CHECK(got.next == want.next);
      CHECK(got.sib == want.sib);
    }
    // Bit-packed rows hold the qlen_only byte rows' bits.
    built bytes(d, mask_bytes(d, sglang_tree_mask_mode::qlen_only)),
        packed(d, mask_bytes(d, sglang_tree_mask_mode::qlen_only_bitpacking));
    REQUIRE(sglang_build_tree(inputs(d, sglang_tree_mask_mode::qlen_only), bytes.view(), {}, ws).ok());
    REQUIRE(sglang_build_tree(inputs(d, sglang_tree_mask_mode::qlen_only_bitpacking), packed.view(), {}, ws).ok());
    const std::int64_t rb = detail::sglang_packed_row_bytes(n);
    for (int row = 0; row < bs * n; ++row)
      for (int c = 0; c < n; ++c) {
        const std::uint8_t byte = packed.mask[static_cast<std::size_t>(row * rb + c / 8)];
        CHECK(((byte >> (c % 8)) & 1) == bytes.mask[static_cast<std::size_t>(row * n + c)]);
      }
    // Brute force: parents from the candidate blocks, converted back from the lists.
    const built& b = bytes;
    const int blocks = topk * (depth - 1) + 1;
    for (int r = 0; r < bs; ++r) {
      const auto o = static_cast<std::size_t>(r * n);
      std::vector<int> parent(static_cast<std::size_t>(n), -1);
      for (int s = 1; s < n; ++s) {
        const std::int64_t f = d.selected[static_cast<std::size_t>(r * (n - 1) + s - 1)];
        if (f < topk) {
          parent[static_cast<std::size_t>(s)] = 0;
          continue;
        }
        const std::int64_t want =
            d.parent_list[static_cast<std::size_t>(r * blocks) + static_cast<std::size_t>(f / topk)];
        for (int j = n - 2; j >= 0; --j)  // the first match, searched from the other end
          if (d.selected[static_cast<std::size_t>(r * (n - 1) + j)] == want)
            parent[static_cast<std::size_t>(s)] = j + 1;
      }
      std::vector<node_id> par(static_cast<std::size_t>(n));
      std::vector<token_id> tok(static_cast<std::size_t>(n));
      std::vector<std::int32_t> o2n(static_cast<std::size_t>(n)), n2o(static_cast<std::size_t>(n));
      std::vector<std::int64_t> cand(static_cast<std::size_t>(n), 1);
      std::int32_t count = 0;
      REQUIRE(tree_from_linked_list(linked_tree<std::int64_t>{cand.data(), b.next.data() + o, b.sib.data() + o, n},
                                    {.require_all = true}, par, tok, o2n, n2o, count)
                  .ok());
      for (int s = 0; s < n; ++s) {
        const int node = o2n[static_cast<std::size_t>(s)];
        const int ps = par[static_cast<std::size_t>(node)] < 0
                           ? -1
                           : n2o[static_cast<std::size_t>(par[static_cast<std::size_t>(node)])];
        CHECK(ps == parent[static_cast<std::size_t>(s)]);
        int depth_s = 0;
        std::vector<std::uint8_t> anc(static_cast<std::size_t>(n), 0);
        for (int u = s; u != -1; u = parent[static_cast<std::size_t>(u)]) {
          anc[static_cast<std::size_t>(u)] = 1;
          depth_s += u != s ? 1 : 0;
        }
        CHECK(b.positions[o + static_cast<std::size_t>(s)] == d.seq_len[static_cast<std::size_t>(r)] + depth_s);
        for (int c = 0; c < n; ++c)
          CHECK(b.mask[(o + static_cast<std::size_t>(s)) * static_cast<std::size_t>(n) + static_cast<std::size_t>(c)] ==
                anc[static_cast<std::size_t>(c)]);
      }
    }
  }
}

TEST_CASE("sglang_build_tree: malformed requests get their own code and write nothing") {
  const sglang_ref::draft_steps good = sglang_ref::make_draft_steps(5, 2, 3, 6, 77);
  sglang_ref::draft_steps d = good;
  const int n = d.n, blocks = d.topk * (d.depth - 1) + 1;
  REQUIRE((n == 6 && blocks == 5));
  // Request 1: a selected index past the candidate blocks.
  d.selected[static_cast<std::size_t>(1 * (n - 1) + 2)] = static_cast<std::int64_t>(blocks) * d.topk;
  // topk 2, depth 3: candidates 0-1 (root's block), 2-5 (blocks 1-2), 6-9 (blocks 3-4).
  auto set_request = [&](int r, std::vector<std::int64_t> sel, std::vector<std::int64_t> pl) {
    std::copy(sel.begin(), sel.end(), d.selected.begin() + r * (n - 1));
    std::copy(pl.begin(), pl.end(), d.parent_list.begin() + r * blocks);
  };
  set_request(2, {0, 1, 2, 3, 6}, {-1, 0, 1, 1000, 2});  // request 2: slot 5's parent (1000) is not selected
  set_request(3, {0, 1, 4, 8, 9}, {-1, 0, 4, 1, 0});     // request 3: slot 3 is its own parent
  // Request 4: a negative sequence length.
  d.seq_len[4] = -1;
  std::vector<std::byte> storage;
  const auto ws = aligned(storage, sglang_build_tree_workspace_size(inputs(d, sglang_tree_mask_mode::qlen_only)));
  built got(d, mask_bytes(good, sglang_tree_mask_mode::qlen_only));
  REQUIRE(sglang_build_tree(inputs(d, sglang_tree_mask_mode::qlen_only), got.view(), got.codes, ws).ok());
  const std::vector<status_code> want = {status_code::ok, status_code::out_of_range, status_code::invalid_argument,
                                         status_code::cycle, status_code::invalid_argument};
  CHECK(got.codes == want);
  for (int r = 1; r < 5; ++r) {
    INFO("request " << r);
    for (int s = 0; s < n; ++s) {
      const auto i = static_cast<std::size_t>(r * n + s);
      CHECK(got.positions[i] == -9);
      CHECK(got.next[i] == -1);
      for (int c = 0; c < n; ++c) CHECK(got.mask[i * static_cast<std::size_t>(n) + static_cast<std::size_t>(c)] == 1);
    }
  }
  // Stop at the first failure without request_status (index = request).
  built again(d, mask_bytes(good, sglang_tree_mask_mode::qlen_only));
  const status first = sglang_build_tree(inputs(d, sglang_tree_mask_mode::qlen_only), again.view(), {}, ws);
  CHECK(first.code() == status_code::out_of_range);
  CHECK(first.index() == 1);
  // A mask too small for the last request only.
  built small(good, mask_bytes(good, sglang_tree_mask_mode::qlen_only) - 1);
  REQUIRE(sglang_build_tree(inputs(good, sglang_tree_mask_mode::qlen_only), small.view(), small.codes, ws).ok());
  CHECK(small.codes[3] == status_code::ok);
  CHECK(small.codes[4] == status_code::buffer_too_small);
  // Whole-call errors.
  sglang_build_tree_inputs bad = inputs(good, sglang_tree_mask_mode::qlen_only_bitpacking);
  bad.draft_token_num = 33;
  CHECK(sglang_build_tree(bad, got.view(), {}, ws) == status_code::unsupported);
  bad = inputs(good, sglang_tree_mask_mode::full_mask);
  bad.topk = 0;
  CHECK(sglang_build_tree(bad, got.view(), {}, ws) == status_code::invalid_argument);
  CHECK(sglang_build_tree(inputs(good, sglang_tree_mask_mode::full_mask), got.view(), {}, ws.first(ws.size() - 1)) ==
        status_code::buffer_too_small);
}
