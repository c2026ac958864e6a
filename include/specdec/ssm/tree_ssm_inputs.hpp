//! \file
//! Inputs, options and validation shared by the tree-masked SSM primitives
//! (Mamba2 conventions). Every scan, the state commit and the replay take the
//! same `tree_ssm_inputs`, so a caller builds the views once per layer.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <type_traits>

#include "specdec/core/config.hpp"
#include "specdec/core/detail/simd.hpp"
#include "specdec/core/status.hpp"
#include "specdec/core/view.hpp"
#include "specdec/tree/token_tree.hpp"
#include "specdec/tree/validate.hpp"

namespace specdec {

//! Element types the SSM primitives are instantiated for.
template <class T>
concept ssm_scalar = std::is_same_v<T, float> || std::is_same_v<T, double>;

//! Per-layer inputs of a tree-masked selective scan, as strided views over
//! caller memory (any layout: pass the strides of your tensors). N is the
//! node count; heads share groups: head h reads group h / (heads / groups).
//! Optional views are "absent" when their `data` is null.
template <ssm_scalar T>
struct tree_ssm_inputs {
  view3d<const T> x;          //!< [N, heads, headdim]
  view2d<const T> dt;         //!< [N, heads], raw (before dt_bias and softplus)
  view1d<const T> A;          //!< [heads], A <= 0 (Mamba2: -exp(A_log))
  view3d<const T> B;          //!< [N, groups, dstate]
  view3d<const T> C;          //!< [N, groups, dstate]
  view2d<const T> D{};        //!< [heads, headdim] or [heads, 1] (per head); optional
  view1d<const T> dt_bias{};  //!< [heads]; optional (0)
  view3d<const T> z{};        //!< [N, heads, headdim] gate, y *= silu(z); optional
  view3d<const T> h0{};       //!< [heads, headdim, dstate] initial state; optional (zeros)
};

//! How dt becomes dt': dt' = softplus(dt + dt_bias) (or dt + dt_bias when
//! `dt_softplus` is false), then clamped to [dt_min, dt_max] (Mamba2's
//! dt_limit). Requires 0 <= dt_min <= dt_max.
template <ssm_scalar T>
struct tree_ssm_options {
  bool dt_softplus = true;                        //!< apply softplus to dt + dt_bias
  T dt_min = T(0);                                //!< lower clamp of dt'
  T dt_max = std::numeric_limits<T>::infinity();  //!< upper clamp of dt'
};

//! Sizes of one tree SSM problem (derived from the views by validation).
struct tree_ssm_shape {
  std::int64_t nodes = 0;    //!< N
  std::int64_t heads = 0;    //!< H
  std::int64_t headdim = 0;  //!< P
  std::int64_t groups = 0;   //!< G (B and C groups; H is a multiple of G)
  std::int64_t dstate = 0;   //!< S
  //! Heads per group.
  SPECDEC_HD constexpr std::int64_t heads_per_group() const noexcept { return groups > 0 ? heads / groups : 0; }
};

namespace detail {

//! Numerically safe softplus: never exponentiates a positive number, so a
//! huge dt gives dt' == dt instead of inf.
template <class T>
SPECDEC_HD T ssm_softplus(T v) noexcept {
  using std::exp;
  using std::log1p;
  const T pos = v > T(0) ? v : T(0);
  const T neg_abs = v > T(0) ? -v : v;
  return pos + log1p(exp(neg_abs));
}

//! silu(v) = v / (1 + exp(-v)), written so neither branch overflows.
template <class T>
SPECDEC_HD T ssm_silu(T v) noexcept {
  using std::exp;
  if (v >= T(0)) return v / (T(1) + exp(-v));
  const T e = exp(v);
  return v * e / (T(1) + e);
}

//! dt' of one (node, head) from the raw dt and the bias.
template <class T>
SPECDEC_HD T ssm_dt_effective(T raw, T bias, const tree_ssm_options<T>& opt) noexcept {
  T v = raw + bias;
  if (opt.dt_softplus) v = ssm_softplus(v);
  if (v < opt.dt_min) v = opt.dt_min;
  if (v > opt.dt_max) v = opt.dt_max;
  return v;
}

//! Per-step log-decay a = dt' * A, floored where exp() is already 0 in T
//! (-128 for float, -1024 for double). The floor changes no decay factor,
//! but keeps A_tree finite, so the dual form's ancestor differences
//! A_tree[i] - A_tree[j] never become inf - inf (NaN) for huge dt.
template <class T>
SPECDEC_HD T ssm_log_decay(T dt_eff, T a) noexcept {
  constexpr T floor = sizeof(T) == 4 ? T(-128) : T(-1024);
  const T v = dt_eff * a;
  return v < floor ? floor : v;
}

//! dt' on vectors of vec_ops type S: softplus (when enabled), then the
//! clamp to [dt_min, dt_max]; the host twin of ssm_dt_effective.
template <class S, class T>
typename S::vec ssm_dt_transform(typename S::vec v, const tree_ssm_options<T>& opt) noexcept {
  if (opt.dt_softplus) v = S::softplus(v);
  const auto lo = S::splat(opt.dt_min), hi = S::splat(opt.dt_max);
  v = S::select(S::less(v, lo), lo, v);
  return S::select(S::less(hi, v), hi, v);
}

//! dt' of one (node, head) on the host (the one-lane ssm_dt_transform).
template <class T>
T ssm_dt_host(T raw, T bias, const tree_ssm_options<T>& opt) noexcept {
  return ssm_dt_transform<vec_ops<T, false>>(raw + bias, opt);
}

//! dt' of one head for all n nodes into the contiguous `out`, from
//! raw[i * stride] + bias: one gather, then softplus and clamp on vectors.
template <class T>
void ssm_dt_column(const T* raw, std::int64_t stride, T bias, const tree_ssm_options<T>& opt, T* out,
                   std::int64_t n) noexcept {
  using S = vec_ops<T>;
  for (std::int64_t i = 0; i < n; ++i) out[i] = raw[i * stride] + bias;
  const std::int64_t full = n - n % S::lanes;
  for (std::int64_t i = 0; i < full; i += S::lanes) S::store(out + i, ssm_dt_transform<S>(S::load(out + i), opt));
  for (std::int64_t i = full; i < n; ++i) out[i] = ssm_dt_transform<vec_ops<T, false>>(out[i], opt);
}

//! True when every entry of the view is finite (absent views are). Rows
//! with a unit innermost stride are tested as integers on vectors
//! (row_finite, no early exit: one cheap read pass); other layouts
//! entry by entry.
template <class V>
inline bool ssm_view_finite(const V& v) noexcept {
  if (v.data == nullptr) return true;
  constexpr int r = V::rank;
  for (int d = 0; d < r; ++d)
    if (v.extent[d] == 0) return true;
  // A view without gaps in any dimension order (row-major, column-major:
  // e.g. a conv weight stored [W][channels] seen as [channels, W]) is one
  // contiguous row. Dimensions taken by increasing stride.
  int order[r];
  for (int d = 0; d < r; ++d) order[d] = d;
  std::sort(order, order + r, [&](int a, int b) { return v.stride[a] < v.stride[b]; });
  std::int64_t packed = 1;
  bool is_packed = true;
  for (const int d : order) {
    is_packed = is_packed && (v.extent[d] == 1 || v.stride[d] == packed);
    packed *= v.extent[d];
  }
  if (is_packed) return row_finite(v.data, packed);
  const std::int64_t inner = v.extent[r - 1];
  // Short rows (e.g. [channels, W] weights seen through a gap): entry by
  // entry, which beats a vector pass per row.
  const bool unit = v.stride[r - 1] == 1 && inner >= 16;
  auto row_ok = [&](const auto* p) {
    if (unit) return row_finite(p, inner);
    bool fine = true;
    for (std::int64_t k = 0; k < inner; ++k) fine &= row_finite(p + k * v.stride[r - 1], 1);
    return fine;
  };
  bool ok = true;
  if constexpr (r == 1) {
    ok = row_ok(v.data);
  } else if constexpr (r == 2) {
    for (std::int64_t a = 0; a < v.extent[0]; ++a) ok &= row_ok(v.data + a * v.stride[0]);
  } else if constexpr (r == 3) {
    for (std::int64_t a = 0; a < v.extent[0]; ++a)
      for (std::int64_t b = 0; b < v.extent[1]; ++b) ok &= row_ok(v.data + a * v.stride[0] + b * v.stride[1]);
  } else {
    for (std::int64_t a = 0; a < v.extent[0]; ++a)
      for (std::int64_t b = 0; b < v.extent[1]; ++b)
        for (std::int64_t c = 0; c < v.extent[2]; ++c)
          ok &= row_ok(v.data + a * v.stride[0] + b * v.stride[1] + c * v.stride[2]);
  }
  return ok;
}

template <class V>
constexpr bool ssm_view_nonnegative_strides(const V& v) noexcept {
  for (int d = 0; d < V::rank; ++d)
    if (v.stride[d] < 0 || v.extent[d] < 0) return false;
  return true;
}

}  // namespace detail

//! D of head h at channel p (0 when absent; per-head D when its extent is 1).
template <ssm_scalar T>
SPECDEC_HD T tree_ssm_d(const tree_ssm_inputs<T>& in, std::int64_t h, std::int64_t p) noexcept {
  if (in.D.data == nullptr) return T(0);
  return in.D(h, in.D.extent[1] == 1 ? 0 : p);
}

//! Checks the shapes of `in` against each other (not the values) and fills
//! `shape`. O(1). Returns size_mismatch / empty_input / invalid_argument.
template <ssm_scalar T>
constexpr status validate_tree_ssm_shapes(const tree_ssm_inputs<T>& in, tree_ssm_shape& shape) noexcept {
  if (in.x.data == nullptr || in.dt.data == nullptr || in.A.data == nullptr || in.B.data == nullptr ||
      in.C.data == nullptr)
    return make_status(status_code::invalid_argument, "x, dt, A, B and C are required");
  const bool strides_ok = detail::ssm_view_nonnegative_strides(in.x) && detail::ssm_view_nonnegative_strides(in.dt) &&
                          detail::ssm_view_nonnegative_strides(in.A) && detail::ssm_view_nonnegative_strides(in.B) &&
                          detail::ssm_view_nonnegative_strides(in.C) && detail::ssm_view_nonnegative_strides(in.D) &&
                          detail::ssm_view_nonnegative_strides(in.dt_bias) &&
                          detail::ssm_view_nonnegative_strides(in.z) && detail::ssm_view_nonnegative_strides(in.h0);
  if (!strides_ok) return make_status(status_code::invalid_argument, "negative extent or stride in an SSM view");
  tree_ssm_shape s;
  s.nodes = in.x.extent[0];
  s.heads = in.x.extent[1];
  s.headdim = in.x.extent[2];
  s.groups = in.B.extent[1];
  s.dstate = in.B.extent[2];
  if (s.nodes == 0) return make_status(status_code::empty_input, "tree SSM input has no nodes");
  if (s.heads == 0 || s.headdim == 0 || s.groups == 0 || s.dstate == 0)
    return make_status(status_code::empty_input, "heads, headdim, groups and dstate must be positive");
  if (s.heads % s.groups != 0) return make_status(status_code::invalid_argument, "heads must be a multiple of groups");
  if (in.dt.extent[0] != s.nodes || in.dt.extent[1] != s.heads)
    return make_status(status_code::size_mismatch, "dt must be [N, heads]");
  if (in.A.extent[0] != s.heads) return make_status(status_code::size_mismatch, "A must be [heads]");
  if (in.B.extent[0] != s.nodes) return make_status(status_code::size_mismatch, "B must be [N, groups, dstate]");
  if (in.C.extent[0] != s.nodes || in.C.extent[1] != s.groups || in.C.extent[2] != s.dstate)
    return make_status(status_code::size_mismatch, "C must have the shape of B");
  if (in.D.data != nullptr && (in.D.extent[0] != s.heads || (in.D.extent[1] != 1 && in.D.extent[1] != s.headdim)))
    return make_status(status_code::size_mismatch, "D must be [heads, headdim] or [heads, 1]");
  if (in.dt_bias.data != nullptr && in.dt_bias.extent[0] != s.heads)
    return make_status(status_code::size_mismatch, "dt_bias must be [heads]");
  if (in.z.data != nullptr && (in.z.extent[0] != s.nodes || in.z.extent[1] != s.heads || in.z.extent[2] != s.headdim))
    return make_status(status_code::size_mismatch, "z must have the shape of x");
  if (in.h0.data != nullptr &&
      (in.h0.extent[0] != s.heads || in.h0.extent[1] != s.headdim || in.h0.extent[2] != s.dstate))
    return make_status(status_code::size_mismatch, "h0 must be [heads, headdim, dstate]");
  shape = s;
  return status::success();
}

//! Checks shapes, options (0 <= dt_min <= dt_max, no NaN), A <= 0 and that
//! every input value is finite; no tree check. O(input size), no allocation.
//! Fills `shape` on success.
template <ssm_scalar T>
status validate_tree_ssm_values(const tree_ssm_inputs<T>& in, const tree_ssm_options<T>& opt,
                                tree_ssm_shape& shape) noexcept {
  tree_ssm_shape s;
  SPECDEC_TRY(validate_tree_ssm_shapes(in, s));
  if (!(opt.dt_min >= T(0)) || !(opt.dt_max >= opt.dt_min))
    return make_status(status_code::invalid_argument, "dt limits must satisfy 0 <= dt_min <= dt_max");
  for (std::int64_t h = 0; h < s.heads; ++h) {
    if (!std::isfinite(in.A(h))) return make_status(status_code::non_finite, "A is not finite", h);
    if (in.A(h) > T(0)) return make_status(status_code::invalid_argument, "A must be <= 0 (a decay)", h);
  }
  if (!detail::ssm_view_finite(in.dt)) return make_status(status_code::non_finite, "dt has a NaN or infinity");
  if (!detail::ssm_view_finite(in.dt_bias))
    return make_status(status_code::non_finite, "dt_bias has a NaN or infinity");
  if (!detail::ssm_view_finite(in.x)) return make_status(status_code::non_finite, "x has a NaN or infinity");
  if (!detail::ssm_view_finite(in.B)) return make_status(status_code::non_finite, "B has a NaN or infinity");
  if (!detail::ssm_view_finite(in.C)) return make_status(status_code::non_finite, "C has a NaN or infinity");
  if (!detail::ssm_view_finite(in.D)) return make_status(status_code::non_finite, "D has a NaN or infinity");
  if (!detail::ssm_view_finite(in.z)) return make_status(status_code::non_finite, "z has a NaN or infinity");
  if (!detail::ssm_view_finite(in.h0)) return make_status(status_code::non_finite, "h0 has a NaN or infinity");
  shape = s;
  return status::success();
}

//! Full check of a tree SSM call: `validate_tree_ssm_values` plus a
//! topological parent array (parent[i] < i, root 0) with one entry per node.
template <ssm_scalar T>
status validate_tree_ssm(std::span<const node_id> parent, const tree_ssm_inputs<T>& in, const tree_ssm_options<T>& opt,
                         tree_ssm_shape& shape) noexcept {
  tree_ssm_shape s;
  SPECDEC_TRY(validate_tree_ssm_shapes(in, s));
  if (static_cast<std::int64_t>(parent.size()) != s.nodes)
    return make_status(status_code::size_mismatch, "parent must have one entry per node");
  SPECDEC_TRY(validate_topological_parents(parent));
  return validate_tree_ssm_values(in, opt, shape);
}

//! Checks an output view y of shape [N, heads, headdim].
template <class T>
constexpr status validate_tree_ssm_output(const view3d<T>& y, const tree_ssm_shape& s) noexcept {
  if (y.data == nullptr) return make_status(status_code::invalid_argument, "y is required");
  if (y.extent[0] != s.nodes || y.extent[1] != s.heads || y.extent[2] != s.headdim)
    return make_status(status_code::size_mismatch, "y must be [N, heads, headdim]");
  if (!detail::ssm_view_nonnegative_strides(y))
    return make_status(status_code::invalid_argument, "negative stride in y");
  return status::success();
}

//! Checks an optional per-node state view [N, heads, headdim, dstate].
template <class T>
constexpr status validate_tree_ssm_states(const view4d<T>& st, const tree_ssm_shape& s) noexcept {
  if (st.data == nullptr) return status::success();
  if (st.extent[0] != s.nodes || st.extent[1] != s.heads || st.extent[2] != s.headdim || st.extent[3] != s.dstate)
    return make_status(status_code::size_mismatch, "states must be [N, heads, headdim, dstate]");
  if (!detail::ssm_view_nonnegative_strides(st))
    return make_status(status_code::invalid_argument, "negative stride in states");
  return status::success();
}

}  // namespace specdec
