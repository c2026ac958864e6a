// Vocabulary-parallel verification over MPI: bytes each rank puts into
// collectives per verified tree, next to the bytes of gathering the rows,
// and host time per verification (median of repetitions); then the same
// for the level-batched sharded top-k of drafting (8 and 64 frontier rows).
//   mpirun -np P [--oversubscribe --mca mpi_yield_when_idle 1] sharded_mpi_timing [V] [nodes] [reps]
// (defaults V = 128256, 64 nodes, 20 repetitions; OpenMPI as root also
// needs OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 and
// --oversubscribe when P exceeds the cores). The vocabulary is split evenly
// (the last rank takes the remainder). Rank 0 prints one line per mode. The
// tree is the seed-3 random tree of tests/parallel/sharded_cases.hpp (drafts
// drawn from rows close to the target, so several are accepted).
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <span>
#include <vector>

#include "parallel/sharded_cases.hpp"
#include "specdec/parallel/collective.hpp"
#include "specdec/parallel/mpi.hpp"
#include "specdec/parallel/sharded_topk.hpp"
#include "specdec/parallel/sharded_verify.hpp"
#include "specdec/verify/tree_verify.hpp"

using namespace specdec;

namespace {

// What every rank reports of one sharded workload: the slowest rank's
// median time and the most bytes and calls any rank put into collectives.
struct sharded_figures {
  double median_s = 0.0;
  std::int64_t bytes = 0, calls = 0;
};

// Runs `call` (returns a status) `reps` times between barriers on every
// rank, with the counting collective reset before each run; aborts on an
// error. Collective: every rank calls it; rank 0's result holds the maxima.
template <class Counting, class Call>
sharded_figures time_sharded(Counting& coll, int reps, Call&& call) {
  std::vector<double> t;
  collective_traffic tr{};
  for (int i = 0; i < reps; ++i) {
    MPI_Barrier(MPI_COMM_WORLD);
    coll.reset();
    const double t0 = MPI_Wtime();
    const status s = call();
    const double t1 = MPI_Wtime();
    if (!s.ok()) {
      std::fprintf(stderr, "rank %d: %s\n", coll.rank(), s.message());
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    t.push_back(t1 - t0);
    tr = coll.traffic();
  }
  std::sort(t.begin(), t.end());
  sharded_figures out;
  double med = t[t.size() / 2];
  MPI_Reduce(&med, &out.median_s, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  std::int64_t mine[2] = {tr.bytes, tr.calls}, most[2] = {0, 0};
  MPI_Reduce(mine, most, 2, MPI_INT64_T, MPI_MAX, 0, MPI_COMM_WORLD);
  out.bytes = most[0];
  out.calls = most[1];
  return out;
}

// Median seconds of `reps` runs of `call` in this process alone.
template <class Call>
double time_local(int reps, Call&& call) {
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const double t0 = MPI_Wtime();
    call();
    t.push_back(MPI_Wtime() - t0);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  mpi_collective mpi(MPI_COMM_WORLD);
  counting_collective<mpi_collective> coll(mpi);
  const int P = coll.size(), r = coll.rank();
  const std::int64_t V = argc > 1 ? std::atoll(argv[1]) : 128256;
  const auto N = static_cast<std::int32_t>(argc > 2 ? std::atoi(argv[2]) : 64);
  const int reps = argc > 3 ? std::atoi(argv[3]) : 20;

  std::vector<std::int64_t> bounds(static_cast<std::size_t>(P) + 1);
  for (int k = 0; k <= P; ++k) bounds[static_cast<std::size_t>(k)] = k == P ? V : V / P * k;
  const std::int64_t b0 = bounds[static_cast<std::size_t>(r)], b1 = bounds[static_cast<std::size_t>(r) + 1];
  const auto c = sharded_test::make_tree_case(3, V, N);
  const auto ps = sharded_test::shard_of(c.p, V, N, b0, b1), qs = sharded_test::shard_of(c.q, V, N, b0, b1);
  std::vector<std::byte> ws(sharded_verify_workspace_size(bounds, r, P, N) + 8);
  std::vector<std::byte> ws1(verify_workspace_size(V, N) + 8);
  std::vector<node_id> path(static_cast<std::size_t>(N));
  std::vector<token_id> tokens(static_cast<std::size_t>(N));

  if (r == 0)
    std::printf(
        "ranks %d, V %lld, %d-node tree, %d reps; payload bytes a rank puts into collectives per tree vs "
        "gathering its rows (N x V/P floats of p, and of q for the sampled modes)\n",
        P, static_cast<long long>(V), N, reps);
  for (const verify_mode m : sharded_test::all_modes) {
    verify_params vp{};
    vp.mode = m;
    vp.seed = 1;
    verify_result res{};
    const sharded_figures f = time_sharded(coll, reps, [&] {
      return verify_tree_sharded(coll, bounds, c.view(), sharded_test::matrix(ps, N, b1 - b0),
                                 sharded_test::matrix(qs, N, b1 - b0), vp, ws, path, tokens, res);
    });
    if (r == 0) {
      const double one = time_local(reps, [&] {
        (void)verify_tree(c.view(), sharded_test::matrix(c.p, N, V), sharded_test::matrix(c.q, N, V), vp, ws1, path,
                          tokens, res);
      });
      const double rows = uses_draft_probs(m) ? 2.0 : 1.0;
      const double gather = rows * static_cast<double>(N) * static_cast<double>((V + P - 1) / P) * 4.0;
      std::printf(
          "%-28s accepted %2d | max per rank: %6lld B in %4lld collectives | gathering rows: %10.0f B per rank "
          "(%.0fx) | sharded median %8.3f ms (slowest rank) | one process, full rows %8.3f ms\n",
          verify_mode_name(m), res.accepted, static_cast<long long>(f.bytes), static_cast<long long>(f.calls), gather,
          gather / static_cast<double>(f.bytes > 0 ? f.bytes : 1), f.median_s * 1e3, one * 1e3);
    }
  }
  // Drafting: the level-batched sharded top-k of n frontier rows (k = 8),
  // one MPI_Allgather of the keys per level, vs gathering the rows.
  if (r == 0)
    std::printf(
        "sharded top-k per tree level (k 8): payload bytes a rank puts into collectives vs gathering its rows "
        "(n x V/P floats)\n");
  for (const std::int32_t n : {8, 64}) {
    const std::int32_t k = 8;
    std::vector<float> rows;
    std::mt19937_64 g(static_cast<std::uint64_t>(n));
    for (std::int32_t i = 0; i < n; ++i) {
      const auto row = sharded_test::random_row(g, V, false);
      rows.insert(rows.end(), row.begin(), row.end());
    }
    const auto mine = sharded_test::shard_of(rows, V, n, b0, b1);
    std::vector<std::byte> tws(sharded_topk_rows_workspace_size(n, b1 - b0, k, P));
    std::vector<token_id> tok(static_cast<std::size_t>(n * k));
    std::vector<float> val(tok.size());
    std::vector<std::int32_t> counts(static_cast<std::size_t>(n));
    const sharded_figures f = time_sharded(coll, reps, [&] {
      return sharded_topk_rows(coll, b0, V, sharded_test::matrix(mine, n, b1 - b0), k, tws, make_view(tok.data(), n, k),
                               make_view(val.data(), n, k), counts);
    });
    if (r == 0) {
      const double one = time_local(reps, [&] {
        for (std::int32_t j = 0; j < n; ++j) {
          std::int32_t cnt = 0;
          (void)detail::topk_probabilities(std::span<const float>(rows.data() + j * V, static_cast<std::size_t>(V)), k,
                                           tok.data(), val.data(), cnt);
        }
      });
      const double gather = static_cast<double>(n) * static_cast<double>((V + P - 1) / P) * 4.0;
      std::printf(
          "n %3d rows | max per rank: %6lld B in %lld collectives | gathering rows: %10.0f B per rank (%.0fx) | "
          "sharded median %8.3f ms (slowest rank) | one process, full rows %8.3f ms\n",
          n, static_cast<long long>(f.bytes), static_cast<long long>(f.calls), gather,
          gather / static_cast<double>(f.bytes > 0 ? f.bytes : 1), f.median_s * 1e3, one * 1e3);
    }
  }
  MPI_Finalize();
  return 0;
}
