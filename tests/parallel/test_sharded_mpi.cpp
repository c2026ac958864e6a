// Vocabulary-parallel verification over MPI (run with mpirun -np 1..4):
// every rank holds an uneven column range (an empty one from 3 ranks on, V
// not divisible by the rank count) and the sharded result must equal the
// single-process partitioned-order result token for token, for random
// trees, chains and every mode; bad input on one rank must give the same
// status on all ranks; sharded top-k (one row, and every row of a level)
// must equal the full-row top-k.
// Exit 0 when every check passed on every rank.
#include <mpi.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <vector>

#include "sharded_cases.hpp"
#include "specdec/parallel/mpi.hpp"
#include "specdec/parallel/sharded_topk.hpp"
#include "specdec/parallel/sharded_verify.hpp"

using namespace specdec;
using namespace sharded_test;

namespace {

int failures = 0;

void check(bool ok, const char* what, int rank) {
  if (!ok) {
    ++failures;
    std::fprintf(stderr, "rank %d: FAILED %s\n", rank, what);
  }
}

// Whether (code, index) is the same on every rank.
bool same_everywhere(MPI_Comm comm, const outcome& o) {
  std::int64_t v[4] = {static_cast<std::int64_t>(o.code), o.index, -static_cast<std::int64_t>(o.code), -o.index};
  MPI_Allreduce(MPI_IN_PLACE, v, 4, MPI_INT64_T, MPI_MAX, comm);
  return v[0] == -v[2] && v[1] == -v[3];
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  mpi_collective coll(MPI_COMM_WORLD);
  const int P = coll.size(), r = coll.rank();
  long long runs = 0, accepted_runs = 0;

  for (const std::int64_t V : {std::int64_t{37}, std::int64_t{3001}}) {
    const auto bounds = uneven_bounds(V, P);
    for (std::uint64_t seed = 1; seed <= 5; ++seed) {
      const auto c = make_tree_case(seed * 1009 + static_cast<std::uint64_t>(V), V, 24, seed % 2 == 0);
      for (const verify_mode m : all_modes) {
        verify_params vp{};
        vp.mode = m;
        vp.seed = seed;
        vp.request = 7;
        const outcome want = run_partitioned(c, bounds, vp);
        const outcome got = run_sharded(coll, c, bounds, vp);
        check(want.code == status_code::ok, "partitioned reference succeeded", r);
        if (!(got == want))
          std::fprintf(stderr, "rank %d: V %lld seed %llu mode %s: sharded != partitioned\n", r,
                       static_cast<long long>(V), static_cast<unsigned long long>(seed), verify_mode_name(m));
        check(got == want, "sharded == partitioned", r);
        ++runs;
        accepted_runs += want.accepted > 0;
      }
    }
    // Caller-supplied uniforms (the same buffer on every rank).
    const auto c = make_tree_case(77, V, 12);
    std::vector<double> u(static_cast<std::size_t>(c.N) * 16);
    for (std::size_t i = 0; i < u.size(); ++i) u[i] = static_cast<double>((i * 2654435761u) % 1000003) / 1000003.0;
    const caller_uniforms cu{u.data(), c.N, 16};
    verify_params vp{};
    std::vector<std::byte> w1(sharded_verify_workspace_size(bounds, 0, 1, c.N) + 8),
        w2(sharded_verify_workspace_size(bounds, r, P, c.N) + 8);
    std::vector<node_id> pa(static_cast<std::size_t>(c.N)), pb(pa.size());
    std::vector<token_id> ta(pa.size()), tb(pa.size());
    verify_result ra{}, rb{};
    const std::int64_t b0 = bounds[static_cast<std::size_t>(r)], b1 = bounds[static_cast<std::size_t>(r) + 1];
    const auto ps = shard_of(c.p, V, c.N, b0, b1), qs = shard_of(c.q, V, c.N, b0, b1);
    const status sa =
        verify_tree_partitioned(bounds, c.view(), matrix(c.p, c.N, V), matrix(c.q, c.N, V), vp, w1, pa, ta, ra, &cu);
    const status sb = verify_tree_sharded(coll, bounds, c.view(), matrix(ps, c.N, b1 - b0), matrix(qs, c.N, b1 - b0),
                                          vp, w2, pb, tb, rb, &cu);
    check(sa.ok() && sb.ok() && record(sa, ra, pa, ta) == record(sb, rb, pb, tb), "caller uniforms", r);
  }

  // Chains in every mode (block verification needs a chain).
  {
    const std::int64_t V = 2100;
    const auto bounds = uneven_bounds(V, P);
    const std::int64_t b0 = bounds[static_cast<std::size_t>(r)], b1 = bounds[static_cast<std::size_t>(r) + 1];
    for (const std::uint64_t cs : {7u, 8u, 9u}) {
      const auto c = make_tree_case(cs, V, 6);
      std::vector<token_id> drafts(c.token.begin() + 1, c.token.end());
      const auto ps = shard_of(c.p, V, c.N, b0, b1), qs = shard_of(c.q, V, c.N, b0, b1);
      for (const verify_mode m : chain_modes) {
        verify_params vp{};
        vp.mode = m;
        vp.seed = cs;
        std::vector<std::byte> w1(sharded_verify_workspace_size(bounds, 0, 1, c.N) + 8),
            w2(sharded_verify_workspace_size(bounds, r, P, c.N) + 8);
        std::vector<token_id> ta(static_cast<std::size_t>(c.N)), tb(ta.size());
        verify_result ra{}, rb{};
        const status sa =
            verify_chain_partitioned(bounds, drafts, matrix(c.p, c.N, V), matrix(c.q, c.N, V), vp, w1, ta, ra);
        const status sb = verify_chain_sharded(coll, bounds, drafts, matrix(ps, c.N, b1 - b0), matrix(qs, c.N, b1 - b0),
                                               vp, w2, tb, rb);
        bool same = sa.ok() && sb.ok() && ra.accepted == rb.accepted && ra.next_token == rb.next_token;
        for (std::int32_t k = 0; same && k <= ra.accepted; ++k)
          same = ta[static_cast<std::size_t>(k)] == tb[static_cast<std::size_t>(k)];
        if (!same)
          std::fprintf(stderr, "rank %d: chain %llu mode %s differs\n", r, static_cast<unsigned long long>(cs),
                       verify_mode_name(m));
        check(same, "sharded chain == partitioned chain", r);
      }
    }
  }

  // Bad input on one rank: the same status on all ranks, no hang.
  {
    const std::int64_t V = 3001;
    const auto bounds = uneven_bounds(V, P);
    const int last = P - 1;  // holds columns in every partition uneven_bounds makes
    auto c = make_tree_case(99, V, 10);
    verify_params vp{};
    auto nan_case = c;
    nan_case.p[static_cast<std::size_t>(bounds[static_cast<std::size_t>(last)])] =
        std::numeric_limits<float>::quiet_NaN();
    for (const verify_mode m : all_modes) {
      vp.mode = m;
      const outcome o = run_sharded(coll, nan_case, bounds, vp);
      check(o.code == status_code::non_finite && o.index == 0, "NaN on the last rank -> non_finite at node 0", r);
      check(same_everywhere(MPI_COMM_WORLD, o), "NaN: same status on all ranks", r);
    }
    auto bad = c;
    if (r == last) bad.token[5] = static_cast<token_id>(V + 3);
    vp.mode = verify_mode::sampled_iid;
    const outcome o = run_sharded(coll, bad, bounds, vp);
    check(o.code == status_code::token_out_of_range && o.index == 5, "bad token on one rank", r);
    check(same_everywhere(MPI_COMM_WORLD, o), "bad token: same status on all ranks", r);
  }

  // Sharded top-k vs the full row.
  {
    std::mt19937_64 g(5);
    for (const bool ties : {false, true}) {
      const std::int64_t V = 4099;
      const auto row = random_row(g, V, ties);
      const auto bounds = uneven_bounds(V, P);
      const std::int32_t k = 8;
      token_id wt[8], gt[8];
      float wv[8], gv[8];
      std::int32_t wn = 0, gn = 0;
      check(detail::topk_probabilities(row, k, wt, wv, wn).ok(), "full-row top-k", r);
      const std::int64_t b0 = bounds[static_cast<std::size_t>(r)], b1 = bounds[static_cast<std::size_t>(r) + 1];
      std::vector<float> mine(row.begin() + b0, row.begin() + b1);
      std::vector<std::int64_t> keys(sharded_topk_workspace_size(k, P) / 8);
      check(sharded_topk_probabilities(coll, mine, b0, V, k, keys, gt, gv, gn).ok(), "sharded top-k ok", r);
      bool same = wn == gn;
      for (std::int32_t j = 0; same && j < wn; ++j) same = wt[j] == gt[j] && wv[j] == gv[j];
      check(same, "sharded top-k == full-row top-k", r);
    }
  }

  // Level-batched sharded top-k (one MPI_Allgather of the keys per level)
  // vs the full rows, masses in the partitioned order; a NaN on the last
  // rank gives the same status everywhere.
  {
    std::mt19937_64 g(11);
    const std::int64_t V = 4099;
    const auto bounds = uneven_bounds(V, P);
    const std::int64_t b0 = bounds[static_cast<std::size_t>(r)], b1 = bounds[static_cast<std::size_t>(r) + 1];
    const std::int32_t n = 12, k = 8;
    std::vector<float> m;
    for (std::int32_t i = 0; i < n; ++i) {
      const auto row = random_row(g, V, i % 2 == 1);
      m.insert(m.end(), row.begin(), row.end());
    }
    for (const bool nan : {false, true}) {
      if (nan) m[static_cast<std::size_t>(4 * V + bounds[static_cast<std::size_t>(P - 1)] + 2)] = std::nanf("");
      const auto mine = shard_of(m, V, n, b0, b1);
      std::vector<std::byte> ws(sharded_topk_rows_workspace_size(n, b1 - b0, k, P));
      std::vector<token_id> tok(static_cast<std::size_t>(n * k));
      std::vector<float> val(tok.size());
      std::vector<std::int32_t> counts(static_cast<std::size_t>(n));
      std::vector<double> mass(static_cast<std::size_t>(n));
      counting_collective<mpi_collective> cc(coll);
      const status s = sharded_topk_rows(cc, b0, V, matrix(mine, n, b1 - b0), k, ws, make_view(tok.data(), n, k),
                                         make_view(val.data(), n, k), counts, mass);
      outcome o;
      o.code = s.code();
      o.index = s.index();
      check(same_everywhere(MPI_COMM_WORLD, o), "sharded top-k rows: same status on all ranks", r);
      if (nan) {
        check(s.code() == status_code::non_finite && s.index() == bounds[static_cast<std::size_t>(P - 1)] + 2,
              "sharded top-k rows: NaN -> non_finite at its global token", r);
        continue;
      }
      check(s.ok() && cc.traffic().calls == 2, "sharded top-k rows: ok in two collectives", r);
      bool same = true;
      for (std::int32_t i = 0; i < n; ++i) {
        const std::span<const float> row(m.data() + i * V, static_cast<std::size_t>(V));
        token_id wt[8];
        float wv[8];
        std::int32_t wn = 0;
        double wm = 0.0;  // the row's sum in double: the tiled order differs by rounding only
        for (const float x : row) wm += static_cast<double>(x);
        check(detail::topk_probabilities(row, k, wt, wv, wn).ok(), "full-row top-k", r);
        same = same && counts[static_cast<std::size_t>(i)] == wn;
        for (std::int32_t j = 0; same && j < wn; ++j)
          same = wt[j] == tok[static_cast<std::size_t>(i * k + j)] && wv[j] == val[static_cast<std::size_t>(i * k + j)];
        same = same && std::abs(mass[static_cast<std::size_t>(i)] - wm) <= 1e-6 * wm;
      }
      check(same, "sharded top-k rows == full-row top-k", r);
    }
  }

  int total = 0;
  MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (r == 0)
    std::printf("specdec sharded MPI test, %d ranks: %lld tree runs (%lld with accepted drafts), %d failures\n", P,
                runs, accepted_runs, total);
  MPI_Finalize();
  return total == 0 ? 0 : 1;
}
