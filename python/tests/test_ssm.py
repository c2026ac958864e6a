"""SSM tree scan and state commit against the per-path Mamba2 recurrence in
numpy; drafting builders, pruning and planners against plain references.

Bindings added with the CUDA build: tree conv1d and its state commit
against a per-path numpy reference, batched pruning against per-request
prune_to_budget, build information, and device dispatch (mixed host and
CUDA arrays raise before anything runs)."""
import numpy as np
import pytest

import specdec
from conftest import random_tree


def softplus(v):
    return np.log1p(np.exp(-np.abs(v))) + np.maximum(v, 0)

def ref_scan(parent, x, dt, A, B, C, D, dt_bias, z, h0):
    """Runs h <- exp(dt' A) h + dt' x B^T, y = C.h + D x along each node's
    own root path (float64)."""
    N, H, P = x.shape
    G, S = B.shape[1], B.shape[2]
    y = np.zeros((N, H, P))
    states = np.zeros((N, H, P, S))
    for i in range(N):
        path, j = [], i
        while j >= 0:
            path.append(j)
            j = parent[j]
        h = h0.astype(np.float64).copy()
        for j in reversed(path):
            d = softplus(dt[j] + dt_bias)
            for hh in range(H):
                g = hh // (H // G)
                h[hh] = np.exp(d[hh] * A[hh]) * h[hh] + d[hh] * np.outer(x[j, hh], B[j, g])
        states[i] = h
        for hh in range(H):
            g = hh // (H // G)
            y[i, hh] = h[hh] @ C[i, g] + D[hh] * x[i, hh]
        y[i] *= z[i] / (1 + np.exp(-z[i]))
    return y, states

def ssm_inputs(rng, N, H=4, P=3, G=2, S=5, dtype=np.float64):
    r = lambda *s: rng.standard_normal(s).astype(dtype)  # noqa: E731
    return dict(x=r(N, H, P), dt=r(N, H), A=-np.abs(r(H)) - 0.1, B=r(N, G, S), C=r(N, G, S), D=r(H, P),
                dt_bias=r(H) * 0.1, z=r(N, H, P), h0=r(H, P, S))

@pytest.mark.parametrize("method", ["automatic", "recurrent", "dual"])
@pytest.mark.parametrize("dtype,tol", [(np.float64, 1e-10), (np.float32, 2e-4)])
def test_tree_scan_matches_path_recurrence(rng, method, dtype, tol):
    parent = random_tree(rng, 13)
    a = ssm_inputs(rng, 13, dtype=dtype)
    want_y, want_states = ref_scan(parent, **{k: v.astype(np.float64) for k, v in a.items()})
    y = np.zeros((13, 4, 3), dtype=dtype)
    got = specdec.tree_scan(parent, a["x"], a["dt"], a["A"], a["B"], a["C"], D=a["D"], dt_bias=a["dt_bias"], z=a["z"],
                            h0=a["h0"], y=y, method=method)
    assert got is y
    np.testing.assert_allclose(y, want_y, rtol=tol, atol=tol)
    if method != "dual":
        states = np.zeros((13, 4, 3, 5), dtype=dtype)
        specdec.tree_scan(parent, a["x"], a["dt"], a["A"], a["B"], a["C"], D=a["D"], dt_bias=a["dt_bias"],
                          z=a["z"], h0=a["h0"], states=states, method=method)
        np.testing.assert_allclose(states, want_states, rtol=tol, atol=tol)
        # state commit of the path to the last node == that node's state; in place into h0
        path = [12]
        while parent[path[-1]] >= 0:
            path.append(int(parent[path[-1]]))
        h = a["h0"].copy()
        specdec.ssm_commit_path(parent, a["x"], a["dt"], a["A"], a["B"], a["C"], np.array(path[::-1]),
                                dt_bias=a["dt_bias"], h0=h, out=h)
        np.testing.assert_allclose(h, want_states[12], rtol=tol, atol=tol)
        # activation replay from the node's packed mask row gives the same state
        for node in range(13):
            row = specdec.packed_mask(parent)[node]
            hr = specdec.ssm_replay_masked(parent, a["x"], a["dt"], a["A"], a["B"], a["C"], row,
                                           dt_bias=a["dt_bias"], h0=a["h0"])
            np.testing.assert_allclose(hr, want_states[node], rtol=tol, atol=tol)

def test_ssm_errors_write_nothing(rng):
    parent = random_tree(rng, 5)
    a = ssm_inputs(rng, 5)
    y = np.full((5, 4, 3), 3.0)
    bad = a["dt"].copy()
    bad[2, 1] = np.nan
    with pytest.raises(specdec.Error, match="non_finite"):
        specdec.tree_scan(parent, a["x"], bad, a["A"], a["B"], a["C"], y=y)
    with pytest.raises(specdec.Error, match="size_mismatch"):
        specdec.tree_scan(parent, a["x"], a["dt"], a["A"][:3], a["B"], a["C"], y=y)
    with pytest.raises(specdec.Error, match="states"):
        specdec.tree_scan(parent, a["x"], a["dt"], a["A"], a["B"], a["C"], y=y, states=np.zeros((5, 4, 3, 5)),
                          method="dual")
    assert (y == 3.0).all()
    h = np.full((4, 3, 5), 2.0)
    with pytest.raises(specdec.Error):
        specdec.ssm_commit_path(parent, a["x"], a["dt"], a["A"], a["B"], a["C"], np.array([1]), out=h)
    assert (h == 2.0).all()
    # a mask that is not a root path (node 0 clear) is refused, h untouched
    with pytest.raises(specdec.Error, match="invalid_argument"):
        specdec.ssm_replay_masked(parent, a["x"], a["dt"], a["A"], a["B"], a["C"], np.array([0b10], np.uint64),
                                  out=h)
    assert (h == 2.0).all()

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


def test_tree_scan_batch_matches_one_call_per_request(rng):
    """Ragged batches: each request equals tree_scan on its own rows and
    h0 (bit for bit: the same host code); a request with a bad parent gets
    not_topological and its rows stay unwritten; decreasing offsets fail
    every request."""
    sizes = [5, 1, 9, 7]
    H, P, G, S = 4, 3, 2, 5
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int32)
    N = int(offsets[-1]) + 2  # two spare rows
    parent = np.full(N, -1, np.int32)
    for r, n in enumerate(sizes):
        parent[offsets[r]:offsets[r] + n] = random_tree(rng, n)
    a = ssm_inputs(rng, N, H, P, G, S, np.float32)
    h0 = rng.standard_normal((len(sizes), H, P, S)).astype(np.float32)
    del a["h0"]
    states = np.zeros((N, H, P, S), np.float32)
    y, status = specdec.tree_scan_batch(offsets, parent, **a, h0=h0, states=states)
    assert status.tolist() == [0, 0, 0, 0]
    for r, n in enumerate(sizes):
        b = int(offsets[r])
        one = {k: (v[b:b + n] if v.shape[0] == N else v) for k, v in a.items()}
        st1 = np.zeros((n, H, P, S), np.float32)
        y1 = specdec.tree_scan(parent[b:b + n], **one, h0=h0[r], states=st1)
        assert np.array_equal(y[b:b + n], y1) and np.array_equal(states[b:b + n], st1)

    bad = parent.copy()
    bad[int(offsets[2]) + 3] = 5  # request 2, node 3: parent 5 > 3
    y2 = np.full((N, H, P), -7.0, np.float32)
    _, status = specdec.tree_scan_batch(offsets, bad, **a, h0=h0, y=y2)
    names = [specdec._core.status_code_name(int(c)) for c in status]
    assert names == ["ok", "ok", "not_topological", "ok"]
    assert (y2[offsets[2]:offsets[3]] == -7.0).all() and (y2[offsets[-1]:] == -7.0).all()
    unsorted = offsets.copy()
    unsorted[2] = unsorted[1] - 1
    _, status = specdec.tree_scan_batch(unsorted, parent, **a, h0=h0)
    assert [specdec._core.status_code_name(int(c)) for c in status] == ["not_sorted"] * 4
    with pytest.raises(specdec.Error, match="size_mismatch"):
        specdec.tree_scan_batch(offsets, parent[:-1], **a, h0=h0)


def test_tree_conv1d_batch_matches_one_call_per_request(rng):
    sizes = [4, 11, 1]
    ch, W, L = 6, 4, 3
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int32)
    N = int(offsets[-1])
    parent = np.concatenate([random_tree(rng, n) for n in sizes]).astype(np.int32)
    x = rng.standard_normal((N, ch))
    w = rng.standard_normal((ch, W))
    bias = rng.standard_normal(ch)
    st = rng.standard_normal((len(sizes), ch, L))
    out, status = specdec.tree_conv1d_batch(offsets, parent, x, w, bias=bias, conv_state=st, silu=True)
    assert status.tolist() == [0, 0, 0]
    for r, n in enumerate(sizes):
        b = int(offsets[r])
        one = specdec.tree_conv1d(parent[b:b + n], x[b:b + n], w, bias=bias, conv_state=st[r], silu=True)
        assert np.array_equal(out[b:b + n], one)
