//! \file
//! The row-operations policy of a vocabulary shard (shard_row_ops), run by
//! the host verification walk (verify/walk.hpp) on every rank of
//! parallel/sharded_verify.hpp: each pass is one executor pass
//! (parallel/shard_executor.hpp, parallel/detail/shard_passes.hpp) plus one
//! collective of its scalars. Internal.
#pragma once

#include <cstddef>
#include <cstdint>

#include "specdec/core/status.hpp"
#include "specdec/parallel/collective.hpp"
#include "specdec/parallel/detail/shard_passes.hpp"
#include "specdec/parallel/shard_executor.hpp"
#include "specdec/sample/order.hpp"
#include "specdec/tree/token_tree.hpp"
#include "specdec/verify/policy.hpp"
#include "specdec/verify/walk_state.hpp"

namespace specdec::detail {

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
    const auto i = static_cast<std::int32_t>(r.f32() - tags);
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

}  // namespace specdec::detail
