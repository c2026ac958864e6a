//! \file
//! Packing several requests' token trees into one verification batch, and
//! unpacking the per-request results.
//!
//! Ragged (FlashInfer-style "custom mask" batches): the requests' nodes are
//! concatenated (CSR `tree_offsets`), request r's queries see a KV of
//! cache_len[r] + n_r entries (its own cache prefix, then its own tree), and
//! its mask block is n_r x (cache_len[r] + n_r), stored row-major one block
//! after another (CSR `mask_offsets`). Requests never see each other: the
//! mask is block-diagonal.
//!
//! Padded (SpecMemo: "Speculative Decoding is in Your Pocket", section 3.3): every request gets `width`
//! query slots and a KV of prefix_width + width entries; pad queries, pad
//! cache entries (slots >= cache_len or flagged as pad holes) and pad tree
//! slots are masked with the deny value (-inf for additive masks), and
//! position ids count only real entries so positional embeddings continue
//! from the real sequence length.
#pragma once

#include <concepts>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <type_traits>

#include "specdec/cache/kv_layout.hpp"
#include "specdec/core/config.hpp"
#include "specdec/core/status.hpp"
#include "specdec/core/view.hpp"
#include "specdec/tree/mask.hpp"
#include "specdec/tree/token_tree.hpp"
#include "specdec/tree/validate.hpp"

namespace specdec {

//! Element of a batch or forest mask: a 0/1 mask (bool, std::uint8_t) or
//! an additive float mask (allow = 0, deny = -inf).
template <class M>
concept batch_mask_element = (dense_mask_element<M> || std::floating_point<M>)&&!std::is_const_v<M>;

//! Output sizes of a ragged batch: query tokens, KV entries, mask elements.
struct ragged_batch_sizes {
  std::int64_t tokens = 0;  //!< packed query tokens (all nodes)
  std::int64_t kv = 0;      //!< KV entries: sum of cache_len + n per request
  std::int64_t mask = 0;    //!< mask elements: sum of n * (cache_len + n)
};

namespace detail {

inline status check_batch_trees(std::span<const node_id> parent, std::span<const std::int32_t> tree_offsets,
                                std::span<const position_id> cache_len) noexcept {
  if (tree_offsets.size() != cache_len.size() + 1)
    return make_status(status_code::size_mismatch, "tree_offsets must have num_requests + 1 entries");
  if (tree_offsets[0] != 0) return make_status(status_code::invalid_argument, "tree_offsets[0] must be 0");
  if (static_cast<std::size_t>(tree_offsets.back()) != parent.size())
    return make_status(status_code::size_mismatch, "tree_offsets[R] must equal parent.size()");
  for (std::size_t r = 0; r < cache_len.size(); ++r) {
    const auto ri = static_cast<std::int64_t>(r);
    if (tree_offsets[r + 1] < tree_offsets[r] || static_cast<std::size_t>(tree_offsets[r + 1]) > parent.size())
      return make_status(status_code::not_sorted, "tree_offsets must be non-decreasing", ri);
    if (cache_len[r] < 0) return make_status(status_code::invalid_argument, "cache_len must be non-negative", ri);
    const std::int32_t n = tree_offsets[r + 1] - tree_offsets[r];
    if (cache_len[r] > std::numeric_limits<position_id>::max() - n)
      return make_status(status_code::out_of_range, "position overflows position_id", ri);
    const status s = validate_topological_parents(parent.data() + tree_offsets[r], n);
    if (!s.ok()) return make_status(s.code(), s.message(), ri);
  }
  return status::success();
}

//! Writes one mask row's tree part: allow for ancestors-or-self of node i
//! (walking parents: O(depth)), deny elsewhere.
template <class M>
inline void tree_mask_row(const node_id* parent, std::int32_t n, std::int32_t i, M* row, M allow, M deny) noexcept {
  for (std::int32_t j = 0; j < n; ++j) row[j] = deny;
  for (std::int32_t u = i; u >= 0; u = parent[u]) row[u] = allow;
}

//! Shared checks of pad_rows / unpad_rows: CSR offsets from 0, equal
//! column counts, enough rows on both sides, every tree at most `width`.
template <class A, class B>
status check_pad_rows(const view2d<A>& padded, const view2d<B>& ragged, std::span<const std::int32_t> tree_offsets,
                      std::int32_t width) noexcept {
  if (tree_offsets.empty() || tree_offsets[0] != 0)
    return make_status(status_code::invalid_argument, "tree_offsets must start at 0");
  const std::size_t R = tree_offsets.size() - 1;
  if (padded.extent[1] != ragged.extent[1]) return make_status(status_code::size_mismatch, "column counts differ");
  if (padded.extent[0] < static_cast<std::int64_t>(R) * width || ragged.extent[0] < tree_offsets[R])
    return make_status(status_code::buffer_too_small, "padded or ragged rows too few");
  for (std::size_t r = 0; r < R; ++r)
    if (tree_offsets[r + 1] < tree_offsets[r] || tree_offsets[r + 1] - tree_offsets[r] > width)
      return make_status(status_code::out_of_range, "tree longer than width or offsets decreasing",
                         static_cast<std::int64_t>(r));
  return status::success();
}

}  // namespace detail

//! Sizes of the ragged layout for R trees (validates the trees: one root
//! first, topological local parent ids). O(total nodes).
inline status ragged_batch_size(std::span<const node_id> parent, std::span<const std::int32_t> tree_offsets,
                                std::span<const position_id> cache_len, ragged_batch_sizes& out) noexcept {
  SPECDEC_TRY(detail::check_batch_trees(parent, tree_offsets, cache_len));
  ragged_batch_sizes s;
  constexpr std::int64_t big = std::numeric_limits<std::int64_t>::max();
  for (std::size_t r = 0; r < cache_len.size(); ++r) {
    const std::int64_t n = tree_offsets[r + 1] - tree_offsets[r];
    const std::int64_t kv = cache_len[r] + n;  // no overflow: checked above
    if (kv > big - s.kv || (n > 0 && kv > (big - s.mask) / n))
      return make_status(status_code::out_of_range, "batch sizes overflow int64", static_cast<std::int64_t>(r));
    s.tokens += n;
    s.kv += kv;
    s.mask += n * kv;
  }
  out = s;
  return status::success();
}

//! Ragged verification batch. Inputs: R trees (CSR, local parent ids) and
//! cache lengths. Outputs (sizes from ragged_batch_size):
//!   positions[t]      cache_len[r] + depth for the t-th packed node;
//!   kv_offsets[R+1]   CSR over KV entries (cache_len[r] + n_r each);
//!   mask_offsets[R+1] CSR over mask elements (n_r * (cache_len[r] + n_r));
//!   mask              request blocks, row i of request r: `allow` for KV
//!                     j < cache_len[r] and for cache_len[r] + m with m an
//!                     ancestor-or-self of i, `deny` elsewhere.
//! M is the mask element: std::uint8_t/bool (1/0) or float (0/-inf).
//! Nothing is written on error. O(mask size + total depth); no allocation.
template <batch_mask_element M>
status pack_ragged_batch(std::span<const node_id> parent, std::span<const std::int32_t> tree_offsets,
                         std::span<const position_id> cache_len, std::span<position_id> positions,
                         std::span<std::int64_t> kv_offsets, std::span<std::int64_t> mask_offsets, std::span<M> mask,
                         M allow, M deny) noexcept {
  ragged_batch_sizes s;
  SPECDEC_TRY(ragged_batch_size(parent, tree_offsets, cache_len, s));
  const std::size_t R = cache_len.size();
  if (positions.size() < static_cast<std::size_t>(s.tokens) || kv_offsets.size() < R + 1 ||
      mask_offsets.size() < R + 1 || mask.size() < static_cast<std::size_t>(s.mask))
    return make_status(status_code::buffer_too_small, "ragged batch output too small");
  kv_offsets[0] = 0;
  mask_offsets[0] = 0;
  for (std::size_t r = 0; r < R; ++r) {
    const std::int32_t t0 = tree_offsets[r];
    const std::int32_t n = tree_offsets[r + 1] - t0;
    const std::int64_t c = cache_len[r];
    const node_id* p = parent.data() + t0;
    const std::int64_t kv = c + n;
    kv_offsets[r + 1] = kv_offsets[r] + kv;
    mask_offsets[r + 1] = mask_offsets[r] + n * kv;
    for (std::int32_t i = 0; i < n; ++i) {
      positions[static_cast<std::size_t>(t0 + i)] =
          i == 0 ? cache_len[r] : positions[static_cast<std::size_t>(t0 + p[i])] + 1;
      M* row = mask.data() + mask_offsets[r] + i * kv;
      for (std::int64_t j = 0; j < c; ++j) row[j] = allow;
      detail::tree_mask_row(p, n, i, row + c, allow, deny);
    }
  }
  return status::success();
}

//! Padded verification batch (uniform shapes). Request r's tree (CSR,
//! local parents, its tokens in `tokens` likewise) fills slots [0, n_r) of
//! a row of `width` >= max n_r slots; slots past n_r hold `pad_token`.
//! KV of a row: prefix_width cache slots, then the width tree slots. Cache
//! slot j of request r is real when j < cache_len[r] (<= prefix_width) and
//! prefix_pad[r * prefix_width + j] == 0 (prefix_pad may be empty: no holes;
//! holes are what earlier padded rounds leave behind).
//! Outputs: out_tokens[R*width], out_positions[R*width] (real prefix count
//! + depth; pad slots get the real prefix count + n_r, the next free
//! position), mask[R*width*(prefix_width+width)]: real node i allows the
//! real cache slots and its ancestors-or-self; a pad query allows only
//! itself (a fully masked row would make softmax NaN). Nothing is written
//! on error. O(R * width * (prefix_width + width)).
template <batch_mask_element M>
status pack_padded_batch(std::span<const node_id> parent, std::span<const token_id> tokens,
                         std::span<const std::int32_t> tree_offsets, std::span<const position_id> cache_len,
                         std::int32_t prefix_width, std::span<const std::uint8_t> prefix_pad, std::int32_t width,
                         token_id pad_token, std::span<token_id> out_tokens, std::span<position_id> out_positions,
                         std::span<M> mask, M allow, M deny) noexcept {
  SPECDEC_TRY(detail::check_batch_trees(parent, tree_offsets, cache_len));
  const std::size_t R = cache_len.size();
  if (tokens.size() != parent.size()) return make_status(status_code::size_mismatch, "tokens must match parent");
  if (prefix_width < 0 || width < 0) return make_status(status_code::invalid_argument, "widths must be >= 0");
  if (!prefix_pad.empty() && prefix_pad.size() != R * static_cast<std::size_t>(prefix_width))
    return make_status(status_code::size_mismatch, "prefix_pad must be empty or R * prefix_width");
  for (std::size_t r = 0; r < R; ++r) {
    if (tree_offsets[r + 1] - tree_offsets[r] > width)
      return make_status(status_code::buffer_too_small, "width smaller than a tree", static_cast<std::int64_t>(r));
    if (cache_len[r] > prefix_width)
      return make_status(status_code::out_of_range, "cache_len exceeds prefix_width", static_cast<std::int64_t>(r));
  }
  const std::size_t kvw = static_cast<std::size_t>(prefix_width) + static_cast<std::size_t>(width);
  const std::size_t slots = R * static_cast<std::size_t>(width);
  if (out_tokens.size() < slots || out_positions.size() < slots || mask.size() < slots * kvw)
    return make_status(status_code::buffer_too_small, "padded batch output too small");
  for (std::size_t r = 0; r < R; ++r) {
    const std::int32_t t0 = tree_offsets[r];
    const std::int32_t n = tree_offsets[r + 1] - t0;
    const node_id* p = parent.data() + t0;
    const std::uint8_t* holes = prefix_pad.empty() ? nullptr : prefix_pad.data() + r * prefix_width;
    position_id real = 0;
    for (std::int32_t j = 0; j < cache_len[r]; ++j) real += (holes == nullptr || holes[j] == 0) ? 1 : 0;
    for (std::int32_t i = 0; i < width; ++i) {
      const std::size_t q = r * static_cast<std::size_t>(width) + static_cast<std::size_t>(i);
      M* row = mask.data() + q * kvw;
      if (i < n) {
        out_tokens[q] = tokens[static_cast<std::size_t>(t0 + i)];
        out_positions[q] = i == 0 ? real : out_positions[r * static_cast<std::size_t>(width) + p[i]] + 1;
        for (std::int32_t j = 0; j < prefix_width; ++j)
          row[j] = (j < cache_len[r] && (holes == nullptr || holes[j] == 0)) ? allow : deny;
        detail::tree_mask_row(p, n, i, row + prefix_width, allow, deny);
        for (std::int32_t j = n; j < width; ++j) row[prefix_width + j] = deny;
      } else {
        out_tokens[q] = pad_token;
        out_positions[q] = real + n;
        for (std::size_t j = 0; j < kvw; ++j) row[j] = deny;
        row[static_cast<std::size_t>(prefix_width) + static_cast<std::size_t>(i)] = allow;
      }
    }
  }
  return status::success();
}

//! Unpacks padded per-slot results ([R*width] rows, e.g. logits or hidden
//! states) into ragged rows aligned with the packed nodes (CSR
//! tree_offsets): ragged row tree_offsets[r] + i = padded row r*width + i.
//! Both views [rows][cols] with equal cols; must not overlap. O(moved).
template <class T>
status unpad_rows(const view2d<const T>& padded, std::span<const std::int32_t> tree_offsets, std::int32_t width,
                  const view2d<T>& ragged) noexcept {
  SPECDEC_TRY(detail::check_pad_rows(padded, ragged, tree_offsets, width));
  const std::size_t R = tree_offsets.size() - 1;
  for (std::size_t r = 0; r < R; ++r)
    for (std::int32_t i = 0; i < tree_offsets[r + 1] - tree_offsets[r]; ++i)
      for (std::int64_t c = 0; c < ragged.extent[1]; ++c)
        ragged(tree_offsets[r] + i, c) = padded(static_cast<std::int64_t>(r) * width + i, c);
  return status::success();
}

//! The inverse of unpad_rows: ragged per-node rows into padded slots; pad
//! slots are filled with `fill`. O(R * width * cols).
template <class T>
status pad_rows(const view2d<const T>& ragged, std::span<const std::int32_t> tree_offsets, std::int32_t width,
                const view2d<T>& padded, T fill) noexcept {
  SPECDEC_TRY(detail::check_pad_rows(padded, ragged, tree_offsets, width));
  const std::size_t R = tree_offsets.size() - 1;
  for (std::size_t r = 0; r < R; ++r) {
    const std::int32_t n = tree_offsets[r + 1] - tree_offsets[r];
    for (std::int32_t i = 0; i < width; ++i)
      for (std::int64_t c = 0; c < padded.extent[1]; ++c)
        padded(static_cast<std::int64_t>(r) * width + i, c) = i < n ? ragged(tree_offsets[r] + i, c) : fill;
  }
  return status::success();
}

//! Request r's rows of a ragged result [tokens][cols] (CSR tree_offsets):
//! a view, no copy. Precondition: r < R and the offsets are valid.
template <class T>
constexpr view2d<T> ragged_rows(const view2d<T>& all, std::span<const std::int32_t> tree_offsets,
                                std::size_t r) noexcept {
  view2d<T> v = all;
  v.data = all.data + tree_offsets[r] * all.stride[0];
  v.extent[0] = tree_offsets[r + 1] - tree_offsets[r];
  return v;
}

}  // namespace specdec
