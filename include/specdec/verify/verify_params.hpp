//! \file
//! Verification modes, per-request parameters and results, shared by the
//! host verifiers (tree_verify.hpp, batch_verify.hpp) and the CUDA kernels.
//!
//! Random-number contract (the CUDA kernel reproduces it bit for bit): every
//! uniform is `rng_stream{seed, request, round}.uniform(node, draw)`, where
//! `node` is the id (inside the request's tree) of the node whose children
//! are being verified and
//! - draw 0 is the sample emitted at that node (correction token, bonus
//!   token, naive-matching sample, typical-acceptance emission);
//! - draw 1 + j is the acceptance test of its j-th child in visit order
//!   (ascending node id, counting every child tried, rejected or not). In
//!   the block and traversal modes this test runs when the child's whole
//!   subtree has been rejected (leaves first), and a child whose weight is
//!   zero is rejected without a draw.
//! Greedy mode draws nothing.
#pragma once

#include <cstdint>
#include <type_traits>

#include "specdec/core/config.hpp"
#include "specdec/core/status.hpp"
#include "specdec/tree/token_tree.hpp"

namespace specdec {

//! How a token tree (or chain) is verified. The caller picks the mode that
//! matches how its drafts were produced; only then is the output distributed
//! exactly as the target model (`lossless`).
enum class verify_mode : std::int32_t {
  //! Children sampled i.i.d. from q_u: SpecInfer multi-step speculative
  //! sampling (Leviathan/Chen speculative sampling for a chain). Lossless.
  sampled_iid = 0,
  //! Children sampled without replacement from q_u (Gumbel-top-k, stored in
  //! draw order): recursive rejection sampling, q renormalized after each
  //! rejection. Lossless.
  sampled_without_replacement = 1,
  //! Children chosen deterministically (top-k of q, a greedy drafter...):
  //! the one-hot-q rule, q is not read. Lossless.
  deterministic = 2,
  //! Accept the child equal to argmax p_u (lowest id on ties); emits the
  //! argmax. Token-identical to greedy decoding of the target.
  greedy = 3,
  //! Sample y from p_u; move to the child carrying y, else emit y. Lossless
  //! for any drafts (accepts less than the sampled modes).
  naive_matching = 4,
  //! LOSSY opt-in (Medusa typical acceptance): a child is accepted when
  //! p_u(x) > min(epsilon, delta * exp(-H(p_u))); the longest accepted path
  //! wins. Output is NOT distributed as the target model.
  typical_lossy = 5,
  //! Block verification (Sun et al., ICLR 2025) of a chain whose drafts
  //! were sampled from q: the drafted block is verified jointly, from its
  //! end back to the context, and the accepted prefix is never shorter in
  //! expectation than sampled_iid's. Needs a chain (at most one child per
  //! node; a branching tree is invalid_argument). Token for token the same
  //! as `traversal` on that chain. Lossless.
  block = 6,
  //! Traversal verification (Weng et al., 2025) of a tree whose children
  //! were sampled i.i.d. from q_u: leaves to root, accepting whole root
  //! paths; never shorter in expectation than sampled_iid. Lossless.
  traversal = 7,
  //! Traversal verification of children sampled without replacement from
  //! q_u (stored in draw order), with q renormalized after each rejected
  //! child. Lossless.
  traversal_without_replacement = 8,
};

//! Number of verify_mode values: they are 0 .. verify_mode_count - 1. A new
//! mode raises it; tests/verify/test_modes.cpp then fails until every layer
//! docs/verify.md lists under "Adding a verification mode" handles it.
inline constexpr std::int32_t verify_mode_count = 9;

static_assert(static_cast<std::int32_t>(verify_mode::traversal_without_replacement) == verify_mode_count - 1,
              "verify_mode_count must follow the last verify_mode");

//! True for every mode whose output follows the target distribution
//! (given drafts produced as the mode requires).
SPECDEC_HD constexpr bool is_lossless(verify_mode m) noexcept { return m != verify_mode::typical_lossy; }

//! True when the mode reads the draft rows q.
SPECDEC_HD constexpr bool uses_draft_probs(verify_mode m) noexcept {
  return m == verify_mode::sampled_iid || m == verify_mode::sampled_without_replacement || m == verify_mode::block ||
         m == verify_mode::traversal || m == verify_mode::traversal_without_replacement;
}

//! True for the modes that verify from the leaves back to the root (block
//! and traversal verification).
SPECDEC_HD constexpr bool is_traversal(verify_mode m) noexcept {
  return m == verify_mode::block || m == verify_mode::traversal || m == verify_mode::traversal_without_replacement;
}

//! True for a value that names a mode.
SPECDEC_HD constexpr bool is_valid_mode(verify_mode m) noexcept {
  return static_cast<std::int32_t>(m) >= 0 && static_cast<std::int32_t>(m) < verify_mode_count;
}

//! True for the modes the CUDA verification kernel (cuda/verify.cuh) runs:
//! every valid mode (block and traversal since 0.4.0, through the same walk
//! as the host).
SPECDEC_HD constexpr bool runs_on_device(verify_mode m) noexcept { return is_valid_mode(m); }

//! Stable short name of a mode.
SPECDEC_HD constexpr const char* verify_mode_name(verify_mode m) noexcept {
  switch (m) {
    case verify_mode::sampled_iid:
      return "sampled_iid";
    case verify_mode::sampled_without_replacement:
      return "sampled_without_replacement";
    case verify_mode::deterministic:
      return "deterministic";
    case verify_mode::greedy:
      return "greedy";
    case verify_mode::naive_matching:
      return "naive_matching";
    case verify_mode::typical_lossy:
      return "typical_lossy";
    case verify_mode::block:
      return "block";
    case verify_mode::traversal:
      return "traversal";
    case verify_mode::traversal_without_replacement:
      return "traversal_without_replacement";
  }
  return "unknown";
}

//! Per-request verification settings. Trivially copyable (also used by the
//! kernels). `seed`, `request` and `round` key the Philox stream, so the
//! result of a request never depends on its position in a batch.
struct verify_params {
  verify_mode mode = verify_mode::sampled_iid;  //!< verification rule
  std::uint32_t request = 0;                    //!< request key of the Philox stream
  std::uint64_t seed = 0;                       //!< seed of the Philox stream
  std::uint32_t round = 0;                      //!< round key of the Philox stream
  //! typical_lossy only: the posterior threshold epsilon (> 0).
  float typical_epsilon = 0.09f;
  //! typical_lossy only: the entropy factor delta (> 0).
  float typical_delta = 0.3f;
  //! Sampled, block and traversal modes read p and q entries as
  //! probabilities without renormalizing the input rows (so a row is read
  //! once); each visited row's mass must be within this of 1
  //! (invalid_argument otherwise). Negative disables the check.
  float normalization_tolerance = 1e-3f;
};

static_assert(std::is_trivially_copyable_v<verify_params>);

//! Outcome of one request. The accepted path is node 0 followed by
//! `accepted` nodes ending at `last_node`; the emitted tokens are those
//! nodes' tokens (root excluded) followed by `next_token`.
struct verify_result {
  std::int32_t accepted = 0;           //!< accepted draft nodes (path length - 1)
  node_id last_node = 0;               //!< deepest accepted node (0 = root only)
  token_id next_token = -1;            //!< correction or bonus token, in [0, V)
  status_code code = status_code::ok;  //!< per-request outcome in batched calls
};

static_assert(std::is_trivially_copyable_v<verify_result>);

//! Checks mode and typical-acceptance parameters (invalid_argument).
SPECDEC_HD constexpr status validate_verify_params(const verify_params& vp) noexcept {
  if (!is_valid_mode(vp.mode)) return make_status(status_code::invalid_argument, "unknown verify_mode");
  if (vp.mode == verify_mode::typical_lossy) {
    if (!(vp.typical_epsilon > 0.0f && vp.typical_epsilon <= 1.0f))
      return make_status(status_code::invalid_argument, "typical_epsilon must be in (0, 1]");
    if (!(vp.typical_delta > 0.0f && vp.typical_delta < 3.0e38f))
      return make_status(status_code::invalid_argument, "typical_delta must be positive and finite");
  }
  if (vp.normalization_tolerance != vp.normalization_tolerance)
    return make_status(status_code::invalid_argument, "normalization_tolerance is NaN");
  return status::success();
}

}  // namespace specdec
