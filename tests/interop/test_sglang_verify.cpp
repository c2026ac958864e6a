// sglang_verify_tree (specdec's walk on SGLang's linked lists and
// slot-ordered rows, SGLang's outputs out): against brute force (the tree
// converted to a parent array, rows and uniforms permuted into node order,
// verify_tree) for every mode, against the transcription of SGLang's greedy
// loop, and on malformed requests (same code per request, nothing written).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <vector>

#include "interop/sglang_reference.hpp"
#include "specdec/interop/linked_tree.hpp"
#include "specdec/interop/results.hpp"
#include "specdec/interop/sglang_verify.hpp"
#include "specdec/verify/tree_verify.hpp"

using namespace specdec;
using sglang_ref::batch;
using sglang_ref::make_batch;

namespace {

std::span<std::byte> aligned(std::vector<std::byte>& storage, std::size_t bytes) {
  storage.assign(bytes + workspace_alignment, std::byte{0});
  const auto p = reinterpret_cast<std::uintptr_t>(storage.data());
  const std::size_t shift = (workspace_alignment - p % workspace_alignment) % workspace_alignment;
  return std::span<std::byte>(storage.data() + shift, bytes);
}

std::vector<float> random_rows(std::mt19937_64& g, int rows, int V) {
  std::uniform_real_distribution<float> U(0.0f, 1.0f);
  std::vector<float> p(static_cast<std::size_t>(rows * V));
  for (int r = 0; r < rows; ++r) {
    float s = 0.0f;
    for (int x = 0; x < V; ++x) s += (p[static_cast<std::size_t>(r * V + x)] = U(g) < 0.3f ? 0.0f : U(g));
    if (s == 0.0f) p[static_cast<std::size_t>(r * V)] = s = 1.0f;
    for (int x = 0; x < V; ++x) p[static_cast<std::size_t>(r * V + x)] /= s;
  }
  return p;
}

// SGLang's outputs, pre-filled with sentinels.
struct outputs {
  std::vector<int> predicts, accept_index, accept_num;
  std::vector<std::int64_t> per_depth;
  outputs(int bs, int n, int num_spec)
      : predicts(static_cast<std::size_t>(bs * n), -5),
        accept_index(static_cast<std::size_t>(bs * num_spec), -1),
        accept_num(static_cast<std::size_t>(bs), -1),
        per_depth(static_cast<std::size_t>(n), 0) {}
  sglang_outputs<int> view(int bs, int num_spec) {
    return sglang_outputs<int>{predicts, make_view(accept_index.data(), bs, num_spec), accept_num};
  }
};

// Brute force for request r: convert, permute rows and uniforms into node
// order, verify_tree, then map nodes back to slots and rows. With slot_ids
// (an unshuffled batch, slots already topological) the slot-numbered parent
// array is verified directly: typical_lossy breaks ties among equally deep
// nodes by the lowest id, and on linked lists the ids are the slots.
status_code brute_force(const batch& b, int r, const std::vector<float>& p, const std::vector<float>& q,
                        const std::vector<double>& uni, int draws, const verify_params& vp, int num_spec, bool slot_ids,
                        outputs& out) {
  const int n = b.n, V = b.V;
  const auto o = static_cast<std::size_t>(r * n);
  std::vector<node_id> parent(static_cast<std::size_t>(n));
  std::vector<token_id> token(static_cast<std::size_t>(n));
  std::vector<std::int32_t> o2n(static_cast<std::size_t>(n)), n2o(static_cast<std::size_t>(n));
  std::int32_t count = 0;
  const linked_tree<std::int64_t> lt{b.cand.data() + o, b.next.data() + o, b.sib.data() + o, n};
  const status cs = tree_from_linked_list(lt, {.unused_root = true, .root_token = 0, .require_all = true}, parent,
                                          token, o2n, n2o, count);
  if (!cs.ok()) return cs.code();
  if (slot_ids) {  // slots are topological: verify the slot-numbered tree itself
    for (int u = 0; u < n; ++u) {
      const auto su = static_cast<std::size_t>(u);
      parent[su] = b.parent_slot[o + su];
      token[su] = u == 0 ? 0 : static_cast<token_id>(b.cand[o + su]);
      n2o[su] = u;
    }
  }
  std::vector<float> pn(static_cast<std::size_t>(n * V)), qn(pn.size());
  std::vector<double> un(static_cast<std::size_t>(n * draws));
  for (int u = 0; u < n; ++u) {
    const auto slot = o + static_cast<std::size_t>(n2o[static_cast<std::size_t>(u)]);
    for (int x = 0; x < V; ++x) {
      pn[static_cast<std::size_t>(u * V + x)] = p[slot * static_cast<std::size_t>(V) + static_cast<std::size_t>(x)];
      qn[static_cast<std::size_t>(u * V + x)] = q[slot * static_cast<std::size_t>(V) + static_cast<std::size_t>(x)];
    }
    for (int d = 0; d < draws; ++d)
      un[static_cast<std::size_t>(u * draws + d)] =
          uni[slot * static_cast<std::size_t>(draws) + static_cast<std::size_t>(d)];
  }
  std::vector<std::byte> ws(verify_workspace_size(V, n));
  std::vector<node_id> path(static_cast<std::size_t>(n));
  std::vector<token_id> toks(static_cast<std::size_t>(n));
  verify_result res;
  const status st = verify_tree(tree_view{token.data(), parent.data(), nullptr, nullptr, n},
                                make_view<const float>(pn.data(), n, V), make_view<const float>(qn.data(), n, V), vp,
                                caller_uniforms{un.data(), n, draws}, ws, path, toks, res);
  if (!st.ok()) return st.code();
  for (int k = 0; k <= res.accepted; ++k) {
    const auto slot = o + static_cast<std::size_t>(n2o[static_cast<std::size_t>(path[static_cast<std::size_t>(k)])]);
    const auto row = static_cast<std::size_t>(b.ridx[slot]);
    out.accept_index[static_cast<std::size_t>(r * num_spec + k)] = static_cast<int>(row);
    out.predicts[row] = toks[static_cast<std::size_t>(k)];
  }
  out.accept_num[static_cast<std::size_t>(r)] = res.accepted;
  count_acceptance_per_depth(res.accepted, out.per_depth);
  return status_code::ok;
}

constexpr verify_mode modes[] = {
    verify_mode::greedy,        verify_mode::sampled_iid,    verify_mode::sampled_without_replacement,
    verify_mode::deterministic, verify_mode::naive_matching, verify_mode::typical_lossy};

}  // namespace

TEST_CASE("sglang_verify_tree equals verify_tree on the converted tree, every mode, caller uniforms") {
  std::vector<std::byte> storage;
  for (std::uint64_t seed = 1; seed <= 80; ++seed) {
    std::mt19937_64 g(seed * 7919);
    const int bs = 1 + static_cast<int>(g() % 4), n = 1 + static_cast<int>(g() % 12);
    const int V = seed % 3 == 0 ? 1500 : 23;  // several sum tiles, or one partial tile
    const bool shuffled = seed % 4 != 0;
    const batch b = make_batch(bs, n, V, seed, seed % 2 == 0, shuffled);
    const auto p = random_rows(g, bs * n, V), q = random_rows(g, bs * n, V);
    const int draws = n + 1;
    std::vector<double> uni(static_cast<std::size_t>(bs * n * draws));
    std::uniform_real_distribution<double> U(0.0, 1.0);
    for (auto& u : uni) u = U(g);
    if (seed % 5 == 0) uni[0] = 0.0;                       // a uniform of exactly 0
    if (seed % 7 == 0) uni[1] = std::nextafter(1.0, 0.0);  // the largest double below 1
    const int num_spec = n + static_cast<int>(g() % 2);    // depth <= n - 1 always fits
    for (const verify_mode m : modes) {
      if (m == verify_mode::typical_lossy && shuffled) continue;  // its tie-break depends on the ids
      std::vector<verify_params> vps(static_cast<std::size_t>(bs));
      for (auto& vp : vps) vp.mode = m;
      outputs want(bs, n, num_spec), got(bs, n, num_spec);
      std::vector<status_code> want_code(static_cast<std::size_t>(bs)), got_code(static_cast<std::size_t>(bs));
      for (int r = 0; r < bs; ++r)
        want_code[static_cast<std::size_t>(r)] =
            brute_force(b, r, p, q, uni, draws, vps[static_cast<std::size_t>(r)], num_spec, !shuffled, want);
      const sglang_verify_inputs<std::int64_t> in{{bs, n, b.cand.data(), b.ridx.data(), b.next.data(), b.sib.data()},
                                                  make_view<const float>(p.data(), bs * n, V),
                                                  make_view<const float>(q.data(), bs * n, V),
                                                  vps.data(),
                                                  uni.data(),
                                                  draws,
                                                  num_spec};
      const auto ws = aligned(storage, sglang_verify_tree_workspace_size(n, V));
      REQUIRE(sglang_verify_tree<std::int64_t, int>(in, got.view(bs, num_spec), got.per_depth, got_code, ws).ok());
      INFO("seed " << seed << " mode " << verify_mode_name(m) << " bs " << bs << " n " << n << " V " << V);
      CHECK(got_code == want_code);
      CHECK(got.accept_index == want.accept_index);
      CHECK(got.accept_num == want.accept_num);
      CHECK(got.predicts == want.predicts);
      CHECK(got.per_depth == want.per_depth);
    }
  }
}

TEST_CASE("sglang_verify_tree greedy equals SGLang's verify_tree_greedy loop on the rows' argmax ids") {
  std::vector<std::byte> storage;
  for (std::uint64_t seed = 100; seed < 140; ++seed) {
    std::mt19937_64 g(seed);
    const int bs = 1 + static_cast<int>(g() % 5), n = 1 + static_cast<int>(g() % 10), V = 6;
    const batch b = make_batch(bs, n, V, seed, true);
    // One-hot-ish rows: a unique argmax per row, often one of the drafts.
    std::vector<float> p(static_cast<std::size_t>(bs * n * V), 0.01f);
    std::vector<std::int64_t> target_predict(static_cast<std::size_t>(bs * n));
    for (int s = 0; s < bs * n; ++s) {
      const auto y = static_cast<std::int64_t>(g() % static_cast<std::uint64_t>(V));
      p[static_cast<std::size_t>(s * V + y)] = 0.9f;
      target_predict[static_cast<std::size_t>(b.ridx[static_cast<std::size_t>(s)])] = y;
    }
    const int num_spec = n;
    outputs want(bs, n, num_spec), got(bs, n, num_spec);
    sglang_ref::reference_greedy(b, target_predict, num_spec, want.predicts, want.accept_index, want.accept_num);
    std::vector<verify_params> vps(static_cast<std::size_t>(bs));
    for (auto& vp : vps) vp.mode = verify_mode::greedy;
    const sglang_verify_inputs<std::int64_t> in{{bs, n, b.cand.data(), b.ridx.data(), b.next.data(), b.sib.data()},
                                                make_view<const float>(p.data(), bs * n, V),
                                                {},
                                                vps.data(),
                                                nullptr,
                                                0,
                                                num_spec};
    const auto ws = aligned(storage, sglang_verify_tree_workspace_size(n, V));
    REQUIRE(sglang_verify_tree<std::int64_t, int>(in, got.view(bs, num_spec), {}, {}, ws).ok());
    INFO("seed " << seed);
    CHECK(got.accept_index == want.accept_index);
    CHECK(got.accept_num == want.accept_num);
    CHECK(got.predicts == want.predicts);
  }
}

TEST_CASE("sglang_verify_tree: malformed requests get their own code and write nothing") {
  // Eight requests of the same 5-slot tree: 0 -> {1, 2}, 1 -> {3}, 3 -> {4}.
  const int bs = 8, n = 5, V = 7, num_spec = 4;
  std::vector<std::int64_t> cand, ridx, next, sib;
  for (int r = 0; r < bs; ++r) {
    const std::int64_t c[5] = {-1, 3, 4, 5, 6}, nt[5] = {1, 3, -1, 4, -1}, ns[5] = {-1, 2, -1, -1, -1};
    for (int s = 0; s < n; ++s) {
      cand.push_back(c[s]);
      ridx.push_back(r * n + s);
      next.push_back(nt[s]);
      sib.push_back(ns[s]);
    }
  }
  next[1 * n + 3] = 9;  // request 1: link out of range
  sib[2 * n + 1] = 3;   // request 2: slot 3 linked twice
  cand[3 * n + 4] = V;  // request 3: token out of range
  std::vector<float> p(static_cast<std::size_t>(bs * n * V), 1.0f / V);
  p[static_cast<std::size_t>(4 * n * V + 2)] = std::numeric_limits<float>::quiet_NaN();  // request 4: NaN root row
  std::vector<verify_params> vps(static_cast<std::size_t>(bs));
  for (auto& vp : vps) vp.mode = verify_mode::greedy;
  vps[5].mode = verify_mode::traversal;    // request 5: not offered on linked lists
  vps[6].mode = verify_mode::sampled_iid;  // request 6: needs q, none given
  next[7 * n + 0] = 2;                     // request 7: root -> 2 only (slots 1, 3, 4 unreached)
  sib[7 * n + 1] = -1;
  const sglang_verify_inputs<std::int64_t> in{{bs, n, cand.data(), ridx.data(), next.data(), sib.data()},
                                              make_view<const float>(p.data(), bs * n, V),
                                              {},
                                              vps.data(),
                                              nullptr,
                                              0,
                                              num_spec};
  std::vector<std::byte> storage;
  const auto ws = aligned(storage, sglang_verify_tree_workspace_size(n, V));
  outputs got(bs, n, num_spec);
  std::vector<status_code> codes(static_cast<std::size_t>(bs));
  REQUIRE(sglang_verify_tree<std::int64_t, int>(in, got.view(bs, num_spec), got.per_depth, codes, ws).ok());
  const std::vector<status_code> want = {status_code::ok,
                                         status_code::parent_out_of_range,
                                         status_code::cycle,
                                         status_code::token_out_of_range,
                                         status_code::non_finite,
                                         status_code::unsupported,
                                         status_code::invalid_argument,
                                         status_code::ok};
  CHECK(codes == want);
  for (int r = 0; r < bs; ++r) {
    if (want[static_cast<std::size_t>(r)] == status_code::ok) continue;
    INFO("request " << r);
    CHECK(got.accept_num[static_cast<std::size_t>(r)] == -1);
    for (int k = 0; k < num_spec; ++k) CHECK(got.accept_index[static_cast<std::size_t>(r * num_spec + k)] == -1);
    for (int s = 0; s < n; ++s) CHECK(got.predicts[static_cast<std::size_t>(r * n + s)] == -5);
  }
  // Uniform rows: greedy picks token 0 at the root, which no child has.
  CHECK(got.accept_num[0] == 0);
  CHECK(got.accept_index[0] == 0);
  CHECK(got.predicts[0] == 0);
  // Without request_status the first failure is returned, with its index.
  outputs again(bs, n, num_spec);
  const status first = sglang_verify_tree<std::int64_t, int>(in, again.view(bs, num_spec), {}, {}, ws);
  CHECK(first.code() == status_code::parent_out_of_range);
  CHECK(first.index() == 1);
  CHECK(again.accept_num[0] == 0);   // request 0 was written
  CHECK(again.accept_num[2] == -1);  // later requests were not
  // A tree deeper than num_speculative_tokens - 1.
  sglang_verify_inputs<std::int64_t> shallow = in;
  shallow.num_speculative_tokens = 3;
  outputs deep(bs, n, 3);
  REQUIRE(sglang_verify_tree<std::int64_t, int>(shallow, deep.view(bs, 3), {}, codes, ws).ok());
  CHECK(codes[0] == status_code::buffer_too_small);
  CHECK(codes[7] == status_code::ok);  // root -> 2 is depth 1
  // Whole-call errors.
  sglang_verify_inputs<std::int64_t> short_p = in;
  short_p.p.extent[0] = bs * n - 1;
  CHECK(sglang_verify_tree<std::int64_t, int>(short_p, got.view(bs, num_spec), {}, codes, ws) ==
        status_code::size_mismatch);
  CHECK(sglang_verify_tree<std::int64_t, int>(in, got.view(bs, num_spec), {}, codes, ws.first(ws.size() - 1)) ==
        status_code::buffer_too_small);
  std::vector<status_code> few(3);
  CHECK(sglang_verify_tree<std::int64_t, int>(in, got.view(bs, num_spec), {}, few, ws) == status_code::size_mismatch);
}
