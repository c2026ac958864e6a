//! \file
//! Ancestor masks of a tree in topological order: packed bit rows, dense
//! 0/1 matrices and additive float masks (0 / -inf) for attention.
//!
//! Row i marks the ancestors-or-self of node i (the columns node i may
//! attend to). Every layout is built from the parent row: row[i] =
//! row[parent[i]] | {i}, so a packed mask costs O(N * ceil(N / W)) word
//! operations for W-bit words and there is no limit on N.
//!
//! Packed bit order: bit j of row i lives in word j / W of that row, at bit
//! position j % W counting from the least significant bit, i.e.
//! `(row[j / W] >> (j % W)) & 1`. Rows are `row_stride` words apart
//! (row_stride >= ceil(N / W); 0 means exactly that); only the first
//! ceil(N / W) words of each row are written.
#pragma once

#include <algorithm>
#include <concepts>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <type_traits>
#include <vector>

#include "specdec/core/config.hpp"
#include "specdec/core/error.hpp"
#include "specdec/core/status.hpp"
#include "specdec/tree/detail/tree_common.hpp"
#include "specdec/tree/token_tree.hpp"
#include "specdec/tree/validate.hpp"

namespace specdec {

//! Word types a packed mask can use.
template <class W>
concept mask_word = std::same_as<W, std::uint32_t> || std::same_as<W, std::uint64_t>;

//! Element types of a dense 0/1 mask.
template <class T>
concept dense_mask_element = std::same_as<T, bool> || std::same_as<T, std::uint8_t>;

//! Bits per word of a packed mask.
template <mask_word Word>
inline constexpr std::int64_t mask_word_bits = static_cast<std::int64_t>(sizeof(Word) * 8);

//! Words per packed row for `n` columns: ceil(n / W).
template <mask_word Word>
SPECDEC_HD constexpr std::int64_t mask_words_per_row(std::int64_t n) noexcept {
  return (n + mask_word_bits<Word> - 1) / mask_word_bits<Word>;
}

//! Reads bit j of a packed row (see the file comment for the bit order).
template <mask_word Word>
SPECDEC_HD constexpr bool mask_test(const Word* row, std::int64_t j) noexcept {
  return ((row[j / mask_word_bits<Word>] >> (j % mask_word_bits<Word>)) & Word{1}) != 0;
}

//! Words a packed mask of n rows needs with the given row stride
//! (0 = ceil(n / W)): (n - 1) * stride + ceil(n / W); 0 for n == 0, -1 when
//! 0 < stride < ceil(n / W).
template <mask_word Word>
constexpr std::int64_t packed_mask_size(std::int64_t n, std::int64_t row_stride_words = 0) noexcept {
  const std::int64_t words = mask_words_per_row<Word>(n);
  const std::int64_t stride = row_stride_words == 0 ? words : row_stride_words;
  if (n <= 0) return 0;
  if (stride < words) return -1;
  return (n - 1) * stride + words;
}

//! Elements a dense (bool / uint8) mask of n x n needs with the given row
//! stride (0 = n); -1 when 0 < stride < n.
constexpr std::int64_t dense_mask_size(std::int64_t n, std::int64_t row_stride = 0) noexcept {
  const std::int64_t stride = row_stride == 0 ? n : row_stride;
  if (n <= 0) return 0;
  if (stride < n) return -1;
  return (n - 1) * stride + n;
}

//! Elements an additive mask of n rows and (prefix + n) columns needs with
//! the given row stride (0 = prefix + n); -1 when the stride is too small.
constexpr std::int64_t additive_mask_size(std::int64_t n, std::int64_t prefix, std::int64_t row_stride = 0) noexcept {
  const std::int64_t cols = prefix + n;
  const std::int64_t stride = row_stride == 0 ? cols : row_stride;
  if (n <= 0) return 0;
  if (stride < cols) return -1;
  return (n - 1) * stride + cols;
}

namespace detail {

//! Packed rows of a mask whose rows have exactly Words words (unrolled).
template <mask_word Word, int Words>
void packed_mask_rows_fixed(const node_id* parent, std::int32_t n, Word* out, std::int64_t stride) noexcept {
  constexpr std::int64_t W = mask_word_bits<Word>;
  for (int w = 0; w < Words; ++w) out[w] = 0;
  out[0] = Word{1};
  for (std::int32_t i = 1; i < n; ++i) {
    Word* row = out + i * stride;
    const Word* prow = out + static_cast<std::int64_t>(parent[i]) * stride;
    for (int w = 0; w < Words; ++w) row[w] = prow[w];
    row[i / W] |= Word{1} << (i % W);
  }
}

//! Packed rows by the parent recurrence; trusts its input (topological
//! parents, a buffer of packed_mask_size). Shared with the batched builder.
template <mask_word Word>
void packed_mask_rows(const node_id* parent, std::int32_t n, Word* out, std::int64_t stride) noexcept {
  constexpr std::int64_t W = mask_word_bits<Word>;
  const std::int64_t words = mask_words_per_row<Word>(n);
  // Typical draft trees (tens of nodes) have 1 to 4 words per row: a
  // compile-time row length removes the loop overhead that dominates there.
  switch (words) {
    case 1:
      return packed_mask_rows_fixed<Word, 1>(parent, n, out, stride);
    case 2:
      return packed_mask_rows_fixed<Word, 2>(parent, n, out, stride);
    case 3:
      return packed_mask_rows_fixed<Word, 3>(parent, n, out, stride);
    case 4:
      return packed_mask_rows_fixed<Word, 4>(parent, n, out, stride);
    default:
      break;
  }
  for (std::int64_t w = 0; w < words; ++w) out[w] = 0;
  out[0] = Word{1};
  for (std::int32_t i = 1; i < n; ++i) {
    Word* row = out + i * stride;
    const Word* prow = out + static_cast<std::int64_t>(parent[i]) * stride;
    // The parent's row is zero past its own word, so a plain copy of the
    // whole row is correct; one branch-free loop beats split copy/zero loops.
    for (std::int64_t w = 0; w < words; ++w) row[w] = prow[w];
    row[i / W] |= Word{1} << (i % W);
  }
}

//! Resolves a row stride (0 = `need`) for `rows` rows of `need` elements
//! and checks it: at least a row, and (rows - 1) * stride + need within
//! int64, so buffer sizes and row addresses cannot overflow.
inline status check_stride(std::int64_t need, std::int64_t& stride, std::int64_t rows) noexcept {
  if (stride < 0) return make_status(status_code::invalid_argument, "row stride must be >= 0");
  if (stride == 0) stride = need;
  if (stride < need) return make_status(status_code::invalid_argument, "row stride smaller than a row");
  if (rows > 1 && stride > (INT64_MAX - need) / (rows - 1))
    return make_status(status_code::invalid_argument, "row stride too large: mask size overflows int64");
  return status::success();
}

}  // namespace detail

//! Packed ancestor-or-self mask of a tree in topological order, into
//! caller memory (`out` holds packed_mask_size(N, row_stride_words) words).
//! O(N * ceil(N / W)) time, no allocation, deterministic.
//! Errors (nothing written): those of validate_topological_parents,
//! invalid_argument (stride negative, smaller than a row, or so large that
//! the mask size overflows int64), buffer_too_small.
template <mask_word Word>
status build_packed_mask(std::span<const node_id> parent, std::span<Word> out,
                         std::int64_t row_stride_words = 0) noexcept {
  std::int32_t n = 0;
  SPECDEC_TRY(detail::node_count(parent.size(), n));
  SPECDEC_TRY(validate_topological_parents(parent.data(), n));
  SPECDEC_TRY(detail::check_stride(mask_words_per_row<Word>(n), row_stride_words, n));
  if (static_cast<std::int64_t>(out.size()) < packed_mask_size<Word>(n, row_stride_words))
    return make_status(status_code::buffer_too_small, "mask buffer smaller than packed_mask_size");
  detail::packed_mask_rows<Word>(parent.data(), n, out.data(), row_stride_words);
  return status::success();
}

//! Dense 0/1 ancestor-or-self mask (`out(i, j)` = 1 when j is i or one of
//! its ancestors), rows `row_stride` elements apart (0 = N). O(N^2).
//! Errors as build_packed_mask.
template <dense_mask_element T>
status build_dense_mask(std::span<const node_id> parent, std::span<T> out, std::int64_t row_stride = 0) noexcept {
  std::int32_t n = 0;
  SPECDEC_TRY(detail::node_count(parent.size(), n));
  SPECDEC_TRY(validate_topological_parents(parent.data(), n));
  SPECDEC_TRY(detail::check_stride(n, row_stride, n));
  if (static_cast<std::int64_t>(out.size()) < dense_mask_size(n, row_stride))
    return make_status(status_code::buffer_too_small, "mask buffer smaller than dense_mask_size");
  T* base = out.data();
  // Clear first (one call when the rows are contiguous), then each row is
  // its parent's row up to the parent (the parent's row is zero past the
  // parent) plus itself. Rows never overlap, so memcpy is safe; it
  // vectorizes where a loop over the one shared buffer could not (aliasing).
  if (row_stride == n) {
    std::memset(base, 0, static_cast<std::size_t>(n) * static_cast<std::size_t>(n) * sizeof(T));
  } else {
    for (std::int32_t i = 0; i < n; ++i) std::memset(base + i * row_stride, 0, static_cast<std::size_t>(n) * sizeof(T));
  }
  base[0] = T{1};
  for (std::int32_t i = 1; i < n; ++i) {
    T* row = base + i * row_stride;
    const std::int32_t p = parent[static_cast<std::size_t>(i)];
    std::memcpy(row, base + static_cast<std::int64_t>(p) * row_stride, static_cast<std::size_t>(p + 1) * sizeof(T));
    row[i] = T{1};
  }
  return status::success();
}

//! Additive attention mask: row i has `prefix` leading columns of 0 (the
//! committed KV cache every node sees), then N tree columns that are 0 for
//! ancestors-or-self of i and -infinity elsewhere. Rows `row_stride`
//! elements apart (0 = prefix + N); only prefix + N columns are written, so
//! a caller can build just the tree block by passing prefix = 0 and a view
//! offset into its full mask. O(N * (prefix + N)).
//! Errors as build_packed_mask, plus invalid_argument for prefix < 0 (or
//! prefix + N overflowing int64).
template <std::floating_point Real>
status build_additive_mask(std::span<const node_id> parent, std::span<Real> out, std::int64_t prefix = 0,
                           std::int64_t row_stride = 0) noexcept {
  static_assert(std::numeric_limits<Real>::has_infinity);
  std::int32_t n = 0;
  SPECDEC_TRY(detail::node_count(parent.size(), n));
  SPECDEC_TRY(validate_topological_parents(parent.data(), n));
  if (prefix < 0 || prefix > INT64_MAX - n) return make_status(status_code::invalid_argument, "prefix out of range");
  SPECDEC_TRY(detail::check_stride(prefix + n, row_stride, n));
  if (static_cast<std::int64_t>(out.size()) < additive_mask_size(n, prefix, row_stride))
    return make_status(status_code::buffer_too_small, "mask buffer smaller than additive_mask_size");
  const Real blocked = -std::numeric_limits<Real>::infinity();
  Real* base = out.data();
  for (std::int32_t i = 0; i < n; ++i) {
    Real* row = base + i * row_stride;
    std::fill(row, row + prefix, Real{0});  // not a loop: GCC -O3 flags one after inlining the tests' huge prefixes
    Real* tree = row + prefix;
    // As for the dense mask: copy the parent's row up to the parent only.
    const std::int32_t keep = i == 0 ? 0 : parent[static_cast<std::size_t>(i)] + 1;
    if (keep > 0)
      std::memcpy(tree, base + static_cast<std::int64_t>(keep - 1) * row_stride + prefix,
                  static_cast<std::size_t>(keep) * sizeof(Real));
    for (std::int32_t j = keep; j < n; ++j) tree[j] = blocked;
    tree[i] = Real{0};
  }
  return status::success();
}

//! Owning packed mask with dense rows (stride ceil(N / W)); throws specdec::error.
template <mask_word Word>
std::vector<Word> packed_mask(std::span<const node_id> parent) {
  std::vector<Word> out(static_cast<std::size_t>(packed_mask_size<Word>(static_cast<std::int64_t>(parent.size()))));
  throw_if_error(build_packed_mask<Word>(parent, std::span<Word>(out)));
  return out;
}

//! Owning dense N x N 0/1 mask (uint8); throws specdec::error.
inline std::vector<std::uint8_t> dense_mask(std::span<const node_id> parent) {
  std::vector<std::uint8_t> out(static_cast<std::size_t>(dense_mask_size(static_cast<std::int64_t>(parent.size()))));
  throw_if_error(build_dense_mask<std::uint8_t>(parent, std::span<std::uint8_t>(out)));
  return out;
}

//! Owning N x (prefix + N) additive mask; throws specdec::error.
template <std::floating_point Real = float>
std::vector<Real> additive_mask(std::span<const node_id> parent, std::int64_t prefix = 0) {
  // An invalid prefix sizes nothing: build_additive_mask then reports it.
  const auto n = static_cast<std::int64_t>(parent.size());
  const std::int64_t size = prefix < 0 || prefix > INT64_MAX - n ? 0 : additive_mask_size(n, prefix);
  std::vector<Real> out(static_cast<std::size_t>(size));
  throw_if_error(build_additive_mask<Real>(parent, std::span<Real>(out), prefix));
  return out;
}

}  // namespace specdec
