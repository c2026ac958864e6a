// A small inference engine (CPU) for the example models in this folder:
// byte-level Llama-style transformers (RMSNorm, RoPE on consecutive pairs,
// SwiGLU, grouped-query attention) and the hybrid that puts Mamba2 mixers
// next to attention layers. Weights come from GGUF (weights.hpp, gguf.hpp).
//
// One forward entry point serves prefill, autoregressive steps, the
// drafter's one-node calls and the target's tree pass: a batch of n nodes
// at given positions, each attending to the committed cache plus the tree
// slots its packed mask row allows (specdec's ancestor mask). Keys and
// values live in a paged cache (pages scattered through a pool); node r's
// KV goes to tree slot `first_slot + r`, i.e. cache position cache_len +
// first_slot + r. After verification, commit() keeps the accepted path with
// specdec's in-place KV commit and, for Mamba2 layers, specdec's conv-state
// and SSM-state commits; the tree pass itself runs specdec's tree conv1d and
// tree scan.
//
// The forward batches like a real engine: a pass over n nodes reads each
// weight once (matrices packed at load time for the small-batch kernel of
// matmul.hpp, q/k/v and gate/up fused into one product each), attention is
// two matrix products per KV head over whole cache pages (keys stored
// transposed inside a page) with a masked softmax, and RoPE angles come
// from tables built at load time. README.md has the measured costs.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include <specdec/specdec.hpp>

#include "matmul.hpp"
#include "weights.hpp"

namespace models {

using kernel::packed_matrix;
using specdec::node_id;
using specdec::token_id;

//! The per-sequence state: a paged KV cache for the attention layers and,
//! for Mamba2 layers, the conv and SSM states plus this round's scan inputs
//! (kept for the state commit). A plain value: copying it snapshots the sequence.
//! Pages hold, per layer and KV head, keys transposed ([head dim][page]:
//! one page is a ready [D x 16] operand of the score product) and values
//! as rows ([page][head dim]); specdec's KV commit takes both layouts as
//! strided tensors (k_tensor, v_tensor).
struct state {
  static constexpr std::int64_t page = kernel::panel_width;
  std::int64_t pages = 0, attn_layers = 0, kv_heads = 0, head_dim = 0;
  std::vector<float> k_pool;              //!< [pages, attn layers, kv heads, head dim, page]
  std::vector<float> v_pool;              //!< [pages, attn layers, kv heads, page, head dim]
  std::vector<std::int32_t> block_table;  //!< logical page -> physical page (scattered on purpose)
  specdec::position_id cache_len = 0;     //!< committed positions in the cache
  // Mamba2 layers.
  std::vector<std::vector<float>> conv_state;                          //!< per layer [W - 1, channels] (column-major)
  std::vector<std::vector<float>> ssm_state;                           //!< per layer [heads, headdim, dstate]
  std::vector<std::vector<float>> round_xbc_raw, round_xbc, round_dt;  //!< per layer, this round's scan inputs
  std::vector<node_id> round_parent;                                   //!< the tree of the last forward over SSM layers
  bool keep_node_states = false;                                       //!< always keep per-node states (tests)
  //! Per layer [n, heads, headdim, dstate]: each node's state from the last
  //! forward, kept for a round's tree (mamba(): up to 16 nodes, or 64 where
  //! the recurrent scan is faster anyway); the commit then copies the
  //! accepted node's state instead of replaying the path.
  std::vector<std::vector<float>> node_states;
  std::vector<char> node_states_kept;  //!< per layer: node_states holds the last forward's states

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
    node_states_kept.assign(ssm_layers, 0);
  }
  std::int64_t capacity() const { return pages * page; }
  //! Empties the cache in place (no position committed, SSM states zero):
  //! what a new state of the same shape holds, without new pages to fault
  //! in. The KV pools keep stale values, which nothing reads (attention
  //! reads positions below cache_len and this pass's slots only).
  void clear() {
    cache_len = 0;
    for (auto& v : conv_state) std::fill(v.begin(), v.end(), 0.0f);
    for (auto& v : ssm_state) std::fill(v.begin(), v.end(), 0.0f);
    round_parent.clear();
    std::fill(node_states_kept.begin(), node_states_kept.end(), 0);
  }
  //! Keys of logical page `lp`, layer, KV head h: [head dim][page].
  float* k_page(std::int64_t layer, std::int64_t lp, std::int64_t h) { return k_pool.data() + block(layer, lp, h); }
  //! Values of logical page `lp`, layer, KV head h: [page][head dim].
  float* v_page(std::int64_t layer, std::int64_t lp, std::int64_t h) { return v_pool.data() + block(layer, lp, h); }
  specdec::kv_position_map map() const { return specdec::paged_positions(block_table.data(), pages, page, pages); }
  specdec::kv_tensor<float> k_tensor() {
    const std::int64_t head = head_dim * page, layer = kv_heads * head;
    return specdec::make_kv_tensor(k_pool.data(), static_cast<std::int64_t>(k_pool.size()), attn_layers, kv_heads,
                                   head_dim, specdec::kv_strides{attn_layers * layer, layer, head, 1, page});
  }
  specdec::kv_tensor<float> v_tensor() {
    return specdec::make_kv_tensor_paged_hnd(v_pool.data(), pages, attn_layers, page, kv_heads, head_dim);
  }

 private:
  std::int64_t block(std::int64_t layer, std::int64_t lp, std::int64_t h) const {
    const std::int64_t phys = block_table[static_cast<std::size_t>(lp)];
    return ((phys * attn_layers + layer) * kv_heads + h) * head_dim * page;
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
  //! Logits only for rows [first_logit, n), written from logits row 0 (a
  //! prefill or a drafter's catch-up needs none for the tokens it commits).
  std::int64_t first_logit = 0;
};

//! Scratch kept between calls so the hot path does not reallocate.
struct scratch {
  std::vector<std::byte> ws;
  std::vector<float> x, xn, proj, attn, q, scores, o, z, y, yn;
};

namespace detail {

inline void grow(std::vector<float>& v, std::int64_t n) {
  if (static_cast<std::int64_t>(v.size()) < n) v.resize(static_cast<std::size_t>(n));
}

//! exp(x) for a whole array, in a form the compiler vectorizes (the libm
//! call does not): 2^k * p(r) with r = x - k ln 2 in [-ln2/2, ln2/2] and a
//! degree-6 polynomial, within 2.3e-7 relative of exp (measured); exactly 0
//! below -104 (so a masked -inf score weighs nothing), saturating at 88.3.
//! The clamp is its own loop: fused into the next one, GCC (with
//! -ftrapping-math, the default) keeps its compares as branches and does
//! not vectorize.
inline void exp_inplace(float* x, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) x[i] = std::min(std::max(x[i], -110.0f), 88.3f);
  for (std::int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    // Round to nearest by adding 1.5 * 2^23 (vectorizes without SSE4.1's round).
    const float k = (v * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    const float r = (v - k * 0.693145751953125f) - k * 1.42860682030941723e-6f;
    float p = 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    // 2^k as two factors: each stays a normal float for k in [-159, 128].
    const auto ki = static_cast<std::int32_t>(k);
    const float s1 = std::bit_cast<float>((ki / 2 + 127) << 23), s2 = std::bit_cast<float>((ki - ki / 2 + 127) << 23);
    x[i] = p * s1 * s2;
  }
}

//! Sum and maximum of x[0, n) with eight partial results (a single running
//! float would be a serial dependency chain the compiler must not reorder).
inline float sum8(const float* x, std::int64_t n) {
  float part[8] = {};
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) part[j] += x[i + j];
  for (; i < n; ++i) part[0] += x[i];
  return ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
}
inline float max8(const float* x, std::int64_t n) {
  float part[8] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY};
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) part[j] = std::max(part[j], x[i + j]);
  for (; i < n; ++i) part[0] = std::max(part[0], x[i]);
  for (int j = 1; j < 8; ++j) part[0] = std::max(part[0], part[j]);
  return part[0];
}

inline void rms_norm(std::int64_t n, std::int64_t d, const float* x, std::int64_t ldx, const std::vector<float>& w,
                     float eps, float* out, std::int64_t ldo) {
  for (std::int64_t r = 0; r < n; ++r) {
    const float* xr = x + r * ldx;
    float part[8] = {};
    std::int64_t i = 0;
    for (; i + 8 <= d; i += 8)
      for (int j = 0; j < 8; ++j) part[j] += xr[i + j] * xr[i + j];
    for (; i < d; ++i) part[0] += xr[i] * xr[i];
    const float ss = ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
    const float scale = 1.0f / std::sqrt(ss / static_cast<float>(d) + eps);
    for (i = 0; i < d; ++i) out[r * ldo + i] = xr[i] * w[static_cast<std::size_t>(i)] * scale;
  }
}

// Rotates consecutive pairs (v[2i], v[2i+1]) by the angles whose cos / sin
// are c[i] / s[i] (llama.cpp's "normal" RoPE).
inline void rope(float* v, std::int64_t half, const float* c, const float* s) {
  for (std::int64_t i = 0; i < half; ++i) {
    const float x0 = v[2 * i], x1 = v[2 * i + 1];
    v[2 * i] = x0 * c[i] - x1 * s[i];
    v[2 * i + 1] = x0 * s[i] + x1 * c[i];
  }
}

// x += attention(xn) Wo^T over the committed cache and each node's masked tree slots.
inline void attention(const weights& w, const layer_weights& L, state& s, const batch& b, scratch& sc) {
  const config& c = w.cfg;
  const auto n = static_cast<std::int64_t>(b.tokens.size());
  const std::int64_t dh = c.head_dim, group = c.heads / c.kv_heads, P = state::page;
  const std::int64_t ld = L.qkv.rows;  // q | k | v per row
  grow(sc.proj, n * ld);
  kernel::matmul(n, sc.xn.data(), c.d, L.qkv, sc.proj.data(), ld);
  // RoPE, then this batch's keys and values into their slots.
  for (std::int64_t r = 0; r < n; ++r) {
    float* row = sc.proj.data() + r * ld;
    const std::int64_t pos = b.positions[static_cast<std::size_t>(r)], half = dh / 2;
    const float *cs = nullptr, *sn = nullptr;
    if (pos >= 0 && pos < w.rope_positions) {
      cs = w.rope_cos.data() + pos * half;
      sn = w.rope_sin.data() + pos * half;
    } else {  // past the tables: the same float math as the tables
      grow(sc.o, 2 * half);
      for (std::int64_t i = 0; i < half; ++i) {
        const float ang = static_cast<float>(pos) * rope_inv_freq(c, i);
        sc.o[static_cast<std::size_t>(i)] = std::cos(ang);
        sc.o[static_cast<std::size_t>(half + i)] = std::sin(ang);
      }
      cs = sc.o.data();
      sn = sc.o.data() + half;
    }
    for (std::int64_t h = 0; h < c.heads + c.kv_heads; ++h) rope(row + h * dh, half, cs, sn);
    const std::int64_t slot = s.cache_len + b.first_slot + r;
    for (std::int64_t h = 0; h < c.kv_heads; ++h) {
      const float* k = row + (c.heads + h) * dh;
      const float* v = row + (c.heads + c.kv_heads + h) * dh;
      float* kp = s.k_page(L.cache_index, slot / P, h) + slot % P;
      float* vp = s.v_page(L.cache_index, slot / P, h) + (slot % P) * dh;
      for (std::int64_t e = 0; e < dh; ++e) kp[e * P] = k[e];
      std::copy_n(v, dh, vp);
    }
  }
  // Keys: every committed position, then tree slots up to the last one any row names.
  std::int64_t slots = 0;
  for (std::int64_t i = 0; i < n * b.words; ++i)
    if (b.mask[static_cast<std::size_t>(i)] != 0)
      slots = std::max(slots, (i % b.words) * 64 + 64 - std::countl_zero(b.mask[static_cast<std::size_t>(i)]));
  const std::int64_t T = s.cache_len + slots, pages = (T + P - 1) / P, ldS = pages * P;
  if (T > s.capacity()) throw std::invalid_argument("forward: mask names a slot past the cache");
  const std::int64_t M = group * n;  // query rows per KV head
  grow(sc.q, M * dh);
  grow(sc.scores, M * ldS);
  grow(sc.o, M * dh);
  grow(sc.attn, n * c.heads * dh);
  const float scale = 1.0f / std::sqrt(static_cast<float>(dh));
  for (std::int64_t kh = 0; kh < c.kv_heads; ++kh) {
    // Q rows of this KV head's query heads, row m = r * group + g, pre-scaled.
    for (std::int64_t r = 0; r < n; ++r)
      for (std::int64_t g = 0; g < group; ++g) {
        const float* q = sc.proj.data() + r * ld + (kh * group + g) * dh;
        for (std::int64_t e = 0; e < dh; ++e) sc.q[static_cast<std::size_t>((r * group + g) * dh + e)] = scale * q[e];
      }
    // Scores [M, T]: one product with each page's [dh x 16] transposed keys.
    for (std::int64_t lp = 0; lp < pages; ++lp)
      kernel::panel_rows(M, sc.q.data(), dh, s.k_page(L.cache_index, lp, kh), P, dh, sc.scores.data() + lp * P, ldS, P,
                         false);
    // Masked softmax per row: committed keys always, tree slot j if bit j of the node's row.
    for (std::int64_t m = 0; m < M; ++m) {
      float* sr = sc.scores.data() + m * ldS;
      const std::uint64_t* bits = b.mask.data() + (m / group) * b.words;
      for (std::int64_t j = 0; j < slots; ++j)
        if (!specdec::mask_test(bits, j)) sr[s.cache_len + j] = -INFINITY;
      const float mx = max8(sr, T);
      if (mx == -INFINITY) {  // a row that sees no key at all: zero output, as an empty sum
        std::fill_n(sr, T, 0.0f);
        continue;
      }
      for (std::int64_t t = 0; t < T; ++t) sr[t] -= mx;
      // Masked keys: exp(0) then 0, rather than exp(-inf): an underflowing
      // exp result can cost a microcode assist per element.
      for (std::int64_t j = 0; j < slots; ++j)
        if (!specdec::mask_test(bits, j)) sr[s.cache_len + j] = 0.0f;
      exp_inplace(sr, T);
      for (std::int64_t j = 0; j < slots; ++j)
        if (!specdec::mask_test(bits, j)) sr[s.cache_len + j] = 0.0f;
      const float inv = 1.0f / sum8(sr, T);
      for (std::int64_t t = 0; t < T; ++t) sr[t] *= inv;
    }
    // Output [M, dh] = P V, page by page in place (a page's values are a
    // [16, dh] row block: dh / 16 panels, 16 keys deep), summed into o.
    for (std::int64_t lp = 0; lp < pages; ++lp)
      for (std::int64_t p = 0; p < dh / P; ++p)
        kernel::panel_rows(M, sc.scores.data() + lp * P, ldS, s.v_page(L.cache_index, lp, kh) + p * P, dh,
                           std::min(P, T - lp * P), sc.o.data() + p * P, dh, P, lp > 0);
    for (std::int64_t r = 0; r < n; ++r)
      for (std::int64_t g = 0; g < group; ++g)
        std::copy_n(sc.o.data() + (r * group + g) * dh, dh, sc.attn.data() + r * c.heads * dh + (kh * group + g) * dh);
  }
  kernel::matmul(n, sc.attn.data(), c.heads * dh, L.wo, sc.x.data(), c.d, true);
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

// x += mamba2(xn) (specdec's tree conv1d and tree scan between the projections).
inline void mamba(const weights& w, const layer_weights& L, state& s, const batch& b, scratch& sc) {
  const config& c = w.cfg;
  const auto n = static_cast<std::int64_t>(b.tokens.size());
  const std::int64_t ch = c.conv_channels(), di = c.d_inner(), H = c.ssm_heads, ld = L.in_proj.rows;
  const auto li = static_cast<std::size_t>(L.cache_index);
  grow(sc.proj, n * ld);
  kernel::matmul(n, sc.xn.data(), c.d, L.in_proj, sc.proj.data(), ld);  // [n, z | xBC | dt]
  auto& raw = s.round_xbc_raw[li];
  auto& xbc = s.round_xbc[li];
  auto& dt = s.round_dt[li];
  raw.resize(static_cast<std::size_t>(n * ch));
  xbc.resize(raw.size());
  dt.resize(static_cast<std::size_t>(n * H));
  grow(sc.z, n * di);
  for (std::int64_t r = 0; r < n; ++r) {
    const float* p = sc.proj.data() + r * ld;
    std::copy_n(p, di, sc.z.data() + r * di);
    std::copy_n(p + di, ch, raw.data() + r * ch);
    std::copy_n(p + di + ch, H, dt.data() + r * H);
  }
  // Tree conv1d: each node's window comes from its ancestors, then the conv state.
  specdec::tree_conv1d_inputs<float> cin;
  cin.x = specdec::make_view<const float>(raw.data(), n, ch);
  // Weight [W, channels] and the column-major state, viewed as [channels,
  // W] and [channels, W - 1]: channel-contiguous, so the conv reads them in
  // place instead of gathering them per call, and the commit moves columns.
  cin.weight = specdec::view2d<const float>{L.conv_w.data(), {ch, c.conv}, {1, ch}};
  cin.bias = specdec::make_view<const float>(L.conv_b.data(), ch);
  cin.conv_state = specdec::view2d<const float>{s.conv_state[li].data(), {ch, c.conv - 1}, {1, ch}};
  cin.silu = true;
  sc.ws.resize(std::max(sc.ws.size(), specdec::tree_conv1d_workspace_size(c.conv)));
  specdec::throw_if_error(specdec::tree_conv1d(b.parent, cin, specdec::make_view<float>(xbc.data(), n, ch), sc.ws));
  // Tree scan, gated by silu(z), from the committed SSM state.
  auto in = ssm_inputs(c, L, xbc.data(), dt.data(), s.ssm_state[li].data(), n);
  in.z = specdec::make_view<const float>(sc.z.data(), n, H, c.ssm_headdim);
  const specdec::tree_ssm_options<float> opt{};
  grow(sc.y, n * di);
  grow(sc.yn, n * di);
  specdec::tree_ssm_shape shape;
  specdec::throw_if_error(specdec::validate_tree_ssm_shapes(in, shape));
  // A round's tree (up to 16 nodes, or up to 64 where the recurrent form is
  // the faster one anyway) runs the recurrent scan and keeps every node's
  // state: the commit then copies one state instead of replaying the
  // accepted path (hybrid chain of 5: commit 36 -> 6 us per round, the
  // forward unchanged within noise, measured before the scan without
  // states was folded; with states it stays the per-node form). Long
  // prefills do not.
  specdec::view4d<float> states{};
  auto method = specdec::tree_scan_method::automatic;
  const bool keep =
      s.keep_node_states || n <= 16 ||
      (n <= 64 && specdec::tree_scan_choose(b.parent, shape, false, true) == specdec::tree_scan_method::recurrent);
  s.node_states_kept[li] = keep ? 1 : 0;
  if (keep) {
    s.node_states[li].resize(static_cast<std::size_t>(n * H * c.ssm_headdim * c.ssm_state));
    states = specdec::make_view<float>(s.node_states[li].data(), n, H, c.ssm_headdim, c.ssm_state);
    method = specdec::tree_scan_method::recurrent;
  }
  sc.ws.resize(std::max(sc.ws.size(), specdec::tree_scan_workspace_size<float>(b.parent, shape, method)));
  specdec::throw_if_error(specdec::tree_scan(
      b.parent, in, opt, specdec::make_view<float>(sc.y.data(), n, H, c.ssm_headdim), states, sc.ws, method));
  rms_norm(n, di, sc.y.data(), di, L.ssm_norm, c.eps, sc.yn.data(), di);
  kernel::matmul(n, sc.yn.data(), di, L.out_proj, sc.x.data(), c.d, true);
}

// x += down(silu(gate(xn)) * up(xn)).
inline void feed_forward(const config& c, const layer_weights& L, std::int64_t n, scratch& sc) {
  const std::int64_t f = c.ffn, ld = 2 * f;
  grow(sc.proj, n * ld);
  kernel::matmul(n, sc.xn.data(), c.d, L.gate_up, sc.proj.data(), ld);
  grow(sc.z, n * f);
  for (std::int64_t r = 0; r < n; ++r) {
    float* g = sc.proj.data() + r * ld;
    float* e = sc.z.data() + r * f;
    for (std::int64_t i = 0; i < f; ++i) e[i] = -g[i];
    exp_inplace(e, f);
    for (std::int64_t i = 0; i < f; ++i) g[i] = g[i] / (1.0f + e[i]) * g[f + i];  // silu(gate) * up
  }
  kernel::matmul(n, sc.proj.data(), ld, L.down, sc.x.data(), c.d, true);
}

}  // namespace detail

//! Runs the batch; writes logits [n, vocab] row-major into `logits`.
//! Throws std::invalid_argument (or specdec::error) on a bad batch.
inline void forward(const weights& w, state& s, const batch& b, std::span<float> logits, scratch& sc) {
  const config& c = w.cfg;
  const auto n = static_cast<std::int64_t>(b.tokens.size());
  if (n == 0 || static_cast<std::int64_t>(b.positions.size()) != n ||
      static_cast<std::int64_t>(b.mask.size()) < n * b.words || b.first_logit < 0 || b.first_logit > n ||
      static_cast<std::int64_t>(logits.size()) < (n - b.first_logit) * c.vocab)
    throw std::invalid_argument("forward: batch sizes disagree");
  if (b.first_slot < 0 || s.cache_len + b.first_slot + n > s.capacity())
    throw std::invalid_argument("forward: KV cache capacity exceeded");
  const bool has_ssm = c.kinds.find('m') != std::string::npos;
  if (has_ssm && static_cast<std::int64_t>(b.parent.size()) != n)
    throw std::invalid_argument("forward: Mamba2 layers need one parent per node");
  if (has_ssm) s.round_parent.assign(b.parent.begin(), b.parent.end());
  detail::grow(sc.x, n * c.d);
  detail::grow(sc.xn, n * c.d);
  for (std::int64_t r = 0; r < n; ++r) {
    const token_id t = b.tokens[static_cast<std::size_t>(r)];
    if (t < 0 || t >= c.vocab) throw std::invalid_argument("forward: token out of range");
    std::copy_n(w.embed.data() + t * c.d, c.d, sc.x.data() + r * c.d);
  }
  for (const auto& L : w.layers) {
    detail::rms_norm(n, c.d, sc.x.data(), c.d, L.norm1, c.eps, sc.xn.data(), c.d);
    if (L.kind == 'a')
      detail::attention(w, L, s, b, sc);
    else
      detail::mamba(w, L, s, b, sc);
    detail::rms_norm(n, c.d, sc.x.data(), c.d, L.norm2, c.eps, sc.xn.data(), c.d);
    detail::feed_forward(c, L, n, sc);
  }
  const std::int64_t f = b.first_logit;
  if (f == n) return;
  detail::rms_norm(n - f, c.d, sc.x.data() + f * c.d, c.d, w.norm, c.eps, sc.xn.data() + f * c.d, c.d);
  kernel::matmul(n - f, sc.xn.data() + f * c.d, c.d, w.output, logits.data(), c.vocab);
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
    if (s.node_states_kept[li] != 0 && !path.empty()) {  // the accepted node's state, from the scan
      const std::size_t size = s.ssm_state[li].size();
      std::copy_n(s.node_states[li].data() + static_cast<std::size_t>(path.back()) * size, size,
                  s.ssm_state[li].data());
    } else {
      const auto in =
          detail::ssm_inputs(c, L, s.round_xbc[li].data(), s.round_dt[li].data(), s.ssm_state[li].data(), n);
      specdec::throw_if_error(specdec::tree_ssm_commit_path(
          parent, in, specdec::tree_ssm_options<float>{}, path,
          specdec::make_view<float>(s.ssm_state[li].data(), c.ssm_heads, c.ssm_headdim, c.ssm_state)));
    }
    specdec::throw_if_error(specdec::tree_conv1d_commit_state(
        parent, specdec::make_view<const float>(s.round_xbc_raw[li].data(), n, ch), path,
        specdec::view2d<float>{s.conv_state[li].data(), {ch, c.conv - 1}, {1, ch}}));
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
  forward(w, s, batch{tokens, pos, parent, mask, words, 0, n}, {}, sc);
  commit(w, s, parent, path);
}

}  // namespace models
