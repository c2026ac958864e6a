//! \file
//! Vocabulary-parallel verification: every rank holds the columns
//! [bounds[r], bounds[r + 1]) of the target rows p (and draft rows q) of a
//! tree, as a tensor-parallel output layer leaves them, and the ranks
//! verify the tree together without gathering the rows. The walk is the
//! one of verify/detail/walk.hpp, run on every rank with a row-operations
//! policy whose passes work on the local columns and exchange O(1) scalars
//! per decision over the caller's collective (parallel/collective.hpp):
//! partial masses, the drafted tokens' probabilities (a probe riding on
//! the pass before the walk reads them, see parallel/detail/shard_passes.hpp),
//! the sampled token (the rank whose range holds the inverse-CDF target),
//! argmax keys and status flags; one collective per decision. Every mode of
//! verify_mode is supported, block and traversal verification included.
//! Where the passes run is a shard executor's business: host_shard_executor
//! (host rows, any collective) here, nccl_shard_executor (rows in GPU
//! memory) in parallel/cuda_shard.cuh.
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
#include <cstring>
#include <span>

#include "specdec/core/philox.hpp"
#include "specdec/core/status.hpp"
#include "specdec/core/view.hpp"
#include "specdec/core/workspace.hpp"
#include "specdec/parallel/collective.hpp"
#include "specdec/parallel/detail/shard_passes.hpp"
#include "specdec/parallel/detail/topk_passes.hpp"
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

}  // namespace detail

//! The trivial shard executor: passes run on host memory with the host
//! policy, their scalars are combined by a host collective. The
//! device-resident executor is in parallel/cuda_shard.cuh. An executor has
//! rank(), size(), coll() (a collective on host memory, for the argument
//! checks), run(pass) (the pass writes up to `capacity` doubles and int64s
//! into the executor's scalar buffers), sum / prefix (double scalars,
//! combined in rank order into host memory) and max (int64 scalars), and
//! stage_bounds (the partition where passes read it); for the sharded
//! top-k also run_rows(pass, rows), gather (an all-gather of int64s) and
//! to_host (pass results into host memory).
template <collective C>
class host_shard_executor {
 public:
  //! Most scalars of each type one pass writes.
  static constexpr int capacity = 64;
  //! Runs the passes on this process's memory over `coll` (not owned).
  explicit host_shard_executor(C& coll) noexcept : c_(&coll) {}
  //! This rank.
  [[nodiscard]] int rank() const { return c_->rank(); }
  //! Number of ranks.
  [[nodiscard]] int size() const { return c_->size(); }
  //! The collective on host memory.
  C& coll() noexcept { return *c_; }
  //! The partition as passes read it (host memory: the caller's array).
  const std::int64_t* stage_bounds(std::span<const std::int64_t> bounds, std::int64_t*) noexcept {
    return bounds.data();
  }
  //! Runs one pass of shard_passes.hpp with the host policy.
  template <class Pass>
  void run(const Pass& f) {
    f(detail::host_row_ops{}, d_, l_);
  }
  //! out[0..n) = the rank-order sums of the pass's first n doubles.
  void sum(int n, double* out) {
    for (int i = 0; i < n; ++i) out[i] = d_[i];
    c_->all_reduce_sum(out, n);
  }
  //! out[0..n) = the rank-order sums over the lower ranks.
  void prefix(int n, double* out) {
    for (int i = 0; i < n; ++i) out[i] = d_[i];
    c_->exclusive_prefix_sum(out, n);
  }
  //! out[0..n) = the maxima of the pass's first n int64s.
  void max(int n, std::int64_t* out) {
    for (int i = 0; i < n; ++i) out[i] = l_[i];
    c_->all_reduce_max(out, n);
  }
  //! Runs a row pass of parallel/detail/topk_passes.hpp on rows [0, rows).
  template <class Pass>
  void run_rows(const Pass& f, std::int32_t rows) {
    for (std::int32_t r = 0; r < rows; ++r) f(detail::host_row_ops{}, detail::host_lanes{}, r);
  }
  //! all[q * n + i] = rank q's mine[i]: the collective's all_gather when
  //! it has one (gathering_collective), else an all-gather made of its max
  //! (the other ranks' slots hold no_key, below every int64). all holds
  //! size() * n int64s; size() * n must fit an int.
  void gather(const std::int64_t* mine, int n, std::int64_t* all) {
    if constexpr (gathering_collective<C>) {
      c_->all_gather(mine, n, all);
    } else {
      const std::int64_t total = static_cast<std::int64_t>(n) * size();
      for (std::int64_t i = 0; i < total; ++i) all[i] = detail::no_key;
      const std::int64_t slot = static_cast<std::int64_t>(n) * rank();
      for (int i = 0; i < n; ++i) all[slot + i] = mine[i];
      c_->all_reduce_max(all, static_cast<int>(total));
    }
  }
  //! Hands pass results to the host (here a copy within host memory).
  void to_host(void* dst, const void* src, std::size_t bytes) noexcept {
    if (bytes != 0 && dst != src) std::memcpy(dst, src, bytes);
  }

 private:
  C* c_;
  double d_[capacity] = {};
  std::int64_t l_[capacity] = {};
};

namespace detail {

//! Cached entries of one row at one node's children's tokens (the probe of
//! the pass that last touched it). Keys are walk-level (node, kind), the
//! same on every rank, so every rank makes the same collectives.
struct probe_slot {
  node_id node = -1;
  std::int32_t n = 0;
  token_id tok[shard_batch] = {};
  float v[shard_batch] = {};
};

//! The row-operations policy of a vocabulary shard (verify_row_ops), run
//! by the host walk on every rank. The walk sees tag rows (walk_rows over
//! `tags`: row u of p at tags + u, of q at tags + n + u) so every pass
//! knows which node and row it is about from walk-level data alone;
//! `data` holds the real shard rows where the executor reads them. R and
//! tile arrays live where the executor runs passes; the walk's own arrays
//! (path, queue, frames) on the host. Each pass is one executor pass plus
//! one collective carrying its scalars and a probe of the entries the walk
//! reads next (the children's tokens of its node), so single entries cost
//! no collective of their own when the probe covered them.
template <class Exec, class Topo>
struct shard_row_ops {
  Exec* ex;
  shard_span sh;
  const Topo* topo;
  const float* tags;                //!< host tag rows (2 n floats, never read)
  std::int32_t n;                   //!< nodes
  walk_rows data;                   //!< the shard rows (executor memory)
  float* R;                         //!< the residual (executor memory)
  bool pair;                        //!< mode reads q: fetch p and q entries together
  bool probes;                      //!< mode reads drafted tokens' entries (not greedy, naive matching)
  double* walk_tp;                  //!< the walk's tile sums of p (executor memory)
  double* walk_tq;                  //!< the walk's tile sums of q (executor memory)
  mutable probe_slot slot[3] = {};  // p row, q row, residual
  mutable node_id r_node = -1;      // the node the residual belongs to
  // The masses and validity of one node's p and q, computed into tp and tq
  // by the first probe of a mode reading q (its check_pq then costs nothing).
  struct pair_masses {
    node_id node = -1;
    double mp = 0.0, mq = 0.0;
    bool okp = true, okq = true;
  };
  mutable pair_masses pm{};

  // Row identity: 0 p row, 1 q row, 2 the residual; node in `u`.
  int kind(row_ref r, node_id& u) const noexcept {
    if (r.d == R) {
      u = r_node;
      return 2;
    }
    const auto i = static_cast<std::int32_t>(r.d - tags);
    u = i < n ? i : i - n;
    return i < n ? 0 : 1;
  }
  row_ref real(row_ref r) const noexcept {
    node_id u = 0;
    const int k = kind(r, u);
    if (k == 2) return row_ref{R, 1};  // no conditional expression (see residual())
    return k == 0 ? data.prow(u) : data.qrow(u);
  }
  // The distinct tokens of u's first children (at most shard_batch).
  void children(node_id u, shard_probe& pr) const noexcept {
    pr.n = 0;
    if (u < 0) return;
    for (node_id c = topo->first_child(u); c >= 0 && pr.n < shard_batch; c = topo->next_sibling(c)) {
      const token_id x = topo->token_of(c);
      bool seen = false;
      for (std::int32_t j = 0; j < pr.n; ++j) seen |= pr.tok[j] == x;
      if (!seen) pr.tok[pr.n++] = x;
    }
  }
  // The probe riding on a pass over (tagged) row r: its entries at the
  // children of its node, unless already cached.
  shard_probe probe_of(row_ref r) const noexcept {
    shard_probe pr{};
    node_id u = 0;
    const int k = kind(r, u);
    if (!probes || slot[k].node == u) return pr;
    children(u, pr);
    pr.nrows = pr.n > 0 ? 1 : 0;
    pr.rows[0] = real(r);
    return pr;
  }
  // The residual's entries at its node's children (the sampled walk reads them next).
  shard_probe residual_probe() const noexcept { return probe_of(row_ref{R, 1}); }
  // A pass over row r that reads only p or q rows probes them; a mass of
  // the residual (the deterministic emission) probes nothing.
  shard_probe row_probe(row_ref r) const noexcept { return r.d == R ? shard_probe{} : probe_of(r); }
  // Stores the combined probe values of a pass over rows tagged `ta`, `tb`.
  void keep(const shard_probe& pr, const double* v, int ka, node_id u, int kb = -1) const noexcept {
    const int kinds[2] = {ka, kb};
    for (std::int32_t a = 0; a < pr.nrows; ++a) {
      probe_slot& s = slot[kinds[a]];
      s.node = u;
      s.n = pr.n;
      for (std::int32_t j = 0; j < pr.n; ++j) {
        s.tok[j] = pr.tok[j];
        s.v[j] = static_cast<float>(v[a * pr.n + j]);
      }
    }
  }
  void keep_row(row_ref r, const shard_probe& pr, const double* v) const noexcept {
    node_id u = 0;
    const int k = kind(r, u);
    if (pr.nrows > 0) keep(pr, v, k, u);
  }
  void residual_changed(node_id u) const noexcept {
    r_node = u;
    slot[2] = probe_slot{};
  }

  bool mass(row_ref r, std::int64_t, double* tiles, double& m) const {
    pm.node = -1;  // the tile arrays are rewritten
    const pass_mass f{sh, row_probe(r), real(r), tiles};
    ex->run(f);
    double v[2 + 2 * shard_batch] = {};
    ex->sum(2 + f.pr.size(), v);
    keep_row(r, f.pr, v + 2);
    m = v[0];
    return v[1] == 0.0;
  }

  //! Masses and validity of a node's p and q rows in one pass (check_pq),
  //! probing both rows at the node's children.
  void mass_pair(row_ref p, row_ref q, std::int64_t, double* tp, double* tq, double& mp, double& mq, bool& okp,
                 bool& okq) const {
    node_id u = 0;
    (void)kind(p, u);
    if (pm.node == u && tp == walk_tp && tq == walk_tq) {  // computed by the node's first probe
      mp = pm.mp;
      mq = pm.mq;
      okp = pm.okp;
      okq = pm.okq;
      return;
    }
    shard_probe pr{};
    if (probes) children(u, pr);
    int kinds[2] = {0, 1};
    pr.nrows = 0;
    if (pr.n > 0 && slot[0].node != u) {
      pr.rows[pr.nrows] = real(p);
      kinds[pr.nrows++] = 0;
    }
    if (pr.n > 0 && slot[1].node != u) {
      pr.rows[pr.nrows] = real(q);
      kinds[pr.nrows++] = 1;
    }
    const pass_mass_pair f{sh, pr, real(p), real(q), tp, tq};
    ex->run(f);
    double v[4 + 2 * shard_batch] = {};
    ex->sum(4 + f.pr.size(), v);
    if (pr.nrows > 0) keep(pr, v + 4, kinds[0], u, kinds[1]);
    mp = v[0];
    okp = v[1] == 0.0;
    mq = v[2];
    okq = v[3] == 0.0;
    pm = pair_masses{tp == walk_tp && tq == walk_tq ? u : -1, mp, mq, okp, okq};
  }

  void first_residual(row_ref p, row_ref q, float*, std::int64_t, double* tp, double* tq, double* tr, double& mp,
                      double& mq, double& mr, bool& okp, bool& okq) const {
    node_id u = 0;
    (void)kind(p, u);
    residual_changed(u);
    pm.node = -1;
    const pass_first_residual f{sh, residual_probe(), real(p), real(q), R, tp, tq, tr};
    ex->run(f);
    double v[5 + 2 * shard_batch] = {};
    ex->sum(5 + f.pr.size(), v);
    if (f.pr.nrows > 0) keep(f.pr, v + 5, 2, u);
    mp = v[0];
    mq = v[1];
    mr = v[2];
    okp = v[3] == 0.0;
    okq = v[4] == 0.0;
  }

  double residual(row_ref p, row_ref q, float s, bool scaled, double* tr) const {
    node_id u = 0;
    (void)kind(q, u);
    residual_changed(u);
    // p is read only when scaled (no conditional expression here: it crashes nvcc 13.0's cicc).
    // The traversal walk reads no residual entries: no probe after a scaled residual.
    shard_probe pr{};
    if (!scaled) pr = residual_probe();
    const pass_residual f{sh, pr, real(p), real(q), R, s, scaled, tr};
    ex->run(f);
    double v[1 + 2 * shard_batch] = {};
    ex->sum(1 + f.pr.size(), v);
    if (f.pr.nrows > 0) keep(f.pr, v + 1, 2, u);
    return v[0];
  }
  double update_residual(row_ref q, float*, float s, std::int64_t, double* tr) const {
    return residual(q, q, s, false, tr);
  }
  //! R = max(p - s q, 0) in one read of p and q (block/traversal modes).
  double scaled_residual(row_ref p, row_ref q, float*, float s, std::int64_t, double* tr) const {
    return residual(p, q, s, true, tr);
  }

  //! Inverse-CDF sample: the token of the lowest range whose cumulative
  //! interval holds `target` and whose scan finds it; the last positive
  //! token of the row when rounding passes every range.
  token_id sample(row_ref r, std::int64_t, const double* tiles, double target) const {
    double c = 0.0;
    ex->run(pass_owned_mass{sh, tiles});
    ex->prefix(1, &c);
    ex->run(pass_sample_scan{sh, real(r), tiles, c, target});
    std::int64_t v[2] = {};
    ex->max(2, v);
    return static_cast<token_id>(v[0] != no_key ? -v[0] : v[1]);
  }

  //! Argmax in the specdec tie order, merged over ranks as rank_key pairs.
  bool argmax(row_ref r, std::int64_t, token_id& tok) const {
    ex->run(pass_argmax{sh, real(r)});
    std::int64_t v[2] = {};
    ex->max(2, v);
    tok = v[0] == no_key ? 0 : static_cast<token_id>(key_token(v[0]));
    return v[1] == 0;
  }

  bool entropy(row_ref r, std::int64_t, double* tiles, double& m, double& plogp) const {
    pm.node = -1;
    const pass_entropy f{sh, row_probe(r), real(r), tiles};
    ex->run(f);
    double v[3 + 2 * shard_batch] = {};
    ex->sum(3 + f.pr.size(), v);
    keep_row(r, f.pr, v + 3);
    m = v[0];
    plogp = v[1];
    return v[2] == 0.0;
  }

  status_code classify(row_ref r, std::int64_t) const {
    ex->run(pass_classify{sh, real(r)});
    std::int64_t worst = 0;
    ex->max(1, &worst);
    return worst == 2 ? status_code::non_finite : status_code::negative_probability;
  }

  //! Entry x (global id) of a row: from the probe of an earlier pass, else
  //! one probe of this row (and, for modes reading q, of the node's other
  //! row) at the node's children's tokens.
  float value(row_ref r, token_id x) const {
    node_id u = 0;
    const int k = kind(r, u);
    const probe_slot& s = slot[k];
    if (s.node == u && (k != 2 || u >= 0))
      for (std::int32_t j = 0; j < s.n; ++j)
        if (s.tok[j] == x) return s.v[j];
    shard_probe pr{};
    children(u, pr);
    bool has = false;
    for (std::int32_t j = 0; j < pr.n; ++j) has |= pr.tok[j] == x;
    if (!has) {  // not a child's token (or past the batch): fetch x alone
      pr.n = 1;
      pr.tok[0] = x;
    }
    const bool both = pair && k != 2;
    double v[4 + 2 * shard_batch] = {};
    double* e = v;  // the probed entries
    if (both) {
      // The node's p and q entries, and (once per node) their masses and
      // validity into tp and tq: the walk checks them next when it accepts.
      pr.nrows = 2;
      pr.rows[0] = data.prow(u);
      pr.rows[1] = data.qrow(u);
      if (pm.node != u) {
        pm.node = -1;
        ex->run(pass_mass_pair{sh, pr, data.prow(u), data.qrow(u), walk_tp, walk_tq});
        ex->sum(4 + pr.size(), v);
        pm = pair_masses{u, v[0], v[2], v[1] == 0.0, v[3] == 0.0};
        e = v + 4;
      } else {
        ex->run(pass_probe{sh, pr});
        ex->sum(pr.size(), v);
      }
      keep(pr, e, 0, u, 1);
    } else {
      pr.nrows = 1;
      pr.rows[0] = real(r);
      ex->run(pass_probe{sh, pr});
      ex->sum(pr.size(), v);
      keep(pr, e, k, u);
    }
    const std::int32_t row = both && k == 1 ? 1 : 0;
    for (std::int32_t j = 0; j < pr.n; ++j)
      if (pr.tok[j] == x) return static_cast<float>(e[row * pr.n + j]);
    return 0.0f;  // unreachable: x is in the probe
  }

  void copy(row_ref r, float*, std::int64_t) const {
    node_id u = 0;
    (void)kind(r, u);
    residual_changed(u);
    ex->run(pass_copy{sh, real(r), R});
  }
  //! A residual entry by global token id: written by its owner only.
  void put(float*, std::int64_t x, float v) const {
    slot[2] = probe_slot{};
    ex->run(pass_put{sh, R, x, v});
  }
  //! Replicated host scratch (path, queue, frames): every rank writes its copy.
  template <class T>
  void put(T* a, std::int64_t i, T v) const noexcept {
    a[i] = v;
  }
  void sync() const noexcept {}
};

static_assert(verify_row_ops<shard_row_ops<host_shard_executor<self_collective>, parent_topology>>);

//! The walk's scratch of a shard in two parts: rows and tile sums where the
//! executor runs passes (plus a copy of the partition), the walk's own
//! arrays and the tag rows on the host.
struct shard_scratch {
  walk_scratch walk;  //!< R, tp, tq, tr: executor memory; the rest: host
  std::int64_t* bounds;
  float* tags;
};
inline void carve_shard_exec(workspace_carver& w, const owned_ranges& o, std::size_t ranges,
                             shard_scratch& s) noexcept {
  const walk_scratch e = carve_walk_scratch(w, o.width, o.tiles, 0);
  s.walk.R = e.R;
  s.walk.tp = e.tp;
  s.walk.tq = e.tq;
  s.walk.tr = e.tr;
  s.bounds = w.take<std::int64_t>(ranges + 1);
}
inline void carve_shard_host(workspace_carver& w, std::int32_t n, shard_scratch& s) noexcept {
  const walk_scratch h = carve_walk_scratch(w, 0, 0, n);
  s.walk.queue = h.queue;
  s.walk.depth = h.depth;
  s.walk.from = h.from;
  s.walk.path = h.path;
  s.walk.frames = h.frames;
  s.tags = w.take<float>(2 * static_cast<std::size_t>(n));
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
  if (own.width == 0) return walk_rows{nullptr, 0, 0, nullptr, 0, 0, V};  // a rank holding no columns reads nothing
  return walk_rows{p.data,
                   p.stride[0],
                   p.stride[1],
                   q.data,
                   q.data != nullptr ? q.stride[0] : 0,
                   q.data != nullptr ? q.stride[1] : 0,
                   V};
}

//! Bytes of the executor part and the host part of one rank's scratch.
inline bool shard_scratch_bytes(std::span<const std::int64_t> bounds, int rank, int size, std::int32_t nodes,
                                std::size_t& exec, std::size_t& host) noexcept {
  owned_ranges own{};
  if (nodes <= 0 || !own_ranges(bounds, rank, size, own).ok()) return false;
  shard_scratch s{};
  workspace_carver we, wh;
  carve_shard_exec(we, own, bounds.size() - 1, s);
  carve_shard_host(wh, nodes, s);
  exec = we.bytes_used();
  host = wh.bytes_used();
  return true;
}

//! Checks and carves the two scratch parts (the same checks for both).
inline status carve_shards(const owned_ranges& own, std::size_t ranges, std::int32_t n, std::span<std::byte> exec_ws,
                           std::span<std::byte> host_ws, shard_scratch& s) noexcept {
  workspace_carver we(exec_ws.data(), exec_ws.size()), wh(host_ws.data(), host_ws.size());
  carve_shard_exec(we, own, ranges, s);
  carve_shard_host(wh, n, s);
  if (we.overflowed() || wh.overflowed() || exec_ws.data() == nullptr || host_ws.data() == nullptr ||
      s.walk.depth == nullptr || s.walk.path == nullptr || s.bounds == nullptr || s.tags == nullptr)
    return make_status(status_code::buffer_too_small, "workspace smaller than sharded_verify_workspace_size");
  if (!aligned8(exec_ws.data()) || !aligned8(host_ws.data()))
    return make_status(status_code::invalid_argument, "workspace must be 8-byte aligned");
  return status::success();
}

//! One workspace holding both parts: the executor part first.
inline void split_workspace(std::span<const std::int64_t> bounds, int rank, int size, std::int32_t nodes,
                            std::span<std::byte> ws, std::span<std::byte>& exec_ws,
                            std::span<std::byte>& host_ws) noexcept {
  std::size_t e = 0, h = 0;
  if (!shard_scratch_bytes(bounds, rank, size, nodes, e, h) || ws.size() < e) {
    exec_ws = ws;
    host_ws = {};
    return;
  }
  exec_ws = ws.first(e);
  host_ws = ws.subspan(e);
}

//! The sticky failure of an executor (its own error(), then its collective's).
template <class Exec>
status executor_error(Exec& ex) {
  if constexpr (requires {
                  { ex.error() } -> std::convertible_to<status>;
                })
    if (!ex.error().ok()) return ex.error();
  return collective_error(ex.coll());
}

template <class Exec, verify_topology Topo, class Uni>
status sharded_walk(Exec& ex, const owned_ranges& own, const shard_scratch& sc, const std::int64_t* staged,
                    const Topo& topo, const verify_params& vp, const Uni& uni, const sharded_request& rq, walk_out& o) {
  const shard_span sh{staged, own.first, own.last, own.base, own.width};
  const std::int32_t n = topo.size();
  const bool probes = vp.mode != verify_mode::greedy && vp.mode != verify_mode::naive_matching;
  const shard_row_ops<Exec, Topo> ops{&ex,       sh,
                                      &topo,     sc.tags,
                                      n,         shard_rows(rq.p, rq.q, own, rq.V),
                                      sc.walk.R, uses_draft_probs(vp.mode),
                                      probes,    sc.walk.tp,
                                      sc.walk.tq};
  const walk_rows tagged{sc.tags, 1, 0, sc.tags + n, 1, 0, rq.V};  // row identities for the policy
  return verify_walk(topo, ops, uni, vp, tagged, sc.walk, o);
}

template <class Exec, class Uni>
status verify_tree_sharded_with(Exec& ex, std::span<const std::int64_t> bounds, const tree_view& tree,
                                const view2d<const float>& p, const view2d<const float>& q, const verify_params& vp,
                                const Uni& uni, const caller_uniforms* cu, std::span<std::byte> exec_ws,
                                std::span<std::byte> host_ws, std::span<node_id> path, std::span<token_id> tokens,
                                verify_result& result) {
  owned_ranges own{};
  shard_scratch sc{};
  const std::int32_t N = tree.size;
  auto local = [&]() -> status {
    SPECDEC_TRY(own_ranges(bounds, ex.rank(), ex.size(), own));
    if (N <= 0 || tree.parent == nullptr) return make_status(status_code::empty_input, "tree has no nodes");
    SPECDEC_TRY(check_shards(sharded_request{&own, bounds.back(), N, N > 1 ? N : 0, p, q}, vp));
    SPECDEC_TRY(carve_shards(own, bounds.size() - 1, N, exec_ws, host_ws, sc));
    const std::size_t cap = path.size() < tokens.size() ? path.size() : tokens.size();
    const bool has_q = q.data != nullptr || own.width == 0;
    SPECDEC_TRY(check_verify_request(tree.parent, tree.token, N, bounds.back(), vp, has_q,
                                     static_cast<std::int64_t>(cap), sc.walk.depth));
    if (tree.depth != nullptr) SPECDEC_TRY(validate_tree(tree));
    return status::success();
  };
  const std::int32_t nfp = N > 0 && tree.parent != nullptr && tree.token != nullptr ? N : 0;
  SPECDEC_TRY(agree_status(ex.coll(), local(), fingerprint_of(vp, bounds, nfp, tree.parent, tree.token, cu)));
  if (sc.walk.path == nullptr) return make_status(status_code::internal_error, "sharded walk scratch not carved");
  walk_out o{sc.walk.path, N, 0, 0, -1};
  const sharded_request rq{&own, bounds.back(), N, N > 1 ? N : 0, p, q};
  const std::int64_t* staged = ex.stage_bounds(bounds, sc.bounds);
  const status walked = sharded_walk(ex, own, sc, staged, parent_topology{tree.token, tree.parent, N}, vp, uni, rq, o);
  SPECDEC_TRY(executor_error(ex));  // a failed transport makes every result meaningless
  SPECDEC_TRY(walked);
  for (std::int32_t k = 0; k <= o.accepted; ++k) {
    path[static_cast<std::size_t>(k)] = sc.walk.path[k];
    if (k > 0) tokens[static_cast<std::size_t>(k - 1)] = tree.token[sc.walk.path[k]];
  }
  tokens[static_cast<std::size_t>(o.accepted)] = o.next;
  result = verify_result{o.accepted, o.last, o.next, status_code::ok};
  return status::success();
}

template <class Exec, class Uni>
status verify_chain_sharded_with(Exec& ex, std::span<const std::int64_t> bounds, std::span<const token_id> drafts,
                                 const view2d<const float>& p, const view2d<const float>& q, const verify_params& vp,
                                 const Uni& uni, const caller_uniforms* cu, std::span<std::byte> exec_ws,
                                 std::span<std::byte> host_ws, std::span<token_id> tokens, verify_result& result) {
  owned_ranges own{};
  shard_scratch sc{};
  const bool too_long = drafts.size() >= static_cast<std::size_t>(INT32_MAX);
  const std::int32_t n = too_long ? 1 : static_cast<std::int32_t>(drafts.size()) + 1;
  auto local = [&]() -> status {
    if (too_long) return make_status(status_code::invalid_argument, "too many drafts");
    SPECDEC_TRY(own_ranges(bounds, ex.rank(), ex.size(), own));
    SPECDEC_TRY(check_shards(sharded_request{&own, bounds.back(), n, n - 1, p, q}, vp));
    SPECDEC_TRY(validate_tokens(drafts.data(), n - 1, bounds.back()));
    SPECDEC_TRY(carve_shards(own, bounds.size() - 1, n, exec_ws, host_ws, sc));
    if (tokens.size() < static_cast<std::size_t>(n))
      return make_status(status_code::buffer_too_small, "tokens needs gamma + 1 entries");
    return status::success();
  };
  SPECDEC_TRY(agree_status(ex.coll(), local(), fingerprint_of(vp, bounds, n - 1, nullptr, drafts.data(), cu)));
  if (sc.walk.path == nullptr) return make_status(status_code::internal_error, "sharded walk scratch not carved");
  walk_out o{sc.walk.path, n, 0, 0, -1};
  const sharded_request rq{&own, bounds.back(), n, n - 1, p, q};
  const std::int64_t* staged = ex.stage_bounds(bounds, sc.bounds);
  const status walked = sharded_walk(ex, own, sc, staged, chain_topology{drafts.data(), n}, vp, uni, rq, o);
  SPECDEC_TRY(executor_error(ex));
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
  std::size_t e = 0, h = 0;
  return detail::shard_scratch_bytes(bounds, rank, size, nodes, e, h) ? e + h : 0;
}

//! The two parts of sharded_verify_workspace_size for an executor whose
//! passes run elsewhere (parallel/cuda_shard.cuh): `exec` bytes where the
//! passes run (the residual and tile sums of this rank's columns, a copy of
//! the partition), `host` bytes in host memory (the walk's arrays). False
//! for an invalid partition, rank or node count.
inline bool sharded_verify_workspace_parts(std::span<const std::int64_t> bounds, int rank, int size, std::int32_t nodes,
                                           std::size_t& exec, std::size_t& host) noexcept {
  return detail::shard_scratch_bytes(bounds, rank, size, nodes, exec, host);
}

//! Verifies one token tree on a vocabulary split over the ranks of `coll`.
//! Collective: every rank calls it with the same tree, parameters and
//! partition. bounds: ranks + 1 column bounds (rank r holds [bounds[r],
//! bounds[r + 1]), any range may be empty, V = bounds.back()). p, q: this
//! rank's N x (bounds[r + 1] - bounds[r]) shards (any strides; q read by
//! the sampled modes). Tokens in the tree and in the results are global
//! ids. Outputs and errors as verify_tree, on every rank (see the file
//! comment for how errors agree). Traffic: one collective per decision of
//! at most 37 scalars (counting_collective counts them; docs/parallel.md
//! lists them). Deterministic; no allocation.
template <collective C>
status verify_tree_sharded(C& coll, std::span<const std::int64_t> bounds, const tree_view& tree, view2d<const float> p,
                           view2d<const float> q, const verify_params& vp, std::span<std::byte> workspace,
                           std::span<node_id> path, std::span<token_id> tokens, verify_result& result) {
  host_shard_executor<C> ex(coll);
  std::span<std::byte> e, h;
  detail::split_workspace(bounds, coll.rank(), coll.size(), tree.size, workspace, e, h);
  return detail::verify_tree_sharded_with(ex, bounds, tree, p, q, vp,
                                          philox_uniforms{rng_stream{vp.seed, vp.request, vp.round}}, nullptr, e, h,
                                          path, tokens, result);
}

//! verify_tree_sharded with the caller's uniforms (the same on every rank).
template <collective C>
status verify_tree_sharded(C& coll, std::span<const std::int64_t> bounds, const tree_view& tree, view2d<const float> p,
                           view2d<const float> q, const verify_params& vp, const caller_uniforms& uniforms,
                           std::span<std::byte> workspace, std::span<node_id> path, std::span<token_id> tokens,
                           verify_result& result) {
  host_shard_executor<C> ex(coll);
  std::span<std::byte> e, h;
  detail::split_workspace(bounds, coll.rank(), coll.size(), tree.size, workspace, e, h);
  return detail::verify_tree_sharded_with(ex, bounds, tree, p, q, vp, uniforms, &uniforms, e, h, path, tokens, result);
}

//! Verifies a chain of drafts on a vocabulary split over the ranks of
//! `coll` (as verify_chain; shards and errors as verify_tree_sharded).
template <collective C>
status verify_chain_sharded(C& coll, std::span<const std::int64_t> bounds, std::span<const token_id> drafts,
                            view2d<const float> p, view2d<const float> q, const verify_params& vp,
                            std::span<std::byte> workspace, std::span<token_id> tokens, verify_result& result) {
  host_shard_executor<C> ex(coll);
  std::span<std::byte> e, h;
  const auto n = static_cast<std::int32_t>(drafts.size() < INT32_MAX ? drafts.size() + 1 : 1);
  detail::split_workspace(bounds, coll.rank(), coll.size(), n, workspace, e, h);
  return detail::verify_chain_sharded_with(ex, bounds, drafts, p, q, vp,
                                           philox_uniforms{rng_stream{vp.seed, vp.request, vp.round}}, nullptr, e, h,
                                           tokens, result);
}

//! verify_chain_sharded with the caller's uniforms (the same on every rank;
//! node i of the chain is draft position i).
template <collective C>
status verify_chain_sharded(C& coll, std::span<const std::int64_t> bounds, std::span<const token_id> drafts,
                            view2d<const float> p, view2d<const float> q, const verify_params& vp,
                            const caller_uniforms& uniforms, std::span<std::byte> workspace, std::span<token_id> tokens,
                            verify_result& result) {
  host_shard_executor<C> ex(coll);
  std::span<std::byte> e, h;
  const auto n = static_cast<std::int32_t>(drafts.size() < INT32_MAX ? drafts.size() + 1 : 1);
  detail::split_workspace(bounds, coll.rank(), coll.size(), n, workspace, e, h);
  return detail::verify_chain_sharded_with(ex, bounds, drafts, p, q, vp, uniforms, &uniforms, e, h, tokens, result);
}

//! verify_tree_sharded on a shard executor: the rows p, q and
//! `exec_workspace` in the memory the executor's passes read (device memory
//! for parallel/cuda_shard.cuh), the tree, `host_workspace` and the outputs
//! in host memory. Sizes from sharded_verify_workspace_parts. The walk runs
//! on the host; each decision is one executor pass and one collective of
//! its scalars (see docs/parallel.md).
template <class Exec>
status verify_tree_sharded_on(Exec& ex, std::span<const std::int64_t> bounds, const tree_view& tree,
                              view2d<const float> p, view2d<const float> q, const verify_params& vp,
                              std::span<std::byte> exec_workspace, std::span<std::byte> host_workspace,
                              std::span<node_id> path, std::span<token_id> tokens, verify_result& result) {
  return detail::verify_tree_sharded_with(ex, bounds, tree, p, q, vp,
                                          philox_uniforms{rng_stream{vp.seed, vp.request, vp.round}}, nullptr,
                                          exec_workspace, host_workspace, path, tokens, result);
}

//! verify_tree_sharded_on with the caller's uniforms (host memory, the
//! same on every rank; ranks that pass different uniforms all get
//! invalid_argument).
template <class Exec>
status verify_tree_sharded_on(Exec& ex, std::span<const std::int64_t> bounds, const tree_view& tree,
                              view2d<const float> p, view2d<const float> q, const verify_params& vp,
                              const caller_uniforms& uniforms, std::span<std::byte> exec_workspace,
                              std::span<std::byte> host_workspace, std::span<node_id> path, std::span<token_id> tokens,
                              verify_result& result) {
  return detail::verify_tree_sharded_with(ex, bounds, tree, p, q, vp, uniforms, &uniforms, exec_workspace,
                                          host_workspace, path, tokens, result);
}

//! verify_chain_sharded on a shard executor (as verify_tree_sharded_on).
template <class Exec>
status verify_chain_sharded_on(Exec& ex, std::span<const std::int64_t> bounds, std::span<const token_id> drafts,
                               view2d<const float> p, view2d<const float> q, const verify_params& vp,
                               std::span<std::byte> exec_workspace, std::span<std::byte> host_workspace,
                               std::span<token_id> tokens, verify_result& result) {
  return detail::verify_chain_sharded_with(ex, bounds, drafts, p, q, vp,
                                           philox_uniforms{rng_stream{vp.seed, vp.request, vp.round}}, nullptr,
                                           exec_workspace, host_workspace, tokens, result);
}

//! verify_chain_sharded_on with the caller's uniforms (as
//! verify_tree_sharded_on).
template <class Exec>
status verify_chain_sharded_on(Exec& ex, std::span<const std::int64_t> bounds, std::span<const token_id> drafts,
                               view2d<const float> p, view2d<const float> q, const verify_params& vp,
                               const caller_uniforms& uniforms, std::span<std::byte> exec_workspace,
                               std::span<std::byte> host_workspace, std::span<token_id> tokens, verify_result& result) {
  return detail::verify_chain_sharded_with(ex, bounds, drafts, p, q, vp, uniforms, &uniforms, exec_workspace,
                                           host_workspace, tokens, result);
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

//! verify_chain_partitioned with the caller's uniforms.
inline status verify_chain_partitioned(std::span<const std::int64_t> bounds, std::span<const token_id> drafts,
                                       view2d<const float> p, view2d<const float> q, const verify_params& vp,
                                       const caller_uniforms& uniforms, std::span<std::byte> workspace,
                                       std::span<token_id> tokens, verify_result& result) noexcept {
  self_collective one;
  return verify_chain_sharded(one, bounds, drafts, p, q, vp, uniforms, workspace, tokens, result);
}

}  // namespace specdec
