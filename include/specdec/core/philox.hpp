//! \file
//! Philox4x32-10 (Salmon et al., SC'11): a counter-based generator that
//! gives the same bits on host and device, so a CPU run and a GPU run of the
//! same round draw identical numbers.
#pragma once

#include <cstdint>

#include "specdec/core/config.hpp"

namespace specdec {

//! Four 32-bit words: a counter or a generator output.
struct philox_block {
  std::uint32_t v[4];  //!< the four words
};

namespace detail {
SPECDEC_HD constexpr void mulhilo32(std::uint32_t a, std::uint32_t b, std::uint32_t& hi, std::uint32_t& lo) noexcept {
  const std::uint64_t p = static_cast<std::uint64_t>(a) * b;
  hi = static_cast<std::uint32_t>(p >> 32);
  lo = static_cast<std::uint32_t>(p);
}
}  // namespace detail

//! Philox4x32 with 10 rounds: 128-bit counter, 64-bit key, 128 bits out.
//! Matches the Random123 reference (and curand's Philox4_32_10) bit for bit.
SPECDEC_HD constexpr philox_block philox4x32_10(philox_block ctr, std::uint32_t key0, std::uint32_t key1) noexcept {
  constexpr std::uint32_t M0 = 0xD2511F53u, M1 = 0xCD9E8D57u;
  constexpr std::uint32_t W0 = 0x9E3779B9u, W1 = 0xBB67AE85u;
  for (int r = 0; r < 10; ++r) {
    std::uint32_t hi0 = 0, lo0 = 0, hi1 = 0, lo1 = 0;
    detail::mulhilo32(M0, ctr.v[0], hi0, lo0);
    detail::mulhilo32(M1, ctr.v[2], hi1, lo1);
    ctr = philox_block{{hi1 ^ ctr.v[1] ^ key0, lo1, hi0 ^ ctr.v[3] ^ key1, lo0}};
    key0 += W0;
    key1 += W1;
  }
  return ctr;
}

//! 32 random bits to a float uniform in [0, 1): the top 24 bits, so every
//! value is exactly representable and 1.0f is never produced.
SPECDEC_HD constexpr float bits_to_uniform_float(std::uint32_t x) noexcept {
  return static_cast<float>(x >> 8) * (1.0f / 16777216.0f);
}

//! 64 random bits to a double uniform in [0, 1) (top 53 bits).
SPECDEC_HD constexpr double bits_to_uniform_double(std::uint32_t hi, std::uint32_t lo) noexcept {
  const std::uint64_t x = (static_cast<std::uint64_t>(hi) << 32) | lo;
  return static_cast<double>(x >> 11) * (1.0 / 9007199254740992.0);
}

//! Where a random number is used: the key of every draw in specdec.
//! The Philox key is the 64-bit seed; the counter is
//! (draw / 4, node, round, request) and lane draw % 4 is used, so draws
//! 0..3 of one node share one Philox call. A result depends only on these
//! five numbers, never on batch order, thread count or device.
struct rng_stream {
  std::uint64_t seed = 0;     //!< Philox key: one per generation (or per user seed)
  std::uint32_t request = 0;  //!< request id within the batch (counter word 3)
  std::uint32_t round = 0;    //!< speculation round (counter word 2)

  //! Raw 32 bits of draw `draw` at node `node`.
  SPECDEC_HD constexpr std::uint32_t bits(std::uint32_t node, std::uint32_t draw) const noexcept {
    const philox_block out = philox4x32_10(philox_block{{draw >> 2, node, round, request}},
                                           static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32));
    return out.v[draw & 3u];
  }
  //! Float uniform in [0, 1) for (node, draw).
  SPECDEC_HD constexpr float uniform(std::uint32_t node, std::uint32_t draw) const noexcept {
    return bits_to_uniform_float(bits(node, draw));
  }
  //! The 53-bit uniform in [0, 1) of a node's inverse-CDF draw (draw 0 of
  //! the verification contract): lanes 0 and 1 of counter (2^32 - 1, node,
  //! round, request), a counter no `bits`/`uniform` draw uses (their first
  //! word is draw / 4 < 2^30), so it is independent of every float draw.
  SPECDEC_HD constexpr double uniform53(std::uint32_t node) const noexcept {
    const philox_block out = philox4x32_10(philox_block{{0xFFFFFFFFu, node, round, request}},
                                           static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32));
    return bits_to_uniform_double(out.v[0], out.v[1]);
  }
  //! Double uniform in [0, 1) for (node, draw); uses lanes 2*(draw%2) and
  //! 2*(draw%2)+1 of counter (draw / 2, node, round, request), so it is a
  //! separate stream from `uniform` only in precision, not independence:
  //! do not mix float and double draws with the same (node, draw).
  SPECDEC_HD constexpr double uniform_double(std::uint32_t node, std::uint32_t draw) const noexcept {
    const philox_block out = philox4x32_10(philox_block{{draw >> 1, node, round, request}},
                                           static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32));
    const std::uint32_t lane = (draw & 1u) * 2u;
    return bits_to_uniform_double(out.v[lane], out.v[lane + 1]);
  }
};

//! What a stream of uniforms is for. Drafting and verification of the same
//! (seed, request, round) must never share uniforms: a child sampled with
//! the same number that later decides its acceptance makes the acceptance
//! test depend on the draft, and the output is no longer exact.
enum class rng_purpose : std::uint32_t {
  verify = 0,  //!< the verifier's draws (and the CUDA verification kernels')
  draft = 1,   //!< tree builders that sample children
};

//! The stream of `purpose` for the same (seed, request, round): verify is
//! the stream itself; other purposes use another Philox key (the seed mixed
//! with an odd constant times the purpose), so their draws are independent
//! of the verifier's. Callers may therefore hand one rng_stream to both the
//! builder and the verifier.
SPECDEC_HD constexpr rng_stream for_purpose(rng_stream s, rng_purpose purpose) noexcept {
  s.seed ^= static_cast<std::uint64_t>(purpose) * 0x9E3779B97F4A7C15ull;
  return s;
}

//! Convenience: the float uniform for (seed, request, round, node, draw).
SPECDEC_HD constexpr float philox_uniform(std::uint64_t seed, std::uint32_t request, std::uint32_t round,
                                          std::uint32_t node, std::uint32_t draw) noexcept {
  return rng_stream{seed, request, round}.uniform(node, draw);
}

}  // namespace specdec
