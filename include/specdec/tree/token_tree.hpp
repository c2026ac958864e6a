//! \file
//! The token tree: an owning structure of arrays and a non-owning,
//! device-safe view of it. Nodes are stored in a topological order
//! (parent[i] < i), the root at 0 with parent -1.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "specdec/core/config.hpp"
#include "specdec/core/error.hpp"
#include "specdec/core/status.hpp"

namespace specdec {

//! Token ids (vocabulary entries).
using token_id = std::int32_t;
//! Node ids inside one tree (0 = root, -1 = none).
using node_id = std::int32_t;
//! Sequence positions and lengths, one type from tree positions through
//! masks, batch layouts, keep-indices and KV commit: 64-bit, so a long
//! context or a position offset never overflows and no caller converts
//! between stages.
using position_id = std::int64_t;

//! Non-owning view of a token tree: arrays of `size` entries each. `score`
//! (log joint draft probability, or any caller score) may be null.
//! Trivially copyable: pass it by value into kernels.
struct tree_view {
  const token_id* token = nullptr;      //!< token of each node
  const node_id* parent = nullptr;      //!< parent of each node (root -1), parent[i] < i
  const std::int32_t* depth = nullptr;  //!< depth of each node (root 0); may be null
  const float* score = nullptr;         //!< score of each node; may be null
  std::int32_t size = 0;                //!< number of nodes

  //! Whether the view has no node.
  SPECDEC_HD constexpr bool empty() const noexcept { return size == 0; }
  //! Whether scores are attached.
  SPECDEC_HD constexpr bool has_score() const noexcept { return score != nullptr; }
};

//! Owning token tree (structure of arrays). Appending keeps the invariants
//! by construction (a parent must already exist); `clear()` keeps capacity
//! so a tree can be refilled every round without allocating.
class token_tree {
 public:
  token_tree() = default;

  //! A tree with only the root, carrying `root_token` (typically the last
  //! committed token), score 0 and depth 0.
  explicit token_tree(token_id root_token) { add_root(root_token); }

  //! Reserves room for `n` nodes in every array.
  void reserve(std::size_t n) {
    token_.reserve(n);
    parent_.reserve(n);
    depth_.reserve(n);
    score_.reserve(n);
  }

  //! Removes every node; capacity is kept.
  void clear() noexcept {
    token_.clear();
    parent_.clear();
    depth_.clear();
    score_.clear();
  }

  //! Adds the root. Precondition: the tree is empty (throws otherwise).
  node_id add_root(token_id token, float score = 0.0f) {
    if (!token_.empty()) throw_if_error(make_status(status_code::multiple_roots, "token_tree already has a root", 0));
    push(token, -1, 0, score);
    return 0;
  }

  //! Adds a child of `parent` and returns its id (always size() - 1).
  //! Throws `specdec::error` (parent_out_of_range) for a parent that does not exist.
  node_id add_child(node_id parent, token_id token, float score = 0.0f) {
    if (parent < 0 || parent >= size())
      throw_if_error(make_status(status_code::parent_out_of_range, "add_child: parent does not exist", parent));
    push(token, parent, depth_[static_cast<std::size_t>(parent)] + 1, score);
    return size() - 1;
  }

  //! Number of nodes.
  std::int32_t size() const noexcept { return static_cast<std::int32_t>(token_.size()); }
  //! Whether the tree has no node (not even a root).
  bool empty() const noexcept { return token_.empty(); }

  //! Tokens of all nodes, by id.
  std::span<const token_id> tokens() const noexcept { return token_; }
  //! Parents of all nodes (root -1), by id.
  std::span<const node_id> parents() const noexcept { return parent_; }
  //! Depths of all nodes (root 0), by id.
  std::span<const std::int32_t> depths() const noexcept { return depth_; }
  //! Scores of all nodes, by id.
  std::span<const float> scores() const noexcept { return score_; }

  //! Token of node i. Throws `specdec::error` (out_of_range) for an id
  //! outside [0, size()), as every accessor taking a node id does.
  token_id token(node_id i) const { return token_[checked(i)]; }
  //! Parent of node i (-1 for the root).
  node_id parent(node_id i) const { return parent_[checked(i)]; }
  //! Depth of node i (root 0).
  std::int32_t depth(node_id i) const { return depth_[checked(i)]; }
  //! Score of node i.
  float score(node_id i) const { return score_[checked(i)]; }

  //! Overwrites the score of node i (e.g. after a drafter reports it).
  void set_score(node_id i, float s) { score_[checked(i)] = s; }
  //! Overwrites the token of node i.
  void set_token(node_id i, token_id t) { token_[checked(i)] = t; }

  //! Largest depth (0 for a root-only tree, -1 when empty).
  std::int32_t max_depth() const noexcept {
    std::int32_t m = -1;
    for (auto d : depth_) m = d > m ? d : m;
    return m;
  }

  //! Non-owning view; valid until the tree is modified.
  tree_view view() const noexcept {
    return tree_view{token_.data(), parent_.data(), depth_.data(), score_.data(), size()};
  }

  //! Equal when every array is equal.
  friend bool operator==(const token_tree& a, const token_tree& b) = default;

 private:
  std::size_t checked(node_id i) const {
    if (i < 0 || i >= size()) throw_if_error(make_status(status_code::out_of_range, "node id out of range", i));
    return static_cast<std::size_t>(i);
  }

  void push(token_id t, node_id p, std::int32_t d, float s) {
    token_.push_back(t);
    parent_.push_back(p);
    depth_.push_back(d);
    score_.push_back(s);
  }

  std::vector<token_id> token_;
  std::vector<node_id> parent_;
  std::vector<std::int32_t> depth_;
  std::vector<float> score_;
};

}  // namespace specdec
