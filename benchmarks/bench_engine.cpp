// The example engine's forward pass (examples/models/model.hpp) over N tree
// nodes, N = 1, 2, 4, 8, 16, 32, as a chain and as a binary tree, after a
// 110-byte prefill, for the transformer target and the hybrid; the same
// passes through the reference forward it replaced
// (tests/models/reference_forward.hpp) in the same run; and, next to them,
// the matrix products alone: one forward's products with the packed kernel
// (models::kernel::matmul), and single products of the model's shapes with
// the packed kernel (f32 panels, and f16 panels as the shipped models get
// them), Eigen and (when found at build time) libxsmm, next to the core's
// multiply-add peak (peak/fma) measured in the same run. Where
// the build has AVX512-BF16 (the bench preset's -march=native on such a
// CPU), the forward, product and packed-GEMM rows also run with bf16
// products (models::kernel::precision::bf16; ".../bf16" rows).
//
// Each benchmark times every call with the thread's CPU clock and reports
// the median (t_us), GFLOP/s (the multiply-adds of all matrix products plus
// attention's two products) and ratio = t(N) / t(1). For the forward rows
// t(1) (t1_us) is the median of one-node calls interleaved with the N-node
// calls (blocks of 8 every 8 calls), so both medians see the same machine
// load; for the product rows it is the N = 1 row of the same group.
#include <benchmark/benchmark.h>

#include <Eigen/Dense>
#include <algorithm>
#include <ctime>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "models/model.hpp"
#include "models/reference_forward.hpp"
#ifdef SPECDEC_BENCH_LIBXSMM
#include <libxsmm.h>
#endif

#ifndef SPECDEC_MODELS_DIR
#define SPECDEC_MODELS_DIR "examples/models"
#endif

namespace {

using models::node_id;
using models::token_id;
constexpr std::int64_t capacity = 512;  // as models::cache_capacity (speculate.hpp)

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Times `f` once per benchmark iteration; returns the median in seconds.
template <class F>
double median_per_call(benchmark::State& st, F&& f) {
  std::vector<double> t;
  for (auto _ : st) {
    const double t0 = thread_cpu_seconds();
    f();
    t.push_back(thread_cpu_seconds() - t0);
  }
  if (t.empty()) return 0;
  std::nth_element(t.begin(), t.begin() + static_cast<std::ptrdiff_t>(t.size() / 2), t.end());
  return t[t.size() / 2];
}

double median(std::vector<double>& t) {
  if (t.empty()) return 0;
  std::nth_element(t.begin(), t.begin() + static_cast<std::ptrdiff_t>(t.size() / 2), t.end());
  return t[t.size() / 2];
}

// Times `f` (the N-node call) once per iteration and, in blocks of 8 calls
// every 8 iterations, `f1` (the one-node call): the two medians come from
// the same stretch of time, so their ratio survives a shared machine whose
// load drifts between benchmarks. (The first one-node call after N-node
// calls pays for the caches those evicted; the block median leaves it out.)
template <class F, class F1>
std::pair<double, double> paired_medians(benchmark::State& st, F&& f, F1&& f1) {
  std::vector<double> t, t1;
  std::int64_t i = 0;
  for (auto _ : st) {
    double t0 = thread_cpu_seconds();
    f();
    t.push_back(thread_cpu_seconds() - t0);
    if (++i % 8 == 0)
      for (int k = 0; k < 8; ++k) {
        t0 = thread_cpu_seconds();
        f1();
        t1.push_back(thread_cpu_seconds() - t0);
      }
  }
  return {median(t), median(t1)};
}

std::map<std::string, double>& t1_of() {
  static std::map<std::string, double> m;
  return m;
}

const std::string prefill_text =
    "import os\nimport sys\n\ndef main(argv):\n    \"\"\"Parse the arguments and run.\"\"\"\n    for arg in "
    "argv[1:]:\n        ";

using models::kernel::precision;

template <class W>
const W& load_cached(const std::string& name, precision prec = precision::f32) {
  static std::map<std::pair<std::string, precision>, std::unique_ptr<W>> cache;
  auto& p = cache[{name, prec}];
  if (!p) {
    if constexpr (std::is_same_v<W, models::weights>)
      p = std::make_unique<W>(models::load(std::string(SPECDEC_MODELS_DIR) + "/" + name + ".gguf", prec));
    else
      p = std::make_unique<W>(reference::load(std::string(SPECDEC_MODELS_DIR) + "/" + name + ".gguf"));
  }
  return *p;
}

struct tree_inputs {
  std::vector<token_id> tokens;
  std::vector<node_id> parent;
  std::vector<std::int64_t> pos;
  std::vector<std::uint64_t> mask;
  std::int64_t words = 1;
};
tree_inputs make_inputs(std::int32_t n, bool tree, std::int64_t cache_len) {
  tree_inputs t;
  for (std::int32_t i = 0; i < n; ++i) {
    t.parent.push_back(tree ? (i - 1) / 2 : i - 1);  // binary tree (0 -> 1, 2; 1 -> 3, 4; ...) or chain
    if (i == 0) t.parent.back() = -1;
    t.tokens.push_back(static_cast<token_id>('a' + i % 26));
  }
  t.pos.resize(static_cast<std::size_t>(n));
  t.words = specdec::mask_words_per_row<std::uint64_t>(n);
  t.mask.resize(static_cast<std::size_t>(n * t.words));
  specdec::throw_if_error(specdec::build_packed_mask<std::uint64_t>(t.parent, t.mask));
  specdec::throw_if_error(specdec::build_positions<std::int64_t>(t.parent, cache_len, t.pos));
  return t;
}

// Multiply-adds x 2 of one forward: every matrix product, plus QK^T and PV over the keys each node sees.
double forward_flops(const models::weights& w, std::int64_t n, std::int64_t cache_len, const tree_inputs& t) {
  double f = 0;
  for (const auto& L : w.layers)
    for (const auto* m : {&L.qkv, &L.wo, &L.in_proj, &L.out_proj, &L.gate_up, &L.down})
      f += 2.0 * static_cast<double>(n * m->rows * m->cols);
  f += 2.0 * static_cast<double>(n * w.output.rows * w.output.cols);
  double keys = 0;
  for (std::int64_t r = 0; r < n; ++r) {
    std::int64_t seen = 0;
    for (std::int64_t j = 0; j < n; ++j) seen += specdec::mask_test(t.mask.data() + r * t.words, j) ? 1 : 0;
    keys += static_cast<double>(cache_len + seen);
  }
  const auto attn = static_cast<double>(w.cfg.attention_layers() * w.cfg.heads * w.cfg.head_dim);
  return f + 4.0 * attn * keys;
}

void report(benchmark::State& st, const std::string& key, std::int64_t n, double t, double flops, double t1 = 0) {
  if (n == 1) t1_of()[key] = t;
  if (t1 == 0 && t1_of().count(key) != 0) t1 = t1_of()[key];
  st.counters["t_us"] = t * 1e6;
  st.counters["t1_us"] = t1 * 1e6;
  st.counters["ratio"] = t1 > 0 ? t / t1 : 0.0;
  st.counters["GFLOP/s"] = t > 0 ? flops / t * 1e-9 : 0.0;
}

// The batched engine and the reference forward have the same API in two
// namespaces: one timing routine for both.
struct batched_api {
  using weights = models::weights;
  using state = models::state;
  using scratch = models::scratch;
  using batch = models::batch;
  static void prefill(const weights& w, state& s, std::span<const token_id> t, scratch& sc) {
    models::prefill(w, s, t, sc);
  }
  static void forward(const weights& w, state& s, const batch& b, std::span<float> l, scratch& sc) {
    models::forward(w, s, b, l, sc);
  }
};
struct reference_api {
  using weights = reference::weights;
  using state = reference::state;
  using scratch = reference::scratch;
  using batch = reference::batch;
  static void prefill(const weights& w, state& s, std::span<const token_id> t, scratch& sc) {
    reference::prefill(w, s, t, sc);
  }
  static void forward(const weights& w, state& s, const batch& b, std::span<float> l, scratch& sc) {
    reference::forward(w, s, b, l, sc);
  }
};

// Paired medians of one forward over n nodes and over the root alone, after the prefill.
template <class E>
std::pair<double, double> time_forward(benchmark::State& st, const typename E::weights& w, std::int32_t n, bool tree,
                                       std::int64_t& cache_len, tree_inputs& in) {
  const std::vector<token_id> head(prefill_text.begin(), prefill_text.end());
  std::vector<float> logits(static_cast<std::size_t>(n * w.cfg.vocab));
  typename E::state s(w.cfg, capacity);
  typename E::scratch sc;
  E::prefill(w, s, head, sc);
  cache_len = s.cache_len;
  in = make_inputs(n, tree, cache_len);
  const typename E::batch b{in.tokens, in.pos, in.parent, in.mask, in.words, 0};
  const typename E::batch b1{std::span(in.tokens).first(1),
                             std::span(in.pos).first(1),
                             std::span(in.parent).first(1),
                             std::span(in.mask).first(static_cast<std::size_t>(in.words)),
                             in.words,
                             0};
  // The forward leaves the committed cache as it was: every call does the same work.
  return paired_medians(
      st, [&] { E::forward(w, s, b, logits, sc); }, [&] { E::forward(w, s, b1, logits, sc); });
}

// engine: "old" (the reference forward), "new" (the batched engine), "bf16" (its bf16 products).
void bm_forward(benchmark::State& st, const std::string& model, bool tree, const std::string& engine) {
  const auto n = static_cast<std::int32_t>(st.range(0));
  const models::weights& w = load_cached<models::weights>(model, engine == "bf16" ? precision::bf16 : precision::f32);
  std::int64_t cache_len = 0;
  tree_inputs in;
  const auto [t, t1] =
      engine == "old" ? time_forward<reference_api>(st, load_cached<reference::weights>(model), n, tree, cache_len, in)
                      : time_forward<batched_api>(st, w, n, tree, cache_len, in);
  report(st, model + "/" + engine, n, t, forward_flops(w, n, cache_len, in), t1);
}

// Every matrix product of one forward with the packed kernel, nothing else.
void bm_products(benchmark::State& st, const std::string& model, precision prec) {
  const auto n = st.range(0);
  const models::weights& w = load_cached<models::weights>(model, prec);
  std::vector<float> x(static_cast<std::size_t>(n * 2048), 0.01f), y(static_cast<std::size_t>(n * 2048));
  std::vector<const models::kernel::packed_matrix*> all;
  for (const auto& L : w.layers)
    for (const auto* m : {&L.qkv, &L.wo, &L.in_proj, &L.out_proj, &L.gate_up, &L.down})
      if (m->rows > 0) all.push_back(m);
  all.push_back(&w.output);
  double flops = 0;
  for (const auto* m : all) flops += 2.0 * static_cast<double>(n * m->rows * m->cols);
  const double t = median_per_call(st, [&] {
    for (const auto* m : all) models::kernel::matmul(n, x.data(), m->cols, *m, y.data(), m->rows);
    benchmark::DoNotOptimize(y.data());
  });
  report(st, model + "/products" + (prec == precision::bf16 ? "/bf16" : ""), n, t, flops);
}

// One product y[N, out] = x[N, in] W^T of the model's shapes, three ways.
// packed: f32 panels (random weights are not f16 values); packed_f16: the
// same weights rounded to f16 values, so that pack() keeps f16 panels as it
// does for the shipped models (F16C builds only).
enum class gemm_impl { packed, eigen, libxsmm, packed_bf16, packed_f16 };
void bm_gemm(benchmark::State& st, std::int64_t out, std::int64_t in, gemm_impl impl) {
  using rm = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const auto n = st.range(0);
  rm w = rm::Random(out, in);
  const rm x = rm::Random(n, in);
  if (impl == gemm_impl::packed_f16)
    for (Eigen::Index i = 0; i < w.size(); ++i) w.data()[i] = Eigen::half(w.data()[i]);
  rm y(n, out);
  double t = 0;
  if (impl == gemm_impl::packed || impl == gemm_impl::packed_bf16 || impl == gemm_impl::packed_f16) {
    const auto p =
        models::kernel::pack({{w.data(), out}}, in, impl == gemm_impl::packed_bf16 ? precision::bf16 : precision::f32);
    if (impl == gemm_impl::packed_f16 && !p.is_half()) {
      st.SkipWithError("no f16 panels in this build (no F16C)");
      return;
    }
    t = median_per_call(st, [&] {
      models::kernel::matmul(n, x.data(), in, p, y.data(), out);
      benchmark::DoNotOptimize(y.data());
    });
  } else if (impl == gemm_impl::eigen) {
    // As the reference forward does it: a row-major [out, in] matrix, transposed in the product.
    t = median_per_call(st, [&] {
      y.noalias() = x * w.transpose();
      benchmark::DoNotOptimize(y.data());
    });
  } else {
#ifdef SPECDEC_BENCH_LIBXSMM
    // Column-major: C [out x N] = A [out x in] (W^T stored [in][out], packed once) * B [in x N] (x).
    const rm wt = w.transpose();
    const libxsmm_blasint m = out, nn = n, k = in, lda = out, ldb = in, ldc = out;
    const float alpha = 1, beta = 0;
    const int flags = LIBXSMM_GEMM_FLAG_NONE;
    const auto kern = libxsmm_smmdispatch(m, nn, k, &lda, &ldb, &ldc, &alpha, &beta, &flags, nullptr);
    if (kern == nullptr) {
      st.SkipWithError("libxsmm: no kernel for this shape");
      return;
    }
    t = median_per_call(st, [&] {
      kern(wt.data(), x.data(), y.data());
      benchmark::DoNotOptimize(y.data());
    });
#else
    st.SkipWithError("built without libxsmm");
    return;
#endif
  }
  const rm want = x * w.transpose();  // bf16: |error| <= 2^-8 * sum |x w| (about 0.2 here)
  if ((want - y).cwiseAbs().maxCoeff() > (impl == gemm_impl::packed_bf16 ? 0.5f : 1e-3f))
    st.SkipWithError("wrong product");
  const char* names[] = {"packed", "eigen", "libxsmm", "packed_bf16", "packed_f16"};
  report(st, std::to_string(out) + "x" + std::to_string(in) + names[static_cast<int>(impl)], n, t,
         2.0 * static_cast<double>(n * out * in));
}

// The core's multiply-add peak in the kernel's own vector type and style
// (acc += a * b, 12 independent accumulators, nothing loaded): the roofline
// of the product rows, taken in the same run.
void bm_fma_peak(benchmark::State& st) {
  using models::kernel::v8;
  constexpr int acc_count = 12;
  constexpr std::int64_t steps = 4096;
  const double t = median_per_call(st, [&] {
    // Everything in registers: the loop loads and stores nothing.
    v8 a = {1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f}, b = a * 1e-7f, acc[acc_count] = {};
    models::kernel::pin(b);
    for (std::int64_t i = 0; i < steps; ++i)
#pragma GCC unroll 12
      for (int j = 0; j < acc_count; ++j) {
        models::kernel::pin(a);  // a product per step, not one hoisted out of the loop
        acc[j] += a * b;
      }
    for (int j = 1; j < acc_count; ++j) acc[0] += acc[j];
    benchmark::DoNotOptimize(acc[0]);
  });
  report(st, "peak/fma", 1, t, 2.0 * 8 * acc_count * steps);
}

void sizes(benchmark::internal::Benchmark* b) {
  for (const int n : {1, 2, 4, 8, 16, 32}) b->Arg(n);
}

const bool registered = [] {
  for (const std::string model : {"target", "hybrid"}) {
    for (const bool tree : {false, true})
      for (const std::string engine : {"new", "old", "bf16"}) {
        if (engine == "bf16" && !models::kernel::bf16_products) continue;
        benchmark::RegisterBenchmark(("forward/" + model + "/" + (tree ? "tree" : "chain") + "/" + engine).c_str(),
                                     [=](benchmark::State& st) { bm_forward(st, model, tree, engine); })
            ->Apply(sizes);
      }
    benchmark::RegisterBenchmark(("products/" + model).c_str(), [=](benchmark::State& st) {
      bm_products(st, model, precision::f32);
    })->Apply(sizes);
    if (models::kernel::bf16_products)
      benchmark::RegisterBenchmark(("products/" + model + "/bf16").c_str(), [=](benchmark::State& st) {
        bm_products(st, model, precision::bf16);
      })->Apply(sizes);
  }
  benchmark::RegisterBenchmark("peak/fma", bm_fma_peak);
  // The target's largest products (gate|up fused, down) and the hybrid's in_proj.
  const std::pair<std::int64_t, std::int64_t> shapes[] = {{1024, 192}, {192, 512}, {552, 128}};
  for (const auto& [out, in] : shapes)
    for (const auto impl :
         {gemm_impl::packed, gemm_impl::packed_f16, gemm_impl::eigen, gemm_impl::libxsmm, gemm_impl::packed_bf16}) {
      if (impl == gemm_impl::packed_bf16 && !models::kernel::bf16_products) continue;
      if (impl == gemm_impl::packed_f16 && !models::kernel::f16_panels) continue;
      const char* names[] = {"packed", "eigen", "libxsmm", "packed_bf16", "packed_f16"};
      benchmark::RegisterBenchmark(
          ("gemm/" + std::to_string(out) + "x" + std::to_string(in) + "/" + names[static_cast<int>(impl)]).c_str(),
          [=](benchmark::State& st) { bm_gemm(st, out, in, impl); })
          ->Apply(sizes);
    }
  return true;
}();

}  // namespace
