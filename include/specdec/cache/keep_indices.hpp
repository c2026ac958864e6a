//! \file
//! Keep-indices: which cache positions survive a verification round. The
//! tree's nodes were written to the cache at cache_len + slot (slot = the
//! node's place in the verification order); the accepted path (root first)
//! keeps those positions, in order, and the commit moves the k-th of them
//! to cache_len + k.
#pragma once

#include <cstdint>
#include <limits>
#include <span>

#include "specdec/core/config.hpp"
#include "specdec/core/status.hpp"
#include "specdec/tree/paths.hpp"
#include "specdec/tree/token_tree.hpp"

namespace specdec {

namespace detail {

//! Length of a path up to its first -1 pad.
inline std::size_t path_length(std::span<const node_id> path) noexcept {
  std::size_t len = 0;
  while (len < path.size() && path[len] != -1) ++len;
  return len;
}

//! Validates an unpadded path against its tree without writing anything.
inline status check_accepted_path(std::span<const node_id> parent, std::span<const node_id> path,
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
    if (cache_len > std::numeric_limits<position_id>::max() - slot)
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

}  // namespace specdec
