"""Peer formats and planning models through Python: SGLang linked lists
both ways against a plain DFS, greedy-from-ids against Mode.GREEDY,
Medusa / EAGLE-1 choice buffers against their definitions, Medusa's
typical selection against the rule written out in numpy, expected accepted
length against brute force, acceptance counting against manual counts,
SpecMemo's memory model against its equations.

The small interop helpers: SGLang's result scatter from a specdec path
(against SGLang's own greedy entry point and a plain loop), candidate-token
gathering from Medusa / EAGLE-1 tree indices, per-depth acceptance
counters, and specdec's chain coins (against the Philox table and
verify_chain). Bad input raises and leaves every output untouched."""
import math

import numpy as np
import pytest

import specdec
from conftest import random_tree, ref_depths
from test_interop_sglang import random_linked, sglang_batch


def test_linked_list_round_trip(rng):
    for n in (1, 2, 9, 40):
        cand, nt, ns, children = random_linked(rng, n)
        parent, tokens, o2n, n2o = specdec.tree_from_linked_list(cand, nt, ns)
        # Reference: DFS preorder, siblings in list order.
        order, stack = [], [0]
        while stack:
            s = stack.pop()
            order.append(s)
            stack.extend(reversed(children[s]))
        np.testing.assert_array_equal(n2o, order)
        np.testing.assert_array_equal(tokens, cand[order])
        for i, s in enumerate(order):
            assert o2n[s] == i
            if i:
                ps = next(p for p, cs in children.items() if s in cs)
                assert parent[i] == o2n[ps]
        nt2, ns2 = specdec.linked_list_from_tree(parent, tokens)
        p2, t2, _, _ = specdec.tree_from_linked_list(tokens.astype(np.int64), nt2, ns2)
        np.testing.assert_array_equal(p2, parent)
        np.testing.assert_array_equal(t2, tokens)
        # int32 arrays work the same.
        p3, _, _, _ = specdec.tree_from_linked_list(cand.astype(np.int32), nt.astype(np.int32), ns.astype(np.int32))
        np.testing.assert_array_equal(p3, parent)

def test_linked_list_errors():
    cand = np.zeros(3, np.int64)
    with pytest.raises(specdec.Error, match="cycle"):
        specdec.tree_from_linked_list(cand, np.array([1, 0, -1]), np.array([-1, -1, -1]))
    with pytest.raises(specdec.Error, match="out_of_range"):
        specdec.tree_from_linked_list(cand, np.array([5, -1, -1]), np.array([-1, -1, -1]))
    with pytest.raises(specdec.Error):
        specdec.tree_from_linked_list(cand, np.array([1, -1, -1]), np.array([-1, -1, -1]), require_all=True)

def test_verify_greedy_ids_equals_greedy(rng):
    V = 30
    for trial in range(50):
        n = int(rng.integers(1, 25))
        parent = random_tree(rng, n)
        logits = rng.standard_normal((n, V)).astype(np.float32)
        ids = logits.argmax(axis=1).astype(np.int32)
        tokens = rng.integers(0, V, size=n).astype(np.int32)
        for i in range(1, n):
            if rng.random() < 0.6:
                tokens[i] = ids[parent[i]]
        want = specdec.verify_tree(parent, tokens, logits, mode=specdec.Mode.GREEDY)
        got = specdec.verify_greedy_ids(parent, tokens, ids, vocab=V)
        assert (got.accepted, got.last_node, got.next_token) == (want.accepted, want.last_node, want.next_token)
        np.testing.assert_array_equal(got.tokens, want.tokens)
    with pytest.raises(specdec.Error, match="token_out_of_range"):
        specdec.verify_greedy_ids(np.array([-1, 0], np.int32), np.array([0, 1], np.int32),
                                  np.array([V + 1, 0], np.int32), vocab=V)

CHOICES = [(0,), (1,), (2,), (0, 0), (0, 1), (1, 0), (0, 0, 0), (0, 0, 1), (2, 0), (0, 1, 0)]

def test_choice_buffers_medusa():
    topk = 3
    parent, ti, ri = specdec.choice_buffers(CHOICES, topk, "medusa")
    d = ref_depths(parent)
    _, node_choice = specdec.from_choices(CHOICES)
    assert ti[0] == 0
    for i in range(1, len(parent)):
        c = CHOICES[node_choice[i]]
        assert ti[i] == 1 + (d[i] - 1) * topk + c[-1]
    leaves = [i for i in range(len(parent)) if i not in set(parent[1:].tolist())]
    assert ri.shape == (len(leaves), d.max() + 1)
    for row, leaf in zip(ri, reversed(leaves)):  # Medusa: leaves in reverse node order
        path, j = [], leaf
        while j >= 0:
            path.append(j)
            j = parent[j]
        want = list(reversed(path)) + [-1] * (ri.shape[1] - len(path))
        np.testing.assert_array_equal(row, want)

def test_choice_buffers_eagle1_rows_sorted():
    parent, ti, ri = specdec.choice_buffers(CHOICES, 3, "eagle1")
    _, _, rm = specdec.choice_buffers(CHOICES, 3, "medusa")
    assert sorted(map(tuple, ri)) == sorted(map(tuple, rm))
    key = [tuple(v if v >= 0 else 10**9 for v in row) for row in ri]  # padding ranks last
    assert key == sorted(key)
    assert ti[0] == 0 and len(set(ti.tolist())) == len(ti)

def ref_typical(retrieve, tokens, p, eps, delta):
    ent = -(p * np.log(p + 1e-5)).sum(axis=1)
    thr = np.minimum(eps, delta * np.exp(-ent))
    best, best_len, best_ll = 0, 0, -math.inf
    for r, row in enumerate(retrieve):
        k, ll = 0, 0.0
        while k + 1 < len(row) and row[k + 1] >= 0 and p[row[k], tokens[row[k + 1]]] > thr[row[k]]:
            ll += math.log(p[row[k], tokens[row[k + 1]]])
            k += 1
        if k > best_len or (k == best_len and k > 0 and ll > best_ll):
            best, best_len, best_ll = r, k, ll
    return best, best_len

def test_medusa_typical_select(rng):
    parent, _, ri = specdec.choice_buffers(CHOICES, 3, "medusa")
    n, V = len(parent), 8
    for trial in range(200):
        logits = rng.standard_normal((n, V)) * 3
        p = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
        p = p.astype(np.float32)
        tokens = rng.integers(0, V, size=n).astype(np.int32)
        got = specdec.medusa_typical_select(ri, tokens, p, epsilon=0.09, delta=0.3)
        assert got == ref_typical(ri, tokens, p.astype(np.float64), 0.09, 0.3)

def test_write_sglang_results_equals_sglang_greedy(rng):
    B, D, V, spec = 25, 9, 6, 5
    cand, ri, nt, ns = sglang_batch(rng, B, D, V)
    target_predict = rng.integers(0, V, size=B * D).astype(np.int64)
    pred, acc_idx, acc_num = specdec.sglang_verify_tree_greedy(cand, ri, nt, ns, target_predict, spec)
    pred2 = np.zeros_like(pred)
    acc2 = np.full_like(acc_idx, -1)
    for b in range(B):
        parent, tokens, _, n2o = specdec.tree_from_linked_list(cand[b], nt[b], ns[b], unused_root=True)
        ids = target_predict[ri[b][n2o]].astype(np.int32)
        r = specdec.verify_greedy_ids(parent, tokens, ids, vocab=V, unused_root=True, max_accept=spec - 1)
        row = acc2[b]
        sr = ri[b] if b % 2 else ri[b].astype(np.int32)  # both index types
        out_idx, num, out_pred = specdec.write_sglang_results(r.path, r.tokens, r.accepted, node_slot=n2o,
                                                              slot_row=sr, accept_index=row, predicts=pred2)
        assert out_idx is row and out_pred is pred2 and num == acc_num[b]
    np.testing.assert_array_equal(acc2, acc_idx)
    np.testing.assert_array_equal(pred2, pred)

def test_write_sglang_results_reference_and_errors(rng):
    for _ in range(50):
        n = int(rng.integers(1, 8))
        path = rng.permutation(12)[:n].astype(np.int32)
        tokens = rng.integers(0, 100, size=n).astype(np.int32)
        node_slot = rng.permutation(12).astype(np.int32)
        slot_row = rng.permutation(40)[:12].astype(np.int64)
        predicts = np.full(40, -7, np.int32)
        idx, num, _ = specdec.write_sglang_results(path, tokens, n - 1, node_slot=node_slot, slot_row=slot_row,
                                                   predicts=predicts)
        rows = slot_row[node_slot[path]]
        np.testing.assert_array_equal(idx, rows)
        assert num == n - 1
        want = np.full(40, -7, np.int32)
        want[rows] = tokens
        np.testing.assert_array_equal(predicts, want)
    # Identity maps, predicts not written.
    idx, num, pr = specdec.write_sglang_results([0, 2, 5], [9, 8, 7], 2)
    np.testing.assert_array_equal(idx, [0, 2, 5])
    assert num == 2 and pr is None
    # Errors: nothing written.
    path, tokens = np.array([0, 3, 4], np.int32), np.array([5, 6, 7], np.int32)
    cases = [
        (dict(accept_index=np.full(2, -1, np.int32)), "buffer_too_small"),
        (dict(node_slot=np.array([0, 1, 2, 3], np.int32)), "out_of_range"),        # node 4 has no slot
        (dict(slot_row=np.array([0, 1, 2, 3, -1], np.int64)), "out_of_range"),    # slot 4 has no row
        (dict(predicts=np.zeros(4, np.int32)), "out_of_range"),                    # row 4 outside predicts
    ]
    for kw, code in cases:
        acc = kw.pop("accept_index", np.full(3, -1, np.int32))
        pred = kw.pop("predicts", np.full(8, -1, np.int32))
        acc0, pred0 = acc.copy(), pred.copy()
        with pytest.raises(specdec.Error, match=code):
            specdec.write_sglang_results(path, tokens, 2, accept_index=acc, predicts=pred, **kw)
        np.testing.assert_array_equal(acc, acc0)
        np.testing.assert_array_equal(pred, pred0)
    with pytest.raises(specdec.Error, match="size_mismatch"):  # path shorter than accepted + 1
        specdec.write_sglang_results(path[:2], tokens, 2)

@pytest.mark.parametrize("layout", ["medusa", "eagle1"])
def test_gather_candidate_tokens(rng, layout):
    topk = 3
    parent, ti, _ = specdec.choice_buffers(CHOICES, topk, layout)
    flat = rng.integers(0, 1000, size=int(ti.max()) + 1).astype(np.int32)
    out = np.full(len(ti), -1, np.int32)
    assert specdec.gather_candidate_tokens(ti, flat, out=out) is out
    np.testing.assert_array_equal(out, flat[ti])
    np.testing.assert_array_equal(specdec.gather_candidate_tokens(ti, flat.astype(np.int64)), flat[ti])
    before = out.copy()
    with pytest.raises(specdec.Error, match="out_of_range"):
        specdec.gather_candidate_tokens(ti, flat[:-1], out=out)  # the largest index falls off
    with pytest.raises(specdec.Error, match="out_of_range"):
        specdec.gather_candidate_tokens(np.array([0, -1], np.int32), flat, out=out)
    np.testing.assert_array_equal(out, before)
    with pytest.raises(specdec.Error, match="size_mismatch"):
        specdec.gather_candidate_tokens(ti, flat, out=np.zeros(len(ti) - 1, np.int32))

def test_count_acceptance_per_depth(rng):
    per_depth = np.zeros(5, np.int64)
    ref = np.zeros(5, np.int64)
    for _ in range(20):
        acc = rng.integers(0, 8, size=int(rng.integers(0, 6)))
        assert specdec.count_acceptance_per_depth(acc, per_depth) is per_depth
        for a in acc:
            ref[:min(a, 5)] += 1
        np.testing.assert_array_equal(per_depth, ref)
    specdec.count_acceptance_per_depth(3, per_depth)
    ref[:3] += 1
    np.testing.assert_array_equal(per_depth, ref)
    # verify_batch's own counters agree.
    offsets = np.array([0, 4, 7], np.int32)
    parent = np.array([-1, 0, 1, 2, -1, 0, 1], np.int32)
    tokens = np.array([0, 1, 2, 3, 0, 1, 2], np.int32)
    logits = rng.random((7, 4)).astype(np.float32)
    logits[[0, 1, 4], [1, 2, 1]] = 5  # accept some drafts greedily
    apd = np.zeros(3, np.int64)
    _, _, res = specdec.verify_batch(offsets, parent, tokens, logits, modes=specdec.Mode.GREEDY,
                                     accepted_per_depth=apd)
    mine = specdec.count_acceptance_per_depth(res[:, 0], np.zeros(3, np.int64))
    np.testing.assert_array_equal(mine, apd)
    with pytest.raises(TypeError):  # counters are int64, written in place, never a converted copy
        specdec.count_acceptance_per_depth([1], np.zeros(3, np.int32))

def test_chain_coins(rng):
    c = specdec.chain_coins(6, seed=11, request=2, round=5)
    u = specdec.philox_uniforms(6, 2, seed=11, request=2, round=5)
    np.testing.assert_array_equal(c, u[:, 1].astype(np.float32))
    out = np.zeros(6, np.float32)
    assert specdec.chain_coins(6, seed=11, request=2, round=5, out=out) is out
    np.testing.assert_array_equal(out, c)
    assert len(specdec.chain_coins(0)) == 0
    with pytest.raises(specdec.Error, match="size_mismatch"):
        specdec.chain_coins(6, out=np.zeros(5, np.float32))
    V, g = 6, 5
    for r in range(100):
        p = rng.random((g + 1, V)).astype(np.float32)
        q = rng.random((g, V)).astype(np.float32) + 0.01
        q /= q.sum(axis=1, keepdims=True)
        drafts = rng.integers(0, V, size=g).astype(np.int32)
        coins = specdec.chain_coins(g, seed=4, round=r)
        assert specdec.chain_acceptance_counts(drafts, p, q, coins) == \
            specdec.chain_acceptance_counts(drafts, p, q, seed=4, round=r)
