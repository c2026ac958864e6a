"""Drafting through Python: the top-k builder from a Python drafter,
pruning against a plain reference and batched pruning against
per-request prune_to_budget, sampled and static-shape builders (shapes and
q rows, a full static shape equal to the top-k tree), exactness of the whole
Python path (sampled tree -> sampled verification) by chi-square with
negative controls, and drafting from caller uniforms (u[node, draw]):
Philox values handed back reproduce the seeded builders, short or
out-of-range uniforms raise, and a round on numpy's generator is exact."""
import math

import numpy as np
import pytest

import specdec
from conftest import random_tree


def test_topk_tree_from_a_python_drafter(rng):
    V = 7
    table = rng.dirichlet(np.full(V, 0.5), size=V).astype(np.float32)  # q depends on the last token
    calls = []

    def drafter(node, depth, path):
        calls.append((node, depth, list(path)))
        return table[path[-1]]

    t = specdec.topk_tree(drafter, 3, k=2, depth=3, vocab_size=V)
    assert len(t.parent) == 1 + 2 + 4 + 8 and len(calls) == 1 + 2 + 4
    for i in range(1, len(t.parent)):
        row = table[t.tokens[t.parent[i]]]
        sibs = [j for j in range(1, len(t.parent)) if t.parent[j] == t.parent[i]]
        top = sorted(range(V), key=lambda v: (-row[v], v))[:2]
        assert [int(t.tokens[j]) for j in sibs] == top
        assert t.prob[i] == pytest.approx(row[t.tokens[i]])
        assert t.scores[i] == pytest.approx(t.scores[t.parent[i]] + math.log(row[t.tokens[i]]), rel=1e-5)
    assert (t.child_mode[t.parent[1:]] == specdec.DraftMode.DETERMINISTIC).all()
    b = specdec.beam_tree(drafter, 3, k=3, width=2, depth=3, budget=6, vocab_size=V)
    assert len(b.parent) == 6
    with pytest.raises(specdec.Error, match="non_finite|negative|zero_mass"):
        specdec.topk_tree(lambda n, d, p: np.full(V, np.nan, dtype=np.float32), 0, k=2, depth=1, vocab_size=V)

    def failing(node, depth, path):
        raise KeyError("drafter failed")

    with pytest.raises(KeyError, match="drafter failed"):  # the drafter's own exception comes back intact
        specdec.beam_tree(failing, 0, k=2, width=2, depth=2, budget=4, vocab_size=V)

def test_prune_matches_reference(rng):
    for _ in range(20):
        n = int(rng.integers(1, 40))
        parent = random_tree(rng, n)
        scores = rng.standard_normal(n).astype(np.float32)
        budget = int(rng.integers(1, n + 2))
        new_index, kept = specdec.prune_to_budget(parent, scores, budget)
        eff = scores.copy()
        for i in range(1, n):
            eff[i] = min(eff[i], eff[parent[i]])
        order = sorted(range(n), key=lambda i: (-eff[i], i))[:min(budget, n)]
        keep = sorted(order)
        want = np.full(n, -1, dtype=np.int32)
        want[keep] = np.arange(len(keep))
        np.testing.assert_array_equal(new_index, want)
        assert kept == len(keep)
    out = np.full(3, 9, dtype=np.int32)
    with pytest.raises(specdec.Error, match="non_finite"):
        specdec.prune_to_budget(np.array([-1, 0, 0], dtype=np.int32), np.array([0, np.nan, 1], np.float32), 2,
                                out=out)
    assert (out == 9).all()

def test_prune_batch_matches_single_requests(rng):
    sizes = [1, 5, 12, 30]
    parents, scores = [], []
    for n in sizes:
        parents.append(random_tree(rng, n))
        scores.append(rng.standard_normal(n).astype(np.float32))
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int32)
    budgets = np.array([1, 3, 12, 10], dtype=np.int32)
    new_index, kept, st = specdec.prune_batch(np.concatenate(parents), np.concatenate(scores), offsets, budgets)
    assert (st == 0).all()
    for r, n in enumerate(sizes):
        want, k = specdec.prune_to_budget(parents[r], scores[r], int(budgets[r]))
        np.testing.assert_array_equal(new_index[offsets[r]:offsets[r + 1]], want)
        assert kept[r] == k
    # One shared budget; a NaN score fails its request alone, rows untouched.
    sc = np.concatenate(scores)
    sc[offsets[2] + 3] = np.nan
    out = np.full(offsets[-1], -7, dtype=np.int32)
    _, kept2, st2 = specdec.prune_batch(np.concatenate(parents), sc, offsets, 4, new_index=out)
    assert st2[2] != 0 and (st2[[0, 1, 3]] == 0).all()
    assert (out[offsets[2]:offsets[3]] == -7).all()
    with pytest.raises(specdec.Error, match="offsets"):
        specdec.prune_batch(np.concatenate(parents), np.concatenate(scores), np.array([0, 5, 3], np.int32), 2)

V = 5

Q = np.array([0.35, 0.25, 0.2, 0.15, 0.05], dtype=np.float32)   # draft distribution

P = np.array([0.1, 0.4, 0.05, 0.3, 0.15], dtype=np.float32)     # target distribution

CHI2_4DOF_999 = 18.47  # chi-square, 4 degrees of freedom, p = 0.001

def const_drafter(node, depth, path):
    return Q

def chi2(counts, probs):
    n = counts.sum()
    return float((((counts - n * probs) ** 2) / (n * probs)).sum())

def test_sampled_tree_shape_and_q_rows():
    tree, q = specdec.sampled_tree(const_drafter, 3, widths=[3, 2], vocab_size=V, seed=1)
    assert len(tree.parent) == 1 + 3 + 6 and q.shape == (10, V)
    assert tree.tokens[0] == 3
    np.testing.assert_allclose(q[:4], np.tile(Q / Q.sum(), (4, 1)), rtol=1e-6)
    assert (q[4:] == 0).all()  # leaves
    assert set(tree.child_mode[:4].tolist()) == {int(specdec.DraftMode.IID)}
    # Gumbel-top-k: siblings are distinct.
    tree, q = specdec.sampled_tree(const_drafter, 0, widths=[4, 3], vocab_size=V, seed=2,
                                   mode=specdec.DraftMode.WITHOUT_REPLACEMENT)
    for u in range(len(tree.parent)):
        kids = tree.tokens[tree.parent == u]
        assert len(set(kids.tolist())) == len(kids)
    with pytest.raises(specdec.Error, match="invalid_argument"):
        specdec.sampled_tree(const_drafter, 0, widths=[0], vocab_size=V)
    with pytest.raises(specdec.Error, match="non_finite|negative"):
        specdec.sampled_tree(lambda n, d, p: np.array([np.nan, 1, 1, 1, 1], np.float32), 0, widths=[1],
                             vocab_size=V)

def test_static_full_shape_equals_topk():
    rng = np.random.default_rng(5)
    rows = {}

    def drafter(node, depth, path):
        key = tuple(int(t) for t in path)
        if key not in rows:
            r = rng.random(V).astype(np.float32)
            rows[key] = r / r.sum()
        return rows[key]

    shape = np.array([-1, 0, 0, 1, 1, 2, 2], np.int32)  # full binary, depth 2
    st, _ = specdec.static_tree(drafter, 1, shape, vocab_size=V)
    tk = specdec.topk_tree(drafter, 1, k=2, depth=2, vocab_size=V)

    def paths(t):
        out = set()
        for i in range(len(t.parent)):
            p, j = [], i
            while j >= 0:
                p.append(int(t.tokens[j]))
                j = t.parent[j]
            out.add(tuple(reversed(p)))
        return out

    assert paths(st) == paths(tk)

def first_tokens(mode, verify_mode, trials, widths, wrong_q=False):
    counts = np.zeros(V, np.int64)
    p_rows = None
    for r in range(trials):
        tree, q = specdec.sampled_tree(const_drafter, 0, widths=widths, vocab_size=V, seed=99, round=r, mode=mode)
        if p_rows is None or p_rows.shape[0] != len(tree.parent):
            p_rows = np.tile(P, (len(tree.parent), 1))
        if wrong_q:  # a bug to catch: rows that did not produce the drafts
            q = np.full_like(q, 1.0 / V)
        res = specdec.verify_tree(tree.parent, tree.tokens, p_rows, q, mode=verify_mode, seed=7, round=r)
        counts[res.tokens[0] if res.accepted == 0 else tree.tokens[res.path[1]]] += 1
    return counts

@pytest.mark.parametrize("mode,rule", [(specdec.DraftMode.IID, specdec.Mode.SAMPLED_IID),
                                       (specdec.DraftMode.WITHOUT_REPLACEMENT,
                                        specdec.Mode.SAMPLED_WITHOUT_REPLACEMENT)])
def test_sampled_path_is_exact(mode, rule):
    """The first emitted token of sampled tree + matching verification is
    distributed as P; the same counts against the draft distribution, and a
    run verified with q rows that did not produce the drafts (uniform),
    must fail the same test."""
    counts = first_tokens(mode, rule, 20000, [3, 2])
    good = chi2(counts, P)
    control_q = chi2(counts, Q)
    wrong = chi2(first_tokens(mode, rule, 20000, [3, 2], wrong_q=True), P)
    print(f"chi2 exact {good:.1f}; controls: vs q {control_q:.1f}, wrong q rows {wrong:.1f}")
    assert good < CHI2_4DOF_999
    assert control_q > CHI2_4DOF_999
    assert wrong > CHI2_4DOF_999

def drafter_of(rng, v):
    table = {}

    def drafter(node, depth, path):
        k = tuple(int(t) for t in path)
        if k not in table:
            r = rng.random(v).astype(np.float32)
            r[rng.integers(0, v)] = 0.0  # a token of probability 0 is never drawn
            table[k] = r
        return table[k]
    return drafter

def path_rows(tree, drafter):
    """The drafter row each node was expanded with (from its root path)."""
    out = []
    for u in range(len(tree.parent)):
        path, j = [], u
        while j >= 0:
            path.append(int(tree.tokens[j]))
            j = int(tree.parent[j])
        out.append(np.asarray(drafter(u, len(path) - 1, np.array(path[::-1], np.int32)), np.float64))
    return out

def iid_reference(row, u_row, w):
    cum = np.cumsum(row)
    return [min(int(np.searchsorted(cum, x * cum[-1], side="right")), len(row) - 1) for x in u_row[:w]]

def gumbel_reference(row, u_row, w):
    keys = [(np.log(row[t]) - np.log(-np.log1p(-u_row[t])), -t) for t in range(len(row)) if row[t] > 0]
    return [-t for _, t in sorted(keys, reverse=True)[:w]]

@pytest.mark.parametrize("mode", [specdec.DraftMode.IID, specdec.DraftMode.WITHOUT_REPLACEMENT])
def test_sampled_tree_on_caller_uniforms(rng, mode):
    v, widths = 9, [3, 2, 2]
    for trial in range(10):
        drafter = drafter_of(rng, v)
        nodes = 1 + 3 + 6
        draws = v if mode == specdec.DraftMode.WITHOUT_REPLACEMENT else max(widths)
        key = dict(seed=77 + trial, request=2, round=trial)
        seeded, q = specdec.sampled_tree(drafter, 4, widths=widths, vocab_size=v, mode=mode, **key)
        u = specdec.philox_uniforms(nodes, draws, purpose="draft", **key)
        copy, q2 = specdec.sampled_tree(drafter, 4, widths=widths, vocab_size=v, mode=mode, uniforms=u, **key)
        for a, b in zip(copy, seeded):
            np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(q2, q)
        # Own uniforms: each node's children follow the rule written out in numpy.
        mine = rng.random((nodes, draws))
        t, _ = specdec.sampled_tree(drafter, 4, widths=widths, vocab_size=v, mode=mode, uniforms=mine)
        prow = path_rows(t, drafter)
        depth = np.zeros(len(t.parent), int)
        for i in range(1, len(t.parent)):
            depth[i] = depth[t.parent[i]] + 1
        for u_ in range(len(t.parent)):
            kids = t.tokens[t.parent == u_].tolist()
            if depth[u_] >= len(widths):
                assert kids == []
                continue
            ref = (iid_reference if mode == specdec.DraftMode.IID else gumbel_reference)(
                prow[u_], mine[u_], widths[depth[u_]])
            assert kids == ref, (u_, kids, ref)

def test_static_tree_philox_copy(rng):
    v = 8
    shape, _ = specdec.from_choices([[0], [1], [0, 0], [0, 1], [1, 0], [0, 0, 0]])
    for mode, draws in ((specdec.DraftMode.IID, 2), (specdec.DraftMode.WITHOUT_REPLACEMENT, v)):
        drafter = drafter_of(rng, v)
        key = dict(seed=31, request=1, round=4)
        seeded, q = specdec.static_tree(drafter, 2, shape, vocab_size=v, mode=mode, **key)
        u = specdec.philox_uniforms(len(shape), draws, purpose="draft", **key)
        copy, q2 = specdec.static_tree(drafter, 2, shape, vocab_size=v, mode=mode, uniforms=u)
        for a, b in zip(copy, seeded):
            np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(q2, q)
        # The verification stream is another one: drafting on it gives another tree somewhere.
        trees = [specdec.static_tree(drafter, 2, shape, vocab_size=v, mode=mode, seed=s,
                                     uniforms=specdec.philox_uniforms(len(shape), draws, seed=s))[0].tokens
                 for s in range(8)]
        seeded_trees = [specdec.static_tree(drafter, 2, shape, vocab_size=v, mode=mode, seed=s)[0].tokens
                        for s in range(8)]
        assert any(not np.array_equal(a, b) for a, b in zip(trees, seeded_trees))

def test_bad_drafting_uniforms_raise(rng):
    drafter = drafter_of(rng, 6)
    bad = [
        (np.full((4, 2), 1.0), "invalid_argument"),          # outside [0, 1)
        (np.full((4, 2), -0.5), "invalid_argument"),
        (np.full((4, 2), np.nan), "invalid_argument"),
        (np.full((4, 1), 0.5), "invalid_argument"),          # fewer draws than children
        (np.full((1, 2), 0.5), "invalid_argument"),          # fewer nodes than expanded
        (np.full((2, 4), 0.5)[:, ::2], "invalid_argument"),  # not dense
    ]
    for u, code in bad:
        with pytest.raises(specdec.Error, match=code):
            specdec.sampled_tree(drafter, 0, widths=[2, 1], vocab_size=6, uniforms=u)
    with pytest.raises(specdec.Error, match="invalid_argument"):  # Gumbel needs V draws per node
        specdec.sampled_tree(drafter, 0, widths=[2], vocab_size=6, uniforms=np.full((1, 5), 0.5),
                             mode=specdec.DraftMode.WITHOUT_REPLACEMENT)
    with pytest.raises(specdec.Error, match="invalid_argument"):
        specdec.static_tree(drafter, 0, [-1, 0, 0], vocab_size=6, mode=specdec.DraftMode.IID,
                            uniforms=np.full((1, 2), 1.5))

def round_first_tokens(gen, trials, warp=None):
    """First emitted token of a sampled round whose drafting and
    verification uniforms both come from numpy's generator `gen`; `warp`
    bends the verification uniforms (a negative control)."""
    widths, nodes = [3, 2], 1 + 3 + 6
    p_rows = np.tile(P, (nodes, 1))
    counts = np.zeros(V, np.int64)
    for _ in range(trials):
        tree, q = specdec.sampled_tree(lambda n, d, p: Q, 0, widths=widths, vocab_size=V,
                                       uniforms=gen.random((nodes, 3)))
        uv = gen.random((nodes, 4))
        if warp is not None:
            uv = warp(uv)
        r = specdec.verify_tree(tree.parent, tree.tokens, p_rows, q, mode=specdec.Mode.SAMPLED_IID, uniforms=uv)
        counts[r.tokens[0]] += 1
    return counts

def test_round_on_numpy_uniforms_is_exact():
    gen = np.random.default_rng(4242)
    print("[seed 4242]")
    counts = round_first_tokens(gen, 20000)
    good, vs_q = chi2(counts, P), chi2(counts, Q)
    warped = chi2(round_first_tokens(gen, 20000, warp=lambda u: u ** 2), P)
    print(f"chi2 exact {good:.1f}; controls: vs q {vs_q:.1f}, squared verification uniforms {warped:.1f}")
    assert good < CHI2_4DOF_999
    assert vs_q > CHI2_4DOF_999
    assert warped > CHI2_4DOF_999
