"""CUDA entry points of verification: identical paths, tokens and status codes
for every device mode, the sampled modes exact on the device, bad inputs
raise with outputs untouched, and a caller workspace is used (a too-small
one is refused).

The host bindings on the same inputs are the reference (torch CUDA
tensors on the device). Skipped unless this build has the CUDA kernels,
torch is installed and a CUDA device is visible."""
import numpy as np
import pytest

import specdec
from cuda_util import needs_cuda, DEV, cu, host, random_batch, random_rows, torch

pytestmark = needs_cuda


DEVICE_MODES = [specdec.Mode.SAMPLED_IID, specdec.Mode.SAMPLED_WITHOUT_REPLACEMENT, specdec.Mode.DETERMINISTIC,
                specdec.Mode.GREEDY, specdec.Mode.NAIVE_MATCHING, specdec.Mode.TYPICAL_LOSSY, specdec.Mode.BLOCK,
                specdec.Mode.TRAVERSAL, specdec.Mode.TRAVERSAL_WITHOUT_REPLACEMENT]


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


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16] if torch is not None else [])
def test_verify_batch_logits_rows_match_host(rng, dtype):
    """Logits rows through the sampling transform (sampling_table records on
    the device and on the host): the kernel's tokens are the host twin's."""
    V = 300
    parents, offsets, tokens, p, q = verify_inputs(rng, [1, 4, 9, 17, 6, 12], V)
    R = len(offsets) - 1
    logits = np.where(p > 0, np.round(np.log(np.maximum(p, 1e-30)) * 4) / 2, -np.inf).astype(np.float32)
    qlog = np.where(q > 0, np.log(np.maximum(q, 1e-30)), -np.inf).astype(np.float32)
    if dtype == torch.bfloat16:  # the host reads the same bf16 values
        logits = torch.from_numpy(logits).to(dtype).float().numpy()
        qlog = torch.from_numpy(qlog).to(dtype).float().numpy()
    samp = specdec.sampling_table(rng.choice([0.0, 0.6, 1.0, 1.4], R).astype(np.float32),
                                  top_k=rng.integers(0, 30, R), top_p=rng.choice([1.0, 0.8], R),
                                  min_p=rng.choice([0.0, 0.02], R))
    dsamp = specdec.sampling_table(1.0, top_k=rng.integers(0, 3, R) * 10)
    for mode in DEVICE_MODES:
        if mode == specdec.Mode.TYPICAL_LOSSY:
            continue
        kw = dict(modes=int(mode), seeds=11, rounds=2)
        L = int(np.diff(offsets).max())
        hp, ht = np.full((R, L), -3, np.int32), np.full((R, L), -3, np.int32)
        hp, ht, hr = specdec.verify_batch(offsets, parents, tokens, logits, qlog, sampling=samp,
                                          draft_sampling=dsamp, paths=hp, tokens_out=ht, **kw)
        for on_device in (False, True):
            s = cu(samp) if on_device else samp
            dp = torch.full((R, L), -3, dtype=torch.int32, device=DEV)
            dt = torch.full((R, L), -3, dtype=torch.int32, device=DEV)
            gp, gt, gr = specdec.verify_batch(offsets, cu(parents), cu(tokens),
                                              torch.from_numpy(logits).to(DEV).to(dtype),
                                              torch.from_numpy(qlog).to(DEV).to(dtype), sampling=s,
                                              draft_sampling=cu(dsamp) if on_device else dsamp, paths=dp,
                                              tokens_out=dt, **kw)
            torch.cuda.synchronize()
            np.testing.assert_array_equal(host(gr), hr)
            np.testing.assert_array_equal(host(gp), hp)
            np.testing.assert_array_equal(host(gt), ht)


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
    with pytest.raises(specdec.Error, match="size_mismatch"):  # host offsets past max_nodes
        specdec.verify_batch(offsets, cu(parents), cu(tokens), cu(p), cu(q), paths=paths, tokens_out=toks,
                             max_nodes=3)
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


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_16_bit_rows_match_host(rng, dtype):
    """bf16 / fp16 CUDA rows, read in place, give the host's results on the
    same rows (every device mode in one batch)."""
    V = 3000
    parents, offsets, tokens, p, q = verify_inputs(rng, [1, 4, 9, 12, 7, 3, 8, 5, 6], V)
    R = len(offsets) - 1
    t = getattr(torch, dtype)
    pt, qt = torch.from_numpy(p).to(t), torch.from_numpy(q).to(t)
    modes = np.array([int(DEVICE_MODES[r % len(DEVICE_MODES)]) for r in range(R)], dtype=np.int32)
    modes[modes == int(specdec.Mode.BLOCK)] = int(specdec.Mode.SAMPLED_IID)  # block needs chains
    kw = dict(modes=modes, seeds=5, rounds=1, normalization_tolerance=0.05)
    hp, ht, hr = specdec.verify_batch(offsets, parents, tokens, pt, qt, **kw)
    gp, gt, gr = specdec.verify_batch(offsets, cu(parents), cu(tokens), pt.to(DEV), qt.to(DEV), **kw)
    torch.cuda.synchronize()
    np.testing.assert_array_equal(host(gr), hr)
    assert (hr[:, 3] == 0).sum() > R // 2
    for r in range(R):
        a = hr[r, 0]
        np.testing.assert_array_equal(host(gt)[r, :a + 1], ht[r, :a + 1])


def test_device_arguments_capture_in_a_cuda_graph(rng):
    """Offsets, modes, seeds and rounds on the device, max_nodes and a
    workspace given: nothing is uploaded, allocated or waited for, so the
    call captures in a CUDA graph; replays after rounds += 1 on the device
    give the host's results for the new round."""
    V = 200
    parents, offsets, tokens, p, q = verify_inputs(rng, [3, 8, 5, 11], V)
    R = len(offsets) - 1
    modes = np.array([0, 2, 7, 3], dtype=np.int32)
    seeds = rng.integers(0, 2**62, size=R).astype(np.int64)
    d = dict(off=cu(offsets), par=cu(parents), tok=cu(tokens), p=cu(p), q=cu(q), modes=cu(modes), seeds=cu(seeds),
             rounds=torch.zeros(R, dtype=torch.int32, device=DEV))
    L = 11
    paths = torch.full((R, L), -3, dtype=torch.int32, device=DEV)
    toks = torch.full((R, L), -3, dtype=torch.int32, device=DEV)
    res = torch.zeros((R, 4), dtype=torch.int32, device=DEV)
    ws = torch.empty(specdec._core.cuda_verify_batch_workspace_size(R, V, L, False), dtype=torch.uint8, device=DEV)

    def launch():
        specdec.verify_batch(d["off"], d["par"], d["tok"], d["p"], d["q"], modes=d["modes"], seeds=d["seeds"],
                             rounds=d["rounds"], paths=paths, tokens_out=toks, results=res, workspace=ws,
                             max_nodes=L, stream=torch.cuda.current_stream())

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        launch()  # warm-up outside the capture
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        launch()
    for rnd in range(3):
        d["rounds"].fill_(rnd)
        g.replay()
        torch.cuda.synchronize()
        hp, ht, hr = specdec.verify_batch(offsets, parents, tokens, p, q, modes=modes,
                                          seeds=seeds.astype(np.uint64), rounds=rnd)
        np.testing.assert_array_equal(host(res), hr)
        for r in range(R):
            a = hr[r, 0]
            np.testing.assert_array_equal(host(paths)[r, :a + 1], hp[r, :a + 1])
            np.testing.assert_array_equal(host(toks)[r, :a + 1], ht[r, :a + 1])
