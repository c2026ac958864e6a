"""SSM tree scan and state commit against the per-path Mamba2 recurrence in
numpy; drafting builders, pruning and planners against plain references.

Peer formats and planning models through Python: SGLang linked lists
both ways against a plain DFS, greedy-from-ids against Mode.GREEDY,
Medusa / EAGLE-1 choice buffers against their definitions, Medusa's
typical selection against the rule written out in numpy, expected accepted
length against brute force, acceptance counting against manual counts,
SpecMemo's memory model against its equations."""
import itertools

import numpy as np
import pytest

import specdec
from conftest import random_tree, ref_depths


def expected_tokens(parent, rank, p):
    reach = np.ones(len(parent))
    for i in range(1, len(parent)):
        reach[i] = reach[parent[i]] * p[rank[i]]
    return reach.sum()

def test_sequoia_tree_is_optimal_on_small_budgets():
    p = np.array([0.6, 0.25, 0.1])
    for budget, depth in [(4, 2), (6, 3), (7, 4)]:
        parent, rank, value = specdec.sequoia_tree(p, budget, depth)
        assert len(parent) <= budget
        assert value == pytest.approx(expected_tokens(parent, rank, p))
        # brute force over all trees up to `budget` nodes given as parent arrays
        best = 0.0
        for n in range(1, budget + 1):
            for par in itertools.product(*[range(i) for i in range(1, n)]):
                par = (-1,) + par
                d = [0] * n
                ok = True
                rk = [0] * n
                for i in range(1, n):
                    d[i] = d[par[i]] + 1
                    rk[i] = sum(1 for j in range(1, i) if par[j] == par[i])
                    ok &= d[i] <= depth and rk[i] < len(p)
                if ok:
                    best = max(best, expected_tokens(par, rk, p))
        assert value == pytest.approx(best)

def test_cost_model_fits_and_best_size():
    n = np.arange(1, 9, dtype=np.float64)
    k, c = specdec.fit_linear_cost(n, 2.0 * n + 5.0)
    assert (k, c) == (pytest.approx(2.0), pytest.approx(5.0))
    a, b, c = specdec.fit_quadratic_cost(n, 0.5 * n * n - n + 3.0)
    assert (a, b, c) == (pytest.approx(0.5), pytest.approx(-1.0), pytest.approx(3.0))
    tau = np.array([1.0, 1.7, 2.2, 2.5, 2.6])
    best, tpt = specdec.best_tree_size((0.1, 1.0), tau, 0.05)
    times = (0.1 * np.arange(1, 6) + 1.0 + 0.05) / tau
    assert best == int(np.argmin(times)) + 1 and tpt == pytest.approx(times.min())
    with pytest.raises(specdec.Error, match="size_mismatch|invalid_argument"):
        specdec.fit_linear_cost(n, n[:3])

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
