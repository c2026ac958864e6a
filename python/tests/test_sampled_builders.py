"""Sampled and static-shape builders through Python: shapes and q rows,
agreement with the top-k builder on a full shape, and exactness of the
whole Python path (sampled tree -> sampled verification) by chi-square over
many rounds, with negative controls that must fail."""
import numpy as np
import pytest

import specdec

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
