"""Peer formats and planning models through Python: SGLang linked lists
both ways against a plain DFS, greedy-from-ids against Mode.GREEDY,
Medusa / EAGLE-1 choice buffers against their definitions, Medusa's
typical selection against the rule written out in numpy, expected accepted
length against brute force, acceptance counting against manual counts,
SpecMemo's memory model against its equations."""
import math

import numpy as np
import pytest

import specdec
from conftest import random_tree, ref_depths


def random_linked(rng, n):
    """A random tree as SGLang linked lists over shuffled slots (slot 0 the
    root). Returns (candidates, next_token, next_sibling, children by slot)."""
    parent = random_tree(rng, n)
    perm = np.concatenate([[0], 1 + rng.permutation(n - 1)])  # node -> slot
    children = {int(perm[i]): [] for i in range(n)}
    for i in range(1, n):
        children[int(perm[parent[i]])].append(int(perm[i]))
    for c in children.values():
        rng.shuffle(c)
    nt = np.full(n, -1, np.int64)
    ns = np.full(n, -1, np.int64)
    for s, cs in children.items():
        if cs:
            nt[s] = cs[0]
        for a, b in zip(cs, cs[1:]):
            ns[a] = b
    cand = rng.integers(0, 1000, size=n).astype(np.int64)
    return cand, nt, ns, children


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


def test_expected_accepted_length_brute_force(rng):
    probs = np.array([[0.6, 0.2, 0.1], [0.5, 0.2, 0.0]])
    for n in (1, 5, 20):
        parent = random_tree(rng, n)
        value, reach = specdec.expected_accepted_length(parent, probs)
        d = ref_depths(parent)
        rank = np.zeros(n, int)
        seen = {}
        for i in range(1, n):
            rank[i] = seen.get(parent[i], 0)
            seen[parent[i]] = rank[i] + 1
        f = np.ones(n)
        for i in range(1, n):
            row = probs[min(d[i], len(probs)) - 1]
            f[i] = f[parent[i]] * (row[rank[i]] if rank[i] < len(row) else 0.0)
        np.testing.assert_allclose(reach, f)
        assert value == pytest.approx(f[1:].sum())
    with pytest.raises(specdec.Error):
        specdec.expected_accepted_length(np.array([-1, 0], np.int32), [0.7, 0.6])  # sums above 1


def test_acceptance_counts(rng):
    c = specdec.AcceptanceCounts(2, 2)
    parent = np.array([-1, 0, 0, 1, 1, 3], np.int32)
    c.record(parent, np.array([0, 1, 3, 5], np.int32))
    c.record(parent, np.array([0, 2], np.int32))
    c.record(parent, np.array([0], np.int32))
    # depth 1: ranks 0 and 1 offered 3 times; rank 0 accepted once, rank 1 once.
    # depth 2 (pooled deeper): node 1's children offered once (ranks 0, 1; rank 0 accepted),
    # node 3's child (depth 3 -> pooled) offered once, accepted once.
    assert list(c.offered) == [3, 3, 2, 1]
    assert list(c.accepted) == [1, 1, 2, 0]
    assert c.rounds == 3 and c.accepted_tokens == 4
    d, r, p = c.estimate()
    np.testing.assert_allclose(p, [1 / 3, 1 / 3, 1.0, 0.0])
    with pytest.raises(specdec.Error):
        c.record(parent, np.array([0, 3], np.int32))  # 3 is not a child of 0


def test_memory_model():
    cfg = specdec.MemoryConfig()
    cfg.layers, cfg.kv_heads, cfg.head_dim, cfg.vocab_size = 32, 32, 128, 32000
    t = specdec.memory_total_bytes(cfg, 20, 44, 37, 4)
    kv = 2 * 32 * 1 * 32 * 20 * 128 * 128 * 2.0
    buf = (32000 * 44 + 32000 * 37 * 4 + 32000 * 37 * 16) * 2.0
    assert t == pytest.approx(7e9 * 2 + 0.6e9 * 4 + kv + buf)
    budget = 20e9
    plan = specdec.plan_memory(cfg, budget, turns=20)
    assert plan.total <= budget
    assert specdec.memory_total_bytes(cfg, 20, plan.nodes, plan.leaves, plan.heads) == pytest.approx(plan.total)
    assert plan.nodes >= 10 * plan.heads + 1
    with pytest.raises(specdec.Error, match="buffer_too_small"):
        specdec.plan_memory(cfg, 1e9)


def sglang_batch(rng, B, D, V):
    cand = np.zeros((B, D), np.int64)
    nt = np.full((B, D), -1, np.int64)
    ns = np.full((B, D), -1, np.int64)
    for b in range(B):
        c, t, s, _ = random_linked(rng, D)
        cand[b], nt[b], ns[b] = c % V, t, s
    ri = (np.arange(B)[:, None] * D + np.arange(D)[None, :]).astype(np.int64)
    return cand, ri, nt, ns


def test_sglang_greedy_matches_composition(rng):
    B, D, V, spec = 20, 9, 6, 4
    cand, ri, nt, ns = sglang_batch(rng, B, D, V)
    target_predict = rng.integers(0, V, size=B * D).astype(np.int64)
    pred, acc_idx, acc_num = specdec.sglang_verify_tree_greedy(cand, ri, nt, ns, target_predict, spec)
    for b in range(B):
        parent, tokens, o2n, n2o = specdec.tree_from_linked_list(cand[b], nt[b], ns[b], unused_root=True)
        ids = target_predict[ri[b][n2o]].astype(np.int32)
        res = specdec.verify_greedy_ids(parent, tokens, ids, vocab=V, unused_root=True, max_accept=spec - 1)
        assert acc_num[b] == res.accepted
        rows = ri[b][n2o[res.path]]
        np.testing.assert_array_equal(acc_idx[b, :res.accepted + 1], rows)
        assert (acc_idx[b, res.accepted + 1:] == -1).all()  # untouched
        np.testing.assert_array_equal(pred[rows], res.tokens)


def test_sglang_sampling_target_only_exact_and_lossy_control(rng):
    """Root with two children of distinct tokens; the token emitted after
    the root is distributed as the root's target row with thresholds 1, and
    visibly not with threshold_acc = 0.5 (SGLang's lossy setting)."""
    B, D, V = 60000, 3, 5
    P = np.array([0.1, 0.4, 0.05, 0.3, 0.15], np.float32)
    cand = np.tile(np.array([0, 1, 3], np.int64), (B, 1))
    nt = np.tile(np.array([1, -1, -1], np.int64), (B, 1))
    ns = np.tile(np.array([-1, 2, -1], np.int64), (B, 1))
    ri = (np.arange(B)[:, None] * D + np.arange(D)[None, :]).astype(np.int64)
    probs = np.tile(P, (B * D, 1))
    coins = rng.random(B * D).astype(np.float32)
    final = rng.random(B).astype(np.float32)

    def first_counts(th_acc):
        pred, _, _ = specdec.sglang_tree_sampling_target_only(cand, ri, nt, ns, probs, coins, final, 3,
                                                              threshold_acc=th_acc)
        return np.bincount(pred[ri[:, 0]], minlength=V)

    def chi2(counts):
        return float((((counts - B * P) ** 2) / (B * P)).sum())

    exact, lossy = chi2(first_counts(1.0)), chi2(first_counts(0.5))
    print(f"chi2 exact {exact:.1f}, lossy control {lossy:.1f}")
    assert exact < 18.47 and lossy > 18.47


def test_chain_acceptance_counts(rng):
    V, g = 7, 5
    for trial in range(300):
        p = rng.random((g + 1, V)).astype(np.float32)
        p /= p.sum(axis=1, keepdims=True)
        q = rng.random((g, V)).astype(np.float32)
        q /= q.sum(axis=1, keepdims=True)
        drafts = np.array([rng.choice(V, p=q[i] / q[i].sum()) for i in range(g)], np.int32)
        accepted, emitted = specdec.chain_acceptance_counts(drafts, p, q, seed=3, round=trial)
        res = specdec.verify_chain(drafts, p, q, seed=3, round=trial)
        assert emitted == res.accepted
        coins = rng.random(g).astype(np.float32)
        a2, e2 = specdec.chain_acceptance_counts(drafts, p, q, coins)
        passes = [coins[i] * q[i, drafts[i]] < p[i, drafts[i]] for i in range(g)]
        assert a2 == sum(passes)
        assert e2 == (passes.index(False) if False in passes else g)
