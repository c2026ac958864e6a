"""The engine's own randomness through Python: every sampled entry point
takes caller uniforms in the layout u[node, draw] (C++ caller_uniforms).
Proven here: the keyed Philox stream's values handed back as `uniforms`
reproduce the seeded runs exactly (verify_tree / chain / batch, sampled and
static drafting); drafting from caller uniforms follows the inverse-CDF and
Gumbel-top-k rules written out in numpy; out-of-range or short uniforms
raise; a whole sampled round on numpy's generator is exact by chi-square,
with negative controls that must fail."""
import numpy as np
import pytest

import specdec
from conftest import random_tree

SAMPLED = [specdec.Mode.SAMPLED_IID, specdec.Mode.SAMPLED_WITHOUT_REPLACEMENT]


def rows(rng, n, v):
    r = rng.random((n, v)).astype(np.float32) + 0.05
    return r / r.sum(axis=1, keepdims=True)


def random_case(rng, n, v):
    parent = random_tree(rng, n)
    tokens = rng.integers(0, v, size=n).astype(np.int32)
    # Siblings distinct, so the without-replacement rule applies as well.
    for u in range(n):
        kids = np.flatnonzero(parent == u)
        tokens[kids] = rng.permutation(v)[:len(kids)]
    return parent, tokens, rows(rng, n, v), rows(rng, n, v)


def max_children(parent):
    return int(np.bincount(parent[1:], minlength=len(parent)).max(initial=0)) if len(parent) > 1 else 0


def same(a, b):
    assert (a.accepted, a.last_node, a.next_token) == (b.accepted, b.last_node, b.next_token)
    np.testing.assert_array_equal(a.path, b.path)
    np.testing.assert_array_equal(a.tokens, b.tokens)


@pytest.mark.parametrize("mode", SAMPLED)
def test_philox_copy_reproduces_seeded_verify_tree(rng, mode):
    differs = 0
    for trial in range(60):
        n, v = int(rng.integers(1, 14)), 16
        parent, tokens, p, q = random_case(rng, n, v)
        key = dict(seed=int(rng.integers(0, 2**63)), request=trial % 5, round=trial)
        seeded = specdec.verify_tree(parent, tokens, p, q, mode=mode, **key)
        u = specdec.philox_uniforms(n, 1 + max_children(parent), **key)
        same(specdec.verify_tree(parent, tokens, p, q, mode=mode, uniforms=u), seeded)
        other = specdec.verify_tree(parent, tokens, p, q, mode=mode, uniforms=rng.random(u.shape))
        differs += (other.accepted, other.next_token) != (seeded.accepted, seeded.next_token)
    assert differs > 0  # the uniforms are read, not ignored


def test_philox_copy_reproduces_seeded_chain_and_batch(rng):
    v = 16
    for trial in range(30):
        g = int(rng.integers(0, 6))
        drafts = rng.integers(0, v, size=g).astype(np.int32)
        p, q = rows(rng, g + 1, v), rows(rng, g + 1, v)
        key = dict(seed=1234 + trial, request=3, round=trial)
        seeded = specdec.verify_chain(drafts, p, q, **key)
        same(specdec.verify_chain(drafts, p, q, uniforms=specdec.philox_uniforms(g + 1, 2, **key)), seeded)
    # Batch: request r's rows of the uniforms are its own Philox table.
    sizes = [1, 5, 9, 3]
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int32)
    cases = [random_case(rng, n, v) for n in sizes]
    parent, tokens, p, q = (np.concatenate([c[i] for c in cases]) for i in range(4))
    draws = 1 + max(max_children(c[0]) for c in cases)
    for mode in SAMPLED:
        kw = dict(modes=int(mode), seeds=[5, 6, 7, 8], requests=[0, 1, 2, 3], rounds=11)
        pa, to, res = specdec.verify_batch(offsets, parent, tokens, p, q, **kw)
        u = np.concatenate([specdec.philox_uniforms(n, draws, seed=5 + r, request=r, round=11)
                            for r, n in enumerate(sizes)])
        pa2, to2, res2 = specdec.verify_batch(offsets, parent, tokens, p, q, uniforms=u, **kw)
        np.testing.assert_array_equal(res2, res)
        for r in range(len(sizes)):  # rows past accepted + 1 are not written
            k = res[r, 0] + 1
            np.testing.assert_array_equal(pa2[r, :k], pa[r, :k])
            np.testing.assert_array_equal(to2[r, :k], to[r, :k])
        assert (res[:, 3] == 0).all()


def test_philox_uniforms_values():
    """Verify draws: draw 0 the 53-bit uniform, the rest 24-bit floats; the
    draft purpose is another stream; both in [0, 1) and deterministic."""
    a = specdec.philox_uniforms(50, 4, seed=9, request=1, round=2)
    b = specdec.philox_uniforms(50, 4, seed=9, request=1, round=2, purpose="draft")
    assert ((a >= 0) & (a < 1)).all() and ((b >= 0) & (b < 1)).all()
    np.testing.assert_array_equal(a, specdec.philox_uniforms(50, 4, seed=9, request=1, round=2))
    assert not np.isin(a, b).any()
    np.testing.assert_array_equal(a[:, 1:], a[:, 1:].astype(np.float32))  # 24-bit draws are floats
    assert (a[:, 0] != a[:, 0].astype(np.float32)).any()  # draw 0 carries 53 bits
    assert not np.array_equal(a, specdec.philox_uniforms(50, 4, seed=9, request=2, round=2))
    # In place into the caller's array.
    out = np.zeros((50, 4))
    assert specdec.philox_uniforms(50, 4, seed=9, request=1, round=2, out=out) is out
    np.testing.assert_array_equal(out, a)
    with pytest.raises(specdec.Error, match="size_mismatch"):
        specdec.philox_uniforms(50, 4, out=np.zeros((4, 50)))
    with pytest.raises(specdec.Error, match="invalid_argument"):
        specdec.philox_uniforms(5, 4, purpose="other")


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


V = 5
Q = np.array([0.35, 0.25, 0.2, 0.15, 0.05], dtype=np.float32)
P = np.array([0.1, 0.4, 0.05, 0.3, 0.15], dtype=np.float32)
CHI2_4DOF_999 = 18.47  # chi-square, 4 degrees of freedom, p = 0.001


def chi2(counts, probs):
    n = counts.sum()
    return float((((counts - n * probs) ** 2) / (n * probs)).sum())


def first_tokens(gen, trials, warp=None):
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
    counts = first_tokens(gen, 20000)
    good, vs_q = chi2(counts, P), chi2(counts, Q)
    warped = chi2(first_tokens(gen, 20000, warp=lambda u: u ** 2), P)
    print(f"chi2 exact {good:.1f}; controls: vs q {vs_q:.1f}, squared verification uniforms {warped:.1f}")
    assert good < CHI2_4DOF_999
    assert vs_q > CHI2_4DOF_999
    assert warped > CHI2_4DOF_999
