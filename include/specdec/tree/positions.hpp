//! \file
//! Depths and position ids of tree nodes: a node at depth d is the d-th
//! token after the committed prefix, so its rotary/absolute position is
//! cache_len + d (siblings share a position).
#pragma once

#include <concepts>
#include <cstdint>
#include <limits>
#include <span>
#include <utility>
#include <vector>

#include "specdec/core/error.hpp"
#include "specdec/core/status.hpp"
#include "specdec/tree/detail/tree_common.hpp"
#include "specdec/tree/token_tree.hpp"
#include "specdec/tree/validate.hpp"

namespace specdec {

//! Depth of every node of a tree in topological order (root 0):
//! depth[i] = depth[parent[i]] + 1. O(N), no allocation.
//! Errors: those of validate_topological_parents, buffer_too_small.
inline status build_depths(std::span<const node_id> parent, std::span<std::int32_t> depth) noexcept {
  std::int32_t n = 0;
  SPECDEC_TRY(detail::node_count(parent.size(), n));
  SPECDEC_TRY(validate_topological_parents(parent.data(), n));
  if (depth.size() < parent.size()) return make_status(status_code::buffer_too_small, "depth must hold N entries");
  depth[0] = 0;
  for (std::size_t i = 1; i < parent.size(); ++i) depth[i] = depth[static_cast<std::size_t>(parent[i])] + 1;
  return status::success();
}

//! Position ids `cache_len + depth` for every node (the root, i.e. the last
//! committed token re-fed or the first new token, sits at cache_len).
//! `Pos` is the engine's position type (int32 or int64). O(N).
//! Errors: those of validate_topological_parents, buffer_too_small,
//! invalid_argument when cache_len < 0 or cache_len + N - 1 overflows Pos.
template <std::integral Pos>
status build_positions(std::span<const node_id> parent, Pos cache_len, std::span<Pos> positions) noexcept {
  std::int32_t n = 0;
  SPECDEC_TRY(detail::node_count(parent.size(), n));
  SPECDEC_TRY(validate_topological_parents(parent.data(), n));
  if (positions.size() < parent.size())
    return make_status(status_code::buffer_too_small, "positions must hold N entries");
  // Depth < N, so this bound rules out overflow without a first pass.
  // Compared as mathematical integers: Pos may be narrower than int32 or unsigned.
  if (std::cmp_less(cache_len, 0) || std::cmp_greater(n - 1, std::numeric_limits<Pos>::max() - cache_len))
    return make_status(status_code::invalid_argument, "cache_len out of range for the position type");
  positions[0] = cache_len;
  for (std::size_t i = 1; i < parent.size(); ++i)
    positions[i] = static_cast<Pos>(positions[static_cast<std::size_t>(parent[i])] + 1);
  return status::success();
}

//! Owning depths (throws specdec::error).
inline std::vector<std::int32_t> depths(std::span<const node_id> parent) {
  std::vector<std::int32_t> d(parent.size());
  throw_if_error(build_depths(parent, d));
  return d;
}

//! Owning positions (throws specdec::error).
template <std::integral Pos = position_id>
std::vector<Pos> positions(std::span<const node_id> parent, Pos cache_len) {
  std::vector<Pos> p(parent.size());
  throw_if_error(build_positions<Pos>(parent, cache_len, p));
  return p;
}

}  // namespace specdec
