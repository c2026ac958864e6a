//! \file
//! Index arithmetic of the CUDA KV commit (cuda/cache.cuh), kept in plain
//! host/device functions so host tests can replay the kernel's schedule
//! thread by thread and compare it with commit_kv.
#pragma once

#include <cstdint>

#include "specdec/cache/kv_layout.hpp"
#include "specdec/core/config.hpp"

namespace specdec::detail {

//! How one (layer, head) entry of head_dim elements is cut into copy
//! units: `units` units of `unit` bytes, unit u at byte offset
//! (u >> shift) * group_step + (u & ((1 << shift) - 1)) * unit from the
//! entry's first element (see kv_unit_offset).
struct kv_copy_plan {
  std::int64_t unit = 1;        //!< bytes per unit: 16, 8, 4, 2 or 1
  std::int64_t units = 0;       //!< units per entry
  std::int64_t group_step = 0;  //!< bytes between consecutive groups of 2^shift units
  std::int32_t shift = 0;       //!< log2(units per group)
};

//! The copy plan of a tensor. The unit is the largest of 16, 8, 4, 2, 1
//! bytes dividing the base address and every byte stride (and, when
//! head_dim is contiguous, the entry size; otherwise the element size), so
//! every unit address is aligned to it: the device dereferences units as
//! 16/8/4/2/1-byte words and a misaligned one would fault. Contiguous
//! head_dim: one group holding the whole entry. Strided head_dim: one group
//! per element, of elem_bytes / unit units (more than one only when the
//! caller's pointer or strides are less aligned than the element size).
SPECDEC_HD constexpr kv_copy_plan kv_plan_row(std::uint64_t base_address, std::int64_t elem_bytes,
                                              const kv_tensor<void>& t) noexcept {
  const bool contiguous = t.stride_dim == 1;
  const std::uint64_t bits =
      base_address | static_cast<std::uint64_t>((contiguous ? t.head_dim : 1) * elem_bytes) |
      static_cast<std::uint64_t>(t.stride_seq * elem_bytes) | static_cast<std::uint64_t>(t.stride_layer * elem_bytes) |
      static_cast<std::uint64_t>(t.stride_head * elem_bytes) | static_cast<std::uint64_t>(t.stride_pos * elem_bytes) |
      static_cast<std::uint64_t>(t.stride_dim * elem_bytes);
  kv_copy_plan p;
  p.unit = (bits & 15u) == 0 ? 16 : (bits & 7u) == 0 ? 8 : (bits & 3u) == 0 ? 4 : (bits & 1u) == 0 ? 2 : 1;
  if (contiguous) {
    p.units = t.head_dim * elem_bytes / p.unit;
    p.group_step = p.unit;
    p.shift = 0;
  } else {
    // elem_bytes is a power of two and a multiple of the unit.
    while ((p.unit << p.shift) < elem_bytes) ++p.shift;
    p.units = t.head_dim << p.shift;
    p.group_step = t.stride_dim * elem_bytes;
  }
  return p;
}

//! Byte offset of unit u of an entry (see kv_copy_plan).
SPECDEC_HD constexpr std::int64_t kv_unit_offset(const kv_copy_plan& p, std::int64_t u) noexcept {
  return (u >> p.shift) * p.group_step + (u & ((std::int64_t{1} << p.shift) - 1)) * p.unit;
}

//! Entries per wave: as many whole entries as `capacity` staged units
//! hold, at least one (an entry larger than the capacity is copied straight
//! through: its source and destination are different positions).
SPECDEC_HD constexpr std::int64_t kv_wave_entries(std::int64_t units, std::int64_t capacity) noexcept {
  return units <= capacity ? capacity / units : 1;
}

//! First entry that is not already in place. Shifts keep[k] - (c + k) never
//! decrease, so the in-place entries form a prefix.
SPECDEC_HD constexpr std::int64_t kv_first_moved(const position_id* keep, std::int64_t count, std::int64_t c) noexcept {
  std::int64_t k0 = 0;
  while (k0 < count && keep[k0] == c + k0) ++k0;
  return k0;
}

//! Entry and unit of staged unit g of the wave starting at entry w0
//! (g < capacity, so 32-bit division suffices; 64-bit division is slow on GPUs).
SPECDEC_HD constexpr void kv_wave_unit(std::int64_t g, std::int64_t units, std::int64_t w0, std::int64_t& entry,
                                       std::int64_t& unit) noexcept {
  const auto gu = static_cast<std::uint32_t>(g);
  const auto uu = static_cast<std::uint32_t>(units);
  entry = w0 + gu / uu;
  unit = gu % uu;
}

}  // namespace specdec::detail
