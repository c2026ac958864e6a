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

//! How a block cuts the moves of one (tensor, layer, request) into waves
//! (cuda/cache.cuh): every head of the layer moves the same `moved` entries
//! of `units` units each, and one wave stages at most `capacity` units.
//! Heads go in groups of `heads_per_group`, and each group's entries in
//! waves of `entries_per_wave`: all entries of a head in one wave (then as
//! many heads as fit), else as many entries of one head as fit, else (an
//! entry larger than the capacity) one entry, copied straight through: its
//! source and destination are different positions.
struct kv_wave_shape {
  std::int64_t heads_per_group = 1;
  std::int64_t entries_per_wave = 1;
};

//! The wave shape for `heads` heads moving `moved` >= 1 entries each.
SPECDEC_HD constexpr kv_wave_shape kv_plan_waves(std::int64_t units, std::int64_t heads, std::int64_t moved,
                                                 std::int64_t capacity) noexcept {
  kv_wave_shape w;
  if (units > capacity) return w;
  if (moved * units <= capacity) {
    w.entries_per_wave = moved;
    const std::int64_t fit = capacity / (moved * units);
    w.heads_per_group = fit < heads ? fit : heads;
  } else {
    w.entries_per_wave = capacity / units;
  }
  return w;
}

//! Head, entry and unit of staged unit g of the wave that moves entries
//! [w0, w0 + entries) of heads h0, h0 + 1, ... (g < capacity, so 32-bit
//! division suffices; 64-bit division is slow on GPUs). Consecutive g walk
//! the units of an entry, then the entries, then the heads.
SPECDEC_HD constexpr void kv_wave_item(std::int64_t g, std::int64_t units, std::int64_t entries, std::int64_t w0,
                                       std::int64_t h0, std::int64_t& head, std::int64_t& entry,
                                       std::int64_t& unit) noexcept {
  const auto gu = static_cast<std::uint32_t>(g);
  const auto uu = static_cast<std::uint32_t>(units);
  const auto per_head = static_cast<std::uint32_t>(entries) * uu;
  const std::uint32_t rest = gu % per_head;
  head = h0 + gu / per_head;
  entry = w0 + rest / uu;
  unit = rest % uu;
}

//! First entry that is not already in place. Shifts keep[k] - (c + k) never
//! decrease, so the in-place entries form a prefix.
SPECDEC_HD constexpr std::int64_t kv_first_moved(const position_id* keep, std::int64_t count, std::int64_t c) noexcept {
  std::int64_t k0 = 0;
  while (k0 < count && keep[k0] == c + k0) ++k0;
  return k0;
}

}  // namespace specdec::detail
