//! \file
//! Leaves and root-to-leaf paths ("retrieve indices" in Medusa's layout):
//! one row per leaf, width max_depth + 1, each row the node ids from the
//! root (column 0) to the leaf, padded with -1.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "specdec/core/config.hpp"
#include "specdec/core/error.hpp"
#include "specdec/core/status.hpp"
#include "specdec/tree/detail/tree_common.hpp"
#include "specdec/tree/token_tree.hpp"
#include "specdec/tree/validate.hpp"

namespace specdec {

//! Row order of a path matrix.
enum class leaf_order : std::int32_t {
  ascending = 0,  //!< leaves by increasing node id (DFS order for a DFS-laid tree)
  descending = 1  //!< leaves by decreasing node id: Medusa's generate_medusa_buffers order
};

//! Shape of the path matrix of a tree: `rows` = number of leaves,
//! `width` = max depth + 1.
struct path_shape {
  std::int32_t rows = 0;   //!< number of leaves
  std::int32_t width = 0;  //!< max depth + 1
};

//! Checks that `path` (root first) is a root-to-node path of the tree:
//! path[0] is the root and each next node is a child of the previous one.
//! Trusts `parent` to be validated. Returns empty_input, out_of_range (a
//! node id) or invalid_argument, with the offending path position as index.
//! O(length), no scratch.
SPECDEC_HD status validate_root_path(std::span<const node_id> parent, std::span<const node_id> path) noexcept {
  if (path.empty()) return make_status(status_code::empty_input, "path is empty");
  const auto n = static_cast<std::int64_t>(parent.size());
  for (std::size_t k = 0; k < path.size(); ++k) {
    const node_id u = path[k];
    const auto ki = static_cast<std::int64_t>(k);
    if (u < 0 || u >= n) return make_status(status_code::out_of_range, "path node id out of range", ki);
    const node_id want = k == 0 ? -1 : path[k - 1];
    if (parent[static_cast<std::size_t>(u)] != want)
      return make_status(status_code::invalid_argument,
                         k == 0 ? "path must start at the root" : "path node is not a child of the previous one", ki);
  }
  return status::success();
}

//! Bytes of workspace path_matrix_shape / build_leaves / build_paths need
//! for `n` nodes (n ints, plus unaligned_workspace_slack: any address works).
constexpr std::size_t paths_workspace_size(std::size_t n) noexcept {
  workspace_carver c;
  (void)c.take<std::int32_t>(n);
  return c.bytes_used() + unaligned_workspace_slack;
}

namespace detail {
//! Number of children of every node into `counts` (n entries).
inline void child_counts(const node_id* parent, std::int32_t n, std::int32_t* counts) noexcept {
  for (std::int32_t i = 0; i < n; ++i) counts[i] = 0;
  for (std::int32_t i = 1; i < n; ++i) ++counts[parent[i]];
}

//! Shared prologue of the path functions: validates the tree and the
//! workspace, then carves N ints (`counts`) holding the child counts.
inline status checked_child_counts(std::span<const node_id> parent, std::span<std::byte> workspace, std::int32_t& n,
                                   std::int32_t*& counts) noexcept {
  SPECDEC_TRY(node_count(parent.size(), n));
  SPECDEC_TRY(validate_topological_parents(parent.data(), n));
  workspace_carver c = unaligned_carver(workspace.data(), workspace.size());
  counts = c.take<std::int32_t>(parent.size());
  if (workspace.data() == nullptr || c.overflowed())
    return make_status(status_code::buffer_too_small, "workspace smaller than paths_workspace_size(N)");
  child_counts(parent.data(), n, counts);
  return status::success();
}
}  // namespace detail

//! Leaf count and max depth of a tree in topological order. Uses
//! `workspace` (paths_workspace_size(N) bytes). O(N).
//! Errors: those of validate_topological_parents, buffer_too_small.
inline status path_matrix_shape(std::span<const node_id> parent, path_shape& shape,
                                std::span<std::byte> workspace) noexcept {
  std::int32_t n = 0;
  std::int32_t* counts = nullptr;
  SPECDEC_TRY(detail::checked_child_counts(parent, workspace, n, counts));
  std::int32_t leaves = 0;
  for (std::int32_t i = 0; i < n; ++i) leaves += counts[i] == 0;
  // Depths overwrite the counts once they are no longer needed.
  std::int32_t* depth = counts;
  std::int32_t max_depth = 0;
  depth[0] = 0;
  for (std::int32_t i = 1; i < n; ++i) {
    depth[i] = depth[parent[static_cast<std::size_t>(i)]] + 1;
    max_depth = depth[i] > max_depth ? depth[i] : max_depth;
  }
  shape = path_shape{leaves, max_depth + 1};
  return status::success();
}

//! Leaf ids (nodes without children) in the requested order into `leaves`;
//! `count` receives the number of leaves. O(N), workspace
//! paths_workspace_size(N) bytes.
//! Errors: those of validate_topological_parents, buffer_too_small (when
//! `leaves` is shorter than the leaf count: nothing is written, `count`
//! still tells the size needed).
inline status build_leaves(std::span<const node_id> parent, std::span<node_id> leaves, std::int32_t& count,
                           std::span<std::byte> workspace, leaf_order order = leaf_order::ascending) noexcept {
  std::int32_t n = 0;
  std::int32_t* counts = nullptr;
  SPECDEC_TRY(detail::checked_child_counts(parent, workspace, n, counts));
  count = 0;
  for (std::int32_t i = 0; i < n; ++i) count += counts[i] == 0;
  if (leaves.size() < static_cast<std::size_t>(count))
    return make_status(status_code::buffer_too_small, "leaves shorter than the leaf count");
  std::size_t k = 0;
  for (std::int32_t j = 0; j < n; ++j) {
    const std::int32_t i = order == leaf_order::ascending ? j : n - 1 - j;
    if (counts[i] == 0) leaves[k++] = i;
  }
  return status::success();
}

//! Root-to-leaf paths, one row per leaf (in `order`), `row_stride` elements
//! apart (0 = width); each row holds width = max_depth + 1 entries: the
//! path from the root (column 0) to the leaf, then -1. With
//! leaf_order::descending and a tree in Medusa's node order this is
//! exactly Medusa's `retrieve_indices`. `out` holds (rows - 1) * stride +
//! width entries (see path_matrix_shape). O(rows * width), workspace
//! paths_workspace_size(N) bytes.
//! Errors: those of validate_topological_parents, invalid_argument (stride
//! smaller than the width, or so large the matrix size overflows int64),
//! buffer_too_small.
inline status build_paths(std::span<const node_id> parent, std::span<node_id> out, std::span<std::byte> workspace,
                          leaf_order order = leaf_order::ascending, std::int64_t row_stride = 0) noexcept {
  path_shape shape;
  SPECDEC_TRY(path_matrix_shape(parent, shape, workspace));
  if (row_stride < 0) return make_status(status_code::invalid_argument, "row stride must be >= 0");
  if (row_stride == 0) row_stride = shape.width;
  if (row_stride < shape.width) return make_status(status_code::invalid_argument, "row stride smaller than the width");
  if (shape.rows > 1 && row_stride > (INT64_MAX - shape.width) / (shape.rows - 1))
    return make_status(status_code::invalid_argument, "row stride too large: matrix size overflows int64");
  const std::int64_t need = static_cast<std::int64_t>(shape.rows - 1) * row_stride + shape.width;
  if (static_cast<std::int64_t>(out.size()) < need)
    return make_status(status_code::buffer_too_small, "out smaller than the path matrix");
  const auto n = static_cast<std::int32_t>(parent.size());
  // path_matrix_shape left the depths in the workspace (the same carve).
  // Flip the depth of every node that has a child to -depth - 1, so one
  // array tells both the depth and whether a node is a leaf, with no second
  // scratch buffer.
  workspace_carver carver = unaligned_carver(workspace.data(), workspace.size());
  std::int32_t* depth = carver.take<std::int32_t>(parent.size());
  for (std::int32_t i = 1; i < n; ++i) {
    std::int32_t& d = depth[parent[static_cast<std::size_t>(i)]];
    if (d >= 0) d = -d - 1;  // mark "has children", keep the depth recoverable
  }
  std::int64_t row = 0;
  for (std::int32_t j = 0; j < n; ++j) {
    const std::int32_t leaf = order == leaf_order::ascending ? j : n - 1 - j;
    if (depth[leaf] < 0) continue;
    node_id* r = out.data() + row * row_stride;
    const std::int32_t d = depth[leaf];
    for (std::int32_t c = d + 1; c < shape.width; ++c) r[c] = -1;
    std::int32_t c = d;
    for (node_id u = leaf; u >= 0; u = parent[static_cast<std::size_t>(u)]) r[c--] = u;
    ++row;
  }
  return status::success();
}

//! Owning leaves (throws specdec::error).
inline std::vector<node_id> leaves(std::span<const node_id> parent, leaf_order order = leaf_order::ascending) {
  std::vector<std::byte> ws(paths_workspace_size(parent.size()));
  std::vector<node_id> out(parent.size());
  std::int32_t count = 0;
  throw_if_error(build_leaves(parent, out, count, ws, order));
  out.resize(static_cast<std::size_t>(count));
  return out;
}

//! Owning path matrix, row-major rows x width (throws specdec::error).
struct path_matrix {
  path_shape shape;           //!< rows (leaves) and width (max depth + 1)
  std::vector<node_id> data;  //!< rows * width entries
  //! Row r as a span of `width` ids.
  std::span<const node_id> row(std::int32_t r) const {
    return std::span<const node_id>(data).subspan(static_cast<std::size_t>(r) * static_cast<std::size_t>(shape.width),
                                                  static_cast<std::size_t>(shape.width));
  }
};

//! Owning root-to-leaf paths (throws specdec::error).
inline path_matrix paths(std::span<const node_id> parent, leaf_order order = leaf_order::ascending) {
  std::vector<std::byte> ws(paths_workspace_size(parent.size()));
  path_matrix m;
  throw_if_error(path_matrix_shape(parent, m.shape, ws));
  m.data.resize(static_cast<std::size_t>(m.shape.rows) * static_cast<std::size_t>(m.shape.width));
  throw_if_error(build_paths(parent, m.data, ws, order));
  return m;
}

}  // namespace specdec
