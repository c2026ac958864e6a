"""The small interop helpers: SGLang's result scatter from a specdec path
(against SGLang's own greedy entry point and a plain loop), candidate-token
gathering from Medusa / EAGLE-1 tree indices, per-depth acceptance
counters, and specdec's chain coins (against the Philox table and
verify_chain). Bad input raises and leaves every output untouched."""
import numpy as np
import pytest

import specdec
from test_interop_plan import CHOICES, sglang_batch


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
