// Shared by the host interop tests and the GPU tests: random SGLang batches
// and transcriptions (written here) of SGLang's kernel loops.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

namespace sglang_ref {

// A random SGLang batch: per request a random tree over n slots whose slot
// numbering is a random permutation of a topological order (so slots are
// not topological), linked lists built the way SGLang's build kernel does
// (each child pushed at the head, walking slots downwards: ascending lists).
struct batch {
  int bs = 0, n = 0, V = 0;
  std::vector<std::int64_t> cand, ridx, next, sib;
  std::vector<int> parent_slot;  // brute-force truth
};

inline batch make_batch(int bs, int n, int V, std::uint64_t seed, bool distinct_siblings, bool shuffle = true) {
  std::mt19937_64 g(seed);
  batch b{bs, n, V, {}, {}, {}, {}, {}};
  const auto total = static_cast<std::size_t>(bs * n);
  b.cand.assign(total, 0);
  b.ridx.assign(total, 0);
  b.next.assign(total, -1);
  b.sib.assign(total, -1);
  b.parent_slot.assign(total, -1);
  for (int r = 0; r < bs; ++r) {
    std::vector<int> par(static_cast<std::size_t>(n), -1);  // topological ids
    for (int i = 1; i < n; ++i)
      par[static_cast<std::size_t>(i)] = static_cast<int>(g() % static_cast<std::uint64_t>(i));
    std::vector<int> slot(static_cast<std::size_t>(n));  // topological id -> slot (root stays 0)
    std::iota(slot.begin(), slot.end(), 0);
    if (shuffle) std::shuffle(slot.begin() + 1, slot.end(), g);
    std::vector<int> tok(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) {
      for (int attempt = 0;; ++attempt) {
        tok[static_cast<std::size_t>(i)] = static_cast<int>(g() % static_cast<std::uint64_t>(V));
        if (!distinct_siblings || i == 0 || attempt == 64) break;  // more siblings than tokens: give up
        bool clash = false;
        for (int j = 1; j < i; ++j)
          clash = clash || (par[static_cast<std::size_t>(j)] == par[static_cast<std::size_t>(i)] &&
                            tok[static_cast<std::size_t>(j)] == tok[static_cast<std::size_t>(i)]);
        if (!clash) break;
      }
    }
    const std::size_t o = static_cast<std::size_t>(r * n);
    for (int i = 0; i < n; ++i) {
      const auto s = static_cast<std::size_t>(slot[static_cast<std::size_t>(i)]);
      b.cand[o + s] = i == 0 ? -7 : tok[static_cast<std::size_t>(i)];  // unused root token
      b.ridx[o + s] = static_cast<std::int64_t>(o + s);
      b.parent_slot[o + s] = i == 0 ? -1 : slot[static_cast<std::size_t>(par[static_cast<std::size_t>(i)])];
    }
    // Children lists in topological-id order (SGLang: ascending index).
    for (int i = n - 1; i >= 1; --i) {
      const auto s = static_cast<std::size_t>(slot[static_cast<std::size_t>(i)]);
      const auto ps = static_cast<std::size_t>(slot[static_cast<std::size_t>(par[static_cast<std::size_t>(i)])]);
      b.sib[o + s] = b.next[o + ps];
      b.next[o + ps] = static_cast<std::int64_t>(s);
    }
  }
  return b;
}

// Transcription of SGLang's VerifyTreeGreedy loop (one request per block,
// one thread): walk the linked lists, compare with target_predict.
inline void reference_greedy(const batch& b, const std::vector<std::int64_t>& target_predict, int num_spec,
                             std::vector<int>& predicts, std::vector<int>& accept_index, std::vector<int>& accept_num) {
  for (int bx = 0; bx < b.bs; ++bx) {
    const auto base = static_cast<std::size_t>(bx * b.n);
    std::int64_t last = b.ridx[base];
    accept_index[static_cast<std::size_t>(bx * num_spec)] = static_cast<int>(last);
    int accepted = 0;
    std::int64_t cur = 0;
    for (int j = 1; j < num_spec; ++j) {
      cur = b.next[base + static_cast<std::size_t>(cur)];
      while (cur != -1) {
        const std::int64_t di = b.ridx[base + static_cast<std::size_t>(cur)];
        const std::int64_t tok = b.cand[base + static_cast<std::size_t>(cur)];
        const std::int64_t want = target_predict[static_cast<std::size_t>(last)];
        if (tok == want) {
          predicts[static_cast<std::size_t>(last)] = static_cast<int>(want);
          ++accepted;
          accept_index[static_cast<std::size_t>(bx * num_spec + accepted)] = static_cast<int>(di);
          last = di;
          break;
        }
        cur = b.sib[base + static_cast<std::size_t>(cur)];
      }
      if (cur == -1) break;
    }
    accept_num[static_cast<std::size_t>(bx)] = accepted;
    predicts[static_cast<std::size_t>(last)] = static_cast<int>(target_predict[static_cast<std::size_t>(last)]);
  }
}

// Transcription of SGLang's TreeSpeculativeSamplingTargetOnly on one thread.
// SGLang's final sampling sums the row in float across a block, in no fixed
// order; here, and in specdec's twin (its fixed tile order), the sums are
// in double, which on these short rows is exact in any order.
inline void reference_sampling(const batch& b, const std::vector<float>& probs, const std::vector<float>& coins,
                               const std::vector<float>& final_coins, int num_spec, float th_single, float th_acc,
                               std::vector<int>& predicts, std::vector<int>& accept_index,
                               std::vector<int>& accept_num) {
  const auto d = static_cast<std::size_t>(b.V);
  std::vector<float> draft(probs.size(), 0.0f);  // SGLang passes zeros
  for (int bx = 0; bx < b.bs; ++bx) {
    const auto base = static_cast<std::size_t>(bx * b.n);
    float prob_acc = 0.0f;
    std::size_t off = base * d;
    float coin = coins[base];
    std::int64_t last = b.ridx[base];
    accept_index[static_cast<std::size_t>(bx * num_spec)] = static_cast<int>(last);
    int accepted = 0;
    std::int64_t cur = 0;
    for (int j = 1; j < num_spec; ++j) {
      cur = b.next[base + static_cast<std::size_t>(cur)];
      while (cur != -1) {
        const std::int64_t di = b.ridx[base + static_cast<std::size_t>(cur)];
        const auto tok = static_cast<std::size_t>(b.cand[base + static_cast<std::size_t>(cur)]);
        const float single = probs[off + tok];
        prob_acc += single;
        if (coin <= prob_acc / std::max(th_acc, 1e-9f) || single >= th_single) {
          prob_acc = 0.0f;
          off = (base + static_cast<std::size_t>(cur)) * d;
          coin = coins[base + static_cast<std::size_t>(cur)];
          predicts[static_cast<std::size_t>(last)] = static_cast<int>(tok);
          ++accepted;
          accept_index[static_cast<std::size_t>(bx * num_spec + accepted)] = static_cast<int>(di);
          last = di;
          break;
        }
        draft[off + tok] = probs[off + tok];
        cur = b.sib[base + static_cast<std::size_t>(cur)];
      }
      if (cur == -1) break;
    }
    accept_num[static_cast<std::size_t>(bx)] = accepted;
    double sum = 0.0;
    std::vector<float> relu(d);
    for (std::size_t x = 0; x < d; ++x) {
      const float dp = accepted != num_spec - 1 ? draft[off + x] : 0.0f;
      relu[x] = std::max(probs[off + x] - dp, 0.0f);
      sum += relu[x];
    }
    const double u = static_cast<double>(final_coins[static_cast<std::size_t>(bx)]) * sum;
    int sampled = static_cast<int>(d), last_valid = -1;
    double run = 0.0;
    for (std::size_t x = 0; x < d && sampled == static_cast<int>(d); ++x) {
      if (!(relu[x] > 0.0f)) continue;
      last_valid = static_cast<int>(x);
      run += relu[x];
      if (run > u) sampled = static_cast<int>(x);
    }
    if (sampled == static_cast<int>(d)) sampled = last_valid == -1 ? static_cast<int>(d) - 1 : last_valid;
    predicts[static_cast<std::size_t>(last)] = sampled;
  }
}

// EAGLE draft inputs of SGLang's tree builder: per request the parent_list
// of the draft steps and n - 1 sorted, ancestor-closed selected indices.
struct draft_steps {
  int bs = 0, topk = 0, depth = 0, n = 0;
  std::vector<std::int64_t> parent_list, selected, seq_len;
};

inline draft_steps make_draft_steps(int bs, int topk, int depth, int n, std::uint64_t seed) {
  std::mt19937_64 g(seed);
  draft_steps d{bs, topk, depth, n, {}, {}, {}};
  const int blocks = topk * (depth - 1) + 1;
  const std::int64_t cands = topk + static_cast<std::int64_t>(depth - 1) * topk * topk;
  auto step_begin = [&](int s) -> std::int64_t {
    return s == 0 ? 0 : topk + static_cast<std::int64_t>(s - 1) * topk * topk;
  };
  auto step_end = [&](int s) -> std::int64_t {
    return s == 0 ? topk : topk + static_cast<std::int64_t>(s) * topk * topk;
  };
  for (int r = 0; r < bs; ++r) {
    std::vector<std::int64_t> pl(static_cast<std::size_t>(blocks), -1);
    for (int s = 1; s < depth; ++s) {  // the topk tokens expanded at step s: distinct candidates of step s - 1
      std::vector<std::int64_t> pool;
      for (std::int64_t f = step_begin(s - 1); f < step_end(s - 1); ++f) pool.push_back(f);
      std::shuffle(pool.begin(), pool.end(), g);
      for (int j = 0; j < topk; ++j)
        pl[static_cast<std::size_t>(1 + (s - 1) * topk + j)] = pool[static_cast<std::size_t>(j)];
    }
    auto parent_of = [&](std::int64_t f) -> std::int64_t {
      return f < topk ? -1 : pl[static_cast<std::size_t>(f / topk)];
    };
    std::vector<char> chosen(static_cast<std::size_t>(cands), 0);
    int count = 0;
    for (int attempt = 0; attempt < 1000 && count < n - 1; ++attempt) {
      std::int64_t f = static_cast<std::int64_t>(g() % static_cast<std::uint64_t>(cands));
      int need = 0;
      for (std::int64_t a = f; a != -1; a = parent_of(a)) need += chosen[static_cast<std::size_t>(a)] ? 0 : 1;
      if (count + need > n - 1) continue;
      for (std::int64_t a = f; a != -1; a = parent_of(a)) {
        if (!chosen[static_cast<std::size_t>(a)]) ++count;
        chosen[static_cast<std::size_t>(a)] = 1;
      }
    }
    for (std::int64_t f = 0; f < cands && count < n - 1; ++f)  // top up with root children (always valid)
      if (f < topk && !chosen[static_cast<std::size_t>(f)]) {
        chosen[static_cast<std::size_t>(f)] = 1;
        ++count;
      }
    int placed = 0;
    for (std::int64_t f = 0; f < cands; ++f)
      if (chosen[static_cast<std::size_t>(f)]) {
        d.selected.push_back(f);
        ++placed;
      }
    for (; placed < n - 1; ++placed) d.selected.push_back(0);  // too few candidates: repeats (still valid)
    d.parent_list.insert(d.parent_list.end(), pl.begin(), pl.end());
    d.seq_len.push_back(static_cast<std::int64_t>(g() % 7));
  }
  return d;
}

// Transcription of SGLang's build_tree_efficient (block per request, one
// thread per slot, run here slot by slot) on buffers pre-filled as SGLang's
// caller does (mask all true, links -1). full_mask (mode 0) and qlen_only
// (mode 1) byte masks. Searches stop at the request's n - 1 entries.
inline void reference_build_tree(const draft_steps& d, int mode, std::vector<std::uint8_t>& mask,
                                 std::vector<std::int64_t>& positions, std::vector<std::int64_t>& ridx,
                                 std::vector<std::int64_t>& next, std::vector<std::int64_t>& sib) {
  const int n = d.n, topk = d.topk, blocks = topk * (d.depth - 1) + 1;
  for (int bid = 0; bid < d.bs; ++bid) {
    const std::int64_t* sel = d.selected.data() + static_cast<std::size_t>(bid * (n - 1));
    const std::int64_t* pl = d.parent_list.data() + static_cast<std::size_t>(bid * blocks);
    std::int64_t seq_tree_idx = static_cast<std::int64_t>(n) * n * bid;
    for (int i = 0; i < bid; ++i) seq_tree_idx += d.seq_len[static_cast<std::size_t>(i)] * n;
    const std::int64_t seq_len = d.seq_len[static_cast<std::size_t>(bid)];
    for (int tid = 0; tid < n; ++tid) {
      const std::int64_t token_tree_idx = mode == 0 ? seq_tree_idx + (seq_len + n) * tid + seq_len + 1
                                                    : static_cast<std::int64_t>(n) * n * bid + n * tid + 1;
      mask[static_cast<std::size_t>(token_tree_idx - 1)] = 1;
      for (int i = 0; i < n - 1; ++i) mask[static_cast<std::size_t>(token_tree_idx + i)] = 0;
      int position = 0;
      if (tid == 0) {
        positions[static_cast<std::size_t>(bid * n)] = seq_len;
        for (int i = n - 1; i > 0; --i) {
          ridx[static_cast<std::size_t>(bid * n + i)] = bid * n + i;
          const std::int64_t tb = sel[i - 1] / topk;
          int pp = 0;
          if (tb > 0) {
            const std::int64_t want = pl[tb];
            for (; pp < n - 1; ++pp)
              if (sel[pp] == want) {
                ++pp;
                break;
              }
          }
          const auto at = static_cast<std::size_t>(bid * n + pp);
          if (next[at] == -1) {
            next[at] = i;
          } else {
            sib[static_cast<std::size_t>(bid * n + i)] = next[at];
            next[at] = i;
          }
        }
        ridx[static_cast<std::size_t>(bid * n)] = bid * n;
      } else {
        int cur = tid - 1;
        while (true) {
          position += 1;
          mask[static_cast<std::size_t>(token_tree_idx + cur)] = 1;
          const std::int64_t tb = sel[cur] / topk;
          if (tb == 0) break;
          const std::int64_t want = pl[tb];
          for (cur = 0; cur < n - 1; ++cur)
            if (sel[cur] == want) break;
        }
        positions[static_cast<std::size_t>(bid * n + tid)] = position + seq_len;
      }
    }
  }
}

}  // namespace sglang_ref
