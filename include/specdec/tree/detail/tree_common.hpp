//! \file
//! Internals shared by the tree headers: size checks and the children CSR
//! built by a stable counting sort (children of a node in ascending id).
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>

#include "specdec/core/status.hpp"
#include "specdec/core/workspace.hpp"
#include "specdec/tree/token_tree.hpp"

namespace specdec::detail {

//! Node count of a span as int32, or invalid_argument when it does not fit.
inline status node_count(std::size_t size, std::int32_t& n) noexcept {
  if (size > static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max()))
    return make_status(status_code::invalid_argument, "tree too large for 32-bit node ids");
  n = static_cast<std::int32_t>(size);
  return status::success();
}

//! Scratch of a walk over a children CSR: offsets (n + 1), children (n)
//! and a DFS stack (n), carved by one routine for sizing and running.
struct tree_walk_scratch {
  std::int32_t* offsets = nullptr;
  std::int32_t* kids = nullptr;
  std::int32_t* stack = nullptr;
};

//! Carves tree_walk_scratch for `n` nodes from `c`.
constexpr tree_walk_scratch carve_tree_walk(workspace_carver& c, std::size_t n) noexcept {
  tree_walk_scratch w;
  w.offsets = c.take<std::int32_t>(n + 1);
  w.kids = c.take<std::int32_t>(n);
  w.stack = c.take<std::int32_t>(n);
  return w;
}

//! Children lists of every node as CSR: the children of u are
//! kids[offsets[u] .. offsets[u+1]), in ascending node id. Works for any
//! node order; only parents >= 0 are counted. Precondition: every parent is
//! -1 or in [0, n); `offsets` holds n+1 entries, `kids` at least n.
//! O(N), no allocation: the cursor of each bucket lives in `offsets` itself
//! and is shifted back at the end.
inline void build_children_csr(const node_id* parent, std::int32_t n, std::int32_t* offsets,
                               std::int32_t* kids) noexcept {
  for (std::int32_t i = 0; i <= n; ++i) offsets[i] = 0;
  for (std::int32_t i = 0; i < n; ++i)
    if (parent[i] >= 0) ++offsets[parent[i] + 1];
  for (std::int32_t i = 0; i < n; ++i) offsets[i + 1] += offsets[i];
  // offsets[u] is now the start of u's bucket; use it as a write cursor.
  for (std::int32_t i = 0; i < n; ++i)
    if (parent[i] >= 0) kids[offsets[parent[i]]++] = i;
  // Each cursor now points at the next bucket's start: shift right by one.
  for (std::int32_t u = n; u > 0; --u) offsets[u] = offsets[u - 1];
  offsets[0] = 0;
}

//! Pre-order DFS from `root` over a children CSR, children visited in CSR
//! order (ascending id). Writes the visit order to `order` (n entries) and
//! returns how many nodes were reached. `stack` holds n ints.
inline std::int32_t dfs_preorder(const std::int32_t* offsets, const std::int32_t* kids, node_id root,
                                 std::int32_t* stack, node_id* order) noexcept {
  std::int32_t top = 0, count = 0;
  stack[top++] = root;
  while (top > 0) {
    const node_id u = stack[--top];
    order[count++] = u;
    // Push in reverse so the smallest child id is popped (visited) first.
    for (std::int32_t k = offsets[u + 1]; k > offsets[u]; --k) stack[top++] = kids[k - 1];
  }
  return count;
}

//! Breadth-first order from `root` over a children CSR (children in CSR
//! order); `order` doubles as the queue. Returns the number of nodes reached.
inline std::int32_t bfs_order(const std::int32_t* offsets, const std::int32_t* kids, node_id root,
                              node_id* order) noexcept {
  std::int32_t head = 0, tail = 0;
  order[tail++] = root;
  while (head < tail) {
    const node_id u = order[head++];
    for (std::int32_t k = offsets[u]; k < offsets[u + 1]; ++k) order[tail++] = kids[k];
  }
  return tail;
}

}  // namespace specdec::detail
