"""CUDA entry points of batched pruning to a node budget: identical kept ids.

The host bindings on the same inputs are the reference (torch CUDA
tensors on the device). Skipped unless this build has the CUDA kernels,
torch is installed and a CUDA device is visible."""
import numpy as np

import specdec
from cuda_util import needs_cuda, DEV, cu, host, random_batch, torch

pytestmark = needs_cuda


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


def test_prune_batch_device_offsets_are_checked_on_the_device(rng):
    """Device offsets are used in place (no read-back): malformed ones give
    every request out_of_range in request_status, nothing else written."""
    parents, offsets = random_batch(rng, [5, 9, 4])
    scores = rng.standard_normal(len(parents)).astype(np.float32)
    bad = offsets.copy()
    bad[2] = bad[3] + 1  # past the node count
    ni = torch.full((len(parents),), -9, dtype=torch.int32, device=DEV)
    st = torch.zeros(3, dtype=torch.int32, device=DEV)
    specdec.prune_batch(cu(parents), cu(scores), cu(bad), 4, new_index=ni, request_status=st)
    torch.cuda.synchronize()
    codes = host(st)
    assert [specdec._core.status_code_name(int(c)) for c in codes] == ["out_of_range"] * 3
    assert (host(ni) == -9).all()
