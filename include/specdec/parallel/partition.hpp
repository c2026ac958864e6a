//! \file
//! Vocabulary partitions for the sharded verifier and top-k
//! (parallel/sharded_verify.hpp, parallel/sharded_topk.hpp): rank r holds
//! the columns [bounds[r], bounds[r + 1]). validate_vocab_partition checks
//! one; detail::own_ranges says which ranges a participant owns.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "specdec/core/status.hpp"
#include "specdec/sample/order.hpp"

namespace specdec {

//! Checks a vocabulary partition: at least one range, bounds[0] == 0,
//! non-decreasing (empty ranges allowed), vocabulary bounds.back() in
//! [1, INT32_MAX]. invalid_argument otherwise, with the bad index.
inline status validate_vocab_partition(std::span<const std::int64_t> bounds) noexcept {
  if (bounds.size() < 2) return make_status(status_code::invalid_argument, "a partition needs at least one range");
  if (bounds[0] != 0) return make_status(status_code::invalid_argument, "a partition starts at column 0", 0);
  for (std::size_t i = 1; i < bounds.size(); ++i)
    if (bounds[i] < bounds[i - 1])
      return make_status(status_code::invalid_argument, "partition bounds must be non-decreasing",
                         static_cast<std::int64_t>(i));
  if (bounds.back() <= 0 || bounds.back() > INT32_MAX)
    return make_status(status_code::invalid_argument, "the vocabulary (last bound) must be in [1, INT32_MAX]");
  return status::success();
}

namespace detail {

//! The ranges one participant owns: rank r owns range r when there are as
//! many ranks as ranges; a single rank owns them all (the partitioned
//! single-process path).
struct owned_ranges {
  std::int32_t first = 0, last = 0;
  std::int64_t base = 0, width = 0;
  std::int64_t tiles = 0;  //!< tile sums over the owned ranges
};

inline status own_ranges(std::span<const std::int64_t> bounds, int rank, int size, owned_ranges& o) noexcept {
  SPECDEC_TRY(validate_vocab_partition(bounds));
  const auto R = static_cast<std::int64_t>(bounds.size()) - 1;
  if (size != 1 && size != R)
    return make_status(status_code::size_mismatch, "the partition needs one range per rank (or a single rank)");
  if (rank < 0 || rank >= size) return make_status(status_code::invalid_argument, "rank outside [0, size)", rank);
  o.first = size == 1 ? 0 : rank;
  o.last = size == 1 ? static_cast<std::int32_t>(R) : rank + 1;
  o.base = bounds[static_cast<std::size_t>(o.first)];
  o.width = bounds[static_cast<std::size_t>(o.last)] - o.base;
  o.tiles = 0;
  for (std::int32_t k = o.first; k < o.last; ++k)
    o.tiles += sum_tile_count(bounds[static_cast<std::size_t>(k) + 1] - bounds[static_cast<std::size_t>(k)]);
  return status::success();
}

}  // namespace detail

}  // namespace specdec
