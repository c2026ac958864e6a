//! \file
//! Greedy tree verification from precomputed target argmax ids (SGLang's
//! `target_predict`): no probability rows are needed, only the target's
//! argmax after each node. Token-identical to verify_mode::greedy on the
//! rows those ids came from (same child visit order, same bonus token).
#pragma once

#include <cstdint>
#include <span>

#include "specdec/core/config.hpp"
#include "specdec/core/status.hpp"
#include "specdec/tree/token_tree.hpp"
#include "specdec/tree/validate.hpp"
#include "specdec/verify/verify_params.hpp"

namespace specdec {

//! Options of verify_greedy_ids.
struct greedy_ids_options {
  //! The root's token is not read or checked (SGLang puts a placeholder in
  //! candidates[0]); otherwise it must be a valid token like every other.
  bool unused_root = false;
  //! Accept at most this many drafts (SGLang: num_speculative_tokens - 1);
  //! the bonus token is then the target id of the last accepted node.
  std::int32_t max_accept = INT32_MAX;
};

//! Walks the tree from the root: at node u, move to the first child (in
//! ascending id) whose token equals target_ids[u]; stop at a node without
//! such a child (or after max_accept drafts) and emit target_ids there.
//! - tree: topological (validated); tokens checked against `vocab` when
//!   vocab > 0 (the root's only without unused_root).
//! - target_ids: one entry per node; only the visited ones are read and each
//!   is checked to lie in [0, vocab) (>= 0 when vocab is 0).
//! - path, tokens: as verify_tree (capacity >= accepted depth + 1).
//! Errors (outputs untouched): tree errors, size_mismatch (target_ids too
//! short), token_out_of_range (index = node), invalid_argument
//! (max_accept < 0), buffer_too_small. O(N * depth); no allocation. Host
//! and device (one thread).
SPECDEC_HD status verify_greedy_ids(const tree_view& tree, std::span<const token_id> target_ids, std::int64_t vocab,
                                    const greedy_ids_options& o, std::span<node_id> path, std::span<token_id> tokens,
                                    verify_result& result) noexcept {
  const std::int32_t n = tree.size;
  if (n < 1) return make_status(status_code::empty_input, "the tree needs a root");
  if (tree.parent == nullptr || tree.token == nullptr)
    return make_status(status_code::invalid_argument, "tree needs parent and token arrays");
  if (o.max_accept < 0) return make_status(status_code::invalid_argument, "max_accept must be >= 0");
  SPECDEC_TRY(validate_topological_parents(tree.parent, n));
  for (std::int32_t i = o.unused_root ? 1 : 0; i < n; ++i)
    if (tree.token[i] < 0 || (vocab > 0 && tree.token[i] >= vocab))
      return make_status(status_code::token_out_of_range, "tree token out of range", i);
  if (target_ids.size() < static_cast<std::size_t>(n))
    return make_status(status_code::size_mismatch, "target_ids needs one entry per node");
  auto bad_id = [&](token_id y) { return y < 0 || (vocab > 0 && y >= vocab); };
  node_id u = 0;
  std::int32_t depth = 0;
  for (;;) {
    const token_id y = target_ids[static_cast<std::size_t>(u)];
    if (bad_id(y)) return make_status(status_code::token_out_of_range, "target id out of range", u);
    if (depth >= o.max_accept) break;
    node_id next = -1;
    for (node_id c = u + 1; c < n; ++c)
      if (tree.parent[c] == u && tree.token[c] == y) {
        next = c;
        break;
      }
    if (next < 0) break;
    u = next;
    ++depth;
  }
  if (path.size() < static_cast<std::size_t>(depth) + 1 || tokens.size() < static_cast<std::size_t>(depth) + 1)
    return make_status(status_code::buffer_too_small, "path and tokens need accepted depth + 1 entries");
  node_id v = u;
  for (std::int32_t k = depth; k >= 1; --k) {
    path[static_cast<std::size_t>(k)] = v;
    tokens[static_cast<std::size_t>(k - 1)] = tree.token[v];
    v = tree.parent[v];
  }
  path[0] = 0;
  const token_id next_token = target_ids[static_cast<std::size_t>(u)];
  tokens[static_cast<std::size_t>(depth)] = next_token;
  result = verify_result{depth, u, next_token, status_code::ok};
  return status::success();
}

}  // namespace specdec
