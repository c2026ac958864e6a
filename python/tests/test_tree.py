"""Trees, orders, masks and positions against numpy references and the C++
program; zero-copy outputs; errors leave outputs untouched."""
import numpy as np
import pytest

import specdec
from conftest import data_ptr, needs_torch, random_tree, ref_ancestor_mask, ref_depths


def ref_packed(parent, w):
    dense = ref_ancestor_mask(parent)
    n = len(parent)
    words = (n + w - 1) // w
    out = np.zeros((n, words), dtype=np.uint64)
    for i in range(n):
        for j in range(n):
            if dense[i, j]:
                out[i, j // w] |= np.uint64(1) << np.uint64(j % w)
    return out.astype(np.uint32 if w == 32 else np.uint64)

def ref_dfs(parent):
    kids = [[] for _ in parent]
    for i in range(1, len(parent)):
        kids[parent[i]].append(i)
    order, stack = [], [0]
    while stack:
        u = stack.pop()
        order.append(u)
        stack.extend(reversed(kids[u]))
    return np.array(order, dtype=np.int32)

def ref_bfs(parent):
    kids = [[] for _ in parent]
    for i in range(1, len(parent)):
        kids[parent[i]].append(i)
    order, head = [0], 0
    while head < len(order):
        order.extend(kids[order[head]])
        head += 1
    return np.array(order, dtype=np.int32)

@pytest.mark.parametrize("n", [1, 2, 7, 31, 32, 33, 64, 65, 130])
def test_masks_positions_orders_match_reference(rng, n):
    parent = random_tree(rng, n)
    for w in (32, 64):
        np.testing.assert_array_equal(specdec.packed_mask(parent, word_bits=w), ref_packed(parent, w))
    dense = ref_ancestor_mask(parent)
    np.testing.assert_array_equal(specdec.dense_mask(parent), dense)
    np.testing.assert_array_equal(specdec.dense_mask(parent, dtype=np.bool_), dense.astype(bool))
    add = specdec.additive_mask(parent, prefix=3)
    ref_add = np.concatenate([np.zeros((n, 3)), np.where(dense == 1, 0.0, -np.inf)], axis=1)
    np.testing.assert_array_equal(add, ref_add.astype(np.float32))
    np.testing.assert_array_equal(specdec.depths(parent), ref_depths(parent))
    np.testing.assert_array_equal(specdec.positions(parent, 11), ref_depths(parent) + 11)
    np.testing.assert_array_equal(specdec.positions(parent, 5, dtype=np.int32), ref_depths(parent) + 5)
    n2o, o2n = specdec.dfs_order(parent)
    np.testing.assert_array_equal(n2o, ref_dfs(parent))
    np.testing.assert_array_equal(o2n[n2o], np.arange(n))
    n2o, o2n = specdec.bfs_order(parent)
    np.testing.assert_array_equal(n2o, ref_bfs(parent))

def test_masks_match_cpp(rng, cpp_ref):
    trees = [random_tree(rng, n) for n in (1, 5, 64, 100)]
    text = "".join(f"mask {len(t)} {' '.join(map(str, t))}\n" for t in trees)
    lines = cpp_ref(text)
    for k, t in enumerate(trees):
        words = np.array([int(v) for v in lines[2 * k]], dtype=np.uint64)
        np.testing.assert_array_equal(specdec.packed_mask(t).ravel(), words)
        np.testing.assert_array_equal(specdec.positions(t, 7), np.array(lines[2 * k + 1], dtype=np.int64))

def test_outputs_are_written_in_place_with_row_stride(rng):
    parent = random_tree(rng, 40)
    big = np.full((50, 4), 7, dtype=np.uint64)  # wider and taller than needed
    before = data_ptr(big)
    out = specdec.packed_mask(parent, out=big)
    assert out is big and data_ptr(out) == before
    np.testing.assert_array_equal(big[:40, :1], ref_packed(parent, 64))
    assert (big[:40, 1:] == 7).all() and (big[40:] == 7).all()  # only the tree block is written
    full = np.full((40, 10 + 40), 5.0, dtype=np.float32)
    specdec.additive_mask(parent, prefix=10, out=full)
    assert np.isneginf(full).sum() == 40 * 40 - ref_ancestor_mask(parent).sum()

def test_bad_trees_raise_and_write_nothing():
    bad = {
        "not_topological": np.array([-1, 2, 0], dtype=np.int32),
        "parent_out_of_range": np.array([-1, 0, 7], dtype=np.int32),
        "multiple_roots": np.array([-1, 0, -1], dtype=np.int32),
        "empty_input": np.zeros(0, dtype=np.int32),
    }
    for name, parent in bad.items():
        n = max(len(parent), 1)
        out = np.full((n, 1), 99, dtype=np.uint64)
        with pytest.raises(specdec.Error, match=name if name != "not_topological" else "not_topological|parent_out"):
            specdec.packed_mask(parent, out=out)
        assert (out == 99).all()
        pos = np.full(n, -5, dtype=np.int64)
        with pytest.raises(specdec.Error):
            specdec.positions(parent, 3, out=pos)
        assert (pos == -5).all()
    small = np.zeros((3, 3), dtype=np.uint8)
    with pytest.raises(specdec.Error, match="buffer_too_small"):
        specdec.dense_mask(np.array([-1, 0, 0, 1], dtype=np.int32), out=small)
    assert (small == 0).all()
    with pytest.raises(specdec.Error, match="invalid_argument"):
        specdec.positions(np.array([-1, 0], dtype=np.int32), -1)
    # A wrong output dtype is refused (never silently written to a copy).
    with pytest.raises(TypeError):
        specdec.packed_mask(np.array([-1, 0], dtype=np.int32), out=np.zeros((2, 1), dtype=np.int64))

def test_batched_masks_match_single_tree_and_isolate_failures(rng):
    trees = [random_tree(rng, n) for n in (3, 70, 1, 20)]
    trees[2] = np.array([-1, 5], dtype=np.int32)  # a broken tree in the middle
    parents = np.concatenate(trees)
    offsets = np.cumsum([0] + [len(t) for t in trees]).astype(np.int32)
    cache_len = np.array([4, 0, 9, 100], dtype=np.int64)
    masks = np.full((len(parents), 2), 3, dtype=np.uint64)
    m, pos, st = specdec.tree_masks_batched(parents, offsets, cache_len, masks=masks, max_nodes=100)
    assert m is masks
    assert list(st) == [0, 0, 6, 0]  # parent_out_of_range for the broken tree only
    for b, t in enumerate(trees):
        lo, hi = offsets[b], offsets[b + 1]
        if st[b] != 0:
            assert (masks[lo:hi] == 3).all()
            continue
        w = (len(t) + 63) // 64
        np.testing.assert_array_equal(masks[lo:hi, :w], ref_packed(t, 64))
        np.testing.assert_array_equal(pos[lo:hi], ref_depths(t) + cache_len[b])
    # Rows that overlap (a broadcast view) are refused: the rows would run
    # past the array.
    buf = np.full(8, 3, dtype=np.uint64)
    bcast = np.lib.stride_tricks.as_strided(buf[:2], shape=(len(parents), 2), strides=(0, 8))
    with pytest.raises(specdec.Error, match="invalid_argument.*overlap"):
        specdec.tree_masks_batched(parents, offsets, cache_len, masks=bcast, max_nodes=100)
    assert (buf == 3).all()

def medusa_ref(choices):
    order = sorted(range(len(choices)), key=lambda k: (len(choices[k]), list(choices[k]), k))
    idx = {tuple(choices[k]): s + 1 for s, k in enumerate(order)}
    parent = [-1] + [0 if len(choices[k]) == 1 else idx[tuple(choices[k][:-1])] for k in order]
    return np.array(parent, dtype=np.int32), np.array([-1] + order, dtype=np.int32)

def test_choices_paths_relabel(rng):
    choices = [[0], [1], [0, 0], [2], [0, 1], [1, 0], [0, 0, 0], [0, 1, 3]]
    parent, node_choice = specdec.from_choices(choices)
    ref_p, ref_c = medusa_ref(choices)
    np.testing.assert_array_equal(parent, ref_p)
    np.testing.assert_array_equal(node_choice, ref_c)
    with pytest.raises(specdec.Error, match="prefix"):
        specdec.from_choices([[0], [1, 0]])
    with pytest.raises(specdec.Error, match="duplicate"):
        specdec.from_choices([[0], [0]])
    # path matrix of a random tree -> the same tree
    t = random_tree(rng, 25)
    leaves = [i for i in range(25) if i not in set(t[1:])]
    rows = []
    for leaf in leaves:
        path = []
        while leaf >= 0:
            path.append(leaf)
            leaf = t[leaf]
        rows.append(path[::-1])
    width = max(map(len, rows))
    mat = np.array([r + [-1] * (width - len(r)) for r in rows], dtype=np.int32)
    np.testing.assert_array_equal(specdec.from_paths(mat), t)
    # any-order parents -> DFS pre-order, consistent permutations
    perm = rng.permutation(25)
    inv = np.argsort(perm)
    shuffled = np.where(t[perm] < 0, -1, inv[np.maximum(t[perm], 0)]).astype(np.int32)
    new_parent, n2o, o2n = specdec.relabel_topological(shuffled)
    assert new_parent[0] == -1 and all(0 <= new_parent[i] < i for i in range(1, 25))
    for i in range(1, 25):
        assert n2o[new_parent[i]] == shuffled[n2o[i]]
    np.testing.assert_array_equal(o2n[n2o], np.arange(25))

@needs_torch
def test_torch_zero_copy():
    import torch
    parent = torch.tensor([-1, 0, 0, 1, 2], dtype=torch.int32)
    out = torch.zeros((5, 5), dtype=torch.float32)
    ptr = out.data_ptr()
    res = specdec.additive_mask(parent, out=out)
    assert res is out and out.data_ptr() == ptr
    ref = np.where(ref_ancestor_mask(np.array([-1, 0, 0, 1, 2])) == 1, 0.0, -np.inf)
    assert out.tolist() == ref.tolist()
    pos = torch.empty(5, dtype=torch.int64)
    specdec.positions(parent, 4, out=pos)
    assert pos.tolist() == [4, 5, 5, 6, 6]
    # allocated outputs follow the input's framework
    assert isinstance(specdec.positions(parent, 0), torch.Tensor)
