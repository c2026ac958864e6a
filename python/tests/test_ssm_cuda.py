"""CUDA entry points of the tree scan and tree conv1d: floats within 1e-4
absolute + 1e-4 relative (the tolerance tests/gpu/test_ssm.cpp uses,
float32) and 1e-10 (float64).

The host bindings on the same inputs are the reference (torch CUDA
tensors on the device). Skipped unless this build has the CUDA kernels,
torch is installed and a CUDA device is visible."""
import numpy as np
import pytest

import specdec
from conftest import random_tree
from cuda_util import needs_cuda, DEV, cu, host, torch

pytestmark = needs_cuda


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
    # A bad tree is found by the kernel and raises (no status array: the call waits).
    bad = parent.copy()
    bad[5] = 7
    with pytest.raises(specdec.Error, match="not_topological"):
        specdec.tree_scan(cu(bad), **{k: cu(v) for k, v in a.items()})
    # With a status array: no wait, the fault code lands there (check=True still waits).
    status = torch.full((1,), -1, dtype=torch.int32, device=DEV)
    specdec.tree_scan(cu(bad), **{k: cu(v) for k, v in a.items()}, status=status)
    torch.cuda.synchronize()
    assert int(status.item()) != 0
    specdec.tree_scan(cu(parent), **{k: cu(v) for k, v in a.items()}, status=status)
    torch.cuda.synchronize()
    assert int(status.item()) == 0
    with pytest.raises(specdec.Error, match="not_topological"):
        specdec.tree_scan(cu(bad), **{k: cu(v) for k, v in a.items()}, status=status, check=True)


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


@pytest.mark.parametrize("dtype,tol", [(np.float32, 2e-4), (np.float64, 1e-10)])
def test_tree_scan_batch_matches_host(rng, dtype, tol):
    """The batched kernels against the host twins: statuses equal, values
    within tolerance (2e-4 in float32: the host may run the dual form);
    nothing synchronised by the call (the test synchronises to read)."""
    sizes = [6, 1, 13, 0, 8]
    H, P, G, S = 4, 8, 2, 16
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int32)
    N = int(offsets[-1]) + 1
    parent = np.full(N, -1, np.int32)
    for r, n in enumerate(sizes):
        if n:
            parent[offsets[r]:offsets[r] + n] = random_tree(rng, n)
    parent[int(offsets[2]) + 4] = 9  # request 2 fails alone
    a = dict(x=rng.standard_normal((N, H, P)), dt=rng.standard_normal((N, H)), A=-np.exp(rng.standard_normal(H)),
             B=rng.standard_normal((N, G, S)), C=rng.standard_normal((N, G, S)), D=rng.standard_normal((H, P)),
             dt_bias=rng.standard_normal(H), z=rng.standard_normal((N, H, P)),
             h0=rng.standard_normal((len(sizes), H, P, S)))
    a = {k: v.astype(dtype) for k, v in a.items()}
    y, status = specdec.tree_scan_batch(offsets, parent, **a)
    g, gstatus = specdec.tree_scan_batch(cu(offsets), cu(parent), **{k: cu(v) for k, v in a.items()})
    torch.cuda.synchronize()
    assert host(gstatus).tolist() == status.tolist()
    for r, n in enumerate(sizes):
        if status[r] == 0:
            b = int(offsets[r])
            np.testing.assert_allclose(host(g)[b:b + n], y[b:b + n], rtol=tol, atol=tol)
    x = rng.standard_normal((N, 40)).astype(dtype)
    w = rng.standard_normal((40, 4)).astype(dtype)
    st = rng.standard_normal((len(sizes), 40, 3)).astype(dtype)
    out, status = specdec.tree_conv1d_batch(offsets, parent, x, w, conv_state=st, silu=True)
    gout, gstatus = specdec.tree_conv1d_batch(cu(offsets), cu(parent), cu(x), cu(w), conv_state=cu(st), silu=True)
    torch.cuda.synchronize()
    assert host(gstatus).tolist() == status.tolist()
    for r, n in enumerate(sizes):
        if status[r] == 0:
            b = int(offsets[r])
            np.testing.assert_allclose(host(gout)[b:b + n], out[b:b + n], rtol=1e-5, atol=1e-5)
