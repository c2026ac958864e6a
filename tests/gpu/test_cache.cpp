// GPU KV commit vs the host commit_kv with one status per request: byte
// equality on random batches over contiguous and paged layouts, element
// sizes and alignments; bad requests get the host's codes and only they
// are left untouched (a bad batch or tensor: every request).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "cache/test_util.hpp"
#include "gpu_util.hpp"
#include "specdec/cache/keep_indices.hpp"
#include "specdec/cache/kv_commit.hpp"
#include "specdec/kernels.hpp"

using specdec::kv_tensor;
using specdec_test::device_buffer;
using specdec_test::run_in_graph;

namespace {

struct gpu_case {
  int layout = 0;  // 0 [B][L][H][S][D], 1 [B][L][S][H][D], 2 paged NHD, 3 paged HND, 4 [B][L][H][D][S]
  std::int64_t R = 1, L = 1, H = 1, D = 1, C = 1, P = 0, pages = 0;
  std::int64_t misalign = 0;  // elements the data pointer is shifted by
  std::vector<specdec::position_id> clen, keep;
  std::vector<std::int32_t> koff{0}, table, used;
};

template <class T>
std::vector<kv_tensor<T>> tensors_for(const gpu_case& g, T* base, std::int64_t& total) {
  std::vector<kv_tensor<T>> ts;
  const auto R = g.R, L = g.L, H = g.H, D = g.D, C = g.C, P = g.P, N = g.pages;
  T* b = base + g.misalign;
  std::int64_t one = 0;
  for (int kv = 0; kv < 2; ++kv) {
    kv_tensor<T> t;
    switch (g.layout) {
      case 0:
        one = R * L * H * C * D;
        t = specdec::make_kv_tensor_lhsd(b + kv * one, R, L, H, C, D);
        break;
      case 1:
        one = R * L * H * C * D;
        t = specdec::make_kv_tensor_lshd(b + kv * one, R, L, H, C, D);
        break;
      case 2:
        one = N * L * P * H * D;
        t = specdec::make_kv_tensor_paged_nhd(b + kv * one, N, L, P, H, D);
        break;
      case 3:
        one = N * L * H * P * D;
        t = specdec::make_kv_tensor_paged_hnd(b + kv * one, N, L, P, H, D);
        break;
      default:  // [B][L][H][D][S]: head-dim-strided keys
        one = R * L * H * D * C;
        t = specdec::make_kv_tensor(b + kv * one, one, L, H, D, {L * H * D * C, H * D * C, D * C, 1, C});
        break;
    }
    ts.push_back(t);
  }
  total = g.misalign + 2 * one;
  for (auto& t : ts) t.size = total - (t.data - base);
  return ts;
}

gpu_case random_case(std::mt19937& g, int layout, int requests = 0) {
  gpu_case c;
  c.layout = layout;
  c.R = requests > 0 ? requests : std::uniform_int_distribution<int>(1, 6)(g);
  c.L = std::uniform_int_distribution<int>(1, 4)(g);
  c.H = std::uniform_int_distribution<int>(1, 4)(g);
  const int dims[] = {1, 3, 8, 64, 128, 130};
  c.D = dims[std::uniform_int_distribution<int>(0, 5)(g)];
  c.misalign = std::bernoulli_distribution(0.25)(g) ? 1 : 0;
  std::int64_t need = 1;
  for (std::int64_t r = 0; r < c.R; ++r) {
    // Some requests have big trees so waves split (count * units > 512).
    const int n = std::uniform_int_distribution<int>(1, r == 0 ? 200 : 40)(g);
    const int cl = std::uniform_int_distribution<int>(0, 30)(g);
    std::vector<specdec::position_id> k;
    if (r % 2 == 1) {
      for (int i = 0; i < n; ++i)
        if (std::bernoulli_distribution(0.7)(g)) k.push_back(cl + i);
    } else {
      const auto p = cache_test::random_parents(g, n);
      const auto path = cache_test::random_path(g, p);
      k.resize(path.size());
      std::int32_t cnt = 0;
      REQUIRE(specdec::keep_indices_from_path(p, path, {}, cl, k, cnt).ok());
    }
    c.clen.push_back(cl);
    c.keep.insert(c.keep.end(), k.begin(), k.end());
    c.koff.push_back(static_cast<std::int32_t>(c.keep.size()));
    need = std::max<std::int64_t>(need, cl + n);
  }
  c.C = need;
  if (layout == 2 || layout == 3) {
    const int sizes[] = {1, 4, 16};
    c.P = sizes[std::uniform_int_distribution<int>(0, 2)(g)];
    const std::int64_t per = (c.C + c.P - 1) / c.P;
    c.pages = c.R * per + 2;
    std::vector<std::int32_t> perm(static_cast<std::size_t>(c.pages));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), g);
    c.table.assign(perm.begin(), perm.begin() + c.R * per);
    c.used.assign(static_cast<std::size_t>(c.R), static_cast<std::int32_t>(per));
  }
  return c;
}

// What run_both saw.
struct both_result {
  specdec::status host, device;  // the lowest failing request on each side (ok: none)
  bool codes_equal = false;      // the request_status arrays are identical
  bool equal = false;            // the device cache equals the host's, bytes
  bool untouched = false;        // the device cache equals the input
};

// Runs the same commit on the host (the per-request twin) and on the device.
template <class T>
both_result run_both(const gpu_case& c, std::mt19937_64& g64, std::int32_t max_layers = 0, bool graph = false) {
  both_result out_;
  std::int64_t total = 0;
  tensors_for<T>(c, static_cast<T*>(nullptr), total);
  std::vector<T> host(static_cast<std::size_t>(total));
  for (auto& x : host) {
    const std::uint64_t bits = g64();
    std::memcpy(&x, &bits, sizeof(T));
  }
  const auto original = host;
  device_buffer<T> dev(host);
  auto hts = tensors_for<T>(c, host.data(), total);
  auto dts = tensors_for<T>(c, dev.data(), total);
  const bool paged = c.P > 0;
  const std::int64_t per = paged ? (c.C + c.P - 1) / c.P : 0;
  const auto hmap = paged ? specdec::paged_positions(c.table.data(), per, c.P, c.pages, c.used.data())
                          : specdec::contiguous_positions(c.C);
  std::vector<std::int32_t> host_codes(c.clen.size(), -1);
  out_.host = specdec::commit_kv_per_request<T>(hts, hmap, c.clen, c.koff, c.keep, host_codes);

  std::vector<kv_tensor<void>> erased;
  for (const auto& t : dts) erased.push_back(specdec::erase_kv_tensor(t));
  device_buffer<kv_tensor<void>> d_tensors(erased);
  device_buffer<specdec::position_id> d_clen(c.clen),
      d_keep(c.keep.empty() ? std::vector<specdec::position_id>{0} : c.keep);
  device_buffer<std::int32_t> d_koff(c.koff);
  device_buffer<std::int32_t> d_table(c.table.empty() ? std::vector<std::int32_t>{0} : c.table);
  device_buffer<std::int32_t> d_used(c.used.empty() ? std::vector<std::int32_t>{0} : c.used);
  device_buffer<std::int32_t> d_status(std::vector<std::int32_t>(c.clen.size() + 1, -1));
  specdec::kernels::kv_commit_params p;
  p.tensors = d_tensors.data();
  p.num_tensors = static_cast<std::int32_t>(erased.size());
  p.elem_bytes = static_cast<std::int32_t>(sizeof(T));
  p.max_layers = max_layers > 0 ? max_layers : static_cast<std::int32_t>(c.L);
  p.max_heads = static_cast<std::int32_t>(c.H);
  p.map = paged ? specdec::paged_positions(d_table.data(), per, c.P, c.pages, d_used.data())
                : specdec::contiguous_positions(c.C);
  p.batch = specdec::kv_commit_batch{static_cast<std::int32_t>(c.R), d_clen.data(), d_koff.data(), d_keep.data()};
  p.total_keep = static_cast<std::int64_t>(c.keep.size());
  p.request_status = d_status.data();
  if (graph) {  // captured into a CUDA graph and replayed once
    run_in_graph([&](cudaStream_t s) { return specdec::kernels::commit_kv(p, nullptr, 0, s).ok(); });
  } else {
    REQUIRE(specdec::kernels::commit_kv(p, nullptr, 0, nullptr).ok());
    REQUIRE(specdec::kernels::synchronize(nullptr).ok());
  }
  auto dev_codes = d_status.download();
  CHECK(dev_codes.back() == -1);  // nothing past num_requests
  dev_codes.pop_back();
  out_.device = specdec::kernels::kv_commit_result(dev_codes);
  out_.codes_equal = dev_codes == host_codes;
  const auto out = dev.download();
  out_.equal = std::memcmp(out.data(), host.data(), out.size() * sizeof(T)) == 0;
  out_.untouched = std::memcmp(out.data(), original.data(), out.size() * sizeof(T)) == 0;
  return out_;
}

// Commits `c` on both sides and checks both succeed with byte-equal caches;
// returns whether the device cache was left untouched.
template <class T>
bool commit_equals_host(const gpu_case& c, std::mt19937_64& g64) {
  const both_result b = run_both<T>(c, g64);
  REQUIRE(b.host.ok());
  CHECK(b.device.ok());
  CHECK(b.codes_equal);
  CHECK(b.equal);
  return b.untouched;
}

template <class T>
void random_equality(std::uint32_t seeds) {
  int moved = 0;  // cases where the commit really changed the cache
  for (std::uint32_t seed = 1; seed <= seeds; ++seed)
    for (int layout = 0; layout < 5; ++layout) {
      INFO("seed " << seed << " layout " << layout << " element bytes " << sizeof(T));
      std::mt19937 g(seed * 977 + static_cast<std::uint32_t>(layout));
      std::mt19937_64 g64(seed);
      const auto c = random_case(g, layout);
      moved += commit_equals_host<T>(c, g64) ? 0 : 1;
    }
  CHECK(moved > 0);
}

}  // namespace

TEST_CASE("GPU commit_kv equals the host commit (fp16 bits)") { random_equality<std::uint16_t>(20); }
TEST_CASE("GPU commit_kv equals the host commit (fp32 bits)") { random_equality<std::uint32_t>(10); }
TEST_CASE("GPU commit_kv equals the host commit (fp8 bits)") { random_equality<std::uint8_t>(5); }

TEST_CASE("GPU commit_kv inside a captured CUDA graph equals the host commit") {
  // The validation kernel and the copy on the caller's stream, nothing
  // synchronized or allocated: replayable in an engine's decode graph.
  int moved = 0;  // cases where the commit really changed the cache
  for (int layout = 0; layout < 5; ++layout) {
    INFO("seed 41 layout " << layout);
    std::mt19937 g(41 * 977 + static_cast<std::uint32_t>(layout));
    std::mt19937_64 g64(41);
    const both_result b = run_both<std::uint16_t>(random_case(g, layout), g64, 0, true);
    REQUIRE(b.host.ok());
    CHECK(b.device.ok());
    CHECK(b.codes_equal);
    CHECK(b.equal);
    moved += b.untouched ? 0 : 1;
  }
  CHECK(moved > 0);
}

TEST_CASE("GPU commit_kv: bad requests get the host's codes and only they are left untouched") {
  std::mt19937 g(5);
  std::mt19937_64 g64(5);
  for (int what = 0; what < 7; ++what) {
    INFO("fault " << what);
    auto c = random_case(g, what % 2 == 0 ? 2 : 0);
    if (what == 6)
      while (c.R < 2) c = random_case(g, 0);
    const std::size_t last = c.keep.size();
    REQUIRE(last > 0);
    switch (what) {
      case 0:  // block table entry outside the pool
        for (auto& e : c.table) e = static_cast<std::int32_t>(c.pages);
        break;
      case 1:  // capacity overflow
        c.keep.back() = c.C;
        break;
      case 2:  // block table too short
        for (auto& u : c.used) u = 0;
        break;
      case 3:  // not strictly increasing
        c.keep.push_back(c.keep.back());
        c.koff.back() += 1;
        break;
      case 4:  // the batch header: keep_offsets[0] != 0
        c.koff[0] = 1;
        break;
      case 5:  // keep_offsets[R] past the keep buffer (total_keep)
        c.koff.back() += 1;
        break;
      default:  // an interior offset out of order: request 1's range is reversed
        c.koff[1] = c.koff[2] + 1;
        break;
    }
    const both_result b = run_both<std::uint16_t>(c, g64);
    CHECK(!b.host.ok());
    CHECK(b.device.code() == b.host.code());
    CHECK(b.device.index() == b.host.index());
    CHECK(b.codes_equal);
    CHECK(b.equal);  // the good requests committed as on the host
    if (what == 0 || what == 2 || what == 4 || what == 5) CHECK(b.untouched);  // every request was bad
  }
}

TEST_CASE("GPU commit_kv: entries wider than the staging capacity are copied straight through") {
  // 1500 two-byte units per entry (misaligned base or strided head_dim)
  // exceed the 32 lanes x 4 staged units of a warp's wave.
  for (std::uint32_t seed = 1; seed <= 3; ++seed)
    for (int layout : {0, 4}) {
      INFO("seed " << seed << " layout " << layout);
      std::mt19937 g(seed * 101 + static_cast<std::uint32_t>(layout));
      std::mt19937_64 g64(seed);
      auto c = random_case(g, layout);
      c.D = 1500;
      c.misalign = 1;
      commit_equals_host<std::uint16_t>(c, g64);
    }
}

TEST_CASE("GPU commit_kv: 300 requests equal the host; one bad request is the only one left untouched") {
  // More requests than the validation block has threads.
  for (int layout : {0, 2}) {
    INFO("layout " << layout);
    std::mt19937 g(23 + static_cast<std::uint32_t>(layout));
    std::mt19937_64 g64(23);
    auto c = random_case(g, layout, 300);
    c.D = 16;
    c.misalign = 0;
    CHECK(!commit_equals_host<std::uint16_t>(c, g64));
    // The same batch with request 150's keep list below cache_len: the
    // others commit, request 150 alone gets out_of_range.
    const auto lo = static_cast<std::size_t>(c.koff[150]);
    REQUIRE(c.koff[151] - c.koff[150] >= 1);
    c.keep[lo] = c.clen[150] - 1;
    const both_result b = run_both<std::uint16_t>(c, g64);
    CHECK(b.host == specdec::status_code::out_of_range);
    CHECK(b.host.index() == 150);
    CHECK(b.device.code() == b.host.code());
    CHECK(b.device.index() == 150);
    CHECK(b.codes_equal);
    CHECK(b.equal);
    CHECK(!b.untouched);
  }
}

TEST_CASE("GPU commit_kv: a grid smaller than a tensor's layers is an error, not a partial commit") {
  std::mt19937 g(17);
  std::mt19937_64 g64(17);
  gpu_case c;
  do c = random_case(g, 1);
  while (c.L < 2);
  const both_result b = run_both<std::uint16_t>(c, g64, static_cast<std::int32_t>(c.L - 1));
  REQUIRE(b.host.ok());
  CHECK(b.device == specdec::status_code::invalid_argument);  // every request: a batch-wide fault
  CHECK(b.device.index() == 0);
  CHECK(b.untouched);
}

TEST_CASE("GPU keep_indices_from_results equals the host twin: random batches, malformed requests, bad offsets") {
  // Seeds 1..40; every 7th batch gets a decreasing offset (every request
  // not_sorted), every 3rd one accepted count past its path row.
  for (std::uint32_t seed = 1; seed <= 40; ++seed) {
    INFO("seed " << seed);
    std::mt19937 g(seed);
    const bool with_slots = seed % 2 == 0;
    cache_test::verified_batch v = cache_test::make_verified(g, with_slots);
    if (seed % 3 == 0) v.results[0].accepted = v.L;
    if (seed % 7 == 0 && v.results.size() > 1 && v.toff[1] != v.toff[2]) std::swap(v.toff[1], v.toff[2]);
    std::vector<specdec::position_id> keep;
    std::vector<std::int32_t> koff, st;
    const auto hb = cache_test::args(v, with_slots, keep, koff, st);
    REQUIRE(specdec::keep_indices_from_results(hb).ok());

    const device_buffer<std::int32_t> d_toff(v.toff), d_slots(v.slots);
    const device_buffer<specdec::node_id> d_parent(v.parent), d_paths(v.paths);
    const device_buffer<specdec::verify_result> d_res(v.results);
    const device_buffer<specdec::position_id> d_clen(v.clen);
    device_buffer<specdec::position_id> d_keep(std::vector<specdec::position_id>(keep.size(), -3));
    device_buffer<std::int32_t> d_koff(std::vector<std::int32_t>(koff.size(), -3)),
        d_st(std::vector<std::int32_t>(st.size(), -3));
    specdec::keep_from_results_batch db = hb;
    db.tree_offsets = d_toff.data();
    db.parent = d_parent.data();
    db.slot_of_node = with_slots ? d_slots.data() : nullptr;
    db.paths = d_paths.data();
    db.results = d_res.data();
    db.cache_len = d_clen.data();
    db.keep = d_keep.data();
    db.keep_offsets = d_koff.data();
    db.request_status = d_st.data();
    REQUIRE(specdec::kernels::keep_indices_from_results_can_implement(db).ok());
    if (seed % 5 == 0)
      run_in_graph([&](cudaStream_t s) { return specdec::kernels::keep_indices_from_results(db, nullptr, 0, s).ok(); });
    else
      REQUIRE(specdec::kernels::keep_indices_from_results(db, nullptr, 0, nullptr).ok());
    specdec_test::cuda_check(cudaDeviceSynchronize(), "sync");
    CHECK(d_st.download() == st);
    CHECK(d_koff.download() == koff);
    const auto dk = d_keep.download();
    CHECK(std::vector<specdec::position_id>(dk.begin(), dk.begin() + koff.back()) ==
          std::vector<specdec::position_id>(keep.begin(), keep.begin() + koff.back()));
  }
}
