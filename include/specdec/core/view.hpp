//! \file
//! Non-owning strided views over caller memory, 1 to 4 dimensions.
//! Trivially copyable and usable in device code, so the same view can be
//! passed to a host function or copied into a kernel's params struct.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "specdec/core/config.hpp"

namespace specdec {

//! A pointer plus `Rank` extents and strides (in elements, may be any
//! non-negative value, including 0 for broadcasting). Element (i0, i1, ...)
//! lives at `data[i0 * stride[0] + i1 * stride[1] + ...]`. No bounds checks
//! on access (use `in_bounds` or validate the extents up front).
template <class T, int Rank>
struct strided_view {
  static_assert(Rank >= 1 && Rank <= 4, "strided_view supports 1 to 4 dimensions");
  using element_type = T;            //!< the element type (const for read-only views)
  using index_type = std::int64_t;   //!< extents and strides are 64-bit
  static constexpr int rank = Rank;  //!< number of dimensions

  T* data = nullptr;             //!< first element (null: an absent optional input)
  index_type extent[Rank] = {};  //!< size of each dimension
  index_type stride[Rank] = {};  //!< element distance between neighbours in each dimension (0 broadcasts)

  //! Number of elements the view addresses (product of extents).
  SPECDEC_HD constexpr index_type size() const noexcept {
    index_type n = 1;
    for (int d = 0; d < Rank; ++d) n *= extent[d];
    return n;
  }
  //! Whether the view has no elements.
  SPECDEC_HD constexpr bool empty() const noexcept { return size() == 0; }

  //! Offset (in elements) of the element at the given indices.
  template <class... I>
  SPECDEC_HD constexpr index_type offset(I... idx) const noexcept {
    static_assert(sizeof...(I) == Rank, "wrong number of indices");
    const index_type i[Rank] = {static_cast<index_type>(idx)...};
    index_type o = 0;
    for (int d = 0; d < Rank; ++d) o += i[d] * stride[d];
    return o;
  }

  template <class... I>
  //! The element at (idx...): data[sum of idx[d] * stride[d]]; no bounds check.
  SPECDEC_HD constexpr T& operator()(I... idx) const noexcept {
    return data[offset(idx...)];
  }

  //! True when every index is within its extent.
  template <class... I>
  SPECDEC_HD constexpr bool in_bounds(I... idx) const noexcept {
    static_assert(sizeof...(I) == Rank, "wrong number of indices");
    const index_type i[Rank] = {static_cast<index_type>(idx)...};
    for (int d = 0; d < Rank; ++d)
      if (i[d] < 0 || i[d] >= extent[d]) return false;
    return true;
  }

  //! One past the largest offset any element has (0 when empty): the number
  //! of elements the underlying buffer must hold.
  SPECDEC_HD constexpr index_type required_span() const noexcept {
    if (empty()) return 0;
    index_type last = 0;
    for (int d = 0; d < Rank; ++d) last += (extent[d] - 1) * stride[d];
    return last + 1;
  }

  //! True when strides are those of a dense row-major layout.
  SPECDEC_HD constexpr bool is_row_major_contiguous() const noexcept {
    index_type expect = 1;
    for (int d = Rank - 1; d >= 0; --d) {
      if (extent[d] > 1 && stride[d] != expect) return false;
      expect *= extent[d];
    }
    return true;
  }

  //! The same memory viewed as const.
  SPECDEC_HD constexpr strided_view<const T, Rank> as_const() const noexcept {
    strided_view<const T, Rank> v;
    v.data = data;
    for (int d = 0; d < Rank; ++d) {
      v.extent[d] = extent[d];
      v.stride[d] = stride[d];
    }
    return v;
  }

  //! A mutable view converts implicitly to the const view of the same
  //! memory, so it can be passed wherever a function reads through a view.
  //! (A template, so that nvcc does not flag the const view's own instance
  //! as a conversion to itself.)
  template <class U = T, class = std::enable_if_t<std::is_same_v<U, T> && !std::is_const_v<U>>>
  SPECDEC_HD constexpr operator strided_view<const U, Rank>() const noexcept {
    return as_const();
  }

  //! Drops the first dimension by fixing its index.
  template <int R = Rank, class = std::enable_if_t<(R > 1)>>
  SPECDEC_HD constexpr strided_view<T, Rank - 1> slice(index_type i0) const noexcept {
    strided_view<T, Rank - 1> v;
    v.data = data + i0 * stride[0];
    for (int d = 1; d < Rank; ++d) {
      v.extent[d - 1] = extent[d];
      v.stride[d - 1] = stride[d];
    }
    return v;
  }
};

//! A dense row-major view: strides follow from the extents.
template <class T, class... E>
SPECDEC_HD constexpr strided_view<T, static_cast<int>(sizeof...(E))> make_view(T* data, E... extents) noexcept {
  constexpr int R = static_cast<int>(sizeof...(E));
  strided_view<T, R> v;
  v.data = data;
  const std::int64_t e[R] = {static_cast<std::int64_t>(extents)...};
  std::int64_t s = 1;
  for (int d = R - 1; d >= 0; --d) {
    v.extent[d] = e[d];
    v.stride[d] = s;
    s *= e[d];
  }
  return v;
}

//! A view with explicit extents and strides (both given as arrays of Rank).
template <class T, int Rank>
SPECDEC_HD constexpr strided_view<T, Rank> make_strided_view(T* data, const std::int64_t (&extents)[Rank],
                                                             const std::int64_t (&strides)[Rank]) noexcept {
  strided_view<T, Rank> v;
  v.data = data;
  for (int d = 0; d < Rank; ++d) {
    v.extent[d] = extents[d];
    v.stride[d] = strides[d];
  }
  return v;
}

template <class T>
//! A rank-1 strided view.
using view1d = strided_view<T, 1>;
template <class T>
//! A rank-2 strided view.
using view2d = strided_view<T, 2>;
template <class T>
//! A rank-3 strided view.
using view3d = strided_view<T, 3>;
template <class T>
//! A rank-4 strided view.
using view4d = strided_view<T, 4>;

static_assert(std::is_trivially_copyable_v<strided_view<float, 2>>);
static_assert(std::is_trivially_copyable_v<strided_view<const int, 4>>);

}  // namespace specdec
