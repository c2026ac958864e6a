//! \file
//! specdec inside llama.cpp: one speculative round (draft -> one
//! llama_decode of the whole token tree -> specdec verification -> cache
//! commit) on a llama_context, plus the plain one-token-per-call reference.
//!
//! Cache layout (llama.cpp's KV cache is logical: cells are tagged with
//! (position, sequence ids), and attention between two cells is allowed when
//! they share a sequence id and the key's position is not after the query's):
//! - sequence 0 holds the committed text except its newest token; that
//!   token is the root of the next tree and is decoded with it;
//! - a round gives leaf j of the tree sequence 1 + j, copies the committed
//!   prefix into it (llama_memory_seq_cp: a tag, no data moves), and decodes
//!   every node once, at position prefix + depth, tagged with the sequences
//!   of all leaves below it. A node then attends to exactly its ancestors
//!   and the prefix, which is the tree attention mask.
//! - the commit turns specdec's keep indices into sequence calls: the kept
//!   entries are the accepted path's cells, which already sit at positions
//!   prefix .. prefix + accepted in the sequence of any leaf below the last
//!   accepted node, so they are copied into sequence 0 and every leaf
//!   sequence is removed (cells left without a sequence are free again).
//!   No K/V bytes move; specdec's in-place KV commit is for engines with a
//!   physical [slot]-indexed cache.
#pragma once

#include <gguf.h>
#include <llama.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "specdec/cache/keep_indices.hpp"
#include "specdec/core/philox.hpp"
#include "specdec/core/status.hpp"
#include "specdec/core/view.hpp"
#include "specdec/draft/drafter.hpp"
#include "specdec/tree/paths.hpp"
#include "specdec/tree/token_tree.hpp"
#include "specdec/tree/validate.hpp"
#include "specdec/verify/distribution.hpp"
#include "specdec/verify/tree_verify.hpp"

namespace specdec_llama {

//! Any failure of llama.cpp or of a specdec call, with a message.
struct llama_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

inline void check(const specdec::status& st, const char* what) {
  if (!st.ok()) throw llama_error(std::string(what) + ": " + st.message());
}

//! How a model is loaded. Every program of the example (comparison, test,
//! llama.cpp's own programs through run.sh's `-nr`) loads with the same
//! settings, so the test decodes batches the way the comparison does.
struct model_options {
  //! llama.cpp's "extra buffer types" (llama_model_params::use_extra_bufts):
  //! CPU weight repacking into interleaved layouts (AVX-512/AMX kernels for
  //! Q4_0/Q4_1/Q8_0). Off by default: on Intel Xeons with AMX the repacked
  //! path crashed on the first decode of more than one token (issue 21), and
  //! on this AMD machine it gains plain decoding little (docs/llama_cpp.md).
  bool repack = false;
};

//! Owning llama_model.
class model {
 public:
  explicit model(const std::string& path, const model_options& o = {}) {
    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 999;  // ignored by a CPU-only build
    mp.use_extra_bufts = o.repack;
    m_ = llama_model_load_from_file(path.c_str(), mp);
    if (m_ == nullptr) throw llama_error("cannot load GGUF model " + path);
  }
  model(const model&) = delete;
  model& operator=(const model&) = delete;
  ~model() { llama_model_free(m_); }

  llama_model* get() const noexcept { return m_; }
  const llama_vocab* vocab() const noexcept { return llama_model_get_vocab(m_); }
  std::int32_t n_vocab() const noexcept { return llama_vocab_n_tokens(vocab()); }

  std::vector<llama_token> tokenize(const std::string& text) const {
    std::vector<llama_token> out(text.size() + 8);
    int n = llama_tokenize(vocab(), text.data(), static_cast<std::int32_t>(text.size()), out.data(),
                           static_cast<std::int32_t>(out.size()), true, true);
    if (n < 0) {
      out.resize(static_cast<std::size_t>(-n));
      n = llama_tokenize(vocab(), text.data(), static_cast<std::int32_t>(text.size()), out.data(),
                         static_cast<std::int32_t>(out.size()), true, true);
    }
    if (n < 0) throw llama_error("tokenization failed");
    out.resize(static_cast<std::size_t>(n));
    return out;
  }

  std::string detokenize(std::span<const llama_token> toks) const {
    std::string s;
    char buf[256];
    for (llama_token t : toks) {
      const int n = llama_token_to_piece(vocab(), t, buf, sizeof buf, 0, false);
      if (n > 0) s.append(buf, static_cast<std::size_t>(n));
    }
    return s;
  }

 private:
  llama_model* m_ = nullptr;
};

//! llama_decode found no KV cells for the batch (its return value 1): the
//! caller may retry with a smaller tree.
struct kv_full_error : llama_error {
  using llama_error::llama_error;
};

//! A copy of a GGUF model in another weight format, made by llama.cpp's own
//! quantizer (llama_model_quantize, requantizing allowed) and written next
//! to it as `<name>.<format>.gguf` on first use, reused after. Returns its
//! path. Formats: "F32" (exactly dequantized: the strict per-node test runs
//! on it, since without activation quantization a batch and one-token
//! decoding agree to rounding), "F16", "Q8_0", "Q4_0". A copy is at best as
//! good as its source (docs/llama_cpp.md gives what each costs and how
//! its passes batch).
inline std::string model_copy(const std::string& path, const std::string& format) {
  static const std::pair<const char*, llama_ftype> kFormats[] = {{"F32", LLAMA_FTYPE_ALL_F32},
                                                                 {"F16", LLAMA_FTYPE_MOSTLY_F16},
                                                                 {"Q8_0", LLAMA_FTYPE_MOSTLY_Q8_0},
                                                                 {"Q4_0", LLAMA_FTYPE_MOSTLY_Q4_0}};
  const auto* f =
      std::find_if(std::begin(kFormats), std::end(kFormats), [&](const auto& k) { return format == k.first; });
  if (f == std::end(kFormats)) throw llama_error("unknown weight format " + format + " (F32, F16, Q8_0, Q4_0)");
  const std::string::size_type dot = path.rfind('.');
  const std::string base = path.substr(0, dot);
  const std::string::size_type q = base.rfind('.');  // "name.Q4_1" -> "name"
  const std::string out = (q != std::string::npos ? base.substr(0, q) : base) + "." + format + ".gguf";
  if (std::FILE* file = std::fopen(out.c_str(), "rb")) {
    std::fclose(file);
    return out;
  }
  llama_model_quantize_params qp = llama_model_quantize_default_params();
  qp.ftype = f->second;
  qp.allow_requantize = true;
  qp.nthread = 1;
  const std::string tmp = out + ".part";
  if (llama_model_quantize(path.c_str(), tmp.c_str(), &qp) != 0 || std::rename(tmp.c_str(), out.c_str()) != 0)
    throw llama_error("could not write the " + format + " copy " + out);
  return out;
}

//! A layer-skip drafter made from the model at `path`: its first `layers`
//! blocks with its own embeddings, final norm and output head, written next
//! to it as <name>.first<layers>.gguf on first use (the weights are copied,
//! not requantized). Decoding it is the target's early exit after `layers`
//! blocks, with no training for that exit (self-speculative decoding).
//! Refused (llama_error): fewer blocks than asked for, a block count that is
//! not a u32, and per-layer metadata arrays (hybrid models), which would
//! need cutting too.
inline std::string layer_skip_copy(const std::string& path, std::int32_t layers) {
  const std::string::size_type slash = path.rfind('/'), dot = path.rfind('.');
  const std::string stem =
      dot != std::string::npos && (slash == std::string::npos || dot > slash) ? path.substr(0, dot) : path;
  const std::string out = stem + ".first" + std::to_string(layers) + ".gguf";
  if (std::FILE* file = std::fopen(out.c_str(), "rb")) {
    std::fclose(file);
    return out;
  }
  ggml_context* data = nullptr;
  gguf_context* in = gguf_init_from_file(path.c_str(), gguf_init_params{false, &data});
  if (in == nullptr) throw llama_error("could not read " + path);
  gguf_context* copy = gguf_init_empty();
  auto done = [&] {
    gguf_free(copy);
    gguf_free(in);
    ggml_free(data);
  };
  const std::int64_t arch = gguf_find_key(in, "general.architecture");
  const std::string blocks_key = std::string(arch >= 0 ? gguf_get_val_str(in, arch) : "") + ".block_count";
  const std::int64_t blocks = gguf_find_key(in, blocks_key.c_str());
  const std::uint32_t total =
      blocks >= 0 && gguf_get_kv_type(in, blocks) == GGUF_TYPE_UINT32 ? gguf_get_val_u32(in, blocks) : 0;
  if (layers < 1 || static_cast<std::uint32_t>(layers) >= total) {
    done();
    throw llama_error("layer_skip_copy: " + path + " has no u32 " + blocks_key + " above " + std::to_string(layers));
  }
  for (std::int64_t k = 0; k < gguf_get_n_kv(in); ++k)
    if (gguf_get_kv_type(in, k) == GGUF_TYPE_ARRAY && gguf_get_arr_n(in, k) == total) {
      const std::string key = gguf_get_key(in, k);
      done();
      throw llama_error("layer_skip_copy: per-layer metadata " + key + " is not cut (not supported)");
    }
  gguf_set_kv(copy, in);
  gguf_set_val_u32(copy, blocks_key.c_str(), static_cast<std::uint32_t>(layers));
  for (std::int64_t i = 0; i < gguf_get_n_tensors(in); ++i) {
    const std::string name = gguf_get_tensor_name(in, i);  // "blk.<b>.<weight>" or a shared tensor
    if (name.starts_with("blk.") && std::atoi(name.c_str() + 4) >= layers) continue;
    gguf_add_tensor(copy, ggml_get_tensor(data, name.c_str()));
  }
  const std::string tmp = out + ".part";
  const bool written = gguf_write_to_file(copy, tmp.c_str(), false);
  done();
  if (!written || std::rename(tmp.c_str(), out.c_str()) != 0) throw llama_error("could not write " + out);
  return out;
}

//! The exactly dequantized F32 copy (model_copy(path, "F32")).
inline std::string f32_copy(const std::string& path) { return model_copy(path, "F32"); }

//! Settings of a context. Flash attention stays off by default: with it on,
//! a tree pass and a chain pass reduce attention in different orders and
//! their logits can differ by a few tenths near ties.
struct context_options {
  std::int32_t n_ctx = 2048;
  std::int32_t n_batch = 256;   //!< largest tree (or prompt chunk) per llama_decode
  std::int32_t n_seq_max = 64;  //!< 1 + largest number of leaves
  std::int32_t threads = 2;
  bool flash_attn = false;
};

//! Cells a context needs so that no round runs out of them: the prompt,
//! the generation (which may pass n_predict by one round of at most
//! max_depth + 1 tokens), the largest tree, whose nodes occupy cells of
//! their own until the commit, and a margin for llama.cpp's padding.
//! A model drafter's context needs the same (its levels' nodes).
inline std::int32_t context_cells(std::size_t prompt, std::int32_t n_predict, std::int32_t max_tree_nodes,
                                  std::int32_t max_depth) {
  return static_cast<std::int32_t>(prompt) + n_predict + max_depth + 1 + max_tree_nodes + 32;
}

//! Owning llama_context with kv_unified (one cell buffer for all sequences,
//! which the per-leaf sequences of a tree need) and one ubatch per decode.
class context {
 public:
  context(const model& m, const context_options& o) : opt_(o), n_vocab_(m.n_vocab()) {
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = static_cast<std::uint32_t>(o.n_ctx);
    cp.n_batch = static_cast<std::uint32_t>(o.n_batch);
    cp.n_ubatch = static_cast<std::uint32_t>(o.n_batch);
    cp.n_seq_max = static_cast<std::uint32_t>(o.n_seq_max);
    cp.n_threads = o.threads;
    cp.n_threads_batch = o.threads;
    cp.kv_unified = true;
    cp.flash_attn_type = o.flash_attn ? LLAMA_FLASH_ATTN_TYPE_ENABLED : LLAMA_FLASH_ATTN_TYPE_DISABLED;
    ctx_ = llama_init_from_model(m.get(), cp);
    if (ctx_ == nullptr) throw llama_error("llama_init_from_model failed");
    batch_ = llama_batch_init(o.n_batch, 0, o.n_seq_max);
  }
  context(const context&) = delete;
  context& operator=(const context&) = delete;
  ~context() {
    llama_batch_free(batch_);
    llama_free(ctx_);
  }

  llama_context* get() const noexcept { return ctx_; }
  llama_memory_t memory() const noexcept { return llama_get_memory(ctx_); }
  const context_options& options() const noexcept { return opt_; }
  std::int32_t n_vocab() const noexcept { return n_vocab_; }

  //! Batch building: entries in the order given (parents before children).
  void batch_clear() noexcept { batch_.n_tokens = 0; }
  void batch_add(llama_token t, llama_pos pos, std::span<const llama_seq_id> seqs, bool output) {
    if (batch_.n_tokens >= opt_.n_batch) throw llama_error("batch larger than context_options::n_batch");
    if (seqs.empty() || seqs.size() > static_cast<std::size_t>(opt_.n_seq_max))
      throw llama_error("a batch entry needs 1 .. n_seq_max sequence ids");
    const auto i = static_cast<std::size_t>(batch_.n_tokens);
    batch_.token[i] = t;
    batch_.pos[i] = pos;
    batch_.n_seq_id[i] = static_cast<std::int32_t>(seqs.size());
    for (std::size_t k = 0; k < seqs.size(); ++k) batch_.seq_id[i][k] = seqs[k];
    batch_.logits[i] = output ? 1 : 0;
    ++batch_.n_tokens;
  }
  std::int32_t batch_size() const noexcept { return batch_.n_tokens; }

  //! One llama_decode of the current batch.
  void decode() {
    const auto t0 = std::chrono::steady_clock::now();
    const int rc = llama_decode(ctx_, batch_);
    seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (rc == 1)
      throw kv_full_error("llama_decode returned 1 (no KV cells for a batch of " + std::to_string(batch_.n_tokens) +
                          " tokens)");
    if (rc != 0) throw llama_error("llama_decode returned " + std::to_string(rc));
    ++calls_;
    tokens_ += batch_.n_tokens;
  }

  //! Logits of batch entry i of the last decode (V floats).
  const float* logits(std::int32_t i) const {
    const float* r = llama_get_logits_ith(ctx_, i);
    if (r == nullptr) throw llama_error("llama_get_logits_ith: no output row " + std::to_string(i));
    return r;
  }

  //! Decodes `toks` at positions pos0.. in sequence 0 (chunks of n_batch);
  //! keeps the logits of the last token only.
  void prefill(std::span<const llama_token> toks, llama_pos pos0) {
    const llama_seq_id s0 = 0;
    for (std::size_t b = 0; b < toks.size(); b += static_cast<std::size_t>(opt_.n_batch)) {
      const std::size_t e = std::min(toks.size(), b + static_cast<std::size_t>(opt_.n_batch));
      batch_clear();
      for (std::size_t i = b; i < e; ++i)
        batch_add(toks[i], pos0 + static_cast<llama_pos>(i), {&s0, 1}, i + 1 == toks.size());
      decode();
    }
  }

  void reset_memory() { llama_memory_clear(memory(), true); }

  std::int64_t calls() const noexcept { return calls_; }
  std::int64_t decoded_tokens() const noexcept { return tokens_; }
  double decode_seconds() const noexcept { return seconds_; }
  void reset_counters() noexcept {
    calls_ = 0;
    tokens_ = 0;
    seconds_ = 0.0;
  }

 private:
  context_options opt_;
  std::int32_t n_vocab_ = 0;
  llama_context* ctx_ = nullptr;
  llama_batch batch_{};
  std::int64_t calls_ = 0;
  std::int64_t tokens_ = 0;
  double seconds_ = 0.0;
};

//! The target side of speculation: the committed text, its cache, one tree
//! pass and the commit of an accepted path.
class tree_target {
 public:
  tree_target(const model& m, const context_options& o) : ctx_(m, o) {}

  context& ctx() noexcept { return ctx_; }
  const std::vector<llama_token>& committed() const noexcept { return committed_; }
  //! Cache length (sequence 0): every committed token but the newest.
  llama_pos prefix() const noexcept { return static_cast<llama_pos>(committed_.size()) - 1; }

  //! Clears the cache and prefills every prompt token but the last.
  void start(std::span<const llama_token> prompt) {
    if (prompt.empty()) throw llama_error("empty prompt");
    ctx_.reset_memory();
    committed_.assign(prompt.begin(), prompt.end());
    if (prompt.size() > 1) ctx_.prefill(prompt.first(prompt.size() - 1), 0);
    ctx_.reset_counters();
  }

  //! Decodes the whole tree (root = newest committed token) in one
  //! llama_decode and copies its N rows of logits, in node order, into an
  //! N x V buffer. Precondition: tree.token[0] == committed().back().
  specdec::view2d<const float> score_tree(const specdec::tree_view& tree) {
    const std::int32_t n = tree.size;
    // Every check before the first cache call, so a bad tree changes nothing.
    check(specdec::validate_tree(tree, ctx_.n_vocab()), "validate_tree");
    if (tree.token[0] != committed_.back()) throw llama_error("tree root must be the newest committed token");
    if (n > ctx_.options().n_batch) throw llama_error("tree larger than context_options::n_batch");
    std::span<const specdec::node_id> parent(tree.parent, static_cast<std::size_t>(n));
    leaves_ = specdec::leaves(parent);
    if (static_cast<std::int32_t>(leaves_.size()) + 1 > ctx_.options().n_seq_max)
      throw llama_error("tree has more leaves than context_options::n_seq_max - 1");
    // Sequence ids of the leaves below every node (a leaf's own id included).
    node_seqs_.assign(static_cast<std::size_t>(n), {});
    for (std::size_t j = 0; j < leaves_.size(); ++j)
      for (specdec::node_id u = leaves_[j]; u >= 0; u = tree.parent[u])
        node_seqs_[static_cast<std::size_t>(u)].push_back(static_cast<llama_seq_id>(1 + j));
    if (sibling_bug_)  // test only: each node tagged with its parent's leaves, so siblings see each other
      for (std::int32_t i = n - 1; i >= 1; --i)
        node_seqs_[static_cast<std::size_t>(i)] = node_seqs_[static_cast<std::size_t>(tree.parent[i])];
    const llama_pos p0 = prefix();
    for (std::size_t j = 0; j < leaves_.size(); ++j)
      llama_memory_seq_cp(ctx_.memory(), 0, static_cast<llama_seq_id>(1 + j), -1, -1);
    ctx_.batch_clear();
    for (std::int32_t i = 0; i < n; ++i)  // topological order: parents before children
      ctx_.batch_add(tree.token[i], p0 + tree.depth[i], node_seqs_[static_cast<std::size_t>(i)], true);
    try {
      ctx_.decode();
    } catch (...) {  // leave the cache as it was: only the committed sequence
      for (std::size_t j = 0; j < leaves_.size(); ++j)
        llama_memory_seq_rm(ctx_.memory(), static_cast<llama_seq_id>(1 + j), -1, -1);
      throw;
    }
    const auto V = static_cast<std::size_t>(ctx_.n_vocab());
    rows_.resize(static_cast<std::size_t>(n) * V);
    for (std::int32_t i = 0; i < n; ++i) std::copy_n(ctx_.logits(i), V, rows_.data() + static_cast<std::size_t>(i) * V);
    tree_n_ = n;
    return specdec::make_view(static_cast<const float*>(rows_.data()), static_cast<std::int64_t>(n),
                              static_cast<std::int64_t>(V));
  }

  //! Keeps the accepted path (path[0..accepted], root first) of the tree
  //! last scored, drops every other node, and appends the emitted tokens.
  //! Returns how many tokens were appended (accepted + 1).
  std::int32_t commit(const specdec::tree_view& tree, std::span<const specdec::node_id> path,
                      const specdec::verify_result& r) {
    if (tree.size != tree_n_) throw llama_error("commit: not the tree that was scored");
    const llama_pos p0 = prefix();
    std::span<const specdec::node_id> parent(tree.parent, static_cast<std::size_t>(tree.size));
    // Batch entry of node i is i, so keep[k] = p0 + path[k]. In the logical
    // cache the entry path[k] already sits at position p0 + k of every leaf
    // sequence below it: the gather is one range copy.
    keep_.resize(path.size());
    std::int32_t kept = 0;
    check(specdec::keep_indices_from_path(parent, path.first(static_cast<std::size_t>(r.accepted) + 1), {}, p0, keep_,
                                          kept),
          "keep_indices_from_path");
    const llama_seq_id src = node_seqs_[static_cast<std::size_t>(r.last_node)].front();
    for (std::int32_t k = 0; k < kept; ++k)  // kept entry k: batch entry keep[k] - p0, at position p0 + k
      if (tree.depth[keep_[static_cast<std::size_t>(k)] - p0] != k) throw llama_error("commit: path is not root first");
    llama_memory_t mem = ctx_.memory();
    llama_memory_seq_cp(mem, src, 0, p0, p0 + kept);
    for (std::size_t j = 0; j < leaves_.size(); ++j) llama_memory_seq_rm(mem, static_cast<llama_seq_id>(1 + j), -1, -1);
    tree_n_ = 0;
    for (std::int32_t k = 1; k < kept; ++k) committed_.push_back(tree.token[path[static_cast<std::size_t>(k)]]);
    committed_.push_back(r.next_token);
    return kept;
  }

  //! Drops the tree last scored without committing anything: the cache
  //! and the committed text are as before score_tree.
  void discard() {
    for (std::size_t j = 0; j < leaves_.size(); ++j)
      llama_memory_seq_rm(ctx_.memory(), static_cast<llama_seq_id>(1 + j), -1, -1);
    tree_n_ = 0;
  }

  //! Plain decoding: the newest committed token alone in sequence 0;
  //! returns its logits (the next-token distribution of the committed text).
  const float* plain_step() {
    const llama_seq_id s0 = 0;
    ctx_.batch_clear();
    ctx_.batch_add(committed_.back(), prefix(), {&s0, 1}, true);
    ctx_.decode();
    return ctx_.logits(0);
  }
  //! Median wall time of `reps` target passes over a chain of n tokens
  //! after the committed text (the root, then copies of it), decoded in
  //! sequence 1 and removed again: the pass cost curve t(n). The cache and
  //! the committed text are unchanged; the call counters are not.
  double time_pass(std::int32_t n, std::int32_t reps) {
    const llama_seq_id s1 = 1;
    std::vector<double> t;
    for (std::int32_t r = 0; r < reps; ++r) {
      llama_memory_seq_cp(ctx_.memory(), 0, s1, -1, -1);
      ctx_.batch_clear();
      for (std::int32_t i = 0; i < n; ++i) ctx_.batch_add(committed_.back(), prefix() + i, {&s1, 1}, true);
      const auto t0 = std::chrono::steady_clock::now();
      ctx_.decode();
      t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      llama_memory_seq_rm(ctx_.memory(), s1, -1, -1);
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
  }

  //! Test only: injects a masking bug into score_tree (every node tagged
  //! with the sequences of its parent's leaves, so it also sees its siblings
  //! and their subtrees), the negative control of the strict per-node test.
  void inject_sibling_bug(bool on) noexcept { sibling_bug_ = on; }

  //! Appends a token after plain_step.
  void push(llama_token t) { committed_.push_back(t); }

 private:
  context ctx_;
  std::vector<llama_token> committed_;
  std::vector<specdec::node_id> leaves_;
  std::vector<std::vector<llama_seq_id>> node_seqs_;
  std::vector<float> rows_;
  std::vector<specdec::position_id> keep_;
  std::int32_t tree_n_ = 0;
  bool sibling_bug_ = false;
};

}  // namespace specdec_llama
