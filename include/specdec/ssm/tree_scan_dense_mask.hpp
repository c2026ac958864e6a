//! \file
//! Tree-masked selective scan driven by a dense N x N mask L, exactly as in
//! STree (L[i][j] = 1 when node j is on node i's root path), with the dt'
//! correction: A_tree = L a with a_j = dt'_j A (not L A_log), and each input
//! term carries dt'_j:
//!   y_i = exp(A_tree[i]) (C_i . h0)
//!       + sum_j L[i][j] exp(A_tree[i] - A_tree[j]) dt'_j (C_i . B_j) x_j + D x_i.
//! Meant for checking against STree's formulation and for masks that come
//! from elsewhere; for trees prefer tree_scan (parent array, O(N * depth)).
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

namespace specdec {

//! Bytes of workspace tree_scan_dense_mask needs (2 N + headdim scalars,
//! plus unaligned_workspace_slack).
template <ssm_scalar T>
constexpr std::size_t tree_scan_dense_mask_workspace_size(const tree_ssm_shape& shape) noexcept {
  workspace_carver c;
  (void)c.take<T>(2 * static_cast<std::size_t>(shape.nodes) + static_cast<std::size_t>(shape.headdim));
  return c.bytes_used() + unaligned_workspace_slack;
}

//! Checks a dense mask: [N, N] of 0/1, unit diagonal, nothing above the
//! diagonal (nodes in topological order), and closed: L[i][j] = 1 implies
//! row j is contained in row i. It need not be a tree mask (packed causal
//! sequences, or any ancestor relation of a DAG, qualify); with a tree mask
//! it equals the tree scans. Closure is what makes A_tree[i] - A_tree[j] a
//! sum of decays (<= 0) for every masked pair; without it that difference
//! can be positive and exp() overflows. Returns size_mismatch,
//! invalid_argument or not_topological (index = row). O(N^3) worst case
//! (O(N * pairs)), below the scan's own O(N^2 * heads * headdim) in practice.
inline status validate_dense_mask(view2d<const std::uint8_t> mask, std::int64_t n) noexcept {
  if (mask.data == nullptr) return make_status(status_code::invalid_argument, "mask is required");
  if (mask.extent[0] != n || mask.extent[1] != n) return make_status(status_code::size_mismatch, "mask must be [N, N]");
  for (std::int64_t i = 0; i < n; ++i) {
    for (std::int64_t j = 0; j < n; ++j) {
      const std::uint8_t v = mask(i, j);
      if (v > 1) return make_status(status_code::invalid_argument, "mask entries must be 0 or 1", i);
      if (j > i && v != 0) return make_status(status_code::not_topological, "mask has an entry above the diagonal", i);
      if (j == i && v != 1) return make_status(status_code::invalid_argument, "mask diagonal must be 1", i);
    }
  }
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t j = 0; j < i; ++j) {
      if (mask(i, j) == 0) continue;
      for (std::int64_t k = 0; k < j; ++k)
        if (mask(j, k) != 0 && mask(i, k) == 0)
          return make_status(status_code::invalid_argument, "mask is not closed: a masked node's row is not in row i",
                             i);
    }
  return status::success();
}

namespace detail {

//! tree_scan_dense_mask for rows with unit innermost strides: C . h0 and
//! C . B as vector dots, the masked terms as vector axpys, the epilogue
//! (D, SiLU gate) on vectors. Inputs validated; scratch of 2 N + headdim.
template <class T>
void tree_scan_dense_mask_rows(view2d<const std::uint8_t> mask, const tree_ssm_inputs<T>& in,
                               const tree_ssm_options<T>& opt, const tree_ssm_shape& s, view3d<T> y, T* dt_eff,
                               T* a_tree, T* drow) noexcept {
  const std::int64_t hpg = s.heads_per_group(), P = s.headdim, S = s.dstate;
  for (std::int64_t h = 0; h < s.heads; ++h) {
    const std::int64_t g = h / hpg;
    const T bias = in.dt_bias.data != nullptr ? in.dt_bias(h) : T(0);
    ssm_dt_column(in.dt.data + h * in.dt.stride[1], in.dt.stride[0], bias, opt, dt_eff, s.nodes);
    for (std::int64_t p = 0; p < P; ++p) drow[p] = tree_ssm_d(in, h, p);
    for (std::int64_t i = 0; i < s.nodes; ++i) {
      T sum = T(0);
      for (std::int64_t j = 0; j <= i; ++j)
        if (mask(i, j) != 0) sum += ssm_log_decay(dt_eff[j], in.A(h));
      a_tree[i] = sum;
    }
    for (std::int64_t i = 0; i < s.nodes; ++i) {
      // y doubles as the accumulator (it may not overlap the inputs).
      T* yrow = &y(i, h, 0);
      const T* crow = &in.C(i, g, 0);
      const T e0 = vec_ops<T, false>::exp(a_tree[i]);
      for (std::int64_t p = 0; p < P; ++p)
        yrow[p] = in.h0.data != nullptr ? e0 * ssm_dot_row(&in.h0(h, p, 0), crow, S) : T(0);
      for (std::int64_t j = 0; j <= i; ++j) {
        if (mask(i, j) == 0) continue;
        const T w = vec_ops<T, false>::exp(a_tree[i] - a_tree[j]) * dt_eff[j] * ssm_dot_row(crow, &in.B(j, g, 0), S);
        ssm_axpy_row(w, &in.x(j, h, 0), yrow, P);
      }
      ssm_output_row(yrow, &in.x(i, h, 0), drow, in.z.data != nullptr ? &in.z(i, h, 0) : nullptr, yrow, P);
    }
  }
}

}  // namespace detail

//! Tree-masked scan from a dense mask. y [N, heads, headdim]. Cost
//! O(N^2 * (groups * dstate + heads * headdim) + N * heads * headdim *
//! dstate), no allocation, deterministic. Only masked terms are
//! exponentiated (select before exp).
template <ssm_scalar T>
status tree_scan_dense_mask(view2d<const std::uint8_t> mask, const tree_ssm_inputs<T>& in,
                            const tree_ssm_options<T>& opt, view3d<T> y, std::span<std::byte> workspace) noexcept {
  tree_ssm_shape s;
  SPECDEC_TRY(validate_tree_ssm_values(in, opt, s));
  SPECDEC_TRY(validate_dense_mask(mask, s.nodes));
  SPECDEC_TRY(validate_tree_ssm_output(y, s));
  workspace_carver c = unaligned_carver(workspace.data(), workspace.size());
  T* dt_eff = c.take<T>(2 * static_cast<std::size_t>(s.nodes) + static_cast<std::size_t>(s.headdim));
  if (workspace.data() == nullptr || c.overflowed())
    return make_status(status_code::buffer_too_small, "tree_scan_dense_mask: workspace too small");
  T* a_tree = dt_eff + s.nodes;
  T* drow = a_tree + s.nodes;
  // Unit innermost strides everywhere: rows on vectors (ssm/detail/ssm_step.hpp).
  const bool rows = in.x.stride[2] == 1 && in.B.stride[2] == 1 && in.C.stride[2] == 1 && y.stride[2] == 1 &&
                    (in.h0.data == nullptr || in.h0.stride[2] == 1) && (in.z.data == nullptr || in.z.stride[2] == 1);
  if (rows) {
    detail::tree_scan_dense_mask_rows(mask, in, opt, s, y, dt_eff, a_tree, drow);
    return status::success();
  }
  const std::int64_t hpg = s.heads_per_group();
  for (std::int64_t h = 0; h < s.heads; ++h) {
    const std::int64_t g = h / hpg;
    const T bias = in.dt_bias.data != nullptr ? in.dt_bias(h) : T(0);
    for (std::int64_t i = 0; i < s.nodes; ++i) dt_eff[i] = detail::ssm_dt_effective(in.dt(i, h), bias, opt);
    // STree eq. (6) with the correction: A_tree = L (dt' * A).
    for (std::int64_t i = 0; i < s.nodes; ++i) {
      T sum = T(0);
      for (std::int64_t j = 0; j <= i; ++j)
        if (mask(i, j) != 0) sum += detail::ssm_log_decay(dt_eff[j], in.A(h));
      a_tree[i] = sum;
    }
    for (std::int64_t i = 0; i < s.nodes; ++i) {
      // y doubles as the accumulator (it may not overlap the inputs).
      const T e0 = std::exp(a_tree[i]);
      for (std::int64_t p = 0; p < s.headdim; ++p) {
        T dot = T(0);
        if (in.h0.data != nullptr)
          for (std::int64_t q = 0; q < s.dstate; ++q) dot += in.C(i, g, q) * in.h0(h, p, q);
        y(i, h, p) = e0 * dot;
      }
      for (std::int64_t j = 0; j <= i; ++j) {
        if (mask(i, j) == 0) continue;
        T cb = T(0);
        for (std::int64_t q = 0; q < s.dstate; ++q) cb += in.C(i, g, q) * in.B(j, g, q);
        const T w = std::exp(a_tree[i] - a_tree[j]) * dt_eff[j] * cb;
        for (std::int64_t p = 0; p < s.headdim; ++p) y(i, h, p) += w * in.x(j, h, p);
      }
      for (std::int64_t p = 0; p < s.headdim; ++p) {
        T out = y(i, h, p) + tree_ssm_d(in, h, p) * in.x(i, h, p);
        if (in.z.data != nullptr) out *= detail::ssm_silu(in.z(i, h, p));
        y(i, h, p) = out;
      }
    }
  }
  return status::success();
}

}  // namespace specdec
