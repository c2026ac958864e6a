// Every verify_mode, layer by layer: the table below says what each layer
// must do with each mode, and the test checks that every layer does it.
// Adding a mode (docs/verify.md, "Adding a verification mode") means adding
// its row here; verify_mode_count makes the table's size a compile error
// until then.
#include <catch2/catch.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "specdec/draft/drafter.hpp"
#include "specdec/draft/verify_mode.hpp"
#include "specdec/parallel/sharded_verify.hpp"
#include "specdec/verify/tree_verify.hpp"
#include "specdec/verify/verify_params.hpp"

using namespace specdec;

namespace {

struct mode_row {
  verify_mode mode;
  bool lossless;      // is_lossless
  bool reads_q;       // uses_draft_probs
  bool traversal;     // is_traversal (leaves to root)
  bool device;        // runs_on_device (the CUDA kernel's gate)
  draft_mode drafts;  // how a tree it is exact for was drafted (leaf: any)
};

constexpr std::array<mode_row, 9> modes{{
    {verify_mode::sampled_iid, true, true, false, true, draft_mode::iid},
    {verify_mode::sampled_without_replacement, true, true, false, true, draft_mode::without_replacement},
    {verify_mode::deterministic, true, false, false, true, draft_mode::deterministic},
    {verify_mode::greedy, true, false, false, true, draft_mode::leaf},
    {verify_mode::naive_matching, true, false, false, true, draft_mode::leaf},
    {verify_mode::typical_lossy, false, false, false, true, draft_mode::leaf},
    {verify_mode::block, true, true, true, true, draft_mode::iid},
    {verify_mode::traversal, true, true, true, true, draft_mode::iid},
    {verify_mode::traversal_without_replacement, true, true, true, true, draft_mode::without_replacement},
}};
static_assert(modes.size() == static_cast<std::size_t>(verify_mode_count), "one row per verify_mode");

constexpr std::int64_t V = 4;
constexpr std::int32_t N = 3;  // a chain: every mode (block included) accepts it

struct chain_case {
  std::vector<node_id> parent{-1, 0, 1};
  std::vector<token_id> token{0, 1, 2};
  std::vector<float> p = std::vector<float>(N * V, 0.25f);
  std::vector<float> q{0.4f, 0.3f, 0.2f, 0.1f, 0.4f, 0.3f, 0.2f, 0.1f, 0.4f, 0.3f, 0.2f, 0.1f};
  tree_view view() const { return tree_view{token.data(), parent.data(), nullptr, nullptr, N}; }
  view2d<const float> rows(const std::vector<float>& r) const { return view2d<const float>{r.data(), {N, V}, {V, 1}}; }
};

drafted_tree drafted_chain(draft_mode m) {
  drafted_tree d;
  d.reset(0);
  d.add(0, 1, 0.3f, -1.2f, m == draft_mode::leaf ? draft_mode::iid : m);
  d.add(1, 2, 0.2f, -2.8f, m == draft_mode::leaf ? draft_mode::iid : m);
  return d;
}

status run_host(const chain_case& c, const verify_params& vp, verify_result& r) {
  std::vector<std::byte> ws(verify_workspace_size(V, N));
  std::vector<node_id> path(N);
  std::vector<token_id> tokens(N);
  return verify_tree(c.view(), c.rows(c.p), c.rows(c.q), vp, ws, path, tokens, r);
}

status run_partitioned(const chain_case& c, const verify_params& vp, verify_result& r) {
  const std::vector<std::int64_t> bounds{0, 2, V};
  std::vector<std::byte> ws(sharded_verify_workspace_size(bounds, 0, 1, N));
  std::vector<node_id> path(N);
  std::vector<token_id> tokens(N);
  return verify_tree_partitioned(bounds, c.view(), c.rows(c.p), c.rows(c.q), vp, ws, path, tokens, r);
}

}  // namespace

TEST_CASE("every verify_mode is handled explicitly by every layer") {
  const chain_case c;
  for (std::int32_t i = 0; i < verify_mode_count; ++i) {
    const mode_row& row = modes[static_cast<std::size_t>(i)];
    INFO("mode " << i << " " << verify_mode_name(row.mode));
    REQUIRE(static_cast<std::int32_t>(row.mode) == i);
    // verify_params.hpp: name and predicates.
    CHECK(is_valid_mode(row.mode));
    CHECK(std::strcmp(verify_mode_name(row.mode), "unknown") != 0);
    CHECK(is_lossless(row.mode) == row.lossless);
    CHECK(uses_draft_probs(row.mode) == row.reads_q);
    CHECK(is_traversal(row.mode) == row.traversal);
    CHECK(runs_on_device(row.mode) == row.device);
    verify_params vp;
    vp.mode = row.mode;
    CHECK(validate_verify_params(vp).ok());
    // draft/verify_mode.hpp: exact for a chain drafted as the table says.
    CHECK(check_verify_mode(drafted_chain(row.drafts), row.mode).ok());
    // The walk (host row policy) and the sharded row policy both run it.
    verify_result host{}, part{};
    CHECK(run_host(c, vp, host).ok());
    CHECK(run_partitioned(c, vp, part).ok());
    CHECK(host.code == status_code::ok);
  }
}

TEST_CASE("a value past the last verify_mode is rejected by every layer") {
  const chain_case c;
  const auto bad = static_cast<verify_mode>(verify_mode_count);
  CHECK_FALSE(is_valid_mode(bad));
  CHECK_FALSE(runs_on_device(bad));
  CHECK(std::strcmp(verify_mode_name(bad), "unknown") == 0);
  verify_params vp;
  vp.mode = bad;
  CHECK(validate_verify_params(vp).code() == status_code::invalid_argument);
  CHECK(check_verify_mode(drafted_chain(draft_mode::iid), bad).code() == status_code::invalid_argument);
  verify_result r{};
  CHECK(run_host(c, vp, r).code() == status_code::invalid_argument);
  CHECK(run_partitioned(c, vp, r).code() == status_code::invalid_argument);
}
