//! \file
//! The two row passes of the level-batched sharded top-k
//! (parallel/sharded_topk.hpp, sharded_topk_rows_on), written once as
//! SPECDEC_HD function objects: `select` runs on every rank over its
//! columns of every frontier row, `merge` on every rank over the keys all
//! ranks gathered. A pass is called as f(ops, lanes, row) by every lane of
//! a participant (one host thread in host_shard_executor, one CUDA block
//! per row in parallel/cuda_shard.cuh); `ops` is the row-operations policy
//! (its mass is the fixed tiled order of sample/order.hpp, so a row's mass
//! is bit for bit the same on the host and on the device), `lanes` gives
//! the lane index, the lane count, a max over lanes and a barrier.
//!
//! Gathered layout, per rank: a header {v0, width} then, per row, k keys
//! (rank_key, no_key padding), the row's local mass (double bits), a
//! status code and the global token of the first bad entry.
#pragma once

#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdint>

#include "specdec/core/config.hpp"
#include "specdec/core/status.hpp"
#include "specdec/parallel/collective.hpp"
#include "specdec/sample/order.hpp"
#include "specdec/tree/token_tree.hpp"

namespace specdec::detail {

//! One lane: the host's lane policy.
struct host_lanes {
  [[nodiscard]] int lane() const noexcept { return 0; }
  [[nodiscard]] int lanes() const noexcept { return 1; }
  [[nodiscard]] std::int64_t max(std::int64_t v) const noexcept { return v; }
  void sync() const noexcept {}
};

//! Largest k of the level-batched sharded top-k (each lane keeps k keys).
inline constexpr std::int32_t topk_max_k = 64;

//! int64s per row in a rank's gathered block: k keys, mass, code, index.
SPECDEC_HD constexpr std::int64_t topk_row_slots(std::int32_t k) noexcept { return static_cast<std::int64_t>(k) + 3; }
//! int64s of one rank's gathered block: the header and every row.
SPECDEC_HD constexpr std::int64_t topk_block_slots(std::int32_t rows, std::int32_t k) noexcept {
  return 2 + static_cast<std::int64_t>(rows) * topk_row_slots(k);
}

//! What the merge leaves per row (copied to the host with the tokens).
struct topk_row_result {
  double mass;         //!< the row's mass, rank-order fold of the ranks' tiled sums
  std::int64_t index;  //!< the global token of the first bad entry (or the rank, or -1)
  std::int32_t count;  //!< candidates written (<= k)
  std::int32_t code;   //!< status_code of the row
};

//! This rank's local selection of one row: the top min(k, width) positive
//! entries as keys in the specdec ranking (each lane's best k, then k
//! rounds of a max over the lanes' heads), the tiled mass, and the first
//! bad entry. k <= topk_max_k.
struct topk_select {
  const float* data;   //!< this rank's rows (row r at data + r * rs)
  std::int64_t rs;     //!< row stride (elements)
  std::int64_t cs;     //!< column stride (elements)
  std::int64_t width;  //!< this rank's columns
  std::int64_t v0;     //!< global id of the first column
  std::int32_t k;
  double* tiles;      //!< sum_tile_count(width) doubles per row
  std::int64_t* out;  //!< this rank's block (topk_block_slots(rows, k))

  SPECDEC_NO_EXEC_CHECK
  template <class Ops, class Lanes>
  SPECDEC_HD void operator()(const Ops& ops, const Lanes& ln, std::int32_t row) const {
    row_ref r{data, cs};
    if (width > 0) r.d = data + row * rs;  // an empty shard may have no data at all
    std::int64_t* o = out + 2 + row * topk_row_slots(k);
    if (row == 0) {
      ops.put(out, 0, v0);
      ops.put(out, 1, width);
    }
    double m = 0.0;
    bool ok = true;
    if (width > 0) ok = ops.mass(r, width, tiles + row * sum_tile_count(width), m);
    std::int64_t code = 0, where = -1;
    if (!ok) {
      // The first bad entry: the lowest index any lane saw (as a max of -i).
      std::int64_t first = no_key;
      for (std::int64_t i = ln.lane(); i < width; i += ln.lanes()) {
        const float x = r[i];
        if (!(x >= 0.0f) || x == INFINITY) {
          first = -i;
          break;
        }
      }
      first = ln.max(first);
      code = static_cast<std::int64_t>(status_code::non_finite);
      if (first != no_key) {
        where = v0 - first;
        const float x = r[-first];
        if (x < 0.0f && x >= -FLT_MAX) code = static_cast<std::int64_t>(status_code::negative_probability);
      }
    }
    // Each lane keeps the best k keys of its columns (sorted, keys are
    // unique), then k rounds take the largest head over the lanes.
    std::int64_t list[topk_max_k];
    std::int32_t n = 0, pos = 0;
    float cut = 0.0f;
    if (ok)
      for (std::int64_t i = ln.lane(); i < width; i += ln.lanes()) {
        const float x = r[i];
        if (!(x > cut)) continue;  // x <= 0, or not above the lane's k-th value: cannot enter
        const std::int64_t key = rank_key(x, v0 + i);
        if (n == k && key < list[k - 1]) continue;
        std::int32_t j = n;
        if (n < k)
          ++n;
        else
          j = k - 1;
        while (j > 0 && list[j - 1] < key) {
          list[j] = list[j - 1];
          --j;
        }
        list[j] = key;
        if (n == k) cut = key_value(list[k - 1]);  // a later equal value has a higher id: ranks lower
      }
    for (std::int32_t j = 0; j < k; ++j) {
      std::int64_t head = no_key;
      if (pos < n) head = list[pos];
      const std::int64_t best = ln.max(head);
      if (best != no_key && head == best) ++pos;  // exactly one lane holds it
      ops.put(o, j, best);
    }
    ops.put(o, k, std::bit_cast<std::int64_t>(m));
    ops.put(o, k + 1, code);
    ops.put(o, k + 2, where);
    ln.sync();
  }
};

//! The merge of one row on every rank: the ranks' masses folded in rank
//! order, the lowest failing rank's status (or invalid_argument when the
//! ranks' columns do not tile [0, V) in rank order, or zero_mass), and
//! the k best keys of the ranks' sorted lists. Lane 0 works, the others
//! wait at the barrier.
struct topk_merge {
  const std::int64_t* all;  //!< ranks blocks of topk_block_slots(rows, k)
  std::int32_t ranks, rows, k;
  std::int64_t V;
  topk_row_result* res;  //!< rows results
  token_id* tok;         //!< rows x k
  float* val;            //!< rows x k

  SPECDEC_NO_EXEC_CHECK
  template <class Ops, class Lanes>
  SPECDEC_HD void operator()(const Ops&, const Lanes& ln, std::int32_t row) const {
    if (ln.lane() == 0) merge(row);
    ln.sync();
  }

  SPECDEC_HD void merge(std::int32_t row) const {
    const std::int64_t block = topk_block_slots(rows, k), off = 2 + row * topk_row_slots(k);
    topk_row_result out{0.0, -1, 0, 0};
    std::int64_t next = 0, untiled = -1;  // untiled: the first rank whose header breaks the tiling
    for (std::int32_t q = 0; q < ranks; ++q) {
      const std::int64_t* b = all + q * block;
      const std::int64_t* s = b + off;
      out.mass += std::bit_cast<double>(s[k]);
      if (untiled < 0) {
        if (b[0] == next && b[1] >= 0 && b[1] <= V - next)
          next += b[1];
        else
          untiled = q;
      }
      if (out.code == 0 && s[k + 1] != 0) {
        out.code = static_cast<std::int32_t>(s[k + 1]);
        out.index = s[k + 2];
      }
    }
    if (untiled < 0 && next != V) untiled = ranks - 1;
    if (untiled >= 0) {  // a broken partition makes every other result meaningless
      out.code = static_cast<std::int32_t>(status_code::invalid_argument);
      out.index = untiled;
    }
    if (out.code == 0 && !(out.mass > 0.0)) {
      out.code = static_cast<std::int32_t>(status_code::zero_mass);
      out.index = row;
    }
    if (out.code == 0) {
      // Each rank's list is sorted and keys are unique: the head of rank q
      // is its first key below the last one taken.
      std::int64_t prev = INT64_MAX;
      for (std::int32_t j = 0; j < k; ++j) {
        std::int64_t best = no_key;
        for (std::int32_t q = 0; q < ranks; ++q) {
          const std::int64_t* s = all + q * block + off;
          for (std::int32_t i = 0; i < k; ++i) {
            if (s[i] < prev) {
              if (s[i] > best) best = s[i];
              break;
            }
          }
        }
        if (best == no_key) break;
        tok[row * k + j] = static_cast<token_id>(key_token(best));
        val[row * k + j] = key_value(best);
        out.count = j + 1;
        prev = best;
      }
    }
    res[row] = out;
  }
};

}  // namespace specdec::detail
