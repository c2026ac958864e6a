#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include "specdec/cache/detail/kv_wave.hpp"
#include "specdec/cache/keep_indices.hpp"
#include "specdec/cache/kv_commit.hpp"
#include "specdec/cache/row_commit.hpp"
#include "specdec/kernels/cache.hpp"
#include "test_util.hpp"

using specdec::kv_tensor;
using specdec::node_id;
using specdec::status_code;

namespace {

constexpr int kNumLayouts = 10;
const char* const kLayoutNames[kNumLayouts] = {"contiguous [B][L][H][S][D], K and V separate",
                                               "contiguous [B][L][S][H][D], K and V separate",
                                               "contiguous [B][L][2][H][S][D] interleaved",
                                               "contiguous [B][L][S][2H][D] as one tensor",
                                               "contiguous [B][L][H][D][S] (strided dim)",
                                               "paged [pages][L][P][H][D]",
                                               "paged [pages][L][H][P][D]",
                                               "paged [pages][L][2][P][H][D] interleaved",
                                               "paged [pages][L][P][H][2D] (dim stride 2)",
                                               "per-layer pools [B][S][H][D], 2L tensors"};

struct cache_shape {
  std::int64_t R, L, H, D, C;     // requests, layers, heads, head dim, capacity
  std::int64_t P = 0, pages = 0;  // paged: page size, physical pages
};

// Builds tensor descriptions of `layout` over one buffer, returning the
// buffer's element count.
template <class T>
std::int64_t make_layout(int layout, const cache_shape& s, T* base, std::vector<kv_tensor<T>>& out) {
  out.clear();
  const auto R = s.R, L = s.L, H = s.H, D = s.D, C = s.C, P = s.P, N = s.pages;
  // Layouts without a named maker (interleaved K/V, head-dim-strided keys,
  // one tensor per layer) use the general one; sizes are set at the end.
  auto t = [&](T* data, std::int64_t layers, std::int64_t heads, specdec::kv_strides st) {
    return specdec::make_kv_tensor(data, 0, layers, heads, D, st);
  };
  std::int64_t total = 0;
  switch (layout) {
    case 0: {
      const std::int64_t one = R * L * H * C * D;
      out.push_back(specdec::make_kv_tensor_lhsd(base, R, L, H, C, D));
      out.push_back(specdec::make_kv_tensor_lhsd(base + one, R, L, H, C, D));
      total = 2 * one;
      break;
    }
    case 1: {
      const std::int64_t one = R * L * H * C * D;
      out.push_back(specdec::make_kv_tensor_lshd(base, R, L, H, C, D));
      out.push_back(specdec::make_kv_tensor_lshd(base + one, R, L, H, C, D));
      total = 2 * one;
      break;
    }
    case 2:
      total = R * L * 2 * H * C * D;
      out.push_back(t(base, L, H, {L * 2 * H * C * D, 2 * H * C * D, C * D, D, 1}));
      out.push_back(t(base + H * C * D, L, H, {L * 2 * H * C * D, 2 * H * C * D, C * D, D, 1}));
      break;
    case 3:
      total = R * L * C * 2 * H * D;
      out.push_back(t(base, L, 2 * H, {L * C * 2 * H * D, C * 2 * H * D, D, 2 * H * D, 1}));
      break;
    case 4: {
      const std::int64_t one = R * L * H * D * C;
      out.push_back(t(base, L, H, {L * H * D * C, H * D * C, D * C, 1, C}));
      out.push_back(t(base + one, L, H, {L * H * D * C, H * D * C, D * C, 1, C}));
      total = 2 * one;
      break;
    }
    case 5: {
      const std::int64_t one = N * L * P * H * D;
      out.push_back(specdec::make_kv_tensor_paged_nhd(base, N, L, P, H, D));
      out.push_back(specdec::make_kv_tensor_paged_nhd(base + one, N, L, P, H, D));
      total = 2 * one;
      break;
    }
    case 6: {
      const std::int64_t one = N * L * H * P * D;
      out.push_back(specdec::make_kv_tensor_paged_hnd(base, N, L, P, H, D));
      out.push_back(specdec::make_kv_tensor_paged_hnd(base + one, N, L, P, H, D));
      total = 2 * one;
      break;
    }
    case 7:
      total = N * L * 2 * P * H * D;
      out.push_back(t(base, L, H, {L * 2 * P * H * D, 2 * P * H * D, D, H * D, 1}));
      out.push_back(t(base + P * H * D, L, H, {L * 2 * P * H * D, 2 * P * H * D, D, H * D, 1}));
      break;
    case 8:
      total = N * L * P * H * 2 * D;
      out.push_back(t(base, L, H, {L * P * H * 2 * D, P * H * 2 * D, 2 * D, H * 2 * D, 2}));
      out.push_back(t(base + 1, L, H, {L * P * H * 2 * D, P * H * 2 * D, 2 * D, H * 2 * D, 2}));
      break;
    case 9: {
      const std::int64_t one = R * C * H * D;
      for (std::int64_t i = 0; i < 2 * L; ++i) out.push_back(t(base + i * one, 1, H, {C * H * D, 0, D, H * D, 1}));
      total = 2 * L * one;
      break;
    }
    default:
      break;
  }
  for (auto& k : out) k.size = total - (k.data - base);
  return total;
}

bool is_paged(int layout) { return layout >= 5 && layout <= 8; }

// Element offset of (request r, layer, head, position p, dim d) written out
// from the definitions, independently of the library's helper.
template <class T>
std::int64_t ref_offset(const kv_tensor<T>& t, const specdec::kv_position_map& m, std::int64_t r, std::int64_t l,
                        std::int64_t h, std::int64_t p, std::int64_t d) {
  std::int64_t seq = r, slot = p;
  if (m.paged()) {
    seq = m.block_table[r * m.block_table_stride + p / m.page_size];
    slot = p % m.page_size;
  }
  return seq * t.stride_seq + l * t.stride_layer + h * t.stride_head + slot * t.stride_pos + d * t.stride_dim;
}

// The out-of-place gather every in-place commit must equal: destinations
// take the ORIGINAL bytes of their sources.
template <class T>
std::vector<T> reference_commit(const std::vector<T>& original, T* base, const std::vector<kv_tensor<T>>& ts,
                                const specdec::kv_position_map& m, const std::vector<specdec::position_id>& clen,
                                const std::vector<std::int32_t>& koff, const std::vector<specdec::position_id>& keep) {
  std::vector<T> out = original;
  for (const auto& t : ts) {
    const std::int64_t b = t.data - base;
    for (std::size_t r = 0; r < clen.size(); ++r)
      for (std::int64_t l = 0; l < t.layers; ++l)
        for (std::int64_t h = 0; h < t.heads; ++h)
          for (std::int32_t k = koff[r]; k < koff[r + 1]; ++k)
            for (std::int64_t d = 0; d < t.head_dim; ++d) {
              const auto ri = static_cast<std::int64_t>(r);
              const std::int64_t dst = b + ref_offset(t, m, ri, l, h, clen[r] + (k - koff[r]), d);
              const std::int64_t src = b + ref_offset(t, m, ri, l, h, keep[static_cast<std::size_t>(k)], d);
              out[static_cast<std::size_t>(dst)] = original[static_cast<std::size_t>(src)];
            }
  }
  return out;
}

template <class T>
void fill_random(std::vector<T>& v, std::mt19937_64& g) {
  for (auto& x : v) {
    const std::uint64_t bits = g();
    std::memcpy(&x, &bits, sizeof(T) < 8 ? sizeof(T) : 8);
  }
}

struct random_batch {
  cache_shape shape;
  std::vector<specdec::position_id> clen, keep;
  std::vector<std::int32_t> koff;
  std::vector<std::int32_t> block_table, blocks_used;
};

// Random batch: trees with accepted paths (through keep_indices_batch) or,
// every third request, arbitrary strictly increasing keep lists (long runs
// with short shifts: overlapping source and destination ranges).
// With `long_lists`, every request keeps a random ~half of up to 300
// positions: hundreds of runs, past the commit's chunk of 64 runs.
random_batch make_batch(std::mt19937& g, int layout, bool long_lists = false) {
  random_batch b;
  auto& s = b.shape;
  s.R = std::uniform_int_distribution<int>(1, 5)(g);
  s.L = std::uniform_int_distribution<int>(1, 3)(g);
  s.H = std::uniform_int_distribution<int>(1, 3)(g);
  s.D = std::uniform_int_distribution<int>(1, 6)(g);
  b.koff.push_back(0);
  std::int64_t need = 1;
  for (std::int64_t r = 0; r < s.R; ++r) {
    const int n = std::uniform_int_distribution<int>(1, long_lists ? 300 : 24)(g);
    const int c = std::uniform_int_distribution<int>(0, 20)(g);
    std::vector<specdec::position_id> k;
    if (long_lists || r % 3 == 2) {
      for (int i = 0; i < n; ++i)
        if (std::bernoulli_distribution(0.6)(g)) k.push_back(c + i);
    } else {
      const auto p = cache_test::random_parents(g, n);
      const auto path = cache_test::random_path(g, p);
      const auto slots = std::bernoulli_distribution(0.5)(g) ? cache_test::bfs_slots(p) : std::vector<std::int32_t>{};
      k.resize(path.size());
      std::int32_t count = 0;
      REQUIRE(specdec::keep_indices_from_path(p, path, slots, c, k, count).ok());
    }
    b.clen.push_back(c);
    b.keep.insert(b.keep.end(), k.begin(), k.end());
    b.koff.push_back(static_cast<std::int32_t>(b.keep.size()));
    need = std::max<std::int64_t>(need, c + n);
  }
  s.C = need + std::uniform_int_distribution<int>(0, 3)(g);
  if (is_paged(layout)) {
    const int sizes[] = {1, 2, 3, 4, 16};
    s.P = sizes[std::uniform_int_distribution<int>(0, 4)(g)];
    const std::int64_t per = (s.C + s.P - 1) / s.P;
    s.pages = s.R * per + std::uniform_int_distribution<int>(0, 3)(g);
    std::vector<std::int32_t> perm(static_cast<std::size_t>(s.pages));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), g);
    b.block_table.assign(perm.begin(), perm.begin() + s.R * per);
    b.blocks_used.assign(static_cast<std::size_t>(s.R), static_cast<std::int32_t>(per));
  }
  return b;
}

// Executors for commit_kv: items in reverse order on the calling thread,
// and items pulled by three std::threads from a shared counter. Both also
// check that every item of [0, n) is handed out exactly once.
struct item_log {
  std::vector<std::atomic<int>> calls;
  explicit item_log(std::int64_t n) : calls(static_cast<std::size_t>(n)) {}
  bool each_once() const {
    return std::all_of(calls.begin(), calls.end(), [](const std::atomic<int>& c) { return c.load() == 1; });
  }
};

struct test_executor {
  int threads = 0;  // 0: reverse order on the calling thread
  std::int64_t last_n = -1;
  bool each_once = true;

  static void parallel_for(void* self, std::int64_t n, specdec::kv_commit_executor::body_fn body, void* ctx) {
    auto& e = *static_cast<test_executor*>(self);
    e.last_n = n;
    item_log log(n);
    auto one = [&](std::int64_t i) {
      log.calls[static_cast<std::size_t>(i)].fetch_add(1);
      body(ctx, i);
    };
    if (e.threads == 0) {
      for (std::int64_t i = n - 1; i >= 0; --i) one(i);
    } else {
      std::atomic<std::int64_t> next{0};
      std::vector<std::thread> pool;
      for (int t = 0; t < e.threads; ++t)
        pool.emplace_back([&] {
          for (std::int64_t i = next.fetch_add(1); i < n; i = next.fetch_add(1)) one(i);
        });
      for (auto& t : pool) t.join();
    }
    e.each_once = e.each_once && log.each_once();
  }
  specdec::kv_commit_executor get() { return {&test_executor::parallel_for, this}; }
};

// executor: -1 none (the default serial path), else test_executor::threads.
template <class T>
void run_random_commits(std::uint32_t seeds, bool long_lists = false, int executor = -1) {
  for (std::uint32_t seed = 1; seed <= seeds; ++seed) {
    for (int layout = 0; layout < kNumLayouts; ++layout) {
      INFO("seed " << seed << " layout " << kLayoutNames[layout] << " element bytes " << sizeof(T) << " long lists "
                   << long_lists << " executor " << executor);
      std::mt19937 g(seed * 131 + static_cast<std::uint32_t>(layout));
      std::mt19937_64 g64(seed);
      auto b = make_batch(g, layout, long_lists);
      const auto& s = b.shape;
      specdec::kv_position_map m = specdec::contiguous_positions(s.C);
      if (is_paged(layout)) {
        const std::int64_t per = (s.C + s.P - 1) / s.P;
        m = specdec::paged_positions(b.block_table.data(), per, s.P, s.pages, b.blocks_used.data());
      }
      std::vector<kv_tensor<T>> ts;
      const std::int64_t n = make_layout<T>(layout, s, nullptr, ts);
      std::vector<T> cache(static_cast<std::size_t>(n));
      make_layout<T>(layout, s, cache.data(), ts);
      fill_random(cache, g64);
      const auto expect = reference_commit(cache, cache.data(), ts, m, b.clen, b.koff, b.keep);
      test_executor ex{executor < 0 ? 0 : executor};
      const auto st = executor < 0 ? specdec::commit_kv<T>(ts, m, b.clen, b.koff, b.keep)
                                   : specdec::commit_kv<T>(ts, m, b.clen, b.koff, b.keep, ex.get());
      REQUIRE(st.ok());
      CHECK(std::memcmp(cache.data(), expect.data(), cache.size() * sizeof(T)) == 0);
      if (executor >= 0) {
        const auto items = static_cast<std::int64_t>(ts.size() * b.clen.size());
        CHECK(ex.last_n == (items > 1 ? items : -1));  // a single item runs inline
        CHECK(ex.each_once);
      }
    }
  }
}

// Replays the CUDA copy kernel's schedule (cuda/cache.cuh) on the host with
// the same index helpers: per (tensor, request, layer, head) row (a warp on
// the device), waves of entries; in each wave every "lane" loads its units,
// then every lane stores. Any schedule bug (wrong wave split, unit math, alignment choice)
// shows up as a difference from commit_kv.
template <class T>
void simulate_kernel(const std::vector<kv_tensor<T>>& ts, const specdec::kv_position_map& map,
                     const std::vector<specdec::position_id>& clen, const std::vector<std::int32_t>& koff,
                     const std::vector<specdec::position_id>& keep, std::int64_t threads, std::int64_t regs) {
  const std::int64_t eb = sizeof(T);
  for (const auto& typed : ts) {
    const auto t = specdec::erase_kv_tensor(typed);
    auto* base = static_cast<unsigned char*>(t.data);
    for (std::size_t r = 0; r < clen.size(); ++r)
      for (std::int64_t layer = 0; layer < t.layers; ++layer)
        for (std::int64_t head = 0; head < t.heads; ++head) {
          const std::int64_t c = clen[r];
          const specdec::position_id* kp = keep.data() + koff[r];
          const std::int64_t count = koff[r + 1] - koff[r];
          const std::int64_t k0 = specdec::detail::kv_first_moved(kp, count, c);
          const auto plan = specdec::detail::kv_plan_row(reinterpret_cast<std::uintptr_t>(t.data), eb, t);
          const std::int64_t unit = plan.unit, units = plan.units;
          auto uoff = [&](std::int64_t u) { return specdec::detail::kv_unit_offset(plan, u); };
          auto off = [&](std::int64_t p) {
            return specdec::detail::kv_offset(t, map, static_cast<std::int64_t>(r), layer, head, p) * eb;
          };
          const std::int64_t capacity = threads * regs;
          const std::int64_t per_wave = specdec::detail::kv_wave_entries(units, capacity);
          for (std::int64_t w0 = k0; w0 < count; w0 += per_wave) {
            const std::int64_t w1 = std::min(w0 + per_wave, count);
            const std::int64_t total = (w1 - w0) * units;
            if (total > capacity) {
              for (std::int64_t u = 0; u < units; ++u)
                std::memmove(base + off(c + w0) + uoff(u), base + off(kp[w0]) + uoff(u),
                             static_cast<std::size_t>(unit));
              continue;
            }
            std::vector<unsigned char> staged(static_cast<std::size_t>(capacity * unit));
            std::vector<std::int64_t> dst(static_cast<std::size_t>(capacity), -1);
            for (std::int64_t g = 0; g < total; ++g) {  // load phase of every thread
              std::int64_t k = 0, u = 0;
              specdec::detail::kv_wave_unit(g, units, w0, k, u);
              REQUIRE(k < w1);
              // The device dereferences a U*: the address must be aligned.
              REQUIRE(reinterpret_cast<std::uintptr_t>(base + off(kp[k]) + uoff(u)) %
                          static_cast<std::uintptr_t>(unit) ==
                      0);
              std::memcpy(staged.data() + g * unit, base + off(kp[k]) + uoff(u), static_cast<std::size_t>(unit));
              dst[static_cast<std::size_t>(g)] = off(c + k) + uoff(u);
            }
            for (std::int64_t g = 0; g < total; ++g)  // store phase, after the barrier
              std::memcpy(base + dst[static_cast<std::size_t>(g)], staged.data() + g * unit,
                          static_cast<std::size_t>(unit));
          }
        }
  }
}

}  // namespace

TEST_CASE("the CUDA kernel's wave schedule, replayed on the host, equals commit_kv") {
  for (std::uint32_t seed = 1; seed <= 15; ++seed)
    for (int layout = 0; layout < kNumLayouts; ++layout)
      for (std::int64_t threads : {1, 3, 32}) {
        INFO("seed " << seed << " layout " << kLayoutNames[layout] << " threads " << threads);
        std::mt19937 g(seed * 7 + static_cast<std::uint32_t>(layout));
        std::mt19937_64 g64(seed);
        auto b = make_batch(g, layout);
        const auto& s = b.shape;
        specdec::kv_position_map m = specdec::contiguous_positions(s.C);
        if (is_paged(layout))
          m = specdec::paged_positions(b.block_table.data(), (s.C + s.P - 1) / s.P, s.P, s.pages, b.blocks_used.data());
        std::vector<kv_tensor<std::uint16_t>> ts;
        const std::int64_t n = make_layout<std::uint16_t>(layout, s, nullptr, ts);
        // 8 extra elements so the base can be shifted off 16-byte alignment.
        std::vector<std::uint16_t> a(static_cast<std::size_t>(n) + 8), bb;
        fill_random(a, g64);
        const std::size_t shift = seed % 2 == 0 ? 0 : 1;
        bb = a;
        make_layout<std::uint16_t>(layout, s, a.data() + shift, ts);
        REQUIRE(specdec::commit_kv<std::uint16_t>(ts, m, b.clen, b.koff, b.keep).ok());
        make_layout<std::uint16_t>(layout, s, bb.data() + shift, ts);
        simulate_kernel(ts, m, b.clen, b.koff, b.keep, threads, 4);
        CHECK(a == bb);
      }
}

TEST_CASE("kv_plan_row never picks a unit wider than the address alignment") {
  // [L][H][D][S] with S = 7: head_dim strided.
  auto t = specdec::make_kv_tensor<void>(nullptr, 0, 1, 2, 5, {0, 2 * 5 * 7, 5 * 7, 1, 7});
  // 16-byte elements whose type is only 2-byte aligned, at an address = 2 mod 16.
  auto p = specdec::detail::kv_plan_row(0x1002, 16, t);
  CHECK(p.unit == 2);
  CHECK(p.shift == 3);
  CHECK(p.units == 5 * 8);
  CHECK(specdec::detail::kv_unit_offset(p, 0) == 0);
  CHECK(specdec::detail::kv_unit_offset(p, 7) == 14);
  CHECK(specdec::detail::kv_unit_offset(p, 8) == 7 * 16);
  CHECK(specdec::detail::kv_unit_offset(p, 9) == 7 * 16 + 2);
  p = specdec::detail::kv_plan_row(0x1000, 16, t);  // aligned: one 16-byte unit per element
  CHECK(p.unit == 16);
  CHECK(p.shift == 0);
  CHECK(p.units == 5);
  CHECK(specdec::detail::kv_unit_offset(p, 3) == 3 * 7 * 16);
  t.stride_dim = 1;  // contiguous head_dim: units span the entry, limited by 5 * 2 bytes
  t.stride_pos = 5;
  t.stride_head = 5 * 7;
  p = specdec::detail::kv_plan_row(0x1000, 2, t);
  CHECK(p.unit == 2);
  CHECK(p.units == 5);
  CHECK(specdec::detail::kv_unit_offset(p, 4) == 8);
}

TEST_CASE("the kernel's schedule moves under-aligned 16-byte elements with narrower units") {
  struct h8 {
    std::uint16_t v[8];
    bool operator==(const h8&) const = default;
  };
  static_assert(alignof(h8) == 2 && specdec::kv_element<h8>);
  for (std::uint32_t seed = 1; seed <= 6; ++seed) {
    const int layout = seed % 2 == 0 ? 4 : 8;  // both layouts with a strided head_dim
    INFO("seed " << seed << " layout " << kLayoutNames[layout]);
    std::mt19937 g(seed * 31);
    std::mt19937_64 g64(seed);
    auto b = make_batch(g, layout);
    const auto& s = b.shape;
    specdec::kv_position_map m = specdec::contiguous_positions(s.C);
    if (is_paged(layout))
      m = specdec::paged_positions(b.block_table.data(), (s.C + s.P - 1) / s.P, s.P, s.pages, b.blocks_used.data());
    std::vector<kv_tensor<h8>> ts;
    const std::int64_t n = make_layout<h8>(layout, s, nullptr, ts);
    // Raw 2-byte storage, the tensors start 2 bytes past a 16-byte boundary.
    std::vector<std::uint16_t> a(static_cast<std::size_t>(n + 1) * 8);
    fill_random(a, g64);
    auto bb = a;
    make_layout<h8>(layout, s, reinterpret_cast<h8*>(a.data() + 1), ts);
    REQUIRE(specdec::commit_kv<h8>(ts, m, b.clen, b.koff, b.keep).ok());
    make_layout<h8>(layout, s, reinterpret_cast<h8*>(bb.data() + 1), ts);
    const auto plan =
        specdec::detail::kv_plan_row(reinterpret_cast<std::uintptr_t>(ts[0].data), 16, specdec::erase_kv_tensor(ts[0]));
    CHECK(plan.unit == 2);
    simulate_kernel(ts, m, b.clen, b.koff, b.keep, 3, 4);
    CHECK(a == bb);
  }
}

TEMPLATE_TEST_CASE("commit_kv in place equals an out-of-place gather", "", std::uint16_t, std::uint32_t, std::uint8_t,
                   std::uint64_t) {
  run_random_commits<TestType>(sizeof(TestType) <= 4 ? 40 : 10);
}

TEMPLATE_TEST_CASE("commit_kv with hundreds of runs per request equals an out-of-place gather", "", std::uint16_t,
                   std::uint64_t) {
  run_random_commits<TestType>(8, true);
}

TEST_CASE("commit_kv through a caller's executor equals the gather, whatever the schedule") {
  SECTION("items in reverse order on the calling thread") {
    run_random_commits<std::uint16_t>(10, false, 0);
    run_random_commits<std::uint32_t>(4, true, 0);
  }
  SECTION("items on three std::threads") {
    run_random_commits<std::uint16_t>(10, false, 3);
    run_random_commits<std::uint8_t>(4, true, 3);
  }
}

TEST_CASE("commit_kv: long overlapping shifts across pages, rows prefetched ahead") {
  // One long run shifted by one slot (each destination is the previous
  // entry's source) and one shifted by 8, 40 positions each, in every
  // layout, contiguous and paged (pages of 16 split the runs).
  for (int layout = 0; layout < kNumLayouts; ++layout) {
    INFO("layout " << kLayoutNames[layout]);
    cache_shape s{2, 2, 3, 5, 48};
    random_batch b;
    b.clen = {3, 0};
    b.koff = {0, 40, 80};
    for (int i = 0; i < 40; ++i) b.keep.push_back(4 + i);
    for (int i = 0; i < 40; ++i) b.keep.push_back(8 + i);  // shift by 8: overlapping, non-adjacent
    specdec::kv_position_map m = specdec::contiguous_positions(s.C);
    if (is_paged(layout)) {
      s.P = 16;
      s.pages = 7;
      b.block_table = {5, 0, 3, 6, 1, 2};
      m = specdec::paged_positions(b.block_table.data(), 3, s.P, s.pages);
    }
    std::vector<kv_tensor<std::uint16_t>> ts;
    const std::int64_t n = make_layout<std::uint16_t>(layout, s, nullptr, ts);
    std::vector<std::uint16_t> cache(static_cast<std::size_t>(n));
    for (std::size_t i = 0; i < cache.size(); ++i) cache[i] = static_cast<std::uint16_t>(i * 40503u);
    make_layout<std::uint16_t>(layout, s, cache.data(), ts);
    const auto expect = reference_commit(cache, cache.data(), ts, m, b.clen, b.koff, b.keep);
    REQUIRE(specdec::commit_kv<std::uint16_t>(ts, m, b.clen, b.koff, b.keep).ok());
    CHECK(cache == expect);
  }
}

TEST_CASE("commit_kv: overlapping run shifted by one slot") {
  // Keep positions 5..12 of a row with cache_len 4: every destination is the
  // previous entry's source (one memmove of an overlapping block).
  const std::int64_t L = 2, H = 2, C = 16, D = 3;
  std::vector<std::uint16_t> buf(static_cast<std::size_t>(L * H * C * D));
  for (std::size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<std::uint16_t>(i);
  const auto t = specdec::make_kv_tensor_lhsd(buf.data(), 1, L, H, C, D);
  std::vector<specdec::position_id> keep{5, 6, 7, 8, 9, 10, 11, 12};
  const auto orig = buf;
  REQUIRE(specdec::commit_kv<std::uint16_t>(std::span(&t, 1), specdec::contiguous_positions(C), 4, keep).ok());
  for (std::int64_t l = 0; l < L; ++l)
    for (std::int64_t h = 0; h < H; ++h)
      for (std::int64_t p = 0; p < C; ++p)
        for (std::int64_t d = 0; d < D; ++d) {
          const std::int64_t src = (p >= 4 && p < 12) ? p + 1 : p;
          CHECK(buf[static_cast<std::size_t>(((l * H + h) * C + p) * D + d)] ==
                orig[static_cast<std::size_t>(((l * H + h) * C + src) * D + d)]);
        }
}

TEST_CASE("commit_kv: fp16 NaN payloads move as raw bits") {
  std::vector<std::uint16_t> buf{0x1111, 0x7e01, 0xfc02, 0x7c00};  // C = 4, D = 1: NaN, -inf-ish, +inf bits
  const auto t = specdec::make_kv_tensor_lhsd(buf.data(), 1, 1, 1, 4, 1);
  const std::vector<specdec::position_id> keep{1, 2};
  REQUIRE(specdec::commit_kv<std::uint16_t>(std::span(&t, 1), specdec::contiguous_positions(4), 0, keep).ok());
  CHECK(buf == std::vector<std::uint16_t>{0x7e01, 0xfc02, 0xfc02, 0x7c00});
}

TEST_CASE("commit_kv: bad inputs return a status and leave every cache byte unchanged") {
  std::mt19937_64 g64(7);
  const std::int64_t L = 2, H = 2, D = 4, P = 4, per = 4, pages = 14;  // 3 requests
  std::vector<std::uint16_t> pool(static_cast<std::size_t>(pages * L * P * H * D));
  fill_random(pool, g64);
  const auto orig = pool;
  auto t = specdec::make_kv_tensor_paged_nhd(pool.data(), pages, L, P, H, D);
  std::vector<std::int32_t> table{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
  std::vector<std::int32_t> used{4, 4, 4};
  std::vector<specdec::position_id> clen{3, 5, 2};
  std::vector<std::int32_t> koff{0, 3, 5, 8};
  std::vector<specdec::position_id> keep{3, 6, 9, 5, 7, 4, 8, 15};
  auto map = specdec::paged_positions(table.data(), per, P, pages, used.data());
  test_executor ex;  // must never be called on bad input
  auto run = [&]() {
    const auto s = specdec::commit_kv<std::uint16_t>(std::span(&t, 1), map, clen, koff, keep);
    const auto s2 = specdec::commit_kv<std::uint16_t>(std::span(&t, 1), map, clen, koff, keep, ex.get());
    if (!s.ok()) {
      CHECK(s2 == s.code());
      CHECK(s2.index() == s.index());
      CHECK(ex.last_n == -1);
    }
    return s;
  };
  auto unchanged = [&]() { return std::memcmp(pool.data(), orig.data(), pool.size() * 2) == 0; };

  SECTION("valid input commits") {
    CHECK(run().ok());
    CHECK(!unchanged());
  }
  SECTION("keep may hold more entries than keep_offsets[R] (a buffer of fixed capacity)") {
    auto exact = orig;
    auto te = specdec::make_kv_tensor_paged_nhd(exact.data(), pages, L, P, H, D);
    REQUIRE(specdec::commit_kv<std::uint16_t>(std::span(&te, 1), map, clen, koff, keep).ok());
    keep.push_back(-7);  // past keep_offsets[R]: never read
    keep.push_back(1000);
    CHECK(specdec::commit_kv<std::uint16_t>(std::span(&t, 1), map, clen, koff, keep).ok());
    CHECK(pool == exact);
  }
  SECTION("capacity overflow in the last request") {
    keep[7] = 16;
    const auto s = run();
    CHECK(s == status_code::out_of_range);
    CHECK(s.index() == 2);
  }
  SECTION("keep list not strictly increasing") {
    keep[4] = 5;
    CHECK(run() == status_code::not_sorted);
  }
  SECTION("kept position below cache_len") {
    keep[0] = 2;
    CHECK(run() == status_code::out_of_range);
  }
  SECTION("block table too short") {
    used[2] = 3;
    CHECK(run() == status_code::out_of_range);
  }
  SECTION("block table entry outside the pool") {
    table[9] = 14;
    CHECK(run() == status_code::out_of_range);
    table[9] = -1;
    CHECK(run() == status_code::out_of_range);
  }
  SECTION("a page repeated inside a request") {
    table[11] = table[10];
    CHECK(run() == status_code::invalid_argument);
  }
  SECTION("tensor smaller than its layout") {
    t.size -= 1;
    const auto s = run();
    CHECK(s == status_code::buffer_too_small);
    CHECK(s.index() == 0);
  }
  SECTION("broken CSR offsets") {
    koff = {0, 3, 2, 8};
    CHECK(run() == status_code::not_sorted);
    koff = {0, 3, 5, 9};  // past the 8 keep entries
    CHECK(run() == status_code::size_mismatch);
    koff = {1, 3, 5, 8};
    CHECK(run() == status_code::invalid_argument);
  }
  SECTION("the lowest failing request decides, CSR faults included (as on the device)") {
    keep[0] = 2;          // request 0: kept position below cache_len
    koff = {0, 3, 2, 8};  // request 1: decreasing offsets
    const auto s = run();
    CHECK(s == status_code::out_of_range);
    CHECK(s.index() == 0);
  }
  SECTION("block-table row starts overflowing 64 bits") {
    map.block_table_stride = INT64_MAX / 2;
    CHECK(run() == status_code::invalid_argument);
  }
  SECTION("negative cache length") {
    clen[1] = -1;
    CHECK(run() == status_code::invalid_argument);
  }
  SECTION("bad page size and extents") {
    map.page_size = 0;
    CHECK(run() == status_code::invalid_argument);
    map.page_size = P;
    t.heads = 0;
    CHECK(run() == status_code::invalid_argument);
    t.heads = H;
    t.stride_pos = -1;
    CHECK(run() == status_code::invalid_argument);
  }
  if (!run().ok()) CHECK(unchanged());
}

TEST_CASE("commit_kv_per_request: bad requests get their codes and are skipped, the others commit") {
  // Seeds 1..25 over every layout; each request is broken with probability
  // 0.4 by one fault of known code. Expected bytes: the gather of the batch
  // with the broken requests' keep ranges emptied.
  int mixed = 0;  // batches with good and bad requests whose good ones moved entries
  for (std::uint32_t seed = 1; seed <= 25; ++seed)
    for (int layout = 0; layout < kNumLayouts; ++layout) {
      INFO("seed " << seed << " layout " << kLayoutNames[layout]);
      std::mt19937 g(seed * 7919 + static_cast<std::uint32_t>(layout));
      std::mt19937_64 g64(seed);
      auto b = make_batch(g, layout);
      const auto& sh = b.shape;
      std::vector<status_code> want(static_cast<std::size_t>(sh.R), status_code::ok);
      for (std::size_t r = 0; r < want.size(); ++r) {
        if (!std::bernoulli_distribution(0.4)(g)) continue;
        const auto lo = static_cast<std::size_t>(b.koff[r]), n = static_cast<std::size_t>(b.koff[r + 1]) - lo;
        const int fault = std::uniform_int_distribution<int>(0, 3)(g);
        if (fault == 0 || n == 0) {
          b.clen[r] = -1;
          want[r] = status_code::invalid_argument;
        } else if (fault == 1) {
          b.keep[lo] = b.clen[r] - 1;  // below cache_len
          want[r] = status_code::out_of_range;
        } else if (fault == 2 && n >= 2) {
          b.keep[lo + 1] = b.keep[lo];  // not strictly increasing
          want[r] = status_code::not_sorted;
        } else {
          b.keep[lo + n - 1] = sh.C + 64;  // past capacity or the block-table row
          want[r] = status_code::out_of_range;
        }
      }
      specdec::kv_position_map m = specdec::contiguous_positions(sh.C);
      if (is_paged(layout)) {
        const std::int64_t per = (sh.C + sh.P - 1) / sh.P;
        m = specdec::paged_positions(b.block_table.data(), per, sh.P, sh.pages, b.blocks_used.data());
      }
      std::vector<kv_tensor<std::uint16_t>> ts;
      const std::int64_t n = make_layout<std::uint16_t>(layout, sh, nullptr, ts);
      std::vector<std::uint16_t> cache(static_cast<std::size_t>(n));
      make_layout<std::uint16_t>(layout, sh, cache.data(), ts);
      fill_random(cache, g64);
      const auto orig = cache;
      std::vector<std::int32_t> koff_good{0};
      std::vector<specdec::position_id> keep_good;
      for (std::size_t r = 0; r < want.size(); ++r) {
        if (want[r] == status_code::ok)
          keep_good.insert(keep_good.end(), b.keep.begin() + b.koff[r], b.keep.begin() + b.koff[r + 1]);
        koff_good.push_back(static_cast<std::int32_t>(keep_good.size()));
      }
      const auto expect = reference_commit(cache, cache.data(), ts, m, b.clen, koff_good, keep_good);
      std::vector<std::int32_t> codes(want.size(), -9);
      test_executor ex{seed % 2 == 0 ? 2 : 0};
      const specdec::status st =
          specdec::commit_kv_per_request<std::uint16_t>(ts, m, b.clen, b.koff, b.keep, codes, ex.get());
      const auto first = std::find_if(want.begin(), want.end(), [](status_code c) { return c != status_code::ok; });
      if (first == want.end()) {
        CHECK(st.ok());
      } else {
        CHECK(st == *first);
        CHECK(st.index() == first - want.begin());
      }
      for (std::size_t r = 0; r < want.size(); ++r) CHECK(codes[r] == static_cast<std::int32_t>(want[r]));
      CHECK(std::memcmp(cache.data(), expect.data(), cache.size() * 2) == 0);
      // Negative control: the all-or-nothing commit writes nothing for the same batch.
      if (first != want.end() && expect != orig) {
        ++mixed;
        auto again = orig;
        std::vector<kv_tensor<std::uint16_t>> ts2;
        make_layout<std::uint16_t>(layout, sh, again.data(), ts2);
        CHECK(!specdec::commit_kv<std::uint16_t>(ts2, m, b.clen, b.koff, b.keep).ok());
        CHECK(again == orig);
      }
    }
  CHECK(mixed > 20);
}

TEST_CASE("commit_kv_per_request: faults of the batch stop every request") {
  std::mt19937_64 g64(11);
  const std::int64_t L = 2, H = 2, D = 4, C = 16;
  std::vector<std::uint16_t> cache(static_cast<std::size_t>(3 * L * H * C * D));
  fill_random(cache, g64);
  const auto orig = cache;
  auto t = specdec::make_kv_tensor_lhsd(cache.data(), 3, L, H, C, D);
  const auto map = specdec::contiguous_positions(C);
  std::vector<specdec::position_id> clen{3, 5, 2}, keep{3, 6, 9, 5, 7, 4, 8, 15};
  std::vector<std::int32_t> koff{0, 3, 5, 8}, codes(3, -9);
  auto all = [&](status_code c) {
    return std::all_of(codes.begin(), codes.end(), [&](std::int32_t x) { return x == static_cast<std::int32_t>(c); });
  };
  SECTION("a tensor with no data") {
    auto bad = t;
    bad.data = nullptr;
    const std::array<kv_tensor<std::uint16_t>, 2> two{t, bad};
    CHECK(specdec::commit_kv_per_request(two, map, clen, koff, keep, codes) == status_code::invalid_argument);
    CHECK(all(status_code::invalid_argument));
  }
  SECTION("keep_offsets[R] past keep") {
    keep.pop_back();
    CHECK(specdec::commit_kv_per_request<std::uint16_t>(std::span(&t, 1), map, clen, koff, keep, codes) ==
          status_code::size_mismatch);
    CHECK(all(status_code::size_mismatch));
  }
  SECTION("a bad map") {
    CHECK(specdec::commit_kv_per_request<std::uint16_t>(std::span(&t, 1), specdec::contiguous_positions(-1), clen, koff,
                                                        keep, codes) == status_code::invalid_argument);
    CHECK(all(status_code::invalid_argument));
  }
  SECTION("request_status of the wrong size: size_mismatch, nothing written") {
    codes.resize(2);
    CHECK(specdec::commit_kv_per_request<std::uint16_t>(std::span(&t, 1), map, clen, koff, keep, codes) ==
          status_code::size_mismatch);
    CHECK(codes == std::vector<std::int32_t>{-9, -9});
  }
  CHECK(cache == orig);
}

TEST_CASE("kernels::kv_commit_result: the lowest failing request") {
  CHECK(specdec::kernels::kv_commit_result(std::vector<std::int32_t>{0, 0, 0}).ok());
  const std::vector<std::int32_t> codes{0, static_cast<std::int32_t>(status_code::not_sorted),
                                        static_cast<std::int32_t>(status_code::out_of_range)};
  const auto s = specdec::kernels::kv_commit_result(codes);
  CHECK(s == status_code::not_sorted);
  CHECK(s.index() == 1);
}

TEST_CASE("commit_kv: contiguous capacity and row count are enforced") {
  std::vector<std::uint32_t> buf(2 * 2 * 1 * 8 * 2);
  for (std::size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<std::uint32_t>(i * 2654435761u);
  const auto orig = buf;
  const auto t = specdec::make_kv_tensor_lshd(buf.data(), 2, 2, 1, 8, 2);
  const std::vector<specdec::position_id> clen{2, 6};
  const std::vector<std::int32_t> koff{0, 1, 3};
  CHECK(specdec::commit_kv<std::uint32_t>(std::span(&t, 1), specdec::contiguous_positions(8), clen, koff,
                                          std::vector<specdec::position_id>{4, 6, 8}) == status_code::out_of_range);
  // Three requests on a two-row tensor: the layout check catches it.
  const std::vector<specdec::position_id> clen3{0, 0, 0};
  const std::vector<std::int32_t> koff3{0, 1, 2, 3};
  CHECK(specdec::commit_kv<std::uint32_t>(std::span(&t, 1), specdec::contiguous_positions(8), clen3, koff3,
                                          std::vector<specdec::position_id>{1, 1, 1}) == status_code::buffer_too_small);
  CHECK(buf == orig);
  // Empty batches and empty keep lists are fine and write nothing.
  CHECK(specdec::commit_kv<std::uint32_t>(std::span(&t, 1), specdec::contiguous_positions(8),
                                          std::span<const specdec::position_id>{}, std::vector<std::int32_t>{0},
                                          std::span<const specdec::position_id>{})
            .ok());
  CHECK(buf == orig);
}

namespace {
struct half_bits {
  std::uint16_t bits;
};
struct three_bytes {
  unsigned char b[3];
};
struct not_trivial {
  not_trivial(const not_trivial&) {}
  std::uint32_t x;
};
}  // namespace

static_assert(specdec::kv_element<std::uint16_t>);
static_assert(specdec::kv_element<std::uint32_t>);
static_assert(specdec::kv_element<std::uint8_t>);
static_assert(specdec::kv_element<half_bits>);  // an engine's own fp16 type works as is
static_assert(specdec::kv_element<float>);
static_assert(!specdec::kv_element<const std::uint16_t>);
static_assert(!specdec::kv_element<three_bytes>);
static_assert(!specdec::kv_element<not_trivial>);

TEST_CASE("a drafter's hidden-state buffer as a one-layer, one-head kv_tensor commits like commit_rows") {
  // The form the CUDA kernel takes for side buffers: [N x hidden] rows.
  std::mt19937 g(17);
  const int n = 40, hidden = 12;
  const auto parent = cache_test::random_parents(g, n);
  const auto path = cache_test::random_path(g, parent);
  std::vector<specdec::position_id> keep(path.size());
  std::int32_t count = 0;
  REQUIRE(specdec::keep_indices_from_path(parent, path, {}, 0, keep, count).ok());
  std::vector<std::uint32_t> a(static_cast<std::size_t>(n * hidden));
  for (auto& x : a) x = static_cast<std::uint32_t>(g());
  auto b = a;
  const auto t = specdec::make_kv_tensor_lhsd(a.data(), 1, 1, 1, n, hidden);
  REQUIRE(specdec::commit_kv<std::uint32_t>(std::span(&t, 1), specdec::contiguous_positions(n), 0, keep).ok());
  REQUIRE(specdec::commit_rows(specdec::make_view(b.data(), n, hidden), keep).ok());
  CHECK(a == b);
}

TEST_CASE("commit_kv deduces the element type from a std::vector or array of kv_tensor") {
  // Two layers of [1][L][H][C][D] with C = 8: keep positions 3, 5 after cache_len 2.
  std::vector<std::uint16_t> a(1 * 2 * 1 * 8 * 2), b(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = b[i] = static_cast<std::uint16_t>(i);
  const std::vector<specdec::kv_tensor<std::uint16_t>> vec = {specdec::make_kv_tensor_lhsd(a.data(), 1, 2, 1, 8, 2)};
  const specdec::position_id keep[] = {3, 5};
  REQUIRE(specdec::commit_kv(vec, specdec::contiguous_positions(8), 2, keep).ok());  // no <T>
  const specdec::kv_tensor<std::uint16_t> arr[1] = {specdec::make_kv_tensor_lhsd(b.data(), 1, 2, 1, 8, 2)};
  const specdec::position_id len[1] = {2};
  const std::int32_t off[2] = {0, 2};
  REQUIRE(specdec::commit_kv(arr, specdec::contiguous_positions(8), len, off, keep).ok());  // batched form
  CHECK(a == b);
  for (int layer = 0; layer < 2; ++layer)
    for (int d = 0; d < 2; ++d) {
      CHECK(a[static_cast<std::size_t>(layer * 16 + 2 * 2 + d)] == layer * 16 + 3 * 2 + d);
      CHECK(a[static_cast<std::size_t>(layer * 16 + 3 * 2 + d)] == layer * 16 + 5 * 2 + d);
    }
  // The deduced batched form takes an executor too (one tensor, one request:
  // a single item runs inline, so the executor is not called).
  test_executor ex;
  std::vector<std::uint16_t> c(a.size());
  for (std::size_t i = 0; i < c.size(); ++i) c[i] = static_cast<std::uint16_t>(i);
  const std::array<specdec::kv_tensor<std::uint16_t>, 1> one = {specdec::make_kv_tensor_lhsd(c.data(), 1, 2, 1, 8, 2)};
  REQUIRE(specdec::commit_kv(one, specdec::contiguous_positions(8), len, off, keep, ex.get()).ok());
  CHECK(c == a);
  CHECK(ex.last_n == -1);
  // Errors still come through the deduced form.
  const specdec::position_id bad[] = {5, 3};
  CHECK(specdec::commit_kv(vec, specdec::contiguous_positions(8), 2, bad) == specdec::status_code::not_sorted);
  static_assert(specdec::kv_tensor_range<std::vector<specdec::kv_tensor<float>>>);
  static_assert(!specdec::kv_tensor_range<std::vector<float>>);
  static_assert(!specdec::kv_tensor_range<specdec::kv_tensor<float>>);
}

TEST_CASE("the kv_tensor makers give the documented strides") {
  constexpr std::int64_t R = 3, L = 2, H = 4, C = 16, D = 8, P = 4;
  int dummy = 0;
  const auto lhsd = specdec::make_kv_tensor_lhsd(&dummy, R, L, H, C, D);
  CHECK(lhsd.size == R * L * H * C * D);
  CHECK((lhsd.stride_seq == L * H * C * D && lhsd.stride_layer == H * C * D && lhsd.stride_head == C * D &&
         lhsd.stride_pos == D && lhsd.stride_dim == 1));
  const auto lshd = specdec::make_kv_tensor_lshd(&dummy, R, L, H, C, D);
  CHECK((lshd.stride_seq == L * C * H * D && lshd.stride_layer == C * H * D && lshd.stride_head == D &&
         lshd.stride_pos == H * D && lshd.stride_dim == 1));
  const auto nhd = specdec::make_kv_tensor_paged_nhd(&dummy, R, L, P, H, D);
  CHECK((nhd.stride_seq == L * P * H * D && nhd.stride_layer == P * H * D && nhd.stride_head == D &&
         nhd.stride_pos == H * D && nhd.stride_dim == 1));
  const auto hnd = specdec::make_kv_tensor_paged_hnd(&dummy, R, L, P, H, D);
  CHECK(hnd.size == R * L * H * P * D);
  CHECK((hnd.stride_seq == L * H * P * D && hnd.stride_layer == H * P * D && hnd.stride_head == P * D &&
         hnd.stride_pos == D && hnd.stride_dim == 1));
  const auto any = specdec::make_kv_tensor(&dummy, 7, L, H, D, {1, 2, 3, 4, 5});
  CHECK((any.size == 7 && any.layers == L && any.heads == H && any.head_dim == D && any.stride_seq == 1 &&
         any.stride_layer == 2 && any.stride_head == 3 && any.stride_pos == 4 && any.stride_dim == 5));
}

TEST_CASE("kv_commit_can_implement: the copy grid's limit is its block count, not the old 2-D grid's 65535") {
  // Host-side checks only (kernels/cache.hpp is plain C++): fake non-null device pointers.
  auto* fake = reinterpret_cast<void*>(std::uintptr_t{256});
  specdec::kernels::kv_commit_params p;
  p.tensors = static_cast<const kv_tensor<void>*>(fake);
  p.num_tensors = 2;
  p.elem_bytes = 2;
  p.max_layers = 32;
  p.max_heads = 8;
  p.request_status = static_cast<std::int32_t*>(fake);
  p.batch.cache_len = static_cast<const specdec::position_id*>(fake);
  p.batch.keep_offsets = static_cast<const std::int32_t*>(fake);
  p.batch.num_requests = 70000;  // above the old limit; 35.8 M rows, 9 M blocks
  p.map.capacity = 4096;
  CHECK(specdec::kernels::kv_commit_can_implement(p).ok());
  p.max_layers = 4096;  // 4.6 G rows: 1.15 G blocks, still under 2^31 - 1
  CHECK(specdec::kernels::kv_commit_can_implement(p).ok());
  p.max_heads = 64;  // 36.7 G rows: 9.2 G blocks, too many
  CHECK(specdec::kernels::kv_commit_can_implement(p) == status_code::unsupported);
  p.batch.num_requests = 0x7fffffff;  // every factor near 2^31: no overflow in the check
  p.num_tensors = 0x7fffffff;
  p.max_layers = 0x7fffffff;
  p.max_heads = 0x7fffffff;
  CHECK(specdec::kernels::kv_commit_can_implement(p) == status_code::unsupported);
}
