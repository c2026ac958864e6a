//! \file
//! Status codes returned by every low-level entry point.
#pragma once

#include <cstdint>
#include <string_view>

#include "specdec/core/config.hpp"

namespace specdec {

//! What went wrong. Values are stable (they may be stored or sent across a
//! host/device boundary as a plain int).
enum class status_code : std::int32_t {
  ok = 0,
  invalid_argument = 1,       //!< a parameter is outside its documented domain
  size_mismatch = 2,          //!< two sizes that must agree do not
  out_of_range = 3,           //!< an index or id is outside [0, bound)
  buffer_too_small = 4,       //!< a caller-provided buffer cannot hold the result
  empty_input = 5,            //!< an input that must be non-empty is empty
  parent_out_of_range = 6,    //!< a parent id is < -1 or >= the node count
  not_topological = 7,        //!< parent[i] >= i where a topological order is required
  cycle = 8,                  //!< following parents never reaches a root
  no_root = 9,                //!< no node has parent -1
  multiple_roots = 10,        //!< more than one node has parent -1
  token_out_of_range = 11,    //!< a token id is < 0 or >= the vocabulary size
  non_finite = 12,            //!< NaN or infinity where a finite number is required
  negative_probability = 13,  //!< a probability below zero
  zero_mass = 14,             //!< a distribution whose total mass is zero
  not_sorted = 15,            //!< a list that must be strictly increasing is not
  unsupported = 16,           //!< a valid request this build or device cannot serve
  cuda_error = 17,            //!< the CUDA runtime reported an error
  internal_error = 18,        //!< a broken invariant inside specdec (a bug: please report)
};

//! Short stable name of a code ("ok", "size_mismatch", ...).
SPECDEC_HD constexpr const char* status_code_name(status_code c) noexcept {
  switch (c) {
    case status_code::ok:
      return "ok";
    case status_code::invalid_argument:
      return "invalid_argument";
    case status_code::size_mismatch:
      return "size_mismatch";
    case status_code::out_of_range:
      return "out_of_range";
    case status_code::buffer_too_small:
      return "buffer_too_small";
    case status_code::empty_input:
      return "empty_input";
    case status_code::parent_out_of_range:
      return "parent_out_of_range";
    case status_code::not_topological:
      return "not_topological";
    case status_code::cycle:
      return "cycle";
    case status_code::no_root:
      return "no_root";
    case status_code::multiple_roots:
      return "multiple_roots";
    case status_code::token_out_of_range:
      return "token_out_of_range";
    case status_code::non_finite:
      return "non_finite";
    case status_code::negative_probability:
      return "negative_probability";
    case status_code::zero_mass:
      return "zero_mass";
    case status_code::not_sorted:
      return "not_sorted";
    case status_code::unsupported:
      return "unsupported";
    case status_code::cuda_error:
      return "cuda_error";
    case status_code::internal_error:
      return "internal_error";
  }
  return "unknown";
}

//! Result of a low-level call: a code, a static message, and the offending
//! index (node, row, token...) or -1. Trivially copyable and usable on the
//! device; the message always points to a string literal, so a status never
//! allocates and never dangles.
class [[nodiscard]] status {
 public:
  constexpr status() noexcept = default;
  //! A status with a code, a static message and an optional index (-1: none).
  SPECDEC_HD constexpr status(status_code code, const char* message, std::int64_t index = -1) noexcept
      : code_(code), message_(message), index_(index) {}

  //! The success value.
  SPECDEC_HD static constexpr status success() noexcept { return {}; }

  //! Whether the call succeeded.
  SPECDEC_HD constexpr bool ok() const noexcept { return code_ == status_code::ok; }
  //! Same as ok().
  SPECDEC_HD constexpr explicit operator bool() const noexcept { return ok(); }
  //! The status code.
  SPECDEC_HD constexpr status_code code() const noexcept { return code_; }
  //! A static, human-readable message (never null).
  SPECDEC_HD constexpr const char* message() const noexcept { return message_; }
  //! Offending element (node id, row, token...), or -1 when not applicable.
  SPECDEC_HD constexpr std::int64_t index() const noexcept { return index_; }

  //! Codes compare equal regardless of message, so tests can write
  //! `CHECK(s == status_code::cycle)`.
  SPECDEC_HD friend constexpr bool operator==(const status& s, status_code c) noexcept { return s.code_ == c; }

 private:
  status_code code_ = status_code::ok;
  const char* message_ = "ok";
  std::int64_t index_ = -1;
};

//! Shorthand for building an error status.
SPECDEC_HD constexpr status make_status(status_code code, const char* message, std::int64_t index = -1) noexcept {
  return status(code, message, index);
}

}  // namespace specdec

//! Returns the status of `expr` from the enclosing function if it is an error.
#define SPECDEC_TRY(expr)                                      \
  do {                                                         \
    ::specdec::status specdec_try_status_ = (expr);            \
    if (!specdec_try_status_.ok()) return specdec_try_status_; \
  } while (0)
