//! \file
//! Vocabulary-parallel verification: every rank holds the columns
//! [bounds[r], bounds[r + 1]) of the target rows p (and draft rows q) of a
//! tree, as a tensor-parallel output layer leaves them, and the ranks
//! verify the tree together without gathering the rows. The walk is the
//! one of verify/detail/walk.hpp, run on every rank with a row-operations
//! policy whose passes work on the local columns and exchange O(1) scalars
//! per decision over the caller's collective (parallel/collective.hpp):
//! partial masses, the drafted token's probability (sent by its owner),
//! the sampled token (the rank whose range holds the inverse-CDF target),
//! argmax keys and status flags. Every mode of verify_mode is supported,
//! block and traversal verification included.
//!
//! Exactness. Masses and inverse-CDF prefixes are summed in the
//! partitioned order: the fixed tiled order of sample/order.hpp inside
//! each column range (tiles start at the range's first column), then
//! across ranges in rank order from zero. verify_tree_partitioned runs the
//! same walk in one process with that order, so a sharded run and a
//! partitioned run of the same rows, partition and uniforms give the same
//! tokens bit for bit. Against the default order (verify_tree) the masses
//! differ by rounding only: both are sums of the same V nonnegative floats
//! in double, each within (V - 1) * 2^-53 * mass of the exact sum, so they
//! differ by at most about 2 * V * 2^-53 relative (3e-11 at V = 128256),
//! and a token differs only when a uniform falls within that distance of a
//! cumulative boundary (an event of probability about 1e-10 per draw).
//! Argmax (greedy) is order-free: identical in every case.
//!
//! Errors. Arguments are checked on every rank, then agreed over the
//! collective (agree_status): a bad argument on one rank (a NaN-free but
//! wrong-sized shard, a token out of range, a short workspace, a tree that
//! differs between ranks) becomes the same status code and index on all
//! ranks. Row data errors (NaN or negative entries in any rank's shard,
//! zero or unnormalized mass) are found by collective passes and so are
//! reported identically everywhere. Every rank joins every collective it
//! owes before returning: no hang.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "specdec/core/philox.hpp"
#include "specdec/core/status.hpp"
#include "specdec/core/view.hpp"
#include "specdec/core/workspace.hpp"
#include "specdec/parallel/collective.hpp"
#include "specdec/sample/detail/host_rows.hpp"
#include "specdec/sample/order.hpp"
#include "specdec/tree/token_tree.hpp"
#include "specdec/tree/validate.hpp"
#include "specdec/verify/detail/row_ops.hpp"
#include "specdec/verify/detail/walk.hpp"
#include "specdec/verify/policy.hpp"
#include "specdec/verify/request_checks.hpp"
#include "specdec/verify/tree_verify.hpp"
#include "specdec/verify/verify_params.hpp"

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

//! The row-operations policy of a vocabulary shard (verify_row_ops). Row
//! references and R hold the participant's columns [base, base + width);
//! token ids, the `V` arguments and sampled tokens are global. Every pass
//! loops over the owned ranges with the host passes of row_ops.hpp, then
//! combines the per-rank scalars in one or two collectives.
template <collective C>
struct sharded_row_ops {
  C* coll;
  const std::int64_t* bounds;
  owned_ranges own;

  std::int64_t begin(std::int32_t k) const noexcept { return bounds[k]; }
  std::int64_t len(std::int32_t k) const noexcept { return bounds[k + 1] - bounds[k]; }
  row_ref sub(row_ref r, std::int32_t k) const noexcept { return row_ref{r.d + (begin(k) - own.base) * r.s, r.s}; }
  float* sub(float* R, std::int32_t k) const noexcept { return R + (begin(k) - own.base); }

  //! Validity and mass; tile sums of every owned range into `tiles`.
  bool mass(row_ref r, std::int64_t, double* tiles, double& m) const {
    double v[2] = {0.0, 0.0};  // fold of the owned masses, bad flag
    for (std::int32_t k = own.first; k < own.last; ++k) {
      double mk = 0.0;
      if (!row_tiles(sub(r, k), len(k), tiles, mk)) v[1] = 1.0;
      v[0] += mk;
      tiles += sum_tile_count(len(k));
    }
    coll->all_reduce_sum(v, 2);
    m = v[0];
    return v[1] == 0.0;
  }

  void first_residual(row_ref p, row_ref q, float* R, std::int64_t, double* tp, double* tq, double* tr, double& mp,
                      double& mq, double& mr, bool& okp, bool& okq) const {
    double v[5] = {};  // p, q and R masses, bad p, bad q
    for (std::int32_t k = own.first; k < own.last; ++k) {
      double a = 0.0, b = 0.0, c = 0.0;
      bool oa = true, ob = true;
      host_row_ops{}.first_residual(sub(p, k), sub(q, k), sub(R, k), len(k), tp, tq, tr, a, b, c, oa, ob);
      v[0] += a;
      v[1] += b;
      v[2] += c;
      if (!oa) v[3] = 1.0;
      if (!ob) v[4] = 1.0;
      const std::int64_t nt = sum_tile_count(len(k));
      tp += nt;
      tq += nt;
      tr += nt;
    }
    coll->all_reduce_sum(v, 5);
    mp = v[0];
    mq = v[1];
    mr = v[2];
    okp = v[3] == 0.0;
    okq = v[4] == 0.0;
  }

  double update_residual(row_ref q, float* R, float s, std::int64_t, double* tr) const {
    double m = 0.0;
    for (std::int32_t k = own.first; k < own.last; ++k) {
      m += host_row_ops{}.update_residual(sub(q, k), sub(R, k), s, len(k), tr);
      tr += sum_tile_count(len(k));
    }
    coll->all_reduce_sum(&m, 1);
    return m;
  }

  //! R = max(p - s q, 0) in one read of p and q (block/traversal modes).
  double scaled_residual(row_ref p, row_ref q, float* R, float s, std::int64_t, double* tr) const {
    double m = 0.0;
    for (std::int32_t k = own.first; k < own.last; ++k) {
      m += host_row_ops{}.scaled_residual(sub(p, k), sub(q, k), sub(R, k), s, len(k), tr);
      tr += sum_tile_count(len(k));
    }
    coll->all_reduce_sum(&m, 1);
    return m;
  }

  //! Inverse-CDF sample: the token of the lowest range whose cumulative
  //! interval holds `target` and whose scan finds it; the last positive
  //! token of the row when rounding passes every range.
  token_id sample(row_ref r, std::int64_t, const double* tiles, double target) const {
    double c = 0.0;
    const double* t = tiles;
    for (std::int32_t k = own.first; k < own.last; ++k) {
      c += sum_tiles(t, sum_tile_count(len(k)));
      t += sum_tile_count(len(k));
    }
    coll->exclusive_prefix_sum(&c, 1);
    std::int64_t found = -1, last = -1;
    for (std::int32_t k = own.first; k < own.last; ++k) {
      const std::int64_t nt = sum_tile_count(len(k));
      const row_ref rk = sub(r, k);
      const double mk = sum_tiles(tiles, nt);
      if (found < 0 && target < c + mk) {
        std::int64_t i = 0;
        double cc = c;
        while (found < 0 && locate_tile(tiles, nt, target, i, cc)) {
          const std::int64_t b = i * sum_tile;
          const std::int64_t n = len(k) - b < sum_tile ? len(k) - b : sum_tile;
          const token_id y = scan_tile([&](std::int64_t j) { return rk[b + j]; }, b, n, cc, target);
          if (y >= 0) found = begin(k) + y;
          cc += tiles[i++];
        }
      }
      const token_id lp = last_positive(rk, len(k));
      if (lp >= 0) last = begin(k) + lp;
      c += mk;
      tiles += nt;
    }
    std::int64_t v[2] = {found >= 0 ? -found : no_key, last};
    coll->all_reduce_max(v, 2);
    return static_cast<token_id>(v[0] != no_key ? -v[0] : v[1]);
  }

  //! Argmax in the specdec tie order, merged over ranks as rank_key pairs.
  bool argmax(row_ref r, std::int64_t, token_id& tok) const {
    std::int64_t v[2] = {no_key, 0};  // best key, NaN flag
    for (std::int32_t k = own.first; k < own.last; ++k) {
      if (len(k) == 0) continue;
      token_id a = 0;
      if (!argmax_pass(sub(r, k), len(k), a)) v[1] = 1;
      const float x = sub(r, k)[a];
      if (x > -INFINITY) {  // argmax_pass picks only entries above -inf
        const std::int64_t key = rank_key(x, begin(k) + a);
        v[0] = key > v[0] ? key : v[0];
      }
    }
    coll->all_reduce_max(v, 2);
    tok = v[0] == no_key ? 0 : static_cast<token_id>(key_token(v[0]));
    return v[1] == 0;
  }

  bool entropy(row_ref r, std::int64_t, double* tiles, double& m, double& plogp) const {
    double v[3] = {};  // mass, sum p log p, bad flag
    for (std::int32_t k = own.first; k < own.last; ++k) {
      double mk = 0.0, hk = 0.0;
      if (!host_row_ops{}.entropy(sub(r, k), len(k), tiles, mk, hk)) v[2] = 1.0;
      v[0] += mk;
      v[1] += hk;
      tiles += sum_tile_count(len(k));
    }
    coll->all_reduce_sum(v, 3);
    m = v[0];
    plogp = v[1];
    return v[2] == 0.0;
  }

  status_code classify(row_ref r, std::int64_t) const {
    std::int64_t worst = 0;  // 2: non-finite, 1: negative
    for (std::int64_t i = 0; i < own.width; ++i) {
      const float x = r[i];
      if (!(x - x == x - x))
        worst = 2;
      else if (x < 0.0f && worst == 0)
        worst = 1;
    }
    coll->all_reduce_max(&worst, 1);
    return worst == 2 ? status_code::non_finite : status_code::negative_probability;
  }

  //! Entry x (global id) of a row: read by the owning rank, broadcast.
  float value(row_ref r, token_id x) const {
    const auto R = coll->size() == 1 ? own.last : static_cast<std::int32_t>(coll->size());
    std::int32_t lo = 0, hi = R;  // last range with begin <= x (non-empty, as x < V)
    while (hi - lo > 1) {
      const std::int32_t mid = (lo + hi) / 2;
      (bounds[mid] <= x ? lo : hi) = mid;
    }
    const std::int32_t k = lo;
    if (coll->size() == 1) return r[x - own.base];
    double v = k >= own.first && k < own.last ? static_cast<double>(r[x - own.base]) : 0.0;
    coll->broadcast(&v, 1, k);
    return static_cast<float>(v);
  }

  void copy(row_ref r, float* R, std::int64_t) const noexcept {
    for (std::int64_t i = 0; i < own.width; ++i) R[i] = r[i];
  }
  //! A residual entry by global token id: written by its owner only.
  void put(float* R, std::int64_t x, float v) const noexcept {
    if (x >= own.base && x < own.base + own.width) R[x - own.base] = v;
  }
  //! Replicated scratch (path, queue): every rank writes its own copy.
  template <class T>
  void put(T* a, std::int64_t i, T v) const noexcept {
    a[i] = v;
  }
  void sync() const noexcept {}
};

static_assert(verify_row_ops<sharded_row_ops<self_collective>>);

//! The walk's scratch for a shard: the shared carve order over the shard's
//! width and tiles.
inline walk_scratch carve_sharded_scratch(workspace_carver& w, const owned_ranges& o, std::int32_t n) noexcept {
  return carve_walk_scratch(w, o.width, o.tiles, n);
}

//! The request of one sharded call: what every rank checks locally.
struct sharded_request {
  const owned_ranges* own;
  std::int64_t V;
  std::int32_t n;       //!< nodes
  std::int32_t q_rows;  //!< q rows the mode needs (0: none)
  view2d<const float> p, q;
};

inline status check_shards(const sharded_request& rq, const verify_params& vp) noexcept {
  SPECDEC_TRY(validate_verify_params(vp));
  if (rq.p.extent[1] != rq.own->width)
    return make_status(status_code::size_mismatch, "p's columns must be this rank's vocabulary range");
  if (rq.p.extent[0] < rq.n) return make_status(status_code::size_mismatch, "p must have one row per node");
  if (rq.own->width > 0 && rq.p.data == nullptr) return make_status(status_code::invalid_argument, "p has no data");
  if (uses_draft_probs(vp.mode) && rq.q_rows > 0) {
    if (rq.q.extent[1] != rq.own->width)
      return make_status(status_code::size_mismatch, "q's columns must be this rank's vocabulary range");
    if (rq.q.extent[0] < rq.q_rows) return make_status(status_code::size_mismatch, "q must have one row per node");
    if (rq.own->width > 0 && rq.q.data == nullptr)
      return make_status(status_code::invalid_argument, "this mode needs the draft rows q");
  }
  return status::success();
}

inline std::uint64_t fingerprint_of(const verify_params& vp, std::span<const std::int64_t> bounds, std::int32_t n,
                                    const node_id* parent, const token_id* token, const caller_uniforms* cu) noexcept {
  std::uint64_t h = 0xcbf29ce484222325ull;
  fingerprint_add(h, vp.mode);
  fingerprint_add(h, vp.request);
  fingerprint_add(h, vp.seed);
  fingerprint_add(h, vp.round);
  fingerprint_add(h, vp.typical_epsilon);
  fingerprint_add(h, vp.typical_delta);
  fingerprint_add(h, vp.normalization_tolerance);
  fingerprint_add(h, bounds.size());
  for (const std::int64_t b : bounds) fingerprint_add(h, b);
  fingerprint_add(h, n);
  for (std::int32_t i = 0; i < n; ++i) {
    if (parent != nullptr) fingerprint_add(h, parent[i]);
    if (token != nullptr) fingerprint_add(h, token[i]);
  }
  if (cu != nullptr && cu->u != nullptr) {
    fingerprint_add(h, cu->draws_per_node);
    const std::int64_t m = static_cast<std::int64_t>(cu->nodes) * cu->draws_per_node;
    for (std::int64_t i = 0; i < m; ++i) fingerprint_add(h, cu->u[i]);
  }
  return h;
}

inline walk_rows shard_rows(const view2d<const float>& p, const view2d<const float>& q, const owned_ranges& own,
                            std::int64_t V) noexcept {
  static const float none = 0.0f;  // a rank holding no columns reads nothing
  if (own.width == 0) return walk_rows{&none, 0, 0, &none, 0, 0, V};
  const float* qd = q.data != nullptr ? q.data : &none;
  return walk_rows{
      p.data, p.stride[0], p.stride[1], qd, q.data != nullptr ? q.stride[0] : 0, q.data != nullptr ? q.stride[1] : 0,
      V};
}

template <collective C, verify_topology Topo, class Uni>
status sharded_walk(C& coll, std::span<const std::int64_t> bounds, const owned_ranges& own, const Topo& topo,
                    const verify_params& vp, const Uni& uni, const sharded_request& rq, const walk_scratch& s,
                    walk_out& o) {
  const sharded_row_ops<C> ops{&coll, bounds.data(), own};
  return verify_walk(topo, ops, uni, vp, shard_rows(rq.p, rq.q, own, rq.V), s, o);
}

template <collective C, class Uni>
status verify_tree_sharded_with(C& coll, std::span<const std::int64_t> bounds, const tree_view& tree,
                                const view2d<const float>& p, const view2d<const float>& q, const verify_params& vp,
                                const Uni& uni, const caller_uniforms* cu, std::span<std::byte> workspace,
                                std::span<node_id> path, std::span<token_id> tokens, verify_result& result) {
  owned_ranges own{};
  walk_scratch s{};
  const std::int32_t N = tree.size;
  auto local = [&]() -> status {
    SPECDEC_TRY(own_ranges(bounds, coll.rank(), coll.size(), own));
    if (N <= 0 || tree.parent == nullptr) return make_status(status_code::empty_input, "tree has no nodes");
    SPECDEC_TRY(check_shards(sharded_request{&own, bounds.back(), N, N > 1 ? N : 0, p, q}, vp));
    workspace_carver w(workspace.data(), workspace.size());
    s = carve_sharded_scratch(w, own, N);
    if (w.overflowed() || workspace.data() == nullptr || s.depth == nullptr || s.path == nullptr)
      return make_status(status_code::buffer_too_small, "workspace smaller than sharded_verify_workspace_size");
    if (!aligned8(workspace.data()))
      return make_status(status_code::invalid_argument, "workspace must be 8-byte aligned");
    const std::size_t cap = path.size() < tokens.size() ? path.size() : tokens.size();
    const bool has_q = q.data != nullptr || own.width == 0;
    SPECDEC_TRY(check_verify_request(tree.parent, tree.token, N, bounds.back(), vp, has_q,
                                     static_cast<std::int64_t>(cap), s.depth));
    if (tree.depth != nullptr) SPECDEC_TRY(validate_tree(tree));
    return status::success();
  };
  const std::int32_t nfp = N > 0 && tree.parent != nullptr && tree.token != nullptr ? N : 0;
  SPECDEC_TRY(agree_status(coll, local(), fingerprint_of(vp, bounds, nfp, tree.parent, tree.token, cu)));
  if (s.path == nullptr) return make_status(status_code::internal_error, "sharded walk scratch not carved");
  walk_out o{s.path, N, 0, 0, -1};
  const sharded_request rq{&own, bounds.back(), N, N > 1 ? N : 0, p, q};
  const status walked = sharded_walk(coll, bounds, own, parent_topology{tree.token, tree.parent, N}, vp, uni, rq, s, o);
  SPECDEC_TRY(collective_error(coll));  // a failed transport makes every result meaningless
  SPECDEC_TRY(walked);
  for (std::int32_t k = 0; k <= o.accepted; ++k) {
    path[static_cast<std::size_t>(k)] = s.path[k];
    if (k > 0) tokens[static_cast<std::size_t>(k - 1)] = tree.token[s.path[k]];
  }
  tokens[static_cast<std::size_t>(o.accepted)] = o.next;
  result = verify_result{o.accepted, o.last, o.next, status_code::ok};
  return status::success();
}

template <collective C, class Uni>
status verify_chain_sharded_with(C& coll, std::span<const std::int64_t> bounds, std::span<const token_id> drafts,
                                 const view2d<const float>& p, const view2d<const float>& q, const verify_params& vp,
                                 const Uni& uni, const caller_uniforms* cu, std::span<std::byte> workspace,
                                 std::span<token_id> tokens, verify_result& result) {
  owned_ranges own{};
  walk_scratch s{};
  const bool too_long = drafts.size() >= static_cast<std::size_t>(INT32_MAX);
  const std::int32_t n = too_long ? 1 : static_cast<std::int32_t>(drafts.size()) + 1;
  auto local = [&]() -> status {
    if (too_long) return make_status(status_code::invalid_argument, "too many drafts");
    SPECDEC_TRY(own_ranges(bounds, coll.rank(), coll.size(), own));
    SPECDEC_TRY(check_shards(sharded_request{&own, bounds.back(), n, n - 1, p, q}, vp));
    SPECDEC_TRY(validate_tokens(drafts.data(), n - 1, bounds.back()));
    workspace_carver w(workspace.data(), workspace.size());
    s = carve_sharded_scratch(w, own, n);
    if (w.overflowed() || workspace.data() == nullptr || s.depth == nullptr || s.path == nullptr)
      return make_status(status_code::buffer_too_small, "workspace smaller than sharded_verify_workspace_size");
    if (!aligned8(workspace.data()))
      return make_status(status_code::invalid_argument, "workspace must be 8-byte aligned");
    if (tokens.size() < static_cast<std::size_t>(n))
      return make_status(status_code::buffer_too_small, "tokens needs gamma + 1 entries");
    return status::success();
  };
  SPECDEC_TRY(agree_status(coll, local(), fingerprint_of(vp, bounds, n - 1, nullptr, drafts.data(), cu)));
  if (s.path == nullptr) return make_status(status_code::internal_error, "sharded walk scratch not carved");
  walk_out o{s.path, n, 0, 0, -1};
  const sharded_request rq{&own, bounds.back(), n, n - 1, p, q};
  const status walked = sharded_walk(coll, bounds, own, chain_topology{drafts.data(), n}, vp, uni, rq, s, o);
  SPECDEC_TRY(collective_error(coll));
  SPECDEC_TRY(walked);
  for (std::int32_t k = 0; k < o.last; ++k) tokens[static_cast<std::size_t>(k)] = drafts[static_cast<std::size_t>(k)];
  tokens[static_cast<std::size_t>(o.last)] = o.next;
  result = verify_result{o.last, o.last, o.next, status_code::ok};
  return status::success();
}

}  // namespace detail

//! Bytes of workspace one rank needs for verify_tree_sharded /
//! verify_chain_sharded: its columns as floats, three arrays of tile sums
//! over its ranges, four ints and one walk frame per node (256-byte aligned slices; 8-byte
//! aligned base). 0 for an invalid partition, rank or node count.
inline std::size_t sharded_verify_workspace_size(std::span<const std::int64_t> bounds, int rank, int size,
                                                 std::int32_t nodes) noexcept {
  detail::owned_ranges own{};
  if (nodes <= 0 || !detail::own_ranges(bounds, rank, size, own).ok()) return 0;
  workspace_carver w;
  (void)detail::carve_sharded_scratch(w, own, nodes);
  return w.bytes_used() == 0 ? workspace_alignment : w.bytes_used();
}

//! Verifies one token tree on a vocabulary split over the ranks of `coll`.
//! Collective: every rank calls it with the same tree, parameters and
//! partition. bounds: ranks + 1 column bounds (rank r holds [bounds[r],
//! bounds[r + 1]), any range may be empty, V = bounds.back()). p, q: this
//! rank's N x (bounds[r + 1] - bounds[r]) shards (any strides; q read by
//! the sampled modes). Tokens in the tree and in the results are global
//! ids. Outputs and errors as verify_tree, on every rank (see the file
//! comment for how errors agree). Traffic per visited node: a constant
//! number of collectives of at most five scalars (parallel/collective.hpp
//! counts them). Deterministic; no allocation.
template <collective C>
status verify_tree_sharded(C& coll, std::span<const std::int64_t> bounds, const tree_view& tree, view2d<const float> p,
                           view2d<const float> q, const verify_params& vp, std::span<std::byte> workspace,
                           std::span<node_id> path, std::span<token_id> tokens, verify_result& result) {
  return detail::verify_tree_sharded_with(coll, bounds, tree, p, q, vp,
                                          philox_uniforms{rng_stream{vp.seed, vp.request, vp.round}}, nullptr,
                                          workspace, path, tokens, result);
}

//! verify_tree_sharded with the caller's uniforms (the same on every rank).
template <collective C>
status verify_tree_sharded(C& coll, std::span<const std::int64_t> bounds, const tree_view& tree, view2d<const float> p,
                           view2d<const float> q, const verify_params& vp, const caller_uniforms& uniforms,
                           std::span<std::byte> workspace, std::span<node_id> path, std::span<token_id> tokens,
                           verify_result& result) {
  return detail::verify_tree_sharded_with(coll, bounds, tree, p, q, vp, uniforms, &uniforms, workspace, path, tokens,
                                          result);
}

//! Verifies a chain of drafts on a vocabulary split over the ranks of
//! `coll` (as verify_chain; shards and errors as verify_tree_sharded).
template <collective C>
status verify_chain_sharded(C& coll, std::span<const std::int64_t> bounds, std::span<const token_id> drafts,
                            view2d<const float> p, view2d<const float> q, const verify_params& vp,
                            std::span<std::byte> workspace, std::span<token_id> tokens, verify_result& result) {
  return detail::verify_chain_sharded_with(coll, bounds, drafts, p, q, vp,
                                           philox_uniforms{rng_stream{vp.seed, vp.request, vp.round}}, nullptr,
                                           workspace, tokens, result);
}

//! Single-process verify_tree in the partitioned summation order of
//! `bounds` (p, q: full N x V rows). Gives the tokens verify_tree_sharded
//! gives on bounds.size() - 1 ranks; with bounds {0, V} it equals
//! verify_tree. Workspace: sharded_verify_workspace_size(bounds, 0, 1, N).
inline status verify_tree_partitioned(std::span<const std::int64_t> bounds, const tree_view& tree,
                                      view2d<const float> p, view2d<const float> q, const verify_params& vp,
                                      std::span<std::byte> workspace, std::span<node_id> path,
                                      std::span<token_id> tokens, verify_result& result) noexcept {
  self_collective one;
  return verify_tree_sharded(one, bounds, tree, p, q, vp, workspace, path, tokens, result);
}

//! verify_tree_partitioned with the caller's uniforms.
inline status verify_tree_partitioned(std::span<const std::int64_t> bounds, const tree_view& tree,
                                      view2d<const float> p, view2d<const float> q, const verify_params& vp,
                                      const caller_uniforms& uniforms, std::span<std::byte> workspace,
                                      std::span<node_id> path, std::span<token_id> tokens,
                                      verify_result& result) noexcept {
  self_collective one;
  return verify_tree_sharded(one, bounds, tree, p, q, vp, uniforms, workspace, path, tokens, result);
}

//! Single-process verify_chain in the partitioned order of `bounds`.
inline status verify_chain_partitioned(std::span<const std::int64_t> bounds, std::span<const token_id> drafts,
                                       view2d<const float> p, view2d<const float> q, const verify_params& vp,
                                       std::span<std::byte> workspace, std::span<token_id> tokens,
                                       verify_result& result) noexcept {
  self_collective one;
  return verify_chain_sharded(one, bounds, drafts, p, q, vp, workspace, tokens, result);
}

}  // namespace specdec
