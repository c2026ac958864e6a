//! \file
//! The bridge from how a tree was drafted to how it must be verified: the
//! one `verify_mode` (verify/verify_params.hpp) that is exact for a
//! drafted_tree. Verification modes are per request, so a tree whose
//! expanded nodes were drafted in different ways has no single exact mode.
#pragma once

#include <cstddef>

#include "specdec/core/status.hpp"
#include "specdec/draft/drafter.hpp"
#include "specdec/verify/verify_params.hpp"

namespace specdec {

//! The exact verification mode of one draft mode: deterministic ->
//! verify_mode::deterministic (one-hot q), iid -> sampled_iid (MSS),
//! without_replacement -> sampled_without_replacement (recursive rejection
//! sampling). `leaf` maps to deterministic (nothing is verified below a leaf).
constexpr verify_mode exact_verify_mode(draft_mode m) noexcept {
  switch (m) {
    case draft_mode::iid:
      return verify_mode::sampled_iid;
    case draft_mode::without_replacement:
      return verify_mode::sampled_without_replacement;
    case draft_mode::leaf:
    case draft_mode::deterministic:
      break;
  }
  return verify_mode::deterministic;
}

//! The single exact mode for a whole tree: every expanded node must share
//! one draft mode (a root-only tree gives deterministic). Greedy and naive
//! matching are also exact for any tree; this returns the mode that uses
//! the drafts best. Errors: invalid_argument (mixed modes, with the first
//! disagreeing node as index), size_mismatch (inconsistent drafted_tree). O(N).
inline status matching_verify_mode(const drafted_tree& t, verify_mode& out) noexcept {
  if (t.child_mode.size() != static_cast<std::size_t>(t.size()))
    return make_status(status_code::size_mismatch, "drafted_tree arrays disagree in size");
  draft_mode seen = draft_mode::leaf;
  for (std::size_t i = 0; i < t.child_mode.size(); ++i) {
    const draft_mode m = t.child_mode[i];
    if (m == draft_mode::leaf) continue;
    if (seen != draft_mode::leaf && m != seen)
      return make_status(status_code::invalid_argument, "tree mixes draft modes: no single exact verify_mode",
                         static_cast<std::int64_t>(i));
    seen = m;
  }
  out = exact_verify_mode(seen);
  return status::success();
}

//! The leaves-to-root mode for a whole tree: traversal (i.i.d. children;
//! block verification on a chain) or traversal_without_replacement.
//! Deterministic (top-k) children have no traversal mode: the result is
//! verify_mode::deterministic. Errors as matching_verify_mode. O(N).
inline status matching_traversal_mode(const drafted_tree& t, verify_mode& out) noexcept {
  verify_mode m = verify_mode::deterministic;
  SPECDEC_TRY(matching_verify_mode(t, m));
  out = m == verify_mode::sampled_iid                   ? verify_mode::traversal
        : m == verify_mode::sampled_without_replacement ? verify_mode::traversal_without_replacement
                                                        : m;
  return status::success();
}

//! Checks that `mode` is exact for a tree drafted as recorded (or is the
//! explicit lossy opt-in typical_lossy): greedy and naive_matching fit any
//! tree; sampled_iid, block and traversal need every expanded node drafted
//! i.i.d.; the without-replacement modes need draws without replacement;
//! deterministic needs deterministic children; block also needs a chain
//! (on a chain drafted without replacement, traversal_without_replacement
//! is the same rule). Errors: invalid_argument (the first offending node as
//! index; a bad mode), size_mismatch (inconsistent drafted_tree). O(N).
inline status check_verify_mode(const drafted_tree& t, verify_mode mode) noexcept {
  verify_params vp;
  vp.mode = mode;
  SPECDEC_TRY(validate_verify_params(vp));
  if (t.child_mode.size() != static_cast<std::size_t>(t.size()))
    return make_status(status_code::size_mismatch, "drafted_tree arrays disagree in size");
  if (mode == verify_mode::greedy || mode == verify_mode::naive_matching || mode == verify_mode::typical_lossy)
    return status::success();
  const draft_mode need =
      mode == verify_mode::sampled_iid || mode == verify_mode::block || mode == verify_mode::traversal ? draft_mode::iid
      : mode == verify_mode::deterministic ? draft_mode::deterministic
                                           : draft_mode::without_replacement;
  const std::int32_t n = t.size();
  for (std::int32_t u = 0; u < n; ++u) {
    const draft_mode m = t.child_mode[static_cast<std::size_t>(u)];
    if (m != draft_mode::leaf && m != need)
      return make_status(status_code::invalid_argument,
                         "the verify mode is not exact for how this node's children were drafted", u);
    if (mode == verify_mode::block && u > 0 && t.tree.depth(u) != u)
      return make_status(status_code::invalid_argument,
                         "block verification needs a chain; use verify_mode::traversal for trees", u);
  }
  return status::success();
}

}  // namespace specdec
