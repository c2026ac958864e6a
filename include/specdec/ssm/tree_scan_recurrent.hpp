//! \file
//! Recurrent tree-masked selective scan: walks the token tree depth-first
//! and keeps one SSM state per depth level (a stack of states), so node i
//! starts from its parent's state and
//!   h_i = exp(dt'_i A) h_parent + dt'_i x_i B_i^T,   y_i = h_i C_i + D x_i
//! (then y *= silu(z)). Every node costs one recurrence step, so a tree of
//! N nodes costs N steps instead of leaves x depth for unrolled sequences.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>

#include "specdec/core/status.hpp"
#include "specdec/core/view.hpp"
#include "specdec/core/workspace.hpp"
#include "specdec/ssm/detail/ssm_step.hpp"
#include "specdec/ssm/tree_ssm_inputs.hpp"
#include "specdec/tree/detail/tree_common.hpp"
#include "specdec/tree/positions.hpp"
#include "specdec/tree/structure.hpp"
#include "specdec/tree/token_tree.hpp"

namespace specdec {

namespace detail {

//! Scratch of tree_scan_recurrent, carved by the same routine when sizing
//! and when running. The state slots come last: their count depends on the
//! tree's depth, which the run computes into `depth` first.
template <class T>
struct tree_scan_recurrent_scratch {
  node_id* order = nullptr;         // DFS preorder (N)
  std::int32_t* offsets = nullptr;  // children CSR (N + 1)
  node_id* kids = nullptr;          // children CSR (N)
  std::int32_t* stack = nullptr;    // DFS stack (N)
  std::int32_t* depth = nullptr;    // node depths (N)
  T* bcopy = nullptr;               // contiguous B then C, [N, groups, dstate] each (strided B/C only)
  T* rows = nullptr;                // 3 rows of headdim (x, D, z), then dt', decay and a run's decays (3 N),
                                    // then the folded scales: per node (N), a run's (N + 1)
  T* xdt = nullptr;                 // a run's dt' x rows, then its C . h rows ([N, headdim] each)
  T* block = nullptr;               // ssm_run_row_block's state block (4 dstate)
  const T** bc = nullptr;           // a run's B rows, then its C rows (2 N)
  T** store = nullptr;              // a run's state destinations (N)
  T* slots = nullptr;               // (max_depth + 2) state rows of one head
};

template <class T>
tree_scan_recurrent_scratch<T> carve_tree_scan_recurrent_walk(workspace_carver& c, const tree_ssm_shape& s) noexcept {
  const auto n = static_cast<std::size_t>(s.nodes);
  tree_scan_recurrent_scratch<T> r;
  r.order = c.take<node_id>(n);
  r.offsets = c.take<std::int32_t>(n + 1);
  r.kids = c.take<node_id>(n);
  r.stack = c.take<std::int32_t>(n);
  r.depth = c.take<std::int32_t>(n);
  r.bcopy = c.take<T>(2 * static_cast<std::size_t>(s.nodes * s.groups * s.dstate));
  r.rows = c.take<T>(3 * static_cast<std::size_t>(s.headdim) + 5 * n + 1);
  r.xdt = c.take<T>(2 * n * static_cast<std::size_t>(s.headdim));
  r.block = c.take<T>(4 * static_cast<std::size_t>(s.dstate));
  r.bc = c.take<const T*>(2 * n);
  r.store = c.take<T*>(n);
  return r;
}

// depth + 2 slots: slot 0 holds h0, slot d + 1 the state of the node at depth d on the current path.
template <class T>
T* carve_tree_scan_recurrent_slots(workspace_carver& c, std::int64_t max_depth, const tree_ssm_shape& s) noexcept {
  return c.take<T>(static_cast<std::size_t>((max_depth + 2) * s.headdim * s.dstate));
}

}  // namespace detail

//! Bytes of workspace `tree_scan_recurrent` needs for this tree and shape:
//! (max_depth + 2) * headdim * dstate scalars (one head's state per depth
//! level: the O(depth x state) memory of the walk), contiguous copies of B
//! and C (2 N groups dstate scalars, used for strided B or C), 2 N headdim
//! + 3 headdim + 5 N + 1 + 4 dstate scalars of rows, 3 N pointers and
//! 5 N + 1 ints (depths, DFS order and its scratch), plus
//! unaligned_workspace_slack. `parent` must be a valid topological parent
//! array (validate first; an invalid one gives a bound that the scan will
//! reject anyway). O(N * depth).
template <ssm_scalar T>
std::size_t tree_scan_recurrent_workspace_size(std::span<const node_id> parent, const tree_ssm_shape& shape) noexcept {
  if (!validate_topological_parents(parent).ok()) return 0;
  workspace_carver c;
  (void)detail::carve_tree_scan_recurrent_walk<T>(c, shape);
  (void)detail::carve_tree_scan_recurrent_slots<T>(
      c, max_node_depth(parent.data(), static_cast<std::int32_t>(parent.size())), shape);
  return c.bytes_used() + unaligned_workspace_slack;
}

//! Tree-masked selective scan, recurrent form. Writes y [N, heads, headdim]
//! and, when `states.data` is not null, every node's state
//! [N, heads, headdim, dstate] (the state after consuming that node along
//! its root path: what the cache must hold if that node is the last one
//! accepted). Nodes may be in any topological order (parent[i] < i).
//! With `states`, node by node in the h-form (the states
//! tree_ssm_commit_path reproduces exactly). Without, run by run in the
//! folded form (ssm_run_row_block: one fused multiply-add per state entry
//! and node instead of two operations and a multiply; outputs equal the
//! h-form's up to rounding): a run is a stretch of the preorder in which
//! each node is the previous one's child (a chain is one run), its state
//! goes from node to node four rows at a time in L1, and a slot is written
//! only for a node with two children or more, where a later run starts.
//! Either way any topological order of the same tree gives the same bits.
//! Cost O(N * heads * headdim * dstate); memory: the workspace above; no
//! allocation. Deterministic (fixed summation order). Outputs must not
//! overlap inputs. Returns the validation status, or buffer_too_small.
template <ssm_scalar T>
status tree_scan_recurrent(std::span<const node_id> parent, const tree_ssm_inputs<T>& in,
                           const tree_ssm_options<T>& opt, view3d<T> y, view4d<T> states,
                           std::span<std::byte> workspace) noexcept {
  tree_ssm_shape s;
  SPECDEC_TRY(validate_tree_ssm(parent, in, opt, s));
  SPECDEC_TRY(validate_tree_ssm_output(y, s));
  SPECDEC_TRY(validate_tree_ssm_states(states, s));
  if (workspace.data() == nullptr)
    return make_status(status_code::buffer_too_small, "tree_scan_recurrent: workspace is required");

  // The size query's carve; the depths computed here size the slots.
  workspace_carver c = unaligned_carver(workspace.data(), workspace.size());
  auto w = detail::carve_tree_scan_recurrent_walk<T>(c, s);
  if (c.overflowed()) return make_status(status_code::buffer_too_small, "tree_scan_recurrent: workspace too small");
  SPECDEC_TRY(build_depths(parent, std::span<std::int32_t>(w.depth, parent.size())));
  std::int32_t max_depth = 0;
  for (std::int64_t i = 0; i < s.nodes; ++i) max_depth = w.depth[i] > max_depth ? w.depth[i] : max_depth;
  w.slots = detail::carve_tree_scan_recurrent_slots<T>(c, max_depth, s);
  if (c.overflowed()) return make_status(status_code::buffer_too_small, "tree_scan_recurrent: workspace too small");
  const node_id* order = w.order;
  const std::int32_t* depth = w.depth;
  const std::int64_t P = s.headdim, S = s.dstate, row = P * S;
  T* slots = w.slots;
  // B and C rows are read in place when their dstate axis is contiguous
  // (a copy only for other layouts).
  const T* bbase = in.B.data;
  const T* cbase = in.C.data;
  std::int64_t bn = in.B.stride[0], bg = in.B.stride[1], cn = in.C.stride[0], cg = in.C.stride[1];
  if (in.B.stride[2] != 1 || in.C.stride[2] != 1) {
    const std::int64_t gs = s.groups * S;
    T* bcopy = w.bcopy;
    T* ccopy = bcopy + s.nodes * gs;
    for (std::int64_t i = 0; i < s.nodes; ++i)
      for (std::int64_t g = 0; g < s.groups; ++g)
        for (std::int64_t k = 0; k < S; ++k) {
          bcopy[i * gs + g * S + k] = in.B(i, g, k);
          ccopy[i * gs + g * S + k] = in.C(i, g, k);
        }
    bbase = bcopy;
    cbase = ccopy;
    bn = cn = gs;
    bg = cg = S;
  }
  // Per-node states are written in place (each node reads its parent's)
  // when the caller's layout has a unit dstate stride and rows that cannot
  // overlap; otherwise the depth-indexed slots, copied out per node.
  const bool direct = states.data != nullptr && states.stride[3] == 1 && states.stride[2] >= S &&
                      states.stride[1] >= P * states.stride[2] && states.stride[0] >= s.heads * states.stride[1];
  // h0 rows are read in place when contiguous along dstate (no per-call copy).
  const bool h0_direct = in.h0.data != nullptr && in.h0.stride[2] == 1;
  detail::build_children_csr(parent.data(), static_cast<std::int32_t>(s.nodes), w.offsets, w.kids);
  detail::dfs_preorder(w.offsets, w.kids, 0, w.stack, w.order);
  T* xrow = w.rows;
  T* drow = xrow + P;
  T* zrow = drow + P;
  T* dtcol = zrow + P;
  T* decaycol = dtcol + s.nodes;
  T* run_decay = decaycol + s.nodes;
  // Without per-node states the runs go folded (ssm_run_row_block): slots
  // then hold g = h / scale, node_scale[i] the scale of node i's slot.
  const bool fold = states.data == nullptr;
  T* node_scale = run_decay + s.nodes;
  T* run_scale = node_scale + s.nodes;
  T* xdt = w.xdt;
  T* acc = xdt + s.nodes * P;
  const T** brow = w.bc;
  const T** crow = brow + s.nodes;
  T** store = w.store;

  const std::int64_t hpg = s.heads_per_group();
  for (std::int64_t h = 0; h < s.heads; ++h) {
    const std::int64_t g = h / hpg;
    const T bias = in.dt_bias.data != nullptr ? in.dt_bias(h) : T(0);
    const T a = in.A(h);
    for (std::int64_t p = 0; p < P; ++p) drow[p] = tree_ssm_d(in, h, p);
    // dt' and the decay exp(dt' A) of every node of this head, on vectors.
    detail::ssm_dt_column(in.dt.data + h * in.dt.stride[1], in.dt.stride[0], bias, opt, dtcol, s.nodes);
    for (std::int64_t i = 0; i < s.nodes; ++i) decaycol[i] = detail::ssm_log_decay(dtcol[i], a);
    detail::ssm_exp_inplace(decaycol, s.nodes);
    // The state before the root: h0 in place, a contiguous copy of a strided h0, or none (zeros).
    const T* h0p = nullptr;
    std::int64_t h0ld = S;
    if (h0_direct) {
      h0p = in.h0.data + h * in.h0.stride[0];
      h0ld = in.h0.stride[1];
    } else if (in.h0.data != nullptr) {
      for (std::int64_t p = 0; p < P; ++p)
        for (std::int64_t k = 0; k < S; ++k) slots[p * S + k] = in.h0(h, p, k);
      h0p = slots;
    }
    // Node i's output row from its C . h row `a_row` and its x row.
    const auto emit = [&](node_id i, const T* x, T* a_row) {
      const T* z = nullptr;
      if (in.z.data != nullptr) {
        if (in.z.stride[2] == 1) {
          z = &in.z(i, h, 0);
        } else {
          for (std::int64_t p = 0; p < P; ++p) zrow[p] = in.z(i, h, p);
          z = zrow;
        }
      }
      if (y.stride[2] == 1) {
        detail::ssm_output_row(a_row, x, drow, z, &y(i, h, 0), P);
      } else {
        detail::ssm_output_row(a_row, x, drow, z, a_row, P);
        for (std::int64_t p = 0; p < P; ++p) y(i, h, p) = a_row[p];
      }
    };
    if (!fold) {
      // Every node's state kept: node by node in the h-form (the states
      // tree_ssm_commit_path reproduces exactly).
      for (std::int64_t t = 0; t < s.nodes; ++t) {
        // Preorder: when node i (depth d) is visited, slot d holds its parent's
        // state (the last node seen at depth d - 1), and slot d + 1 is free.
        const node_id i = order[t];
        const node_id par = parent[static_cast<std::size_t>(i)];
        const std::int32_t d = depth[i];
        const T* h_in = par < 0 ? h0p : slots + static_cast<std::int64_t>(d) * row;
        std::int64_t in_ld = par < 0 ? h0ld : S;
        T* h_out = slots + static_cast<std::int64_t>(d + 1) * row;
        std::int64_t out_ld = S;
        if (direct) {
          if (par >= 0) {
            h_in = states.data + par * states.stride[0] + h * states.stride[1];
            in_ld = states.stride[2];
          }
          h_out = states.data + i * states.stride[0] + h * states.stride[1];
          out_ld = states.stride[2];
        }
        const T dt = dtcol[i];
        for (std::int64_t p = 0; p < P; ++p) {
          xrow[p] = in.x(i, h, p);
          xdt[p] = dt * xrow[p];
        }
        detail::ssm_step_row_block(h_in, in_ld, h_out, out_ld, bbase + i * bn + g * bg, cbase + i * cn + g * cg,
                                   decaycol[i], xdt, acc, P, S);
        emit(i, xrow, acc);
        if (!direct)
          for (std::int64_t p = 0; p < P; ++p)
            for (std::int64_t k = 0; k < S; ++k) states(i, h, p, k) = h_out[p * S + k];
      }
      continue;
    }
    // No states: run by run in the folded form.
    for (std::int64_t t0 = 0; t0 < s.nodes;) {
      std::int64_t t1 = t0 + 1;
      while (t1 < s.nodes && parent[static_cast<std::size_t>(order[t1])] == order[t1 - 1]) ++t1;
      const std::int64_t L = t1 - t0;
      // Preorder: when a run's first node (depth d) is visited, slot d holds
      // its parent's g (the last node seen at depth d - 1, which has another
      // child before this one, so it stored it); slots d + 1 and deeper are
      // free.
      const node_id first = order[t0];
      const node_id par = parent[static_cast<std::size_t>(first)];
      const T* h_in = par < 0 ? h0p : slots + static_cast<std::int64_t>(depth[first]) * row;
      const std::int64_t in_ld = par < 0 ? h0ld : S;
      for (std::int64_t j = 0; j < L; ++j) {
        const node_id i = order[t0 + j];
        brow[j] = bbase + i * bn + g * bg;
        crow[j] = cbase + i * cn + g * cg;
        run_decay[j] = decaycol[i];
        const T dt = dtcol[i];
        for (std::int64_t p = 0; p < P; ++p) xdt[j * P + p] = dt * in.x(i, h, p);
        const bool branches = w.offsets[i + 1] - w.offsets[i] >= 2;
        store[j] = branches ? slots + static_cast<std::int64_t>(depth[i] + 1) * row : nullptr;
      }
      run_scale[0] = par < 0 ? T(1) : node_scale[par];
      detail::ssm_run_row_block(h_in, in_ld, store, S, brow, crow, run_decay, xdt, P, acc, L, P, S, w.block, run_scale);
      for (std::int64_t j = 0; j < L; ++j) {
        const node_id i = order[t0 + j];
        node_scale[i] = run_scale[j + 1];
        const T* x = &in.x(i, h, 0);
        if (in.x.stride[2] != 1) {
          for (std::int64_t p = 0; p < P; ++p) xrow[p] = in.x(i, h, p);
          x = xrow;
        }
        emit(i, x, acc + j * P);
      }
      t0 = t1;
    }
  }
  return status::success();
}

}  // namespace specdec
