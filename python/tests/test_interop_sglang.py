"""Peer formats and planning models through Python: SGLang linked lists
both ways against a plain DFS, greedy-from-ids against Mode.GREEDY,
Medusa / EAGLE-1 choice buffers against their definitions, Medusa's
typical selection against the rule written out in numpy, expected accepted
length against brute force, acceptance counting against manual counts,
SpecMemo's memory model against its equations.

The peers' batch entry points that have CUDA twins, host side through
Python: SGLang's EAGLE tree builder against the rules written out in numpy
(all three mask modes), specdec's walk on SGLang's linked lists against
verify_tree on the converted tree (caller uniforms and Philox keyed by
slot), FlashInfer's batched chain counters against the per-chain call.
Per-request failures: raise without request_status, land in it (outputs of
that request untouched, the others written) with it."""
import numpy as np
import pytest

import specdec
from conftest import random_tree


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

def eagle_case(rng, B, topk, depth, n):
    """parent_list, selected_index (ancestor-closed, sorted) and
    verified_seq_len of B requests, as EAGLE's draft steps produce them."""
    blocks = topk * (depth - 1) + 1
    pl = np.zeros((B, blocks), np.int64)
    sel = np.zeros((B, n - 1), np.int64)
    for b in range(B):
        pl[b, 0] = -1
        prev = list(range(topk))  # candidates of the previous step
        for step in range(1, depth):
            cur = []
            for j in range(topk):
                k = 1 + (step - 1) * topk + j
                pl[b, k] = rng.choice(prev)
                cur.extend(range(k * topk, (k + 1) * topk))
            prev = cur
        chosen = set()
        while len(chosen) < n - 1:
            f = int(rng.integers(0, blocks * topk))
            blk = f // topk
            if f not in chosen and (blk == 0 or int(pl[b, blk]) in chosen):
                chosen.add(f)
        sel[b] = sorted(chosen)
    return pl, sel, rng.integers(0, 7, size=B).astype(np.int64)

def build_reference(pl, sel, seq_len, topk, n, mode):
    B = len(seq_len)
    pos = np.zeros(B * n, np.int64)
    ri = np.arange(B * n, dtype=np.int64)
    nt = np.full(B * n, -1, np.int64)
    ns = np.full(B * n, -1, np.int64)
    row = {"full_mask": None, "qlen_only": n, "qlen_only_bitpacking": 4 if n > 16 else 2 if n > 8 else 1}[mode]
    total = n * n * B + n * int(seq_len.sum()) if mode == "full_mask" else B * n * row
    mask = np.zeros(total, np.uint8)
    base = 0
    for b in range(B):
        parent = [-1] + [0 if f // topk == 0 else 1 + list(sel[b]).index(pl[b, f // topk]) for f in sel[b]]
        depth = [0] * n
        for s in range(1, n):
            depth[s] = depth[parent[s]] + 1
        for s in range(n):
            pos[b * n + s] = seq_len[b] + depth[s]
            kids = [c for c in range(1, n) if parent[c] == s]
            if kids:
                nt[b * n + s] = kids[0]
            for a, c in zip(kids, kids[1:]):
                ns[b * n + a] = c
            anc, u = [], s
            while u >= 0:
                anc.append(u)
                u = parent[u]
            if mode == "full_mask":
                width = int(seq_len[b]) + n
                r0 = base + s * width
                mask[r0:r0 + seq_len[b]] = 1
                mask[[r0 + int(seq_len[b]) + t for t in anc]] = 1
            elif mode == "qlen_only":
                mask[[(b * n + s) * n + t for t in anc]] = 1
            else:
                bits = sum(1 << t for t in anc)
                for k in range(row):
                    mask[(b * n + s) * row + k] = (bits >> (8 * k)) & 0xFF
        if mode == "full_mask":
            base += n * (int(seq_len[b]) + n)
    return mask, pos, ri, nt, ns

@pytest.mark.parametrize("mode", ["full_mask", "qlen_only", "qlen_only_bitpacking"])
def test_sglang_build_tree_matches_reference(rng, mode):
    for topk, depth, n in ((1, 1, 1), (2, 3, 5), (4, 4, 12), (8, 5, 20)):
        B = 5
        pl, sel, sl = eagle_case(rng, B, topk, depth, n)
        got = specdec.sglang_build_tree(pl, sel, sl, topk=topk, depth=depth, draft_token_num=n, mode=mode)
        want = build_reference(pl, sel, sl, topk, n, mode)
        assert got[0].dtype == (np.uint8 if mode == "qlen_only_bitpacking" else np.bool_)
        np.testing.assert_array_equal(got[0].view(np.uint8), want[0])
        for g, w in zip(got[1:5], want[1:]):
            np.testing.assert_array_equal(g, w)
        assert got[5] is None
        # The linked lists verify like SGLang's own greedy kernel reads them.
        specdec.tree_from_linked_list(np.zeros(n, np.int64), got[3][:n], got[4][:n])

def test_sglang_build_tree_errors_per_request(rng):
    topk, depth, n, B = 2, 3, 5, 4
    pl, sel, sl = eagle_case(rng, B, topk, depth, n)
    bad = sel.copy()
    deep = [f for f in range(topk, topk * (topk * (depth - 1) + 1)) if f not in set(sel[2].tolist())
            and int(pl[2, f // topk]) not in set(sel[2].tolist())]
    bad[2, -1] = deep[0]  # its parent candidate is not selected
    with pytest.raises(specdec.Error, match="invalid_argument.*index 2"):
        specdec.sglang_build_tree(pl, bad, sl, topk=topk, depth=depth, draft_token_num=n, mode="qlen_only")
    outs = [np.full(B * n, -5, np.int64) for _ in range(4)]
    mask = np.zeros(B * n * n, np.bool_)
    st = np.full(B, 99, np.int32)
    specdec.sglang_build_tree(pl, bad, sl, topk=topk, depth=depth, draft_token_num=n, mode="qlen_only",
                              tree_mask=mask, positions=outs[0], retrive_index=outs[1], retrive_next_token=outs[2],
                              retrive_next_sibling=outs[3], request_status=st)
    assert st[2] != 0 and (np.delete(st, 2) == 0).all()
    want = build_reference(pl, sel, sl, topk, n, "qlen_only")
    for o, w in zip(outs, want[1:]):
        assert (o[2 * n:3 * n] == -5).all()  # the failing request: untouched
        np.testing.assert_array_equal(np.delete(o, range(2 * n, 3 * n)), np.delete(w, range(2 * n, 3 * n)))
    oob = sel.copy()
    oob[0, 0] = topk * (topk * (depth - 1) + 1)
    with pytest.raises(specdec.Error, match="out_of_range"):
        specdec.sglang_build_tree(pl, oob, sl, topk=topk, depth=depth, draft_token_num=n)
    # A short mask in the modes whose size is known from the arguments raises
    # before any request is written.
    packed_row = 1 if n <= 8 else 2 if n <= 16 else 4
    for mode, mask in (("qlen_only", np.zeros(B * n * n - 1, np.bool_)),
                       ("qlen_only_bitpacking", np.zeros(B * n * packed_row - 1, np.uint8))):
        outs = [np.full(B * n, -5, np.int64) for _ in range(4)]
        with pytest.raises(specdec.Error, match="buffer_too_small"):
            specdec.sglang_build_tree(pl, sel, sl, topk=topk, depth=depth, draft_token_num=n, mode=mode,
                                      tree_mask=mask, positions=outs[0], retrive_index=outs[1],
                                      retrive_next_token=outs[2], retrive_next_sibling=outs[3])
        assert all((o == -5).all() for o in outs) and not mask.any()
    with pytest.raises(specdec.Error, match="size_mismatch"):
        specdec.sglang_build_tree(pl[:, :-1], sel, sl, topk=topk, depth=depth, draft_token_num=n)
    with pytest.raises(specdec.Error, match="unsupported"):
        specdec.sglang_build_tree(np.zeros((1, 1), np.int64), np.zeros((1, 32), np.int64), [0], topk=40, depth=1,
                                  draft_token_num=33, mode="qlen_only_bitpacking")

def rows_of(rng, m, v):
    r = rng.random((m, v)).astype(np.float32) + 0.02
    return r / r.sum(axis=1, keepdims=True)

@pytest.mark.parametrize("mode", [specdec.Mode.SAMPLED_IID, specdec.Mode.SAMPLED_WITHOUT_REPLACEMENT,
                                  specdec.Mode.GREEDY, specdec.Mode.DETERMINISTIC])
def test_sglang_verify_tree_equals_verify_tree(rng, mode):
    B, n, V = 12, 8, 6
    cand, ri, nt, ns = sglang_batch(rng, B, n, V)
    p, q = rows_of(rng, B * n, V), rows_of(rng, B * n, V)
    u = rng.random((B * n, n + 1))
    apd = np.zeros(n, np.int64)
    pred, acc, num, st = specdec.sglang_verify_tree(cand, ri, nt, ns, p, q, num_speculative_tokens=n, modes=int(mode),
                                                    uniforms=u, accepted_per_depth=apd)
    assert st is None
    want_pred = np.zeros(B * n, np.int32)
    want_acc = np.full((B, n), -1, np.int32)
    for b in range(B):
        parent, tokens, _, n2o = specdec.tree_from_linked_list(cand[b], nt[b], ns[b], unused_root=True)
        slots = b * n + n2o
        r = specdec.verify_tree(parent, tokens, p[slots], q[slots], mode=mode, uniforms=u[slots])
        _, k, _ = specdec.write_sglang_results(r.path, r.tokens, r.accepted, node_slot=n2o, slot_row=ri[b],
                                               accept_index=want_acc[b], predicts=want_pred)
        assert num[b] == k
    np.testing.assert_array_equal(acc, want_acc)
    np.testing.assert_array_equal(pred, want_pred)
    np.testing.assert_array_equal(apd, specdec.count_acceptance_per_depth(num, np.zeros(n, np.int64)))
    # Philox keys are keyed by slot: the stream's values handed back as uniforms give the same outputs.
    seeds = rng.integers(0, 2**40, size=B).astype(np.uint64)
    keyed = specdec.sglang_verify_tree(cand, ri, nt, ns, p, q, num_speculative_tokens=n, modes=int(mode),
                                       seeds=seeds, rounds=4)
    table = np.concatenate([specdec.philox_uniforms(n, n + 1, seed=int(seeds[b]), request=b, round=4)
                            for b in range(B)])
    copied = specdec.sglang_verify_tree(cand, ri, nt, ns, p, q, num_speculative_tokens=n, modes=int(mode),
                                        uniforms=table)
    for a, c in zip(keyed[:3], copied[:3]):
        np.testing.assert_array_equal(a, c)

def test_sglang_verify_tree_greedy_agrees_with_sglang_greedy(rng):
    B, n, V = 20, 9, 5
    cand, ri, nt, ns = sglang_batch(rng, B, n, V)
    logits = rng.standard_normal((B * n, V)).astype(np.float32)
    # Make drafts match often: the argmax of each row is the first child's token.
    for b in range(B):
        for s in range(n):
            c = nt[b, s]
            if c >= 0:
                logits[b * n + s, cand[b, c]] += 4
    argmax = logits.argmax(axis=1).astype(np.int64)
    pred, acc, num = specdec.sglang_verify_tree_greedy(cand, ri, nt, ns, argmax, n)
    pred2, acc2, num2, _ = specdec.sglang_verify_tree(cand, ri, nt, ns, logits, num_speculative_tokens=n,
                                                      modes=specdec.Mode.GREEDY)
    np.testing.assert_array_equal(num2, num)
    np.testing.assert_array_equal(acc2, acc)
    np.testing.assert_array_equal(pred2, pred)
    assert num.max() >= 2

def test_sglang_verify_tree_errors_per_request(rng):
    B, n, V = 4, 6, 5
    cand, ri, nt, ns = sglang_batch(rng, B, n, V)
    p = rows_of(rng, B * n, V)
    bad = nt.copy()
    bad[1, 0] = 0  # the root links to itself
    with pytest.raises(specdec.Error, match="index 1"):
        specdec.sglang_verify_tree(cand, ri, bad, ns, p, num_speculative_tokens=n, modes=specdec.Mode.GREEDY)
    pred = np.full(B * n, -3, np.int32)
    acc = np.full((B, n), -3, np.int32)
    num = np.full(B, -3, np.int32)
    st = np.full(B, 99, np.int32)
    specdec.sglang_verify_tree(cand, ri, bad, ns, p, num_speculative_tokens=n, modes=specdec.Mode.GREEDY,
                               predicts=pred, accept_index=acc, accept_token_num=num, request_status=st)
    assert st[1] != 0 and (np.delete(st, 1) == 0).all()
    assert num[1] == -3 and (acc[1] == -3).all() and (pred[n:2 * n] == -3).all()
    assert (np.delete(num, 1) >= 0).all()
    # Whole-call errors raise and write nothing.
    for kw, code in [(dict(uniforms=np.full((B * n - 1, 3), 0.5)), "size_mismatch"),
                     (dict(modes=[0, 0, 0]), "size_mismatch"),
                     (dict(p=p[:-1]), "size_mismatch"),
                     (dict(modes=specdec.Mode.BLOCK, request_status=np.zeros(B, np.int32)), None)]:
        pred[:] = -3
        args = dict(num_speculative_tokens=n, modes=specdec.Mode.SAMPLED_IID, predicts=pred)
        args.update(kw)
        pp = args.pop("p", p)
        if code is None:  # block verification is refused per request
            st = args["request_status"]
            specdec.sglang_verify_tree(cand, ri, nt, ns, pp, pp, **args)
            assert (st == int(specdec_code("unsupported"))).all()
        else:
            with pytest.raises(specdec.Error, match=code):
                specdec.sglang_verify_tree(cand, ri, nt, ns, pp, pp, **args)
        assert (pred == -3).all()

def specdec_code(name):
    return next(i for i in range(64) if specdec._core.status_code_name(i) == name)

def test_chain_acceptance_counts_batch(rng):
    B, g, V = 30, 5, 7
    target = rows_of(rng, B * (g + 1), V).reshape(B, g + 1, V)
    draft = rows_of(rng, B * g, V).reshape(B, g, V)
    drafts = np.array([[rng.choice(V, p=draft[b, i] / draft[b, i].sum()) for i in range(g)] for b in range(B)],
                      np.int32)
    coins = rng.random((B, g + 1)).astype(np.float32)  # FlashInfer's uniform_samples: gamma + 1 per request
    acc, emi, st = specdec.chain_acceptance_counts_batch(drafts, target, draft, coins)
    assert st is None
    for b in range(B):
        assert (acc[b], emi[b]) == specdec.chain_acceptance_counts(drafts[b], target[b], draft[b], coins[b, :g])
    # Strided rows (a transposed view) are read in place.
    tview = np.ascontiguousarray(target.transpose(1, 0, 2)).transpose(1, 0, 2)
    acc2, emi2, _ = specdec.chain_acceptance_counts_batch(drafts, tview, draft, coins)
    np.testing.assert_array_equal(acc2, acc)
    np.testing.assert_array_equal(emi2, emi)
    bad = drafts.copy()
    bad[3, 2] = V
    with pytest.raises(specdec.Error, match="token_out_of_range.*index 3"):
        specdec.chain_acceptance_counts_batch(bad, target, draft, coins)
    a = np.full(B, -1, np.int32)
    e = np.full(B, -1, np.int32)
    st = np.zeros(B, np.int32)
    specdec.chain_acceptance_counts_batch(bad, target, draft, coins, accepted_num=a, emitted_num=e,
                                          request_status=st)
    assert st[3] == specdec_code("token_out_of_range") and (np.delete(st, 3) == 0).all()
    assert a[3] == -1 and e[3] == -1
    np.testing.assert_array_equal(np.delete(a, 3), np.delete(acc, 3))
    with pytest.raises(specdec.Error, match="size_mismatch"):
        specdec.chain_acceptance_counts_batch(drafts, target, draft, coins[:, :g - 1])
    # Fewer rows per request than drafts: the whole call raises, nothing written.
    for t, d in ((target[:, :g - 1], draft), (target, draft[:, :g - 1])):
        st = np.full(B, 77, np.int32)
        with pytest.raises(specdec.Error, match="size_mismatch"):
            specdec.chain_acceptance_counts_batch(drafts, t, d, coins, accepted_num=a, emitted_num=e,
                                                  request_status=st)
        assert (st == 77).all()

def test_sglang_greedy_and_sampling_request_status_on_host(rng):
    """SGLang's two original entry points stop at the first failing request;
    with request_status they go on request by request: the same outputs as
    the clean batch for the good requests, the bad one untouched, and the
    per-depth counters of the verified requests."""
    B, n, V, spec = 8, 7, 5, 7
    cand, ri, nt, ns = sglang_batch(rng, B, n, V)
    target_predict = rng.integers(0, V, size=B * n).astype(np.int64)
    probs = rows_of(rng, B * n, V)
    coins = rng.random(B * n).astype(np.float32)
    final = rng.random(B).astype(np.float32)
    bad = nt.copy()
    bad[[2, 5], 0] = n  # a link out of range in requests 2 and 5
    for name, extra in (("greedy", (target_predict,)), ("sampling", (probs, coins, final))):
        f = (specdec.sglang_verify_tree_greedy if name == "greedy" else specdec.sglang_tree_sampling_target_only)
        clean = f(cand, ri, nt, ns, *extra, spec)
        with pytest.raises(specdec.Error, match="index 2"):
            f(cand, ri, bad, ns, *extra, spec)
        pred = np.full(B * n, -4, np.int32)
        acc = np.full((B, spec), -1, np.int32)
        num = np.full(B, -4, np.int32)
        st = np.full(B, 99, np.int32)
        apd = np.zeros(spec, np.int64)
        f(cand, ri, bad, ns, *extra, spec, predicts=pred, accept_index=acc, accept_token_num=num,
          request_status=st, accepted_per_depth=apd)
        good = np.array([b not in (2, 5) for b in range(B)])
        assert (st[good] == 0).all() and (st[~good] != 0).all()
        np.testing.assert_array_equal(num[good], clean[2][good])
        np.testing.assert_array_equal(acc[good], clean[1][good])
        assert (num[~good] == -4).all() and (acc[~good] == -1).all()
        rows = ri[good].reshape(-1)
        np.testing.assert_array_equal(pred[rows][pred[rows] != -4], clean[0][rows][pred[rows] != -4])
        assert (pred[ri[~good].reshape(-1)] == -4).all()
        np.testing.assert_array_equal(apd, specdec.count_acceptance_per_depth(clean[2][good],
                                                                              np.zeros(spec, np.int64)))
        with pytest.raises(specdec.Error, match="size_mismatch"):  # whole-call errors still raise
            f(cand[:, :-1], ri, nt, ns, *extra, spec, request_status=st)
