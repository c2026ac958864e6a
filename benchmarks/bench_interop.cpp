// The peers' formats on the host: the linear passes an engine adds when it
// hands SGLang's buffers to specdec, next to the verification they feed.
// A batch of 32 requests of n slots (a random recursive tree; SGLang's
// linked lists ascending in slot). Items = slots, so time / item is ns per
// slot.
// - linked_to_tree: tree_from_linked_list of every request (the conversion
//   sglang_verify_tree_greedy runs before its walk);
// - build_tree: sglang_build_tree (EAGLE parent_list / selected_index to
//   qlen_only mask, positions and linked lists), topk 4;
// - greedy_ids: sglang_verify_tree_greedy (conversion + walk + outputs);
// - verify_linked / verify_parent: sglang_verify_tree in greedy mode over
//   V = arg 1 rows (the walk on the linked lists, outputs in SGLang's
//   format) next to verify_tree on the same trees as parent arrays.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <vector>

#include "specdec/interop/linked_tree.hpp"
#include "specdec/interop/sglang.hpp"
#include "specdec/interop/sglang_build_tree.hpp"
#include "specdec/interop/sglang_verify.hpp"
#include "specdec/verify/tree_verify.hpp"

namespace {

using namespace specdec;
constexpr int batch = 32;

struct sglang_batch {
  int n = 0;
  std::vector<std::int64_t> cand, ridx, next, sib, target_predict;
  std::vector<node_id> parent;  // per request, slot ids (topological)
  std::vector<token_id> token;
};

sglang_batch make(int n, int V) {
  std::mt19937_64 g(static_cast<std::uint64_t>(n) * 1009 + static_cast<std::uint64_t>(V));
  sglang_batch b;
  b.n = n;
  const auto total = static_cast<std::size_t>(batch * n);
  b.cand.resize(total);
  b.ridx.resize(total);
  b.next.assign(total, -1);
  b.sib.assign(total, -1);
  b.target_predict.resize(total);
  b.parent.resize(total);
  b.token.resize(total);
  for (int r = 0; r < batch; ++r) {
    const auto o = static_cast<std::size_t>(r * n);
    for (int s = 0; s < n; ++s) {
      const auto i = o + static_cast<std::size_t>(s);
      b.parent[i] = s == 0 ? -1 : static_cast<node_id>(g() % static_cast<std::uint64_t>(s));
      b.cand[i] = s == 0 ? 0 : static_cast<std::int64_t>(g() % 4);  // small alphabet: long accepted paths
      b.token[i] = static_cast<token_id>(b.cand[i]);
      b.ridx[i] = static_cast<std::int64_t>(i);
      b.target_predict[i] = static_cast<std::int64_t>(g() % 4);
    }
    for (int s = n - 1; s >= 1; --s) {
      const auto p = o + static_cast<std::size_t>(b.parent[o + static_cast<std::size_t>(s)]);
      b.sib[o + static_cast<std::size_t>(s)] = b.next[p];
      b.next[p] = s;
    }
  }
  return b;
}

std::span<std::byte> aligned(std::vector<std::byte>& storage, std::size_t bytes) {
  storage.assign(bytes + workspace_alignment, std::byte{0});
  const auto p = reinterpret_cast<std::uintptr_t>(storage.data());
  return {storage.data() + (workspace_alignment - p % workspace_alignment) % workspace_alignment, bytes};
}

void BM_linked_to_tree(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  const sglang_batch b = make(n, 4);
  std::vector<node_id> parent(static_cast<std::size_t>(n));
  std::vector<token_id> token(static_cast<std::size_t>(n));
  std::vector<std::int32_t> o2n(static_cast<std::size_t>(n)), n2o(static_cast<std::size_t>(n));
  for (auto _ : state) {
    for (int r = 0; r < batch; ++r) {
      const auto o = static_cast<std::size_t>(r * n);
      std::int32_t count = 0;
      const status st =
          tree_from_linked_list(linked_tree<std::int64_t>{b.cand.data() + o, b.next.data() + o, b.sib.data() + o, n},
                                linked_tree_options{.unused_root = true}, parent, token, o2n, n2o, count);
      benchmark::DoNotOptimize(st);
    }
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * batch * n);
}

void BM_build_tree(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0)), topk = 4;
  // Every selected token is a child of the root's block or of the first selected token.
  const int depth = 2, blocks = topk * (depth - 1) + 1;
  std::vector<std::int64_t> plist(static_cast<std::size_t>(batch * blocks), 0), sel, seq_len(batch, 100);
  for (int r = 0; r < batch; ++r)
    for (int s = 0; s < n - 1; ++s) sel.push_back(s < topk ? s : topk + (s - topk) % (topk * topk));
  std::vector<std::uint8_t> mask(static_cast<std::size_t>(batch * n * n));
  std::vector<std::int64_t> pos(static_cast<std::size_t>(batch * n)), ridx(pos), next(pos), sib(pos);
  const sglang_build_tree_inputs in{batch,        topk,       depth,          n,
                                    plist.data(), sel.data(), seq_len.data(), sglang_tree_mask_mode::qlen_only};
  std::vector<std::byte> storage;
  const auto ws = aligned(storage, sglang_build_tree_workspace_size(in));
  const sglang_build_tree_outputs out{
      mask.data(), static_cast<std::int64_t>(mask.size()), pos.data(), ridx.data(), next.data(), sib.data()};
  if (!sglang_build_tree(in, out, {}, ws).ok()) state.SkipWithError("sglang_build_tree failed");
  for (auto _ : state) {
    benchmark::DoNotOptimize(sglang_build_tree(in, out, {}, ws));
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * batch * n);
}

void BM_greedy_ids(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  const sglang_batch b = make(n, 4);
  std::vector<int> predicts(static_cast<std::size_t>(batch * n)), ai(static_cast<std::size_t>(batch * n)), an(batch);
  const sglang_tree_batch<std::int64_t> tb{batch, n, b.cand.data(), b.ridx.data(), b.next.data(), b.sib.data()};
  const sglang_outputs<int> out{predicts, make_view(ai.data(), batch, n), an};
  std::vector<std::byte> storage;
  const auto ws = aligned(storage, sglang_workspace_size(n));
  for (auto _ : state) {
    benchmark::DoNotOptimize(sglang_verify_tree_greedy<std::int64_t, int>(tb, b.target_predict, n, out, ws));
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * batch * n);
}

// SGLang's target-only coin rule: a batch of 32 trees of n slots, random
// rows of V entries (each slot's row a Dirichlet-like draw), thresholds 1.
// Every request ends with one pass over its last row (copy with the
// rejected children zeroed, tile sums, sample): bytes/s counts those rows
// (batch * V floats per call), the part that grows with V.
void BM_sampling_target_only(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0)), V = static_cast<int>(state.range(1));
  const sglang_batch b = make(n, V);
  std::mt19937_64 g(77);
  std::uniform_real_distribution<float> U(0.0f, 1.0f);
  std::vector<float> probs(b.cand.size() * static_cast<std::size_t>(V));
  for (std::size_t row = 0; row < b.cand.size(); ++row) {
    float* x = probs.data() + row * static_cast<std::size_t>(V);
    double total = 0.0;
    for (int i = 0; i < V; ++i) total += (x[i] = U(g) * U(g) * U(g));
    for (int i = 0; i < V; ++i) x[i] = static_cast<float>(x[i] / total);
  }
  std::vector<float> coins(b.cand.size()), final_coins(batch);
  for (auto& c : coins) c = U(g);
  for (auto& c : final_coins) c = U(g);
  std::vector<int> predicts(static_cast<std::size_t>(batch * n)), ai(static_cast<std::size_t>(batch * n)), an(batch);
  const sglang_tree_batch<std::int64_t> tb{batch, n, b.cand.data(), b.ridx.data(), b.next.data(), b.sib.data()};
  const sglang_outputs<int> out{predicts, make_view(ai.data(), batch, n), an};
  std::vector<std::byte> storage;
  const auto ws = aligned(storage, sglang_sampling_workspace_size(n, V));
  const auto rows = make_view<const float>(probs.data(), batch * n, V);
  for (auto _ : state) {
    benchmark::DoNotOptimize(
        sglang_tree_sampling_target_only<std::int64_t, int>(tb, rows, coins, final_coins, n, {}, out, ws));
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * batch * static_cast<std::int64_t>(V) *
                          static_cast<std::int64_t>(sizeof(float)));
  state.SetItemsProcessed(state.iterations() * batch);
}

// Greedy rows: row s puts its mass on target_predict[s].
std::vector<float> greedy_rows(const sglang_batch& b, int V) {
  std::vector<float> p(b.cand.size() * static_cast<std::size_t>(V), 0.0f);
  for (std::size_t s = 0; s < b.cand.size(); ++s)
    p[s * static_cast<std::size_t>(V) + static_cast<std::size_t>(b.target_predict[s])] = 1.0f;
  return p;
}

void BM_verify_linked(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0)), V = static_cast<int>(state.range(1));
  const sglang_batch b = make(n, V);
  const std::vector<float> p = greedy_rows(b, V);
  std::vector<verify_params> vps(batch);
  for (auto& vp : vps) vp.mode = verify_mode::greedy;
  std::vector<int> predicts(static_cast<std::size_t>(batch * n)), ai(static_cast<std::size_t>(batch * n)), an(batch);
  const sglang_verify_inputs<std::int64_t> in{{batch, n, b.cand.data(), b.ridx.data(), b.next.data(), b.sib.data()},
                                              make_view<const float>(p.data(), batch * n, V),
                                              {},
                                              vps.data(),
                                              nullptr,
                                              0,
                                              n};
  const sglang_outputs<int> out{predicts, make_view(ai.data(), batch, n), an};
  std::vector<std::byte> storage;
  const auto ws = aligned(storage, sglang_verify_tree_workspace_size(n, V));
  for (auto _ : state) {
    benchmark::DoNotOptimize(sglang_verify_tree<std::int64_t, int>(in, out, {}, {}, ws));
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * batch * n);
}

void BM_verify_parent(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0)), V = static_cast<int>(state.range(1));
  const sglang_batch b = make(n, V);
  const std::vector<float> p = greedy_rows(b, V);
  verify_params vp;
  vp.mode = verify_mode::greedy;
  std::vector<std::byte> ws(verify_workspace_size(V, n));
  std::vector<node_id> path(static_cast<std::size_t>(n));
  std::vector<token_id> tokens(static_cast<std::size_t>(n));
  for (auto _ : state) {
    for (int r = 0; r < batch; ++r) {
      const auto o = static_cast<std::size_t>(r * n);
      verify_result res;
      benchmark::DoNotOptimize(verify_tree(tree_view{b.token.data() + o, b.parent.data() + o, nullptr, nullptr, n},
                                           make_view<const float>(p.data() + o * static_cast<std::size_t>(V), n, V), {},
                                           vp, ws, path, tokens, res));
    }
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * batch * n);
}

}  // namespace

BENCHMARK(BM_linked_to_tree)->Arg(16)->Arg(64)->Arg(256);
BENCHMARK(BM_build_tree)->Arg(16)->Arg(64)->Arg(256);
BENCHMARK(BM_greedy_ids)->Arg(16)->Arg(64)->Arg(256);
BENCHMARK(BM_sampling_target_only)->Args({16, 32000})->Args({64, 32000})->Args({16, 128256});
BENCHMARK(BM_verify_linked)->Args({16, 32000})->Args({64, 32000});
BENCHMARK(BM_verify_parent)->Args({16, 32000})->Args({64, 32000});
