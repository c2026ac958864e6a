//! \file
//! Cumulative log-decay along root paths of a token tree: with
//! dt' = softplus(dt + dt_bias) (clamped) and a_i = dt'_i * A,
//! A_tree[i] = A_tree[parent[i]] + a_i. This corrects STree's eq. (6),
//! which sums "log A_i" (A_log) over the mask: in Mamba2 the per-step
//! log-decay is dt' * A, and the same dt' also scales every input term.
#pragma once

#include <cstdint>
#include <span>

#include "specdec/core/status.hpp"
#include "specdec/core/view.hpp"
#include "specdec/ssm/tree_ssm_inputs.hpp"
#include "specdec/tree/token_tree.hpp"

namespace specdec {

//! dt' and A_tree for one head into contiguous arrays of N entries
//! (`dt_eff` and `a_tree`). Inputs are trusted (validated by the caller).
//! O(N); A_tree[i] <= A_tree[parent[i]] <= 0 because A <= 0 and dt' >= 0.
template <ssm_scalar T>
void tree_cumulative_decay_head(std::span<const node_id> parent, const tree_ssm_inputs<T>& in,
                                const tree_ssm_options<T>& opt, std::int64_t head, T* dt_eff, T* a_tree) noexcept {
  const T bias = in.dt_bias.data != nullptr ? in.dt_bias(head) : T(0);
  const T a = in.A(head);
  // dt' of all nodes on vectors (softplus, clamp), then the prefix along parents.
  detail::ssm_dt_column(in.dt.data + head * in.dt.stride[1], in.dt.stride[0], bias, opt, dt_eff,
                        static_cast<std::int64_t>(parent.size()));
  for (std::size_t i = 0; i < parent.size(); ++i) {
    const node_id p = parent[i];
    a_tree[i] = (p < 0 ? T(0) : a_tree[p]) + detail::ssm_log_decay(dt_eff[i], a);
  }
}

//! dt' [N, heads] and A_tree [N, heads] for every head, into caller views
//! (either may be absent, data == nullptr, but not both). Validates
//! the tree and inputs first. O(N * heads), no allocation, deterministic.
template <ssm_scalar T>
status tree_cumulative_decay(std::span<const node_id> parent, const tree_ssm_inputs<T>& in,
                             const tree_ssm_options<T>& opt, view2d<T> dt_eff, view2d<T> a_tree) noexcept {
  tree_ssm_shape s;
  SPECDEC_TRY(validate_tree_ssm(parent, in, opt, s));
  if (dt_eff.data == nullptr && a_tree.data == nullptr)
    return make_status(status_code::invalid_argument, "tree_cumulative_decay: no output requested");
  if (dt_eff.data != nullptr && (dt_eff.extent[0] != s.nodes || dt_eff.extent[1] != s.heads))
    return make_status(status_code::size_mismatch, "dt_eff must be [N, heads]");
  if (a_tree.data != nullptr && (a_tree.extent[0] != s.nodes || a_tree.extent[1] != s.heads))
    return make_status(status_code::size_mismatch, "a_tree must be [N, heads]");
  for (std::int64_t h = 0; h < s.heads; ++h) {
    const T bias = in.dt_bias.data != nullptr ? in.dt_bias(h) : T(0);
    for (std::int64_t i = 0; i < s.nodes; ++i) {
      const T d = detail::ssm_dt_effective(in.dt(i, h), bias, opt);
      if (dt_eff.data != nullptr) dt_eff(i, h) = d;
      if (a_tree.data != nullptr) {
        const node_id p = parent[static_cast<std::size_t>(i)];
        // Topological order: the parent's entry is already final.
        a_tree(i, h) = (p < 0 ? T(0) : a_tree(p, h)) + detail::ssm_log_decay(d, in.A(h));
      }
    }
  }
  return status::success();
}

}  // namespace specdec
