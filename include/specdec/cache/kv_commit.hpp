//! \file
//! In-place KV commit on the host: every request of a batch keeps the
//! positions of its accepted path and moves the k-th of them to
//! cache_len + k, in every layer and head of every tensor, for contiguous
//! and paged caches. See kv_layout.hpp for the cache description and
//! docs/cache.md for the layouts table.
//!
//! Why in place is safe: keep lists are strictly
//! increasing with keep[0] >= cache_len, so keep[k] >= cache_len + k: each
//! destination is at or before its own source and strictly before every
//! later source. Copying the entries of one (layer, head) row in increasing
//! k therefore never overwrites a source before it is read. Distinct rows,
//! tensors and (paged) requests' pages are disjoint, so only the order
//! within a row matters: prefetching never reorders copies, and an executor
//! may run different (tensor, request) items concurrently.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <ranges>
#include <span>
#include <type_traits>

#include "specdec/cache/kv_layout.hpp"
#include "specdec/core/config.hpp"
#include "specdec/core/status.hpp"

namespace specdec {

//! Caller-owned parallelism for commit_kv: the library starts no threads.
//! `parallel_for(context, n, body, body_context)` must call
//! `body(body_context, i)` exactly once for every i in [0, n), on any
//! threads, in any order, possibly concurrently, and return only after every
//! call has returned. commit_kv passes one item per (tensor, request) pair;
//! distinct items write disjoint memory (the kv_tensor and kv_position_map
//! preconditions), so the result does not depend on the schedule. A
//! default-constructed executor, or a batch of one item, runs in order on
//! the calling thread; `parallel_for` must not throw (commit_kv is
//! noexcept). Trivially copyable; `context` is the caller's pool.
struct kv_commit_executor {
  //! One item of work; never throws.
  using body_fn = void (*)(void* body_context, std::int64_t item) noexcept;
  //! The caller's parallel loop (null: serial on the calling thread).
  using parallel_for_fn = void (*)(void* context, std::int64_t n, body_fn body, void* body_context);
  parallel_for_fn parallel_for = nullptr;  //!< null: serial
  void* context = nullptr;                 //!< passed back to parallel_for
};

static_assert(std::is_trivially_copyable_v<kv_commit_executor>);

namespace detail {

//! Hints that [p, p + bytes) will be read (write = false) or written soon.
//! At most the first 4 KiB: longer blocks are streamed well by the
//! hardware prefetchers. A hint never faults, so any address is fine.
inline void kv_prefetch(const unsigned char* p, std::size_t bytes, bool write) noexcept {
#if defined(__GNUC__) || defined(__clang__)
  constexpr std::size_t line = 64, cap = 4096;
  const std::size_t n = bytes < cap ? bytes : cap;
  if (n == 0) return;
  // Every 64th byte; an unaligned range also ends in a line of its own.
  const bool tail = (reinterpret_cast<std::uintptr_t>(p) & (line - 1)) != 0;
  if (write) {
    for (std::size_t off = 0; off < n; off += line) __builtin_prefetch(p + off, 1, 3);
    if (tail) __builtin_prefetch(p + n - 1, 1, 3);
  } else {
    for (std::size_t off = 0; off < n; off += line) __builtin_prefetch(p + off, 0, 3);
    if (tail) __builtin_prefetch(p + n - 1, 0, 3);
  }
#else
  (void)p;
  (void)bytes;
  (void)write;
#endif
}

//! A run of consecutive kept positions that stays on one page of source and
//! destination: n entries from position src to dst (dst < src), with the
//! request- and position-dependent part of their element offsets.
struct kv_run {
  std::int64_t src_off;
  std::int64_t dst_off;
  std::int64_t n;
};

//! Element offset of position p of request r without the (layer, head)
//! part, which every layer and head shares. Preconditions: validated inputs.
template <class T>
inline std::int64_t kv_position_offset(const kv_tensor<T>& t, const kv_position_map& map, std::int64_t r,
                                       std::int64_t p) noexcept {
  if (!map.paged()) return r * t.stride_seq + p * t.stride_pos;
  const std::int64_t page = map.block_table[r * map.block_table_stride + p / map.page_size];
  return page * t.stride_seq + (p % map.page_size) * t.stride_pos;
}

//! Commits one request in one tensor. Kept entries already in place (a
//! prefix: once keep[k] > c + k, every later entry is shifted too) are
//! skipped. The rest is cut into runs of consecutive positions (split at
//! page boundaries of source and destination), whose offsets are computed
//! once per chunk of runs and reused for every (layer, head) row. Heads
//! collapse into one row when adjacent in memory ([..][pos][H][D]); a run
//! whose positions are adjacent too becomes one memmove. Rows are copied
//! in (layer, head) order, each row's runs in increasing k, which is
//! address order for dense layouts; while one row is copied, the lines of
//! the row about 4 KiB of moves ahead are prefetched, so that many DRAM
//! misses are in flight at once instead of the one or two a plain loop of
//! small copies has (the moved pieces are a few hundred bytes, scattered
//! over a large cache). Element-strided head dims are copied element by
//! element, without prefetching.
template <kv_element T>
inline void kv_commit_one(const kv_tensor<T>& t, const kv_position_map& map, std::int64_t r, std::int64_t c,
                          const position_id* keep, std::int64_t count) noexcept {
  std::int64_t k = 0;
  while (k < count && keep[k] == c + k) ++k;
  if (k == count) return;
  const bool collapse = t.heads > 1 && t.stride_head == t.head_dim * t.stride_dim;
  const std::int64_t heads = collapse ? 1 : t.heads;
  const std::int64_t row_elems = collapse ? t.heads * t.head_dim : t.head_dim;
  const bool unit_dim = t.stride_dim == 1;
  const bool block = unit_dim && t.stride_pos == row_elems;  // a run is one contiguous block
  const auto row_bytes = static_cast<std::size_t>(row_elems) * sizeof(T);
  const std::int64_t page = map.paged() ? map.page_size : INT64_MAX;
  const std::int64_t rows = t.layers * heads;
  constexpr int kChunk = 64;
  // Prefetch distance in bytes of moves; 2-8 KiB measured alike in
  // bench_cache (contiguous and paged), 4 KiB sits in the middle.
  constexpr std::size_t kAheadBytes = 4096;
  kv_run runs[kChunk];
  while (k < count) {
    int m = 0;
    std::size_t row_moved = 0;  // bytes one row moves for this chunk
    for (; m < kChunk && k < count; ++m) {
      const std::int64_t src = keep[k];
      const std::int64_t dst = c + k;
      // Extend the run while sources stay consecutive and neither side leaves its page.
      const std::int64_t room = page == INT64_MAX ? INT64_MAX : std::min(page - src % page, page - dst % page);
      std::int64_t n = 1;
      while (k + n < count && n < room && keep[k + n] == src + n) ++n;
      runs[m] = kv_run{kv_position_offset(t, map, r, src), kv_position_offset(t, map, r, dst), n};
      row_moved += static_cast<std::size_t>(n) * row_bytes;
      k += n;
    }
    const auto base_of = [&](std::int64_t q) {
      return t.data + (q / heads) * t.stride_layer + (q % heads) * t.stride_head;
    };
    const auto prefetch_row = [&](const T* base) {
      for (int i = 0; i < m; ++i) {
        const kv_run& run = runs[i];
        const std::int64_t pieces = block ? 1 : run.n;
        const std::size_t bytes = block ? static_cast<std::size_t>(run.n) * row_bytes : row_bytes;
        for (std::int64_t j = 0; j < pieces; ++j) {
          kv_prefetch(reinterpret_cast<const unsigned char*>(base + run.src_off + j * t.stride_pos), bytes, false);
          kv_prefetch(reinterpret_cast<const unsigned char*>(base + run.dst_off + j * t.stride_pos), bytes, true);
        }
      }
    };
    const std::int64_t ahead =
        unit_dim ? std::clamp<std::int64_t>(static_cast<std::int64_t>(kAheadBytes / row_moved), 1, 8) : 0;
    for (std::int64_t q = 0; q < ahead && q < rows; ++q) prefetch_row(base_of(q));
    for (std::int64_t q = 0; q < rows; ++q) {
      if (ahead > 0 && q + ahead < rows) prefetch_row(base_of(q + ahead));
      T* const base = base_of(q);
      for (int i = 0; i < m; ++i) {
        const kv_run& run = runs[i];
        T* d = base + run.dst_off;
        const T* s = base + run.src_off;
        if (block) {
          // One block; a short shift overlaps it, a single entry never does.
          if (run.n > 1)
            std::memmove(d, s, static_cast<std::size_t>(run.n) * row_bytes);
          else
            std::memcpy(d, s, row_bytes);
        } else if (unit_dim) {
          // Distinct positions never overlap: one plain copy per entry.
          for (std::int64_t j = 0; j < run.n; ++j) std::memcpy(d + j * t.stride_pos, s + j * t.stride_pos, row_bytes);
        } else {
          for (std::int64_t j = 0; j < run.n; ++j)
            for (std::int64_t e = 0; e < row_elems; ++e)
              d[j * t.stride_pos + e * t.stride_dim] = s[j * t.stride_pos + e * t.stride_dim];
        }
      }
    }
  }
}

//! Commits items [first, last) of a batch, item i = (tensor i / R,
//! request i % R), skipping requests whose `request_status` entry is not
//! ok (null: every request).
template <kv_element T>
inline void kv_commit_items(std::span<const kv_tensor<T>> tensors, const kv_position_map& map,
                            std::span<const position_id> cache_len, std::span<const std::int32_t> keep_offsets,
                            std::span<const position_id> keep, const std::int32_t* request_status, std::int64_t first,
                            std::int64_t last) noexcept {
  const auto R = static_cast<std::int64_t>(cache_len.size());
  for (std::int64_t i = first; i < last; ++i) {
    const auto ti = static_cast<std::size_t>(i / R);
    const auto r = static_cast<std::size_t>(i % R);
    if (request_status != nullptr && request_status[r] != 0) continue;
    const std::int32_t lo = keep_offsets[r];
    kv_commit_one(tensors[ti], map, static_cast<std::int64_t>(r), cache_len[r], keep.data() + lo,
                  keep_offsets[r + 1] - lo);
  }
}

//! What an executor's items need (passed through its void* context).
template <kv_element T>
struct kv_commit_job {
  std::span<const kv_tensor<T>> tensors;
  const kv_position_map* map;
  std::span<const position_id> cache_len;
  std::span<const std::int32_t> keep_offsets;
  std::span<const position_id> keep;
  const std::int32_t* request_status;  // null: every request

  static void item(void* self, std::int64_t i) noexcept {
    const auto& j = *static_cast<const kv_commit_job*>(self);
    kv_commit_items(j.tensors, *j.map, j.cache_len, j.keep_offsets, j.keep, j.request_status, i, i + 1);
  }
};

//! Whether the spans of a per-request commit have num_requests + 1 and
//! num_requests entries, num_requests < 2^31.
inline bool kv_commit_spans_agree(std::span<const position_id> cache_len, std::span<const std::int32_t> keep_offsets,
                                  std::span<std::int32_t> request_status) noexcept {
  return keep_offsets.size() == cache_len.size() + 1 && request_status.size() == cache_len.size() &&
         cache_len.size() <= static_cast<std::size_t>(INT32_MAX);
}

//! Runs the items of a validated batch, serially or on the executor.
template <kv_element T>
void kv_commit_run(std::span<const kv_tensor<T>> tensors, const kv_position_map& map,
                   std::span<const position_id> cache_len, std::span<const std::int32_t> keep_offsets,
                   std::span<const position_id> keep, const std::int32_t* request_status,
                   const kv_commit_executor& exec) noexcept {
  const auto items = static_cast<std::int64_t>(tensors.size()) * static_cast<std::int64_t>(cache_len.size());
  if (items == 0) return;
  if (exec.parallel_for == nullptr || items == 1) {
    kv_commit_items(tensors, map, cache_len, keep_offsets, keep, request_status, 0, items);
    return;
  }
  kv_commit_job<T> job{tensors, &map, cache_len, keep_offsets, keep, request_status};
  exec.parallel_for(exec.context, items, &kv_commit_job<T>::item, &job);
}

}  // namespace detail

//! Validates a whole commit without writing: the map, every tensor, the
//! batch header and every request. `keep` holds at least
//! `keep_offsets[num_requests]` entries (the rest are not read: a buffer of
//! fixed capacity may be passed round after round); spans must have
//! num_requests (+1) entries.
//! O(total keep + tensors). Returned index: the offending request or tensor.
template <kv_element T>
status validate_kv_commit(std::span<const kv_tensor<T>> tensors, const kv_position_map& map,
                          std::span<const position_id> cache_len, std::span<const std::int32_t> keep_offsets,
                          std::span<const position_id> keep) noexcept {
  if (keep_offsets.size() != cache_len.size() + 1)
    return make_status(status_code::size_mismatch, "keep_offsets must have num_requests + 1 entries");
  if (cache_len.size() > static_cast<std::size_t>(INT32_MAX))
    return make_status(status_code::invalid_argument, "too many requests");
  const kv_commit_batch b{static_cast<std::int32_t>(cache_len.size()), cache_len.data(), keep_offsets.data(),
                          keep.data()};
  SPECDEC_TRY(validate_kv_commit_header(b, map));
  if (b.num_requests > 0 && keep_offsets.back() >= 0 && static_cast<std::size_t>(keep_offsets.back()) > keep.size())
    return make_status(status_code::size_mismatch, "keep_offsets[num_requests] exceeds keep.size()");
  // Request by request, the CSR range before its keep entries are read (so a
  // bad CSR never reads out of bounds); the lowest failing request wins,
  // exactly as in the CUDA validation kernel.
  for (std::int32_t r = 0; r < b.num_requests; ++r) {
    const std::int32_t lo = keep_offsets[static_cast<std::size_t>(r)];
    const std::int32_t hi = keep_offsets[static_cast<std::size_t>(r) + 1];
    if (lo < 0 || hi < lo || static_cast<std::size_t>(hi) > keep.size())
      return make_status(status_code::not_sorted, "keep_offsets must be non-decreasing and within keep", r);
    SPECDEC_TRY(validate_kv_commit_request(b, map, r));
  }
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const status s = validate_kv_tensor(tensors[i], map, b.num_requests);
    if (!s.ok()) return make_status(s.code(), s.message(), static_cast<std::int64_t>(i));
  }
  return status::success();
}

//! In-place KV commit for a batch of requests over any number of tensors
//! (K and V, interleaved halves, per-layer pools), contiguous or paged.
//! Request r keeps the positions keep[keep_offsets[r]..keep_offsets[r+1])
//! (absolute positions, e.g. from keep_indices_from_path) and the k-th moves
//! to cache_len[r] + k; positions before cache_len and entries past the new
//! length are left as they are. Everything is validated before the first
//! write: on error the caches are byte-identical to the input.
//! Element bits are moved, never interpreted. Cost: moved bytes plus
//! O(tensors * layers * heads * keep) index work; no allocation;
//! deterministic (the bytes written do not depend on `exec`'s schedule).
//! Rows are prefetched a few KiB of moves ahead (many DRAM misses in
//! flight at once); with an executor, the (tensor, request) items run on
//! the caller's threads. Not thread-safe with respect to the same caches.
template <kv_element T>
status commit_kv(std::span<const kv_tensor<T>> tensors, const kv_position_map& map,
                 std::span<const position_id> cache_len, std::span<const std::int32_t> keep_offsets,
                 std::span<const position_id> keep, const kv_commit_executor& exec = {}) noexcept {
  SPECDEC_TRY(validate_kv_commit(tensors, map, cache_len, keep_offsets, keep));
  detail::kv_commit_run(tensors, map, cache_len, keep_offsets, keep, nullptr, exec);
  return status::success();
}

//! Validates every request of a commit on its own, the host twin of the
//! CUDA validation kernel (kernels::commit_kv): request_status[r] = 0
//! (ok) when request r can be committed, else the code that stops it. A
//! fault of the whole batch stops every request with its code: the header
//! and map (validate_kv_commit_header), keep_offsets[R] past keep
//! (size_mismatch), then the lowest failing tensor (validate_kv_tensor).
//! Otherwise each request gets its own code (kv_commit_request_code: its
//! CSR range, then validate_kv_commit_request). Returns the lowest
//! failing request's status (index r), ok when all pass; size_mismatch,
//! with request_status untouched, when it does not have num_requests
//! entries or the other spans disagree.
template <kv_element T>
status validate_kv_commit_requests(std::span<const kv_tensor<T>> tensors, const kv_position_map& map,
                                   std::span<const position_id> cache_len, std::span<const std::int32_t> keep_offsets,
                                   std::span<const position_id> keep, std::span<std::int32_t> request_status) noexcept {
  if (!detail::kv_commit_spans_agree(cache_len, keep_offsets, request_status))
    return make_status(status_code::size_mismatch,
                       "keep_offsets and request_status need num_requests + 1 and num_requests (< 2^31) entries");
  const kv_commit_batch b{static_cast<std::int32_t>(cache_len.size()), cache_len.data(), keep_offsets.data(),
                          keep.data()};
  status batch = validate_kv_commit_header(b, map);
  if (batch.ok() && b.num_requests > 0 && keep_offsets.back() >= 0 &&
      static_cast<std::size_t>(keep_offsets.back()) > keep.size())
    batch = make_status(status_code::size_mismatch, "keep_offsets[num_requests] exceeds keep.size()");
  for (std::size_t i = 0; batch.ok() && i < tensors.size(); ++i)
    batch = validate_kv_tensor(tensors[i], map, b.num_requests);
  status first = status::success();
  for (std::int32_t r = b.num_requests - 1; r >= 0; --r) {
    const status_code c =
        batch.ok() ? kv_commit_request_code(b, map, static_cast<std::int64_t>(keep.size()), r) : batch.code();
    request_status[static_cast<std::size_t>(r)] = static_cast<std::int32_t>(c);
    if (c != status_code::ok) first = make_status(c, batch.ok() ? status_code_name(c) : batch.message(), r);
  }
  return first;
}

//! commit_kv with one status per request, as the CUDA kernel
//! (kernels::commit_kv) reports them: validate_kv_commit_requests fills
//! `request_status`, then every request that passed is committed and the
//! others are left byte-identical (a batch-wide fault stops all of them).
//! Returns validate_kv_commit_requests' status: ok when every request was
//! committed. (Its own name: an overload of commit_kv would make
//! `commit_kv(..., keep, {})` ambiguous.)
template <kv_element T>
status commit_kv_per_request(std::span<const kv_tensor<T>> tensors, const kv_position_map& map,
                             std::span<const position_id> cache_len, std::span<const std::int32_t> keep_offsets,
                             std::span<const position_id> keep, std::span<std::int32_t> request_status,
                             const kv_commit_executor& exec = {}) noexcept {
  const status s = validate_kv_commit_requests(tensors, map, cache_len, keep_offsets, keep, request_status);
  if (!detail::kv_commit_spans_agree(cache_len, keep_offsets, request_status)) return s;  // nothing was written
  detail::kv_commit_run(tensors, map, cache_len, keep_offsets, keep, request_status.data(), exec);
  return s;
}

//! Single-request convenience: request 0 of a one-request batch (its row 0 /
//! block-table row 0). Same guarantees as the batched form.
template <kv_element T>
status commit_kv(std::span<const kv_tensor<T>> tensors, const kv_position_map& map, position_id cache_len,
                 std::span<const position_id> keep) noexcept {
  if (keep.size() > static_cast<std::size_t>(INT32_MAX))
    return make_status(status_code::invalid_argument, "keep list too long");
  const position_id len[1] = {cache_len};
  const std::int32_t off[2] = {0, static_cast<std::int32_t>(keep.size())};
  return commit_kv<T>(tensors, map, len, off, keep);
}

namespace detail {
template <class T>
struct kv_tensor_element {};
template <class T>
struct kv_tensor_element<kv_tensor<T>> {
  using type = T;
};
}  // namespace detail

//! Any contiguous range of kv_tensor<T> (std::vector, std::array, a C array):
//! the element type is deduced, so no explicit `commit_kv<T>` is needed.
template <class Tensors>
concept kv_tensor_range =
    std::ranges::contiguous_range<const Tensors&> && std::ranges::sized_range<const Tensors&> && requires {
  typename detail::kv_tensor_element<std::remove_cv_t<std::ranges::range_value_t<const Tensors&>>>::type;
};

//! commit_kv (batched) over a deduced kv_tensor range.
template <kv_tensor_range Tensors>
status commit_kv(const Tensors& tensors, const kv_position_map& map, std::span<const position_id> cache_len,
                 std::span<const std::int32_t> keep_offsets, std::span<const position_id> keep,
                 const kv_commit_executor& exec = {}) noexcept {
  using T = typename detail::kv_tensor_element<std::remove_cv_t<std::ranges::range_value_t<const Tensors&>>>::type;
  return commit_kv<T>(std::span<const kv_tensor<T>>(std::ranges::data(tensors), std::ranges::size(tensors)), map,
                      cache_len, keep_offsets, keep, exec);
}

//! commit_kv_per_request over a deduced kv_tensor range.
template <kv_tensor_range Tensors>
status commit_kv_per_request(const Tensors& tensors, const kv_position_map& map, std::span<const position_id> cache_len,
                             std::span<const std::int32_t> keep_offsets, std::span<const position_id> keep,
                             std::span<std::int32_t> request_status, const kv_commit_executor& exec = {}) noexcept {
  using T = typename detail::kv_tensor_element<std::remove_cv_t<std::ranges::range_value_t<const Tensors&>>>::type;
  return commit_kv_per_request<T>(std::span<const kv_tensor<T>>(std::ranges::data(tensors), std::ranges::size(tensors)),
                                  map, cache_len, keep_offsets, keep, request_status, exec);
}

//! commit_kv (single request) over a deduced kv_tensor range.
template <kv_tensor_range Tensors>
status commit_kv(const Tensors& tensors, const kv_position_map& map, position_id cache_len,
                 std::span<const position_id> keep) noexcept {
  using T = typename detail::kv_tensor_element<std::remove_cv_t<std::ranges::range_value_t<const Tensors&>>>::type;
  return commit_kv<T>(std::span<const kv_tensor<T>>(std::ranges::data(tensors), std::ranges::size(tensors)), map,
                      cache_len, keep);
}

}  // namespace specdec
