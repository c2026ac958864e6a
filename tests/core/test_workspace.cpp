// The workspace convention: counting and carving agree, every slice is
// 256-byte aligned, a buffer of exactly X_workspace_size bytes works at any
// address for host entry points, and anything smaller is rejected.
#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

#include "specdec/core/workspace.hpp"
#include "specdec/ssm/tree_conv1d.hpp"
#include "specdec/tree/build.hpp"
#include "specdec/tree/order.hpp"
#include "specdec/tree/paths.hpp"

using specdec::status_code;
using specdec::workspace_alignment;

namespace {
bool aligned(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % workspace_alignment == 0; }
}  // namespace

TEST_CASE("workspace_carver counts what it hands out, aligned, and never past the end") {
  specdec::workspace_carver count;
  CHECK(count.take<float>(3) == nullptr);  // counting only
  CHECK(count.take<double>(100) == nullptr);
  CHECK(count.bytes_used() == 256 + 1024);
  CHECK_FALSE(count.overflowed());

  alignas(256) static unsigned char buf[2048];
  specdec::workspace_carver c(buf, 256 + 1024);
  float* a = c.take<float>(3);
  double* b = c.take<double>(100);
  CHECK(static_cast<void*>(a) == buf);
  CHECK(static_cast<void*>(b) == buf + 256);
  CHECK(aligned(a));
  CHECK(aligned(b));
  CHECK_FALSE(c.overflowed());
  CHECK(c.take<char>(1) == nullptr);  // past the end: null, and the carver knows
  CHECK(c.overflowed());
}

TEST_CASE("unaligned_carver fits bytes_used + slack at every base address") {
  std::vector<unsigned char> big(4096 + 2 * workspace_alignment);
  specdec::workspace_carver sizing;
  (void)sizing.take<std::int32_t>(100);
  (void)sizing.take<double>(7);
  const std::size_t need = sizing.bytes_used() + specdec::unaligned_workspace_slack;
  for (std::size_t off = 0; off < workspace_alignment; ++off) {
    INFO("offset " << off);
    unsigned char* base = big.data() + off;
    auto c = specdec::unaligned_carver(base, need);
    auto* x = c.take<std::int32_t>(100);
    auto* y = c.take<double>(7);
    REQUIRE_FALSE(c.overflowed());
    CHECK(aligned(x));
    CHECK(aligned(y));
    CHECK(reinterpret_cast<unsigned char*>(y) + 7 * sizeof(double) <= base + need);
    // One byte less than the aligned total never fits, whatever the address.
    auto tight = specdec::unaligned_carver(base, sizing.bytes_used() - 1);
    (void)tight.take<std::int32_t>(100);
    (void)tight.take<double>(7);
    CHECK(tight.overflowed());
  }
  auto none = specdec::unaligned_carver(nullptr, 0);
  (void)none.take<int>(4);
  CHECK_FALSE(none.overflowed());  // a null base only counts
}

TEST_CASE("host entry points accept a workspace of exactly X_workspace_size at any address") {
  const std::uint64_t seed = 20261122;
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  const int n = 37;
  std::vector<specdec::node_id> parent(n);
  parent[0] = -1;
  for (int i = 1; i < n; ++i) parent[static_cast<std::size_t>(i)] = static_cast<int>(rng() % static_cast<unsigned>(i));
  const auto expect = specdec::dfs_order(parent);
  const auto expect_paths = specdec::paths(parent);
  std::vector<std::byte> big(specdec::order_workspace_size(n) + 2 * workspace_alignment);
  std::vector<specdec::node_id> n2o(n), o2n(n), out(expect_paths.data.size());
  for (std::size_t off = 0; off < workspace_alignment; off += 3) {
    INFO("offset " << off);
    std::span<std::byte> ws(big.data() + off, specdec::order_workspace_size(n));
    REQUIRE(specdec::dfs_order(parent, n2o, o2n, ws).ok());
    CHECK(n2o == expect.new_to_old);
    CHECK(o2n == expect.old_to_new);
    std::span<std::byte> pws(big.data() + off, specdec::paths_workspace_size(n));
    REQUIRE(specdec::build_paths(parent, out, pws).ok());
    CHECK(out == expect_paths.data);
    std::span<std::byte> cws(big.data() + off, specdec::tree_conv1d_workspace_size(4));
    std::vector<float> x(static_cast<std::size_t>(n) * 2, 1.0f), w(8, 0.5f), st(6, 0.25f);
    std::vector<float> y(static_cast<std::size_t>(n) * 2);
    specdec::tree_conv1d_inputs<float> in;
    in.x = specdec::make_view<const float>(x.data(), n, 2);
    in.weight = specdec::make_view<const float>(w.data(), 2, 4);
    in.conv_state = specdec::make_view<const float>(st.data(), 2, 3);
    REQUIRE(specdec::tree_conv1d<float>(parent, in, specdec::make_view(y.data(), n, 2), cws).ok());
  }
  // Smaller than one aligned slice per array: rejected, outputs untouched.
  std::vector<specdec::node_id> untouched(n, 42), untouched2(n, 42);
  CHECK(specdec::dfs_order(parent, untouched, untouched2, std::span<std::byte>(big).first(workspace_alignment)) ==
        status_code::buffer_too_small);
  CHECK(untouched == std::vector<specdec::node_id>(n, 42));
}
