// Reference tools for block and traversal verification, written directly
// from the derivation in docs/verify.md and independent of the library walk:
// - exact enumeration: every drafted tree of a small model with its draft
//   probability, and the exact output law of a verifier on a fixed tree
//   (rejection and acceptance probabilities instead of uniforms), for
//   traversal, the paper's block rule (largest i with eta_i <= h_i) and
//   token-wise verification (SpecInfer MSS / recursive rejection sampling);
// - a sampling reference with the library's uniform keys (vectors of
//   doubles, no closed-form residuals), with switches for two wrong rules
//   used as negative controls.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <vector>

#include "exactness_harness.hpp"
#include "specdec/core/philox.hpp"

namespace vtest {

using row = std::vector<double>;

// A drafted tree: node 0 is the context; nodes in BFS order.
struct dtree {
  std::vector<node_id> parent{-1};
  std::vector<token_id> token{0};
  std::vector<std::int64_t> ctx_number{0};
  std::vector<int> ctx_len{0};
  int size() const { return static_cast<int>(parent.size()); }
  std::vector<node_id> children(node_id u) const {
    std::vector<node_id> c;
    for (node_id i = u + 1; i < size(); ++i)
      if (parent[static_cast<std::size_t>(i)] == u) c.push_back(i);
    return c;
  }
};

// Rows renormalized in double, so the enumeration is exact to double rounding.
inline row normalized(const float* r, int V) {
  row x(r, r + V);
  double s = 0;
  for (double v : x) s += v;
  for (double& v : x) v /= s;
  return x;
}
inline row prow_of(const model& m, const dtree& t, node_id u) {
  return normalized(m.prow(m.index(t.ctx_len[static_cast<std::size_t>(u)], t.ctx_number[static_cast<std::size_t>(u)])),
                    m.V);
}
inline row qrow_of(const model& m, const dtree& t, node_id u) {
  return normalized(m.qrow(m.index(t.ctx_len[static_cast<std::size_t>(u)], t.ctx_number[static_cast<std::size_t>(u)])),
                    m.V);
}

// Calls f(probability, tree) for every drafted tree (children of a node at
// depth d: widths[d] of them; iid: ordered tuples; gumbel: ordered draws
// without replacement over q's support, min(k, support) of them; topk: the
// deterministic top-k of q).
inline void enumerate_drafts(const model& m, std::span<const int> widths, drafting how,
                             const std::function<void(double, const dtree&)>& f) {
  std::function<void(dtree&, std::vector<node_id>, std::size_t, std::vector<node_id>&, double, std::size_t)> level;
  level = [&](dtree& t, std::vector<node_id> nodes, std::size_t i, std::vector<node_id>& next, double prob,
              std::size_t d) {
    if (d == widths.size()) {
      f(prob, t);
      return;
    }
    if (i == nodes.size()) {
      std::vector<node_id> nn;
      level(t, next, 0, nn, prob, d + 1);
      return;
    }
    const node_id u = nodes[i];
    const row q = qrow_of(m, t, u);
    const int k = widths[d];
    std::vector<token_id> xs;
    auto add_children = [&](double pr) {
      const std::size_t n0 = t.parent.size(), nx0 = next.size();
      for (token_id x : xs) {
        next.push_back(t.size());
        t.parent.push_back(u);
        t.token.push_back(x);
        t.ctx_number.push_back(t.ctx_number[static_cast<std::size_t>(u)] * m.V + x);
        t.ctx_len.push_back(t.ctx_len[static_cast<std::size_t>(u)] + 1);
      }
      level(t, nodes, i + 1, next, prob * pr, d);
      t.parent.resize(n0);
      t.token.resize(n0);
      t.ctx_number.resize(n0);
      t.ctx_len.resize(n0);
      next.resize(nx0);
    };
    if (how == drafting::topk) {
      std::vector<token_id> ids(static_cast<std::size_t>(m.V));
      for (int x = 0; x < m.V; ++x) ids[static_cast<std::size_t>(x)] = x;
      std::stable_sort(ids.begin(), ids.end(), [&](token_id a, token_id b) { return q[a] > q[b]; });
      xs.assign(ids.begin(), ids.begin() + k);
      add_children(1.0);
      return;
    }
    int support = 0;
    for (double v : q) support += v > 0 ? 1 : 0;
    const int len = how == drafting::gumbel ? std::min(k, support) : k;
    std::function<void(double, double)> pick = [&](double pr, double rejected) {
      if (static_cast<int>(xs.size()) == len) {
        add_children(pr);
        return;
      }
      for (token_id x = 0; x < m.V; ++x) {
        if (q[x] <= 0) continue;
        if (how == drafting::gumbel && std::find(xs.begin(), xs.end(), x) != xs.end()) continue;
        xs.push_back(x);
        pick(how == drafting::gumbel ? pr * q[x] / (1 - rejected) : pr * q[x],
             how == drafting::gumbel ? rejected + q[x] : 0.0);
        xs.pop_back();
      }
    };
    pick(1.0, 0.0);
  };
  dtree t;
  std::vector<node_id> next;
  level(t, {0}, 0, next, 1.0, 0);
}

// Exact output law of a verifier on one tree: emitted token sequence -> probability.
using law = std::map<std::vector<token_id>, double>;

// The law child j of u was drafted from: q_u (iid), q_u without the earlier
// siblings' tokens renormalized (gumbel), one-hot (topk).
inline row child_law(const dtree& t, const row& q, const std::vector<node_id>& cs, std::size_t j, drafting how) {
  row qj(q.size(), 0.0);
  if (how == drafting::topk) {
    qj[static_cast<std::size_t>(t.token[static_cast<std::size_t>(cs[j])])] = 1.0;
    return qj;
  }
  if (how == drafting::iid) return q;
  double z = 0;
  std::vector<char> out(q.size(), 0);
  for (std::size_t s = 0; s < j; ++s) out[static_cast<std::size_t>(t.token[static_cast<std::size_t>(cs[s])])] = 1;
  for (std::size_t x = 0; x < q.size(); ++x) z += out[x] ? q[x] : 0.0;
  for (std::size_t x = 0; x < q.size(); ++x) qj[x] = out[x] || z >= 1 ? 0.0 : q[x] / (1 - z);
  return qj;
}

// Wrong rules for the negative controls.
struct bugs {
  bool residual_ignores_weight = false;  // emit at a rejected-below node from max(p - q, 0), not max(w p - q, 0)
  bool no_conditioning = false;          // after a rejection keep max(m - q, 0) without dividing by rho
};

// Traversal verification (block verification on a chain), exactly.
inline law traversal_law(const model& m, const dtree& t, drafting how, bugs b = {}) {
  law out;
  // Adds the law of "accepted at u or below" (mass = acceptance probability) scaled by `scale`.
  std::function<void(node_id, row, std::vector<token_id>&, double)> proc =
      [&](node_id u, row meas, std::vector<token_id>& pre, double scale) {
        const auto cs = t.children(u);
        const row q = cs.empty() ? row() : qrow_of(m, t, u);
        const row p = prow_of(m, t, u);
        bool rejected_any = false;
        for (std::size_t j = 0; j < cs.size(); ++j) {
          double M = 0;
          for (double v : meas) M += v;
          if (M <= 0) return;
          const token_id x = t.token[static_cast<std::size_t>(cs[j])];
          const row qj = child_law(t, q, cs, j, how);
          const double w = qj[x] > 0 && meas[x] > 0 ? std::min(1.0, meas[x] / qj[x]) : 0.0;
          // Probability that c's subtree accepts, from its own law.
          double acc = 0;
          if (w > 0) {
            law sub;
            std::swap(sub, out);
            row mc = prow_of(m, t, cs[j]);
            for (double& v : mc) v *= w;
            pre.push_back(x);
            proc(cs[j], mc, pre, 1.0);
            pre.pop_back();
            std::swap(sub, out);
            for (const auto& [s, pr] : sub) {
              acc += pr;
              out[s] += scale * pr;
            }
          }
          row r(meas.size());
          double S = 0;
          for (std::size_t i = 0; i < r.size(); ++i) {
            r[i] = std::max(meas[i] - qj[i], 0.0);
            S += r[i];
          }
          const double rho = 1 - M + S;
          scale *= 1 - acc;
          if (rho <= 0 || scale <= 0) return;
          for (std::size_t i = 0; i < r.size(); ++i) meas[i] = b.no_conditioning ? r[i] : r[i] / rho;
          rejected_any = true;
        }
        if (b.residual_ignores_weight && rejected_any && u != 0) {
          // Keeps the acceptance probability, but emits from the unweighted residual.
          double M = 0, R = 0;
          row r(p.size());
          for (std::size_t i = 0; i < p.size(); ++i) {
            M += meas[i];
            r[i] = std::max(p[i] - q[i], 0.0);
            R += r[i];
          }
          for (std::size_t i = 0; i < p.size(); ++i) meas[i] = R > 0 ? M * r[i] / R : 0.0;
        }
        for (token_id y = 0; y < static_cast<token_id>(meas.size()); ++y) {
          if (meas[y] <= 0) continue;
          pre.push_back(y);
          out[pre] += scale * meas[y];
          pre.pop_back();
        }
      };
  std::vector<token_id> pre;
  proc(0, prow_of(m, t, 0), pre, 1.0);
  return out;
}

// The paper's block verification (Sun et al. 2025, Algorithm 2) on a chain:
// w_i = min(1, w_{i-1} p/q), h_i = S_i / (S_i + 1 - w_i) (i < gamma),
// h_gamma = w_gamma, tau = the largest i with eta_i <= h_i.
inline law block_law(const model& m, const dtree& t) {
  const int g = t.size() - 1;
  std::vector<double> w(static_cast<std::size_t>(g + 1), 1.0), h(static_cast<std::size_t>(g + 1), 1.0);
  for (int i = 1; i <= g; ++i) {
    const row p = prow_of(m, t, i - 1), q = qrow_of(m, t, i - 1);
    const token_id x = t.token[static_cast<std::size_t>(i)];
    w[static_cast<std::size_t>(i)] = q[x] > 0 ? std::min(1.0, w[static_cast<std::size_t>(i - 1)] * p[x] / q[x]) : 0.0;
    if (i < g) {
      const row pi = prow_of(m, t, i), qi = qrow_of(m, t, i);
      double S = 0;
      for (std::size_t k = 0; k < pi.size(); ++k) S += std::max(w[static_cast<std::size_t>(i)] * pi[k] - qi[k], 0.0);
      h[static_cast<std::size_t>(i)] = S > 0 ? S / (S + 1 - w[static_cast<std::size_t>(i)]) : 0.0;
    } else {
      h[static_cast<std::size_t>(i)] = w[static_cast<std::size_t>(i)];
    }
  }
  law out;
  for (int tau = 0; tau <= g; ++tau) {
    double pt = h[static_cast<std::size_t>(tau)];
    for (int j = tau + 1; j <= g; ++j) pt *= 1 - h[static_cast<std::size_t>(j)];
    if (pt <= 0) continue;
    std::vector<token_id> pre(t.token.begin() + 1, t.token.begin() + 1 + tau);
    row res = prow_of(m, t, tau);
    if (tau < g) {
      const row q = qrow_of(m, t, tau);
      for (std::size_t k = 0; k < res.size(); ++k)
        res[k] = std::max(w[static_cast<std::size_t>(tau)] * res[k] - q[k], 0.0);
    }
    double s = 0;
    for (double v : res) s += v;
    for (token_id y = 0; y < m.V; ++y) {
      if (res[static_cast<std::size_t>(y)] <= 0) continue;
      pre.push_back(y);
      out[pre] += pt * res[static_cast<std::size_t>(y)] / s;
      pre.pop_back();
    }
  }
  return out;
}

// Token-wise verification from the root (MSS for iid, recursive rejection
// sampling for gumbel, the one-hot rule for topk), exactly.
inline law tokenwise_law(const model& m, const dtree& t, drafting how) {
  law out;
  std::function<void(node_id, double, std::vector<token_id>&)> walk = [&](node_id u, double prob,
                                                                          std::vector<token_id>& pre) {
    const auto cs = t.children(u);
    row P = prow_of(m, t, u);
    if (!cs.empty()) {
      const row q = qrow_of(m, t, u);
      for (std::size_t j = 0; j < cs.size(); ++j) {
        const token_id x = t.token[static_cast<std::size_t>(cs[j])];
        const row qj = child_law(t, q, cs, j, how);
        const double a = qj[x] > 0 ? std::min(1.0, P[x] / qj[x]) : 0.0;
        if (a > 0) {
          pre.push_back(x);
          walk(cs[j], prob * a, pre);
          pre.pop_back();
        }
        prob *= 1 - a;
        if (prob <= 0) return;
        double S = 0;
        for (std::size_t i = 0; i < P.size(); ++i) S += std::max(P[i] - qj[i], 0.0);
        if (S <= 0) return;  // reached with probability 0 (rounding)
        for (std::size_t i = 0; i < P.size(); ++i) P[i] = std::max(P[i] - qj[i], 0.0) / S;
      }
    }
    for (token_id y = 0; y < m.V; ++y) {
      if (P[static_cast<std::size_t>(y)] <= 0) continue;
      pre.push_back(y);
      out[pre] += prob * P[static_cast<std::size_t>(y)];
      pre.pop_back();
    }
  };
  std::vector<token_id> pre;
  walk(0, 1.0, pre);
  return out;
}

// Law of the first L tokens when each emitted sequence is completed by the target.
inline std::vector<double> completed(const model& m, const law& l, int L) {
  std::vector<double> out(static_cast<std::size_t>(std::pow(m.V, L) + 0.5), 0.0);
  std::function<void(std::int64_t, int, double)> grow = [&](std::int64_t num, int len, double pr) {
    if (len == L) {
      out[static_cast<std::size_t>(num)] += pr;
      return;
    }
    const row p = normalized(m.prow(m.index(len, num)), m.V);
    for (int y = 0; y < m.V; ++y)
      if (p[static_cast<std::size_t>(y)] > 0) grow(num * m.V + y, len + 1, pr * p[static_cast<std::size_t>(y)]);
  };
  for (const auto& [s, pr] : l) {
    std::int64_t num = 0;
    for (token_id y : s) num = num * m.V + y;
    grow(num, static_cast<int>(s.size()), pr);
  }
  return out;
}

// Target law of the first L tokens.
inline std::vector<double> target_law(const model& m, int L) {
  law root;
  root[{}] = 1.0;
  return completed(m, root, L);
}

inline double mean_accepted(const law& l) {
  double a = 0;
  for (const auto& [s, pr] : l) a += pr * static_cast<double>(s.size() - 1);
  return a;
}

// Sampling reference with the library's uniform keys (verify_params.hpp):
// returns the emitted tokens (accepted drafts, then the next token).
inline std::vector<token_id> traversal_sample(const round_tree& rt, int V, drafting how, const rng_stream& rng,
                                              bugs b = {}) {
  const int n = rt.tree.size();
  dtree t;
  t.parent.assign(static_cast<std::size_t>(n), -1);
  t.token.assign(static_cast<std::size_t>(n), 0);
  for (node_id i = 0; i < n; ++i) {
    t.parent[static_cast<std::size_t>(i)] = rt.tree.parent(i);
    t.token[static_cast<std::size_t>(i)] = rt.tree.token(i);
  }
  auto rowp = [&](node_id u) { return row(rt.P.begin() + u * V, rt.P.begin() + (u + 1) * V); };
  auto rowq = [&](node_id u) { return row(rt.Q.begin() + u * V, rt.Q.begin() + (u + 1) * V); };
  auto sample = [&](const row& r, double un) {
    double tot = 0;
    for (double v : r) tot += v;
    const double target = un * tot;
    double c = 0;
    token_id last = -1;
    for (token_id y = 0; y < V; ++y) {
      if (r[static_cast<std::size_t>(y)] <= 0) continue;
      c += r[static_cast<std::size_t>(y)];
      last = y;
      if (target < c) return y;
    }
    return last;
  };
  std::vector<token_id> emitted;
  // Returns true when u's path (or a deeper one) was accepted; `draw` is
  // u's acceptance draw at its parent.
  std::function<bool(node_id, row, std::uint32_t)> visit = [&](node_id u, row meas, std::uint32_t draw) {
    const auto cs = t.children(u);
    const row p = rowp(u);
    const row q = cs.empty() ? row() : rowq(u);
    double M = 1.0;
    if (u != 0) {
      M = 0;
      for (std::size_t i = 0; i < meas.size(); ++i) M += meas[i];
    }
    bool rejected_any = false;
    for (std::size_t j = 0; j < cs.size() && M > 0; ++j) {
      const token_id x = t.token[static_cast<std::size_t>(cs[j])];
      bool dup = false;
      for (std::size_t s = 0; s < j; ++s) dup = dup || t.token[static_cast<std::size_t>(cs[s])] == x;
      row qj = child_law(t, q, cs, j, how);
      const double qx = how == drafting::gumbel && dup ? 0.0 : qj[x];
      const double w = qx > 0 && meas[x] > 0 ? std::min(1.0, meas[x] / qx) : 0.0;
      if (w > 0) {
        row mc = rowp(cs[j]);
        for (double& v : mc) v *= w;
        if (visit(cs[j], mc, static_cast<std::uint32_t>(1 + j))) {
          emitted.insert(emitted.begin(), x);
          return true;
        }
      }
      double S = 0;
      row r(meas.size());
      for (std::size_t i = 0; i < r.size(); ++i) {
        r[i] = std::max(meas[i] - qj[i], 0.0);
        S += r[i];
      }
      const double rho = 1 - M + S;
      rejected_any = true;
      if (!(rho > 0 && S > 0)) {
        M = 0;
        break;
      }
      for (std::size_t i = 0; i < r.size(); ++i) meas[i] = b.no_conditioning ? r[i] : r[i] / rho;
      M = b.no_conditioning ? S : S / rho;
    }
    if (u != 0 && !(static_cast<double>(
                        rng.uniform(static_cast<std::uint32_t>(t.parent[static_cast<std::size_t>(u)]), draw)) < M))
      return false;
    const double un = rng.uniform53(static_cast<std::uint32_t>(u));  // draw 0 is the 53-bit uniform
    if (!rejected_any) {
      emitted.push_back(sample(p, un));
    } else if (b.residual_ignores_weight && u != 0) {
      row r(p.size());
      for (std::size_t i = 0; i < p.size(); ++i) r[i] = std::max(p[i] - q[i], 0.0);
      emitted.push_back(sample(r, un));
    } else if (M > 0) {
      emitted.push_back(sample(meas, un));
    } else {
      emitted.push_back(static_cast<token_id>(std::max_element(p.begin(), p.end()) - p.begin()));
    }
    return true;
  };
  visit(0, rowp(0), 0);
  return emitted;
}

}  // namespace vtest
