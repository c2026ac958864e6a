// Rows in bf16 and fp16 (core/float16.hpp, core/rows_view.hpp): the exact
// widening of every 16-bit pattern, and verification of typed rows against
// the same rows widened to fp32 first (every mode, trees, chains, batches,
// strided views, the kernels' row helper), plus their error cases.
#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <vector>

#include "specdec/core/float16.hpp"
#include "specdec/core/rows_view.hpp"
#include "specdec/kernels/verify.hpp"
#include "specdec/verify/batch_verify.hpp"
#include "specdec/verify/tree_verify.hpp"
#include "verify/row_types_util.hpp"

using namespace specdec;
using specdec_test::f16_reference;
using specdec_test::to_bf16;
using specdec_test::to_f16;

namespace {

struct typed_rows {
  std::vector<std::uint16_t> bits;  // n x V, the 16-bit rows
  std::vector<float> wide;          // the same values widened to fp32
};

// Random probability rows rounded to `t` (about a third of the entries 0).
typed_rows random_typed_rows(std::mt19937& gen, std::int64_t n, std::int64_t V, row_dtype t) {
  typed_rows r;
  std::uniform_real_distribution<double> U(0.0, 1.0);
  for (std::int64_t u = 0; u < n; ++u) {
    std::vector<double> w(static_cast<std::size_t>(V));
    double s = 0;
    for (auto& x : w) {
      x = U(gen) < 0.3 ? 0.0 : std::pow(U(gen), 3.0);
      s += x;
    }
    if (s == 0) w[0] = s = 1;
    for (double x : w) {
      const auto f = static_cast<float>(x / s);
      const std::uint16_t b = t == row_dtype::bf16 ? to_bf16(f) : to_f16(f);
      r.bits.push_back(b);
      r.wide.push_back(t == row_dtype::bf16 ? detail::widen_bf16(b) : detail::widen_f16(b));
    }
  }
  return r;
}

rows_view typed_view(const std::vector<std::uint16_t>& bits, row_dtype t, std::int64_t n, std::int64_t V) {
  rows_view v;
  v.data = bits.data();
  v.extent[0] = n;
  v.extent[1] = V;
  v.stride[0] = V;
  v.stride[1] = 1;
  v.dtype = t;
  return v;
}

token_tree random_tree(std::mt19937& gen, int n, std::int64_t V, bool chain) {
  token_tree t(static_cast<token_id>(gen() % V));
  for (int i = 1; i < n; ++i) {
    const auto par = static_cast<node_id>(chain ? i - 1 : static_cast<int>(gen() % static_cast<unsigned>(i)));
    auto x = static_cast<token_id>(gen() % V);
    for (node_id c = 1; c < t.size(); ++c)  // distinct siblings
      if (t.parent(c) == par && t.token(c) == x) {
        x = static_cast<token_id>((x + 1) % V);
        c = 0;
      }
    t.add_child(par, x);
  }
  return t;
}

struct outcome {
  status st;
  verify_result res{};
  std::vector<node_id> path;
  std::vector<token_id> toks;
};

outcome run_tree(const token_tree& t, const rows_view& p, const rows_view& q, const verify_params& vp, std::int64_t V) {
  outcome o;
  std::vector<std::byte> ws(verify_workspace_size(V, t.size()));
  o.path.assign(static_cast<std::size_t>(t.size()), -7);
  o.toks.assign(static_cast<std::size_t>(t.size()), -7);
  o.st = verify_tree(t.view(), p, q, vp, ws, o.path, o.toks, o.res);
  return o;
}

void check_same(const outcome& a, const outcome& b) {
  CHECK(a.st.code() == b.st.code());
  CHECK(a.st.index() == b.st.index());
  CHECK(a.res.accepted == b.res.accepted);
  CHECK(a.res.last_node == b.res.last_node);
  CHECK(a.res.next_token == b.res.next_token);
  CHECK(a.path == b.path);
  CHECK(a.toks == b.toks);
}

verify_params params_of(std::int32_t mode, std::uint64_t seed, std::uint32_t round) {
  verify_params vp;
  vp.mode = static_cast<verify_mode>(mode);
  vp.seed = seed;
  vp.round = round;
  vp.normalization_tolerance = 0.05f;  // 16-bit rows are normalized to about 2^-8
  return vp;
}

}  // namespace

TEST_CASE("bf16 and fp16 widen exactly, every bit pattern") {
  int checked = 0;
  for (std::uint32_t b = 0; b < 65536; ++b) {
    const auto h = static_cast<std::uint16_t>(b);
    const float bf = static_cast<float>(bfloat16{h});
    REQUIRE(std::bit_cast<std::uint32_t>(bf) == b << 16);
    const float f = static_cast<float>(float16{h});
    const double want = f16_reference(h);
    if (std::isnan(want)) {
      REQUIRE(std::isnan(f));
      // The payload and sign travel: the top 10 mantissa bits are the fp16 ones.
      REQUIRE(std::bit_cast<std::uint32_t>(f) == ((b & 0x8000u) << 16 | 0x7F800000u | (b & 0x3FFu) << 13));
    } else {
      REQUIRE(static_cast<double>(f) == want);
      REQUIRE(std::signbit(f) == ((b & 0x8000u) != 0));  // -0 stays -0
    }
    ++checked;
  }
  CHECK(checked == 65536);
  STATIC_REQUIRE(row_dtype_bytes(row_dtype::f32) == 4 && row_dtype_bytes(row_dtype::bf16) == 2 &&
                 row_dtype_bytes(row_dtype::f16) == 2 && row_dtype_bytes(static_cast<row_dtype>(3)) == 0);
  STATIC_REQUIRE(row_dtype_of<bfloat16> == row_dtype::bf16 && row_dtype_of<float16> == row_dtype::f16);
}

TEST_CASE("16-bit argmax on raw words equals the argmax of the widened row") {
  // Rows drawn from a few values so that ties, -0 / +0, infinities and NaNs
  // meet inside and across the 64-word blocks; lengths around the blocks.
  const std::uint64_t seed = 20261128;
  INFO("seed " << seed);
  std::mt19937_64 gen(seed);
  for (const row_dtype t : {row_dtype::bf16, row_dtype::f16}) {
    const bool bf = t == row_dtype::bf16;
    const std::uint16_t inf = bf ? 0x7F80 : 0x7C00, nan = bf ? 0x7FC0 : 0x7E00;
    const std::vector<std::uint16_t> special{
        0x0000, 0x8000, inf, static_cast<std::uint16_t>(inf | 0x8000), nan, static_cast<std::uint16_t>(nan | 0x8000)};
    int cases = 0, with_nan = 0;
    for (int trial = 0; trial < 3000; ++trial) {
      const std::int64_t V = 1 + static_cast<std::int64_t>(gen() % 300);
      std::vector<std::uint16_t> w(static_cast<std::size_t>(V));
      const auto pool = 1 + gen() % 6;  // few distinct words: many ties
      std::vector<std::uint16_t> vals;
      for (std::uint64_t k = 0; k < pool; ++k)
        vals.push_back(gen() % 4 == 0 ? special[gen() % special.size()] : static_cast<std::uint16_t>(gen()));
      for (auto& x : w) x = vals[gen() % vals.size()];
      if (trial % 3 == 0)  // mostly NaN-free rows
        for (auto& x : w)
          if ((x & 0x7FFF) > inf) x = 0x8000;
      std::vector<float> wide(w.size());
      specdec::detail::widen_range(specdec::detail::row_ref{w.data(), 1, t}, 0, V, wide.data());
      token_id a16 = -1, a32 = -1;
      const bool ok16 = specdec::detail::argmax_pass(specdec::detail::row_ref{w.data(), 1, t}, V, a16);
      const bool ok32 = specdec::detail::argmax_pass(specdec::detail::row_ref{wide.data(), 1}, V, a32);
      INFO((bf ? "bf16" : "fp16") << " trial " << trial << " V " << V);
      REQUIRE(ok16 == ok32);
      if (ok16) REQUIRE(a16 == a32);  // with a NaN the token is unspecified (the caller reports non_finite)
      ++cases;
      with_nan += ok16 ? 0 : 1;
    }
    CHECK(cases == 3000);
    CHECK(with_nan > 100);  // both branches ran
    CHECK(with_nan < 2900);
  }
}

TEST_CASE("typed rows verify exactly as the same rows widened to fp32: every mode, trees and chains") {
  const std::uint64_t seed = 20261127;
  std::printf("[row types] seed %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937 gen(static_cast<std::uint32_t>(seed));
  int compared = 0, accepted_any = 0;
  for (int trial = 0; trial < 240; ++trial) {
    const std::int64_t V =
        trial % 3 == 0 ? 1000 + static_cast<std::int64_t>(gen() % 2200) : 10 + gen() % 60;  // > 8 siblings
    const int n = 1 + static_cast<int>(gen() % 9);
    const row_dtype pt = trial % 2 == 0 ? row_dtype::bf16 : row_dtype::f16;
    const row_dtype qt = trial % 4 < 2 ? row_dtype::f16 : row_dtype::bf16;
    const auto P = random_typed_rows(gen, n, V, pt);
    const auto Q = random_typed_rows(gen, n, V, qt);
    const rows_view pv = typed_view(P.bits, pt, n, V), qv = typed_view(Q.bits, qt, n, V);
    const rows_view pw = make_view(P.wide.data(), n, V), qw = make_view(Q.wide.data(), n, V);
    for (std::int32_t m = 0; m < verify_mode_count; ++m) {
      const bool chain = static_cast<verify_mode>(m) == verify_mode::block || trial % 5 == 0;
      const auto t = random_tree(gen, n, V, chain);
      const verify_params vp = params_of(m, seed + static_cast<std::uint64_t>(trial), static_cast<std::uint32_t>(m));
      INFO("trial " << trial << " mode " << m << " V " << V << " n " << n);
      const outcome a = run_tree(t, pv, qv, vp, V), b = run_tree(t, pw, qw, vp, V);
      check_same(a, b);
      // fp32 p with 16-bit q, and the reverse, mix the types in one walk.
      check_same(run_tree(t, pw, qv, vp, V), b);
      check_same(run_tree(t, pv, qw, vp, V), b);
      ++compared;
      accepted_any += a.st.ok() && a.res.accepted > 0 ? 1 : 0;
      if (chain && n > 1) {
        std::vector<token_id> drafts;
        for (node_id u = 1; u < t.size(); ++u) drafts.push_back(t.token(u));
        std::vector<std::byte> ws(verify_workspace_size(V, n));
        std::vector<token_id> ta(static_cast<std::size_t>(n), -7), tb(static_cast<std::size_t>(n), -7);
        verify_result ra{}, rb{};
        const status sa = verify_chain(drafts, pv, qv, vp, ws, ta, ra);
        const status sb = verify_chain(drafts, pw, qw, vp, ws, tb, rb);
        CHECK(sa.code() == sb.code());
        CHECK(ta == tb);
        CHECK(ra.next_token == rb.next_token);
      }
    }
  }
  INFO("accepted at least one draft in " << accepted_any << " of " << compared);
  CHECK(accepted_any > compared / 5);  // the comparison exercised acceptances, not only rejections
}

TEST_CASE("typed rows: strided views and ragged batches") {
  const std::uint64_t seed = 77;
  std::printf("[row types, batch] seed %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937 gen(static_cast<std::uint32_t>(seed));
  const std::int64_t V = 1500;
  const int R = 9;
  std::vector<std::int32_t> off{0};
  std::vector<token_id> tok;
  std::vector<node_id> par;
  for (int r = 0; r < R; ++r) {
    const auto t = random_tree(gen, 1 + static_cast<int>(gen() % 7), V, r % 3 == 0);
    tok.insert(tok.end(), t.tokens().begin(), t.tokens().end());
    par.insert(par.end(), t.parents().begin(), t.parents().end());
    off.push_back(off.back() + t.size());
  }
  const std::int64_t N = off.back();
  const auto P = random_typed_rows(gen, N, V, row_dtype::bf16);
  const auto Q = random_typed_rows(gen, N, V, row_dtype::f16);
  // p and q interleaved in one padded buffer of 16-bit words: strides (2V + 6, 2).
  const std::int64_t rs = 2 * V + 6;
  std::vector<std::uint16_t> buf(static_cast<std::size_t>(N * rs), 0xFFFF);  // NaN padding in both types
  for (std::int64_t u = 0; u < N; ++u)
    for (std::int64_t i = 0; i < V; ++i) {
      buf[static_cast<std::size_t>(u * rs + 2 * i)] = P.bits[static_cast<std::size_t>(u * V + i)];
      buf[static_cast<std::size_t>(u * rs + 2 * i + 1)] = Q.bits[static_cast<std::size_t>(u * V + i)];
    }
  rows_view pv = typed_view(buf, row_dtype::bf16, N, V), qv = typed_view(buf, row_dtype::f16, N, V);
  pv.stride[0] = qv.stride[0] = rs;
  pv.stride[1] = qv.stride[1] = 2;
  qv.data = buf.data() + 1;
  std::vector<verify_params> ps;
  for (int r = 0; r < R; ++r) {
    std::int32_t m = r % verify_mode_count;
    if (static_cast<verify_mode>(m) == verify_mode::block && r % 3 != 0) m = 0;  // block needs a chain
    ps.push_back(params_of(m, 900 + static_cast<std::uint64_t>(r), 3));
  }
  auto run = [&](const rows_view& p, const rows_view& q, std::vector<token_id>& toks) {
    const int L = 8;
    std::vector<node_id> paths(static_cast<std::size_t>(R * L), -9);
    toks.assign(static_cast<std::size_t>(R * L), -9);
    std::vector<verify_result> res(static_cast<std::size_t>(R));
    const verify_batch_input in{off, tree_view{tok.data(), par.data(), nullptr, nullptr, static_cast<std::int32_t>(N)},
                                p, q, ps};
    std::vector<std::byte> ws(verify_batch_workspace_size(V, off));
    const status st =
        verify_batch(in, ws, verify_batch_output{make_view(paths.data(), R, L), make_view(toks.data(), R, L), res, {}});
    REQUIRE(st.ok());
    return res;
  };
  std::vector<token_id> ta, tb;
  const auto ra = run(pv, qv, ta);
  const auto rb = run(make_view(P.wide.data(), N, V), make_view(Q.wide.data(), N, V), tb);
  CHECK(ta == tb);
  for (int r = 0; r < R; ++r) {
    const auto& a = ra[static_cast<std::size_t>(r)];
    const auto& b = rb[static_cast<std::size_t>(r)];
    CHECK(a.code == status_code::ok);  // every request verified, not refused on both sides
    CHECK(a.code == b.code);
    CHECK(a.accepted == b.accepted);
    CHECK(a.last_node == b.last_node);
    CHECK(a.next_token == b.next_token);
  }
}

TEST_CASE("typed rows: bad entries and bad tags") {
  const std::int64_t V = 8;
  token_tree t(1);
  t.add_child(0, 2);
  std::vector<std::uint16_t> p(2 * V, to_bf16(0.125f)), q(2 * V, to_bf16(0.125f));
  verify_params vp = params_of(0, 5, 0);
  auto st = [&](row_dtype pt) {
    rows_view pv = typed_view(p, pt, 2, V), qv = typed_view(q, row_dtype::bf16, 2, V);
    return run_tree(t, pv, qv, vp, V).st.code();
  };
  CHECK(st(row_dtype::bf16) == status_code::ok);
  p[3] = 0x7FC0;  // a bf16 NaN in the root row
  CHECK(st(row_dtype::bf16) == status_code::non_finite);
  p[3] = 0x7C00;  // +inf as fp16 (the other words, bf16 0.125, read as fp16 1.5)
  CHECK(st(row_dtype::f16) == status_code::non_finite);
  std::fill(p.begin(), p.end(), to_f16(0.125f));
  p[3] = 0x8000 | to_f16(0.125f);  // a negative fp16 entry
  CHECK(st(row_dtype::f16) == status_code::negative_probability);
  p[3] = to_f16(0.125f);
  CHECK(st(row_dtype::f16) == status_code::ok);
  CHECK(st(static_cast<row_dtype>(7)) == status_code::invalid_argument);  // unknown tag, nothing read
  // The kernels' host checks and row helper.
  kernels::verify_batch_params P;
  P.num_requests = 1;
  P.vocab = static_cast<std::int32_t>(V);
  P.max_nodes = P.node_capacity = P.out_stride = 2;
  int dummy = 0;
  P.offsets = &dummy;
  P.token = &dummy;
  P.parent = &dummy;
  P.p = p.data();
  P.params = &vp;
  P.paths = &dummy;
  P.tokens = &dummy;
  verify_result r{};
  P.results = &r;
  P.p_row_stride = V;
  P.p_dtype = row_dtype::f16;
  CHECK(kernels::verify_batch_can_implement(P).ok());
  P.q_dtype = static_cast<row_dtype>(-1);
  CHECK(kernels::verify_batch_can_implement(P).code() == status_code::invalid_argument);
  P.q_dtype = row_dtype::bf16;
  P.q = q.data();
  P.q_row_stride = V;
  const walk_rows rows = kernels::verify_request_rows(P, 1);
  CHECK(rows.prow(0)[3] == detail::widen_f16(p[static_cast<std::size_t>(V + 3)]));
  CHECK(rows.qrow(0)[5] == detail::widen_bf16(q[static_cast<std::size_t>(V + 5)]));
  CHECK(rows.prow(-1)[2] == detail::widen_f16(p[2]));
}
