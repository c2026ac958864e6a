//! \file
//! One way to carve caller-provided scratch memory, in bytes, with one
//! alignment, on host and device.
//!
//! Every entry point that needs scratch follows the same pattern:
//!   - `X_workspace_size(params) -> std::size_t` bytes;
//!   - `X_can_implement(params) -> status` (host checks, no device access);
//!   - `X(params, workspace, workspace_bytes[, stream]) -> status`.
//! The size function and the run function both call one `carve` routine on a
//! workspace_carver: with a null base it only counts, with a real base it
//! hands out aligned pointers. The two can therefore never disagree.
#pragma once

#include <cstddef>
#include <cstdint>

#include "specdec/core/config.hpp"

namespace specdec {

//! Alignment of every slice carved from a workspace (bytes). 256 covers
//! vector loads, cache lines and the CUDA allocators' own guarantee, so a
//! workspace from cudaMalloc or std::aligned_alloc(256, ...) always fits.
inline constexpr std::size_t workspace_alignment = 256;

//! `n` rounded up to a multiple of `a` (a power of two).
SPECDEC_HD constexpr std::size_t align_up(std::size_t n, std::size_t a = workspace_alignment) noexcept {
  return (n + a - 1) & ~(a - 1);
}

//! Hands out aligned, typed slices of one byte buffer in order. With a null
//! base it counts bytes only (sizing); take() then returns nullptr.
//! overflowed() reports a buffer too small for what was taken; slices past
//! the end are returned as nullptr, never as out-of-bounds pointers.
class workspace_carver {
 public:
  SPECDEC_HD constexpr workspace_carver() noexcept = default;
  //! A carver over `bytes` bytes at `base` (null base: count only).
  SPECDEC_HD constexpr workspace_carver(void* base, std::size_t bytes) noexcept
      : base_(static_cast<unsigned char*>(base)), capacity_(bytes) {}

  //! A slice of `count` objects of T, aligned to workspace_alignment.
  template <class T>
  SPECDEC_HD constexpr T* take(std::size_t count) noexcept {
    const std::size_t begin = used_;
    const std::size_t bytes = align_up(count * sizeof(T));
    used_ = begin + bytes;
    if (base_ == nullptr || used_ > capacity_) return nullptr;
    return reinterpret_cast<T*>(base_ + begin);
  }

  //! Bytes taken so far (a multiple of workspace_alignment).
  [[nodiscard]] SPECDEC_HD constexpr std::size_t bytes_used() const noexcept { return used_; }
  //! Whether more was taken than the buffer holds (never true when sizing).
  [[nodiscard]] SPECDEC_HD constexpr bool overflowed() const noexcept { return base_ != nullptr && used_ > capacity_; }
  //! Whether the base pointer is aligned to workspace_alignment.
  [[nodiscard]] SPECDEC_HD bool base_aligned() const noexcept {
    return reinterpret_cast<std::uintptr_t>(base_) % workspace_alignment == 0;
  }

 private:
  unsigned char* base_ = nullptr;
  std::size_t capacity_ = 0;
  std::size_t used_ = 0;
};

//! Extra bytes a host entry point adds to its workspace size so that it
//! accepts a buffer at any address (a std::vector<std::byte>, say): it
//! carves from the buffer's first aligned byte, as unaligned_carver does.
inline constexpr std::size_t unaligned_workspace_slack = workspace_alignment - 1;

//! A carver over the aligned part of `bytes` bytes at `base`, which may have
//! any alignment. A null base gives a counting carver. Pair it with a size of
//! bytes_used() + unaligned_workspace_slack.
SPECDEC_HD workspace_carver unaligned_carver(void* base, std::size_t bytes) noexcept {
  if (base == nullptr) return workspace_carver{};
  const std::size_t mis = reinterpret_cast<std::uintptr_t>(base) % workspace_alignment;
  const std::size_t skip = mis == 0 ? 0 : workspace_alignment - mis;
  if (skip > bytes) return workspace_carver{base, 0};  // too small for even one aligned byte
  return workspace_carver{static_cast<unsigned char*>(base) + skip, bytes - skip};
}

}  // namespace specdec
