"""Verification through Python: every mode against a plain numpy walk on the
caller's uniforms, Philox results against the C++ program, chain == tree,
batched == one by one, errors, and chi-square exactness with a negative
control.

The engine's own randomness through Python: every sampled entry point
takes caller uniforms in the layout u[node, draw] (C++ caller_uniforms).
Proven here: the keyed Philox stream's values handed back as `uniforms`
reproduce the seeded runs exactly (verify_tree / chain / batch, sampled and
static drafting); drafting from caller uniforms follows the inverse-CDF and
Gumbel-top-k rules written out in numpy; out-of-range or short uniforms
raise; a whole sampled round on numpy's generator is exact by chi-square,
with negative controls that must fail."""
import math

import numpy as np
import pytest

import specdec
from conftest import data_ptr, needs_torch, random_tree


M = specdec.Mode

def children(parent):
    kids = [[] for _ in parent]
    for i in range(1, len(parent)):
        kids[parent[i]].append(i)
    return kids

def sample(row, target):
    c = np.cumsum(row.astype(np.float64))
    hit = np.nonzero(target < c)[0]
    return int(hit[0]) if len(hit) else int(np.argmax(row))

def ref_verify(parent, tokens, p, q, mode, U):
    """The verification rules written plainly in float64 (docs/verify.md)."""
    kids = children(parent)
    u, path = 0, [0]
    while True:
        ks = kids[u]
        if mode in (M.GREEDY, M.NAIVE_MATCHING):
            y = int(np.argmax(p[u])) if mode == M.GREEDY else sample(p[u], U[u, 0] * p[u].astype(np.float64).sum())
            hit = next((c for c in ks if tokens[c] == y), None)
            if hit is None:
                return path, y
            path.append(hit)
            u = hit
            continue
        if not ks:
            return path, sample(p[u], U[u, 0] * p[u].astype(np.float64).sum())
        pu = p[u].astype(np.float64)
        accepted = None
        if mode == M.DETERMINISTIC:
            mass, seen = pu.sum(), set()
            for j, c in enumerate(ks):
                x = tokens[c]
                rx = 0.0 if x in seen else pu[x]
                seen.add(x)
                if rx > 0 and U[u, 1 + j] * mass < rx:
                    accepted = c
                    break
                mass -= rx
            if accepted is None:
                r = pu.copy()
                r[[tokens[c] for c in ks]] = 0
                return path, sample(r, U[u, 0] * r.sum())
        else:  # sampled_iid
            qu = q[u].astype(np.float64)
            r, mass = pu, 1.0
            for j, c in enumerate(ks):
                x = tokens[c]
                if qu[x] > 0 and r[x] > 0 and U[u, 1 + j] * qu[x] * mass < r[x]:
                    accepted = c
                    break
                r = np.maximum(r - qu * mass, 0.0) if j else np.maximum(pu - qu, 0.0)
                mass = r.sum()
            if accepted is None:
                return path, sample(r, U[u, 0] * mass) if mass > 0 else int(np.argmax(pu))
        path.append(accepted)
        u = accepted

def random_case(rng, n, V, peaked=True):
    parent = random_tree(rng, n)
    # Peaked rows so that drafts are accepted often and walks go deep.
    p = rng.dirichlet(np.full(V, 0.3 if peaked else 1.0), size=n).astype(np.float32)
    q = (0.5 * p + 0.5 * rng.dirichlet(np.full(V, 0.3), size=n)).astype(np.float32)
    tokens = np.array([int(rng.choice(V, p=q[parent[i]] / q[parent[i]].sum())) if i else 0 for i in range(n)],
                      dtype=np.int32)
    return parent, tokens, p, q

@pytest.mark.parametrize("mode", [M.SAMPLED_IID, M.DETERMINISTIC, M.GREEDY, M.NAIVE_MATCHING])
def test_modes_match_numpy_reference_on_caller_uniforms(rng, mode):
    deep = 0
    for _ in range(150):
        n, V = int(rng.integers(1, 12)), int(rng.integers(2, 9))
        parent, tokens, p, q = random_case(rng, n, V)
        U = rng.random((n, 1 + n))
        r = specdec.verify_tree(parent, tokens, p, q, mode=mode, uniforms=U)
        path, nxt = ref_verify(parent, tokens, p, q, mode, U)
        assert list(r.path) == path and r.next_token == nxt, (parent, tokens, U)
        assert r.accepted == len(path) - 1 and r.last_node == path[-1]
        assert list(r.tokens) == [int(tokens[c]) for c in path[1:]] + [nxt]
        deep += r.accepted >= 2
    assert deep > 0  # the walks did go past the first level

@pytest.mark.parametrize("mode", list(M))
def test_philox_results_match_cpp(rng, cpp_ref, mode):
    cases, text = [], ""
    for k in range(40):
        n, V = int(rng.integers(1, 10)), int(rng.integers(2, 7))
        parent, tokens, p, q = random_case(rng, n, V)
        if mode == M.BLOCK:  # block verification takes chains only
            parent = np.arange(-1, n - 1, dtype=np.int32)
        cases.append((parent, tokens, p, q, k))
        arr = " ".join
        text += (f"verify {n} {V} {int(mode)} {1000 + k} {k} 3 {arr(map(str, parent))} {arr(map(str, tokens))} "
                 f"{arr(repr(float(v)) for v in p.ravel())} {arr(repr(float(v)) for v in q.ravel())}\n")
    lines = cpp_ref(text)
    for i, (parent, tokens, p, q, k) in enumerate(cases):
        head, toks = lines[2 * i], lines[2 * i + 1]
        r = specdec.verify_tree(parent, tokens, p, q, mode=mode, seed=1000 + k, request=k, round=3)
        assert [r.accepted, r.last_node, r.next_token] == [int(v) for v in head]
        assert list(r.tokens) == [int(v) for v in toks]

def test_chain_equals_tree_and_batch_equals_single(rng):
    V, gamma = 6, 5
    for trial in range(30):
        drafts = rng.integers(0, V, gamma).astype(np.int32)
        p = rng.dirichlet(np.full(V, 0.3), size=gamma + 1).astype(np.float32)
        q = rng.dirichlet(np.full(V, 0.3), size=gamma + 1).astype(np.float32)
        c = specdec.verify_chain(drafts, p, q, seed=trial, request=1, round=2)
        parent = np.arange(-1, gamma, dtype=np.int32)
        tokens = np.concatenate([[0], drafts]).astype(np.int32)
        t = specdec.verify_tree(parent, tokens, p, q, seed=trial, request=1, round=2)
        assert (c.accepted, c.next_token) == (t.accepted, t.next_token)
        assert list(c.tokens) == list(t.tokens)
    # a ragged batch with mixed modes equals the requests one by one
    reqs = [random_case(rng, int(rng.integers(1, 9)), 5) for _ in range(12)]
    modes = np.array([list(M)[i % 5] for i in range(12)], dtype=np.int32)
    offsets = np.cumsum([0] + [len(r[0]) for r in reqs]).astype(np.int32)
    cat = [np.concatenate([r[i] for r in reqs]) for i in range(4)]
    apd = np.zeros(8, dtype=np.int64)
    paths, toks, res = specdec.verify_batch(offsets, cat[0], cat[1], cat[2], cat[3], modes=modes, seeds=77,
                                            rounds=4, accepted_per_depth=apd)
    for r, (parent, tokens, p, q) in enumerate(reqs):
        one = specdec.verify_tree(parent, tokens, p, q, mode=int(modes[r]), seed=77, request=r, round=4)
        assert list(res[r]) == [one.accepted, one.last_node, one.next_token, 0]
        assert list(paths[r, :one.accepted + 1]) == list(one.path)
        assert list(toks[r, :one.accepted + 1]) == list(one.tokens)
    for d in range(1, 9):
        assert apd[d - 1] == (res[:, 0] >= d).sum()

def test_bad_inputs_raise_and_leave_outputs_untouched(rng):
    parent, tokens, p, q = random_case(rng, 6, 5)
    path = np.full(6, -7, dtype=np.int32)
    out = np.full(6, -7, dtype=np.int32)
    bad_p = p.copy()
    bad_p[0, 1] = np.nan
    neg = p.copy()
    neg[0, 0] = -0.1
    for kwargs, code in [
        (dict(p=bad_p), "non_finite"),
        (dict(p=neg), "negative_probability"),
        (dict(tokens=np.array([0, 1, 2, 9, 1, 1], dtype=np.int32)), "token_out_of_range"),
        (dict(parent=np.array([-1, 0, 3, 1, 1, 2], dtype=np.int32)), "not_topological|parent_out"),
        (dict(p=p[:4]), "size_mismatch"),
        (dict(q=None), "invalid_argument"),
        (dict(uniforms=np.full((6, 7), 1.0)), "invalid_argument"),
    ]:
        args = dict(parent=parent, tokens=tokens, p=p, q=q)
        args.update(kwargs)
        with pytest.raises(specdec.Error, match=code):
            specdec.verify_tree(args["parent"], args["tokens"], args["p"], args["q"], mode=M.SAMPLED_IID,
                                uniforms=args.get("uniforms"), path=path, tokens_out=out)
        assert (path == -7).all() and (out == -7).all()
    with pytest.raises(specdec.Error, match="buffer_too_small"):
        specdec.verify_tree(parent, tokens, p, q, path=path[:0], tokens_out=out[:0])
    # batch: a bad request fails alone; the others are verified
    offsets = np.array([0, 6, 12], dtype=np.int32)
    pp = np.concatenate([p, bad_p])
    paths = np.full((2, 6), -3, dtype=np.int32)
    _, _, res = specdec.verify_batch(offsets, np.concatenate([parent, parent]), np.concatenate([tokens, tokens]),
                                     pp, np.concatenate([q, q]), modes=M.SAMPLED_IID, paths=paths)
    assert res[0, 3] == 0 and res[1, 3] == 12  # ok, non_finite
    assert (paths[1] == -3).all()

def test_outputs_are_the_callers_memory(rng):
    parent, tokens, p, q = random_case(rng, 8, 5)
    path = np.zeros(8, dtype=np.int32)
    out = np.zeros(8, dtype=np.int32)
    r = specdec.verify_tree(parent, tokens, p, q, path=path, tokens_out=out)
    assert data_ptr(r.path) == data_ptr(path) and data_ptr(r.tokens) == data_ptr(out)
    # strided p (a column slice of a wider buffer) is read in place
    wide = np.zeros((8, 10), dtype=np.float32)
    wide[:, :5] = p
    r2 = specdec.verify_tree(parent, tokens, wide[:, :5], q, seed=0)
    r1 = specdec.verify_tree(parent, tokens, p, q, seed=0)
    assert list(r1.tokens) == list(r2.tokens)

@needs_torch
def test_torch_tensors(rng):
    import torch
    parent, tokens, p, q = random_case(rng, 8, 5)
    tp, tq = torch.from_dlpack(p), torch.from_dlpack(q)
    path = torch.zeros(8, dtype=torch.int32)
    toks = torch.zeros(8, dtype=torch.int32)
    ptr = path.data_ptr()
    r = specdec.verify_tree(torch.from_dlpack(parent), torch.from_dlpack(tokens), tp, tq, seed=5, path=path,
                            tokens_out=toks)
    ref = specdec.verify_tree(parent, tokens, p, q, seed=5)
    assert path.data_ptr() == ptr and r.path.data_ptr() == ptr
    assert r.tokens.tolist() == list(ref.tokens)

P = np.array([0.5, 0.3, 0.2], dtype=np.float32)

Q = np.array([0.2, 0.3, 0.5], dtype=np.float32)

def chi_square_first_token(rng, trials, resort_by_q, mode=M.SAMPLED_IID):
    """First emitted token of a root with two i.i.d. children drafted from Q,
    verified by SAMPLED_IID through verify_batch. With resort_by_q the caller
    reorders the children by q before verifying (a known bias)."""
    counts = np.zeros(3, dtype=np.int64)
    per = 200_000
    done = 0
    child_p = np.array([0.1, 0.6, 0.3], dtype=np.float32)  # p at the children (bonus rows)
    while done < trials:
        R = min(per, trials - done)
        kids = rng.choice(3, size=(R, 2), p=Q.astype(np.float64))
        if resort_by_q:
            swap = Q[kids[:, 0]] < Q[kids[:, 1]]
            kids[swap] = kids[swap][:, ::-1]
        tokens = np.zeros((R, 3), dtype=np.int32)
        tokens[:, 1:] = kids
        parent = np.tile(np.array([-1, 0, 0], dtype=np.int32), R)
        p = np.tile(np.stack([P, child_p, child_p]), (R, 1))
        q = np.tile(np.stack([Q, Q, Q]), (R, 1))
        offsets = np.arange(0, 3 * R + 1, 3, dtype=np.int32)
        _, toks, res = specdec.verify_batch(offsets, parent, tokens.ravel(), p, q, modes=mode,
                                            seeds=int(rng.integers(1 << 62)), rounds=0)
        assert (res[:, 3] == 0).all()
        counts += np.bincount(toks[:, 0], minlength=3)
        done += R
    expected = P.astype(np.float64) * trials
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    return chi2, counts / trials

def test_sampled_modes_are_exact_chi_square_with_negative_control(rng):
    # df = 2: P(chi2 > x) = exp(-x / 2); reject at 1e-6 -> x > 27.6.
    crit = -2.0 * math.log(1e-6)
    for mode in (M.SAMPLED_IID, M.TRAVERSAL):
        chi2, freq = chi_square_first_token(rng, 1_000_000, resort_by_q=False, mode=mode)
        print(f"{mode.name}: chi2={chi2:.2f} freq={freq}")
        assert chi2 < crit
    chi2_bad, freq_bad = chi_square_first_token(rng, 1_000_000, resort_by_q=True)
    print(f"re-sorted by q (control): chi2={chi2_bad:.2f} freq={freq_bad}")
    assert chi2_bad > crit  # the test can tell a biased verifier from an exact one
    np.testing.assert_allclose(freq_bad, [0.49, 0.21, 0.30], atol=0.005)

SAMPLED = [specdec.Mode.SAMPLED_IID, specdec.Mode.SAMPLED_WITHOUT_REPLACEMENT]

def rows(rng, n, v):
    r = rng.random((n, v)).astype(np.float32) + 0.05
    return r / r.sum(axis=1, keepdims=True)

def uniforms_case(rng, n, v):
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
        parent, tokens, p, q = uniforms_case(rng, n, v)
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
    cases = [uniforms_case(rng, n, v) for n in sizes]
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


def test_float16_rows_verify_as_their_float32_widening(rng):
    """float16 rows are read in place and give, bit for bit, the results of
    the same rows widened to float32 (every mode: a ragged batch, chains,
    strided rows)."""
    reqs = [random_case(rng, int(rng.integers(1, 9)), 300) for _ in range(10)]
    offsets = np.cumsum([0] + [len(r[0]) for r in reqs]).astype(np.int32)
    parent, tokens = (np.concatenate([r[i] for r in reqs]) for i in range(2))
    p16, q16 = (np.concatenate([r[i] for r in reqs]).astype(np.float16) for i in (2, 3))
    for mode in list(M):
        kw = dict(modes=int(mode), seeds=11, rounds=2, normalization_tolerance=0.05)
        if mode == M.BLOCK:
            continue  # chains only (covered by verify_chain below)
        pa, ta, ra = specdec.verify_batch(offsets, parent, tokens, p16, q16, **kw)
        pb, tb, rb = specdec.verify_batch(offsets, parent, tokens, p16.astype(np.float32), q16.astype(np.float32),
                                          **kw)
        np.testing.assert_array_equal(ra, rb)
        assert (ra[:, 3] == 0).sum() > len(reqs) // 2
        for r in range(len(reqs)):  # rows past the accepted path are left as allocated
            k = ra[r, 0] + 1
            np.testing.assert_array_equal(pa[r, :k], pb[r, :k])
            np.testing.assert_array_equal(ta[r, :k], tb[r, :k])
    drafts = rng.integers(0, 300, 6).astype(np.int32)
    p = rng.dirichlet(np.full(300, 0.3), size=7).astype(np.float16)
    q = rng.dirichlet(np.full(300, 0.3), size=7).astype(np.float16)
    for mode in (M.SAMPLED_IID, M.BLOCK, M.GREEDY):
        c16 = specdec.verify_chain(drafts, p, q, mode=int(mode), seed=3, normalization_tolerance=0.05)
        c32 = specdec.verify_chain(drafts, p.astype(np.float32), q.astype(np.float32), mode=int(mode), seed=3,
                                   normalization_tolerance=0.05)
        assert (c16.accepted, c16.next_token, list(c16.tokens)) == (c32.accepted, c32.next_token, list(c32.tokens))
    # Strided float16 rows (every other column of a wider array).
    wide = np.zeros((7, 600), dtype=np.float16)
    wide[:, ::2] = p
    s = specdec.verify_chain(drafts, wide[:, ::2], q, seed=3, normalization_tolerance=0.05)
    c = specdec.verify_chain(drafts, p.astype(np.float32), q.astype(np.float32), seed=3, normalization_tolerance=0.05)
    assert (s.accepted, s.next_token) == (c.accepted, c.next_token)


@needs_torch
def test_bfloat16_torch_rows(rng):
    import torch
    parent, tokens, p, q = random_case(rng, 8, 500)
    pb, qb = torch.from_numpy(p).to(torch.bfloat16), torch.from_numpy(q).to(torch.bfloat16)
    for mode in (M.SAMPLED_IID, M.TRAVERSAL, M.GREEDY):
        r = specdec.verify_tree(torch.from_numpy(parent), torch.from_numpy(tokens), pb, qb, mode=int(mode), seed=9,
                                normalization_tolerance=0.05)
        w = specdec.verify_tree(parent, tokens, pb.float().numpy(), qb.float().numpy(), mode=int(mode), seed=9,
                                normalization_tolerance=0.05)
        assert (r.accepted, r.next_token) == (w.accepted, w.next_token)


def test_sampling_table_records():
    t = specdec.sampling_table([0.5, 0.0, 2.0], top_k=7, top_p=[1.0, 0.9, 0.5], min_p=0.05)
    assert t.shape == (3, 4) and t.dtype == np.int32
    assert list(t[:, 0].view(np.float32)) == [0.5, 0.0, 2.0]
    assert list(t[:, 1]) == [7, 7, 7]
    assert list(t[:, 2].view(np.float32)) == [1.0, np.float32(0.9), 0.5]
    assert specdec.sampling_table(1.0, requests=4).shape == (4, 4)
    with pytest.raises(specdec.Error, match="size_mismatch"):
        specdec.sampling_table([1.0, 1.0], top_k=[1, 2, 3])
    with pytest.raises(specdec.Error, match="invalid_argument"):
        specdec.sampling_table(1.0, top_k=2.5)


def test_verify_batch_logits_rows_one_hot_and_top2_law(rng):
    """Logits rows through the sampling transform: greedy (T = 0) and top_k = 1
    rows are one-hot at the argmax, so every mode gives the tokens of
    explicit one-hot probability rows; with top_k = 2 a root-only request
    emits only the two best tokens, at their softmax odds."""
    V = 40
    sizes = [1, 3, 6, 2, 9, 5]
    parents, offsets = [], [0]
    for n in sizes:
        parents.append(random_tree(rng, n))
        offsets.append(offsets[-1] + n)
    parent = np.concatenate(parents).astype(np.int32)
    offsets = np.array(offsets, dtype=np.int32)
    N, R = len(parent), len(sizes)
    logits = rng.normal(0, 2, (N, V)).astype(np.float32)
    logits[:, 3] = -np.inf
    qlog = rng.normal(0, 2, (N, V)).astype(np.float32)
    tokens = rng.integers(0, V, N).astype(np.int32)
    for i in range(N):  # a child often carries its parent's argmax
        r = int(np.searchsorted(offsets, i, "right")) - 1
        if parent[i] >= 0 and rng.random() < 0.6:
            tokens[i] = int(np.argmax(logits[offsets[r] + parent[i]]))
    one_hot = np.zeros_like(logits)
    one_hot[np.arange(N), np.argmax(logits, axis=1)] = 1.0
    q_hot = np.zeros_like(qlog)
    q_hot[np.arange(N), np.argmax(qlog, axis=1)] = 1.0
    samp = specdec.sampling_table([0.0, 0.7, 1.3, 0.0, 2.0, 1.0], top_k=[0, 1, 1, 5, 1, 1])
    dsamp = specdec.sampling_table(1.0, top_k=1, requests=R)
    for mode in [specdec.Mode.SAMPLED_IID, specdec.Mode.SAMPLED_WITHOUT_REPLACEMENT, specdec.Mode.DETERMINISTIC,
                 specdec.Mode.GREEDY, specdec.Mode.TRAVERSAL]:
        L = max(sizes)
        out = [np.full((R, L), -3, np.int32) for _ in range(4)]
        got = specdec.verify_batch(offsets, parent, tokens, logits, qlog, modes=int(mode), seeds=5,
                                   sampling=samp, draft_sampling=dsamp, paths=out[0], tokens_out=out[1])
        want = specdec.verify_batch(offsets, parent, tokens, one_hot, q_hot, modes=int(mode), seeds=5,
                                    paths=out[2], tokens_out=out[3])
        assert (want[2][:, 3] == 0).all()
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)
    # top_k = 2 on a root-only request: the two best tokens at their softmax odds.
    row = np.array([[1.0, 2.5, -1.0, 2.0, 0.0]], dtype=np.float32)
    counts = np.zeros(5, dtype=np.int64)
    trials = 4000
    for s in range(trials):
        _, toks, res = specdec.verify_batch(np.array([0, 1], np.int32), np.array([-1], np.int32),
                                            np.array([0], np.int32), row, seeds=s,
                                            modes=int(specdec.Mode.DETERMINISTIC),
                                            sampling=specdec.sampling_table(1.0, top_k=2))
        assert res[0, 3] == 0
        counts[toks[0, 0]] += 1
    assert counts[0] == counts[2] == counts[4] == 0
    want = 1.0 / (1.0 + math.exp(-0.5))  # P(token 1) among {1, 3}
    assert abs(counts[1] / trials - want) < 4 * math.sqrt(want * (1 - want) / trials)


def test_verify_batch_logits_rows_bad_settings():
    offsets = np.array([0, 2, 4], dtype=np.int32)
    parent = np.array([-1, 0, -1, 0], dtype=np.int32)
    tokens = np.array([0, 1, 0, 2], dtype=np.int32)
    logits = np.zeros((4, 5), dtype=np.float32)
    bad = specdec.sampling_table([1.0, 1.0], top_p=[1.0, 0.0])  # request 1: top_p outside (0, 1]
    _, _, res = specdec.verify_batch(offsets, parent, tokens, logits, modes=int(specdec.Mode.GREEDY), sampling=bad)
    assert res[0, 3] == 0
    assert specdec._core.status_code_name(int(res[1, 3])) == "invalid_argument"
    with pytest.raises(specdec.Error, match="size_mismatch"):
        specdec.verify_batch(offsets, parent, tokens, logits, sampling=specdec.sampling_table(1.0, requests=3))
    with pytest.raises(specdec.Error, match="invalid_argument"):
        specdec.verify_batch(offsets, parent, tokens, logits, sampling=np.zeros((2, 4), np.float32))
