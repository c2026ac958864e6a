"""CUDA entry points of the peers' entry points (kernels/interop.hpp: SGLang's
verify, sampling and build_tree, chain acceptance counts) against their host
twins.

The host bindings on the same inputs are the reference (torch CUDA
tensors on the device). Skipped unless this build has the CUDA kernels,
torch is installed and a CUDA device is visible."""
import numpy as np
import pytest

import specdec
from cuda_util import needs_cuda, DEV, cu, host, random_rows, torch

pytestmark = needs_cuda


def test_sglang_greedy_and_sampling_match_host(rng):
    from test_interop_sglang import sglang_batch
    B, n, V, spec = 16, 9, 6, 9
    cand, ri, nt, ns = sglang_batch(rng, B, n, V)
    bad = nt.copy()
    bad[3, 0] = n  # request 3: a link out of range
    target_predict = rng.integers(0, V, size=B * n).astype(np.int64)
    probs = random_rows(rng, B * n, V)
    coins = rng.random(B * n).astype(np.float32)
    final = rng.random(B).astype(np.float32)
    for f, extra in ((specdec.sglang_verify_tree_greedy, (target_predict,)),
                     (specdec.sglang_tree_sampling_target_only, (probs, coins, final))):
        st_h = np.zeros(B, np.int32)
        apd_h = np.zeros(spec, np.int64)
        want = f(cand, ri, bad, ns, *extra, spec, request_status=st_h, accepted_per_depth=apd_h)
        pred = torch.full((B * n,), 0, dtype=torch.int32, device=DEV)
        acc = torch.full((B, spec), -1, dtype=torch.int32, device=DEV)
        num = torch.zeros(B, dtype=torch.int32, device=DEV)
        st = torch.full((B,), 99, dtype=torch.int32, device=DEV)
        apd = torch.zeros(spec, dtype=torch.int64, device=DEV)
        ptrs = (pred.data_ptr(), acc.data_ptr(), num.data_ptr())
        got = f(cu(cand), cu(ri), cu(bad), cu(ns), *(cu(e) for e in extra), spec, predicts=pred, accept_index=acc,
                accept_token_num=num, request_status=st, accepted_per_depth=apd)
        torch.cuda.synchronize()
        assert tuple(t.data_ptr() for t in got) == ptrs
        np.testing.assert_array_equal(host(st), st_h)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(host(g), w)
        np.testing.assert_array_equal(host(apd), apd_h)
        with pytest.raises(specdec.Error, match="out_of_range"):  # no request_status: waits and raises
            f(cu(cand), cu(ri), cu(bad), cu(ns), *(cu(e) for e in extra), spec)


@pytest.mark.parametrize("mode", [0, 1, 2, 3])
def test_sglang_verify_tree_matches_host(rng, mode):
    from test_interop_sglang import sglang_batch
    B, n, V = 12, 8, 7
    cand, ri, nt, ns = sglang_batch(rng, B, n, V)
    p, q = random_rows(rng, B * n, V), random_rows(rng, B * n, V)
    for u in (None, rng.random((B * n, n + 1))):
        kw = dict(num_speculative_tokens=n, modes=mode, seeds=rng.integers(0, 2**40, size=B).astype(np.uint64),
                  rounds=2)
        apd_h = np.zeros(n, np.int64)
        want = specdec.sglang_verify_tree(cand, ri, nt, ns, p, q, uniforms=u, accepted_per_depth=apd_h, **kw)
        apd = torch.zeros(n, dtype=torch.int64, device=DEV)
        got = specdec.sglang_verify_tree(cu(cand), cu(ri), cu(nt), cu(ns), cu(p), cu(q),
                                         uniforms=None if u is None else cu(u), accepted_per_depth=apd, **kw)
        torch.cuda.synchronize()
        for g, w in zip(got[:3], want[:3]):
            np.testing.assert_array_equal(host(g), w)
        assert (host(got[3]) == 0).all()
        np.testing.assert_array_equal(host(apd), apd_h)


@pytest.mark.parametrize("mode", ["full_mask", "qlen_only", "qlen_only_bitpacking"])
def test_sglang_build_tree_matches_host(rng, mode):
    from test_interop_sglang import eagle_case
    topk, depth, n, B = 4, 4, 12, 6
    pl, sel, sl = eagle_case(rng, B, topk, depth, n)
    sel[4, -1] = topk * (topk * (depth - 1) + 1)  # request 4: out of range
    st_h = np.zeros(B, np.int32)
    want = specdec.sglang_build_tree(pl, sel, sl, topk=topk, depth=depth, draft_token_num=n, mode=mode,
                                     request_status=st_h)
    st = torch.full((B,), 99, dtype=torch.int32, device=DEV)
    got = specdec.sglang_build_tree(cu(pl), cu(sel), cu(sl), topk=topk, depth=depth, draft_token_num=n, mode=mode,
                                    request_status=st)
    torch.cuda.synchronize()
    np.testing.assert_array_equal(host(st), st_h)
    np.testing.assert_array_equal(host(got[0].view(torch.uint8)), want[0].view(np.uint8))
    for g, w in zip(got[1:5], want[1:5]):
        np.testing.assert_array_equal(host(g)[np.repeat(st_h == 0, n)], w[np.repeat(st_h == 0, n)])


def test_chain_acceptance_counts_batch_matches_host(rng):
    B, g, V = 40, 6, 9
    target = random_rows(rng, B * (g + 1), V).reshape(B, g + 1, V)
    draft = random_rows(rng, B * g, V).reshape(B, g, V)
    drafts = rng.integers(0, V, size=(B, g)).astype(np.int32)
    drafts[7, 1] = V  # request 7: token out of range
    coins = rng.random((B, g + 1)).astype(np.float32)
    st_h = np.zeros(B, np.int32)
    a_h, e_h, _ = specdec.chain_acceptance_counts_batch(drafts, target, draft, coins, request_status=st_h)
    st = torch.full((B,), 99, dtype=torch.int32, device=DEV)
    a, e, _ = specdec.chain_acceptance_counts_batch(cu(drafts), cu(target), cu(draft), cu(coins), request_status=st)
    torch.cuda.synchronize()
    np.testing.assert_array_equal(host(st), st_h)
    ok = st_h == 0
    np.testing.assert_array_equal(host(a)[ok], a_h[ok])
    np.testing.assert_array_equal(host(e)[ok], e_h[ok])
