//! \file
//! Where verification's and drafting's uniforms come from: the
//! uniform_source concept and the two sources specdec ships, keyed Philox
//! streams (philox_uniforms) and a caller's buffer (caller_uniforms). The
//! verification walk (verify/walk.hpp) draws through them, and draft/
//! reads the caller's drafting uniforms in the same layout.
#pragma once

#include <concepts>
#include <cstdint>

#include "specdec/core/config.hpp"
#include "specdec/core/philox.hpp"

namespace specdec {

//! A source of the walk's uniforms: `u(node, draw)` in [0, 1), draw 0 the
//! node's inverse-CDF draw, draw 1 + j the acceptance test of its j-th
//! child. Any value outside [0, 1) (NaN included) makes the walk return
//! invalid_argument.
template <class U>
concept uniform_source = requires(const U& u, std::uint32_t node, std::uint32_t draw) {
  { u(node, draw) } -> std::same_as<double>;
};

//! The keyed Philox streams of verify_params.hpp: draw 0 is the 53-bit
//! rng_stream::uniform53(node), draw d >= 1 the 24-bit rng_stream::uniform.
struct philox_uniforms {
  rng_stream rng;  //!< the request's keyed Philox stream
  //! Uniform `draw` of `node`: uniform53(node) for draw 0, else uniform(node, draw).
  SPECDEC_HD double operator()(std::uint32_t node, std::uint32_t draw) const noexcept {
    return draw == 0 ? rng.uniform53(node) : static_cast<double>(rng.uniform(node, draw));
  }
};

//! Caller-supplied uniforms of one request: u[node * draws_per_node + draw]
//! (node-major; draw 0 the inverse-CDF draw, draw 1 + j the j-th child's
//! acceptance test). draws_per_node must exceed the largest child count; a
//! draw past it reads as -1 (invalid_argument from the walk).
struct caller_uniforms {
  const double* u;              //!< nodes x draws_per_node uniforms, node-major
  std::int32_t nodes;           //!< nodes covered by u
  std::int32_t draws_per_node;  //!< uniforms per node
  //! u[node * draws_per_node + draw], or -1 when node or draw is out of range.
  SPECDEC_HD double operator()(std::uint32_t node, std::uint32_t draw) const noexcept {
    if (node >= static_cast<std::uint32_t>(nodes) || draw >= static_cast<std::uint32_t>(draws_per_node)) return -1.0;
    return u[static_cast<std::int64_t>(node) * draws_per_node + draw];
  }
};

static_assert(uniform_source<philox_uniforms> && uniform_source<caller_uniforms>);

}  // namespace specdec
