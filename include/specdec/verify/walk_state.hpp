//! \file
//! The state of the one verification walk (verify/walk.hpp): the rows it
//! reads (walk_rows), its scratch (walk_scratch, carved by
//! carve_walk_scratch in the one order sizing and running share), the
//! block/traversal frames and its output (walk_out). Host verifiers, the
//! CUDA kernels, the SGLang adapters and the vocabulary-sharded verifier
//! all fill these and call verify_walk.
#pragma once

#include <cstddef>
#include <cstdint>

#include "specdec/core/config.hpp"
#include "specdec/core/workspace.hpp"
#include "specdec/sample/order.hpp"
#include "specdec/tree/token_tree.hpp"

namespace specdec {

//! The rows of one request: row u of p at element u * p_rs of p (elements
//! of type p_type), element stride p_cs; q likewise.
struct walk_rows {
  const void* p;                      //!< target rows
  std::int64_t p_rs;                  //!< p's row stride (elements)
  std::int64_t p_cs;                  //!< p's column stride (elements)
  const void* q;                      //!< draft rows (null when the mode reads none)
  std::int64_t q_rs;                  //!< q's row stride (elements)
  std::int64_t q_cs;                  //!< q's column stride (elements)
  std::int64_t V;                     //!< vocabulary size
  row_dtype p_type = row_dtype::f32;  //!< p's element type
  row_dtype q_type = row_dtype::f32;  //!< q's element type
  //! Null: p holds probabilities; else p holds logits and row u reads
  //! through p_x[u] (sample/row_transform.hpp).
  const row_transform* p_x = nullptr;
  const row_transform* q_x = nullptr;  //!< q's transforms, as p_x
  //! Row u of p.
  SPECDEC_HD detail::row_ref prow(node_id u) const noexcept { return row(p, p_rs, p_cs, p_type, p_x, u); }
  //! Row u of q.
  SPECDEC_HD detail::row_ref qrow(node_id u) const noexcept { return row(q, q_rs, q_cs, q_type, q_x, u); }

 private:
  SPECDEC_HD static detail::row_ref row(const void* d, std::int64_t rs, std::int64_t cs, row_dtype t,
                                        const row_transform* x, node_id u) noexcept {
    return detail::row_ref{static_cast<const char*>(d) + u * rs * row_dtype_bytes(t), cs, t,
                           x == nullptr ? nullptr : x + u};
  }
};

//! One level of the block/traversal walk's current root path: node u's
//! measure is m_u = k * max(p_u - s * q_u, 0) (docs/verify.md).
struct traversal_frame {
  double k;             //!< measure scale
  double mass;          //!< M_u, the measure's mass
  double rejected_q;    //!< q mass of the distinct tokens rejected so far (without replacement)
  double r_mass;        //!< mass of R = max(p_u - s q_u, 0) after u's latest rejection
  float s;              //!< measure coefficient of q (rounded once, as the residual pass uses it)
  node_id node;         //!< the node
  node_id last_child;   //!< last child tried (-1: none yet)
  std::uint32_t tried;  //!< children tried so far
  std::uint32_t draw;   //!< 1 + u's index among its siblings (u's acceptance draw at its parent)
};

//! Scratch of one request: R holds V floats; tp, tq, tr sum_tile_count(V)
//! doubles (tile sums of p, q and R); queue, depth, from, path n ints each;
//! frames n traversal frames (block and traversal modes).
struct walk_scratch {
  float* R;                 //!< the residual row
  double* tp;               //!< tile sums of p
  double* tq;               //!< tile sums of q
  double* tr;               //!< tile sums of R
  std::int32_t* queue;      //!< breadth-first queue (typical_lossy)
  std::int32_t* depth;      //!< node depths
  std::int32_t* from;       //!< parent on the best path (typical_lossy)
  std::int32_t* path;       //!< the walk's output path (copied out on success)
  traversal_frame* frames;  //!< the root path's frames (block and traversal)
};

//! The walk's scratch for rows of `width` entries summed in `tiles` tiles,
//! carved in one fixed order (sizing and running share it; host, device and
//! the sharded policy use the same layout).
SPECDEC_HD walk_scratch carve_walk_scratch(workspace_carver& w, std::int64_t width, std::int64_t tiles,
                                           std::int32_t n) noexcept {
  const auto nt = static_cast<std::size_t>(tiles);
  const auto nn = static_cast<std::size_t>(n);
  walk_scratch s{};
  s.R = w.take<float>(static_cast<std::size_t>(width));
  s.tp = w.take<double>(nt);
  s.tq = w.take<double>(nt);
  s.tr = w.take<double>(nt);
  s.queue = w.take<std::int32_t>(nn);
  s.depth = w.take<std::int32_t>(nn);
  s.from = w.take<std::int32_t>(nn);
  s.path = w.take<std::int32_t>(nn);
  s.frames = w.take<traversal_frame>(nn);
  return s;
}

//! The walk's scratch for full rows of V entries.
SPECDEC_HD walk_scratch carve_walk_scratch(workspace_carver& w, std::int64_t V, std::int32_t n) noexcept {
  return carve_walk_scratch(w, V, sum_tile_count(V), n);
}

//! Output of the walk: path[0..accepted] the accepted nodes from the root
//! (capacity entries), then the emitted token.
struct walk_out {
  node_id* path;          //!< accepted nodes, root first (written through ops.put)
  std::int32_t capacity;  //!< entries path holds
  std::int32_t accepted;  //!< accepted drafts (path[1..accepted])
  node_id last;           //!< the node whose row gave the emitted token
  token_id next;          //!< the emitted token
};

}  // namespace specdec
