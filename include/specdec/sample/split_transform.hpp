//! \file
//! The logits pre-pass (sample/row_transform.hpp) split over chunks of a
//! row, so that one long row is read by many thread blocks. The pre-pass
//! runs in split_transform_phases phases: the argmax, the eight radix
//! digits of the top-k select, the eight of the top-p select, the tile
//! sums of Z. In each phase every chunk only adds to integer sums, raises
//! an integer maximum or writes its own tiles, so the result does not
//! depend on the order in which chunks run; once every chunk of a row is
//! done, finish_split_phase takes the phase's decision for the row (a
//! radix digit, a cut, 1 / Z). The constants are those of
//! make_row_transform (sample/logits_rows.hpp), bit for bit.
//!
//! The CUDA pre-pass (cuda/verify.cuh) runs one phase per launch, one
//! block per chunk, and the last block of a row to finish runs the
//! finish; split_row_transform is its host twin, chunk by chunk in
//! reverse order. Phases a row does not need (no top-k, no top-p, a
//! greedy or bad row) read nothing.
#pragma once

#include <cstdint>
#include <vector>

#include "specdec/core/config.hpp"
#include "specdec/core/status.hpp"
#include "specdec/sample/order.hpp"
#include "specdec/sample/row_transform.hpp"
#include "specdec/sample/sampling_params.hpp"

namespace specdec {

//! Phases of the split pre-pass: 0 the argmax, 1-8 the top-k select's
//! digits 7 to 0, 9-16 the top-p select's digits 7 to 0, 17 the tiles.
inline constexpr int split_transform_phases = 18;

//! A row's decisions so far. Written once per phase by the finish, read
//! by the next phase's chunks.
struct split_transform_state {
  row_transform t;             //!< the transform so far (set by phase 0)
  std::uint64_t prefix = 0;    //!< the running select's digits so far
  std::uint64_t need = 0;      //!< the weight the running select still counts
  std::int32_t selecting = 0;  //!< 1 while a select's digits run
  std::int32_t unused = 0;     //!< padding
};

//! What the chunks of one phase add up for a row. All zero before a
//! phase (the finish clears them for the next one); trivial, so a device
//! buffer of them is cleared by a memset and one fits in shared memory.
struct split_transform_sums {
  std::uint64_t best;       //!< phase 0: the largest split_argmax_key (0: no finite entry)
  std::uint32_t bad;        //!< phase 0: 1 if an entry is NaN or +inf
  std::uint32_t arrived;    //!< chunks done with the phase (the device's counter)
  std::uint64_t hist[256];  //!< phases 1-16: the radix digit's histogram
};

namespace detail {

//! The radix digit a select phase counts (7 down to 0), -1 for phases 0
//! and 17.
SPECDEC_HD constexpr int split_phase_digit(int phase) noexcept {
  return phase >= 1 && phase <= 8 ? 8 - phase : phase >= 9 && phase <= 16 ? 16 - phase : -1;
}

//! The argmax key of entry x at token i: larger for a larger value, then
//! for a lower token (the host's first maximum); 0 for entries that cannot
//! be the maximum (NaN, -inf, +inf). -0.0 ranks as +0.0, as the host's
//! comparison does.
SPECDEC_HD std::uint64_t split_argmax_key(float x, std::int64_t i) noexcept {
  if (!(x > -INFINITY && x < INFINITY)) return 0;
  std::uint32_t b = bits_of(x + 0.0f);  // -0.0 + 0.0 = +0.0
  b = (b & 0x80000000u) != 0 ? ~b : (b | 0x80000000u);
  return (static_cast<std::uint64_t>(b) << 32) | (0xFFFFFFFFull - static_cast<std::uint64_t>(i));
}

//! Whether entry x is NaN or +inf (the row's code becomes non_finite).
SPECDEC_HD bool split_bad_entry(float x) noexcept { return x != x || x == INFINITY; }

}  // namespace detail

//! Whether a row takes part in `phase`, given its state after the phases
//! before: phases 0 and 17 always (their finish starts and ends the row);
//! 1 when the row is filtered and top_k cuts (0 < top_k < V); 9 when
//! top_p < 1; the other digits while their select runs.
SPECDEC_HD bool split_phase_runs(const split_transform_state& s, const sampling_params& sp, int phase,
                                 std::int64_t V) noexcept {
  const bool filtered = s.t.code == 0 && s.t.greedy == 0;
  if (phase == 0 || phase == 17) return true;
  if (phase == 1) return filtered && sp.top_k > 0 && sp.top_k < V;
  if (phase == 9) return filtered && sp.top_p < 1.0f;
  return s.selecting != 0;
}

//! Whether a chunk reads its entries in `phase` (it may take part
//! without reading: phase 0 of a row with bad settings, phase 17 of a
//! greedy or bad row).
SPECDEC_HD bool split_phase_reads(const split_transform_state& s, const sampling_params& sp, int phase) noexcept {
  if (phase == 0) return sampling_transformable(sp);
  if (phase == 17) return s.t.code == 0 && s.t.greedy == 0;
  return true;
}

//! A select phase's histogram entry for weight w at token i: the amount
//! (0: none) to add to bin `bin`: 1 per token for top-k, the grid mass for
//! top-p, among the tokens kept so far whose key matches the digits found.
SPECDEC_HD std::uint64_t split_hist_amount(const split_transform_state& s, int phase, float w, std::int64_t i,
                                           int& bin) noexcept {
  if (!s.t.keeps(w, i)) return 0;
  const int d = detail::split_phase_digit(phase);
  const std::uint64_t k = detail::rank_key(detail::bits_of(w), i);
  if ((k & detail::radix_high_mask(d)) != s.prefix) return 0;
  bin = static_cast<int>((k >> (8 * d)) & 255u);
  return phase <= 8 ? 1 : detail::grid_mass(w);
}

//! The decision of `phase` for a row once every chunk has added its part
//! to `sums` (and, for phase 17, written tile sums tiles[0, nt)); `r` is
//! the row (phase 0 reads its maximum's entry). The caller then clears
//! `sums`.
SPECDEC_HD void finish_split_phase(split_transform_state& s, const sampling_params& sp, int phase, std::int64_t V,
                                   const split_transform_sums& sums, const double* tiles, detail::row_ref r) noexcept {
  if (phase == 0) {
    s = split_transform_state{};
    s.t = detail::start_transform(sp);
    if (s.t.code != 0) return;
    if (sums.bad != 0 || sums.best == 0) {
      s.t.code = static_cast<std::int32_t>(sums.bad != 0 ? status_code::non_finite : status_code::zero_mass);
      return;
    }
    const auto arg = static_cast<std::int64_t>(0xFFFFFFFFull - (sums.best & 0xFFFFFFFFull));
    s.t.m = r.raw(arg);
    s.t.arg = static_cast<std::int32_t>(arg);
    return;
  }
  if (phase == 17) {
    if (s.t.code == 0 && s.t.greedy == 0) s.t.inv_z = 1.0 / detail::sum_tiles(tiles, sum_tile_count(V));
    return;
  }
  const int d = detail::split_phase_digit(phase);
  if (phase == 1 || phase == 9) {  // a select's first digit: its count or mass, then its goal
    std::uint64_t total = 0;
    for (const std::uint64_t h : sums.hist) total += h;
    if (phase == 1 && total <= static_cast<std::uint64_t>(sp.top_k)) return;  // top-k keeps every candidate
    s.need = phase == 1 ? static_cast<std::uint64_t>(sp.top_k) : detail::top_p_goal(sp.top_p, total);
    s.prefix = 0;
    s.selecting = 1;
  }
  const int b = detail::radix_pick(sums.hist, s.need);
  if (b < 0) {  // as radix_select_key: the cut becomes 0
    s.t.cut = 0;
    s.prefix = 0;
    s.selecting = 0;
    return;
  }
  s.prefix |= static_cast<std::uint64_t>(b) << (8 * d);
  if (d == 0) {
    s.t.cut = s.prefix;
    s.prefix = 0;
    s.selecting = 0;
  }
}

//! Chunks of a row of V entries, chunk_tiles whole tiles each (the tile
//! phase writes whole tile sums), the last one shorter.
SPECDEC_HD constexpr std::int64_t split_chunk_count(std::int64_t V, std::int64_t chunk_tiles) noexcept {
  return chunk_tiles <= 0 ? 0 : (sum_tile_count(V) + chunk_tiles - 1) / chunk_tiles;
}

//! Host twin of the split pre-pass: the transform of logits row `r` (V
//! entries) under `sp`, found phase by phase over chunks of chunk_tiles
//! tiles, the chunks of each phase taken last to first. Equals
//! make_row_transform(r, V, sp). Allocates the tile sums.
inline row_transform split_row_transform(detail::row_ref r, std::int64_t V, const sampling_params& sp,
                                         std::int64_t chunk_tiles) {
  const detail::row_ref raw{r.d, r.s, r.t};
  split_transform_state s{};
  split_transform_sums sums{};
  std::vector<double> tiles(static_cast<std::size_t>(sum_tile_count(V)));
  const std::int64_t chunks = split_chunk_count(V, chunk_tiles);
  for (int phase = 0; phase < split_transform_phases; ++phase) {
    if (!split_phase_runs(s, sp, phase, V)) continue;
    for (std::int64_t c = chunks - 1; c >= 0 && split_phase_reads(s, sp, phase); --c) {
      const std::int64_t t0 = c * chunk_tiles,
                         t1 = t0 + chunk_tiles < sum_tile_count(V) ? t0 + chunk_tiles : sum_tile_count(V);
      const std::int64_t lo = t0 * sum_tile, hi = t1 * sum_tile < V ? t1 * sum_tile : V;
      if (phase == 17) {
        for (std::int64_t k = t0; k < t1; ++k) {
          const std::int64_t b = k * sum_tile;
          tiles[static_cast<std::size_t>(k)] =
              detail::tile_tree_sum([&](std::int64_t i) { return s.t.kept_weight(raw.raw(b + i), b + i); },
                                    V - b < sum_tile ? V - b : sum_tile);
        }
        continue;
      }
      for (std::int64_t i = lo; i < hi; ++i) {
        const float x = raw.raw(i);
        if (phase == 0) {
          const std::uint64_t key = detail::split_argmax_key(x, i);
          sums.best = key > sums.best ? key : sums.best;
          sums.bad |= detail::split_bad_entry(x) ? 1u : 0u;
          continue;
        }
        int bin = 0;
        if (const std::uint64_t a = split_hist_amount(s, phase, s.t.weight(x), i, bin); a != 0) sums.hist[bin] += a;
      }
    }
    finish_split_phase(s, sp, phase, V, sums, tiles.data(), raw);
    sums = split_transform_sums{};
  }
  return s.t;
}

}  // namespace specdec
