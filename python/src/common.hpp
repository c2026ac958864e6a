// Shared helpers of the nanobind module: array aliases, spans over arrays,
// the status -> Python exception bridge, and a reusable host workspace.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "specdec/cache/kv_layout.hpp"
#include "specdec/core/status.hpp"
#include "specdec/core/view.hpp"
#include "specdec/verify/policy.hpp"

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
void bind_cache(nb::module_& m);
void bind_ssm(nb::module_& m);
void bind_plan(nb::module_& m);
void bind_loop(nb::module_& m);
void bind_interop(nb::module_& m);
void bind_sglang(nb::module_& m);
#if defined(SPECDEC_PYTHON_HAS_CUDA)
void bind_cuda(nb::module_& m);
#endif

}  // namespace specdec::python
