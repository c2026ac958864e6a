"""Keep indices and the in-place KV commit on caller tensors (contiguous and
paged, several layouts and element types) against numpy gathers."""
import numpy as np
import pytest

import specdec
from conftest import data_ptr, needs_torch, random_tree


def root_path(parent, node):
    path = []
    while node >= 0:
        path.append(node)
        node = parent[node]
    return np.array(path[::-1], dtype=np.int32)

def test_keep_indices_single_and_batch(rng):
    parent = random_tree(rng, 20)
    path = root_path(parent, 19)
    keep = specdec.keep_indices(parent, path, 100)
    np.testing.assert_array_equal(keep, path + 100)
    # nodes written in DFS order: slot_of_node = old_to_new
    n2o, o2n = specdec.dfs_order(parent)
    np.testing.assert_array_equal(specdec.keep_indices(parent, path, 5, slot_of_node=o2n), o2n[path] + 5)
    padded = np.concatenate([path, [-1, -1]]).astype(np.int32)
    np.testing.assert_array_equal(specdec.keep_indices(parent, padded, 0), path)
    out = np.full(25, -9, dtype=np.int64)
    with pytest.raises(specdec.Error, match="invalid_argument"):
        specdec.keep_indices(parent, path[1:], 0, out=out)  # does not start at the root
    assert (out == -9).all()
    trees = [random_tree(rng, n) for n in (4, 9, 1)]
    paths = [root_path(t, len(t) - 1) for t in trees]
    keep, ko = specdec.keep_indices_batch(np.concatenate(trees), np.cumsum([0] + [len(t) for t in trees]),
                                          np.concatenate(paths), np.cumsum([0] + [len(p) for p in paths]),
                                          np.array([3, 0, 8]))
    np.testing.assert_array_equal(ko, np.cumsum([0] + [len(p) for p in paths]))
    np.testing.assert_array_equal(keep, np.concatenate([paths[0] + 3, paths[1], paths[2] + 8]))

def ref_commit(cache, t_axis, row_axis, cache_len, keep_lists):
    """New cache: per request row r, position cache_len[r] + k takes keep[k]."""
    out = cache.copy()
    for r, keep in enumerate(keep_lists):
        src = np.take(np.take(cache, [r], axis=row_axis), keep, axis=t_axis)
        idx = [slice(None)] * cache.ndim
        idx[row_axis] = slice(r, r + 1)
        idx[t_axis] = slice(cache_len[r], cache_len[r] + len(keep))
        out[tuple(idx)] = src
    return out

@pytest.mark.parametrize("layout,dtype", [("SLHTD", np.float32), ("SLTHD", np.float16), ("SHTD", np.int8),
                                          ("STHD", np.float64)])
def test_contiguous_commit_matches_numpy(rng, layout, dtype):
    shape = {"S": 3, "L": 2, "H": 2, "T": 16, "D": 4}
    dims = tuple(shape[c] for c in layout)
    k_cache = rng.standard_normal(dims).astype(dtype)
    v_cache = rng.standard_normal(dims).astype(dtype)
    cache_len = np.array([2, 5, 0], dtype=np.int32)
    keep_lists = [np.sort(rng.choice(np.arange(c, 16), size=int(rng.integers(0, 6)), replace=False)).astype(np.int32)
                  for c in cache_len]
    keep = np.concatenate(keep_lists).astype(np.int32)
    ko = np.cumsum([0] + [len(k) for k in keep_lists]).astype(np.int32)
    want_k = ref_commit(k_cache, layout.index("T"), layout.index("S"), cache_len, keep_lists)
    want_v = ref_commit(v_cache, layout.index("T"), layout.index("S"), cache_len, keep_lists)
    pk, pv = data_ptr(k_cache), data_ptr(v_cache)
    specdec.commit_kv([k_cache, v_cache], layout, cache_len, keep, ko)
    assert data_ptr(k_cache) == pk and data_ptr(v_cache) == pv
    np.testing.assert_array_equal(k_cache.view(np.uint8), want_k.view(np.uint8))
    np.testing.assert_array_equal(v_cache.view(np.uint8), want_v.view(np.uint8))

def test_paged_commit_matches_numpy(rng):
    pages, L, P, H, D = 10, 2, 4, 2, 3
    pool = rng.standard_normal((pages, L, P, H, D)).astype(np.float32)
    block_table = np.array([[7, 2, 5, 0], [1, 9, 3, 4]], dtype=np.int32)
    cache_len = np.array([3, 6], dtype=np.int32)
    keep_lists = [np.array([4, 6, 9, 10], dtype=np.int32), np.array([6, 8, 13], dtype=np.int32)]

    def logical(p, r):  # [L, positions, H, D] of request r
        return np.concatenate([p[b] for b in block_table[r]], axis=1)

    want = pool.copy()
    for r, keep in enumerate(keep_lists):
        lg = logical(pool, r)
        new = lg.copy()
        new[:, cache_len[r]:cache_len[r] + len(keep)] = lg[:, keep]
        for i, b in enumerate(block_table[r]):
            want[b] = new[:, i * P:(i + 1) * P]
    specdec.commit_kv([pool], "SLTHD", cache_len, np.concatenate(keep_lists),
                      np.array([0, 4, 7], dtype=np.int32), block_table=block_table)
    np.testing.assert_array_equal(pool, want)

def test_bad_commits_raise_and_leave_caches_byte_identical(rng):
    cache = rng.standard_normal((2, 1, 2, 8, 4)).astype(np.float32)
    before = cache.copy()
    for keep, ko, cl, code in [
        ([5, 4], [0, 2, 2], [1, 0], "not_sorted"),        # keep list not increasing
        ([0, 4], [0, 2, 2], [1, 0], "invalid_argument|out_of_range"),  # keep below cache_len
        ([3, 9], [0, 2, 2], [1, 0], "out_of_range"),      # past capacity
        ([3], [0, 1], [1, 0], "size_mismatch"),           # offsets do not match requests
    ]:
        with pytest.raises(specdec.Error, match=code):
            specdec.commit_kv([cache], "SLHTD", np.array(cl, dtype=np.int32), np.array(keep, dtype=np.int32),
                              np.array(ko, dtype=np.int32))
        np.testing.assert_array_equal(cache.view(np.uint32), before.view(np.uint32))
    with pytest.raises(specdec.Error, match="layout"):
        specdec.commit_kv([cache], "SLHT", 0, [0])
    with pytest.raises(specdec.Error):
        specdec.commit_kv([cache, cache[:, :, :, :4]], "SLHTD", 0, [0, 1])  # positions disagree
    np.testing.assert_array_equal(cache.view(np.uint32), before.view(np.uint32))

def test_commit_kv_one_status_per_request(rng):
    """A bad request is left untouched and reported; the others commit (as
    the CUDA kernel does). With status= nothing raises; without it the first
    failure raises after the good requests committed."""
    cache = rng.standard_normal((2, 1, 2, 8, 4)).astype(np.float32)
    want = cache.copy()  # request 0 alone (request 1's keep range emptied)
    specdec.commit_kv([want], "SLHTD", np.array([0, 1]), np.array([2, 3]), np.array([0, 2, 2], np.int32))
    assert not np.array_equal(want, cache)
    args = (np.array([0, 1]), np.array([2, 3, 9]), np.array([0, 2, 3], np.int32))  # request 1: 9 past capacity 8
    got = cache.copy()
    status = np.full(2, -1, np.int32)
    specdec.commit_kv([got], "SLHTD", *args, status=status)
    assert status[0] == 0 and specdec._core.status_code_name(int(status[1])) == "out_of_range"
    np.testing.assert_array_equal(got, want)
    got = cache.copy()
    with pytest.raises(specdec.Error, match="out_of_range"):
        specdec.commit_kv([got], "SLHTD", *args)
    np.testing.assert_array_equal(got, want)
    with pytest.raises(specdec.Error, match="out_of_range"):  # check=True raises even with status
        specdec.commit_kv([cache.copy()], "SLHTD", *args, status=status, check=True)
    with pytest.raises(specdec.Error, match="size_mismatch"):
        specdec.commit_kv([cache.copy()], "SLHTD", *args, status=np.zeros(3, np.int32))


@needs_torch
def test_torch_fp16_cache_commit_in_place():
    import torch
    cache = torch.arange(2 * 1 * 10 * 2 * 4, dtype=torch.float16).reshape(2, 1, 10, 2, 4)  # [S, L, T, H, D]
    ptr = cache.data_ptr()
    ref = cache.clone()
    specdec.commit_kv([cache], "SLTHD", torch.tensor([2, 0], dtype=torch.int32),
                      torch.tensor([3, 5, 1, 2], dtype=torch.int32), torch.tensor([0, 2, 4], dtype=torch.int32))
    assert cache.data_ptr() == ptr
    ref[0, :, 2:4] = ref[0, :, [3, 5]]
    ref[1, :, 0:2] = ref[1, :, [1, 2]]
    assert torch.equal(cache, ref)

@pytest.mark.parametrize("threads", [2, 3, 8, 0])
def test_threaded_commit_equals_serial(rng, threads):
    """The call-owned pool moves the same bytes as the serial commit, for
    contiguous and paged caches, many tensors and requests; with a bad
    request it commits the same others and leaves that one untouched."""
    R, T = 7, 32
    caches = [rng.standard_normal((R, 2, 3, T, 8)).astype(np.float16) for _ in range(5)]
    cache_len = rng.integers(0, 12, size=R).astype(np.int64)
    keep_lists = [np.sort(rng.choice(np.arange(c, T), size=int(rng.integers(0, 9)), replace=False))
                  for c in cache_len]
    keep = np.concatenate(keep_lists).astype(np.int64)
    ko = np.cumsum([0] + [len(k) for k in keep_lists]).astype(np.int32)
    serial = [c.copy() for c in caches]
    specdec.commit_kv(serial, "SLHTD", cache_len, keep, ko)
    specdec.commit_kv(caches, "SLHTD", cache_len, keep, ko, threads=threads)
    for a, b in zip(caches, serial):
        np.testing.assert_array_equal(a.view(np.uint16), b.view(np.uint16))
    # Paged: pages shuffled over the requests.
    P, per = 4, 8
    pools = [rng.standard_normal((R * per, 2, P, 3, 8)).astype(np.float32) for _ in range(3)]
    block_table = rng.permutation(R * per).reshape(R, per).astype(np.int32)
    serial = [p.copy() for p in pools]
    specdec.commit_kv(serial, "SLTHD", cache_len, keep, ko, block_table=block_table)
    specdec.commit_kv(pools, "SLTHD", cache_len, keep, ko, block_table=block_table, threads=threads)
    for a, b in zip(pools, serial):
        np.testing.assert_array_equal(a.view(np.uint32), b.view(np.uint32))
    bad = keep.copy()
    bad[-1] = T  # past capacity: the last request with a keep list fails
    last = int(np.nonzero(np.diff(ko))[0][-1])
    before = [c.copy() for c in caches]
    serial = [c.copy() for c in caches]
    with pytest.raises(specdec.Error, match="out_of_range"):
        specdec.commit_kv(serial, "SLHTD", cache_len, bad, ko)
    with pytest.raises(specdec.Error, match="out_of_range"):
        specdec.commit_kv(caches, "SLHTD", cache_len, bad, ko, threads=threads)
    for a, b, c in zip(caches, serial, before):
        np.testing.assert_array_equal(a.view(np.uint16), b.view(np.uint16))
        np.testing.assert_array_equal(a[last].view(np.uint16), c[last].view(np.uint16))  # the bad request

def test_commit_threads_argument_checked():
    cache = np.zeros((1, 1, 4, 2), np.float32)
    for t in (-1, 5000):
        with pytest.raises(specdec.Error, match="invalid_argument"):
            specdec.commit_kv([cache], "SHTD", 0, [1], threads=t)

def test_commits_from_python_threads_at_once(rng):
    """commit_kv releases the Python lock while bytes move: commits of
    separate caches from several Python threads at once (each with its own
    pool) give the serial result."""
    from concurrent.futures import ThreadPoolExecutor
    R, T = 4, 64
    jobs = []
    for _ in range(6):
        caches = [rng.standard_normal((R, 2, 2, T, 16)).astype(np.float32) for _ in range(2)]
        cache_len = rng.integers(0, 20, size=R).astype(np.int64)
        keep_lists = [np.sort(rng.choice(np.arange(c, T), size=10, replace=False)) for c in cache_len]
        ko = np.arange(R + 1, dtype=np.int32) * 10
        want = [c.copy() for c in caches]
        specdec.commit_kv(want, "SLHTD", cache_len, np.concatenate(keep_lists), ko)
        jobs.append((caches, cache_len, np.concatenate(keep_lists), ko, want))
    with ThreadPoolExecutor(max_workers=3) as ex:
        list(ex.map(lambda j: specdec.commit_kv(j[0], "SLHTD", j[1], j[2], j[3], threads=2), jobs))
    for caches, _, _, _, want in jobs:
        for a, b in zip(caches, want):
            np.testing.assert_array_equal(a, b)


def test_prepared_commit_refuses_host_caches():
    """KVCommit prepares a CUDA commit: host caches are refused with a
    message that points to commit_kv (its CUDA test is in test_cache_cuda)."""
    with pytest.raises(specdec.Error, match="commit_kv"):
        specdec.KVCommit([np.zeros((1, 2, 4, 8), np.float32)], "SHTD")


def test_commit_kv_reads_keep_up_to_keep_offsets_end(rng):
    """keep may be a buffer of fixed capacity: entries past keep_offsets[R]
    are never read (garbage there changes nothing)."""
    cache = rng.standard_normal((2, 1, 2, 32, 4)).astype(np.float32)
    cache_len = np.array([3, 7], np.int64)
    keep = np.array([4, 6, 9, 10], np.int64)
    ko = np.array([0, 2, 4], np.int32)
    want = cache.copy()
    specdec.commit_kv([want], "SLHTD", cache_len, keep, ko)
    got = cache.copy()
    specdec.commit_kv([got], "SLHTD", cache_len, np.concatenate([keep, [-5, 999]]), ko)
    np.testing.assert_array_equal(got, want)
    with pytest.raises(specdec.Error, match="size_mismatch"):
        specdec.commit_kv([got], "SLHTD", cache_len, keep[:3], ko)


def _verified_batch(rng, R=7, V=6):
    """verify_batch's outputs on random trees (sampled i.i.d.), request 2
    given a NaN row so that verification refuses it."""
    from conftest import random_tree
    sizes = [int(rng.integers(1, 10)) for _ in range(R)]
    offsets = np.cumsum([0] + sizes).astype(np.int32)
    parent = np.concatenate([random_tree(rng, n) for n in sizes]).astype(np.int32)
    N = int(offsets[-1])
    tokens = rng.integers(0, V, N).astype(np.int32)
    p = rng.dirichlet(np.full(V, 0.5), size=N).astype(np.float32)
    q = rng.dirichlet(np.full(V, 0.5), size=N).astype(np.float32)
    p[offsets[2], 0] = np.nan
    paths, _, res = specdec.verify_batch(offsets, parent, tokens, p, q, seeds=5)
    cache_len = rng.integers(0, 30, R).astype(np.int64)
    return offsets, parent, paths, res, cache_len


def test_keep_indices_from_results_follows_the_accepted_paths(rng):
    offsets, parent, paths, res, cache_len = _verified_batch(rng)
    R = len(cache_len)
    keep, ko, st = specdec.keep_indices_from_results(offsets, parent, paths, res, cache_len)
    assert list(st) == list(res[:, 3])
    assert st[2] != 0 and (st != 0).sum() == 1
    want = []
    for r in range(R):
        if res[r, 3] == 0:
            want += [int(cache_len[r]) + int(u) for u in paths[r, :res[r, 0] + 1]]
        assert ko[r + 1] - ko[r] == (res[r, 0] + 1 if res[r, 3] == 0 else 0)
    assert list(keep) == want
    # BFS slots (another topological order): slot[node] replaces the node id.
    slots = np.zeros(len(parent), dtype=np.int32)
    for r in range(R):
        par = parent[offsets[r]:offsets[r + 1]]
        order, frontier = [], [0]
        while frontier:
            order += frontier
            frontier = [int(c) for u in frontier for c in np.flatnonzero(par == u)]
        slots[offsets[r] + np.array(order)] = np.arange(len(order))
    want2 = []
    for r in range(R):
        if res[r, 3] == 0:
            want2 += [int(cache_len[r]) + int(slots[offsets[r] + u]) for u in paths[r, :res[r, 0] + 1]]
    k2, ko2, st2 = specdec.keep_indices_from_results(offsets, parent, paths, res, cache_len, slot_of_node=slots)
    assert list(k2) == want2 and list(ko2) == list(ko) and list(st2) == list(st)
    # Offsets out of place: every request not_sorted, nothing kept.
    bad = offsets.copy()
    bad[1], bad[2] = bad[2], bad[1]
    if bad[1] != bad[2]:
        k3, ko3, st3 = specdec.keep_indices_from_results(bad, parent, paths, res, cache_len)
        assert len(k3) == 0 and not ko3.any() and (st3 == st3[0]).all() and st3[0] != 0
    with pytest.raises(specdec.Error, match="size_mismatch"):
        specdec.keep_indices_from_results(offsets[:-1], parent, paths, res, cache_len)


def test_check_false_without_a_status_array_is_refused():
    """A CUDA call that neither waits nor has a status array would lose its
    result: _check_now refuses it (the rule every CUDA call with check= uses)."""
    from specdec._common import _check_now
    assert _check_now(None, None) is True
    assert _check_now(None, object()) is False
    assert _check_now(True, object()) is True
    with pytest.raises(specdec.Error, match="status"):
        _check_now(False, None)
