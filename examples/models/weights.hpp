// The example models' weights: hyper-parameters from the GGUF metadata and
// the tensors, matrices packed at load time for matmul.hpp's small-batch
// kernel (q/k/v and gate/up fused), RoPE angles as tables. model.hpp runs
// the forward over them.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "gguf.hpp"
#include "matmul.hpp"

namespace models {

using kernel::packed_matrix;

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

//! One block's weights; matrices packed for y = x W^T (matmul.hpp).
struct layer_weights {
  char kind = 'a';
  std::vector<float> norm1, norm2;
  packed_matrix qkv, wo;            // attention: rows q (heads x dh), k, v (kv heads x dh each)
  packed_matrix in_proj, out_proj;  // Mamba2: in_proj rows [z | xBC | dt]
  std::vector<float> conv_w;        // [W, channels]: tree_conv1d reads each window position's row in place
  std::vector<float> conv_b, a, d_skip, dt_bias, ssm_norm;
  packed_matrix gate_up, down;    // gate_up rows [gate | up]
  std::int64_t cache_index = -1;  //!< attention: layer index in the KV cache; Mamba2: in the SSM state
};

//! All weights of one model, converted to f32 and packed (matrices in f32 /
//! f16 panels, or bf16 ones for precision::bf16).
struct weights {
  config cfg;
  std::vector<float> embed;  //!< [vocab, d]
  std::vector<layer_weights> layers;
  std::vector<float> norm;
  packed_matrix output;                             //!< [vocab, d]
  kernel::precision prec = kernel::precision::f32;  //!< of the matrix products
  //! RoPE: cos / sin of pos * base^(-2i/D) for pos < rope_positions, [pos][D / 2].
  std::int64_t rope_positions = 0;
  std::vector<float> rope_cos, rope_sin;
};

namespace detail {
inline packed_matrix load_packed(const gguf::file& f, std::initializer_list<std::pair<std::string, std::int64_t>> parts,
                                 std::int64_t cols, kernel::precision prec) {
  std::vector<std::vector<float>> v;
  for (const auto& [name, rows] : parts)
    v.push_back(f.floats(name, {static_cast<std::uint64_t>(cols), static_cast<std::uint64_t>(rows)}));
  std::vector<std::pair<const float*, std::int64_t>> blocks;
  std::size_t i = 0;
  for (const auto& p : parts) blocks.emplace_back(v[i++].data(), p.second);
  return kernel::pack(blocks, cols, prec);
}
inline std::vector<float> load_vector(const gguf::file& f, const std::string& name, std::int64_t n) {
  return f.floats(name, {static_cast<std::uint64_t>(n)});
}
// base^(-2i/D) in float, as llama.cpp's "normal" RoPE.
inline float rope_inv_freq(const config& c, std::int64_t i) {
  return std::pow(c.rope_base, -static_cast<float>(2 * i) / static_cast<float>(c.head_dim));
}
}  // namespace detail

//! Loads a model, its matrices packed for products in `prec`; throws
//! gguf::gguf_error for a bad file or unexpected shapes, std::invalid_argument
//! for precision::bf16 in a build without it (kernel::bf16_products).
inline weights load(const std::string& path, kernel::precision prec = kernel::precision::f32) {
  const gguf::file f = gguf::file::open(path);
  weights w;
  w.prec = prec;
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
  // The attention products run over 16-wide panels of the head dimension.
  if (c.head_dim % kernel::panel_width != 0)
    throw gguf::gguf_error("gguf: " + path + ": head dim must be a multiple of 16");
  const auto embed =
      f.floats("token_embd.weight", {static_cast<std::uint64_t>(c.d), static_cast<std::uint64_t>(c.vocab)});
  w.embed.assign(embed.begin(), embed.end());
  std::int64_t n_attn = 0, n_ssm = 0;
  for (std::int64_t l = 0; l < c.layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    layer_weights L;
    L.kind = c.kinds[static_cast<std::size_t>(l)];
    L.norm1 = detail::load_vector(f, p + "attn_norm.weight", c.d);
    if (L.kind == 'a') {
      L.cache_index = n_attn++;
      L.qkv = detail::load_packed(f,
                                  {{p + "attn_q.weight", c.heads * c.head_dim},
                                   {p + "attn_k.weight", c.kv_heads * c.head_dim},
                                   {p + "attn_v.weight", c.kv_heads * c.head_dim}},
                                  c.d, prec);
      L.wo = detail::load_packed(f, {{p + "attn_output.weight", c.d}}, c.heads * c.head_dim, prec);
    } else {
      L.cache_index = n_ssm++;
      const std::int64_t ch = c.conv_channels();
      L.in_proj = detail::load_packed(f, {{p + "ssm_in.weight", c.d_inner() + ch + c.ssm_heads}}, c.d, prec);
      // GGUF's [channels][W] transposed to [W][channels] (see conv_w).
      const std::vector<float> conv_rows =
          f.floats(p + "ssm_conv1d.weight", {static_cast<std::uint64_t>(c.conv), static_cast<std::uint64_t>(ch)});
      L.conv_w.resize(conv_rows.size());
      for (std::int64_t k = 0; k < ch; ++k)
        for (std::int64_t j = 0; j < c.conv; ++j)
          L.conv_w[static_cast<std::size_t>(j * ch + k)] = conv_rows[static_cast<std::size_t>(k * c.conv + j)];
      L.conv_b = detail::load_vector(f, p + "ssm_conv1d.bias", ch);
      L.a = detail::load_vector(f, p + "ssm_a", c.ssm_heads);
      L.d_skip = detail::load_vector(f, p + "ssm_d", c.ssm_heads);
      L.dt_bias = detail::load_vector(f, p + "ssm_dt.bias", c.ssm_heads);
      L.ssm_norm = detail::load_vector(f, p + "ssm_norm.weight", c.d_inner());
      L.out_proj = detail::load_packed(f, {{p + "ssm_out.weight", c.d}}, c.d_inner(), prec);
    }
    L.norm2 = detail::load_vector(f, p + "ffn_norm.weight", c.d);
    L.gate_up = detail::load_packed(f, {{p + "ffn_gate.weight", c.ffn}, {p + "ffn_up.weight", c.ffn}}, c.d, prec);
    L.down = detail::load_packed(f, {{p + "ffn_down.weight", c.d}}, c.ffn, prec);
    w.layers.push_back(std::move(L));
  }
  w.norm = detail::load_vector(f, "output_norm.weight", c.d);
  w.output = detail::load_packed(f, {{"output.weight", c.vocab}}, c.d, prec);
  // RoPE tables for the positions a cache of the usual sizes reaches (later
  // positions compute their angles on the fly, with the same float math).
  w.rope_positions = std::max<std::int64_t>(c.context, 1024);
  const std::int64_t half = c.head_dim / 2;
  w.rope_cos.resize(static_cast<std::size_t>(w.rope_positions * half));
  w.rope_sin.resize(w.rope_cos.size());
  for (std::int64_t i = 0; i < half; ++i) {
    const float inv = detail::rope_inv_freq(c, i);
    for (std::int64_t pos = 0; pos < w.rope_positions; ++pos) {
      const float ang = static_cast<float>(pos) * inv;
      w.rope_cos[static_cast<std::size_t>(pos * half + i)] = std::cos(ang);
      w.rope_sin[static_cast<std::size_t>(pos * half + i)] = std::sin(ang);
    }
  }
  return w;
}

}  // namespace models
