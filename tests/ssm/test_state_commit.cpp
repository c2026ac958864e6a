#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "specdec/ssm/state_commit.hpp"
#include "specdec/ssm/tree_scan_recurrent.hpp"
#include "ssm_test_util.hpp"

using namespace ssm_test;
using specdec::node_id;
using specdec::status_code;

namespace {

std::vector<std::uint64_t> packed_row(const std::vector<node_id>& path, std::size_t n) {
  std::vector<std::uint64_t> m((n + 63) / 64, 0);
  for (node_id v : path) m[static_cast<std::size_t>(v) / 64] |= std::uint64_t{1} << (static_cast<std::size_t>(v) % 64);
  return m;
}

template <class T>
void check_commit(const dims& d, flags f, std::uint64_t seed, double tol, bool chain = false) {
  INFO("seed " << seed << " n " << d.n << (chain ? " chain" : ""));
  const auto parent = chain ? chain_tree(d.n) : random_tree(d.n, seed);
  const auto pr = make_problem(d, f, seed).cast<T>();
  const specdec::tree_ssm_shape shape{d.n, d.heads, d.headdim, d.groups, d.dstate};
  std::vector<T> y(static_cast<std::size_t>(d.n * d.heads * d.headdim));
  const auto srow = static_cast<std::size_t>(d.heads * d.headdim * d.dstate);
  std::vector<T> states(static_cast<std::size_t>(d.n) * srow);
  std::vector<std::byte> ws(specdec::tree_scan_recurrent_workspace_size<T>(parent, shape));
  REQUIRE(specdec::tree_scan_recurrent<T>(parent, pr.inputs(), {},
                                          specdec::make_view(y.data(), d.n, d.heads, d.headdim),
                                          specdec::make_view(states.data(), d.n, d.heads, d.headdim, d.dstate), ws)
              .ok());
  double worst_path = 0.0, worst_replay = 0.0, worst_ref = 0.0;
  for (node_id v = 0; v < d.n; ++v) {
    const auto path = root_path(parent, v);
    const std::vector<T> node_state(
        states.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(v) * srow),
        states.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(v + 1) * srow));
    std::vector<T> h1(srow, T(-9)), h2(srow, T(-9));
    REQUIRE(specdec::tree_ssm_commit_path<T>(parent, pr.inputs(), {}, path,
                                             specdec::make_view(h1.data(), d.heads, d.headdim, d.dstate))
                .ok());
    const auto mask = packed_row(path, static_cast<std::size_t>(d.n));
    REQUIRE(specdec::tree_ssm_replay_masked<T>(parent, pr.inputs(), {}, mask,
                                               specdec::make_view(h2.data(), d.heads, d.headdim, d.dstate))
                .ok());
    // The commit takes the scan's per-node operations (vec_ops::fma where
    // the target fuses): the same bits, not only the same values.
    CHECK(h1 == node_state);
    CHECK(h2 == node_state);
    worst_path = std::max(worst_path, max_scaled_error(h1, node_state, tol, tol));
    worst_replay = std::max(worst_replay, max_scaled_error(h2, node_state, tol, tol));
    std::vector<double> ry, rs;
    ref_sequence(make_problem(d, f, seed), {}, path, ry, rs);
    worst_ref = std::max(worst_ref, max_scaled_error(h1, rs, tol, tol));
  }
  INFO("scaled errors: path " << worst_path << " replay " << worst_replay << " vs float64 " << worst_ref);
  CHECK(worst_path <= 1.0);
  CHECK(worst_replay <= 1.0);
  CHECK(worst_ref <= 1.0);
}

}  // namespace

TEST_CASE("state commit: path commit and masked replay equal the per-node state") {
  check_commit<double>({19, 4, 6, 2, 10}, flags{}, 71, 1e-12);
  check_commit<float>({19, 4, 6, 2, 10}, flags{}, 72, 2e-5);
  check_commit<double>({70, 2, 3, 1, 5}, flags{true, true, true, false, true}, 73, 1e-12);  // N > 64: two mask words
  check_commit<float>({130, 2, 4, 2, 8}, flags{}, 74, 2e-5);
  // headdim 70: the commit's rows go in chunks of 64 (then 4-, 2-, 1-row blocks).
  check_commit<double>({9, 2, 70, 1, 7}, flags{}, 75, 1e-12);
  check_commit<float>({9, 3, 70, 1, 16}, flags{}, 76, 2e-5);
  // Chains of 40: the commit takes 16 steps at a time (16 + 16 + 8), with and
  // without h0; headdim 15 (row blocks 4, 4, 4, 2, 1) and dstate 29 (for
  // float: two 2-vector tiles, a 1-vector tile and 1 scalar at 16-byte
  // vectors, one 2-vector tile, a 1-vector tile and 5 scalars at 32).
  for (bool h0 : {true, false}) {
    flags f;
    f.has_h0 = h0;
    check_commit<double>({40, 2, 15, 1, 29}, f, 77, 1e-12, true);
    check_commit<float>({40, 2, 15, 1, 29}, f, 78, 2e-5, true);
  }
}

TEST_CASE("state commit: segments of 16 steps in place over h0 and into a strided state, bit for bit") {
  const dims d{40, 2, 15, 1, 29};
  const std::uint64_t seed = 79;
  INFO("seed " << seed);
  const auto parent = chain_tree(d.n);
  auto pr = make_problem(d, flags{}, seed).cast<float>();
  const auto path = root_path(parent, static_cast<node_id>(d.n - 1));
  const auto srow = static_cast<std::size_t>(d.heads * d.headdim * d.dstate);
  std::vector<float> ref(srow);
  REQUIRE(specdec::tree_ssm_commit_path<float>(parent, pr.inputs(), {}, path,
                                               specdec::make_view(ref.data(), d.heads, d.headdim, d.dstate))
              .ok());
  // Strided output (dstate innermost no longer: [heads, dstate, headdim]
  // memory), element by element across the segments.
  std::vector<float> t(srow, -9.0f);
  specdec::view3d<float> tv{t.data(), {d.heads, d.headdim, d.dstate}, {d.headdim * d.dstate, 1, d.headdim}};
  REQUIRE(specdec::tree_ssm_commit_path<float>(parent, pr.inputs(), {}, path, tv).ok());
  bool same = true;
  for (std::int64_t h = 0; h < d.heads; ++h)
    for (std::int64_t p = 0; p < d.headdim; ++p)
      for (std::int64_t k = 0; k < d.dstate; ++k)
        same = same && tv(h, p, k) == ref[static_cast<std::size_t>((h * d.headdim + p) * d.dstate + k)];
  CHECK(same);
  // In place: h_out is the very view of h0.
  auto in = pr.inputs();
  REQUIRE(specdec::tree_ssm_commit_path<float>(parent, in, {}, path,
                                               specdec::make_view(pr.h0.data(), d.heads, d.headdim, d.dstate))
              .ok());
  CHECK(pr.h0 == ref);
}

TEST_CASE("state commit: in place over h0, and chained rounds equal one long sequence") {
  const dims d{12, 2, 4, 1, 6};
  const std::uint64_t seed = 75;
  INFO("seed " << seed);
  const auto parent = random_tree(d.n, seed);
  auto pr = make_problem(d, flags{}, seed);
  const node_id leaf = static_cast<node_id>(d.n - 1);
  const auto path = root_path(parent, leaf);
  std::vector<double> expect_y, expect_h;
  ref_sequence(pr, {}, path, expect_y, expect_h);
  // Commit in place: h_out is the very view of h0.
  auto in = pr.inputs();
  auto h0_mut = specdec::make_view(pr.h0.data(), d.heads, d.headdim, d.dstate);
  REQUIRE(specdec::tree_ssm_commit_path<double>(parent, in, {}, path, h0_mut).ok());
  CHECK(max_scaled_error(pr.h0, expect_h, 1e-12, 1e-12) <= 1.0);
  // Round 2 starts from the committed state: the float64 reference continues
  // the same recurrence from the round-1 state along the new accepted path.
  auto pr2 = make_problem(d, flags{}, seed + 1);
  const auto parent2 = random_tree(d.n, seed + 1);
  const auto path2 = root_path(parent2, static_cast<node_id>(d.n / 2));
  pr2.h0 = expect_h;
  std::vector<double> expect_y2, expect_h2;
  ref_sequence(pr2, {}, path2, expect_y2, expect_h2);
  pr2.h0 = pr.h0;  // the library's committed state
  std::vector<double> h2(pr2.h0.size());
  REQUIRE(specdec::tree_ssm_commit_path<double>(parent2, pr2.inputs(), {}, path2,
                                                specdec::make_view(h2.data(), d.heads, d.headdim, d.dstate))
              .ok());
  CHECK(max_scaled_error(h2, expect_h2, 1e-12, 1e-12) <= 1.0);
}

TEST_CASE("state commit: bad paths and masks are reported and leave the output untouched") {
  const dims d{10, 2, 3, 1, 4};
  const auto parent = binary_tree(d.n);  // 0 -> 1,2; 1 -> 3,4; 2 -> 5,6; 3 -> 7,8; 4 -> 9
  const auto pr = make_problem(d, flags{}, 76);
  std::vector<double> h(static_cast<std::size_t>(d.heads * d.headdim * d.dstate), 42.0);
  auto hv = specdec::make_view(h.data(), d.heads, d.headdim, d.dstate);
  auto commit = [&](std::vector<node_id> path) {
    return specdec::tree_ssm_commit_path<double>(parent, pr.inputs(), {}, path, hv);
  };
  CHECK(commit({}) == status_code::empty_input);
  CHECK(commit({1, 3}) == status_code::invalid_argument);     // does not start at the root
  CHECK(commit({0, 2, 3}) == status_code::invalid_argument);  // 3 is not a child of 2
  CHECK(commit({0, 1, 99}) == status_code::out_of_range);
  auto replay = [&](std::vector<std::uint64_t> m) {
    return specdec::tree_ssm_replay_masked<double>(parent, pr.inputs(), {}, m, hv);
  };
  CHECK(replay({0}) == status_code::empty_input);
  CHECK(replay({0b110}) == status_code::invalid_argument);            // siblings 1 and 2, no root
  CHECK(replay({0b1101}) == status_code::invalid_argument);           // 0, 2, 3: 3 is not 2's child
  CHECK(replay({1u | (1u << 12)}) == status_code::invalid_argument);  // bit beyond N
  CHECK(replay({1, 0}) == status_code::size_mismatch);
  std::vector<double> small(4);
  CHECK(specdec::tree_ssm_commit_path<double>(parent, pr.inputs(), {}, std::vector<node_id>{0},
                                              specdec::make_view(small.data(), 1, 2, 2)) == status_code::size_mismatch);
  bool untouched = true;
  for (double v : h) untouched = untouched && v == 42.0;
  CHECK(untouched);
  CHECK(replay({0b1011}).ok());  // 0, 1, 3
}
