// Real rounds of the model demo, then the specdec part of each round timed
// in C++. The rounds come from examples/model_demo.cpp's transformer target
// and drafter (examples/models/*.gguf), decoded with the demo's own pieces
// (models::state, forward, model_drafter, the specdec builders): the i.i.d.
// tree 3,2,2,1 at temperature 1 (sampled_iid, p and q rows) and the top-2
// depth-4 tree at temperature 0 (greedy, logits). Each round's tree, rows
// and committed length are written to a dump that bench_real_round.py replays
// through the Python package; both time the same work on the same inputs:
//   mask     build_positions + build_packed_mask (64-bit words)
//   verify   verify_tree (workspace and outputs preallocated)
//   commit   keep_indices_from_path + the paged KV commit of K and V on the
//            target's own pool shape and block table
// Usage: round_real_cpp <models dir> <dump file> <tokens per config> <reps>
// Prints one line per stage: "cpp <stage> <mean over rounds of the per-round
// median, microseconds>", and "cpp accepted <sum of accepted drafts>".
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "models/model.hpp"
#include "models/speculate.hpp"

namespace {

using models::node_id;
using models::token_id;

struct recorded_round {
  std::int32_t mode = 0;
  std::uint64_t seed = 0;
  std::uint32_t round = 0;
  std::int64_t cache_len = 0;
  std::vector<node_id> parent;
  std::vector<token_id> tokens;
  std::vector<float> p, q;  // n x V; q empty in greedy mode
};

// The loop of models::generate_speculative for the i.i.d. and top-k trees,
// recording each round's inputs to the specdec stages.
std::vector<recorded_round> record(const models::weights& target, const models::weights& draft, bool sampled,
                                   std::int64_t n_tokens) {
  const std::int64_t V = target.cfg.vocab;
  models::spec_options o;
  o.kind = sampled ? models::tree_kind::iid_tree : models::tree_kind::topk_tree;
  o.temperature = sampled ? 1.0f : 0.0f;
  const std::string text =
      "def read_config(path):\n    \"\"\"Read the configuration file at path.\"\"\"\n    with open(";
  const std::vector<token_id> prompt(text.begin(), text.end());
  models::state s(target.cfg, models::cache_capacity);
  models::scratch sc;
  models::model_drafter drafter(draft, o.temperature == 0.0f ? 1.0f : o.temperature);
  const auto head = std::span<const token_id>(prompt).first(prompt.size() - 1);
  models::prefill(target, s, head, sc);
  models::prefill(draft, drafter.st, head, drafter.sc);
  std::vector<token_id> out(prompt.begin(), prompt.end());
  specdec::sampled_tree_options so;
  so.mode = specdec::draft_mode::iid;
  so.vocab_size = V;
  so.widths = o.widths;
  specdec::sampled_tree_builder sampled_builder(so);
  specdec::topk_tree_builder topk({.k = o.topk_k, .depth = o.topk_depth, .vocab_size = V});
  specdec::drafted_tree tree;
  drafter.tree = &tree;
  std::vector<float> p, q;
  std::vector<std::int64_t> positions;
  std::vector<std::uint64_t> mask;
  std::vector<std::byte> ws;
  std::vector<node_id> path(models::max_tree_nodes);
  std::vector<token_id> emitted(models::max_tree_nodes);
  std::vector<recorded_round> rounds;
  specdec::verify_params vp;
  vp.mode = sampled ? specdec::verify_mode::sampled_iid : specdec::verify_mode::greedy;
  vp.seed = o.seed;
  while (static_cast<std::int64_t>(out.size() - prompt.size()) < n_tokens) {
    const auto round = static_cast<std::uint32_t>(rounds.size());
    if (sampled) {
      q.assign(static_cast<std::size_t>(models::max_tree_nodes * V), 1.0f / static_cast<float>(V));
      specdec::draft_round dr;
      dr.root_token = out.back();
      dr.rng = specdec::rng_stream{o.seed, o.request, round};
      dr.q_rows = specdec::make_view<float>(q.data(), models::max_tree_nodes, V);
      specdec::throw_if_error(sampled_builder.build(drafter, dr, tree));
    } else {
      specdec::throw_if_error(topk.build(drafter, out.back(), tree));
    }
    const std::int32_t n = tree.size();
    const auto parent = tree.tree.parents();
    const auto tokens = tree.tree.tokens();
    positions.resize(static_cast<std::size_t>(n));
    specdec::throw_if_error(specdec::build_positions<std::int64_t>(parent, s.cache_len, positions));
    const std::int64_t words = specdec::mask_words_per_row<std::uint64_t>(n);
    mask.resize(static_cast<std::size_t>(n * words));
    specdec::throw_if_error(specdec::build_packed_mask<std::uint64_t>(parent, mask));
    p.resize(static_cast<std::size_t>(n * V));
    models::forward(target, s, models::batch{tokens, positions, parent, mask, words, 0}, p, sc);
    if (sampled) models::softmax_rows(p, V, o.temperature);
    recorded_round r;
    r.mode = static_cast<std::int32_t>(vp.mode);
    r.seed = vp.seed;
    r.round = round;
    r.cache_len = s.cache_len;
    r.parent.assign(parent.begin(), parent.end());
    r.tokens.assign(tokens.begin(), tokens.end());
    r.p = p;
    if (sampled) r.q.assign(q.begin(), q.begin() + n * V);
    rounds.push_back(std::move(r));
    ws.resize(specdec::verify_workspace_size(V, n));
    vp.round = round;
    specdec::verify_result res;
    const auto qv = sampled ? specdec::make_view<const float>(q.data(), n, V) : specdec::view2d<const float>{};
    specdec::throw_if_error(specdec::verify_tree(tree.tree.view(), specdec::make_view<const float>(p.data(), n, V), qv,
                                                 vp, ws, path, emitted, res));
    const auto acc = static_cast<std::size_t>(res.accepted) + 1;
    models::commit(target, s, parent, std::span<const node_id>(path).first(acc));
    std::vector<token_id> kept{out.back()};
    kept.insert(kept.end(), emitted.begin(), emitted.begin() + res.accepted);
    drafter.catch_up(kept);
    out.insert(out.end(), emitted.begin(), emitted.begin() + static_cast<std::ptrdiff_t>(acc));
  }
  return rounds;
}

template <class T>
void put(std::ofstream& f, const T& v) {
  f.write(reinterpret_cast<const char*>(&v), sizeof(T));
}
template <class T>
void put_all(std::ofstream& f, const std::vector<T>& v) {
  f.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(T)));
}

double median(std::vector<double>& t) {
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

double now_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s <models dir> <dump file> <tokens per config> <reps>\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  const std::int64_t n_tokens = std::stoll(argv[3]);
  const int reps = std::stoi(argv[4]);
  const models::weights target = models::load(dir + "/target.gguf");
  const models::weights draft = models::load(dir + "/drafter.gguf");
  std::vector<recorded_round> rounds = record(target, draft, true, n_tokens);
  for (auto& r : record(target, draft, false, n_tokens)) rounds.push_back(std::move(r));
  const std::int64_t V = target.cfg.vocab;
  models::state s(target.cfg, models::cache_capacity);  // the pool shape and block table the commit works on

  // Dump: header, block table, then the rounds.
  std::ofstream f(argv[2], std::ios::binary);
  put(f, static_cast<std::int64_t>(rounds.size()));
  put(f, V);
  for (const std::int64_t v : {s.pages, s.attn_layers, models::state::page, s.kv_heads, s.head_dim}) put(f, v);
  put_all(f, s.block_table);
  for (const auto& r : rounds) {
    put(f, static_cast<std::int64_t>(r.parent.size()));
    put(f, static_cast<std::int64_t>(r.mode));
    put(f, r.seed);
    put(f, static_cast<std::int64_t>(r.round));
    put(f, r.cache_len);
    put(f, static_cast<std::int64_t>(r.q.empty() ? 0 : 1));
    put_all(f, r.parent);
    put_all(f, r.tokens);
    put_all(f, r.p);
    put_all(f, r.q);
  }
  f.close();

  // Timing: each stage of each round `reps` times; per-round medians.
  std::vector<std::int64_t> pos(models::max_tree_nodes), keep(models::max_tree_nodes);
  std::vector<std::uint64_t> mask(static_cast<std::size_t>(models::max_tree_nodes * 2));
  std::vector<std::byte> ws(specdec::verify_workspace_size(V, models::max_tree_nodes));
  std::vector<node_id> path(models::max_tree_nodes);
  std::vector<token_id> emitted(models::max_tree_nodes);
  const specdec::kv_tensor<float> tensors[2] = {s.k_tensor(), s.v_tensor()};
  double sum_mask = 0, sum_verify = 0, sum_commit = 0, sum_total = 0;
  std::int64_t accepted = 0;
  for (const auto& r : rounds) {
    const auto n = static_cast<std::int32_t>(r.parent.size());
    const std::span<const node_id> parent(r.parent);
    specdec::verify_params vp;
    vp.mode = static_cast<specdec::verify_mode>(r.mode);
    vp.seed = r.seed;
    vp.round = r.round;
    const specdec::tree_view tv{r.tokens.data(), r.parent.data(), nullptr, nullptr, n};
    const auto pv = specdec::make_view<const float>(r.p.data(), n, V);
    const auto qv = r.q.empty() ? specdec::view2d<const float>{} : specdec::make_view<const float>(r.q.data(), n, V);
    std::vector<double> tm, tv_, tc, tt;
    specdec::verify_result res{};
    for (int it = 0; it < reps; ++it) {
      const double t0 = now_us();
      specdec::throw_if_error(specdec::build_positions<std::int64_t>(parent, r.cache_len, std::span(pos).first(n)));
      specdec::throw_if_error(specdec::build_packed_mask<std::uint64_t>(
          parent, std::span(mask).first(static_cast<std::size_t>(n * specdec::mask_words_per_row<std::uint64_t>(n)))));
      const double t1 = now_us();
      specdec::throw_if_error(specdec::verify_tree(tv, pv, qv, vp, ws, path, emitted, res));
      const double t2 = now_us();
      std::int32_t kept = 0;
      const auto acc = static_cast<std::size_t>(res.accepted) + 1;
      specdec::throw_if_error(specdec::keep_indices_from_path(parent, std::span<const node_id>(path).first(acc), {},
                                                              r.cache_len, keep, kept));
      specdec::throw_if_error(specdec::commit_kv<float>(
          tensors, s.map(), r.cache_len, std::span<const std::int64_t>(keep).first(static_cast<std::size_t>(kept))));
      const double t3 = now_us();
      tm.push_back(t1 - t0);
      tv_.push_back(t2 - t1);
      tc.push_back(t3 - t2);
      tt.push_back(t3 - t0);
    }
    accepted += res.accepted;
    sum_mask += median(tm);
    sum_verify += median(tv_);
    sum_commit += median(tc);
    sum_total += median(tt);
  }
  const double R = static_cast<double>(rounds.size());
  std::printf("cpp rounds %zu\ncpp accepted %lld\n", rounds.size(), static_cast<long long>(accepted));
  std::printf("cpp mask %.3f\ncpp verify %.3f\ncpp commit %.3f\ncpp total %.3f\n", sum_mask / R, sum_verify / R,
              sum_commit / R, sum_total / R);
  return 0;
}
