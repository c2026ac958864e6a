//! \file
//! The three things the one verification walk (verify/walk.hpp) is
//! templated on, as C++20 concepts, with the implementations specdec ships:
//! - a topology: how the children of a node are enumerated (a parent array,
//!   a chain, the SGLang/EAGLE linked-list format);
//! - a uniform source: where the walk's uniforms come from (keyed Philox
//!   streams, or a caller's buffer; sample/uniforms.hpp, shared with draft/);
//! - a row-operations policy: the whole-row passes (validation, masses and
//!   tile sums in the fixed order of sample/order.hpp, residuals, argmax,
//!   inverse-CDF sampling). The host policy is verify/detail/row_ops.hpp,
//!   the CUDA policy (one thread block per request) is in cuda/verify.cuh.
//!   Every pass is collective: all participants call it with the same
//!   arguments and get the same result, and its writes are visible to all
//!   of them when it returns. Optional: `tile_sum`, `scan_tile`,
//!   `last_positive` and `copy_range` (policies whose tiles are the
//!   global tiles of sample/order.hpp) let the deterministic mode emit
//!   without copying the row. A vocabulary-sharded policy (rows split over
//!   ranks) fits the same interface: masses are tile sums combined left to
//!   right, so tiles owned by different ranks combine exactly as on one
//!   device, and argmax merges with the tie order.
#pragma once

#include <concepts>
#include <cstdint>

#include "specdec/core/config.hpp"
#include "specdec/core/status.hpp"
#include "specdec/sample/order.hpp"
#include "specdec/sample/uniforms.hpp"
#include "specdec/tree/token_tree.hpp"

namespace specdec {

//! Children enumeration of a verification tree. Node 0 is the root; ids
//! are in [0, size()); -1 means "none". The order of a node's children is
//! the order its draws are keyed in (see verify_params.hpp).
template <class T>
concept verify_topology = requires(const T& t, node_id u) {
  { t.size() } -> std::same_as<std::int32_t>;
  { t.first_child(u) } -> std::same_as<node_id>;
  { t.next_sibling(u) } -> std::same_as<node_id>;
  { t.token_of(u) } -> std::same_as<token_id>;
};

//! The row passes of the walk (see the file comment; detail::row_ref is a
//! strided row, `tiles` arrays hold sum_tile_count(V) doubles).
template <class Ops>
concept verify_row_ops = requires(const Ops& o, detail::row_ref r, float* R, std::int64_t V, double* tiles,
                                  const double* ctiles, double& d, bool& b, token_id& tok, float s, double target,
                                  std::int32_t* ip, std::int32_t iv) {
  { o.mass(r, V, tiles, d) } -> std::same_as<bool>;
  { o.first_residual(r, r, R, V, tiles, tiles, tiles, d, d, d, b, b) } -> std::same_as<void>;
  { o.update_residual(r, R, s, V, tiles) } -> std::same_as<double>;
  { o.sample(r, V, ctiles, target) } -> std::same_as<token_id>;
  { o.argmax(r, V, tok) } -> std::same_as<bool>;
  { o.entropy(r, V, tiles, d, d) } -> std::same_as<bool>;
  { o.classify(r, V) } -> std::same_as<status_code>;
  { o.copy(r, R, V) } -> std::same_as<void>;
  { o.put(R, V, s) } -> std::same_as<void>;
  { o.put(ip, V, iv) } -> std::same_as<void>;
  { o.sync() } -> std::same_as<void>;
};

//! A tree as a parent array in topological order (parent[0] = -1,
//! parent[i] < i): children in ascending id.
struct parent_topology {
  const token_id* token;  //!< token of each node
  const node_id* parent;  //!< parent of each node (parent[0] = -1, parent[i] < i)
  std::int32_t n;         //!< node count
  //! Node count.
  SPECDEC_HD std::int32_t size() const noexcept { return n; }
  //! First child of u (lowest id), or -1; O(n).
  SPECDEC_HD node_id first_child(node_id u) const noexcept {
    for (node_id c = u + 1; c < n; ++c)
      if (parent[c] == u) return c;
    return -1;
  }
  //! Next child of c's parent after c (ascending id), or -1; O(n).
  SPECDEC_HD node_id next_sibling(node_id c) const noexcept {
    for (node_id k = c + 1; k < n; ++k)
      if (parent[k] == parent[c]) return k;
    return -1;
  }
  //! Token of node c.
  SPECDEC_HD token_id token_of(node_id c) const noexcept { return token[c]; }
};

//! A chain of drafts: node 0 is the context, node i (1..n-1) the i-th draft.
struct chain_topology {
  const token_id* drafts;  //!< n - 1 drafts
  std::int32_t n;          //!< node count (context plus drafts)
  //! Node count.
  SPECDEC_HD std::int32_t size() const noexcept { return n; }
  //! u + 1, or -1 for the last node.
  SPECDEC_HD node_id first_child(node_id u) const noexcept { return u + 1 < n ? u + 1 : -1; }
  //! Always -1 (a chain has no siblings).
  SPECDEC_HD node_id next_sibling(node_id) const noexcept { return -1; }
  //! Draft c - 1 (c >= 1).
  SPECDEC_HD token_id token_of(node_id c) const noexcept { return drafts[c - 1]; }
};

//! The linked-list tree format of SGLang and EAGLE: `next_token[u]` is u's
//! first child, `next_sibling[c]` the next child of c's parent (-1: none);
//! children in list order. Validate with validate_linked_tree first.
struct linked_topology {
  const token_id* token;                //!< token of each node
  const std::int32_t* next_token;       //!< first child of each node, or -1
  const std::int32_t* next_sibling_of;  //!< next sibling of each node, or -1
  std::int32_t n;                       //!< node count
  //! Node count.
  SPECDEC_HD std::int32_t size() const noexcept { return n; }
  //! next_token[u].
  SPECDEC_HD node_id first_child(node_id u) const noexcept { return next_token[u]; }
  //! next_sibling_of[c].
  SPECDEC_HD node_id next_sibling(node_id c) const noexcept { return next_sibling_of[c]; }
  //! Token of node c.
  SPECDEC_HD token_id token_of(node_id c) const noexcept { return token[c]; }
};

static_assert(verify_topology<parent_topology> && verify_topology<chain_topology> && verify_topology<linked_topology>);

//! Checks a linked-list tree of n nodes: every link in [-1, n), no link to
//! the root, no node linked twice (so following links from the root never
//! cycles). Needs n ints of scratch. Returns empty_input,
//! parent_out_of_range (a link out of range), multiple_roots (a link to the
//! root) or cycle (a node linked twice), with the node as index.
SPECDEC_HD constexpr status validate_linked_tree(const std::int32_t* next_token, const std::int32_t* next_sibling,
                                                 std::int32_t n, std::int32_t* scratch) noexcept {
  if (n <= 0 || next_token == nullptr || next_sibling == nullptr)
    return make_status(status_code::empty_input, "tree has no nodes");
  for (std::int32_t i = 0; i < n; ++i) scratch[i] = 0;
  for (std::int32_t i = 0; i < n; ++i) {
    const std::int32_t links[2] = {next_token[i], next_sibling[i]};
    for (const std::int32_t c : links) {
      if (c == -1) continue;
      if (c < -1 || c >= n) return make_status(status_code::parent_out_of_range, "link out of range", i);
      if (c == 0) return make_status(status_code::multiple_roots, "a link points to the root", i);
      if (scratch[c]++ != 0) return make_status(status_code::cycle, "a node is linked twice", c);
    }
  }
  if (next_sibling[0] != -1) return make_status(status_code::multiple_roots, "the root has a sibling", 0);
  return status::success();
}

}  // namespace specdec
