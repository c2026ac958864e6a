#!/usr/bin/env python3
"""Exact-rational check of block and traversal verification (docs/verify.md).

Enumerates every drafted tree of small random models (Fractions, no
rounding), computes each verifier's exact output law on each tree, completes
the emitted tokens with the target and compares with the target law of
whole sequences. Checks: traversal (and the paper's block rule on chains)
is exactly lossless; block == traversal draft by draft on chains; the
expected accepted length is never below token-wise verification; the
two-token example of Sun et al. gives 10/9 (token-wise) and 11/9 (block).
Independent of the C++ code (tests/verify/test_traversal.cpp has the same
checks in double precision). Usage: python3 scripts/verify_enumerate.py
"""

import sys
from fractions import Fraction as F
import itertools, random


def rnd_row(V, rng, zeros=True):
    x = [0 if (zeros and rng.random() < 0.25) else F(rng.randint(1, 20)) for _ in range(V)]
    if sum(x) == 0:
        x[rng.randrange(V)] = F(1)
    s = sum(x)
    return [v / s for v in x]


class Model:
    def __init__(self, V, seed, const=None):
        self.V = V
        self.rng = random.Random(seed)
        self.P = {}
        self.Q = {}
        self.const = const

    def p(self, ctx):
        if self.const:
            return self.const[0]
        if ctx not in self.P:
            self.P[ctx] = rnd_row(self.V, self.rng)
        return self.P[ctx]

    def q(self, ctx):
        if self.const:
            return self.const[1]
        if ctx not in self.Q:
            self.Q[ctx] = rnd_row(self.V, self.rng) if self.rng.random() > 0.2 else list(self.p(ctx))
        return self.Q[ctx]


# tree: list of nodes (parent, token, ctx); children in id order
def draft_trees(m, widths, kind):
    """yield (prob, nodes) for every draft outcome"""

    def expand(level_nodes, nodes, prob, d):
        if d == len(widths):
            yield prob, nodes
            return
        k = widths[d]
        # choose children for each node at this level
        per = []
        for u in level_nodes:
            q = m.q(nodes[u][2])
            opts = []
            if kind == "iid":
                for xs in itertools.product(range(m.V), repeat=k):
                    pr = F(1)
                    for x in xs:
                        pr *= q[x]
                    if pr > 0:
                        opts.append((pr, xs))
            elif kind == "wor":
                supp = [x for x in range(m.V) if q[x] > 0]
                for xs in itertools.permutations(supp, min(k, len(supp))):
                    pr = F(1)
                    rem = F(1)
                    for x in xs:
                        if rem == 0 or q[x] == 0:
                            pr = 0
                            break
                        pr *= q[x] / rem
                        rem -= q[x]
                    if pr > 0:
                        opts.append((pr, xs))
            else:
                ids = sorted(range(m.V), key=lambda i: (-q[i], i))[:k]
                opts.append((F(1), tuple(ids)))
            per.append(opts)
        for combo in itertools.product(*per):
            nn = list(nodes)
            pr = prob
            nxt = []
            for u, (po, xs) in zip(level_nodes, combo):
                pr *= po
                for x in xs:
                    nn.append((u, x, nodes[u][2] + (x,)))
                    nxt.append(len(nn) - 1)
            yield from expand(nxt, nn, pr, d + 1)

    yield from expand([0], [(-1, None, ())], F(1), 0)


def children(nodes, u):
    return [c for c in range(len(nodes)) if nodes[c][0] == u]


def qj_of(m, nodes, u, j, kind, cs):
    q = m.q(nodes[u][2])
    V = m.V
    if kind == "iid":
        return list(q)
    if kind == "det":
        x = nodes[cs[j]][1]
        return [F(1) if i == x else F(0) for i in range(V)]
    rej = set(nodes[c][1] for c in cs[:j])
    Z = sum(q[x] for x in rej)
    return [F(0) if i in rej else q[i] / (1 - Z) for i in range(V)]


def traversal(m, nodes, kind, weighted=True):
    """exact law of emitted tuples for a fixed draft tree"""

    def proc(u, meas, j):
        cs = children(nodes, u)
        if j == len(cs):
            return {(y,): meas[y] for y in range(m.V) if meas[y] > 0}
        c = cs[j]
        x = nodes[c][1]
        qj = qj_of(m, nodes, u, j, kind, cs)
        w = min(F(1), meas[x] / qj[x]) if qj[x] > 0 else F(0)
        out = {}
        if w > 0:
            sub = proc(c, [w * v for v in m.p(nodes[c][2])], 0)
            for o, pr in sub.items():
                out[(x,) + o] = out.get((x,) + o, 0) + pr
        acc = sum(out.values())
        rej = 1 - acc
        M = sum(meas)
        r = [max(a - b, F(0)) for a, b in zip(meas, qj)]
        S = sum(r)
        rho = 1 - M + S
        if rej > 0 and rho > 0:
            rest = proc(u, [v / rho for v in r], j + 1)
            for o, pr in rest.items():
                out[o] = out.get(o, 0) + rej * pr
        return out

    return proc(0, list(m.p(())), 0)


def block_chain(m, nodes):
    """paper's Algorithm 2 analytically; nodes is a chain"""
    g = len(nodes) - 1
    w = [F(1)]
    h = [F(1)]
    for i in range(1, g + 1):
        ctx = nodes[i - 1][2]
        x = nodes[i][1]
        p = m.p(ctx)[x]
        q = m.q(ctx)[x]
        w.append(min(F(1), w[-1] * p / q) if q > 0 else F(0))
        if i < g:
            pp = m.p(nodes[i][2])
            qq = m.q(nodes[i][2])
            S = sum(max(w[i] * a - b, F(0)) for a, b in zip(pp, qq))
            h.append(S / (S + 1 - w[i]) if S > 0 else F(0))
        else:
            h.append(w[g])
    out = {}
    for tau in range(g + 1):
        pt = h[tau]
        for j in range(tau + 1, g + 1):
            pt *= 1 - h[j]
        if pt == 0:
            continue
        pre = tuple(nodes[i][1] for i in range(1, tau + 1))
        if tau == g:
            res = list(m.p(nodes[g][2]))
        else:
            res = [max(w[tau] * a - b, F(0)) for a, b in zip(m.p(nodes[tau][2]), m.q(nodes[tau][2]))]
        s = sum(res)
        for y in range(m.V):
            if res[y] > 0:
                out[pre + (y,)] = out.get(pre + (y,), 0) + pt * res[y] / s
    return out


def tokenwise(m, nodes, kind):
    """MSS / RRS / det one-hot, root-first"""
    out = {}

    def walk(u, prob, pre):
        cs = children(nodes, u)
        P = list(m.p(nodes[u][2]))
        q = m.q(nodes[u][2])
        if not cs:
            for y in range(m.V):
                if P[y] > 0:
                    out[pre + (y,)] = out.get(pre + (y,), 0) + prob * P[y]
            return
        for j, c in enumerate(cs):
            x = nodes[c][1]
            qj = qj_of(m, nodes, u, j, kind, cs)
            a = min(F(1), P[x] / qj[x]) if qj[x] > 0 else F(0)
            if a > 0:
                walk(c, prob * a, pre + (x,))
            prob *= 1 - a
            if prob == 0:
                return
            r = [max(s - t, F(0)) for s, t in zip(P, qj)]
            S = sum(r)
            P = [v / S for v in r]
        for y in range(m.V):
            if P[y] > 0:
                out[pre + (y,)] = out.get(pre + (y,), 0) + prob * P[y]

    walk(0, F(1), ())
    return out


def check(m, widths, kind, verifier):
    L = len(widths) + 1
    law = {}
    acc = F(0)
    for pr, nodes in draft_trees(m, widths, kind):
        o = verifier(m, nodes)
        assert sum(o.values()) == 1, sum(o.values())
        for seq, po in o.items():
            acc += pr * po * (len(seq) - 1)

            # complete with target
            def comp(seq, prob):
                if len(seq) == L:
                    law[seq] = law.get(seq, 0) + prob
                    return
                p = m.p(seq)
                for y in range(m.V):
                    if p[y] > 0:
                        comp(seq + (y,), prob * p[y])

            comp(seq, pr * po)
    # target law
    err = F(0)
    tgt = {}

    def tg(seq, prob):
        if len(seq) == L:
            tgt[seq] = prob
            return
        p = m.p(seq)
        for y in range(m.V):
            if p[y] > 0:
                tg(seq + (y,), prob * p[y])

    tg((), F(1))
    keys = set(tgt) | set(law)
    err = max(abs(tgt.get(k, 0) - law.get(k, 0)) for k in keys)
    return err, acc


def main():
    bad = 0
    m = Model(2, 0, const=([F(1, 3), F(2, 3)], [F(2, 3), F(1, 3)]))
    e1, a1 = check(m, [1, 1], "iid", lambda m, n: tokenwise(m, n, "iid"))
    e2, a2 = check(m, [1, 1], "iid", block_chain)
    e3, a3 = check(m, [1, 1], "iid", lambda m, n: traversal(m, n, "iid"))
    print(f"paper example: token-wise {a1}, block {a2}, traversal {a3}")
    bad += not (a1 == F(10, 9) and a2 == a3 == F(11, 9) and e1 == e2 == e3 == 0)
    shapes = [
        (3, [1, 1, 1], "iid"),
        (2, [1, 1, 1, 1], "iid"),
        (3, [2, 1], "iid"),
        (3, [2, 2], "iid"),
        (2, [3, 1], "iid"),
        (4, [2], "iid"),
        (3, [2, 1], "wor"),
        (4, [3, 1], "wor"),
        (3, [2, 2], "det"),
        (4, [3, 1], "det"),
        (3, [1, 1], "det"),
    ]
    for seed in range(6):
        for V, widths, kind in shapes:
            m = Model(V, seed * 100 + V)
            e1, a1 = check(m, widths, kind, lambda m, n: tokenwise(m, n, kind))
            e2, a2 = check(m, widths, kind, lambda m, n: traversal(m, n, kind))
            ok = e1 == 0 and e2 == 0 and a2 >= a1
            if all(w == 1 for w in widths) and kind == "iid":
                e3, a3 = check(m, widths, kind, block_chain)
                ok = ok and e3 == 0 and a3 == a2
                for pr, nodes in draft_trees(m, widths, kind):
                    ok = ok and block_chain(m, nodes) == traversal(m, nodes, kind)
            print(
                f"seed {seed} V={V} widths={widths} {kind}: exact={e1 == 0 and e2 == 0} "
                f'accepted token-wise {float(a1):.4f} traversal {float(a2):.4f} {"OK" if ok else "FAIL"}'
            )
            bad += not ok
    print("all exact" if bad == 0 else f"{bad} FAILED")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
