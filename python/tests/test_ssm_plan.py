"""SSM tree scan and state commit against the per-path Mamba2 recurrence in
numpy; drafting builders, pruning and planners against plain references."""
import itertools
import math

import numpy as np
import pytest

import specdec
from conftest import random_tree


def softplus(v):
    return np.log1p(np.exp(-np.abs(v))) + np.maximum(v, 0)


def ref_scan(parent, x, dt, A, B, C, D, dt_bias, z, h0):
    """Runs h <- exp(dt' A) h + dt' x B^T, y = C.h + D x along each node's
    own root path (float64)."""
    N, H, P = x.shape
    G, S = B.shape[1], B.shape[2]
    y = np.zeros((N, H, P))
    states = np.zeros((N, H, P, S))
    for i in range(N):
        path, j = [], i
        while j >= 0:
            path.append(j)
            j = parent[j]
        h = h0.astype(np.float64).copy()
        for j in reversed(path):
            d = softplus(dt[j] + dt_bias)
            for hh in range(H):
                g = hh // (H // G)
                h[hh] = np.exp(d[hh] * A[hh]) * h[hh] + d[hh] * np.outer(x[j, hh], B[j, g])
        states[i] = h
        for hh in range(H):
            g = hh // (H // G)
            y[i, hh] = h[hh] @ C[i, g] + D[hh] * x[i, hh]
        y[i] *= z[i] / (1 + np.exp(-z[i]))
    return y, states


def ssm_inputs(rng, N, H=4, P=3, G=2, S=5, dtype=np.float64):
    r = lambda *s: rng.standard_normal(s).astype(dtype)  # noqa: E731
    return dict(x=r(N, H, P), dt=r(N, H), A=-np.abs(r(H)) - 0.1, B=r(N, G, S), C=r(N, G, S), D=r(H, P),
                dt_bias=r(H) * 0.1, z=r(N, H, P), h0=r(H, P, S))


@pytest.mark.parametrize("method", ["automatic", "recurrent", "dual"])
@pytest.mark.parametrize("dtype,tol", [(np.float64, 1e-10), (np.float32, 2e-4)])
def test_tree_scan_matches_path_recurrence(rng, method, dtype, tol):
    parent = random_tree(rng, 13)
    a = ssm_inputs(rng, 13, dtype=dtype)
    want_y, want_states = ref_scan(parent, **{k: v.astype(np.float64) for k, v in a.items()})
    y = np.zeros((13, 4, 3), dtype=dtype)
    got = specdec.tree_scan(parent, a["x"], a["dt"], a["A"], a["B"], a["C"], D=a["D"], dt_bias=a["dt_bias"], z=a["z"],
                            h0=a["h0"], y=y, method=method)
    assert got is y
    np.testing.assert_allclose(y, want_y, rtol=tol, atol=tol)
    if method != "dual":
        states = np.zeros((13, 4, 3, 5), dtype=dtype)
        specdec.tree_scan(parent, a["x"], a["dt"], a["A"], a["B"], a["C"], D=a["D"], dt_bias=a["dt_bias"],
                          z=a["z"], h0=a["h0"], states=states, method=method)
        np.testing.assert_allclose(states, want_states, rtol=tol, atol=tol)
        # state commit of the path to the last node == that node's state; in place into h0
        path = [12]
        while parent[path[-1]] >= 0:
            path.append(int(parent[path[-1]]))
        h = a["h0"].copy()
        specdec.ssm_commit_path(parent, a["x"], a["dt"], a["A"], a["B"], a["C"], np.array(path[::-1]),
                                dt_bias=a["dt_bias"], h0=h, out=h)
        np.testing.assert_allclose(h, want_states[12], rtol=tol, atol=tol)
        # activation replay from the node's packed mask row gives the same state
        for node in range(13):
            row = specdec.packed_mask(parent)[node]
            hr = specdec.ssm_replay_masked(parent, a["x"], a["dt"], a["A"], a["B"], a["C"], row,
                                           dt_bias=a["dt_bias"], h0=a["h0"])
            np.testing.assert_allclose(hr, want_states[node], rtol=tol, atol=tol)


def test_ssm_errors_write_nothing(rng):
    parent = random_tree(rng, 5)
    a = ssm_inputs(rng, 5)
    y = np.full((5, 4, 3), 3.0)
    bad = a["dt"].copy()
    bad[2, 1] = np.nan
    with pytest.raises(specdec.Error, match="non_finite"):
        specdec.tree_scan(parent, a["x"], bad, a["A"], a["B"], a["C"], y=y)
    with pytest.raises(specdec.Error, match="size_mismatch"):
        specdec.tree_scan(parent, a["x"], a["dt"], a["A"][:3], a["B"], a["C"], y=y)
    with pytest.raises(specdec.Error, match="states"):
        specdec.tree_scan(parent, a["x"], a["dt"], a["A"], a["B"], a["C"], y=y, states=np.zeros((5, 4, 3, 5)),
                          method="dual")
    assert (y == 3.0).all()
    h = np.full((4, 3, 5), 2.0)
    with pytest.raises(specdec.Error):
        specdec.ssm_commit_path(parent, a["x"], a["dt"], a["A"], a["B"], a["C"], np.array([1]), out=h)
    assert (h == 2.0).all()
    # a mask that is not a root path (node 0 clear) is refused, h untouched
    with pytest.raises(specdec.Error, match="invalid_argument"):
        specdec.ssm_replay_masked(parent, a["x"], a["dt"], a["A"], a["B"], a["C"], np.array([0b10], np.uint64),
                                  out=h)
    assert (h == 2.0).all()


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
