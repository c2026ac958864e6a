// GPU batched verification against the host (specdec::verify_batch): the
// kernel runs the host's walk and request checks with the CUDA row policy,
// and both sum rows in the fixed order of sample/order.hpp, so accepted
// paths, tokens, codes and per-depth counts must be identical for the same
// Philox keys or caller uniforms (typical_lossy excepted only where a
// threshold lies within an ulp of an entry: not the case for these inputs).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "gpu_util.hpp"
#include "specdec/kernels.hpp"
#include "specdec/verify/batch_verify.hpp"
#include "verify/malformed_cases.hpp"
#include "verify/row_types_util.hpp"

using namespace specdec;
using specdec_test::device_buffer;
using specdec_test::run_in_graph;

namespace {

struct batch {
  std::int64_t V = 0;
  std::vector<std::int32_t> offsets{0};
  std::vector<token_id> token;
  std::vector<node_id> parent;
  std::vector<float> P, Q;
  std::vector<verify_params> params;
  std::int32_t max_nodes = 0;
};

std::vector<float> random_row(std::mt19937& gen, std::int64_t V, double zero_frac) {
  std::uniform_real_distribution<double> U(0.0, 1.0);
  std::vector<double> w(static_cast<std::size_t>(V));
  double s = 0;
  for (auto& x : w) {
    x = U(gen) < zero_frac ? 0.0 : std::pow(U(gen), 3.0);
    s += x;
  }
  if (s == 0) {
    w[0] = 1;
    s = 1;
  }
  std::vector<float> r(static_cast<std::size_t>(V));
  for (std::size_t i = 0; i < r.size(); ++i) r[i] = static_cast<float>(w[i] / s);
  return r;
}

// R requests with random trees; q rows sometimes close to p so that paths get accepted.
batch make_batch(std::mt19937& gen, int R, std::int64_t V, int max_n) {
  batch b;
  b.V = V;
  for (int r = 0; r < R; ++r) {
    const int n = 1 + static_cast<int>(gen() % static_cast<unsigned>(max_n));
    b.max_nodes = std::max(b.max_nodes, n);
    std::vector<std::vector<float>> prow;
    for (int i = 0; i < n; ++i) prow.push_back(random_row(gen, V, 0.3));
    for (int i = 0; i < n; ++i) {
      const node_id par = i == 0 ? -1 : static_cast<node_id>(gen() % static_cast<unsigned>(i));
      token_id x = static_cast<token_id>(gen() % V);
      if (i > 0 && gen() % 2) {  // a likely token under the parent's p
        const auto& pr = prow[static_cast<std::size_t>(par)];
        x = static_cast<token_id>(std::max_element(pr.begin(), pr.end()) - pr.begin());
        if (gen() % 2) x = static_cast<token_id>((x + 1) % V);
      }
      b.token.push_back(x);
      b.parent.push_back(par);
      b.P.insert(b.P.end(), prow[static_cast<std::size_t>(i)].begin(), prow[static_cast<std::size_t>(i)].end());
      auto q = gen() % 3 == 0 ? prow[static_cast<std::size_t>(i)] : random_row(gen, V, 0.3);
      b.Q.insert(b.Q.end(), q.begin(), q.end());
    }
    b.offsets.push_back(b.offsets.back() + n);
    verify_params vp;
    vp.mode = static_cast<verify_mode>(r % verify_mode_count);  // every mode, block and traversal included
    vp.seed = 0xabc0 + static_cast<std::uint64_t>(r);
    vp.request = static_cast<std::uint32_t>(1000 + r);
    vp.round = 7;
    b.params.push_back(vp);
  }
  return b;
}

struct launch_options {
  int L = 32;
  std::int64_t col_stride = 1;                    // rows stored with this element stride
  const std::vector<double>* uniforms = nullptr;  // caller uniforms, else Philox
  std::int32_t draws_per_node = 0;
  int depth_counters = 8;
  bool graph = false;  // launch inside a captured CUDA graph
  // Element types of p and q: fp32, or the rows rounded to bf16 / fp16
  // (then every request's normalization tolerance is widened to 0.05).
  row_dtype p_dtype = row_dtype::f32, q_dtype = row_dtype::f32;
  // Per-request settings: 0 the params array; 1 base plus device arrays of
  // modes, seeds and rounds (request keys base.request + r); 2 all four arrays.
  int split_params = 0;
  // Logits rows: b.P / b.Q hold logits, read through their sampling
  // transform under these per-request settings (null: probabilities).
  const std::vector<sampling_params>* p_sampling = nullptr;
  const std::vector<sampling_params>* q_sampling = nullptr;
};

// Rows as the launch stores them: fp32, or 16-bit words.
struct stored_rows {
  row_dtype t;
  std::vector<float> f32;
  std::vector<std::uint16_t> half;
  stored_rows(const std::vector<float>& x, row_dtype type) : t(type) {
    if (t == row_dtype::f32)
      f32 = x;
    else
      half = specdec_test::narrow(x, t);
  }
  const void* host() const { return t == row_dtype::f32 ? static_cast<const void*>(f32.data()) : half.data(); }
  rows_view view(const std::int64_t (&ext)[2], const std::int64_t (&str)[2]) const {
    rows_view v;
    v.data = host();
    v.extent[0] = ext[0];
    v.extent[1] = ext[1];
    v.stride[0] = str[0];
    v.stride[1] = str[1];
    v.dtype = t;
    return v;
  }
};

// Rows re-laid with an element stride (the other entries hold NaN, which must never be read).
std::vector<float> spread(const std::vector<float>& x, std::int64_t s) {
  std::vector<float> y(x.size() * static_cast<std::size_t>(s), std::numeric_limits<float>::quiet_NaN());
  for (std::size_t i = 0; i < x.size(); ++i) y[i * static_cast<std::size_t>(s)] = x[i];
  return y;
}

// The launch fields both tests set alike (outputs of row length L), then
// the launch on a workspace of the size asked for, and the wait.
// `graph`: captured into a CUDA graph and replayed once instead.
void launch_and_wait(kernels::verify_batch_params& kp, std::int32_t L, node_id* paths, token_id* tokens,
                     verify_result* results, bool graph = false) {
  kp.out_stride = L;
  kp.paths = paths;
  kp.tokens = tokens;
  kp.results = results;
  const std::size_t wbytes = kernels::verify_batch_workspace_size(kp);
  device_buffer<unsigned char> d_ws(wbytes);
  if (graph) {
    run_in_graph([&](cudaStream_t s) { return kernels::verify_batch(kp, d_ws.data(), wbytes, s).ok(); });
    return;
  }
  REQUIRE(kernels::verify_batch(kp, d_ws.data(), wbytes, nullptr).ok());
  REQUIRE(kernels::synchronize(nullptr).ok());
}

// Verifies b on the host and on the device, checks they agree, and returns
// the host's results.
std::vector<verify_result> compare(const batch& b, const launch_options& opt = {}) {
  const int R = static_cast<int>(b.params.size());
  const int L = opt.L;
  const std::int32_t total = b.offsets.back();
  const std::int64_t cs = opt.col_stride;
  const stored_rows P(spread(b.P, cs), opt.p_dtype), Q(spread(b.Q, cs), opt.q_dtype);
  const std::int64_t ext[2] = {total, b.V}, str[2] = {b.V * cs, cs};
  std::vector<verify_params> params = b.params;
  if (opt.p_dtype != row_dtype::f32 || opt.q_dtype != row_dtype::f32)
    for (auto& vp : params) vp.normalization_tolerance = 0.05f;
  // Host.
  std::vector<node_id> hpaths(static_cast<std::size_t>(R * L), -3);
  std::vector<token_id> htoks(static_cast<std::size_t>(R * L), -3);
  std::vector<verify_result> hres(static_cast<std::size_t>(R));
  std::vector<std::int64_t> hdepth(static_cast<std::size_t>(opt.depth_counters), 0);
  const bool logits = opt.p_sampling != nullptr || opt.q_sampling != nullptr;
  std::vector<std::byte> ws(verify_batch_workspace_size(b.V, b.offsets, logits));
  verify_batch_input in{b.offsets, tree_view{b.token.data(), b.parent.data(), nullptr, nullptr, total},
                        P.view(ext, str), Q.view(ext, str), params};
  if (opt.p_sampling != nullptr) in.p_sampling = *opt.p_sampling;
  if (opt.q_sampling != nullptr) in.q_sampling = *opt.q_sampling;
  if (opt.uniforms != nullptr) {
    in.uniforms = *opt.uniforms;
    in.draws_per_node = opt.draws_per_node;
  }
  const verify_batch_output out{make_view(hpaths.data(), R, L), make_view(htoks.data(), R, L), hres, hdepth};
  (void)verify_batch(in, ws, out);
  // Device.
  device_buffer<std::int32_t> d_off(b.offsets);
  device_buffer<token_id> d_tok(b.token);
  device_buffer<node_id> d_par(b.parent);
  device_buffer<float> d_p(P.f32), d_q(Q.f32);
  device_buffer<std::uint16_t> d_ph(P.half), d_qh(Q.half);
  device_buffer<verify_params> d_params(params);
  device_buffer<node_id> d_paths(std::vector<node_id>(static_cast<std::size_t>(R * L), -3));
  device_buffer<token_id> d_toks(std::vector<token_id>(static_cast<std::size_t>(R * L), -3));
  device_buffer<verify_result> d_res(static_cast<std::size_t>(R));
  device_buffer<unsigned long long> d_depth(
      std::vector<unsigned long long>(static_cast<std::size_t>(opt.depth_counters), 0));
  device_buffer<double> d_uni(opt.uniforms ? *opt.uniforms : std::vector<double>{});
  kernels::verify_batch_params kp;
  kp.offsets = d_off.data();
  kp.token = d_tok.data();
  kp.parent = d_par.data();
  kp.p = P.t == row_dtype::f32 ? static_cast<const void*>(d_p.data()) : d_ph.data();
  kp.p_dtype = P.t;
  kp.p_row_stride = b.V * cs;
  kp.p_col_stride = cs;
  kp.q = Q.t == row_dtype::f32 ? static_cast<const void*>(d_q.data()) : d_qh.data();
  kp.q_dtype = Q.t;
  kp.q_row_stride = b.V * cs;
  kp.q_col_stride = cs;
  kp.params = d_params.data();
  std::vector<std::int32_t> modes;
  std::vector<std::uint64_t> seeds;
  std::vector<std::uint32_t> requests, rounds;
  for (const auto& vp : params) {
    modes.push_back(static_cast<std::int32_t>(vp.mode));
    seeds.push_back(vp.seed);
    requests.push_back(vp.request);
    rounds.push_back(vp.round);
  }
  device_buffer<std::int32_t> d_modes(modes);
  device_buffer<std::uint64_t> d_seeds(seeds);
  device_buffer<std::uint32_t> d_requests(requests), d_rounds(rounds);
  if (opt.split_params > 0) {
    kp.params = nullptr;
    kp.base = params[0];
    kp.modes = d_modes.data();
    kp.seeds = d_seeds.data();
    kp.rounds = d_rounds.data();
    if (opt.split_params == 2) kp.requests = d_requests.data();
    for (std::size_t r = 0; r < params.size() && opt.split_params == 1; ++r)
      REQUIRE(params[r].request == params[0].request + r);  // the keys base.request + r stand for
  }
  if (opt.uniforms != nullptr) {
    kp.uniforms = d_uni.data();
    kp.draws_per_node = opt.draws_per_node;
  }
  device_buffer<sampling_params> d_ps(opt.p_sampling ? *opt.p_sampling : std::vector<sampling_params>{});
  device_buffer<sampling_params> d_qs(opt.q_sampling ? *opt.q_sampling : std::vector<sampling_params>{});
  if (opt.p_sampling != nullptr) kp.p_sampling = d_ps.data();
  if (opt.q_sampling != nullptr) kp.q_sampling = d_qs.data();
  kp.num_requests = R;
  kp.vocab = static_cast<std::int32_t>(b.V);
  kp.max_nodes = b.max_nodes;
  kp.node_capacity = b.offsets.back();
  kp.accepted_per_depth = d_depth.data();
  kp.depth_counters = opt.depth_counters;
  launch_and_wait(kp, L, d_paths.data(), d_toks.data(), d_res.data(), opt.graph);
  const auto dres = d_res.download();
  const auto dpaths = d_paths.download();
  const auto dtoks = d_toks.download();
  const auto ddepth = d_depth.download();
  for (int d = 0; d < opt.depth_counters; ++d)
    CHECK(static_cast<std::int64_t>(ddepth[static_cast<std::size_t>(d)]) == hdepth[static_cast<std::size_t>(d)]);
  for (int r = 0; r < R; ++r) {
    const auto& h = hres[static_cast<std::size_t>(r)];
    const auto& d = dres[static_cast<std::size_t>(r)];
    INFO("V " << b.V << " request " << r << " mode " << verify_mode_name(b.params[static_cast<std::size_t>(r)].mode)
              << " p/q types " << static_cast<int>(P.t) << "/" << static_cast<int>(Q.t));
    CHECK(d.code == h.code);
    CHECK(d.accepted == h.accepted);
    CHECK(d.last_node == h.last_node);
    CHECK(d.next_token == h.next_token);
    if (h.code != status_code::ok) continue;
    for (int k = 0; k <= h.accepted; ++k) {
      const auto i = static_cast<std::size_t>(r * L + k);
      CHECK(dpaths[i] == hpaths[i]);
      CHECK(dtoks[i] == htoks[i]);
    }
  }
  return hres;
}

}  // namespace

TEST_CASE("GPU verify_batch matches the host path token for token") {
  std::mt19937 gen(4242);
  INFO("seed 4242");
  for (std::int64_t V : {8, 100, 1001, 8193, 32000, 128256}) {
    const int R = V > 10000 ? 12 : 48;
    const auto b = make_batch(gen, R, V, V > 10000 ? 16 : 24);
    compare(b);
  }
}

TEST_CASE("GPU verify_batch with strided columns and caller uniforms matches the host") {
  std::mt19937 gen(777);
  INFO("seed 777");
  for (std::int64_t V : {100, 3000}) {
    const auto b = make_batch(gen, 24, V, 12);
    launch_options opt;
    opt.col_stride = 3;
    compare(b, opt);
    // Uniforms from std::mt19937_64, including exact 0 and the largest double below 1.
    std::mt19937_64 mt(5);
    std::vector<double> u(static_cast<std::size_t>(b.offsets.back()) * 13);
    for (auto& x : u) x = static_cast<double>(mt() >> 11) * 0x1p-53;
    for (std::size_t i = 0; i < u.size(); i += 7) u[i] = 0.0;
    for (std::size_t i = 3; i < u.size(); i += 11) u[i] = std::nextafter(1.0, 0.0);
    launch_options uo;
    uo.uniforms = &u;
    uo.draws_per_node = 13;
    compare(b, uo);
  }
}

TEST_CASE("GPU verify_batch: bf16 and fp16 rows (strided, mixed types) match the host") {
  std::mt19937 gen(1616);
  INFO("seed 1616");
  const row_dtype pairs[][2] = {{row_dtype::bf16, row_dtype::bf16},
                                {row_dtype::f16, row_dtype::f16},
                                {row_dtype::bf16, row_dtype::f32},
                                {row_dtype::f32, row_dtype::f16}};
  // V = 32003: contiguous rows whose starts take every 16-byte alignment
  // (the vector loads' unaligned ends).
  for (std::int64_t V : {8, 1001, 32000, 32003, 128256})
    for (const auto& pq : pairs) {
      const auto b = make_batch(gen, V > 10000 ? 9 : 27, V, V > 10000 ? 12 : 20);
      launch_options opt;
      opt.p_dtype = pq[0];
      opt.q_dtype = pq[1];
      opt.col_stride = V == 1001 ? 3 : 1;  // the scalar paths; the others read rows contiguously
      const auto res = compare(b, opt);
      int ok = 0;
      for (const auto& r : res) ok += r.code == status_code::ok ? 1 : 0;
      CHECK(ok * 2 > static_cast<int>(res.size()));  // most requests verified, not all rejected on a check
    }
}

TEST_CASE("GPU verify_batch: settings from base and per-request device arrays match the host") {
  std::mt19937 gen(2468);
  INFO("seed 2468");
  for (int split : {1, 2}) {
    const auto b = make_batch(gen, 36, 1001, 12);  // request keys 1000 + r, every mode
    launch_options opt;
    opt.split_params = split;
    compare(b, opt);
    opt.graph = true;  // nothing uploaded: the launch captures as it is
    compare(b, opt);
  }
}

TEST_CASE("GPU verify_batch: single requests and small batches (the tile pre-pass) match the host, every mode") {
  std::mt19937 gen(3131);
  INFO("seed 3131");
  for (std::int64_t V : {1000, 32000, 128256})
    for (int R : {1, 3, kernels::verify_tiles_max_requests, kernels::verify_tiles_max_requests + 1}) {
      REQUIRE(kernels::verify_tiles_prepass(R, static_cast<std::int32_t>(V), 16) ==
              (R <= kernels::verify_tiles_max_requests));
      int ok = 0, total = 0;
      for (int rep = 0; rep < (R == 1 ? 9 : 1); ++rep) {  // R = 1: one launch per mode
        auto b = make_batch(gen, R, V, 16);
        for (int r = 0; r < R; ++r)
          b.params[static_cast<std::size_t>(r)].mode = static_cast<verify_mode>((r + rep) % verify_mode_count);
        for (const auto& res : compare(b)) {
          ok += res.code == status_code::ok ? 1 : 0;
          ++total;
        }
      }
      CHECK(ok * 2 > total);  // most requests verified, not refused on both sides
    }
  // The pre-pass with strided columns, 16-bit rows, settings from device
  // arrays and caller uniforms.
  const auto b = make_batch(gen, 5, 3000, 16);
  launch_options opt;
  opt.col_stride = 3;
  compare(b, opt);
  opt.col_stride = 1;
  opt.p_dtype = row_dtype::bf16;
  opt.q_dtype = row_dtype::f16;
  opt.split_params = 2;
  compare(b, opt);
  std::mt19937_64 mt(8);
  std::vector<double> u(static_cast<std::size_t>(b.offsets.back()) * 13);
  for (auto& x : u) x = static_cast<double>(mt() >> 11) * 0x1p-53;
  launch_options uo;
  uo.uniforms = &u;
  uo.draws_per_node = 13;
  compare(b, uo);
}

TEST_CASE("GPU verify_batch: trees larger than the shared-memory stage match the host") {
  // The kernel checks and walks trees of up to 512 nodes (verify_staged_nodes)
  // from shared memory and larger ones from global memory: a batch of both.
  std::mt19937 gen(9090);
  INFO("seed 9090");
  const auto b = make_batch(gen, 6, 100, 1200);
  bool small = false;
  for (std::size_t r = 0; r + 1 < b.offsets.size(); ++r) small = small || b.offsets[r + 1] - b.offsets[r] <= 512;
  REQUIRE(b.max_nodes > 512);
  REQUIRE(small);
  compare(b);
}

TEST_CASE("GPU verify_batch: greedy down deep chains (ties, NaN rows) matches the host") {
  // Every draft is its parent row's argmax, so the walk goes the whole
  // chain; ties have two maxima (the lower id wins); one request has a NaN
  // in a row of its chain, which the walk reaches.
  std::mt19937 gen(5151);
  INFO("seed 5151");
  for (std::int64_t V : {1001, 32000}) {
    batch b;
    b.V = V;
    const std::vector<int> lengths{1, 2, 33, 64, 65, 40};
    for (std::size_t r = 0; r < lengths.size(); ++r) {
      const int n = lengths[r];
      b.max_nodes = std::max(b.max_nodes, n);
      token_id want = 0;
      for (int i = 0; i < n; ++i) {
        auto row = random_row(gen, V, 0.3);
        const auto top = std::max_element(row.begin(), row.end()) - row.begin();
        if (i % 3 == 1) row[static_cast<std::size_t>((top + V / 2) % V)] = row[static_cast<std::size_t>(top)];
        if (r == 5 && i == 20) row[static_cast<std::size_t>(V - 1)] = std::numeric_limits<float>::quiet_NaN();
        b.token.push_back(i == 0 ? 0 : want);
        b.parent.push_back(i - 1);
        want = static_cast<token_id>(std::max_element(row.begin(), row.end()) - row.begin());
        for (std::int64_t j = 0; j < V; ++j)  // lowest id among the maxima, NaN ignored
          if (row[static_cast<std::size_t>(j)] == row[static_cast<std::size_t>(want)]) {
            want = static_cast<token_id>(j);
            break;
          }
        b.P.insert(b.P.end(), row.begin(), row.end());
        b.Q.insert(b.Q.end(), row.begin(), row.end());
      }
      b.offsets.push_back(b.offsets.back() + n);
      verify_params vp;
      vp.mode = verify_mode::greedy;
      b.params.push_back(vp);
    }
    launch_options opt;
    opt.L = 80;
    const auto h = compare(b, opt);
    // The chains were built right: every draft accepted, the NaN row reached.
    for (std::size_t r = 0; r < lengths.size(); ++r) {
      INFO("V " << V << " request " << r);
      if (r == 5) {
        CHECK(h[r].code == status_code::non_finite);
      } else {
        CHECK(h[r].code == status_code::ok);
        CHECK(h[r].accepted == lengths[r] - 1);
      }
    }
  }
}

TEST_CASE("GPU verify_batch inside a captured CUDA graph matches the host") {
  // Both kernels (the greedy pre-pass and the walk) on the caller's stream,
  // no synchronization or allocation: what an engine's graph replay needs.
  std::mt19937 gen(3131);
  INFO("seed 3131");
  for (std::int64_t V : {100, 32000}) {
    launch_options opt;
    opt.graph = true;
    compare(make_batch(gen, 18, V, 16), opt);
  }
}

TEST_CASE("GPU verify_batch reports every malformed-input class with the host's code") {
  const auto mb = vtest::make_malformed_batch();
  batch b;
  b.V = mb.V;
  b.offsets = mb.offsets;
  b.token = mb.token;
  b.parent = mb.parent;
  b.P = mb.P;
  b.Q = mb.Q;
  b.params = mb.params;
  b.max_nodes = mb.max_nodes;
  launch_options opt;
  opt.L = mb.L;
  compare(b, opt);  // device codes == host codes, request by request
  // Caller uniforms outside [0, 1) are rejected by both.
  std::vector<double> u(static_cast<std::size_t>(b.offsets.back()) * 4, 0.5);
  u[1] = 1.0;
  launch_options uo = opt;
  uo.uniforms = &u;
  uo.draws_per_node = 4;
  compare(b, uo);
}

TEST_CASE("GPU verify_batch bounds every request's span by node_capacity before reading it") {
  // The nodes of four random requests (C in all), read through offsets of
  // each malformed class: past the capacity, negative, reversed, empty, and
  // a last span that may hold more than max_nodes.
  std::mt19937 gen(99);
  const auto good = make_batch(gen, 4, 32, 3);
  const std::int32_t C = good.offsets.back();
  const std::vector<std::vector<std::int32_t>> bad{
      {0, 1, 2, 3, C + 1}, {-2, 1, 2, 3, C}, {0, 2, 1, 3, C}, {0, 1, 1, 3, C}};
  for (const auto& off : bad) {
    device_buffer<std::int32_t> d_off(off);
    device_buffer<token_id> d_tok(good.token);
    device_buffer<node_id> d_par(good.parent);
    device_buffer<float> d_p(good.P);
    device_buffer<verify_params> d_params(good.params);
    const std::int32_t L = 8;
    device_buffer<node_id> d_paths(std::vector<node_id>(4 * L, -9));
    device_buffer<token_id> d_toks(std::vector<token_id>(4 * L, -9));
    device_buffer<verify_result> d_res(std::vector<verify_result>(4, verify_result{-5, -5, -5, status_code::ok}));
    kernels::verify_batch_params kp;
    kp.offsets = d_off.data();
    kp.token = d_tok.data();
    kp.parent = d_par.data();
    kp.p = d_p.data();
    kp.p_row_stride = good.V;
    kp.params = d_params.data();
    kp.num_requests = 4;
    kp.vocab = static_cast<std::int32_t>(good.V);
    kp.max_nodes = 4;
    kp.node_capacity = C;
    launch_and_wait(kp, L, d_paths.data(), d_toks.data(), d_res.data());
    const auto res = d_res.download();
    const auto paths = d_paths.download();
    kernels::verify_batch_params hp = kp;  // the same check on the host
    hp.offsets = off.data();
    for (int r = 0; r < 4; ++r) {
      std::int32_t b = 0, n = 0;
      const status_code want = kernels::verify_request_span(hp, r, b, n);
      INFO("request " << r << " span [" << off[static_cast<std::size_t>(r)] << ", "
                      << off[static_cast<std::size_t>(r) + 1] << ")");
      if (want != status_code::ok) {
        CHECK(res[static_cast<std::size_t>(r)].code == want);
        for (int k = 0; k < L; ++k) CHECK(paths[static_cast<std::size_t>(r * L + k)] == -9);  // untouched
      } else {
        CHECK(res[static_cast<std::size_t>(r)].code != status_code::out_of_range);
      }
    }
  }
}

TEST_CASE("GPU verify_batch: block and traversal requests among others match the host") {
  std::mt19937 gen(7);
  auto b = make_batch(gen, 12, 64, 8);
  b.params[1].mode = verify_mode::traversal;
  b.params[4].mode = verify_mode::traversal_without_replacement;
  b.params[7].mode = verify_mode::block;
  launch_options opt;
  opt.L = 16;
  compare(b, opt);
}

TEST_CASE("GPU verify_batch: block and traversal down chains match the host") {
  // Block verification takes chains only (random trees get invalid_argument
  // on both sides): the random batches made chains, every request in a
  // leaves-to-root mode or token-wise for comparison.
  std::mt19937 gen(6262);
  INFO("seed 6262");
  for (std::int64_t V : {64, 1001, 32000}) {
    auto b = make_batch(gen, 16, V, 12);
    // Each draft is its parent row's most likely token, so paths get long.
    for (std::size_t r = 0; r + 1 < b.offsets.size(); ++r)
      for (std::int32_t i = b.offsets[r]; i < b.offsets[r + 1]; ++i) {
        b.parent[static_cast<std::size_t>(i)] = i == b.offsets[r] ? -1 : i - b.offsets[r] - 1;
        if (i == b.offsets[r]) continue;
        const auto row = b.P.begin() + static_cast<std::ptrdiff_t>(i - 1) * V;
        b.token[static_cast<std::size_t>(i)] = static_cast<token_id>(std::max_element(row, row + V) - row);
      }
    const verify_mode modes[] = {verify_mode::block, verify_mode::traversal, verify_mode::traversal_without_replacement,
                                 verify_mode::sampled_iid};
    for (std::size_t r = 0; r < b.params.size(); ++r) b.params[r].mode = modes[r % 4];
    compare(b);
  }
}

TEST_CASE("GPU verify_batch: logits rows through the sampling transform match the host twin, every mode") {
  std::mt19937 gen(20261128);
  struct shape {
    int R;
    std::int64_t V;
    int max_n;
  };
  // Rows of num_requests x max_nodes above 16 take a block per row; the
  // others the split pre-pass (kernels::verify_transform_chunk_tiles).
  for (const shape sh :
       {shape{24, 1000, 8}, shape{12, 32000, 6}, shape{3, 128256, 5}, shape{6, 20000, 2}, shape{1, 152064, 4}}) {
    INFO(
        "split chunk tiles " << kernels::verify_transform_chunk_tiles(sh.R, static_cast<std::int32_t>(sh.V), sh.max_n));
    batch b = make_batch(gen, sh.R, sh.V, sh.max_n);
    // Probabilities to logits on a coarse grid (ties), zeros to -inf.
    for (auto* rows : {&b.P, &b.Q})
      for (float& x : *rows)
        x = x > 0.0f ? std::round(std::log(x) * 8.0f) / 4.0f : -std::numeric_limits<float>::infinity();
    std::vector<sampling_params> ps, qs;
    for (int r = 0; r < sh.R; ++r) {
      const float T = r % 7 == 6 ? 0.0f : 0.5f + static_cast<float>(gen() % 100) / 80.0f;
      ps.push_back(sampling_params{T, r % 3 == 0 ? 0 : 1 + static_cast<std::int32_t>(gen() % 50),
                                   r % 2 == 0 ? 1.0f : 0.8f, r % 4 == 0 ? 0.01f : 0.0f});
      qs.push_back(sampling_params{1.0f, r % 5 == 0 ? 10 : 0, 1.0f, 0.0f});
    }
    if (sh.R > 4) {  // a request with bad settings, one with a NaN logit in its root row
      ps[1].top_p = 0.0f;
      b.P[static_cast<std::size_t>(b.offsets[2] * sh.V + 5)] = std::numeric_limits<float>::quiet_NaN();
    }
    for (const row_dtype t : {row_dtype::f32, row_dtype::bf16}) {
      launch_options opt;
      opt.p_dtype = opt.q_dtype = t;
      opt.p_sampling = &ps;
      opt.q_sampling = &qs;
      INFO("R " << sh.R << " V " << sh.V << " type " << static_cast<int>(t));
      const auto res = compare(b, opt);
      int ok = 0;
      for (const auto& x : res) ok += x.code == status_code::ok ? 1 : 0;
      CHECK(ok > sh.R / 2);
    }
  }
}

TEST_CASE("GPU verify_batch can_implement rejects bad launches") {
  kernels::verify_batch_params kp;
  kp.num_requests = 1;
  CHECK(kernels::verify_batch_can_implement(kp) == status_code::invalid_argument);
  CHECK(kernels::verify_batch(kp, nullptr, 0, nullptr) == status_code::invalid_argument);
  kp.num_requests = 0;
  CHECK(kernels::verify_batch(kp, nullptr, 0, nullptr).ok());
  CHECK(kernels::verify_batch_workspace_size(kp) == 0);
  kp.num_requests = 2;
  kp.vocab = 10;
  kp.max_nodes = 3;
  // Two slices, then the greedy pre-pass's table (one partial per row: V = 10 is one chunk).
  CHECK(kernels::verify_argmax_splits(2, 10, 3) == 1);
  CHECK(kernels::verify_argmax_table_bytes(2, 10, 3) == workspace_alignment);
  CHECK(kernels::verify_batch_workspace_size(kp) == 2 * kernels::verify_request_workspace_bytes(10, 3) +
                                                        kernels::verify_argmax_table_bytes(2, 10, 3) +
                                                        kernels::verify_tiles_table_bytes(2, 10, 3));
  // Splits: about verify_argmax_target_blocks blocks, chunks of >= verify_argmax_min_chunk.
  CHECK(kernels::verify_argmax_splits(1, 128256, 1) == 32);
  CHECK(kernels::verify_argmax_splits(1, 128256, 64) == 16);
  CHECK(kernels::verify_argmax_splits(64, 128256, 64) == 1);
  CHECK(kernels::verify_request_workspace_bytes(10, 3) % workspace_alignment == 0);
}
