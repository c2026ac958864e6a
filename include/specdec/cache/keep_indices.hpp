//! \file
//! Keep-indices: which cache positions survive a verification round. The
//! tree's nodes were written to the cache at cache_len + slot (slot = the
//! node's place in the verification order); the accepted path (root first)
//! keeps those positions, in order, and the commit moves the k-th of them
//! to cache_len + k.
#pragma once

#include <cstdint>
#include <span>
#include <type_traits>

#include "specdec/core/config.hpp"
#include "specdec/core/status.hpp"
#include "specdec/tree/paths.hpp"
#include "specdec/tree/token_tree.hpp"
#include "specdec/verify/verify_params.hpp"

namespace specdec {

namespace detail {

//! Length of a path up to its first -1 pad.
inline std::size_t path_length(std::span<const node_id> path) noexcept {
  std::size_t len = 0;
  while (len < path.size() && path[len] != -1) ++len;
  return len;
}

//! Validates an unpadded path against its tree without writing anything.
SPECDEC_HD status check_accepted_path(std::span<const node_id> parent, std::span<const node_id> path,
                                      std::span<const std::int32_t> slot_of_node, position_id cache_len) noexcept {
  const auto n = static_cast<std::int64_t>(parent.size());
  if (cache_len < 0) return make_status(status_code::invalid_argument, "cache_len must be non-negative");
  if (!slot_of_node.empty() && slot_of_node.size() != parent.size())
    return make_status(status_code::size_mismatch, "slot_of_node must be empty or have one entry per node");
  SPECDEC_TRY(validate_root_path(parent, path));
  std::int64_t prev = -1;
  for (std::size_t k = 0; k < path.size(); ++k) {
    const node_id u = path[k];
    const auto ki = static_cast<std::int64_t>(k);
    const std::int64_t slot = slot_of_node.empty() ? u : slot_of_node[static_cast<std::size_t>(u)];
    if (slot < 0 || slot >= n) return make_status(status_code::out_of_range, "slot out of range", ki);
    if (cache_len > INT64_MAX - slot)  // position_id is int64
      return make_status(status_code::out_of_range, "position overflows position_id", ki);
    const position_id pos = cache_len + slot;
    if (pos <= prev) return make_status(status_code::not_sorted, "slots along the path must increase", ki);
    prev = pos;
  }
  return status::success();
}

}  // namespace detail

//! Keep positions of one accepted path: keep[k] = cache_len + slot(path[k]),
//! with slot(i) = slot_of_node[i] (empty span: the nodes are stored in
//! verification order, slot(i) = i). `path` lists node ids root first; a -1
//! ends it early (padded retrieve-index rows). Checks: path[0] is the root
//! (parent -1), each next node is a child of the previous one, ids and slots
//! in range, the resulting keep list strictly increasing (true for any
//! topological slot order) and representable as position_id. Writes `count` and
//! keep[0..count) only on success (index of an error: the path entry).
//! O(path length); no allocation.
inline status keep_indices_from_path(std::span<const node_id> parent, std::span<const node_id> path,
                                     std::span<const std::int32_t> slot_of_node, position_id cache_len,
                                     std::span<position_id> keep, std::int32_t& count) noexcept {
  const std::size_t len = detail::path_length(path);
  SPECDEC_TRY(detail::check_accepted_path(parent, path.first(len), slot_of_node, cache_len));
  if (keep.size() < len) return make_status(status_code::buffer_too_small, "keep must hold the path length");
  for (std::size_t k = 0; k < len; ++k) {
    const node_id u = path[k];
    const std::int32_t slot = slot_of_node.empty() ? u : slot_of_node[static_cast<std::size_t>(u)];
    keep[k] = cache_len + slot;
  }
  count = static_cast<std::int32_t>(len);
  return status::success();
}

//! Batched keep positions. Request r's tree is parent[tree_offsets[r] ..
//! tree_offsets[r+1]) (local ids), its slot order likewise in slot_of_node
//! (empty: identity for every request), its accepted path
//! path[path_offsets[r] .. path_offsets[r+1]) (local ids, -1 ends it early).
//! Writes the CSR keep list (keep_offsets: R + 1 entries; keep: at least
//! path.size()), ready for commit_kv. Every request is validated before
//! anything is written; an error's index is the request. O(total path
//! length); no allocation.
inline status keep_indices_batch(std::span<const node_id> parent, std::span<const std::int32_t> tree_offsets,
                                 std::span<const std::int32_t> slot_of_node, std::span<const node_id> path,
                                 std::span<const std::int32_t> path_offsets, std::span<const position_id> cache_len,
                                 std::span<position_id> keep, std::span<std::int32_t> keep_offsets) noexcept {
  const std::size_t R = cache_len.size();
  if (tree_offsets.size() != R + 1 || path_offsets.size() != R + 1)
    return make_status(status_code::size_mismatch, "tree_offsets and path_offsets need num_requests + 1 entries");
  if (keep_offsets.size() < R + 1) return make_status(status_code::buffer_too_small, "keep_offsets too small");
  if (!slot_of_node.empty() && slot_of_node.size() != parent.size())
    return make_status(status_code::size_mismatch, "slot_of_node must be empty or match parent");
  if (tree_offsets[0] != 0 || path_offsets[0] != 0)
    return make_status(status_code::invalid_argument, "CSR offsets must start at 0");
  if (static_cast<std::size_t>(tree_offsets[R]) != parent.size() ||
      static_cast<std::size_t>(path_offsets[R]) != path.size())
    return make_status(status_code::size_mismatch, "last CSR offset must equal the array size");
  if (keep.size() < path.size()) return make_status(status_code::buffer_too_small, "keep must hold path.size()");
  auto request = [&](std::size_t r, std::span<const node_id>& p, std::span<const node_id>& req_path,
                     std::span<const std::int32_t>& s) {
    const auto t0 = static_cast<std::size_t>(tree_offsets[r]);
    const auto t1 = static_cast<std::size_t>(tree_offsets[r + 1]);
    const auto p0 = static_cast<std::size_t>(path_offsets[r]);
    const auto p1 = static_cast<std::size_t>(path_offsets[r + 1]);
    p = parent.subspan(t0, t1 - t0);
    s = slot_of_node.empty() ? slot_of_node : slot_of_node.subspan(t0, t1 - t0);
    req_path = path.subspan(p0, p1 - p0);
  };
  for (std::size_t r = 0; r < R; ++r) {
    const auto ri = static_cast<std::int64_t>(r);
    if (tree_offsets[r + 1] < tree_offsets[r] || path_offsets[r + 1] < path_offsets[r] ||
        static_cast<std::size_t>(tree_offsets[r + 1]) > parent.size() ||
        static_cast<std::size_t>(path_offsets[r + 1]) > path.size())
      return make_status(status_code::not_sorted, "CSR offsets must be non-decreasing and in range", ri);
    std::span<const node_id> p, rp;
    std::span<const std::int32_t> s;
    request(r, p, rp, s);
    const status st = detail::check_accepted_path(p, rp.first(detail::path_length(rp)), s, cache_len[r]);
    if (!st.ok()) return make_status(st.code(), st.message(), ri);
  }
  std::int32_t out = 0;
  keep_offsets[0] = 0;
  for (std::size_t r = 0; r < R; ++r) {
    std::span<const node_id> p, rp;
    std::span<const std::int32_t> s;
    request(r, p, rp, s);
    std::int32_t count = 0;
    SPECDEC_TRY(keep_indices_from_path(p, rp, s, cache_len[r], keep.subspan(static_cast<std::size_t>(out)), count));
    out += count;
    keep_offsets[r + 1] = out;
  }
  return status::success();
}

//! A verified batch and its keep lists (host or device memory alike): the
//! arguments of keep_indices_from_results and of its CUDA twin
//! kernels::keep_indices_from_results. Trivially copyable.
struct keep_from_results_batch {
  std::int32_t num_requests = 0;               //!< R
  const std::int32_t* tree_offsets = nullptr;  //!< R + 1 CSR offsets of each request's nodes (local parent ids)
  const node_id* parent = nullptr;             //!< node_capacity parents
  const std::int32_t* slot_of_node = nullptr;  //!< null: slot = node id; else node_capacity local slots
  std::int32_t node_capacity = 0;              //!< entries of parent (and slot_of_node); keep holds as many
  const node_id* paths = nullptr;              //!< R rows of path_stride entries: verify_batch's paths
  std::int32_t path_stride = 0;                //!< entries per paths row (verify_batch's L), >= 1
  const verify_result* results = nullptr;      //!< R verification results (accepted, code)
  const position_id* cache_len = nullptr;      //!< R committed lengths
  position_id* keep = nullptr;                 //!< out: node_capacity entries, keep_offsets[R] of them written
  std::int32_t* keep_offsets = nullptr;        //!< out: R + 1 CSR offsets, ready for commit_kv
  std::int32_t* request_status = nullptr;      //!< out: R codes (ok = the request keeps its accepted path)
};

static_assert(std::is_trivially_copyable_v<keep_from_results_batch>);

namespace detail {

//! The whole-call checks of keep_indices_from_results (no element read).
SPECDEC_HD status check_keep_from_results(const keep_from_results_batch& b) noexcept {
  if (b.num_requests < 0 || b.node_capacity < 0)
    return make_status(status_code::invalid_argument, "counts must be non-negative");
  if (b.num_requests == 0) return status::success();
  if (b.path_stride < 1) return make_status(status_code::invalid_argument, "path_stride must be positive");
  if (b.tree_offsets == nullptr || b.paths == nullptr || b.results == nullptr || b.cache_len == nullptr ||
      b.keep_offsets == nullptr || b.request_status == nullptr ||
      (b.node_capacity > 0 && (b.parent == nullptr || b.keep == nullptr)))
    return make_status(status_code::invalid_argument, "a required array is null");
  return status::success();
}

//! Whether boundary i of tree_offsets (0 <= i <= R) is in place: offsets
//! start at or above 0, never decrease and end within node_capacity. All
//! R + 1 in place make the requests' node spans disjoint, so their keep
//! lists fit in node_capacity entries.
SPECDEC_HD bool keep_offset_ok(const keep_from_results_batch& b, std::int32_t i) noexcept {
  const std::int32_t x = b.tree_offsets[i];
  if (i == 0) return x >= 0;
  return x >= b.tree_offsets[i - 1] && (i < b.num_requests || x <= b.node_capacity);
}

//! Request r (one thread, offsets in place): its code and, when ok, its
//! kept count (accepted + 1). Verification's own code is passed on (a
//! request it refused keeps nothing), then accepted is checked against the
//! path row and the request's nodes (out_of_range) and the path as
//! keep_indices_from_path checks it.
SPECDEC_HD status keep_from_result(const keep_from_results_batch& b, std::int32_t r, std::int32_t& count) noexcept {
  count = 0;
  const std::int32_t lo = b.tree_offsets[r], hi = b.tree_offsets[r + 1];
  const verify_result v = b.results[r];
  if (v.code != status_code::ok) return make_status(v.code, "verification refused the request");
  if (v.accepted < 0 || v.accepted >= b.path_stride || v.accepted >= hi - lo)
    return make_status(status_code::out_of_range, "accepted count outside the path row");
  const auto n = static_cast<std::size_t>(hi - lo);
  const std::span<const node_id> parent(b.parent + lo, n);
  const std::span<const node_id> path(b.paths + static_cast<std::int64_t>(r) * b.path_stride,
                                      static_cast<std::size_t>(v.accepted) + 1);
  const std::span<const std::int32_t> slots = b.slot_of_node != nullptr
                                                  ? std::span<const std::int32_t>(b.slot_of_node + lo, n)
                                                  : std::span<const std::int32_t>{};
  SPECDEC_TRY(check_accepted_path(parent, path, slots, b.cache_len[r]));
  count = v.accepted + 1;
  return status::success();
}

//! Writes request r's `count` keep positions from keep[out] (after
//! keep_from_result accepted it).
SPECDEC_HD void write_keep(const keep_from_results_batch& b, std::int32_t r, std::int32_t count,
                           std::int32_t out) noexcept {
  const std::int32_t lo = b.tree_offsets[r];
  const node_id* path = b.paths + static_cast<std::int64_t>(r) * b.path_stride;
  for (std::int32_t k = 0; k < count; ++k) {
    const node_id u = path[k];
    const std::int32_t slot = b.slot_of_node != nullptr ? b.slot_of_node[lo + u] : u;
    b.keep[out + k] = b.cache_len[r] + slot;
  }
}

}  // namespace detail

//! Keep lists straight from verify_batch's outputs, for commit_kv: request
//! r kept the nodes paths[r][0 .. accepted] (its verify_result) and keeps
//! their positions cache_len[r] + slot, in path order. Every request gets
//! its code in request_status[r] and, when it fails (verification refused
//! it, its path is malformed), keeps nothing; the others go on. Offsets
//! out of place (negative start, a decrease, an end past node_capacity)
//! give every request not_sorted and empty keep lists.
//! keep_offsets[0] = 0 and keep_offsets[r + 1] - keep_offsets[r] is request
//! r's count; keep holds at most node_capacity entries (a request keeps at
//! most its nodes). Returns success after the whole-call checks
//! (invalid_argument otherwise, nothing written). Deterministic; O(total
//! path length); the CUDA twin (kernels::keep_indices_from_results) runs
//! the same per-request code, so engines can chain verify, keep lists and
//! the KV commit on the device without a host round trip.
inline status keep_indices_from_results(const keep_from_results_batch& b) noexcept {
  SPECDEC_TRY(detail::check_keep_from_results(b));
  if (b.num_requests == 0) return status::success();
  bool spans_ok = true;
  for (std::int32_t i = 0; i <= b.num_requests; ++i) spans_ok = spans_ok && detail::keep_offset_ok(b, i);
  std::int32_t out = 0;
  b.keep_offsets[0] = 0;
  for (std::int32_t r = 0; r < b.num_requests; ++r) {
    std::int32_t count = 0;
    const status st = spans_ok ? detail::keep_from_result(b, r, count)
                               : make_status(status_code::not_sorted, "tree_offsets out of place");
    b.request_status[r] = static_cast<std::int32_t>(st.code());
    if (st.ok()) detail::write_keep(b, r, count, out);
    out += count;
    b.keep_offsets[r + 1] = out;
  }
  return status::success();
}

}  // namespace specdec
