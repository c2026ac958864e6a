"""CUDA entry points against the host bindings on the same inputs (torch
CUDA tensors): identical masks, positions, paths, tokens, status codes and
prune ids; KV commits bit-identical; SSM floats within 1e-4 absolute + 1e-4
relative (the tolerance tests/gpu/test_ssm.cpp uses, float32) and 1e-10
(float64). Also: outputs are the caller's tensors (zero-copy), the stream
argument is honoured, and bad inputs raise with outputs untouched.

Skipped unless this build has the CUDA kernels, torch is installed and a
CUDA device is visible."""
import numpy as np
import pytest

import specdec
from conftest import random_tree

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not (specdec.cuda_available() and torch.cuda.is_available()),
                                reason="needs the CUDA build of specdec, torch and a CUDA device")

DEV = "cuda"


def cu(a):
    return torch.from_numpy(np.ascontiguousarray(a)).to(DEV)


def host(t):
    return t.cpu().numpy()


def random_batch(rng, sizes):
    parents = [random_tree(rng, n) for n in sizes]
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int32)
    return np.concatenate(parents).astype(np.int32), offsets


def random_rows(rng, n, V, peaked=True):
    logits = rng.standard_normal((n, V)) * (3.0 if peaked else 1.0)
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    return (p / p.sum(axis=1, keepdims=True)).astype(np.float32)


# ---------------------------------------------------------------------------
# masks and positions
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("word_bits", [32, 64])
def test_tree_masks_match_host(rng, word_bits):
    parents, offsets = random_batch(rng, [1, 3, 17, 64, 65, 130])
    cache_len = rng.integers(0, 1000, size=len(offsets) - 1).astype(np.int64)
    hm, hp, hs = specdec.tree_masks_batched(parents, offsets, cache_len, word_bits=word_bits)
    masks = torch.zeros(hm.shape, dtype=getattr(torch, f"uint{word_bits}"), device=DEV)
    pos = torch.full((len(parents),), -5, dtype=torch.int64, device=DEV)
    st = torch.full((len(offsets) - 1,), -5, dtype=torch.int32, device=DEV)
    ptrs = (masks.data_ptr(), pos.data_ptr(), st.data_ptr())
    m, p, s = specdec.tree_masks_batched(cu(parents), cu(offsets), cu(cache_len), word_bits=word_bits,
                                         max_nodes=int(np.diff(offsets).max()), masks=masks, positions=pos,
                                         tree_status=st)
    torch.cuda.synchronize()
    assert (m.data_ptr(), p.data_ptr(), s.data_ptr()) == ptrs
    bits = m.view(torch.int64 if word_bits == 64 else torch.int32).cpu().numpy().view(hm.dtype)
    np.testing.assert_array_equal(bits, hm)
    np.testing.assert_array_equal(host(p), hp)
    np.testing.assert_array_equal(host(s), hs)


def test_tree_masks_bad_tree_reported_rows_untouched(rng):
    parents, offsets = random_batch(rng, [4, 5])
    parents[offsets[1] + 2] = 3  # not topological in tree 1
    hm, hp, hs = specdec.tree_masks_batched(parents, offsets)
    pos = torch.full((len(parents),), -5, dtype=torch.int64, device=DEV)
    _, p, s = specdec.tree_masks_batched(cu(parents), cu(offsets), max_nodes=5, positions=pos,
                                         masks=torch.zeros((9, 1), dtype=torch.uint64, device=DEV))
    torch.cuda.synchronize()
    assert host(s)[0] == 0 and host(s)[1] == hs[1] != 0
    assert (host(p)[offsets[1]:] == -5).all()


def test_stream_is_honoured(rng):
    parents, offsets = random_batch(rng, [40, 40])
    want = specdec.tree_masks_batched(parents, offsets)[1]
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
    par, off = cu(parents), cu(offsets)
    pos = torch.full((80,), -5, dtype=torch.int64, device=DEV)
    masks = torch.zeros((80, 1), dtype=torch.uint64, device=DEV)
    st = torch.zeros(2, dtype=torch.int32, device=DEV)
    torch.cuda.synchronize()
    for how in ("current", "object", "int"):
        pos.fill_(-5)
        torch.cuda.synchronize()
        with torch.cuda.stream(s1):
            torch.cuda._sleep(200_000_000)  # keeps s1 busy for a while
            kw = {"current": {}, "object": {"stream": s1}, "int": {"stream": s1.cuda_stream}}[how]
            specdec.tree_masks_batched(par, off, max_nodes=40, masks=masks, positions=pos, tree_status=st, **kw)
        with torch.cuda.stream(s2):  # s2 does not wait for s1: the launch must still be queued there
            early = pos.clone()
        s2.synchronize()
        assert (host(early) == -5).all(), how
        s1.synchronize()
        np.testing.assert_array_equal(host(pos), want)


# ---------------------------------------------------------------------------
# verification
# ---------------------------------------------------------------------------

DEVICE_MODES = [specdec.Mode.SAMPLED_IID, specdec.Mode.SAMPLED_WITHOUT_REPLACEMENT, specdec.Mode.DETERMINISTIC,
                specdec.Mode.GREEDY, specdec.Mode.NAIVE_MATCHING, specdec.Mode.TYPICAL_LOSSY]


def verify_inputs(rng, sizes, V):
    parents, offsets = random_batch(rng, sizes)
    n = len(parents)
    p = random_rows(rng, n, V)
    q = random_rows(rng, n, V)
    tokens = rng.integers(0, V, size=n).astype(np.int32)
    # A first child often carries its parent row's argmax, so that paths get
    # long (later siblings stay random; equal siblings are left to chance).
    seen = set()
    for i in range(n):
        r = int(np.searchsorted(offsets, i, "right")) - 1
        if parents[i] < 0:
            continue
        gp = int(offsets[r] + parents[i])
        if gp not in seen and rng.random() < 0.7:
            tokens[i] = int(np.argmax(p[gp]))
        seen.add(gp)
    return parents, offsets, tokens, p, q


@pytest.mark.parametrize("mode", DEVICE_MODES)
@pytest.mark.parametrize("with_uniforms", [False, True])
def test_verify_batch_matches_host(rng, mode, with_uniforms):
    V = 50
    parents, offsets, tokens, p, q = verify_inputs(rng, [1, 2, 9, 33, 16], V)
    R = len(offsets) - 1
    u = rng.random((len(parents), 8)) if with_uniforms else None
    seeds = rng.integers(0, 2**63, size=R, dtype=np.uint64)
    kw = dict(modes=int(mode), seeds=seeds, rounds=3, uniforms=u)
    L = int(np.diff(offsets).max())
    hp, ht = np.full((R, L), -3, np.int32), np.full((R, L), -3, np.int32)
    dp = torch.full((R, L), -3, dtype=torch.int32, device=DEV)
    dt = torch.full((R, L), -3, dtype=torch.int32, device=DEV)
    dr = torch.zeros((R, 4), dtype=torch.int32, device=DEV)
    counts = torch.zeros(L, dtype=torch.int64, device=DEV)
    hcounts = np.zeros(L, dtype=np.int64)
    hp, ht, hr = specdec.verify_batch(offsets, parents, tokens, p, q, paths=hp, tokens_out=ht,
                                      accepted_per_depth=hcounts, **kw)
    ptrs = (dp.data_ptr(), dt.data_ptr(), dr.data_ptr())
    gp, gt, gr = specdec.verify_batch(offsets, cu(parents), cu(tokens), cu(p), cu(q), paths=dp, tokens_out=dt,
                                      results=dr, accepted_per_depth=counts,
                                      **{**kw, "uniforms": None if u is None else cu(u)})
    torch.cuda.synchronize()
    assert (gp.data_ptr(), gt.data_ptr(), gr.data_ptr()) == ptrs
    if mode == specdec.Mode.TYPICAL_LOSSY:
        # The device's log/exp may decide a threshold within an ulp differently.
        assert (host(gr)[:, 3] == hr[:, 3]).all()
        return
    np.testing.assert_array_equal(host(gr), hr)
    np.testing.assert_array_equal(host(gp), hp)
    np.testing.assert_array_equal(host(gt), ht)
    np.testing.assert_array_equal(host(counts), hcounts)


def test_verify_tree_and_chain_match_host(rng):
    V = 40
    parents, offsets, tokens, p, q = verify_inputs(rng, [25], V)
    for mode in (specdec.Mode.SAMPLED_IID, specdec.Mode.GREEDY, specdec.Mode.DETERMINISTIC):
        for seed in range(5):
            h = specdec.verify_tree(parents, tokens, p, q, mode=mode, seed=seed)
            g = specdec.verify_tree(cu(parents), cu(tokens), cu(p), cu(q), mode=mode, seed=seed)
            assert (g.accepted, g.last_node, g.next_token) == (h.accepted, h.last_node, h.next_token)
            np.testing.assert_array_equal(host(g.path), h.path)
            np.testing.assert_array_equal(host(g.tokens), h.tokens)
    drafts = rng.integers(0, V, size=6).astype(np.int32)
    pc, qc = random_rows(rng, 7, V), random_rows(rng, 7, V)
    for seed in range(10):
        h = specdec.verify_chain(drafts, pc, qc, seed=seed)
        g = specdec.verify_chain(cu(drafts), cu(pc), cu(qc), seed=seed)
        assert (g.accepted, g.next_token) == (h.accepted, h.next_token)
        np.testing.assert_array_equal(host(g.tokens), h.tokens)


def test_verify_sampled_exactness_on_device(rng):
    """chi-square of the first emitted token of a 1-draft chain against p
    (lossless), with a negative control (q's distribution) that must fail."""
    V, trials = 6, 200_000
    p = random_rows(rng, 2, V, peaked=False)
    q = random_rows(rng, 2, V, peaked=False)
    # Drafts drawn from q, one request per trial; row 0 is shared via stride 0.
    drafts = rng.choice(V, size=trials, p=q[0] / q[0].sum()).astype(np.int32)
    R = trials
    offsets = np.arange(0, 2 * R + 1, 2, dtype=np.int32)
    parents = np.tile(np.array([-1, 0], np.int32), R)
    tokens = np.stack([np.zeros(R, np.int32), drafts], 1).reshape(-1)
    pp = torch.from_numpy(np.tile(p, (R, 1))).to(DEV)
    qq = torch.from_numpy(np.tile(q, (R, 1))).to(DEV)
    paths, toks, res = specdec.verify_batch(offsets, cu(parents), cu(tokens), pp, qq,
                                            modes=int(specdec.Mode.SAMPLED_IID), seeds=12345)
    torch.cuda.synchronize()
    first = host(toks)[:, 0].copy()
    acc = host(res)[:, 0]
    first[acc == 0] = host(res)[acc == 0, 2]
    counts = np.bincount(first, minlength=V)
    chi = float((((counts - trials * p[0]) ** 2) / (trials * p[0])).sum())
    neg = float((((counts - trials * q[0]) ** 2) / (trials * q[0])).sum())
    print(f"chi2 vs p {chi:.1f}, vs q (control) {neg:.1f}")
    assert chi < 20.5  # 5 dof, p = 0.001
    assert neg > 20.5


def test_verify_bad_inputs_raise_untouched(rng):
    V = 10
    parents, offsets, tokens, p, q = verify_inputs(rng, [4, 4], V)
    paths = torch.full((2, 4), -3, dtype=torch.int32, device=DEV)
    toks = torch.full((2, 4), -3, dtype=torch.int32, device=DEV)
    with pytest.raises(specdec.Error, match="offsets"):
        specdec.verify_batch(np.array([0, 4, 9], np.int32), cu(parents), cu(tokens), cu(p), cu(q), paths=paths,
                             tokens_out=toks)
    with pytest.raises(specdec.Error, match="size_mismatch"):
        specdec.verify_batch(offsets, cu(parents), cu(tokens), cu(p[:5]), cu(q), paths=paths, tokens_out=toks)
    with pytest.raises(specdec.Error, match="one CUDA device|host"):
        specdec.verify_batch(offsets, cu(parents), tokens, cu(p), cu(q), paths=paths, tokens_out=toks)
    torch.cuda.synchronize()
    assert (host(paths) == -3).all() and (host(toks) == -3).all()
    # A request-level fault (out-of-range token) is a code, its rows untouched.
    bad = tokens.copy()
    bad[offsets[1] + 1] = V + 3
    res = torch.zeros((2, 4), dtype=torch.int32, device=DEV)
    specdec.verify_batch(offsets, cu(parents), cu(bad), cu(p), cu(q), paths=paths, tokens_out=toks, results=res)
    torch.cuda.synchronize()
    hr = specdec.verify_batch(offsets, parents, bad, p, q)[2]
    assert host(res)[1, 3] == hr[1, 3] != 0
    assert (host(paths)[1] == -3).all()
    # Host-only modes are `unsupported` on the device.
    res.zero_()
    specdec.verify_batch(offsets, cu(parents), cu(tokens), cu(p), cu(q), modes=int(specdec.Mode.TRAVERSAL),
                         paths=paths, tokens_out=toks, results=res)
    torch.cuda.synchronize()
    assert specdec._core.status_code_name(int(host(res)[0, 3])) == "unsupported"


# ---------------------------------------------------------------------------
# pruning
# ---------------------------------------------------------------------------

def test_prune_batch_matches_host(rng):
    sizes = [1, 7, 40, 300]
    parents, offsets = random_batch(rng, sizes)
    scores = rng.standard_normal(len(parents)).astype(np.float32)
    scores[offsets[2] + 5] = scores[offsets[2] + 6]  # a tie
    budgets = np.array([1, 4, 40, 64], np.int32)
    hn, hk, hs = specdec.prune_batch(parents, scores, offsets, budgets)
    for offs in (offsets, cu(offsets)):
        ni = torch.full((len(parents),), -9, dtype=torch.int32, device=DEV)
        gn, gk, gs = specdec.prune_batch(cu(parents), cu(scores), offs, cu(budgets), new_index=ni)
        torch.cuda.synchronize()
        assert gn.data_ptr() == ni.data_ptr()
        np.testing.assert_array_equal(host(gn), hn)
        np.testing.assert_array_equal(host(gk), hk)
        np.testing.assert_array_equal(host(gs), hs)
    gn, gk, gs = specdec.prune_batch(cu(parents), cu(scores), offsets, 8)
    hn, hk, hs = specdec.prune_batch(parents, scores, offsets, 8)
    torch.cuda.synchronize()
    np.testing.assert_array_equal(host(gn), hn)
    np.testing.assert_array_equal(host(gk), hk)


# ---------------------------------------------------------------------------
# KV commit
# ---------------------------------------------------------------------------

def test_commit_kv_contiguous_matches_host(rng):
    R, L, H, T, D = 3, 2, 4, 32, 8
    cache = rng.standard_normal((R, L, H, T, D)).astype(np.float16)
    cache_len = np.array([0, 5, 10], np.int64)
    keep = np.array([3, 5, 9, 10, 12, 20, 21], np.int64)
    keep_offsets = np.array([0, 1, 3, 7], np.int32)
    want = [cache.copy(), cache.copy() + 1]
    specdec.commit_kv(want, "SLHTD", cache_len, keep, keep_offsets)
    got = [cu(cache), cu(cache.copy() + 1)]
    ptrs = [t.data_ptr() for t in got]
    specdec.commit_kv(got, "SLHTD", cu(cache_len), cu(keep), cu(keep_offsets))
    assert [t.data_ptr() for t in got] == ptrs
    for g, w in zip(got, want):
        np.testing.assert_array_equal(host(g), w)


def test_commit_kv_paged_matches_host(rng):
    pages, P, H, D = 12, 4, 2, 16
    cache = rng.standard_normal((pages, P, H, D)).astype(np.float32)
    table = np.array([[3, 7, 1, 0], [2, 9, 11, 5]], np.int32)
    cache_len = np.array([2, 6], np.int64)
    keep = np.array([4, 6, 7, 8, 11, 13], np.int64)
    keep_offsets = np.array([0, 3, 6], np.int32)
    want = cache.copy()
    specdec.commit_kv([want], "STHD", cache_len, keep, keep_offsets, block_table=table)
    got = cu(cache)
    specdec.commit_kv([got], "STHD", cu(cache_len), cu(keep), cu(keep_offsets), block_table=cu(table))
    np.testing.assert_array_equal(host(got), want)


def test_commit_kv_bad_input_raises_untouched(rng):
    cache = rng.standard_normal((2, 2, 16, 4)).astype(np.float32)
    got = cu(cache)
    with pytest.raises(specdec.Error):  # keep index past the cache
        specdec.commit_kv([got], "SHTD", cu(np.array([0, 3], np.int64)), cu(np.array([1, 40], np.int64)),
                          cu(np.array([0, 1, 2], np.int32)))
    np.testing.assert_array_equal(host(got), cache)
    # sync=False: the failure is recorded in `status`, raised by kv_commit_check.
    status = torch.zeros(1, dtype=torch.int64, device=DEV)
    specdec.commit_kv([got], "SHTD", cu(np.array([0, 3], np.int64)), cu(np.array([1, 40], np.int64)),
                      cu(np.array([0, 1, 2], np.int32)), status=status, sync=False)
    torch.cuda.synchronize()
    with pytest.raises(specdec.Error):
        specdec.kv_commit_check(status)
    np.testing.assert_array_equal(host(got), cache)


# ---------------------------------------------------------------------------
# SSM
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("dtype,tol", [(np.float32, 1e-4), (np.float64, 1e-10)])
def test_tree_scan_matches_host(rng, dtype, tol):
    N, H, P, G, S = 19, 4, 8, 2, 16
    parent = random_tree(rng, N)
    a = dict(x=rng.standard_normal((N, H, P)), dt=rng.standard_normal((N, H)), A=-np.exp(rng.standard_normal(H)),
             B=rng.standard_normal((N, G, S)), C=rng.standard_normal((N, G, S)), D=rng.standard_normal((H, P)),
             dt_bias=rng.standard_normal(H), z=rng.standard_normal((N, H, P)), h0=rng.standard_normal((H, P, S)))
    a = {k: v.astype(dtype) for k, v in a.items()}
    states = np.zeros((N, H, P, S), dtype)
    y = specdec.tree_scan(parent, **a, states=states, method="recurrent")
    ys = torch.zeros((N, H, P), dtype=getattr(torch, np.dtype(dtype).name), device=DEV)
    st = torch.zeros((N, H, P, S), dtype=ys.dtype, device=DEV)
    g = specdec.tree_scan(cu(parent), **{k: cu(v) for k, v in a.items()}, y=ys, states=st)
    assert g.data_ptr() == ys.data_ptr()
    np.testing.assert_allclose(host(g), y, rtol=tol, atol=tol)
    np.testing.assert_allclose(host(st), states, rtol=tol, atol=tol)
    # Without per-node states (workspace path).
    g2 = specdec.tree_scan(cu(parent), **{k: cu(v) for k, v in a.items()})
    np.testing.assert_allclose(host(g2), y, rtol=tol, atol=tol)
    # A bad tree is found by the kernel and raises (sync=True).
    bad = parent.copy()
    bad[5] = 7
    with pytest.raises(specdec.Error, match="not_topological"):
        specdec.tree_scan(cu(bad), **{k: cu(v) for k, v in a.items()})


@pytest.mark.parametrize("dtype,tol", [(np.float32, 1e-4), (np.float64, 1e-10)])
def test_tree_conv1d_matches_host(rng, dtype, tol):
    N, ch, W = 30, 12, 4
    parent = random_tree(rng, N)
    x = rng.standard_normal((N, ch)).astype(dtype)
    w = rng.standard_normal((ch, W)).astype(dtype)
    b = rng.standard_normal(ch).astype(dtype)
    st = rng.standard_normal((ch, W - 1)).astype(dtype)
    want = specdec.tree_conv1d(parent, x, w, bias=b, conv_state=st, silu=True)
    got = specdec.tree_conv1d(cu(parent), cu(x), cu(w), bias=cu(b), conv_state=cu(st), silu=True)
    np.testing.assert_allclose(host(got), want, rtol=tol, atol=tol)


def test_workspace_argument_and_too_small(rng):
    V = 16
    parents, offsets, tokens, p, q = verify_inputs(rng, [5, 6], V)
    need = specdec._core.cuda_verify_batch_workspace_size(2, V, 6, True)
    ws = torch.empty(need, dtype=torch.uint8, device=DEV)
    gp, gt, gr = specdec.verify_batch(offsets, cu(parents), cu(tokens), cu(p), cu(q), workspace=ws)
    hp, ht, hr = specdec.verify_batch(offsets, parents, tokens, p, q)
    torch.cuda.synchronize()
    np.testing.assert_array_equal(host(gr), hr)
    with pytest.raises(specdec.Error, match="buffer_too_small"):
        specdec.verify_batch(offsets, cu(parents), cu(tokens), cu(p), cu(q), workspace=ws[:need - 256])


# ---------------------------------------------------------------------------
# the peers' entry points (kernels/interop.hpp) against their host twins
# ---------------------------------------------------------------------------

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
