//! \file
//! How a row of logits becomes a probability row: sampling_params and
//! their checks. Light (no row code), so device code and the kernels'
//! parameter structs can include it.
#pragma once

#include <cstdint>
#include <type_traits>

#include "specdec/core/config.hpp"
#include "specdec/core/status.hpp"

namespace specdec {

//! How a row of logits becomes a probability row. Filters apply in this
//! order: temperature, then the candidate set {min-p survivors} limited to
//! the first `top_k` in the tie order, then the top-p nucleus of those
//! candidates (renormalized), then renormalization.
//! - temperature: 0 means greedy (a one-hot row at the argmax, lowest id on
//!   ties; the other filters are then irrelevant). Must be finite and >= 0.
//! - top_k: 0 (or >= vocab) disables; must be >= 0.
//! - top_p: keep the shortest prefix of the tie order whose mass is >= top_p
//!   of the candidates' mass; 1 disables; must be in (0, 1].
//! - min_p: keep tokens with probability >= min_p * max probability; 0
//!   disables; must be in [0, 1].
struct sampling_params {
  float temperature = 1.0f;  //!< softmax temperature; 0 = greedy; finite, >= 0
  std::int32_t top_k = 0;    //!< keep at most this many candidates; 0 disables; >= 0
  float top_p = 1.0f;        //!< nucleus mass in (0, 1]; 1 disables
  float min_p = 0.0f;        //!< relative probability floor in [0, 1]; 0 disables

  //! True when the row becomes one-hot (temperature 0).
  SPECDEC_HD constexpr bool is_greedy() const noexcept { return temperature == 0.0f; }
};

static_assert(std::is_trivially_copyable_v<sampling_params>);

//! Checks the fields of `params` against their documented domains
//! (invalid_argument otherwise). O(1).
SPECDEC_HD constexpr status validate_sampling_params(const sampling_params& params) noexcept {
  // (x - x) == (x - x) is false exactly for NaN and +-inf.
  if (!((params.temperature - params.temperature) == (params.temperature - params.temperature)) ||
      params.temperature < 0.0f)
    return make_status(status_code::invalid_argument, "temperature must be finite and >= 0");
  if (params.top_k < 0) return make_status(status_code::invalid_argument, "top_k must be >= 0");
  if (!(params.top_p > 0.0f && params.top_p <= 1.0f))
    return make_status(status_code::invalid_argument, "top_p must be in (0, 1]");
  if (!(params.min_p >= 0.0f && params.min_p <= 1.0f))
    return make_status(status_code::invalid_argument, "min_p must be in [0, 1]");
  return status::success();
}

}  // namespace specdec
