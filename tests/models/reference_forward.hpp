// THE REFERENCE FORWARD (tests and benchmarks only): the example engine's
// forward pass as it was before the batched rework of
// examples/models/model.hpp (main at 3373e84), kept as it was in namespace
// `reference`, with its own loader and its own per-sequence state (the old
// NHD page layout). tests/models/test_engine.cpp holds the new forward to
// it; benchmarks/bench_engine.cpp times both in one run. It loops per node
// and per key in attention, lets Eigen repack every weight matrix on each
// call and recomputes RoPE's pow / sin / cos: slow, but plain, and it
// reproduces the training-time logits (tests/models/test_models.cpp did
// check that against this code).
#pragma once

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include <specdec/specdec.hpp>

#include "models/gguf.hpp"

namespace reference {

using specdec::node_id;
using specdec::token_id;
using matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using vector = Eigen::VectorXf;

//! Hyper-parameters read from the GGUF metadata.
struct config {
  std::string arch;
  std::int64_t d = 0, layers = 0, heads = 0, kv_heads = 0, head_dim = 0, ffn = 0, vocab = 256, context = 0;
  float eps = 1e-5f, rope_base = 10000.0f;
  std::string kinds;  //!< per layer: 'a' attention, 'm' Mamba2
  std::int64_t ssm_heads = 0, ssm_headdim = 0, ssm_groups = 0, ssm_state = 0, conv = 0;
  std::int64_t d_inner() const { return ssm_heads * ssm_headdim; }
  std::int64_t conv_channels() const { return d_inner() + 2 * ssm_groups * ssm_state; }
  std::int64_t attention_layers() const { return std::count(kinds.begin(), kinds.end(), 'a'); }
};

struct layer_weights {
  char kind = 'a';
  vector norm1, norm2;
  matrix wq, wk, wv, wo;             // attention: [out, in]
  matrix in_proj, conv_w, out_proj;  // Mamba2: in_proj [2 di + 2 G S + H, d], conv_w [channels, W]
  vector conv_b, a, d_skip, dt_bias, ssm_norm;
  matrix gate, up, down;
  std::int64_t cache_index = -1;  //!< attention: layer index in the KV cache; Mamba2: in the SSM state
};

//! All weights of one model, converted to f32.
struct weights {
  config cfg;
  matrix embed;  //!< [vocab, d]
  std::vector<layer_weights> layers;
  vector norm;
  matrix output;  //!< [vocab, d]
};

namespace detail {
inline matrix load_matrix(const gguf::file& f, const std::string& name, std::int64_t rows, std::int64_t cols) {
  const auto v = f.floats(name, {static_cast<std::uint64_t>(cols), static_cast<std::uint64_t>(rows)});
  return Eigen::Map<const matrix>(v.data(), rows, cols);
}
inline vector load_vector(const gguf::file& f, const std::string& name, std::int64_t n) {
  const auto v = f.floats(name, {static_cast<std::uint64_t>(n)});
  return Eigen::Map<const vector>(v.data(), n);
}
}  // namespace detail

//! Loads a model; throws gguf::gguf_error for a bad file or unexpected shapes.
inline weights load(const std::string& path) {
  const gguf::file f = gguf::file::open(path);
  weights w;
  config& c = w.cfg;
  c.arch = f.get_string("general.architecture");
  if (c.arch != "llama" && c.arch != "specdec-hybrid")
    throw gguf::gguf_error("gguf: " + path + ": unsupported architecture " + c.arch);
  const std::string a = c.arch + ".";
  c.d = f.get_int(a + "embedding_length");
  c.layers = f.get_int(a + "block_count");
  c.heads = f.get_int(a + "attention.head_count");
  c.kv_heads = f.get_int(a + "attention.head_count_kv");
  c.ffn = f.get_int(a + "feed_forward_length");
  c.context = f.get_int(a + "context_length");
  c.eps = static_cast<float>(f.get_float(a + "attention.layer_norm_rms_epsilon"));
  c.rope_base = static_cast<float>(f.get_float(a + "rope.freq_base"));
  c.vocab = f.get_int(a + "vocab_size");
  if (c.d <= 0 || c.layers <= 0 || c.heads <= 0 || c.kv_heads <= 0 || c.heads % c.kv_heads != 0 || c.d % c.heads != 0)
    throw gguf::gguf_error("gguf: " + path + ": inconsistent attention hyper-parameters");
  c.head_dim = c.d / c.heads;
  if (f.get_int(a + "rope.dimension_count") != c.head_dim)
    throw gguf::gguf_error("gguf: " + path + ": partial RoPE is not supported");
  c.kinds = c.arch == "llama" ? std::string(static_cast<std::size_t>(c.layers), 'a') : f.get_string(a + "layer_kinds");
  if (static_cast<std::int64_t>(c.kinds.size()) != c.layers)
    throw gguf::gguf_error("gguf: " + path + ": layer_kinds must have one entry per block");
  if (c.kinds.find('m') != std::string::npos) {
    c.conv = f.get_int(a + "ssm.conv_kernel");
    c.ssm_state = f.get_int(a + "ssm.state_size");
    c.ssm_heads = f.get_int(a + "ssm.time_step_rank");
    c.ssm_groups = f.get_int(a + "ssm.group_count");
    const std::int64_t inner = f.get_int(a + "ssm.inner_size");
    if (c.ssm_heads <= 0 || inner % c.ssm_heads != 0 || c.ssm_groups <= 0 || c.ssm_heads % c.ssm_groups != 0)
      throw gguf::gguf_error("gguf: " + path + ": inconsistent SSM hyper-parameters");
    c.ssm_headdim = inner / c.ssm_heads;
  }
  w.embed = detail::load_matrix(f, "token_embd.weight", c.vocab, c.d);
  std::int64_t n_attn = 0, n_ssm = 0;
  for (std::int64_t l = 0; l < c.layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    layer_weights L;
    L.kind = c.kinds[static_cast<std::size_t>(l)];
    L.norm1 = detail::load_vector(f, p + "attn_norm.weight", c.d);
    if (L.kind == 'a') {
      L.cache_index = n_attn++;
      L.wq = detail::load_matrix(f, p + "attn_q.weight", c.heads * c.head_dim, c.d);
      L.wk = detail::load_matrix(f, p + "attn_k.weight", c.kv_heads * c.head_dim, c.d);
      L.wv = detail::load_matrix(f, p + "attn_v.weight", c.kv_heads * c.head_dim, c.d);
      L.wo = detail::load_matrix(f, p + "attn_output.weight", c.d, c.heads * c.head_dim);
    } else {
      L.cache_index = n_ssm++;
      const std::int64_t ch = c.conv_channels();
      L.in_proj = detail::load_matrix(f, p + "ssm_in.weight", c.d_inner() + ch + c.ssm_heads, c.d);
      L.conv_w = detail::load_matrix(f, p + "ssm_conv1d.weight", ch, c.conv);
      L.conv_b = detail::load_vector(f, p + "ssm_conv1d.bias", ch);
      L.a = detail::load_vector(f, p + "ssm_a", c.ssm_heads);
      L.d_skip = detail::load_vector(f, p + "ssm_d", c.ssm_heads);
      L.dt_bias = detail::load_vector(f, p + "ssm_dt.bias", c.ssm_heads);
      L.ssm_norm = detail::load_vector(f, p + "ssm_norm.weight", c.d_inner());
      L.out_proj = detail::load_matrix(f, p + "ssm_out.weight", c.d, c.d_inner());
    }
    L.norm2 = detail::load_vector(f, p + "ffn_norm.weight", c.d);
    L.gate = detail::load_matrix(f, p + "ffn_gate.weight", c.ffn, c.d);
    L.up = detail::load_matrix(f, p + "ffn_up.weight", c.ffn, c.d);
    L.down = detail::load_matrix(f, p + "ffn_down.weight", c.d, c.ffn);
    w.layers.push_back(std::move(L));
  }
  w.norm = detail::load_vector(f, "output_norm.weight", c.d);
  w.output = detail::load_matrix(f, "output.weight", c.vocab, c.d);
  return w;
}

//! The per-sequence state: a paged KV cache for the attention layers and,
//! for Mamba2 layers, the conv and SSM states plus this round's scan inputs
//! (kept for the state commit). A plain value: copying it snapshots the sequence.
struct state {
  static constexpr std::int64_t page = 16;
  std::int64_t pages = 0, attn_layers = 0, kv_heads = 0, head_dim = 0;
  std::vector<float> k_pool, v_pool;      //!< [pages, attn layers, page, kv heads, head dim]
  std::vector<std::int32_t> block_table;  //!< logical page -> physical page (scattered on purpose)
  specdec::position_id cache_len = 0;     //!< committed positions in the cache
  // Mamba2 layers.
  std::vector<std::vector<float>> conv_state;                          //!< per layer [channels, W - 1]
  std::vector<std::vector<float>> ssm_state;                           //!< per layer [heads, headdim, dstate]
  std::vector<std::vector<float>> round_xbc_raw, round_xbc, round_dt;  //!< per layer, this round's scan inputs
  std::vector<node_id> round_parent;                                   //!< the tree of the last forward over SSM layers
  bool keep_node_states = false;                                       //!< ask the scan for per-node states (tests)
  std::vector<std::vector<float>> node_states;  //!< per layer [n, heads, headdim, dstate] when kept

  state() = default;
  state(const config& c, std::int64_t capacity) {
    pages = (capacity + page - 1) / page;
    attn_layers = c.attention_layers();
    kv_heads = c.kv_heads;
    head_dim = c.head_dim;
    const auto pool = static_cast<std::size_t>(pages * attn_layers * page * kv_heads * head_dim);
    k_pool.assign(pool, 0.0f);
    v_pool.assign(pool, 0.0f);
    // A fixed permutation (7 is coprime to the page count): logical pages are not contiguous.
    if (pages % 7 == 0) throw std::invalid_argument("state: page count must not be a multiple of 7");
    for (std::int64_t b = 0; b < pages; ++b) block_table.push_back(static_cast<std::int32_t>((b * 7 + 3) % pages));
    const auto ssm_layers = static_cast<std::size_t>(std::count(c.kinds.begin(), c.kinds.end(), 'm'));
    conv_state.assign(ssm_layers, std::vector<float>(static_cast<std::size_t>(c.conv_channels() * (c.conv - 1)), 0.0f));
    ssm_state.assign(ssm_layers,
                     std::vector<float>(static_cast<std::size_t>(c.ssm_heads * c.ssm_headdim * c.ssm_state), 0.0f));
    round_xbc_raw.resize(ssm_layers);
    round_xbc.resize(ssm_layers);
    round_dt.resize(ssm_layers);
    node_states.resize(ssm_layers);
  }
  std::int64_t capacity() const { return pages * page; }
  float* k_at(std::int64_t layer, std::int64_t pos, std::int64_t h) { return at(k_pool, layer, pos, h); }
  float* v_at(std::int64_t layer, std::int64_t pos, std::int64_t h) { return at(v_pool, layer, pos, h); }
  specdec::kv_position_map map() const { return specdec::paged_positions(block_table.data(), pages, page, pages); }
  specdec::kv_tensor<float> k_tensor() {
    return specdec::make_kv_tensor_paged_nhd(k_pool.data(), pages, attn_layers, page, kv_heads, head_dim);
  }
  specdec::kv_tensor<float> v_tensor() {
    return specdec::make_kv_tensor_paged_nhd(v_pool.data(), pages, attn_layers, page, kv_heads, head_dim);
  }

 private:
  float* at(std::vector<float>& pool, std::int64_t layer, std::int64_t pos, std::int64_t h) {
    const std::int64_t phys = block_table[static_cast<std::size_t>(pos / page)];
    return pool.data() + (((phys * attn_layers + layer) * page + pos % page) * kv_heads + h) * head_dim;
  }
};

//! n nodes to run: node r has token tokens[r] at position positions[r],
//! writes its KV to tree slot first_slot + r and attends to the committed
//! cache plus the tree slots j whose bit is set in mask row r (row r starts
//! at mask[r * words]; bit j of word j / 64). `parent` (n entries, within
//! the batch, -1 for a node whose predecessor is the committed state) drives
//! the Mamba2 layers; transformer-only models ignore it.
struct batch {
  std::span<const token_id> tokens;
  std::span<const std::int64_t> positions;
  std::span<const node_id> parent;
  std::span<const std::uint64_t> mask;
  std::int64_t words = 1;
  std::int32_t first_slot = 0;
};

namespace detail {

inline void rms_norm(const matrix& x, const vector& w, float eps, matrix& out) {
  out.resize(x.rows(), x.cols());
  for (Eigen::Index r = 0; r < x.rows(); ++r) {
    const float ms = x.row(r).squaredNorm() / static_cast<float>(x.cols());
    out.row(r) = x.row(r).cwiseProduct(w.transpose()) * (1.0f / std::sqrt(ms + eps));
  }
}

// Rotates consecutive pairs (v[2i], v[2i+1]) by pos * inv[i], inv[i] =
// base^(-2i/D): llama.cpp's "normal" RoPE.
inline void rope(float* v, std::int64_t dim, std::int64_t pos, const float* inv) {
  for (std::int64_t i = 0; i < dim / 2; ++i) {
    const float ang = static_cast<float>(pos) * inv[i];
    const float c = std::cos(ang), s = std::sin(ang);
    const float x0 = v[2 * i], x1 = v[2 * i + 1];
    v[2 * i] = x0 * c - x1 * s;
    v[2 * i + 1] = x0 * s + x1 * c;
  }
}

inline float silu(float v) { return v / (1.0f + std::exp(-v)); }

inline void attention(const weights& w, const layer_weights& L, state& s, const batch& b, const matrix& xn,
                      matrix& out) {
  const config& c = w.cfg;
  const auto n = static_cast<Eigen::Index>(b.tokens.size());
  const std::int64_t dh = c.head_dim, group = c.heads / c.kv_heads;
  matrix q = xn * L.wq.transpose(), k = xn * L.wk.transpose(), v = xn * L.wv.transpose();
  std::vector<float> inv(static_cast<std::size_t>(dh / 2));
  for (std::int64_t i = 0; i < dh / 2; ++i)
    inv[static_cast<std::size_t>(i)] = std::pow(c.rope_base, -static_cast<float>(2 * i) / static_cast<float>(dh));
  for (Eigen::Index r = 0; r < n; ++r) {
    const std::int64_t pos = b.positions[static_cast<std::size_t>(r)];
    const std::int64_t slot = s.cache_len + b.first_slot + r;
    for (std::int64_t h = 0; h < c.heads; ++h) rope(q.row(r).data() + h * dh, dh, pos, inv.data());
    for (std::int64_t h = 0; h < c.kv_heads; ++h) {
      rope(k.row(r).data() + h * dh, dh, pos, inv.data());
      std::copy_n(k.row(r).data() + h * dh, dh, s.k_at(L.cache_index, slot, h));
      std::copy_n(v.row(r).data() + h * dh, dh, s.v_at(L.cache_index, slot, h));
    }
  }
  // Keys each row sees: the committed cache, then its masked tree slots (in slot order).
  const float scale = 1.0f / std::sqrt(static_cast<float>(dh));
  matrix attn(n, c.heads * dh);
  std::vector<std::int64_t> keys;
  std::vector<float> score;
  for (Eigen::Index r = 0; r < n; ++r) {
    keys.clear();
    for (std::int64_t p = 0; p < s.cache_len; ++p) keys.push_back(p);
    const std::uint64_t* row = b.mask.data() + r * b.words;
    for (std::int64_t j = 0; j < b.words * 64; ++j)
      if (specdec::mask_test(row, j)) {
        if (s.cache_len + j >= s.capacity()) throw std::invalid_argument("forward: mask names a slot past the cache");
        keys.push_back(s.cache_len + j);
      }
    score.resize(keys.size());
    for (std::int64_t h = 0; h < c.heads; ++h) {
      const std::int64_t kh = h / group;
      const Eigen::Map<const vector> qh(q.row(r).data() + h * dh, dh);
      float mx = -INFINITY;
      for (std::size_t t = 0; t < keys.size(); ++t) {
        score[t] = scale * qh.dot(Eigen::Map<const vector>(s.k_at(L.cache_index, keys[t], kh), dh));
        mx = std::max(mx, score[t]);
      }
      float sum = 0.0f;
      for (auto& e : score) sum += (e = std::exp(e - mx));
      Eigen::Map<vector> o(attn.row(r).data() + h * dh, dh);
      o.setZero();
      for (std::size_t t = 0; t < keys.size(); ++t)
        o += (score[t] / sum) * Eigen::Map<const vector>(s.v_at(L.cache_index, keys[t], kh), dh);
    }
  }
  out = attn * L.wo.transpose();
}

inline specdec::tree_ssm_inputs<float> ssm_inputs(const config& c, const layer_weights& L, const float* xbc,
                                                  const float* dt, const float* h0, std::int64_t n) {
  const std::int64_t ch = c.conv_channels(), di = c.d_inner(), gs = c.ssm_groups * c.ssm_state;
  specdec::tree_ssm_inputs<float> in;
  in.x = specdec::make_strided_view<const float, 3>(xbc, {n, c.ssm_heads, c.ssm_headdim}, {ch, c.ssm_headdim, 1});
  in.B = specdec::make_strided_view<const float, 3>(xbc + di, {n, c.ssm_groups, c.ssm_state}, {ch, c.ssm_state, 1});
  in.C =
      specdec::make_strided_view<const float, 3>(xbc + di + gs, {n, c.ssm_groups, c.ssm_state}, {ch, c.ssm_state, 1});
  in.dt = specdec::make_view<const float>(dt, n, c.ssm_heads);
  in.A = specdec::make_view<const float>(L.a.data(), c.ssm_heads);
  in.D = specdec::make_view<const float>(L.d_skip.data(), c.ssm_heads, 1);
  in.dt_bias = specdec::make_view<const float>(L.dt_bias.data(), c.ssm_heads);
  in.h0 = specdec::make_view<const float>(h0, c.ssm_heads, c.ssm_headdim, c.ssm_state);
  return in;
}

inline void mamba(const weights& w, const layer_weights& L, state& s, const batch& b, const matrix& xn, matrix& out,
                  std::vector<std::byte>& ws) {
  const config& c = w.cfg;
  const auto n = static_cast<std::int64_t>(b.tokens.size());
  const std::int64_t ch = c.conv_channels(), di = c.d_inner(), H = c.ssm_heads;
  const auto li = static_cast<std::size_t>(L.cache_index);
  const matrix proj = xn * L.in_proj.transpose();  // [n, z | xBC | dt]
  auto& raw = s.round_xbc_raw[li];
  auto& xbc = s.round_xbc[li];
  auto& dt = s.round_dt[li];
  raw.resize(static_cast<std::size_t>(n * ch));
  xbc.resize(raw.size());
  dt.resize(static_cast<std::size_t>(n * H));
  std::vector<float> z(static_cast<std::size_t>(n * di));
  for (std::int64_t r = 0; r < n; ++r) {
    const float* p = proj.row(r).data();
    std::copy_n(p, di, z.data() + r * di);
    std::copy_n(p + di, ch, raw.data() + r * ch);
    std::copy_n(p + di + ch, H, dt.data() + r * H);
  }
  // Tree conv1d: each node's window comes from its ancestors, then the conv state.
  specdec::tree_conv1d_inputs<float> cin;
  cin.x = specdec::make_view<const float>(raw.data(), n, ch);
  cin.weight = specdec::make_view<const float>(L.conv_w.data(), ch, c.conv);
  cin.bias = specdec::make_view<const float>(L.conv_b.data(), ch);
  cin.conv_state = specdec::make_view<const float>(s.conv_state[li].data(), ch, c.conv - 1);
  cin.silu = true;
  ws.resize(std::max(ws.size(), specdec::tree_conv1d_workspace_size(c.conv)));
  specdec::throw_if_error(specdec::tree_conv1d(b.parent, cin, specdec::make_view<float>(xbc.data(), n, ch), ws));
  // Tree scan, gated by silu(z), from the committed SSM state.
  auto in = ssm_inputs(c, L, xbc.data(), dt.data(), s.ssm_state[li].data(), n);
  in.z = specdec::make_view<const float>(z.data(), n, H, c.ssm_headdim);
  const specdec::tree_ssm_options<float> opt{};
  matrix y(n, di);
  specdec::view4d<float> states{};
  auto method = specdec::tree_scan_method::automatic;
  if (s.keep_node_states) {
    s.node_states[li].assign(static_cast<std::size_t>(n * H * c.ssm_headdim * c.ssm_state), 0.0f);
    states = specdec::make_view<float>(s.node_states[li].data(), n, H, c.ssm_headdim, c.ssm_state);
    method = specdec::tree_scan_method::recurrent;
  }
  specdec::tree_ssm_shape shape;
  specdec::throw_if_error(specdec::validate_tree_ssm_shapes(in, shape));
  ws.resize(std::max(ws.size(), specdec::tree_scan_workspace_size<float>(b.parent, shape, method)));
  specdec::throw_if_error(specdec::tree_scan(
      b.parent, in, opt, specdec::make_view<float>(y.data(), n, H, c.ssm_headdim), states, ws, method));
  matrix yn;
  rms_norm(y, L.ssm_norm, c.eps, yn);
  out = yn * L.out_proj.transpose();
}

}  // namespace detail

//! Scratch kept between calls so the hot path does not reallocate much.
struct scratch {
  std::vector<std::byte> ws;
  matrix x, xn, mix, g, u;
};

//! Runs the batch; writes logits [n, vocab] row-major into `logits`.
//! Throws std::invalid_argument (or specdec::error) on a bad batch.
inline void forward(const weights& w, state& s, const batch& b, std::span<float> logits, scratch& sc) {
  const config& c = w.cfg;
  const auto n = static_cast<std::int64_t>(b.tokens.size());
  if (n == 0 || static_cast<std::int64_t>(b.positions.size()) != n ||
      static_cast<std::int64_t>(b.mask.size()) < n * b.words || static_cast<std::int64_t>(logits.size()) < n * c.vocab)
    throw std::invalid_argument("forward: batch sizes disagree");
  if (b.first_slot < 0 || s.cache_len + b.first_slot + n > s.capacity())
    throw std::invalid_argument("forward: KV cache capacity exceeded");
  const bool has_ssm = c.kinds.find('m') != std::string::npos;
  if (has_ssm && static_cast<std::int64_t>(b.parent.size()) != n)
    throw std::invalid_argument("forward: Mamba2 layers need one parent per node");
  if (has_ssm) s.round_parent.assign(b.parent.begin(), b.parent.end());
  sc.x.resize(n, c.d);
  for (std::int64_t r = 0; r < n; ++r) {
    const token_id t = b.tokens[static_cast<std::size_t>(r)];
    if (t < 0 || t >= c.vocab) throw std::invalid_argument("forward: token out of range");
    sc.x.row(r) = w.embed.row(t);
  }
  for (const auto& L : w.layers) {
    detail::rms_norm(sc.x, L.norm1, c.eps, sc.xn);
    if (L.kind == 'a')
      detail::attention(w, L, s, b, sc.xn, sc.mix);
    else
      detail::mamba(w, L, s, b, sc.xn, sc.mix, sc.ws);
    sc.x += sc.mix;
    detail::rms_norm(sc.x, L.norm2, c.eps, sc.xn);
    sc.g = sc.xn * L.gate.transpose();
    sc.u = sc.xn * L.up.transpose();
    sc.g = sc.g.unaryExpr([](float v) { return detail::silu(v); }).cwiseProduct(sc.u);
    sc.x += sc.g * L.down.transpose();
  }
  detail::rms_norm(sc.x, w.norm, c.eps, sc.xn);
  Eigen::Map<matrix>(logits.data(), n, c.vocab) = sc.xn * w.output.transpose();
}

//! Keeps the accepted path (node ids within the last forward, root first,
//! slots = node ids) of the last tree forward: KV entries compacted in
//! place behind the committed cache (specdec::commit_kv), conv and SSM
//! states advanced along the path (specdec::tree_conv1d_commit_state,
//! specdec::tree_ssm_commit_path). `parent` is the tree of that forward.
inline void commit(const weights& w, state& s, std::span<const node_id> parent, std::span<const node_id> path) {
  const config& c = w.cfg;
  std::vector<specdec::position_id> keep(path.size());
  std::int32_t kept = 0;
  specdec::throw_if_error(specdec::keep_indices_from_path(parent, path, {}, s.cache_len, keep, kept));
  if (s.attn_layers > 0) {
    const specdec::kv_tensor<float> tensors[2] = {s.k_tensor(), s.v_tensor()};
    specdec::throw_if_error(
        specdec::commit_kv<float>(tensors, s.map(), s.cache_len,
                                  std::span<const specdec::position_id>(keep).first(static_cast<std::size_t>(kept))));
  }
  for (const auto& L : w.layers) {
    if (L.kind != 'm') continue;
    const auto li = static_cast<std::size_t>(L.cache_index);
    const std::int64_t n = static_cast<std::int64_t>(s.round_parent.size()), ch = c.conv_channels();
    if (n != static_cast<std::int64_t>(parent.size()))
      throw std::invalid_argument("commit: parent does not match the last forward");
    const auto in = detail::ssm_inputs(c, L, s.round_xbc[li].data(), s.round_dt[li].data(), s.ssm_state[li].data(), n);
    specdec::throw_if_error(specdec::tree_ssm_commit_path(
        parent, in, specdec::tree_ssm_options<float>{}, path,
        specdec::make_view<float>(s.ssm_state[li].data(), c.ssm_heads, c.ssm_headdim, c.ssm_state)));
    specdec::throw_if_error(
        specdec::tree_conv1d_commit_state(parent, specdec::make_view<const float>(s.round_xbc_raw[li].data(), n, ch),
                                          path, specdec::make_view<float>(s.conv_state[li].data(), ch, c.conv - 1)));
  }
  s.cache_len += kept;
}

//! Prefills `tokens` as a chain (a one-path tree) and commits all of them.
inline void prefill(const weights& w, state& s, std::span<const token_id> tokens, scratch& sc) {
  const auto n = static_cast<std::int32_t>(tokens.size());
  if (n == 0) return;
  std::vector<node_id> parent(static_cast<std::size_t>(n)), path(static_cast<std::size_t>(n));
  std::vector<std::int64_t> pos(static_cast<std::size_t>(n));
  for (std::int32_t i = 0; i < n; ++i) {
    parent[static_cast<std::size_t>(i)] = i - 1;
    path[static_cast<std::size_t>(i)] = i;
  }
  const std::int64_t words = specdec::mask_words_per_row<std::uint64_t>(n);
  std::vector<std::uint64_t> mask(static_cast<std::size_t>(n * words));
  specdec::throw_if_error(specdec::build_packed_mask<std::uint64_t>(parent, mask));
  specdec::throw_if_error(specdec::build_positions<std::int64_t>(parent, s.cache_len, pos));
  std::vector<float> logits(static_cast<std::size_t>(n * w.cfg.vocab));
  forward(w, s, batch{tokens, pos, parent, mask, words, 0}, logits, sc);
  commit(w, s, parent, path);
}

}  // namespace reference
