//! \file
//! Target rows converted on first read. The sessions hand the verification
//! walk a host row policy that turns row u of the target's logits into
//! probabilities (logits_to_probs_row under that row's sampling params) the
//! first time any pass touches it. The walk reads only the rows of the
//! nodes it visits (depth + 1 at most for the sampled rules), so a round
//! converts those instead of all N rows. A converted row is bit for bit
//! the row the batched logits_to_probs writes (the conversion is per row),
//! so every decision of the walk is unchanged.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>

#include "specdec/core/status.hpp"
#include "specdec/core/view.hpp"
#include "specdec/sample/order.hpp"
#include "specdec/verify/detail/row_ops.hpp"
#include "specdec/verify/distribution.hpp"
#include "specdec/verify/policy.hpp"

namespace specdec::detail {

//! The round's conversion state (the walk holds its policy by const
//! reference, so the policy points here).
struct lazy_prob_state {
  view2d<const float> logits{};               // N x V target logits
  float* probs = nullptr;                     // N x V, row stride V; row u valid once ready[u]
  std::uint8_t* ready = nullptr;              // N flags
  std::span<const sampling_params> params{};  // 1 entry (shared) or N (per row)
  std::span<std::byte> filter_ws{};           // logits_to_probs_workspace_size for every row's params
  status error = status::success();           // first conversion error, the row as index
  std::int32_t converted = 0;                 // rows converted so far
  double seconds = 0;                         // time spent converting
};

//! host_row_ops, converting each target row of `state` before its first use.
//! Rows outside state.probs (the walk's residual, q rows) pass through.
class lazy_prob_ops {
 public:
  explicit lazy_prob_ops(lazy_prob_state& state) noexcept : s_(&state) {}

  bool mass(row_ref r, std::int64_t V, double* tiles, double& m) const noexcept {
    touch(r);
    return ops_.mass(r, V, tiles, m);
  }
  void first_residual(row_ref p, row_ref q, float* R, std::int64_t V, double* tp, double* tq, double* tr, double& mp,
                      double& mq, double& mr, bool& okp, bool& okq) const noexcept {
    touch(p);
    ops_.first_residual(p, q, R, V, tp, tq, tr, mp, mq, mr, okp, okq);
  }
  double update_residual(row_ref q, float* R, float s, std::int64_t V, double* tr) const noexcept {
    return ops_.update_residual(q, R, s, V, tr);
  }
  double scaled_residual(row_ref p, row_ref q, float* R, float s, std::int64_t V, double* tr) const noexcept {
    touch(p);
    return ops_.scaled_residual(p, q, R, s, V, tr);
  }
  token_id sample(row_ref r, std::int64_t V, const double* tiles, double target) const noexcept {
    touch(r);
    return ops_.sample(r, V, tiles, target);
  }
  bool argmax(row_ref r, std::int64_t V, token_id& a) const noexcept {
    touch(r);
    return ops_.argmax(r, V, a);
  }
  bool entropy(row_ref r, std::int64_t V, double* tiles, double& m, double& plogp) const noexcept {
    touch(r);
    return ops_.entropy(r, V, tiles, m, plogp);
  }
  status_code classify(row_ref r, std::int64_t V) const noexcept {
    touch(r);
    return ops_.classify(r, V);
  }
  double tile_sum(row_ref r, std::int64_t V, std::int64_t t) const noexcept {
    touch(r);
    return ops_.tile_sum(r, V, t);
  }
  token_id scan_tile(row_ref r, std::int64_t V, std::int64_t t, double c, double target) const noexcept {
    touch(r);
    return ops_.scan_tile(r, V, t, c, target);
  }
  token_id last_positive(row_ref r, std::int64_t V) const noexcept {
    touch(r);
    return ops_.last_positive(r, V);
  }
  void copy_range(row_ref r, float* R, std::int64_t begin, std::int64_t end) const noexcept {
    touch(r);
    ops_.copy_range(r, R, begin, end);
  }
  void copy(row_ref r, float* R, std::int64_t V) const noexcept {
    touch(r);
    ops_.copy(r, R, V);
  }
  //! The single-entry read of the walk (detail::row_value).
  float value(row_ref r, token_id x) const noexcept {
    touch(r);
    return r[x];
  }
  template <class T>
  void put(T* a, std::int64_t i, T v) const noexcept {
    ops_.put(a, i, v);
  }
  void sync() const noexcept {}

 private:
  // Converts the target row r points at, once. A failed conversion records
  // the error and fills the row with NaN, so the walk stops on it too.
  void touch(row_ref r) const noexcept {
    lazy_prob_state& s = *s_;
    const std::int64_t V = s.logits.extent[1];
    const auto a = reinterpret_cast<std::uintptr_t>(r.d);
    const auto b = reinterpret_cast<std::uintptr_t>(s.probs);
    if (a < b) return;
    const auto u = static_cast<std::int64_t>((a - b) / sizeof(float)) / V;
    if (u >= s.logits.extent[0] || s.ready[u] != 0) return;
    const auto t0 = std::chrono::steady_clock::now();
    const sampling_params& sp = s.params[s.params.size() == 1 ? 0 : static_cast<std::size_t>(u)];
    float* row = s.probs + u * V;
    const status st = logits_to_probs_row<float>(s.logits.slice(u), make_view(row, V), sp, s.filter_ws);
    if (!st.ok()) {
      for (std::int64_t i = 0; i < V; ++i) row[i] = std::numeric_limits<float>::quiet_NaN();
      if (s.error.ok()) s.error = make_status(st.code(), st.message(), u);
    }
    s.ready[u] = 1;
    ++s.converted;
    s.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

  host_row_ops ops_{};
  lazy_prob_state* s_;
};

static_assert(verify_row_ops<lazy_prob_ops>);

}  // namespace specdec::detail
