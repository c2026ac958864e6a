//! \file
//! Tree-masked causal depthwise conv1d (the short convolution in front of a
//! Mamba block's scan) and its conv-state commit. Node i's window of width W
//! is itself, then its parent, grandparent... and, once the root path runs
//! out, the newest columns of the conv state; never its DFS/storage
//! predecessors (those may be siblings on another branch):
//!   out[i][c] = bias[c] + sum_{k<W} w[c][k] * src(i, W-1-k)[c],
//!   src(i, m) = x[m-th ancestor of i] or state[c][len-1-(m-depth_i-1)].
//! Optional SiLU on the output, as in Mamba.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>

#include "specdec/core/detail/simd.hpp"
#include "specdec/core/status.hpp"
#include "specdec/core/view.hpp"
#include "specdec/core/workspace.hpp"
#include "specdec/ssm/tree_ssm_inputs.hpp"
#include "specdec/tree/paths.hpp"
#include "specdec/tree/token_tree.hpp"
#include "specdec/tree/validate.hpp"

namespace specdec {

//! Inputs of tree_conv1d. Channel-contiguous layouts are the natural ones
//! (x [N, channels] row-major), but any strides work.
template <ssm_scalar T>
struct tree_conv1d_inputs {
  view2d<const T> x;           //!< [N, channels]
  view2d<const T> weight;      //!< [channels, W]; weight(c, W-1) multiplies the node itself
  view1d<const T> bias{};      //!< [channels]; optional
  view2d<const T> conv_state;  //!< [channels, L], L >= W-1; newest token in column L-1
  bool silu = false;           //!< apply SiLU to the output (Mamba's activation)
};

namespace detail {

//! Shape-only checks (reads no element: usable on device views too).
template <class T>
constexpr status tree_conv1d_check_shapes(std::int64_t parent_size, const tree_conv1d_inputs<T>& in) noexcept {
  if (in.x.data == nullptr || in.weight.data == nullptr)
    return make_status(status_code::invalid_argument, "x and weight are required");
  const std::int64_t n = in.x.extent[0], ch = in.x.extent[1], w = in.weight.extent[1];
  if (n == 0 || ch == 0) return make_status(status_code::empty_input, "conv1d input has no nodes or channels");
  if (w < 1) return make_status(status_code::invalid_argument, "conv width must be >= 1");
  if (in.weight.extent[0] != ch) return make_status(status_code::size_mismatch, "weight must be [channels, W]");
  if (in.bias.data != nullptr && in.bias.extent[0] != ch)
    return make_status(status_code::size_mismatch, "bias must be [channels]");
  if (w > 1 && in.conv_state.data == nullptr)
    return make_status(status_code::invalid_argument, "conv_state is required when W > 1");
  if (in.conv_state.data != nullptr && (in.conv_state.extent[0] != ch || in.conv_state.extent[1] < w - 1))
    return make_status(status_code::size_mismatch, "conv_state must be [channels, L] with L >= W - 1");
  if (!ssm_view_nonnegative_strides(in.x) || !ssm_view_nonnegative_strides(in.weight) ||
      !ssm_view_nonnegative_strides(in.bias) || !ssm_view_nonnegative_strides(in.conv_state))
    return make_status(status_code::invalid_argument, "negative extent or stride in a conv1d view");
  if (parent_size != n) return make_status(status_code::size_mismatch, "parent must have one entry per node");
  return status::success();
}

//! Full host check: shapes, the tree, and that every value tree_conv1d
//! reads is finite: x, weight, bias and the newest W - 1 conv-state
//! columns (older columns are never read, so not checked). One vectorised
//! read pass, before anything is written.
template <class T>
status tree_conv1d_check(std::span<const node_id> parent, const tree_conv1d_inputs<T>& in) noexcept {
  SPECDEC_TRY(tree_conv1d_check_shapes(static_cast<std::int64_t>(parent.size()), in));
  SPECDEC_TRY(validate_topological_parents(parent));
  view2d<const T> used = in.conv_state;
  const std::int64_t w = in.weight.extent[1];
  if (used.data != nullptr) {
    const std::int64_t cols = w - 1 < used.extent[1] ? w - 1 : used.extent[1];
    used.data += (used.extent[1] - cols) * used.stride[1];
    used.extent[1] = cols;
  }
  if (!ssm_view_finite(in.x) || !ssm_view_finite(in.weight) || !ssm_view_finite(in.bias) || !ssm_view_finite(used))
    return make_status(status_code::non_finite, "conv1d input has a NaN or infinity");
  return status::success();
}

//! Largest conv width of the vectorised tree_conv1d path (stack tiles).
inline constexpr std::int64_t tree_conv1d_fast_width = 8;
//! Channels per tile of the vectorised path.
inline constexpr std::int64_t tree_conv1d_tile = 64;

//! Vectorised tree_conv1d for x and out with unit channel stride and
//! W <= tree_conv1d_fast_width: per tile of channels, every node sums W
//! rows of channels (its ancestors' x rows, then the newest conv-state
//! columns, times the weights by window position) and applies SiLU on
//! vectors. Weights, state columns and bias are read in place where they
//! are channel-contiguous (weight [W][channels] and a column-major state,
//! viewed as [channels, W] and [channels, L] with unit channel stride);
//! other layouts are gathered once per tile into stack rows, which at one
//! node costs more than the sums (768 channels, W = 4: 3.9 us in place,
//! 5.8 us gathered; bench_ssm). Inputs already validated.
template <class T>
void tree_conv1d_tiles(std::span<const node_id> parent, const tree_conv1d_inputs<T>& in, view2d<T> out) noexcept {
  using S = vec_ops<T>;
  constexpr std::int64_t tile = tree_conv1d_tile;
  const std::int64_t n = in.x.extent[0], ch = in.x.extent[1], w = in.weight.extent[1];
  const std::int64_t len = in.conv_state.data != nullptr ? in.conv_state.extent[1] : 0;
  const bool weight_rows = in.weight.stride[0] == 1, state_rows = in.conv_state.stride[0] == 1;
  const bool bias_row = in.bias.data != nullptr && in.bias.stride[0] == 1;
  T wt[tree_conv1d_fast_width][tile];
  T st[tree_conv1d_fast_width][tile];
  T bt[tile];
  const T* wrow[tree_conv1d_fast_width];  // wrow[m] multiplies the m-th ancestor (m = 0: the node itself)
  const T* srow[tree_conv1d_fast_width];  // srow[r]: the r-th newest state column
  const T* src[tree_conv1d_fast_width];
  for (std::int64_t c0 = 0; c0 < ch; c0 += tile) {
    const std::int64_t nc = ch - c0 < tile ? ch - c0 : tile;
    const std::int64_t full = nc - nc % S::lanes;
    for (std::int64_t m = 0; m < w; ++m) {
      if (weight_rows) {
        wrow[m] = in.weight.data + (w - 1 - m) * in.weight.stride[1] + c0;
      } else {
        for (std::int64_t c = 0; c < nc; ++c) wt[m][c] = in.weight(c0 + c, w - 1 - m);
        wrow[m] = wt[m];
      }
    }
    for (std::int64_t r = 0; r + 1 < w; ++r) {
      if (state_rows) {
        srow[r] = in.conv_state.data + (len - 1 - r) * in.conv_state.stride[1] + c0;
      } else {
        for (std::int64_t c = 0; c < nc; ++c) st[r][c] = in.conv_state(c0 + c, len - 1 - r);
        srow[r] = st[r];
      }
    }
    const T* brow = bias_row ? in.bias.data + c0 : bt;
    if (!bias_row)
      for (std::int64_t c = 0; c < nc; ++c) bt[c] = in.bias.data != nullptr ? in.bias(c0 + c) : T(0);
    for (std::int64_t i = 0; i < n; ++i) {
      // The W source rows of node i: its ancestors, then the newest state columns.
      node_id u = static_cast<node_id>(i);
      std::int64_t r = 0;
      for (std::int64_t m = 0; m < w; ++m) {
        src[m] = u >= 0 ? in.x.data + u * in.x.stride[0] + c0 : srow[r++];
        if (u >= 0) u = parent[static_cast<std::size_t>(u)];
      }
      T* dst = out.data + i * out.stride[0] + c0;
      for (std::int64_t c = 0; c < full; c += S::lanes) {
        auto acc = S::load(brow + c);
        for (std::int64_t m = 0; m < w; ++m) acc += S::load(wrow[m] + c) * S::load(src[m] + c);
        S::store(dst + c, in.silu ? S::silu(acc) : acc);
      }
      for (std::int64_t c = full; c < nc; ++c) {
        T acc = brow[c];
        for (std::int64_t m = 0; m < w; ++m) acc += wrow[m][c] * src[m][c];
        dst[c] = in.silu ? vec_ops<T, false>::silu(acc) : acc;
      }
    }
  }
}

}  // namespace detail

//! Bytes of workspace tree_conv1d needs: W node ids (one window), plus
//! unaligned_workspace_slack.
constexpr std::size_t tree_conv1d_workspace_size(std::int64_t width) noexcept {
  workspace_carver c;
  (void)c.take<node_id>(static_cast<std::size_t>(width > 0 ? width : 0));
  return c.bytes_used() + unaligned_workspace_slack;
}

//! Tree conv1d: out [N, channels]. Any topological order. The conv state
//! is read, not changed (commit it with tree_conv1d_commit_state after
//! verification). O(N * W * channels); no allocation; deterministic; out
//! must not overlap the inputs. Error contract: every status (shapes, tree,
//! workspace, non_finite for a NaN or infinity in x, weight, bias or the
//! newest W - 1 conv-state columns) is returned before anything is written.
//! Vectorised over channels when x and out have unit channel stride and
//! W <= 8 (SiLU on vectors: a few ulp from std::exp); other layouts take a
//! scalar path. Fastest at a few nodes when weight, bias and conv_state are
//! channel-contiguous too (weight stored [W][channels], the state
//! column-major: views with stride[0] == 1), which it reads in place;
//! row-major ones are gathered on every call.
template <ssm_scalar T>
status tree_conv1d(std::span<const node_id> parent, const tree_conv1d_inputs<T>& in, view2d<T> out,
                   std::span<std::byte> workspace) noexcept {
  SPECDEC_TRY(detail::tree_conv1d_check(parent, in));
  const std::int64_t n = in.x.extent[0], ch = in.x.extent[1], w = in.weight.extent[1];
  if (out.data == nullptr || out.extent[0] != n || out.extent[1] != ch)
    return make_status(status_code::size_mismatch, "out must be [N, channels]");
  if (!detail::ssm_view_nonnegative_strides(out))
    return make_status(status_code::invalid_argument, "negative stride in out");
  workspace_carver carver = unaligned_carver(workspace.data(), workspace.size());
  node_id* window = carver.take<node_id>(static_cast<std::size_t>(w));
  if (workspace.data() == nullptr || carver.overflowed())
    return make_status(status_code::buffer_too_small, "tree_conv1d: workspace too small");
  if (in.x.stride[1] == 1 && out.stride[1] == 1 && w <= detail::tree_conv1d_fast_width) {
    detail::tree_conv1d_tiles(parent, in, out);
    return status::success();
  }
  const std::int64_t len = in.conv_state.data != nullptr ? in.conv_state.extent[1] : 0;
  for (std::int64_t i = 0; i < n; ++i) {
    // window[m] = m-th ancestor of i (m = 0: itself), or -(r + 1) for the
    // r-th newest conv-state column once the root path is exhausted.
    node_id u = static_cast<node_id>(i);
    std::int64_t r = 0;
    for (std::int64_t m = 0; m < w; ++m) {
      if (u >= 0) {
        window[m] = u;
        u = parent[static_cast<std::size_t>(u)];
      } else {
        window[m] = static_cast<node_id>(-(r + 1));
        ++r;
      }
    }
    for (std::int64_t c = 0; c < ch; ++c) {
      T acc = in.bias.data != nullptr ? in.bias(c) : T(0);
      for (std::int64_t m = 0; m < w; ++m) {
        const node_id src = window[m];
        const T v = src >= 0 ? in.x(src, c) : in.conv_state(c, len - 1 - (-src - 1));
        acc += in.weight(c, w - 1 - m) * v;
      }
      out(i, c) = in.silu ? detail::vec_ops<T, false>::silu(acc) : acc;
    }
  }
  return status::success();
}

//! Conv-state commit: after accepting `path` (root first), the state holds
//! the newest L columns of [old state columns..., x[path[0]], ...,
//! x[path[len-1]]]. In place; `state` [channels, L] (any L >= 1, e.g. W-1
//! or W columns) must not overlap x. O(L * channels); no allocation. Block
//! copies for a packed [channels, L] state and for a column-major one (the
//! layout tree_conv1d reads in place); other layouts go channel by channel.
template <ssm_scalar T>
status tree_conv1d_commit_state(std::span<const node_id> parent, view2d<const T> x, std::span<const node_id> path,
                                view2d<T> state) noexcept {
  if (x.data == nullptr || state.data == nullptr)
    return make_status(status_code::invalid_argument, "x and state are required");
  if (static_cast<std::int64_t>(parent.size()) != x.extent[0])
    return make_status(status_code::size_mismatch, "parent must have one entry per node");
  if (state.extent[0] != x.extent[1]) return make_status(status_code::size_mismatch, "state must be [channels, L]");
  if (!detail::ssm_view_nonnegative_strides(x) || !detail::ssm_view_nonnegative_strides(state))
    return make_status(status_code::invalid_argument, "negative extent or stride");
  SPECDEC_TRY(validate_topological_parents(parent));
  SPECDEC_TRY(validate_root_path(parent, path));
  const std::int64_t len = state.extent[1], shift = static_cast<std::int64_t>(path.size());
  const std::int64_t ch = state.extent[0];
  if (state.stride[1] == 1 && state.stride[0] == len) {
    // A packed [channels, L] block: one move of the whole block by `shift`
    // entries keeps each channel's columns k < L - shift (they read k + shift
    // in the same channel); the newest columns then come from the x rows,
    // one column at a time, overwriting what the move brought in from the
    // next channel. With one node accepted, the common case, 3.9x faster
    // than the channel loop below at 288 channels and 6.5x at 5376 (medians
    // of bench_ssm BM_ssm_conv_commit).
    T* s = state.data;
    const std::int64_t keep = len > shift ? len - shift : 0;
    if (keep > 0) std::copy(s + shift, s + ch * len, s);  // forward copy: the destination starts first
    for (std::int64_t k = keep; k < len; ++k) {
      const node_id row = path[static_cast<std::size_t>(k + shift - len)];
      for (std::int64_t c = 0; c < ch; ++c) s[c * len + k] = x(row, c);
    }
    return status::success();
  }
  if (state.stride[0] == 1 && state.stride[1] >= ch && x.stride[1] == 1) {
    // Column-major (each column's channels contiguous, columns apart): the
    // kept columns move down one contiguous column at a time, ascending (a
    // column reads a later one, not yet overwritten), and the newest
    // columns are the x rows of the path.
    T* s = state.data;
    const std::int64_t cs = state.stride[1], keep = len > shift ? len - shift : 0;
    for (std::int64_t k = 0; k < keep; ++k) detail::copy_vectors(s + (k + shift) * cs, ch, s + k * cs);
    for (std::int64_t k = keep; k < len; ++k)
      detail::copy_vectors(x.data + path[static_cast<std::size_t>(k + shift - len)] * x.stride[0], ch, s + k * cs);
    return status::success();
  }
  for (std::int64_t c = 0; c < ch; ++c) {
    // Ascending columns: column k reads column k + shift (> k), not yet overwritten.
    for (std::int64_t k = 0; k < len; ++k) {
      const std::int64_t src = k + shift;
      state(c, k) = src < len ? state(c, src) : x(path[static_cast<std::size_t>(src - len)], c);
    }
  }
  return status::success();
}

}  // namespace specdec
