// Every malformed-input class of a verification request, as one batch (one
// request per class) with the status code the shared checks must report.
// Used by the host test (tests/verify/test_walk.cpp) and by the GPU test
// (tests/gpu/test_verify.cpp), which compares the kernel's codes with the host's.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "specdec/core/status.hpp"
#include "specdec/tree/token_tree.hpp"
#include "specdec/verify/verify_params.hpp"

namespace vtest {

struct malformed_batch {
  std::int64_t V = 16;
  std::int32_t L = 4;  // output row length: trees deeper than 3 do not fit
  std::vector<std::int32_t> offsets{0};
  std::vector<specdec::token_id> token;
  std::vector<specdec::node_id> parent;
  std::vector<float> P, Q;
  std::vector<specdec::verify_params> params;
  std::vector<specdec::status_code> expected;
  std::vector<std::string> names;
  std::int32_t max_nodes = 0;
};

inline malformed_batch make_malformed_batch() {
  using namespace specdec;
  malformed_batch b;
  const auto V = static_cast<std::size_t>(b.V);
  auto uniform_row = [&] { return std::vector<float>(V, 1.0f / static_cast<float>(b.V)); };
  // add(name, parents, tokens, mode, expected, edit) with edit(P, Q, vp) on the request's rows.
  auto add = [&](const char* name, std::vector<node_id> par, std::vector<token_id> tok, verify_mode mode,
                 status_code code, auto edit) {
    const auto n = par.size();
    std::vector<float> P, Q;
    for (std::size_t i = 0; i < n; ++i) {
      const auto r = uniform_row();
      P.insert(P.end(), r.begin(), r.end());
      Q.insert(Q.end(), r.begin(), r.end());
    }
    verify_params vp;
    vp.mode = mode;
    vp.seed = 99;
    vp.request = static_cast<std::uint32_t>(b.names.size());
    edit(P, Q, vp);
    b.parent.insert(b.parent.end(), par.begin(), par.end());
    b.token.insert(b.token.end(), tok.begin(), tok.end());
    b.P.insert(b.P.end(), P.begin(), P.end());
    b.Q.insert(b.Q.end(), Q.begin(), Q.end());
    b.params.push_back(vp);
    b.expected.push_back(code);
    b.names.emplace_back(name);
    b.offsets.push_back(b.offsets.back() + static_cast<std::int32_t>(n));
    b.max_nodes = b.max_nodes > static_cast<std::int32_t>(n) ? b.max_nodes : static_cast<std::int32_t>(n);
  };
  auto none = [](std::vector<float>&, std::vector<float>&, verify_params&) {};
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const verify_mode iid = verify_mode::sampled_iid;
  add("well formed", {-1, 0, 0}, {1, 2, 3}, iid, status_code::ok, none);
  add("no root", {0, 0, 1}, {1, 2, 3}, iid, status_code::no_root, none);
  add("root not first", {1, -1, 0}, {1, 2, 3}, iid, status_code::not_topological, none);
  add("two roots", {-1, -1, 0}, {1, 2, 3}, iid, status_code::multiple_roots, none);
  add("parent too large", {-1, 7, 0}, {1, 2, 3}, iid, status_code::parent_out_of_range, none);
  add("parent below -1", {-1, -5, 0}, {1, 2, 3}, iid, status_code::parent_out_of_range, none);
  add("parent after child", {-1, 2, 0}, {1, 2, 3}, iid, status_code::not_topological, none);
  add("token >= V", {-1, 0}, {1, 16}, iid, status_code::token_out_of_range, none);
  add("token < 0", {-1, 0}, {1, -2}, verify_mode::greedy, status_code::token_out_of_range, none);
  add("unknown mode", {-1, 0}, {1, 2}, iid, status_code::invalid_argument,
      [](std::vector<float>&, std::vector<float>&, verify_params& vp) { vp.mode = static_cast<verify_mode>(17); });
  add("typical epsilon 0", {-1, 0}, {1, 2}, verify_mode::typical_lossy, status_code::invalid_argument,
      [](std::vector<float>&, std::vector<float>&, verify_params& vp) { vp.typical_epsilon = 0.0f; });
  add("NaN in p", {-1, 0}, {1, 2}, iid, status_code::non_finite,
      [&](std::vector<float>& P, std::vector<float>&, verify_params&) { P[9] = nan; });
  add("inf in q", {-1, 0}, {1, 2}, iid, status_code::non_finite,
      [&](std::vector<float>&, std::vector<float>& Q, verify_params&) { Q[5] = inf; });
  add("negative p", {-1, 0}, {1, 2}, verify_mode::deterministic, status_code::negative_probability,
      [&](std::vector<float>& P, std::vector<float>&, verify_params&) { P[3] = -0.25f; });
  add("NaN and negative in p", {-1, 0}, {1, 2}, verify_mode::naive_matching, status_code::non_finite,
      [&](std::vector<float>& P, std::vector<float>&, verify_params&) {
        P[3] = -0.25f;
        P[12] = nan;
      });
  add("zero p row", {-1, 0}, {1, 2}, verify_mode::naive_matching, status_code::zero_mass,
      [&](std::vector<float>& P, std::vector<float>&, verify_params&) {
        for (std::size_t i = 0; i < V; ++i) P[i] = 0.0f;
      });
  add("p sums to 2", {-1}, {1}, iid, status_code::invalid_argument,
      [&](std::vector<float>& P, std::vector<float>&, verify_params&) {
        for (std::size_t i = 0; i < V; ++i) P[i] *= 2.0f;
      });
  add("greedy NaN", {-1, 0}, {1, 2}, verify_mode::greedy, status_code::non_finite,
      [&](std::vector<float>& P, std::vector<float>&, verify_params&) { P[0] = nan; });
  add("typical NaN", {-1, 0}, {1, 2}, verify_mode::typical_lossy, status_code::non_finite,
      [&](std::vector<float>& P, std::vector<float>&, verify_params&) { P[1] = nan; });
  add("deeper than L - 1", {-1, 0, 1, 2, 3}, {1, 2, 3, 4, 5}, verify_mode::greedy, status_code::buffer_too_small, none);
  return b;
}

}  // namespace vtest
