//! \file
//! rows_view: a 2-D view of probability rows whose element type is chosen
//! at run time (fp32, bf16 or fp16, core/float16.hpp). The verifiers take
//! their p and q rows as rows_view, so an engine hands over its bf16 or
//! fp16 rows as they are; every view2d of float, bfloat16 or float16
//! converts to it implicitly, so code written for fp32 rows is unchanged.
#pragma once

#include <cstdint>
#include <type_traits>

#include "specdec/core/config.hpp"
#include "specdec/core/float16.hpp"
#include "specdec/core/view.hpp"

namespace specdec {

//! Rows x columns of fp32, bf16 or fp16 values: element (i, j) at element
//! offset i * stride[0] + j * stride[1] of data. Non-owning, trivially
//! copyable. A default view is empty (an absent q).
struct rows_view {
  const void* data = nullptr;        //!< first element (null: absent)
  std::int64_t extent[2] = {0, 0};   //!< rows, columns
  std::int64_t stride[2] = {0, 0};   //!< elements between rows, between columns
  row_dtype dtype = row_dtype::f32;  //!< element type

  constexpr rows_view() noexcept = default;
  //! The rows of a typed view (const or not).
  template <class T>
  requires row_element<std::remove_const_t<T>> SPECDEC_HD constexpr rows_view(
      view2d<T> v) noexcept  // NOLINT(google-explicit-constructor): views convert
      : data(v.data),
        extent{v.extent[0], v.extent[1]},
        stride{v.stride[0], v.stride[1]},
        dtype(row_dtype_of<std::remove_const_t<T>>) {}

  //! Rows [begin, begin + count) (no checks).
  SPECDEC_HD rows_view rows(std::int64_t begin, std::int64_t count) const noexcept {
    rows_view r = *this;
    if (data != nullptr) r.data = static_cast<const char*>(data) + begin * stride[0] * row_dtype_bytes(dtype);
    r.extent[0] = count;
    return r;
  }
  //! The fp32 view when dtype is f32 (else an empty view).
  SPECDEC_HD view2d<const float> as_f32() const noexcept {
    if (dtype != row_dtype::f32) return {};
    view2d<const float> v;
    v.data = static_cast<const float*>(data);
    v.extent[0] = extent[0];
    v.extent[1] = extent[1];
    v.stride[0] = stride[0];
    v.stride[1] = stride[1];
    return v;
  }
};

static_assert(std::is_trivially_copyable_v<rows_view>);
static_assert(std::is_convertible_v<view2d<float>, rows_view> &&
              std::is_convertible_v<view2d<const bfloat16>, rows_view>);
static_assert(!std::is_convertible_v<view2d<const double>, rows_view>);

}  // namespace specdec
