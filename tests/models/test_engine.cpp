// The batched example engine (examples/models/model.hpp: packed weights,
// page-wise attention products, vectorised exp, RoPE tables) against the
// reference forward it replaced (reference_forward.hpp), logits compared
// on the same batches: prefill, chains of 1-32 nodes, branching trees (one
// and two mask words), drafter-style level calls into later tree slots,
// and decoding after tree commits and single-token commits, for the
// transformer target, the drafter and the hybrid (Mamba2 + attention); in
// f32 and, where the build has them, with bf16 products.
//
// Tolerance: |new - reference| <= 1e-4 * max(1, max |reference logit|) on
// every logit of a batch (the logits are O(10), so about 1e-3 absolute).
// The two engines sum the same products in different orders (blocked
// kernels vs Eigen's GEMM/GEMV, eight partial sums in norms and softmax)
// and the new exp is a polynomial within 2.3e-7 relative; the measured
// worst case is printed (about 1e-6 relative). With bf16 products (where
// the build has AVX512-BF16) every weight and every row entering a product
// is rounded to 8 significant bits: tolerance 1e-2 (measured worst 2.8e-3
// to 4.8e-3 relative over the four models), SSM states within 1e-2.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "models/model.hpp"
#include "models/reference_forward.hpp"
#include "models/speculate.hpp"

namespace {

using models::node_id;
using models::token_id;

const std::string dir =
    std::getenv("SPECDEC_MODELS_DIR") != nullptr ? std::getenv("SPECDEC_MODELS_DIR") : SPECDEC_MODELS_DIR;
constexpr std::int64_t capacity = 512;
using models::kernel::precision;

// Logit tolerance relative to max(1, max |reference logit|), and the SSM
// state tolerance, per product precision (see the top of the file).
float logit_tolerance(precision p) { return p == precision::bf16 ? 1e-2f : 1e-4f; }
float state_tolerance(precision p) { return p == precision::bf16 ? 1e-2f : 1e-4f; }

// Both engines on one sequence, fed identical batches.
struct pair_run {
  const models::weights& w;
  const reference::weights& rw;
  models::state s;
  reference::state rs;
  models::scratch sc;
  reference::scratch rsc;
  std::string name;
  float tol;
  float worst = 0;  // largest |new - reference| / max(1, max |reference|) seen

  pair_run(const models::weights& nw, const reference::weights& r, std::string n)
      : w(nw), rw(r), s(nw.cfg, capacity), rs(r.cfg, capacity), name(std::move(n)), tol(logit_tolerance(nw.prec)) {}

  // Runs the batch on both; checks every logit; returns the new engine's logits.
  std::vector<float> run(std::span<const token_id> tokens, std::span<const std::int64_t> pos,
                         std::span<const node_id> parent, std::span<const std::uint64_t> mask, std::int64_t words,
                         std::int32_t first_slot, const std::string& what) {
    const auto n = tokens.size();
    const auto V = static_cast<std::size_t>(w.cfg.vocab);
    std::vector<float> got(n * V), want(n * V);
    models::forward(w, s, models::batch{tokens, pos, parent, mask, words, first_slot}, got, sc);
    reference::forward(rw, rs, reference::batch{tokens, pos, parent, mask, words, first_slot}, want, rsc);
    float diff = 0, scale = 1;
    for (std::size_t i = 0; i < got.size(); ++i) {
      diff = std::max(diff, std::abs(got[i] - want[i]));
      scale = std::max(scale, std::abs(want[i]));
    }
    worst = std::max(worst, diff / scale);
    INFO(name << ": " << what << ", n = " << n << ", max |diff| = " << diff << ", max |logit| = " << scale);
    CHECK(diff <= tol * scale);
    return got;
  }

  void commit(std::span<const node_id> parent, std::span<const node_id> path) {
    models::commit(w, s, parent, path);
    reference::commit(rw, rs, parent, path);
    REQUIRE(s.cache_len == rs.cache_len);
  }
};

struct tree_inputs {
  std::vector<node_id> parent;
  std::vector<std::int64_t> pos;
  std::vector<std::uint64_t> mask;
  std::int64_t words = 1;
};
tree_inputs make_tree(std::vector<node_id> parent, std::int64_t cache_len) {
  tree_inputs t;
  const auto n = static_cast<std::int32_t>(parent.size());
  t.parent = std::move(parent);
  t.pos.resize(static_cast<std::size_t>(n));
  t.words = specdec::mask_words_per_row<std::uint64_t>(n);
  t.mask.resize(static_cast<std::size_t>(n * t.words));
  specdec::throw_if_error(specdec::build_packed_mask<std::uint64_t>(t.parent, t.mask));
  specdec::throw_if_error(specdec::build_positions<std::int64_t>(t.parent, cache_len, t.pos));
  return t;
}
std::vector<node_id> chain_parents(std::int32_t n) {
  std::vector<node_id> p;
  for (std::int32_t i = 0; i < n; ++i) p.push_back(i - 1);
  return p;
}
// A random topological tree with branching: node i's parent is uniform in [max(0, i - 5), i).
std::vector<node_id> random_tree(std::int32_t n, std::mt19937& rng) {
  std::vector<node_id> parent{-1};
  for (std::int32_t i = 1; i < n; ++i)
    parent.push_back(std::uniform_int_distribution<node_id>(std::max(0, i - 5), i - 1)(rng));
  return parent;
}
std::vector<token_id> random_tokens(std::size_t n, token_id first, std::mt19937& rng) {
  std::vector<token_id> t{first};
  while (t.size() < n) t.push_back(std::uniform_int_distribution<token_id>(32, 126)(rng));
  return t;
}

const std::string prompt_text =
    "def read_config(path):\n    \"\"\"Read the configuration file at path.\"\"\"\n    with open(";

void check_model(const std::string& name, precision prec) {
  const models::weights w = models::load(dir + "/" + name + ".gguf", prec);
  const reference::weights rw = reference::load(dir + "/" + name + ".gguf");
  pair_run p(w, rw, name + (prec == precision::bf16 ? " (bf16)" : ""));
  std::mt19937 rng(17);
  const std::vector<token_id> prompt(prompt_text.begin(), prompt_text.end());
  // Every shipped model stores f16 matrices: f16 panels where the CPU
  // converts them (this test is built with -march=native), f32 elsewhere;
  // bf16 pair panels when asked.
  if (prec == precision::bf16)
    CHECK(w.output.is_bf16());
  else
    CHECK(w.output.is_half() == models::kernel::f16_panels);
  std::printf("engine: %s output matrix in %s panels\n", p.name.c_str(),
              w.output.is_bf16()   ? "bf16"
              : w.output.is_half() ? "f16"
                                   : "f32");

  // Prefill as one chain (84 nodes: two mask words), every row compared.
  const std::vector<token_id> head(prompt.begin(), prompt.end() - 1);
  auto t = make_tree(chain_parents(static_cast<std::int32_t>(head.size())), 0);
  p.run(head, t.pos, t.parent, t.mask, t.words, 0, "prefill");
  std::vector<node_id> all(head.size());
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = static_cast<node_id>(i);
  p.commit(t.parent, all);
  token_id last = prompt.back();

  // Chains and branching trees after the prompt (forward only: the cache stays as it was).
  for (const std::int32_t n : {1, 2, 3, 4, 5, 8, 16, 32}) {
    const auto c = make_tree(chain_parents(n), p.s.cache_len);
    p.run(random_tokens(static_cast<std::size_t>(n), last, rng), c.pos, c.parent, c.mask, c.words, 0, "chain");
  }
  for (const std::int32_t n : {3, 7, 16, 33, 70}) {
    const auto c = make_tree(random_tree(n, rng), p.s.cache_len);
    p.run(random_tokens(static_cast<std::size_t>(n), last, rng), c.pos, c.parent, c.mask, c.words, 0, "tree");
  }

  // Drafter-style level calls: level k runs in slots after the earlier levels
  // (first_slot > 0) and attends to them through its mask rows.
  if (w.cfg.kinds.find('m') == std::string::npos) {
    constexpr std::int64_t words = 2;
    std::vector<std::uint64_t> rows;  // mask rows of every slot so far
    std::vector<std::int32_t> level_of_slot;
    std::int32_t slots = 0;
    std::vector<std::int32_t> prev_level;
    for (std::int32_t depth = 0; depth < 4; ++depth) {
      const std::int32_t n = depth == 0 ? 1 : 3;
      std::vector<token_id> tok;
      std::vector<std::int64_t> pos(static_cast<std::size_t>(n), p.s.cache_len + depth);
      std::vector<node_id> par(static_cast<std::size_t>(n), -1);
      std::vector<std::uint64_t> mask(static_cast<std::size_t>(n * words), 0);
      std::vector<std::int32_t> this_level;
      for (std::int32_t i = 0; i < n; ++i) {
        const std::int32_t k = slots + i;
        if (!prev_level.empty()) {
          const std::int32_t from = prev_level[static_cast<std::size_t>(i) % prev_level.size()];
          std::copy_n(rows.begin() + from * words, words, mask.begin() + i * words);
        }
        mask[static_cast<std::size_t>(i * words + k / 64)] |= std::uint64_t{1} << (k % 64);
        tok.push_back(depth == 0 ? last : std::uniform_int_distribution<token_id>(32, 126)(rng));
        this_level.push_back(k);
      }
      rows.insert(rows.end(), mask.begin(), mask.end());
      p.run(tok, pos, par, mask, words, slots, "level " + std::to_string(depth));
      slots += n;
      prev_level = this_level;
    }
  }

  // Decoding after commits: tree rounds that keep a random root path, then single tokens.
  for (int round = 0; round < 4; ++round) {
    const std::int32_t n = round % 2 == 0 ? 12 : 40;
    const auto c = make_tree(random_tree(n, rng), p.s.cache_len);
    const auto tok = random_tokens(static_cast<std::size_t>(n), last, rng);
    p.run(tok, c.pos, c.parent, c.mask, c.words, 0, "round " + std::to_string(round));
    std::vector<node_id> path;
    for (node_id u = std::uniform_int_distribution<node_id>(n / 2, n - 1)(rng); u >= 0;
         u = c.parent[static_cast<std::size_t>(u)])
      path.insert(path.begin(), u);
    p.commit(c.parent, path);
    last = std::uniform_int_distribution<token_id>(32, 126)(rng);  // the bonus token
  }
  for (int step = 0; step < 6; ++step) {
    const std::int64_t pos = p.s.cache_len;
    const node_id root[1] = {-1};
    const std::uint64_t m[1] = {1};
    const auto logits = p.run({&last, 1}, {&pos, 1}, root, m, 1, 0, "decode step " + std::to_string(step));
    p.commit(root, std::vector<node_id>{0});
    last = static_cast<token_id>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }
  for (std::size_t l = 0; l < p.s.ssm_state.size(); ++l) {
    CHECK(p.s.ssm_state[l].size() == p.rs.ssm_state[l].size());
    float d = 0;
    for (std::size_t i = 0; i < p.s.ssm_state[l].size(); ++i)
      d = std::max(d, std::abs(p.s.ssm_state[l][i] - p.rs.ssm_state[l][i]));
    CHECK(d < state_tolerance(prec));
  }
  std::printf("engine: %s worst |new - reference| / max(1, max |logit|) = %.3g (tolerance %.0e)\n", p.name.c_str(),
              static_cast<double>(p.worst), static_cast<double>(p.tol));
}

// Both precisions: bf16 where the build has it (a -march=native build on a
// CPU with AVX512-BF16), skipped with a line elsewhere.
void check_model(const std::string& name) {
  check_model(name, precision::f32);
  if (models::kernel::bf16_products)
    check_model(name, precision::bf16);
  else
    std::printf("engine: %s in bf16 skipped (this build has no AVX512-BF16)\n", name.c_str());
}

}  // namespace

TEST_CASE("batched engine == reference forward: transformer target", "[models][engine]") { check_model("target"); }
TEST_CASE("batched engine == reference forward: drafter", "[models][engine]") { check_model("drafter"); }
TEST_CASE("batched engine == reference forward: hybrid's drafter", "[models][engine]") {
  check_model("hybrid_drafter");
}
TEST_CASE("batched engine == reference forward: hybrid (Mamba2 + attention)", "[models][engine]") {
  check_model("hybrid");
}

TEST_CASE("batched engine: exp and the packed product against plain loops", "[models][engine]") {
  std::vector<float> x;
  for (float v = -120.0f; v < 88.0f; v += 0.37f) x.push_back(v);
  x.push_back(-INFINITY);
  auto e = x;
  models::detail::exp_inplace(e.data(), static_cast<std::int64_t>(e.size()));
  for (std::size_t i = 0; i < x.size(); ++i) {
    INFO("x = " << x[i]);
    if (x[i] < -104.0f)
      CHECK(e[i] == 0.0f);
    else
      CHECK(std::abs(e[i] - std::exp(x[i])) <= 3e-7f * std::exp(x[i]) + 1e-44f);
  }
  // Every row count, accumulate or not; 37 columns (two full panels and a
  // partial one) and 112 (seven full panels: four, then three together).
  // Weights of any float value (f32 panels), then weights that are all
  // f16 values (f16 panels where the build converts in hardware).
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1, 1);
  const std::int64_t in = 29;
  for (const std::int64_t out : {37, 112})
    for (const bool halves : {false, true}) {
      std::vector<float> wt(static_cast<std::size_t>(out * in));
      for (auto& v : wt) v = halves ? std::round(u(rng) * 256.0f) / 256.0f : u(rng);
      const auto packed = models::kernel::pack({{wt.data(), out}}, in);
      CHECK(packed.is_half() == (halves && models::kernel::f16_panels));
      for (std::int64_t n = 1; n <= 14; ++n)
        for (const bool acc : {false, true}) {
          std::vector<float> xs(static_cast<std::size_t>(n * in)), y(static_cast<std::size_t>(n * out), 0.5f);
          for (auto& v : xs) v = u(rng);
          auto want = y;
          for (std::int64_t r = 0; r < n; ++r)
            for (std::int64_t o = 0; o < out; ++o) {
              float d = 0;
              for (std::int64_t k = 0; k < in; ++k)
                d += xs[static_cast<std::size_t>(r * in + k)] * wt[static_cast<std::size_t>(o * in + k)];
              auto& dst = want[static_cast<std::size_t>(r * out + o)];
              dst = acc ? dst + d : d;
            }
          models::kernel::matmul(n, xs.data(), in, packed, y.data(), out, acc);
          float diff = 0;
          for (std::size_t i = 0; i < y.size(); ++i) diff = std::max(diff, std::abs(y[i] - want[i]));
          INFO("n = " << n << ", columns = " << out << ", accumulate = " << acc << ", f16 values = " << halves);
          CHECK(diff < 1e-5f);
        }
    }
}

TEST_CASE("batched engine: the bf16 product against a scalar twin, and rows independent of the batch",
          "[models][engine]") {
  if (!models::kernel::bf16_products) {
    std::printf("engine: bf16 product skipped (this build has no AVX512-BF16)\n");
    return;
  }
  using models::kernel::from_bf16;
  using models::kernel::to_bf16;
  // Rounding: nearest even, NaN stays NaN.
  CHECK(to_bf16(1.0f) == 0x3f80);
  CHECK(to_bf16(1.0f + 0x1p-8f) == 0x3f80);            // a tie rounds to the even 1.0
  CHECK(to_bf16(1.0f + 0x1p-8f + 0x1p-9f) == 0x3f81);  // above the tie rounds up
  CHECK(to_bf16(1.0f + 3 * 0x1p-8f) == 0x3f82);        // a tie from an odd mantissa rounds up
  CHECK(std::isnan(from_bf16(to_bf16(NAN))));
  CHECK(from_bf16(to_bf16(-2.5f)) == -2.5f);
  // 37 columns (a partial panel), 112 (seven panels: four, then three), 160
  // (ten: one row takes eight, then two); 29 inputs (an odd count: the last
  // pair's high half is padding) and 64; rows 1..14; accumulate or not.
  // Twin: the products of the bf16-rounded inputs summed in double; the
  // kernel sums in f32, so |kernel - twin| <= 1e-6 * sum |products| (+ 1e-30).
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-1, 1);
  for (const std::int64_t in : {29, 64})
    for (const std::int64_t out : {37, 112, 160}) {
      std::vector<float> wt(static_cast<std::size_t>(out * in));
      for (auto& v : wt) v = u(rng);
      const auto packed = models::kernel::pack({{wt.data(), out}}, in, precision::bf16);
      REQUIRE(packed.is_bf16());
      for (std::int64_t n = 1; n <= 14; ++n)
        for (const bool acc : {false, true}) {
          std::vector<float> xs(static_cast<std::size_t>(n * in)), y(static_cast<std::size_t>(n * out), 0.5f);
          for (auto& v : xs) v = u(rng);
          models::kernel::matmul(n, xs.data(), in, packed, y.data(), out, acc);
          double worst = 0;
          bool same_as_one_row = true;
          for (std::int64_t r = 0; r < n; ++r) {
            std::vector<float> y1(static_cast<std::size_t>(out), 0.5f);
            models::kernel::matmul(1, xs.data() + r * in, in, packed, y1.data(), out, acc);
            for (std::int64_t o = 0; o < out; ++o) {
              double d = 0, mag = 0;
              for (std::int64_t k = 0; k < in; ++k) {
                const double prod = static_cast<double>(from_bf16(to_bf16(xs[static_cast<std::size_t>(r * in + k)]))) *
                                    from_bf16(to_bf16(wt[static_cast<std::size_t>(o * in + k)]));
                d += prod;
                mag += std::abs(prod);
              }
              const double want = acc ? 0.5 + d : d;
              const float got = y[static_cast<std::size_t>(r * out + o)];
              worst = std::max(worst, std::abs(got - want) / (mag + 1e-30));
              same_as_one_row = same_as_one_row && got == y1[static_cast<std::size_t>(o)];
            }
          }
          INFO("n = " << n << ", inputs = " << in << ", columns = " << out << ", accumulate = " << acc);
          CHECK(worst <= 1e-6);
          CHECK(same_as_one_row);
        }
    }
}

TEST_CASE("batched engine: greedy speculative decoding in bf16 equals greedy autoregressive decoding in bf16",
          "[models][engine]") {
  // A tree pass gives each node the logits of a one-node pass bit for bit
  // (every product row is summed the same way whatever the batch), so the
  // speculative output is the autoregressive one in either precision.
  if (!models::kernel::bf16_products) {
    std::printf("engine: bf16 greedy decoding skipped (this build has no AVX512-BF16)\n");
    return;
  }
  const std::vector<token_id> prompt(prompt_text.begin(), prompt_text.end());
  for (const auto& [target, drafter] : {std::pair{"target", "drafter"}, std::pair{"hybrid", "hybrid_drafter"}}) {
    const auto w = models::load(dir + "/" + target + ".gguf", precision::bf16);
    const auto d = models::load(dir + "/" + drafter + ".gguf", precision::bf16);
    models::spec_options o;
    o.temperature = 0.0f;
    models::decode_stats ar_st;
    const auto ar = models::generate_autoregressive(w, prompt, 64, o, ar_st);
    for (const auto kind : {models::tree_kind::chain, models::tree_kind::iid_tree, models::tree_kind::topk_tree,
                            models::tree_kind::beam_tree, models::tree_kind::planned, models::tree_kind::lookup,
                            models::tree_kind::planned_lookup}) {
      o.kind = kind;
      models::decode_stats st;
      const auto spec = models::generate_speculative(w, d, prompt, 64, o, st);
      INFO(target << " tree kind " << static_cast<int>(kind) << ": " << st.target_calls << " target calls");
      CHECK(spec == ar);
    }
  }
}
