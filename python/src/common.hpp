// Shared helpers of the nanobind module: array aliases, spans over arrays,
// the status -> Python exception bridge, and a reusable host workspace.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "specdec/cache/kv_layout.hpp"
#include "specdec/core/rows_view.hpp"
#include "specdec/core/status.hpp"
#include "specdec/core/view.hpp"
#include "specdec/sample/uniforms.hpp"
#include "specdec/tree/batch.hpp"
#include "specdec/verify/verify_params.hpp"

namespace specdec::python {

namespace nb = nanobind;

//! 1-D contiguous host arrays. Inputs may be converted (a list, another
//! dtype); outputs are declared noconvert at the binding so that the caller's
//! buffer itself is written, never a temporary copy.
template <class T>
using in1 = nb::ndarray<const T, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
template <class T>
using out1 = nb::ndarray<T, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
//! Strided host arrays of a fixed rank (strides in elements, any sign >= 0).
template <class T, int R>
using in_nd = nb::ndarray<const T, nb::ndim<R>, nb::device::cpu>;
template <class T, int R>
using out_nd = nb::ndarray<T, nb::ndim<R>, nb::device::cpu>;

//! What a failed specdec::status becomes in Python (specdec.Error, a
//! ValueError): "code_name: message (index i)".
struct error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

inline void check(const status& s) {
  if (s.ok()) return;
  std::string msg = status_code_name(s.code());
  msg += ": ";
  msg += s.message();
  if (s.index() >= 0) msg += " (index " + std::to_string(s.index()) + ")";
  throw error(msg);
}

inline void require(bool ok, status_code code, const char* message) {
  if (!ok) check(make_status(code, message));
}

template <class A>
auto span_of(const A& a) {
  using T = std::remove_reference_t<decltype(*a.data())>;
  return std::span<T>(a.data(), a.size());
}

//! A strided_view over an ndarray of the same rank (strides in elements).
template <int R, class A>
auto view_of(const A& a) {
  using T = std::remove_reference_t<decltype(*a.data())>;
  strided_view<T, R> v;
  v.data = a.data();
  for (int d = 0; d < R; ++d) {
    v.extent[d] = static_cast<std::int64_t>(a.shape(static_cast<std::size_t>(d)));
    v.stride[d] = static_cast<std::int64_t>(a.stride(static_cast<std::size_t>(d)));
  }
  return v;
}

//! Probability rows on the host in any element type the verifiers read
//! (float32, float16, bfloat16), any strides; rows_of checks the type.
using rows_in = nb::ndarray<nb::ro, nb::ndim<2>, nb::device::cpu>;

//! The rows of a 2-D array (host or device) whose dtype is float32, float16
//! or bfloat16, read in place; invalid_argument naming `name` otherwise.
template <class A>
rows_view rows_of(const A& a, const char* name) {
  const nb::dlpack::dtype d = a.dtype();
  rows_view v;
  if (d == nb::dtype<float>())
    v.dtype = row_dtype::f32;
  else if (d.bits == 16 && d.lanes == 1 && d.code == static_cast<std::uint8_t>(nb::dlpack::dtype_code::Float))
    v.dtype = row_dtype::f16;
  else if (d.bits == 16 && d.lanes == 1 && d.code == static_cast<std::uint8_t>(nb::dlpack::dtype_code::Bfloat))
    v.dtype = row_dtype::bf16;
  else
    throw error(std::string("invalid_argument: ") + name + " must be float32, float16 or bfloat16");
  v.data = a.data();
  for (int k = 0; k < 2; ++k) {
    v.extent[k] = static_cast<std::int64_t>(a.shape(static_cast<std::size_t>(k)));
    v.stride[k] = static_cast<std::int64_t>(a.stride(static_cast<std::size_t>(k)));
  }
  return v;
}

//! A cache tensor's axes read through a layout string with one letter per
//! axis: S (request row, or physical page when paged), L (layer, optional),
//! H (kv head), T (token position, or slot in a page), D (head dim). Host
//! and device arrays alike (only shapes and strides are read).
template <class T, class A>
kv_tensor<T> describe_kv(const A& a, const std::string& layout, std::int64_t& positions, std::int64_t& rows) {
  require(layout.size() == a.ndim(), status_code::size_mismatch, "layout needs one letter per tensor axis");
  std::int64_t ext[5] = {1, 1, 1, 1, 1}, str[5] = {0, 0, 0, 0, 0};
  bool seen[5] = {false, false, false, false, false};
  const std::string letters = "SLHTD";
  for (std::size_t d = 0; d < layout.size(); ++d) {
    const auto k = letters.find(layout[d]);
    require(k != std::string::npos && !seen[k], status_code::invalid_argument,
            "layout letters are S, L, H, T, D, each at most once");
    seen[k] = true;
    ext[k] = static_cast<std::int64_t>(a.shape(d));
    str[k] = static_cast<std::int64_t>(a.stride(d));
    require(str[k] >= 0, status_code::invalid_argument, "negative strides are not supported");
  }
  require(seen[0] && seen[2] && seen[3] && seen[4], status_code::invalid_argument, "layout needs S, H, T and D");
  // Elements addressable from data: one past the largest offset.
  std::int64_t span = 1;
  for (int k = 0; k < 5; ++k) span += (ext[k] - 1) * str[k];
  for (int k = 0; k < 5; ++k)
    if (ext[k] == 0) span = 0;
  positions = ext[3];
  rows = ext[0];
  return kv_tensor<T>{static_cast<T*>(a.data()), span, ext[1], ext[2], ext[4], str[0], str[1], str[2], str[3], str[4]};
}

//! The caller's uniforms (a dense nodes x draws float64 array, layout
//! u[node * draws + draw]) as verification and drafting read them; none
//! when not given.
inline std::optional<caller_uniforms> uniforms_of(const std::optional<in_nd<double, 2>>& u) {
  if (!u) return std::nullopt;
  require(u->shape(1) == 0 || u->stride(1) == 1, status_code::invalid_argument, "uniforms rows must be contiguous");
  require(u->shape(0) <= 1 || static_cast<std::size_t>(u->stride(0)) == u->shape(1), status_code::invalid_argument,
          "uniforms must be a dense nodes x draws array");
  require(u->shape(0) <= static_cast<std::size_t>(INT32_MAX) && u->shape(1) <= static_cast<std::size_t>(INT32_MAX),
          status_code::invalid_argument, "uniforms too large");
  return caller_uniforms{u->data(), static_cast<std::int32_t>(u->shape(0)), static_cast<std::int32_t>(u->shape(1))};
}

//! Whether a 2-D array (host or device) is dense with exactly rows x cols
//! elements.
template <class A>
bool dense_rows(const A& a, std::size_t rows, std::size_t cols) {
  return a.shape(0) == rows && a.shape(1) == cols && (cols <= 1 || a.stride(1) == 1) &&
         (rows <= 1 || static_cast<std::size_t>(a.stride(0)) == cols);
}

//! The Philox key (seed, request, round) as verify_params, the rest default:
//! what chain_coins and the chain counters read.
inline verify_params key_params(std::uint64_t seed, std::uint32_t request, std::uint32_t round) {
  verify_params vp;
  vp.seed = seed;
  vp.request = request;
  vp.round = round;
  return vp;
}

//! One verify_params per request: `base` (the bound VerifyParams: the
//! typical-acceptance settings and the normalization tolerance) with each
//! request's mode, seed, request and round from the arrays.
inline std::vector<verify_params> params_batch(const verify_params& base, const in1<std::int32_t>& modes,
                                               const in1<std::uint64_t>& seeds, const in1<std::uint32_t>& requests,
                                               const in1<std::uint32_t>& rounds, std::size_t R) {
  require(modes.size() == R && seeds.size() == R && requests.size() == R && rounds.size() == R,
          status_code::size_mismatch, "modes, seeds, requests and rounds need one entry per request");
  std::vector<verify_params> vps(R, base);
  for (std::size_t r = 0; r < R; ++r) {
    vps[r].mode = static_cast<verify_mode>(modes.data()[r]);
    vps[r].seed = seeds.data()[r];
    vps[r].request = requests.data()[r];
    vps[r].round = rounds.data()[r];
  }
  return vps;
}

//! The caller's uniforms of a batched call (host or device): a dense
//! rows x draws float64 array with 1 .. 2^31-1 draws and at least
//! `min_rows` rows; none when not given.
template <class A>
std::optional<caller_uniforms> batch_uniforms(const std::optional<A>& u, std::size_t min_rows) {
  if (!u) return std::nullopt;
  require(u->shape(1) > 0 && u->shape(1) <= static_cast<std::size_t>(INT32_MAX) && u->stride(1) == 1 &&
              (u->shape(0) <= 1 || static_cast<std::size_t>(u->stride(0)) == u->shape(1)),
          status_code::invalid_argument, "uniforms must be a dense nodes x draws array");
  require(u->shape(0) >= min_rows, status_code::size_mismatch, "uniforms need one row per node (slot)");
  return caller_uniforms{u->data(), static_cast<std::int32_t>(std::min<std::size_t>(u->shape(0), INT32_MAX)),
                         static_cast<std::int32_t>(u->shape(1))};
}

//! The batched mask build's arguments (host or device arrays alike) after
//! the shape checks: short outputs are buffer_too_small, a short input
//! size_mismatch.
template <class Word, class Parents, class Offsets, class CacheLen, class Masks, class Positions, class Status>
tree_masks_params<Word> tree_batch_of(const Parents& parents, const Offsets& offsets,
                                      const std::optional<CacheLen>& cache_len, const Masks& masks,
                                      const std::optional<Positions>& positions, const Status& tree_status,
                                      std::int32_t max_nodes) {
  require(offsets.size() >= 1, status_code::invalid_argument, "offsets needs R + 1 entries");
  const std::size_t R = offsets.size() - 1, n = parents.size();
  require(n <= static_cast<std::size_t>(INT32_MAX) && R <= static_cast<std::size_t>(INT32_MAX),
          status_code::invalid_argument, "batch too large");
  require(masks.shape(1) <= 1 || masks.stride(1) == 1, status_code::invalid_argument,
          "mask rows must be contiguous (last stride 1)");
  // A row stride below the row length (a broadcast view: stride 0) would
  // make the kernel write rows past the array.
  require(masks.shape(0) <= 1 || masks.stride(0) >= static_cast<std::int64_t>(masks.shape(1)),
          status_code::invalid_argument, "mask rows must not overlap (row stride >= row length)");
  require(tree_status.size() >= R, status_code::buffer_too_small, "tree_status needs R entries");
  require(!cache_len || cache_len->size() >= R, status_code::size_mismatch, "cache_len needs R entries");
  require(masks.shape(0) >= n && (!positions || positions->size() >= n), status_code::buffer_too_small,
          "masks and positions need one row per node");
  require(static_cast<std::int64_t>(masks.shape(1)) >= mask_words_per_row<Word>(max_nodes),
          status_code::buffer_too_small, "mask rows need ceil(max_nodes / W) words");
  tree_masks_params<Word> b;
  b.parents = parents.data();
  b.offsets = offsets.data();
  b.cache_len = cache_len ? cache_len->data() : nullptr;
  b.masks = masks.data();
  b.positions = positions ? positions->data() : nullptr;
  b.request_status = tree_status.data();
  b.num_requests = static_cast<std::int32_t>(R);
  b.max_nodes = max_nodes;
  b.capacity_nodes = static_cast<std::int32_t>(n);
  b.row_stride_words =
      masks.shape(0) <= 1 ? static_cast<std::int64_t>(masks.shape(1)) : static_cast<std::int64_t>(masks.stride(0));
  return b;
}

//! Scratch kept between calls (per thread): the binding allocates only when
//! a call needs more than any earlier one. 256-byte aligned like
//! core/workspace.hpp asks.
inline std::span<std::byte> scratch(std::size_t bytes) {
  struct alignas(256) block {
    std::byte b[256];
  };
  thread_local std::vector<block> buf;
  const std::size_t blocks = (bytes + 255) / 256;
  if (buf.size() < blocks) buf.resize(blocks);
  return {reinterpret_cast<std::byte*>(buf.data()), bytes};
}

void bind_tree(nb::module_& m);
void bind_verify(nb::module_& m);
void bind_draft(nb::module_& m);
void bind_cache(nb::module_& m);
void bind_ssm(nb::module_& m);
void bind_plan(nb::module_& m);
void bind_loop(nb::module_& m);
void bind_interop(nb::module_& m);
void bind_interop_sglang(nb::module_& m);

}  // namespace specdec::python
