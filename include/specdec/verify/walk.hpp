//! \file
//! THE verification walk: one SPECDEC_HD implementation of every mode, run
//! by the host verifiers (verify_tree, verify_chain, verify_batch) with the
//! host row policy and by the CUDA kernel (one thread block per request)
//! with the device policy. Templated on a topology, a row-operations
//! policy and a uniform source (concepts in verify/policy.hpp).
//!
//! Device rules the code keeps: control flow depends only on values every
//! participant computes identically (policy results, uniforms, single
//! entries read through row_value); writes to scratch go through ops.put
//! (one writer) and are read only after ops.sync(). Residual entries are
//! written only through ops.put(R, token, value) with a token id, so a
//! policy whose R holds a column range (parallel/detail/shard_row_ops.hpp) maps
//! the id itself.
//!
//! This header is public: engines and other areas (cuda/, interop/,
//! kernels/, parallel/, loop/) that bring their own rows, topology or row
//! policy call verify_walk directly. The modes live in
//! verify/detail/walk_modes.hpp; adding one is a `walk_X` there with the
//! same arguments and a case below (docs/verify.md, "Adding a verification
//! mode", lists every other place a mode touches).
#pragma once

#include "specdec/core/config.hpp"
#include "specdec/core/status.hpp"
#include "specdec/verify/detail/walk_modes.hpp"
#include "specdec/verify/policy.hpp"
#include "specdec/verify/verify_params.hpp"
#include "specdec/verify/walk_state.hpp"

namespace specdec {

//! Runs the walk of `vp.mode`. On success o.path[0..o.accepted], o.last
//! and o.next hold the result (path entries written through ops.put; call
//! ops.sync() before reading them from another participant).
SPECDEC_NO_EXEC_CHECK
template <verify_topology Topo, verify_row_ops Ops, uniform_source Uni>
SPECDEC_HD status verify_walk(const Topo& t, const Ops& ops, const Uni& uni, const verify_params& vp,
                              const walk_rows& rows, const walk_scratch& s, walk_out& o) noexcept {
  if (o.capacity < 1) return make_status(status_code::buffer_too_small, "path and tokens need max depth + 1 entries");
  ops.put(o.path, 0, node_id{0});
  o.accepted = 0;
  o.last = 0;
  o.next = -1;
  switch (vp.mode) {
    case verify_mode::sampled_iid:
    case verify_mode::sampled_without_replacement:
      return detail::walk_sampled(t, ops, uni, vp, rows, s, o);
    case verify_mode::deterministic:
      return detail::walk_deterministic(t, ops, uni, rows, s, o);
    case verify_mode::greedy:
    case verify_mode::naive_matching:
      return detail::walk_matching(t, ops, uni, vp, rows, s, o);
    case verify_mode::typical_lossy:
      return detail::walk_typical(t, ops, uni, vp, rows, s, o);
    case verify_mode::block:
    case verify_mode::traversal:
    case verify_mode::traversal_without_replacement:
      return detail::walk_traversal(t, ops, uni, vp, rows, s, o);
  }
  return make_status(status_code::invalid_argument, "unknown verify_mode");
}

}  // namespace specdec
