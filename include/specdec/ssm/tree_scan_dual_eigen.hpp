//! \file
//! Dense (quadratic) dual form of the tree-masked selective scan with Eigen
//! matrix products, the formulation of STree (corrected for dt'): per group
//! G = C B^T (N x N), per head M = (L o exp(A_tree_i - A_tree_j) dt'_j) o G
//! and Y = M X + diag(exp(A_tree)) C h0^T, then D and the gate.
//!
//! Needs Eigen 3 on the include path (find_package(Eigen3) and link
//! Eigen3::Eigen). Without it this header defines nothing (and
//! SPECDEC_SSM_HAS_EIGEN stays 0), so it still compiles on its own; the
//! rest of ssm/ never needs Eigen.
#pragma once

#if __has_include(<Eigen/Dense>)
#define SPECDEC_SSM_HAS_EIGEN 1

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>

#include <Eigen/Dense>

#include "specdec/core/status.hpp"
#include "specdec/core/view.hpp"
#include "specdec/core/workspace.hpp"
#include "specdec/ssm/detail/ssm_step.hpp"
#include "specdec/ssm/tree_decay.hpp"
#include "specdec/ssm/tree_ssm_inputs.hpp"
#include "specdec/tree/token_tree.hpp"

namespace specdec {

namespace detail {

//! Scratch of tree_scan_dual_eigen, carved by one routine for sizing and running.
template <class T>
struct tree_scan_dual_eigen_scratch {
  std::uint8_t* anc = nullptr;  // dense ancestor mask [N, N]
  T* gbuf = nullptr;            // two [N, N] products
  T* ybuf = nullptr;            // y, x and C.h0 rows [N, headdim] each
  T* h0buf = nullptr;           // h0 of one head [headdim, dstate]
  T* dt_eff = nullptr;          // dt', then A_tree (2 N)
  T* rows = nullptr;            // D and z rows of one head (2 headdim)
};

template <class T>
constexpr tree_scan_dual_eigen_scratch<T> carve_tree_scan_dual_eigen(workspace_carver& c,
                                                                     const tree_ssm_shape& s) noexcept {
  const auto n = static_cast<std::size_t>(s.nodes);
  tree_scan_dual_eigen_scratch<T> r;
  r.anc = c.take<std::uint8_t>(n * n);
  r.gbuf = c.take<T>(2 * n * n);
  r.ybuf = c.take<T>(n * static_cast<std::size_t>(3 * s.headdim));
  r.h0buf = c.take<T>(static_cast<std::size_t>(s.headdim * s.dstate));
  r.dt_eff = c.take<T>(2 * n);
  r.rows = c.take<T>(2 * static_cast<std::size_t>(s.headdim));
  return r;
}

}  // namespace detail

//! Bytes of workspace tree_scan_dual_eigen needs: N^2 bytes (ancestor mask)
//! plus (2 N^2 + 3 N headdim + headdim * dstate + 2 N + 2 headdim) scalars, plus
//! unaligned_workspace_slack.
template <ssm_scalar T>
constexpr std::size_t tree_scan_dual_eigen_workspace_size(const tree_ssm_shape& s) noexcept {
  workspace_carver c;
  (void)detail::carve_tree_scan_dual_eigen<T>(c, s);
  return c.bytes_used() + unaligned_workspace_slack;
}

//! Tree-masked scan, dense dual form (Eigen GEMMs). Same contract and
//! results (up to rounding) as tree_scan_dual. The ancestor mask is built
//! from `parent` (row i = row parent[i] plus bit i); only masked entries are
//! exponentiated. Cost O(N^2 (groups * dstate + heads * headdim) + N heads
//! headdim dstate). Eigen may use heap blocking buffers for large products;
//! all other memory is the workspace. Deterministic for a given build.
template <ssm_scalar T>
status tree_scan_dual_eigen(std::span<const node_id> parent, const tree_ssm_inputs<T>& in,
                            const tree_ssm_options<T>& opt, view3d<T> y, std::span<std::byte> workspace) noexcept {
  using mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using strided_map = Eigen::Map<const mat, Eigen::Unaligned, Eigen::Stride<Eigen::Dynamic, Eigen::Dynamic>>;
  using dense_map = Eigen::Map<mat>;
  using stride_t = Eigen::Stride<Eigen::Dynamic, Eigen::Dynamic>;
  tree_ssm_shape s;
  SPECDEC_TRY(validate_tree_ssm(parent, in, opt, s));
  SPECDEC_TRY(validate_tree_ssm_output(y, s));
  if (workspace.data() == nullptr)
    return make_status(status_code::buffer_too_small, "tree_scan_dual_eigen: workspace is required");
  workspace_carver c = unaligned_carver(workspace.data(), workspace.size());
  const auto w = detail::carve_tree_scan_dual_eigen<T>(c, s);
  if (c.overflowed()) return make_status(status_code::buffer_too_small, "tree_scan_dual_eigen: workspace too small");
  const auto n = static_cast<std::size_t>(s.nodes);
  const Eigen::Index N = s.nodes, P = s.headdim, S = s.dstate;
  std::uint8_t* anc = w.anc;
  T* gbuf = w.gbuf;
  T* ybuf = w.ybuf;
  T* xbuf = ybuf + N * P;
  T* chbuf = xbuf + N * P;
  T* h0buf = w.h0buf;
  T* dt_eff = w.dt_eff;
  T* a_tree = dt_eff + N;
  T* drow = w.rows;
  T* zrow = drow + P;

  // Dense ancestor mask from parents: row i = row parent[i] + bit i.
  for (std::size_t i = 0; i < n; ++i) {
    const node_id p = parent[i];
    for (std::size_t j = 0; j < n; ++j)
      anc[i * n + j] = (p >= 0 && j < i) ? anc[static_cast<std::size_t>(p) * n + j] : 0;
    anc[i * n + i] = 1;
  }
  dense_map G(gbuf, N, N), M(gbuf + N * N, N, N), Y(ybuf, N, P), X(xbuf, N, P), H0(h0buf, P, S);
  const std::int64_t hpg = s.heads_per_group();
  for (std::int64_t g = 0; g < s.groups; ++g) {
    const strided_map Bg(in.B.data + g * in.B.stride[1], N, S, stride_t(in.B.stride[0], in.B.stride[2]));
    const strided_map Cg(in.C.data + g * in.C.stride[1], N, S, stride_t(in.C.stride[0], in.C.stride[2]));
    G.noalias() = Cg * Bg.transpose();
    for (std::int64_t h = g * hpg; h < (g + 1) * hpg; ++h) {
      tree_cumulative_decay_head(parent, in, opt, h, dt_eff, a_tree);
      // Select before exp: non-ancestor entries get -inf (exp gives exactly 0),
      // never their difference; then exp, dt'_j and G on vectors, row by row.
      constexpr T none = -std::numeric_limits<T>::infinity();
      for (Eigen::Index i = 0; i < N; ++i) {
        T* mrow = &M(i, 0);
        for (Eigen::Index j = 0; j < N; ++j) mrow[j] = anc[i * N + j] ? a_tree[i] - a_tree[j] : none;
        detail::ssm_exp_inplace(mrow, N);
        for (Eigen::Index j = 0; j < N; ++j) mrow[j] *= dt_eff[j] * G(i, j);
      }
      X = strided_map(in.x.data + h * in.x.stride[1], N, P, stride_t(in.x.stride[0], in.x.stride[2]));
      Y.noalias() = M * X;
      if (in.h0.data != nullptr) {
        H0 = strided_map(in.h0.data + h * in.h0.stride[0], P, S, stride_t(in.h0.stride[1], in.h0.stride[2]));
        dense_map CH(chbuf, N, P);
        CH.noalias() = Cg * H0.transpose();
        for (Eigen::Index i = 0; i < N; ++i) Y.row(i) += std::exp(a_tree[i]) * CH.row(i);
      }
      // Epilogue on vectors: y = (Y + D x) silu(z), through scratch rows for strided z or y.
      for (Eigen::Index p = 0; p < P; ++p) drow[p] = tree_ssm_d(in, h, p);
      for (Eigen::Index i = 0; i < N; ++i) {
        const T* z = nullptr;
        if (in.z.data != nullptr) {
          if (in.z.stride[2] == 1) {
            z = &in.z(i, h, 0);
          } else {
            for (Eigen::Index p = 0; p < P; ++p) zrow[p] = in.z(i, h, p);
            z = zrow;
          }
        }
        T* yrow = &Y(i, 0);
        if (y.stride[2] == 1) {
          detail::ssm_output_row(yrow, &X(i, 0), drow, z, &y(i, h, 0), P);
        } else {
          detail::ssm_output_row(yrow, &X(i, 0), drow, z, yrow, P);
          for (Eigen::Index p = 0; p < P; ++p) y(i, h, p) = yrow[p];
        }
      }
    }
  }
  return status::success();
}

}  // namespace specdec

#else
//! 0: Eigen was not found, tree_scan_dual_eigen is not declared.
#define SPECDEC_SSM_HAS_EIGEN 0
#endif
