// A whole speculative round in ONE CUDA graph: tree masks, batched
// verification, the keep lists from the verification's outputs, the KV
// commit of those lists and the tree SSM scan of a ragged batch of trees,
// captured once on one stream (global capture mode) and replayed twice, the
// same device input buffers refilled in place in between with a second
// round (new trees of the same sizes or smaller, new rows, seeds, rounds and
// cache lengths). After each replay every output equals its host twin's:
// masks, positions, paths, tokens, results, keep lists and the KV cache bit
// for bit, the scan within test_ssm.cpp's float tolerance. So the five
// launches neither synchronize nor allocate, chain on the device with no
// host round trip, and read nothing but device memory beyond the sizes
// fixed at capture (R, max_nodes, the node capacity N, the keep lists'
// capacity total_keep).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <random>
#include <span>
#include <vector>

#include "gpu_util.hpp"
#include "specdec/cache/keep_indices.hpp"
#include "specdec/cache/kv_commit.hpp"
#include "specdec/kernels.hpp"
#include "specdec/ssm/tree_scan.hpp"
#include "specdec/tree/batch.hpp"
#include "specdec/verify/batch_verify.hpp"
#include "ssm/ssm_test_util.hpp"

using namespace specdec;
using specdec_test::device_buffer;

namespace {

constexpr std::int32_t R = 6;                        // requests (trees) per round
constexpr std::int32_t N = 69;                       // node capacity: round 1's nodes (sizes below)
constexpr std::int32_t max_nodes = 24;               // round 1's largest tree; also the path row length
constexpr std::int64_t V = 512;                      // vocabulary
constexpr std::int64_t kv_cap = 40 + 2 * max_nodes;  // KV capacity: cache_len <= 40 + round 1's path + a tree
constexpr std::int64_t kv_layers = 2, kv_heads = 2, head_dim = 64;
constexpr std::int64_t kv_one = R * kv_layers * kv_heads * kv_cap * head_dim;  // elements of K (and of V)
const ssm_test::dims ssm_dims{0, 4, 16, 2, 32};                                // heads, headdim, groups, dstate
// The modes that take any tree (block needs chains; typical_lossy's device
// entropy may differ by an ulp).
const verify_mode tree_modes[] = {verify_mode::sampled_iid,
                                  verify_mode::sampled_without_replacement,
                                  verify_mode::deterministic,
                                  verify_mode::greedy,
                                  verify_mode::naive_matching,
                                  verify_mode::traversal,
                                  verify_mode::traversal_without_replacement};

struct round_input {
  ssm_test::batch_case bc;            // the trees (offsets, local parents, N rows) and the SSM inputs
  ssm_test::problem<float> pr;        // bc.pr in fp32
  std::vector<float> h0;              // bc.h0 in fp32: [R, heads, headdim, dstate]
  std::vector<token_id> token;        // N draft tokens
  std::vector<float> P, Q;            // N x V target and draft rows
  std::vector<verify_params> params;  // request keys 1000 + r; mode, seed and round change per round
};

std::vector<float> random_row(std::mt19937& gen) {
  std::uniform_real_distribution<double> U(0.0, 1.0);
  std::vector<double> w(static_cast<std::size_t>(V));
  double s = 0;
  for (auto& x : w) {
    x = U(gen) < 0.3 ? 0.0 : U(gen) * U(gen) * U(gen);
    s += x;
  }
  std::vector<float> r(w.size());
  for (std::size_t i = 0; i < r.size(); ++i) r[i] = static_cast<float>(w[i] / s);
  return r;
}

round_input make_round(std::uint32_t seed, std::uint32_t round, const std::vector<std::int64_t>& sizes) {
  round_input in;
  std::int64_t used = 0;
  for (const auto n : sizes) used += n;
  in.bc = ssm_test::make_batch(ssm_dims, sizes, ssm_test::flags{}, seed, N - used);  // chains, binary, random
  in.pr = in.bc.pr.cast<float>();
  in.h0.assign(in.bc.h0.begin(), in.bc.h0.end());
  std::mt19937 gen(seed);
  for (std::int32_t i = 0; i < N; ++i) {
    const auto p = random_row(gen);
    const auto q = gen() % 3 == 0 ? p : random_row(gen);
    in.P.insert(in.P.end(), p.begin(), p.end());
    in.Q.insert(in.Q.end(), q.begin(), q.end());
  }
  in.token.assign(static_cast<std::size_t>(N), 0);
  for (std::int32_t r = 0; r < R; ++r) {
    const std::int32_t b = in.bc.offsets[static_cast<std::size_t>(r)];
    for (std::int32_t i = b; i < in.bc.offsets[static_cast<std::size_t>(r) + 1]; ++i) {
      const node_id par = in.bc.parent[static_cast<std::size_t>(i)];
      auto x = static_cast<token_id>(gen() % V);
      if (par >= 0 && gen() % 2 == 0) {  // the parent row's argmax: a draft that gets accepted
        const auto row = in.P.begin() + static_cast<std::ptrdiff_t>(b + par) * V;
        x = static_cast<token_id>(std::max_element(row, row + V) - row);
      }
      in.token[static_cast<std::size_t>(i)] = x;
    }
    verify_params vp;
    vp.mode = tree_modes[(static_cast<std::uint32_t>(r) + round) % std::size(tree_modes)];
    vp.request = 1000 + static_cast<std::uint32_t>(r);
    vp.seed = seed * 100ull + static_cast<std::uint64_t>(r);
    vp.round = round;
    in.params.push_back(vp);
  }
  return in;
}

// Arguments of the masks and the scan, with host or device pointers alike.
tree_masks_params<std::uint64_t> mask_args(const node_id* parents, const std::int32_t* offsets,
                                           const position_id* cache_len, std::uint64_t* masks, position_id* positions,
                                           std::int32_t* status) {
  tree_masks_params<std::uint64_t> b;
  b.parents = parents;
  b.offsets = offsets;
  b.cache_len = cache_len;
  b.masks = masks;
  b.positions = positions;
  b.request_status = status;
  b.num_requests = R;
  b.max_nodes = max_nodes;
  b.capacity_nodes = N;
  return b;
}

tree_scan_batch_params<float> scan_args(const std::int32_t* offsets, const node_id* parent,
                                        const tree_ssm_inputs<float>& in, const float* h0, float* y, float* states,
                                        std::int32_t* status) {
  const auto& d = ssm_dims;
  tree_scan_batch_params<float> p;
  p.offsets = offsets;
  p.parent = parent;
  p.in = in;
  p.h0 = make_view(h0, R, d.heads, d.headdim, d.dstate);
  p.y = make_view(y, N, d.heads, d.headdim);
  p.states = make_view(states, N, d.heads, d.headdim, d.dstate);  // the device scan then needs no workspace
  p.num_requests = R;
  p.request_status = status;
  return p;
}

// K and V, [R][layers][heads][kv_cap][head_dim] each.
std::vector<kv_tensor<std::uint16_t>> kv_tensors(std::uint16_t* base) {
  return {make_kv_tensor_lhsd(base, R, kv_layers, kv_heads, kv_cap, head_dim),
          make_kv_tensor_lhsd(base + kv_one, R, kv_layers, kv_heads, kv_cap, head_dim)};
}

// Every output of a round, host side; kept across rounds like the device
// buffers (what round 2 does not write holds round 1's values on both sides).
struct outputs {
  std::vector<std::uint64_t> masks =
      std::vector<std::uint64_t>(N * mask_words_per_row<std::uint64_t>(max_nodes), 0xC3C3C3C3C3C3C3C3ull);
  std::vector<position_id> positions = std::vector<position_id>(N, -9);
  std::vector<std::int32_t> request_status = std::vector<std::int32_t>(R, -1);
  std::vector<node_id> paths = std::vector<node_id>(R * max_nodes, -3);
  std::vector<token_id> tokens = std::vector<token_id>(R * max_nodes, -3);
  std::vector<verify_result> results = std::vector<verify_result>(R);
  std::vector<std::uint16_t> kv;
  std::vector<float> y = std::vector<float>(static_cast<std::size_t>(N * ssm_dims.heads * ssm_dims.headdim), -777.0f);
  std::vector<float> states = std::vector<float>(y.size() * static_cast<std::size_t>(ssm_dims.dstate), -777.0f);
  std::vector<std::int32_t> scan_status = std::vector<std::int32_t>(R, 99);
  // The keep lists (a buffer of N entries: each round keeps fewer).
  std::vector<position_id> keep = std::vector<position_id>(N, -5);
  std::vector<std::int32_t> keep_offsets = std::vector<std::int32_t>(R + 1, -5);
  std::vector<std::int32_t> keep_status = std::vector<std::int32_t>(R, -5);
};

// The arguments of the keep lists over a round's verification outputs
// (host or device pointers alike): identity slots, the paths' rows of
// max_nodes entries.
keep_from_results_batch keep_args(const std::int32_t* offsets, const node_id* parents, const node_id* paths,
                                  const verify_result* results, const position_id* cache_len, position_id* keep,
                                  std::int32_t* keep_offsets, std::int32_t* status) {
  keep_from_results_batch b;
  b.num_requests = R;
  b.tree_offsets = offsets;
  b.parent = parents;
  b.node_capacity = N;
  b.paths = paths;
  b.path_stride = max_nodes;
  b.results = results;
  b.cache_len = cache_len;
  b.keep = keep;
  b.keep_offsets = keep_offsets;
  b.request_status = status;
  return b;
}

// The round's host twins on h, in the graph's order.
void host_round(const round_input& in, const std::vector<position_id>& cache_len, outputs& h) {
  const auto& off = in.bc.offsets;
  REQUIRE(build_tree_masks_batched(mask_args(in.bc.parent.data(), off.data(), cache_len.data(), h.masks.data(),
                                             h.positions.data(), h.request_status.data()))
              .ok());
  const std::int32_t total = off.back();
  std::vector<std::byte> vws(verify_batch_workspace_size(V, off));
  const verify_batch_input vin{off, tree_view{in.token.data(), in.bc.parent.data(), nullptr, nullptr, total},
                               make_view(in.P.data(), total, V), make_view(in.Q.data(), total, V), in.params};
  const verify_batch_output vout{
      make_view(h.paths.data(), R, max_nodes), make_view(h.tokens.data(), R, max_nodes), h.results, {}};
  (void)verify_batch(vin, vws, vout);  // per-request codes are compared with the device's

  // The keep lists from the verification's outputs (a failed request keeps
  // nothing); the graph's total_keep is the buffer's capacity N, and
  // keep_offsets[R] varies by round.
  REQUIRE(
      keep_indices_from_results(keep_args(off.data(), in.bc.parent.data(), h.paths.data(), h.results.data(),
                                          cache_len.data(), h.keep.data(), h.keep_offsets.data(), h.keep_status.data()))
          .ok());
  const auto before = h.kv;
  REQUIRE(
      commit_kv<std::uint16_t>(kv_tensors(h.kv.data()), contiguous_positions(kv_cap), cache_len, h.keep_offsets, h.keep)
          .ok());
  CHECK(h.kv != before);  // the commit moved entries

  const tree_ssm_shape shape{N, ssm_dims.heads, ssm_dims.headdim, ssm_dims.groups, ssm_dims.dstate};
  std::vector<std::byte> sws(tree_scan_batch_workspace_size<float>(off, in.bc.parent, shape));
  REQUIRE(tree_scan_batch(scan_args(off.data(), in.bc.parent.data(), in.pr.inputs(), in.h0.data(), h.y.data(),
                                    h.states.data(), h.scan_status.data()),
                          sws)
              .ok());
  // Well-formed trees: the round exercises the outputs, not the error paths.
  CHECK(h.request_status == std::vector<std::int32_t>(R, 0));
  CHECK(h.scan_status == std::vector<std::int32_t>(R, 0));
  CHECK(std::count_if(h.results.begin(), h.results.end(), [](const verify_result& v) { return v.accepted > 0; }) > 0);
}

// The SSM inputs on the device, allocated once (the graph holds their
// addresses) and refilled in place.
struct device_ssm {
  device_buffer<float> x, dt, A, B, C, D, dt_bias, h0;
  explicit device_ssm(const round_input& in)
      : x(in.pr.x), dt(in.pr.dt), A(in.pr.A), B(in.pr.B), C(in.pr.C), D(in.pr.D), dt_bias(in.pr.dt_bias), h0(in.h0) {}
  void upload(const round_input& in) {
    x.upload(in.pr.x);
    dt.upload(in.pr.dt);
    A.upload(in.pr.A);
    B.upload(in.pr.B);
    C.upload(in.pr.C);
    D.upload(in.pr.D);
    dt_bias.upload(in.pr.dt_bias);
    h0.upload(in.h0);
  }
  tree_ssm_inputs<float> inputs(const round_input& in) const {
    auto v = in.pr.inputs();  // the shapes; the data below
    v.x.data = x.data();
    v.dt.data = dt.data();
    v.A.data = A.data();
    v.B.data = B.data();
    v.C.data = C.data();
    v.D.data = D.data();
    v.dt_bias.data = dt_bias.data();
    return v;
  }
};

}  // namespace

TEST_CASE("GPU: a whole round (masks, verify, KV commit, SSM scan) in one CUDA graph, replayed with new inputs") {
  INFO("round seeds 2024 and 2025, cache-length seed 7, KV seed 77");
  const round_input in1 = make_round(2024, 1, {12, 1, 17, 6, 24, 9});
  REQUIRE(in1.bc.offsets.back() == N);
  std::mt19937 gen(7);
  std::vector<position_id> cache_len(R, 0);
  for (std::int32_t r = 0; r < R; ++r) cache_len[static_cast<std::size_t>(r)] = gen() % 41;
  outputs h;
  std::mt19937_64 g64(77);
  h.kv.resize(2 * kv_one);
  for (auto& e : h.kv) e = static_cast<std::uint16_t>(g64());

  // Device buffers, allocated once (their addresses are in the graph);
  // the outputs start as the host's.
  device_buffer<std::int32_t> d_off(in1.bc.offsets), d_modes(R);
  device_buffer<node_id> d_parent(in1.bc.parent);
  device_buffer<token_id> d_token(in1.token);
  device_buffer<float> d_P(in1.P), d_Q(in1.Q);
  device_buffer<std::uint64_t> d_seeds(R);
  device_buffer<std::uint32_t> d_rounds(R);
  device_buffer<position_id> d_cache_len(R), d_keep(h.keep);
  device_buffer<std::int32_t> d_koff(h.keep_offsets), d_keep_status(h.keep_status);
  device_ssm d_ssm(in1);
  device_buffer<std::uint64_t> d_masks(h.masks);
  device_buffer<std::int32_t> d_kv_status(static_cast<std::size_t>(R));
  device_buffer<position_id> d_positions(h.positions);
  device_buffer<std::int32_t> d_mask_status(h.request_status), d_scan_status(h.scan_status);
  device_buffer<node_id> d_paths(h.paths);
  device_buffer<token_id> d_tokens(h.tokens);
  device_buffer<verify_result> d_results(h.results);
  device_buffer<std::uint16_t> d_kv(h.kv);
  device_buffer<float> d_y(h.y), d_states(h.states);
  std::vector<kv_tensor<void>> erased;
  for (const auto& t : kv_tensors(d_kv.data())) erased.push_back(erase_kv_tensor(t));
  device_buffer<kv_tensor<void>> d_tensors(erased);

  const auto upload = [&](const round_input& in, const std::vector<position_id>& clen) {
    d_off.upload(in.bc.offsets);
    d_parent.upload(in.bc.parent);
    d_token.upload(in.token);
    d_P.upload(in.P);
    d_Q.upload(in.Q);
    d_cache_len.upload(clen);
    std::vector<std::int32_t> modes;
    std::vector<std::uint64_t> seeds;
    std::vector<std::uint32_t> rounds;
    for (const auto& vp : in.params) {
      modes.push_back(static_cast<std::int32_t>(vp.mode));
      seeds.push_back(vp.seed);
      rounds.push_back(vp.round);
    }
    d_modes.upload(modes);
    d_seeds.upload(seeds);
    d_rounds.upload(rounds);
    d_ssm.upload(in);
  };

  // The four launches' arguments: device pointers and the fixed sizes only.
  const auto mb = mask_args(d_parent.data(), d_off.data(), d_cache_len.data(), d_masks.data(), d_positions.data(),
                            d_mask_status.data());
  // Verification settings: base (request keys base.request + r) with the
  // modes, seeds and rounds of the device arrays.
  kernels::verify_batch_params vb;
  vb.offsets = d_off.data();
  vb.token = d_token.data();
  vb.parent = d_parent.data();
  vb.p = d_P.data();
  vb.p_row_stride = V;
  vb.q = d_Q.data();
  vb.q_row_stride = V;
  vb.base = in1.params[0];
  vb.modes = d_modes.data();
  vb.seeds = d_seeds.data();
  vb.rounds = d_rounds.data();
  vb.num_requests = R;
  vb.vocab = static_cast<std::int32_t>(V);
  vb.max_nodes = max_nodes;
  vb.node_capacity = N;
  vb.out_stride = max_nodes;
  vb.paths = d_paths.data();
  vb.tokens = d_tokens.data();
  vb.results = d_results.data();
  device_buffer<unsigned char> d_vws(kernels::verify_batch_workspace_size(vb));
  kernels::kv_commit_params kc;
  kc.tensors = d_tensors.data();
  kc.num_tensors = static_cast<std::int32_t>(erased.size());
  kc.elem_bytes = static_cast<std::int32_t>(sizeof(std::uint16_t));
  kc.max_layers = kv_layers;
  kc.max_heads = kv_heads;
  kc.map = contiguous_positions(kv_cap);
  // The keep lists straight from the device's verification outputs.
  const auto kb = keep_args(d_off.data(), d_parent.data(), d_paths.data(), d_results.data(), d_cache_len.data(),
                            d_keep.data(), d_koff.data(), d_keep_status.data());
  kc.batch = kv_commit_batch{R, d_cache_len.data(), d_koff.data(), d_keep.data()};
  kc.total_keep = N;  // the keep buffer's capacity: keep_offsets[R] changes by round
  kc.request_status = d_kv_status.data();
  const auto sb = scan_args(d_off.data(), d_parent.data(), d_ssm.inputs(in1), d_ssm.h0.data(), d_y.data(),
                            d_states.data(), d_scan_status.data());
  REQUIRE(kernels::build_tree_masks_batched_can_implement(mb).ok());
  REQUIRE(kernels::verify_batch_can_implement(vb).ok());
  REQUIRE(kernels::keep_indices_from_results_can_implement(kb).ok());
  REQUIRE(kernels::kv_commit_can_implement(kc).ok());
  REQUIRE(kernels::tree_scan_batch_can_implement(sb).ok());
  REQUIRE(kernels::tree_scan_batch_workspace_size(sb) == 0);

  const auto check = [&](const round_input& in) {
    CHECK(d_mask_status.download() == h.request_status);
    CHECK(d_masks.download() == h.masks);  // whole buffers: rows written and untouched
    CHECK(d_positions.download() == h.positions);
    const auto res = d_results.download();
    const auto paths = d_paths.download();
    const auto tokens = d_tokens.download();
    for (std::size_t r = 0; r < static_cast<std::size_t>(R); ++r) {
      const auto& hr = h.results[r];
      INFO("request " << r << " mode " << verify_mode_name(in.params[r].mode));
      CHECK(res[r].code == hr.code);
      CHECK(res[r].accepted == hr.accepted);
      CHECK(res[r].last_node == hr.last_node);
      CHECK(res[r].next_token == hr.next_token);
      if (hr.code != status_code::ok) continue;
      for (std::size_t k = 0; k <= static_cast<std::size_t>(hr.accepted); ++k) {
        CHECK(paths[r * max_nodes + k] == h.paths[r * max_nodes + k]);
        CHECK(tokens[r * max_nodes + k] == h.tokens[r * max_nodes + k]);
      }
    }
    CHECK(d_keep_status.download() == h.keep_status);
    CHECK(d_koff.download() == h.keep_offsets);
    CHECK(d_keep.download() ==
          h.keep);  // whole buffer: entries past keep_offsets[R] hold earlier rounds' on both sides
    CHECK(d_kv_status.download() == std::vector<std::int32_t>(static_cast<std::size_t>(R), 0));
    CHECK(d_kv.download() == h.kv);  // byte for byte
    CHECK(d_scan_status.download() == h.scan_status);
    CHECK(ssm_test::max_scaled_error(d_y.download(), h.y, 1e-4, 1e-4) <= 1.0);
    CHECK(ssm_test::max_scaled_error(d_states.download(), h.states, 1e-4, 1e-4) <= 1.0);
  };

  specdec_test::captured_graph graph([&](cudaStream_t s) {
    return kernels::build_tree_masks_batched(mb, nullptr, 0, s).ok() &&
           kernels::verify_batch(vb, d_vws.data(), d_vws.size(), s).ok() &&
           kernels::keep_indices_from_results(kb, nullptr, 0, s).ok() && kernels::commit_kv(kc, nullptr, 0, s).ok() &&
           kernels::tree_scan_batch(sb, nullptr, 0, s).ok();
  });

  host_round(in1, cache_len, h);
  upload(in1, cache_len);
  graph.replay();
  {
    INFO("round 1");
    check(in1);
  }

  // Round 2: the committed lengths grow by the kept entries; the trees are
  // the same size or smaller, the rest of every input is new.
  for (std::int32_t r = 0; r < R; ++r)
    cache_len[static_cast<std::size_t>(r)] += h.keep_offsets[static_cast<std::size_t>(r) + 1] - h.keep_offsets[r];
  const round_input in2 = make_round(2025, 2, {12, 1, 9, 6, 20, 3});
  host_round(in2, cache_len, h);
  upload(in2, cache_len);
  graph.replay();
  INFO("round 2");
  check(in2);
}
