//! \file
//! Tree-masked selective scan with a choice of algorithm by shape: the
//! recurrent depth-first walk (tree_scan_recurrent.hpp) or the dual form
//! over ancestor pairs (tree_scan_dual.hpp). Both give the same results up
//! to rounding; only the recurrent scan can return per-node states.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>

#include "specdec/core/status.hpp"
#include "specdec/core/view.hpp"
#include "specdec/ssm/tree_scan_dual.hpp"
#include "specdec/ssm/tree_scan_recurrent.hpp"
#include "specdec/ssm/tree_ssm_batch.hpp"
#include "specdec/ssm/tree_ssm_inputs.hpp"
#include "specdec/tree/structure.hpp"
#include "specdec/tree/token_tree.hpp"

namespace specdec {

//! Which scan tree_scan runs.
enum class tree_scan_method {
  automatic,  //!< pick by the cost model of tree_scan_choose
  recurrent,  //!< depth-first walk with a stack of states
  dual,       //!< ancestor-pair dual form (no per-node states)
};

namespace detail {
//! Whether the host vectors are 32 bytes or wider (the cost model's AVX set).
inline constexpr bool scan_cost_wide = SPECDEC_HOST_VEC != 0 && SPECDEC_VEC_BYTES >= 32;
}  // namespace detail

//! Host cost model of tree_scan_choose, in nanoseconds: linear in the work
//! terms of each form, coefficients fitted (least squares on relative
//! errors, benchmarks/fit_scan_cost.py) to bench_ssm's BM_ssm_cross sweep:
//! 8 heads, 1 group, h0 and gate given, N = 8..128, headdim 32 and 64,
//! dstate 16, 64 and 128, full binary trees and chains; float, GCC 12 -O3,
//! AMD EPYC (Zen 4) VM. Two sets, by the host vector width
//! (SPECDEC_VEC_BYTES): 32 bytes (-march=native on that machine: AVX-512,
//! FMA) and 16 (the x86-64 baseline, SSE2). Each picks the faster form in
//! 59/60 configurations of its own build (each misses one chain where the
//! two forms are 3% apart); the other build's set would in 56/60.
struct tree_scan_cost_model {
  // Recurrent: per (node, head), per (node, head, headdim row), per state entry.
  double rec_node = detail::scan_cost_wide ? 13.4 : 29.2;    //!< ns per (node, head): dt', decay, row set-up
  double rec_row = detail::scan_cost_wide ? 5.8 : 5.7;       //!< ns per (node, head, headdim row): x, gate, epilogue
  double rec_entry = detail::scan_cost_wide ? 0.05 : 0.115;  //!< ns per state entry and node: update + C . h
  // Dual: per (node, head), per row, per h0 entry (the h0 C^T GEMM), per pair.
  double dual_node = detail::scan_cost_wide ? 38.2 : 47.0;          //!< ns per (node, head): dt', A_tree, exp(A_tree)
  double dual_row = detail::scan_cost_wide ? 0.8 : 2.53;            //!< ns per (node, head, headdim row): epilogue
  double dual_h0_entry = detail::scan_cost_wide ? 0.02 : 0.056;     //!< ns per (node, h0 entry): the h0 C^T GEMM
  double dual_pair_row = detail::scan_cost_wide ? 0.095 : 0.134;    //!< ns per (pair, head, headdim row): weight * x
  double dual_pair_state = detail::scan_cost_wide ? 0.104 : 0.204;  //!< ns per (pair, group, dstate entry): C . B
};

//! Estimated host times (ns) of the recurrent and the dual form for a tree
//! with `pairs` (node, ancestor-or-self) pairs, from `m`.
inline void tree_scan_cost(const tree_ssm_shape& s, double pairs, bool has_h0, double& recurrent, double& dual,
                           const tree_scan_cost_model& m = {}) noexcept {
  const double nh = static_cast<double>(s.nodes) * static_cast<double>(s.heads);
  const double p = static_cast<double>(s.headdim), st = static_cast<double>(s.dstate);
  const double h = static_cast<double>(s.heads), g = static_cast<double>(s.groups);
  recurrent = nh * (m.rec_node + m.rec_row * p + m.rec_entry * p * st);
  dual = nh * (m.dual_node + m.dual_row * p + (has_h0 ? m.dual_h0_entry * p * st : 0.0)) +
         pairs * (m.dual_pair_row * h * p + m.dual_pair_state * g * st);
}

//! The algorithm `automatic` resolves to: recurrent when per-node states
//! are wanted; otherwise the form with the smaller measured host cost
//! (tree_scan_cost_model). Per node and head the recurrent form updates and
//! reads a whole headdim x dstate state, while the dual form's per-node
//! work is one h0 C^T GEMM row plus weight * x per ancestor, so the dual
//! form wins unless trees are deep. Crossovers (8 heads, 1 group, h0
//! given, headdim 32-64 x dstate 16-128): chains switch to the recurrent
//! form at N = 92-139 with 32-byte vectors (92 at the model demo's 32 x
//! 16 layer), at 48-112 with 16-byte ones (48); full binary trees keep the
//! dual form at every size. O(N * depth).
inline tree_scan_method tree_scan_choose(std::span<const node_id> parent, const tree_ssm_shape& s, bool want_states,
                                         bool has_h0) noexcept {
  if (want_states) return tree_scan_method::recurrent;
  const double pairs =
      static_cast<double>(ancestor_pair_count(parent.data(), static_cast<std::int32_t>(parent.size())));
  double recurrent = 0.0, dual = 0.0;
  tree_scan_cost(s, pairs, has_h0, recurrent, dual);
  return dual < recurrent ? tree_scan_method::dual : tree_scan_method::recurrent;
}

//! Bytes of workspace tree_scan needs for `method` (for `automatic`: enough
//! for either algorithm, so the choice can depend on the call). `parent`
//! must be valid (0 otherwise).
template <ssm_scalar T>
std::size_t tree_scan_workspace_size(std::span<const node_id> parent, const tree_ssm_shape& shape,
                                     tree_scan_method method = tree_scan_method::automatic) noexcept {
  switch (method) {
    case tree_scan_method::recurrent:
      return tree_scan_recurrent_workspace_size<T>(parent, shape);
    case tree_scan_method::dual:
      return tree_scan_dual_workspace_size<T>(parent, shape);
    case tree_scan_method::automatic:
      break;
  }
  return std::max(tree_scan_recurrent_workspace_size<T>(parent, shape),
                  tree_scan_dual_workspace_size<T>(parent, shape));
}

//! Workspace bytes that serve ANY tree of at most `nodes` nodes and depth at
//! most `max_depth` (default: a chain, the worst case), for `method`: no
//! tree and no validation needed, so an engine can size the buffer once at
//! start-up. Pairs are bounded by nodes * (max_depth + 1). Never smaller
//! than the exact *_workspace_size of such a tree. O(1).
template <ssm_scalar T>
std::size_t tree_scan_workspace_bound(std::int64_t nodes, const tree_ssm_shape& shape,
                                      tree_scan_method method = tree_scan_method::automatic,
                                      std::int64_t max_depth = -1) noexcept {
  if (nodes <= 0) return 0;
  const std::int64_t depth = max_depth < 0 || max_depth > nodes - 1 ? nodes - 1 : max_depth;
  tree_ssm_shape s = shape;
  s.nodes = nodes;
  workspace_carver r, d;
  (void)detail::carve_tree_scan_recurrent_walk<T>(r, s);
  (void)detail::carve_tree_scan_recurrent_slots<T>(r, depth, s);
  (void)detail::carve_tree_scan_dual<T>(d, nodes * (depth + 1), s);
  const std::size_t rec = r.bytes_used() + unaligned_workspace_slack;
  const std::size_t dual = d.bytes_used() + unaligned_workspace_slack;
  switch (method) {
    case tree_scan_method::recurrent:
      return rec;
    case tree_scan_method::dual:
      return dual;
    case tree_scan_method::automatic:
      break;
  }
  return std::max(rec, dual);
}

//! Tree-masked selective scan: y [N, heads, headdim] and, when
//! `states.data` is set, per-node states [N, heads, headdim, dstate]
//! (forces the recurrent form; asking `dual` for states is
//! invalid_argument). Any topological order (parent[i] < i). No allocation;
//! deterministic for a given method.
template <ssm_scalar T>
status tree_scan(std::span<const node_id> parent, const tree_ssm_inputs<T>& in, const tree_ssm_options<T>& opt,
                 view3d<T> y, view4d<T> states, std::span<std::byte> workspace,
                 tree_scan_method method = tree_scan_method::automatic) noexcept {
  if (method == tree_scan_method::automatic) {
    tree_ssm_shape s;
    SPECDEC_TRY(validate_tree_ssm_shapes(in, s));
    if (static_cast<std::int64_t>(parent.size()) != s.nodes)
      return make_status(status_code::size_mismatch, "parent must have one entry per node");
    SPECDEC_TRY(validate_topological_parents(parent));
    method = tree_scan_choose(parent, s, states.data != nullptr, in.h0.data != nullptr);
  }
  if (method == tree_scan_method::dual) {
    if (states.data != nullptr)
      return make_status(status_code::invalid_argument, "the dual scan cannot return per-node states");
    return tree_scan_dual(parent, in, opt, y, workspace);
  }
  return tree_scan_recurrent(parent, in, opt, y, states, workspace);
}

//! Workspace bytes tree_scan_batch needs: the largest request's tree_scan
//! workspace, from the host arrays of R + 1 offsets and the concatenated
//! parents (the node capacity: parent.size()), with heads, headdim, groups
//! and dstate from `shape` (its node count is not used). 0 when the
//! offsets or every request fail their checks. (It reads the trees, so
//! unlike kernels::tree_scan_batch_workspace_size it takes host arrays.)
template <ssm_scalar T>
std::size_t tree_scan_batch_workspace_size(std::span<const std::int32_t> offsets, std::span<const node_id> parent,
                                           const tree_ssm_shape& shape) noexcept {
  if (offsets.size() < 2) return 0;
  const auto R = static_cast<std::int32_t>(offsets.size() - 1);
  if (ssm_batch_offsets_check(offsets.data(), R, static_cast<std::int64_t>(parent.size())) != status_code::ok) return 0;
  std::size_t need = 0;
  for (std::int32_t r = 0; r < R; ++r) {
    if (ssm_batch_request_check(offsets.data(), parent.data(), r) != status_code::ok) continue;
    const std::int64_t b = offsets[static_cast<std::size_t>(r)], n = offsets[static_cast<std::size_t>(r) + 1] - b;
    tree_ssm_shape rs = shape;
    rs.nodes = n;
    const std::span<const node_id> par = parent.subspan(static_cast<std::size_t>(b), static_cast<std::size_t>(n));
    const std::size_t w = tree_scan_workspace_size<T>(par, rs);
    need = w > need ? w : need;
  }
  return need;
}

//! Host twin of kernels::tree_scan_batch: each request goes through
//! tree_scan (automatic method; recurrent with per-node states when
//! `states` is given) on its node rows and its h0, and gets its status in
//! request_status[r] (the checks above, then tree_scan's own: a request
//! with NaN inputs gets non_finite). The returned status is the batch's:
//! shapes (nothing written), else success; a workspace smaller than
//! tree_scan_batch_workspace_size gives buffer_too_small for the requests
//! that need more.
template <ssm_scalar T>
status tree_scan_batch(const tree_scan_batch_params<T>& p, std::span<std::byte> workspace) noexcept {
  tree_ssm_shape s;
  SPECDEC_TRY(tree_scan_batch_check_shapes(p, s));
  if (p.num_requests == 0) return status::success();
  const status_code all = ssm_batch_offsets_check(p.offsets, p.num_requests, s.nodes);
  for (std::int32_t r = 0; r < p.num_requests; ++r) {
    status_code code = all != status_code::ok ? all : ssm_batch_request_check(p.offsets, p.parent, r);
    if (code == status_code::ok) {
      const std::int64_t b = p.offsets[r], n = p.offsets[r + 1] - b;
      const std::span<const node_id> par(p.parent + b, static_cast<std::size_t>(n));
      code = tree_scan(par, detail::batch_request_inputs(p, r, b, n), p.opt, detail::node_rows(p.y, b, n),
                       detail::node_rows(p.states, b, n), workspace)
                 .code();
    }
    p.request_status[r] = static_cast<std::int32_t>(code);
  }
  return status::success();
}

}  // namespace specdec
