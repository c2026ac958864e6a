//! \file
//! The two shapes the verification walks run on: a token tree (children
//! found by parent scans) and a chain of drafts. Both expose next_child,
//! parent_of and token_of, so every walk is written once for both.
#pragma once

#include <cstdint>

#include "specdec/tree/token_tree.hpp"

namespace specdec::detail {

//! Children of u are the nodes c > u with parent[c] == u, visited in
//! ascending id (the order never depends on sampled values).
struct tree_topology {
  const token_id* token;
  const node_id* parent;
  std::int32_t n;
  node_id next_child(node_id u, node_id after) const noexcept {
    for (node_id c = (after < 0 ? u : after) + 1; c < n; ++c)
      if (parent[c] == u) return c;
    return -1;
  }
  node_id parent_of(node_id c) const noexcept { return parent[c]; }
  token_id token_of(node_id c) const noexcept { return token[c]; }
};

//! A chain of gamma drafts: node 0 is the context, node i (1..gamma) the
//! i-th draft, parent i - 1.
struct chain_topology {
  const token_id* drafts;
  std::int32_t n;  // gamma + 1
  node_id next_child(node_id u, node_id after) const noexcept { return after < 0 && u + 1 < n ? u + 1 : -1; }
  node_id parent_of(node_id c) const noexcept { return c - 1; }
  token_id token_of(node_id c) const noexcept { return drafts[c - 1]; }
};

//! Whether an earlier sibling of c (in visit order) carries token x.
template <class Topo>
bool earlier_sibling_has(const Topo& t, node_id u, node_id c, token_id x) noexcept {
  for (node_id s = t.next_child(u, -1); s >= 0 && s != c; s = t.next_child(u, s))
    if (t.token_of(s) == x) return true;
  return false;
}

}  // namespace specdec::detail
