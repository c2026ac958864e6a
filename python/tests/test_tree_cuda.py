"""CUDA entry points of tree masks and positions: identical masks, positions
and status codes; outputs are the caller's tensors (zero-copy), the stream
argument is honoured, and a bad tree is reported with its rows untouched.

The host bindings on the same inputs are the reference (torch CUDA
tensors on the device). Skipped unless this build has the CUDA kernels,
torch is installed and a CUDA device is visible."""
import numpy as np
import pytest

import specdec
from cuda_util import needs_cuda, DEV, cu, host, random_batch, torch

pytestmark = needs_cuda


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
