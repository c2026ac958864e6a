"""Bindings added with the CUDA build: tree conv1d and its state commit
against a per-path numpy reference, batched pruning against per-request
prune_to_budget, build information, and device dispatch (mixed host and
CUDA arrays raise before anything runs)."""
import numpy as np
import pytest

import specdec
from conftest import random_tree


def ref_conv1d(parent, x, weight, bias, conv_state, silu):
    """out[i, c] = bias[c] + sum_m weight[c, W-1-m] * (m-th ancestor of i, or
    the conv state's newest columns once the root path runs out)."""
    N, ch = x.shape
    W = weight.shape[1]
    L = conv_state.shape[1]
    out = np.zeros((N, ch))
    for i in range(N):
        window, u, r = [], i, 0
        for _ in range(W):
            if u >= 0:
                window.append(x[u])
                u = parent[u]
            else:
                window.append(conv_state[:, L - 1 - r])
                r += 1
        acc = bias.astype(np.float64).copy()
        for m, v in enumerate(window):
            acc += weight[:, W - 1 - m] * v
        out[i] = acc / (1 + np.exp(-acc)) if silu else acc
    return out


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("silu", [False, True])
def test_tree_conv1d_matches_reference(rng, dtype, silu):
    for n in (1, 2, 7, 23):
        parent = random_tree(rng, n)
        ch, W, L = 5, 4, 3
        x = rng.standard_normal((n, ch)).astype(dtype)
        weight = rng.standard_normal((ch, W)).astype(dtype)
        bias = rng.standard_normal(ch).astype(dtype)
        state = rng.standard_normal((ch, L)).astype(dtype)
        got = specdec.tree_conv1d(parent, x, weight, bias=bias, conv_state=state, silu=silu)
        want = ref_conv1d(parent, x, weight, bias, state, silu)
        tol = 1e-5 if dtype == np.float32 else 1e-12
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def test_tree_conv1d_zero_copy_and_errors(rng):
    parent = random_tree(rng, 6)
    x = rng.standard_normal((6, 3)).astype(np.float32)
    w = rng.standard_normal((3, 2)).astype(np.float32)
    st = np.zeros((3, 1), dtype=np.float32)
    out = np.full((6, 3), 7.0, dtype=np.float32)
    got = specdec.tree_conv1d(parent, x, w, conv_state=st, out=out)
    assert got is out
    bad = parent.copy()
    bad[3] = 5  # not topological
    out2 = np.full((6, 3), 7.0, dtype=np.float32)
    with pytest.raises(specdec.Error, match="not_topological|invalid"):
        specdec.tree_conv1d(bad, x, w, conv_state=st, out=out2)
    assert (out2 == 7.0).all()
    xn = x.copy()
    xn[2, 1] = np.nan
    with pytest.raises(specdec.Error, match="non_finite"):
        specdec.tree_conv1d(parent, xn, w, conv_state=st, out=out2)
    assert (out2 == 7.0).all()


def test_tree_conv1d_commit_state(rng):
    parent = np.array([-1, 0, 1, 0, 3], dtype=np.int32)
    ch, L = 4, 3
    x = rng.standard_normal((5, ch))
    state = rng.standard_normal((ch, L))
    old = state.copy()
    path = np.array([0, 3, 4], dtype=np.int32)
    got = specdec.tree_conv1d_commit_state(parent, x, path, state)
    assert got is state
    cols = np.concatenate([old, x[path].T], axis=1)
    np.testing.assert_array_equal(state, cols[:, -L:])


def test_prune_batch_matches_single_requests(rng):
    sizes = [1, 5, 12, 30]
    parents, scores = [], []
    for n in sizes:
        parents.append(random_tree(rng, n))
        scores.append(rng.standard_normal(n).astype(np.float32))
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int32)
    budgets = np.array([1, 3, 12, 10], dtype=np.int32)
    new_index, kept, st = specdec.prune_batch(np.concatenate(parents), np.concatenate(scores), offsets, budgets)
    assert (st == 0).all()
    for r, n in enumerate(sizes):
        want, k = specdec.prune_to_budget(parents[r], scores[r], int(budgets[r]))
        np.testing.assert_array_equal(new_index[offsets[r]:offsets[r + 1]], want)
        assert kept[r] == k
    # One shared budget; a NaN score fails its request alone, rows untouched.
    sc = np.concatenate(scores)
    sc[offsets[2] + 3] = np.nan
    out = np.full(offsets[-1], -7, dtype=np.int32)
    _, kept2, st2 = specdec.prune_batch(np.concatenate(parents), sc, offsets, 4, new_index=out)
    assert st2[2] != 0 and (st2[[0, 1, 3]] == 0).all()
    assert (out[offsets[2]:offsets[3]] == -7).all()
    with pytest.raises(specdec.Error, match="offsets"):
        specdec.prune_batch(np.concatenate(parents), np.concatenate(scores), np.array([0, 5, 3], np.int32), 2)


def test_build_info():
    info = specdec.build_info()
    assert info["cuda"] == specdec.has_cuda
    if specdec.has_cuda:
        assert info["build"].startswith("with CUDA kernels (archs ")
        assert info["cuda_archs"]
    else:
        assert info["build"].startswith("host-only")
    assert specdec.cuda_available() == (specdec.has_cuda and info["cuda_devices"] > 0)


class FakeCuda:
    """Claims to live on a CUDA device (DLPack device type 2); never read."""

    def __init__(self, index=0):
        self.index = index

    def __dlpack_device__(self):
        return (2, self.index)


def test_mixed_devices_raise_before_running():
    parent = np.array([-1, 0, 0], dtype=np.int32)
    p = np.full((3, 4), 0.25, dtype=np.float32)
    out = np.full(3, -9, dtype=np.int32)
    with pytest.raises(specdec.Error, match="host memory or all on one CUDA device|host-only"):
        specdec.verify_tree(parent, FakeCuda(), p, mode=specdec.Mode.GREEDY, path=out, tokens_out=out.copy())
    assert (out == -9).all()
    with pytest.raises(specdec.Error, match="all on one CUDA device|host-only"):
        specdec.tree_scan(parent, FakeCuda(0), FakeCuda(1), FakeCuda(0), FakeCuda(0), FakeCuda(0))
    with pytest.raises(specdec.Error, match="all on one CUDA device|host-only"):
        specdec.commit_kv([np.zeros((1, 1, 4, 2)), FakeCuda()], "SHTD", 0, [0])
    # Functions without a kernel name the problem.
    with pytest.raises(specdec.Error, match="CUDA memory"):
        specdec.packed_mask(FakeCuda())
