// No allocation after warm-up: this program replaces the global operator new
// and counts every call while a session runs rounds at a size it has seen.
#include <catch2/catch.hpp>

#include <atomic>
#include <cstdlib>
#include <new>
#include <vector>

#include "loop/loop_models.hpp"
#include "specdec/draft/beam_tree.hpp"
#include "specdec/draft/sampled_tree.hpp"
#include "specdec/draft/topk_tree.hpp"
#include "specdec/loop/batch_session.hpp"
#include "specdec/loop/session.hpp"

namespace {
std::atomic<long> g_allocations{0};
}

// GCC pairs the inlined std::allocator calls with the library's operator new
// and flags the free() in the replaced operator delete; every form here
// allocates with malloc, so the pairing is right.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

void* operator new(std::size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) { return operator new(n); }
// The nothrow forms too (Catch allocates with them): every allocation form
// must pair with the free() below, or ASan reports a new/free mismatch.
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  return std::malloc(n == 0 ? 1 : n);
}
void* operator new[](std::size_t n, const std::nothrow_t& t) noexcept { return operator new(n, t); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }

using namespace specdec;

namespace {
template <class Builder, class Source>
void check_no_alloc(Builder b, Source& src, session_options o) {
  looptest::target tgt{{.V = 64, .seed = 2}};
  speculative_session<Builder> s(std::move(b), o);
  const std::vector<token_id> prompt = {1, 2, 3};
  // Warm-up: one whole generation grows every buffer to its largest size.
  REQUIRE(s.start(prompt).ok());
  while (!s.done()) REQUIRE(s.round(src, tgt).ok());
  const long before = g_allocations.load();
  REQUIRE(s.start(prompt, o.seed + 1).ok());
  int rounds = 0;
  while (!s.done()) {
    REQUIRE(s.round(src, tgt).ok());
    ++rounds;
  }
  const long after = g_allocations.load();
  INFO("rounds " << rounds);
  CHECK(rounds > 1);
  CHECK(after - before == 0);
}
}  // namespace

TEST_CASE("the counter sees allocations (negative control)") {
  const long before = g_allocations.load();
  std::vector<int> v(10);
  CHECK(g_allocations.load() - before >= 1);
  CHECK(v.size() == 10);
}

TEST_CASE("no allocation after warm-up: sampled, top-k and beam sessions, per-node and level drafters") {
  session_options o;
  o.vocab_size = 64;
  o.seed = 3;
  o.max_tokens = 60;
  o.sampling.top_p = 0.9f;  // the filter workspace is part of the scratch
  looptest::drafter d{{.V = 64, .seed = 4}};
  looptest::level_drafter ld{{.V = 64, .seed = 4}};
  check_no_alloc(sampled_tree_builder({.mode = draft_mode::iid, .widths = {3, 2, 2}, .vocab_size = 64}), d, o);
  check_no_alloc(sampled_tree_builder({.mode = draft_mode::without_replacement, .widths = {3, 2}, .vocab_size = 64}),
                 ld, o);
  check_no_alloc(topk_tree_builder({.k = 2, .depth = 3, .vocab_size = 64}), d, o);
  o.sampling.temperature = 0.0f;
  check_no_alloc(beam_tree_builder({.k = 4, .width = 4, .depth = 4, .budget = 20}), d, o);
}

TEST_CASE("no allocation after warm-up: batched session (sampled, filtered and greedy requests)") {
  constexpr int V = 64;
  std::vector<session_options> so(3);
  for (std::size_t r = 0; r < so.size(); ++r) {
    so[r].vocab_size = V;
    so[r].seed = 10 + r;
    so[r].request = static_cast<std::uint32_t>(r);
    so[r].max_tokens = 40;
  }
  so[1].sampling.top_p = 0.9f;
  so[2].sampling.temperature = 0.0f;
  const sampled_tree_options bo{.mode = draft_mode::iid, .widths = {3, 2}, .vocab_size = V};
  batched_session<sampled_tree_builder> batch(std::vector<sampled_tree_builder>(3, sampled_tree_builder(bo)), so);
  looptest::drafter d{{.V = V, .seed = 4}};
  looptest::batch_target bt{{.V = V, .seed = 2},
                            0,
                            std::vector<std::vector<std::int32_t>>(3, std::vector<std::int32_t>(256, -1)),
                            std::vector<std::int32_t>(3, 1)};
  const std::vector<token_id> prompt = {1, 2};
  auto run = [&] {
    int rounds = 0;
    for (std::size_t r = 0; r < so.size(); ++r) REQUIRE(batch.start(r, prompt).ok());
    while (!batch.done()) {
      REQUIRE(batch.round(d, bt).ok());
      ++rounds;
    }
    return rounds;
  };
  run();  // warm-up
  // The restarts reuse the histories' capacity; count only the rounds.
  for (std::size_t r = 0; r < so.size(); ++r) REQUIRE(batch.start(r, prompt).ok());
  const long before = g_allocations.load();
  int rounds = 0;
  while (!batch.done()) {
    REQUIRE(batch.round(d, bt).ok());
    ++rounds;
  }
  const long after = g_allocations.load();
  INFO("rounds " << rounds);
  CHECK(rounds > 1);
  CHECK(after - before == 0);
}
