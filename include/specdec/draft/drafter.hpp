//! \file
//! What a drafter is, how a tree was drafted, and the owning result every
//! builder fills. A drafter is anything that, given the context of one node
//! of the tree being grown (its id, depth and root-to-node token path),
//! yields either a full probability row over the vocabulary or its top-k
//! candidates with probabilities. Builders record, per node, how that node's
//! children were drafted, so a verifier can apply the one exact rule that
//! matches (see docs/verify.md).
#pragma once

#include <concepts>
#include <cstdint>
#include <span>
#include <vector>

#include "specdec/core/error.hpp"
#include "specdec/core/philox.hpp"
#include "specdec/core/status.hpp"
#include "specdec/core/view.hpp"
#include "specdec/sample/uniforms.hpp"
#include "specdec/tree/token_tree.hpp"

namespace specdec {

//! How the children of one node were drafted. Verification must use the
//! matching rule, or it is biased:
//! - `deterministic`: children are a deterministic function of q (top-k,
//!   beam, pruned stream trees). Verify with a one-hot q (accept x with
//!   probability P(x), then zero P(x) and renormalize).
//! - `iid`: children sampled independently from q_u (with repeats allowed).
//!   Verify with multi-step speculative sampling (SpecInfer MSS).
//! - `without_replacement`: children sampled from q_u without replacement
//!   (Gumbel-top-k). Verify with recursive rejection sampling (zero q(x)
//!   and renormalize after each rejected sibling).
//! - `leaf`: the node was never expanded (no children were drafted).
enum class draft_mode : std::uint8_t { leaf = 0, deterministic = 1, iid = 2, without_replacement = 3 };

//! Short stable name of a draft mode.
constexpr const char* draft_mode_name(draft_mode m) noexcept {
  switch (m) {
    case draft_mode::leaf:
      return "leaf";
    case draft_mode::deterministic:
      return "deterministic";
    case draft_mode::iid:
      return "iid";
    case draft_mode::without_replacement:
      return "without_replacement";
  }
  return "unknown";
}

//! What a drafter is told about the node it drafts children for. `path`
//! holds the tokens from the root (the last committed token) to `node`
//! inclusive, so `path.size() == depth + 1`; it is valid only during the call.
struct draft_context {
  node_id node = 0;                //!< the node whose children are drafted
  std::int32_t depth = 0;          //!< its depth (root 0)
  std::span<const token_id> path;  //!< tokens from the root to `node`, depth + 1 of them
  //! The committed tokens before the root (the root is not repeated here);
  //! empty when the builder's caller gave none (see draft_round::history).
  std::span<const token_id> history{};
};

//! What every tree builder is told about the round it drafts for (one
//! signature for all builders, see loop/concepts.hpp `tree_builder`).
//! Trivially copyable; the spans must stay valid during the build.
struct draft_round {
  //! The last committed token: the root of the tree.
  token_id root_token = 0;
  //! Philox key of this request and round. Sampling builders draw from
  //! `for_purpose(rng, rng_purpose::draft)`, so the same key may be given to
  //! the verifier without their uniforms ever coinciding. Deterministic
  //! builders ignore it.
  rng_stream rng{};
  //! Committed tokens before the root, passed through to the drafter.
  std::span<const token_id> history{};
  //! Optional output: builders that sample write row u with the normalized
  //! draft distribution q_u of every expanded node u (the rows the sampled
  //! verifiers read). Empty: not written. Must hold node_bound() rows.
  view2d<float> q_rows{};
  //! Optional: the caller's drafting uniforms, used instead of the keyed
  //! Philox stream when `uniforms.u` is set (same layout as verification's,
  //! sample/uniforms.hpp): u[node * draws_per_node + draw] in [0, 1), `node`
  //! the tree node whose children are drawn. i.i.d. children: draw j is the
  //! inverse-CDF uniform of child j (draws_per_node >= the largest width).
  //! Without replacement (Gumbel-top-k): draw t is token t's uniform U_t,
  //! key log q(t) - log(-log(1 - U_t)) (draws_per_node >= V). A value
  //! outside [0, 1) or past the buffer is invalid_argument with the node as
  //! index. With Philox the draws are for_purpose(rng, rng_purpose::draft)
  //! .uniform_double(node, draw), so copying those values here gives the
  //! same tree.
  caller_uniforms uniforms{nullptr, 0, 0};
};

//! A drafter that returns the full draft distribution q_node as a row of
//! probabilities over the vocabulary (non-negative, finite, summing to ~1).
//! The row must stay valid until the next call on the same drafter.
template <class D>
concept probability_drafter = requires(D& d, const draft_context& c) {
  { d.probabilities(c) } -> std::convertible_to<std::span<const float>>;
};

//! A drafter that returns only its best candidates: it writes up to
//! `tokens.size()` distinct tokens and their probabilities (descending) and
//! returns how many it wrote (or a negative value for an error).
template <class D>
concept topk_drafter = requires(D& d, const draft_context& c, std::span<token_id> tokens, std::span<float> probs) {
  { d.top_candidates(c, tokens, probs) } -> std::convertible_to<std::int32_t>;
};

//! Anything a deterministic builder (top-k expansion, beam) can grow from.
template <class D>
concept drafter = probability_drafter<D> || topk_drafter<D>;

//! The result of a builder: the tree (scores = log joint draft probability),
//! per node the draft probability of its own token under its parent's q,
//! and per node how its children were drafted. Owning; `clear()` keeps
//! capacity so a builder can refill it every round without allocating.
struct drafted_tree {
  token_tree tree;  //!< tokens, parents, depths and log joint draft probabilities
  //! q_parent(token) of each node (1 for the root).
  std::vector<float> prob;
  //! How each node's children were drafted (`leaf` when it has none).
  std::vector<draft_mode> child_mode;

  //! Removes every node; capacity is kept.
  void clear() noexcept {
    tree.clear();
    prob.clear();
    child_mode.clear();
  }
  //! Reserves room for `n` nodes in every array.
  void reserve(std::size_t n) {
    tree.reserve(n);
    prob.reserve(n);
    child_mode.reserve(n);
  }
  //! Number of nodes.
  std::int32_t size() const noexcept { return tree.size(); }
  //! Starts a new tree with only the root (score 0, prob 1).
  void reset(token_id root_token) {
    clear();
    tree.add_root(root_token, 0.0f);
    prob.push_back(1.0f);
    child_mode.push_back(draft_mode::leaf);
  }
  //! Appends a child and marks its parent as drafted with `mode`.
  node_id add(node_id parent, token_id token, float p, float log_joint, draft_mode mode) {
    const node_id id = tree.add_child(parent, token, log_joint);
    prob.push_back(p);
    child_mode.push_back(draft_mode::leaf);
    child_mode[static_cast<std::size_t>(parent)] = mode;
    return id;
  }
};

//! The throwing convenience every tree builder offers, written once: a
//! builder derives from `owning_build<Builder>` and provides
//! `status build(D&, const draft_round&, drafted_tree&)`; `builder(d, round)`
//! (or `builder(d, root_token)` for a round with only a root) then builds
//! into a tree the builder owns and returns it (valid until the next call),
//! throwing `specdec::error` for a failed build. It takes exactly the
//! drafters the builder's own `build` accepts.
template <class Builder>
class owning_build {
 public:
  //! Builds into the builder's own tree and returns it (throws specdec::error).
  template <class D>
  requires requires(Builder& b, D& d, const draft_round& r, drafted_tree& out) {
    { b.build(d, r, out) } -> std::same_as<status>;
  }
  const drafted_tree& operator()(D& d, const draft_round& round) {
    throw_if_error(static_cast<Builder&>(*this).build(d, round, result_));
    return result_;
  }
  //! Same, for a round given by its root token only (key {0, 0, 0}).
  template <class D>
  requires requires(Builder& b, D& d, const draft_round& r, drafted_tree& out) {
    { b.build(d, r, out) } -> std::same_as<status>;
  }
  const drafted_tree& operator()(D& d, token_id root_token) {
    draft_round r;
    r.root_token = root_token;
    return (*this)(d, r);
  }

 private:
  drafted_tree result_;
};

}  // namespace specdec
