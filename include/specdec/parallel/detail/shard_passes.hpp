//! \file
//! The local half of every sharded row pass: SPECDEC_HD function objects
//! that run one pass over a participant's columns with an inner
//! row-operations policy (host_row_ops on the host, the CUDA block policy
//! of cuda/verify.cuh in a one-block kernel) and write the few scalars the
//! ranks then combine. The same objects run on host memory (tests, MPI) and
//! on device memory (parallel/cuda_shard.cuh), so the host tests exercise
//! the code the GPU runs.
//!
//! Every pass also writes a probe: the entries of up to two rows at up to
//! shard_batch global token ids (the children's tokens of the node the pass
//! is about), zero where this participant does not own the token. Summed
//! over ranks in rank order a probe is exact (one rank contributes each
//! entry, the others add +0.0), so the walk's reads of single entries ride
//! on the collective of the pass before them instead of one broadcast each.
#pragma once

#include <cfloat>
#include <cstdint>
#include <type_traits>

#include "specdec/core/config.hpp"
#include "specdec/core/status.hpp"
#include "specdec/parallel/collective.hpp"
#include "specdec/sample/order.hpp"
#include "specdec/tree/token_tree.hpp"

namespace specdec::detail {

//! The columns one participant owns, by value (passable to a kernel):
//! ranges [first, last) of the partition, columns [base, base + width).
//! `bounds` must be readable where the pass runs.
struct shard_span {
  const std::int64_t* bounds;
  std::int32_t first, last;
  std::int64_t base, width;
  SPECDEC_HD std::int64_t begin(std::int32_t k) const noexcept { return bounds[k]; }
  SPECDEC_HD std::int64_t len(std::int32_t k) const noexcept { return bounds[k + 1] - bounds[k]; }
  SPECDEC_HD row_ref sub(row_ref r, std::int32_t k) const noexcept { return r.shifted(begin(k) - base); }
  SPECDEC_HD float* sub(float* R, std::int32_t k) const noexcept { return R + (begin(k) - base); }
  SPECDEC_HD bool owns(std::int64_t x) const noexcept { return x >= base && x < base + width; }
};

//! Most token ids one probe carries (a node with more children fetches the
//! rest on demand).
inline constexpr int shard_batch = 16;

//! Entries of rows[0..nrows) at tok[0..n), written row-major after a pass's
//! own scalars.
struct shard_probe {
  row_ref rows[2];
  std::int32_t nrows;
  std::int32_t n;
  token_id tok[shard_batch];
  SPECDEC_HD int size() const noexcept { return nrows * n; }
};

//! Writes the probe's owned entries (+0.0 elsewhere) at out[0..size).
SPECDEC_NO_EXEC_CHECK
template <class Inner>
SPECDEC_HD void write_probe(const Inner& ops, const shard_span& sh, const shard_probe& pr, double* out) {
  for (std::int32_t a = 0; a < pr.nrows; ++a)
    for (std::int32_t j = 0; j < pr.n; ++j) {
      const std::int64_t x = pr.tok[j];
      ops.put(out, a * pr.n + j, sh.owns(x) ? static_cast<double>(pr.rows[a][x - sh.base]) : 0.0);
    }
}

//! Only the probe (a read of single entries no pass precedes).
struct pass_probe {
  shard_span sh;
  shard_probe pr;
  SPECDEC_NO_EXEC_CHECK
  template <class Inner>
  SPECDEC_HD void operator()(const Inner& ops, double* d, std::int64_t*) const {
    write_probe(ops, sh, pr, d);
  }
};

//! d[0] = mass of the owned ranges of r (tile sums into `tiles`), d[1] = 1
//! when a range holds a bad entry (else 0).
SPECDEC_NO_EXEC_CHECK
template <class Inner>
SPECDEC_HD void put_shard_mass(const Inner& ops, const shard_span& sh, row_ref r, double* tiles, double* d) {
  bool ok = true;
  double m = 0.0;
  for (std::int32_t k = sh.first; k < sh.last; ++k) {
    double mk = 0.0;
    if (!ops.mass(sh.sub(r, k), sh.len(k), tiles, mk)) ok = false;
    m += mk;
    tiles += sum_tile_count(sh.len(k));
  }
  ops.put(d, 0, m);
  ops.put(d, 1, ok ? 0.0 : 1.0);
}

//! d = {mass, bad flag, probe}; tile sums of every owned range into tiles.
struct pass_mass {
  shard_span sh;
  shard_probe pr;
  row_ref r;
  double* tiles;
  SPECDEC_NO_EXEC_CHECK
  template <class Inner>
  SPECDEC_HD void operator()(const Inner& ops, double* d, std::int64_t*) const {
    put_shard_mass(ops, sh, r, tiles, d);
    write_probe(ops, sh, pr, d + 2);
  }
};

//! d = {mass p, bad p, mass q, bad q, probe}: a node's p and q rows checked
//! in one pass (one collective instead of two).
struct pass_mass_pair {
  shard_span sh;
  shard_probe pr;
  row_ref p, q;
  double *tp, *tq;
  SPECDEC_NO_EXEC_CHECK
  template <class Inner>
  SPECDEC_HD void operator()(const Inner& ops, double* d, std::int64_t*) const {
    put_shard_mass(ops, sh, p, tp, d);
    put_shard_mass(ops, sh, q, tq, d + 2);
    write_probe(ops, sh, pr, d + 4);
  }
};

//! d = {mass p, mass q, mass R, bad p, bad q, probe}; R = max(p - q, 0).
struct pass_first_residual {
  shard_span sh;
  shard_probe pr;
  row_ref p, q;
  float* R;
  double *tp, *tq, *tr;
  SPECDEC_NO_EXEC_CHECK
  template <class Inner>
  SPECDEC_HD void operator()(const Inner& ops, double* d, std::int64_t*) const {
    double v[5] = {0.0, 0.0, 0.0, 0.0, 0.0};
    double *a = tp, *b = tq, *c = tr;
    for (std::int32_t k = sh.first; k < sh.last; ++k) {
      double ma = 0.0, mb = 0.0, mc = 0.0;
      bool oa = true, ob = true;
      ops.first_residual(sh.sub(p, k), sh.sub(q, k), sh.sub(R, k), sh.len(k), a, b, c, ma, mb, mc, oa, ob);
      v[0] += ma;
      v[1] += mb;
      v[2] += mc;
      if (!oa) v[3] = 1.0;
      if (!ob) v[4] = 1.0;
      const std::int64_t nt = sum_tile_count(sh.len(k));
      a += nt;
      b += nt;
      c += nt;
    }
    for (int i = 0; i < 5; ++i) ops.put(d, i, v[i]);
    write_probe(ops, sh, pr, d + 5);
  }
};

//! d = {mass of R, probe}: R = max(R - s q, 0) (scaled: R = max(p - s q, 0)).
struct pass_residual {
  shard_span sh;
  shard_probe pr;
  row_ref p, q;  //!< p unused unless scaled
  float* R;
  float s;
  bool scaled;
  double* tr;
  SPECDEC_NO_EXEC_CHECK
  template <class Inner>
  SPECDEC_HD void operator()(const Inner& ops, double* d, std::int64_t*) const {
    double m = 0.0;
    double* t = tr;
    for (std::int32_t k = sh.first; k < sh.last; ++k) {
      if (!scaled) {
        m += ops.update_residual(sh.sub(q, k), sh.sub(R, k), s, sh.len(k), t);
      } else if constexpr (requires { ops.scaled_residual(p, q, R, s, sh.len(k), t); }) {
        m += ops.scaled_residual(sh.sub(p, k), sh.sub(q, k), sh.sub(R, k), s, sh.len(k), t);
      } else {  // bit for bit the same as the one-read pass (row_ops.hpp)
        ops.copy(sh.sub(p, k), sh.sub(R, k), sh.len(k));
        m += ops.update_residual(sh.sub(q, k), sh.sub(R, k), s, sh.len(k), t);
      }
      t += sum_tile_count(sh.len(k));
    }
    ops.put(d, 0, m);
    write_probe(ops, sh, pr, d + 1);
  }
};

//! d = {mass, sum p log p, bad flag, probe}.
struct pass_entropy {
  shard_span sh;
  shard_probe pr;
  row_ref r;
  double* tiles;
  SPECDEC_NO_EXEC_CHECK
  template <class Inner>
  SPECDEC_HD void operator()(const Inner& ops, double* d, std::int64_t*) const {
    double v[3] = {0.0, 0.0, 0.0};
    double* t = tiles;
    for (std::int32_t k = sh.first; k < sh.last; ++k) {
      double mk = 0.0, hk = 0.0;
      if (!ops.entropy(sh.sub(r, k), sh.len(k), t, mk, hk)) v[2] = 1.0;
      v[0] += mk;
      v[1] += hk;
      t += sum_tile_count(sh.len(k));
    }
    for (int i = 0; i < 3; ++i) ops.put(d, i, v[i]);
    write_probe(ops, sh, pr, d + 3);
  }
};

//! d = {mass of the owned ranges from their tile sums} (the sample's prefix).
struct pass_owned_mass {
  shard_span sh;
  const double* tiles;
  SPECDEC_NO_EXEC_CHECK
  template <class Inner>
  SPECDEC_HD void operator()(const Inner& ops, double* d, std::int64_t*) const {
    double c = 0.0;
    const double* t = tiles;
    for (std::int32_t k = sh.first; k < sh.last; ++k) {
      c += sum_tiles(t, sum_tile_count(sh.len(k)));
      t += sum_tile_count(sh.len(k));
    }
    ops.put(d, 0, c);
  }
};

//! l = {-(sampled token) or "none", last positive token or -1}: the
//! inverse-CDF scan of the owned ranges, `c` the mass of the lower ranks.
struct pass_sample_scan {
  shard_span sh;
  row_ref r;
  const double* tiles;
  double c;
  double target;
  SPECDEC_NO_EXEC_CHECK
  template <class Inner>
  SPECDEC_HD void operator()(const Inner& ops, double*, std::int64_t* l) const {
    std::int64_t found = -1, last = -1;
    double cum = c;
    const double* t = tiles;
    for (std::int32_t k = sh.first; k < sh.last; ++k) {
      const std::int64_t nt = sum_tile_count(sh.len(k));
      const row_ref rk = sh.sub(r, k);
      const double mk = sum_tiles(t, nt);
      if (found < 0 && target < cum + mk) {
        std::int64_t i = 0;
        double cc = cum;
        while (found < 0 && locate_tile(t, nt, target, i, cc)) {
          const token_id y = ops.scan_tile(rk, sh.len(k), i, cc, target);
          if (y >= 0) found = sh.begin(k) + y;
          cc += t[i++];
        }
      }
      const token_id lp = ops.last_positive(rk, sh.len(k));
      if (lp >= 0) last = sh.begin(k) + lp;
      cum += mk;
      t += nt;
    }
    ops.put(l, 0, found >= 0 ? -found : no_key);
    ops.put(l, 1, last);
  }
};

//! l = {best rank_key or no_key, NaN flag}: argmax in the specdec tie order.
struct pass_argmax {
  shard_span sh;
  row_ref r;
  SPECDEC_NO_EXEC_CHECK
  template <class Inner>
  SPECDEC_HD void operator()(const Inner& ops, double*, std::int64_t* l) const {
    std::int64_t best = no_key, nan = 0;
    for (std::int32_t k = sh.first; k < sh.last; ++k) {
      if (sh.len(k) == 0) continue;
      token_id a = 0;
      if (!ops.argmax(sh.sub(r, k), sh.len(k), a)) nan = 1;
      const float x = sh.sub(r, k)[a];
      if (x >= -FLT_MAX) {  // the inner argmax picks only entries above -inf
        const std::int64_t key = rank_key(x, sh.begin(k) + a);
        best = key > best ? key : best;
      }
    }
    ops.put(l, 0, best);
    ops.put(l, 1, nan);
  }
};

//! l = {2: a non-finite entry, 1: a negative entry, 0: neither}.
struct pass_classify {
  shard_span sh;
  row_ref r;
  SPECDEC_NO_EXEC_CHECK
  template <class Inner>
  SPECDEC_HD void operator()(const Inner& ops, double*, std::int64_t* l) const {
    std::int64_t worst = 0;
    for (std::int32_t k = sh.first; k < sh.last; ++k) {
      if (sh.len(k) == 0) continue;
      const status_code c = ops.classify(sh.sub(r, k), sh.len(k));
      const std::int64_t w = c == status_code::non_finite ? 2 : c == status_code::negative_probability ? 1 : 0;
      worst = w > worst ? w : worst;
    }
    ops.put(l, 0, worst);
  }
};

//! R = the owned columns of r (no scalars).
struct pass_copy {
  shard_span sh;
  row_ref r;
  float* R;
  SPECDEC_NO_EXEC_CHECK
  template <class Inner>
  SPECDEC_HD void operator()(const Inner& ops, double*, std::int64_t*) const {
    ops.copy(r, R, sh.width);
  }
};

//! R[x - base] = v where x is owned (no scalars).
struct pass_put {
  shard_span sh;
  float* R;
  std::int64_t x;
  float v;
  SPECDEC_NO_EXEC_CHECK
  template <class Inner>
  SPECDEC_HD void operator()(const Inner& ops, double*, std::int64_t*) const {
    if (sh.owns(x)) ops.put(R, x - sh.base, v);
    ops.sync();
  }
};

//! Any pass above as one trivially copyable record, so that a batch of
//! requests can queue different passes and one kernel (a block per
//! request, parallel/cuda_shard.cuh) or the host (parallel/shard_batch.hpp)
//! runs them from an array. `run` dispatches on the kind.
struct any_shard_pass {
  enum class kind_t : std::int32_t {
    probe,
    mass,
    mass_pair,
    first_residual,
    residual,
    entropy,
    owned_mass,
    sample_scan,
    argmax,
    classify,
    copy,
    put
  };
  kind_t kind = kind_t::probe;
  union passes {
    SPECDEC_HD passes() noexcept {}  // NOLINT: the active member is set by the constructor of any_shard_pass
    pass_probe probe;
    pass_mass mass;
    pass_mass_pair mass_pair;
    pass_first_residual first_residual;
    pass_residual residual;
    pass_entropy entropy;
    pass_owned_mass owned_mass;
    pass_sample_scan sample_scan;
    pass_argmax argmax;
    pass_classify classify;
    pass_copy copy;
    pass_put put;
  } u;

  any_shard_pass() noexcept { u.probe = pass_probe{}; }
  explicit any_shard_pass(const pass_probe& f) noexcept : kind(kind_t::probe) { u.probe = f; }
  explicit any_shard_pass(const pass_mass& f) noexcept : kind(kind_t::mass) { u.mass = f; }
  explicit any_shard_pass(const pass_mass_pair& f) noexcept : kind(kind_t::mass_pair) { u.mass_pair = f; }
  explicit any_shard_pass(const pass_first_residual& f) noexcept : kind(kind_t::first_residual) {
    u.first_residual = f;
  }
  explicit any_shard_pass(const pass_residual& f) noexcept : kind(kind_t::residual) { u.residual = f; }
  explicit any_shard_pass(const pass_entropy& f) noexcept : kind(kind_t::entropy) { u.entropy = f; }
  explicit any_shard_pass(const pass_owned_mass& f) noexcept : kind(kind_t::owned_mass) { u.owned_mass = f; }
  explicit any_shard_pass(const pass_sample_scan& f) noexcept : kind(kind_t::sample_scan) { u.sample_scan = f; }
  explicit any_shard_pass(const pass_argmax& f) noexcept : kind(kind_t::argmax) { u.argmax = f; }
  explicit any_shard_pass(const pass_classify& f) noexcept : kind(kind_t::classify) { u.classify = f; }
  explicit any_shard_pass(const pass_copy& f) noexcept : kind(kind_t::copy) { u.copy = f; }
  explicit any_shard_pass(const pass_put& f) noexcept : kind(kind_t::put) { u.put = f; }

  SPECDEC_NO_EXEC_CHECK
  template <class Inner>
  SPECDEC_HD void run(const Inner& ops, double* d, std::int64_t* l) const {
    switch (kind) {
      case kind_t::probe:
        return u.probe(ops, d, l);
      case kind_t::mass:
        return u.mass(ops, d, l);
      case kind_t::mass_pair:
        return u.mass_pair(ops, d, l);
      case kind_t::first_residual:
        return u.first_residual(ops, d, l);
      case kind_t::residual:
        return u.residual(ops, d, l);
      case kind_t::entropy:
        return u.entropy(ops, d, l);
      case kind_t::owned_mass:
        return u.owned_mass(ops, d, l);
      case kind_t::sample_scan:
        return u.sample_scan(ops, d, l);
      case kind_t::argmax:
        return u.argmax(ops, d, l);
      case kind_t::classify:
        return u.classify(ops, d, l);
      case kind_t::copy:
        return u.copy(ops, d, l);
      case kind_t::put:
        return u.put(ops, d, l);
    }
  }
};
static_assert(std::is_trivially_copyable_v<any_shard_pass>);

}  // namespace specdec::detail
