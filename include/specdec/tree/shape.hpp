//! \file
//! A token-free tree shape (parent array plus child ranks), the output of
//! the planners and SpecMemo shaping (Medusa-style engines map rank r at
//! depth d to the r-th best token of head d).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "specdec/tree/token_tree.hpp"

namespace specdec {

//! A tree shape: parent (topological, root first) and child rank per node
//! (rank 0 = the head's most probable token; the root has rank -1).
struct tree_shape {
  std::vector<node_id> parent;     //!< topological parent array, root first (-1)
  std::vector<std::int32_t> rank;  //!< child rank of each node (root -1)
  //! Number of nodes.
  std::int32_t size() const noexcept { return static_cast<std::int32_t>(parent.size()); }
  //! Number of nodes without children.
  std::int32_t leaves() const noexcept {
    std::vector<char> has(parent.size(), 0);
    for (std::size_t i = 1; i < parent.size(); ++i) has[static_cast<std::size_t>(parent[i])] = 1;
    return static_cast<std::int32_t>(std::count(has.begin(), has.end(), 0));
  }
};

}  // namespace specdec
