"""CUDA entry points of the KV commit: bit-identical caches (contiguous and
paged), and bad inputs raise with the cache untouched.

The host bindings on the same inputs are the reference (torch CUDA
tensors on the device). Skipped unless this build has the CUDA kernels,
torch is installed and a CUDA device is visible."""
import numpy as np
import pytest

import specdec
from cuda_util import needs_cuda, DEV, cu, host, torch

pytestmark = needs_cuda


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


def test_commit_kv_bad_request_raises_and_is_the_only_one_untouched(rng):
    """One status per request: request 1 (keep index past the cache) is left
    untouched and reported; request 0 commits."""
    cache = rng.standard_normal((2, 2, 16, 4)).astype(np.float32)
    want = cache.copy()  # request 0 alone: request 1's keep range emptied
    specdec.commit_kv([want], "SHTD", np.array([0, 3], np.int64), np.array([1], np.int64),
                      np.array([0, 1, 1], np.int32))
    assert not np.array_equal(want, cache)
    args = (cu(np.array([0, 3], np.int64)), cu(np.array([1, 40], np.int64)), cu(np.array([0, 1, 2], np.int32)))
    got = cu(cache)
    with pytest.raises(specdec.Error, match="out_of_range"):
        specdec.commit_kv([got], "SHTD", *args)
    np.testing.assert_array_equal(host(got), want)
    # With `status`: no wait; the codes are recorded there, raised by kv_commit_check.
    got = cu(cache)
    status = torch.full((2,), -1, dtype=torch.int32, device=DEV)
    specdec.commit_kv([got], "SHTD", *args, status=status)
    torch.cuda.synchronize()
    assert host(status)[0] == 0
    assert specdec._core.status_code_name(int(host(status)[1])) == "out_of_range"
    with pytest.raises(specdec.Error, match="out_of_range"):
        specdec.kv_commit_check(status)
    np.testing.assert_array_equal(host(got), want)

    got = cu(cache)
    with pytest.raises(specdec.Error):  # check=True waits even with a status array
        specdec.commit_kv([got], "SHTD", *args, status=status, check=True)
    np.testing.assert_array_equal(host(got), want)
    with pytest.raises(specdec.Error, match="size_mismatch"):  # one status per request
        specdec.commit_kv([got], "SHTD", *args, status=torch.zeros(1, dtype=torch.int32, device=DEV))


def test_prepared_commit_matches_host_and_replays_in_a_graph(rng):
    """KVCommit: prepared once for a paged K and V; two rounds launched
    directly, then one captured in a CUDA graph and replayed after the
    round's arrays changed on the device. Each equals the host commit."""
    pages, P, H, D = 10, 4, 2, 8
    K = rng.standard_normal((pages, P, H, D)).astype(np.float16)
    V = rng.standard_normal((pages, P, H, D)).astype(np.float16)
    table = np.array([[3, 7, 1], [2, 9, 5]], np.int32)
    kd, vd = cu(K), cu(V)
    commit = specdec.KVCommit([kd, vd], "STHD", block_table=cu(table))
    status = torch.zeros(2, dtype=torch.int32, device=DEV)
    rounds = [(np.array([2, 6], np.int64), np.array([4, 6, 7, 8, 11], np.int64), np.array([0, 3, 5], np.int32)),
              (np.array([1, 0], np.int64), np.array([3, 5, 2], np.int64), np.array([0, 2, 3], np.int32))]
    want = [K.copy(), V.copy()]
    for cl, kp, ko in rounds:
        specdec.commit_kv(want, "STHD", cl, kp, ko, block_table=table)
        commit(cu(cl), cu(kp), cu(ko), status=status)
    torch.cuda.synchronize()
    specdec.kv_commit_check(status)
    np.testing.assert_array_equal(host(kd), want[0])
    np.testing.assert_array_equal(host(vd), want[1])
    # Graph: the round's arrays live on the device; capture, then refill in
    # place and replay (the keep buffer's length is a capacity).
    cl, kp, ko = (cu(a) for a in rounds[0])
    stream = torch.cuda.Stream(device=DEV)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream):
        with torch.cuda.graph(graph, stream=stream):
            commit(cl, kp, ko, status=status, stream=stream)
    for a, b in zip((cl, kp, ko), rounds[1]):
        a[:len(b)].copy_(cu(b))  # keep: a buffer of fixed capacity, round 2 fills 3 of its 5 entries
    graph.replay()
    torch.cuda.synchronize()
    specdec.kv_commit_check(status)
    specdec.commit_kv(want, "STHD", *rounds[1], block_table=table)
    np.testing.assert_array_equal(host(kd), want[0])
    np.testing.assert_array_equal(host(vd), want[1])
    # A bad round: recorded for request 0, caches untouched (request 1 keeps
    # nothing); more requests than table rows raise at once.
    commit(cu(np.array([0, 0], np.int64)), cu(np.array([99], np.int64)), cu(np.array([0, 1, 1], np.int32)),
           status=status)
    torch.cuda.synchronize()
    assert host(status)[1] == 0
    with pytest.raises(specdec.Error):
        specdec.kv_commit_check(status)
    np.testing.assert_array_equal(host(kd), want[0])
    with pytest.raises(specdec.Error, match="block_table"):
        commit(cu(np.zeros(3, np.int64)), cu(np.zeros(0, np.int64)), cu(np.zeros(4, np.int32)),
               status=torch.zeros(3, dtype=torch.int32, device=DEV))
    with pytest.raises(specdec.Error, match="size_mismatch"):  # one status per request
        commit(cu(np.zeros(2, np.int64)), cu(np.zeros(0, np.int64)), cu(np.zeros(3, np.int32)),
               status=torch.zeros(1, dtype=torch.int32, device=DEV))


def test_keep_indices_from_results_matches_host(rng):
    """The device keep lists equal the host's (statuses, offsets and the
    filled prefix of keep) on verify_batch's outputs."""
    from test_cache import _verified_batch
    offsets, parent, paths, res, cache_len = _verified_batch(rng)
    keep, ko, st = specdec.keep_indices_from_results(offsets, parent, paths, res, cache_len)
    dk, dko, dst = specdec.keep_indices_from_results(cu(offsets), cu(parent), cu(paths), cu(res), cu(cache_len))
    torch.cuda.synchronize()
    assert list(host(dst)) == list(st)
    assert list(host(dko)) == list(ko)
    assert list(host(dk)[:int(ko[-1])]) == list(keep)
