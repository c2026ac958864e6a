"""The round planner from Python: decisions under injected costs, errors, and
an engine-style loop feeding its own times."""
import numpy as np
import pytest

import specdec


def simulate_path(shape, rng, p0=0.8):
    path = [0]
    while True:
        kids = [i for i in range(1, len(shape)) if shape[i] == path[-1]]
        if not kids or rng.random() >= p0:
            return path
        path.append(kids[0])

def test_flat_cost_speculates_and_linear_cost_does_not():
    rng = np.random.default_rng(1)
    flat = specdec.RoundPlanner(max_nodes=16, max_depth=6)
    flat.set_target_cost([1, 64], [1.0, 1.0])
    flat.set_drafter_cost(0.0, 0.01, 0.0)
    flat.set_loop_cost(0.0, 0.0)
    steep = specdec.RoundPlanner(max_nodes=16, max_depth=6)
    steep.set_target_cost([1, 64], [1.0, 64.0])
    steep.set_drafter_cost(0.1, 0.2, 0.05)
    steep.set_loop_cost(0.0, 0.0)
    for p in (flat, steep):
        for _ in range(50):
            plan = p.next()
            assert plan.shape[0] == -1 and len(plan.shape) == plan.nodes
            path = simulate_path(plan.shape, rng)
            p.observe(plan.shape, path, plan.nodes, p.target_seconds(plan.nodes))
    assert flat.next().nodes >= 4
    assert steep.next().kind == "autoregressive"
    assert flat.rounds == 50
    # The flat curve's gain is large but finite: a bar far above it keeps plain steps.
    picky = specdec.RoundPlanner(max_nodes=16, max_depth=6, min_gain=10.0)
    picky.set_target_cost([1, 64], [1.0, 1.0])
    picky.set_drafter_cost(0.0, 0.01, 0.0)
    picky.set_loop_cost(0.0, 0.0)
    for _ in range(20):
        plan = picky.next()
        picky.observe(plan.shape, simulate_path(plan.shape, rng), plan.nodes, 1.0)
    assert picky.next().kind == "autoregressive"

def test_errors_and_fixed_plan():
    with pytest.raises(specdec.Error, match="invalid_argument"):
        specdec.RoundPlanner(max_nodes=0)
    with pytest.raises(specdec.Error, match="invalid_argument"):
        specdec.RoundPlanner(min_gain=-0.1)
    with pytest.raises(specdec.Error, match="invalid_argument"):
        specdec.RoundPlanner(cost_quantile=1.5)
    with pytest.raises(specdec.Error, match="invalid_argument"):
        specdec.RoundPlanner(probe_budget=-0.5)
    specdec.RoundPlanner(probe_budget=1e9)  # probes at every gap
    specdec.RoundPlanner(cost_quantile=0.25)  # the lower quartile
    p = specdec.RoundPlanner()
    with pytest.raises(specdec.Error):
        p.set_target_cost([2, 1], [1.0, 1.0])
    with pytest.raises(specdec.Error):
        p.observe([-1, 0], [0, 0], 2, 1e-3)  # path not parent-linked
    p.fix_plan([-1, 0, 0])
    plan = p.next()
    assert plan.kind == "fixed" and list(plan.shape) == [-1, 0, 0]

def test_measured_times_drive_the_plan():
    # An engine reporting its own times: a pass costs 1 ms + 0.5 ms per node.
    p = specdec.RoundPlanner(max_nodes=8, max_depth=4)
    rng = np.random.default_rng(2)
    for _ in range(60):
        plan = p.next()
        path = simulate_path(plan.shape, rng, p0=0.9)
        p.observe(plan.shape, path, plan.nodes, 1e-3 + 5e-4 * plan.nodes, drafter_calls=plan.depth,
                  drafted_nodes=max(plan.nodes - 1, 0), drafter_seconds=1e-4 * plan.depth, other_seconds=1e-5)
    assert p.target_seconds(4) == pytest.approx(3e-3, rel=1e-6)  # linear times: interpolation is exact
    assert p.next().nodes > 1  # 90% acceptance pays for a chain at this cost


def test_tokens_left_bounds_the_depth():
    # Every draft accepted, nearly flat passes: deep chains pay, but not
    # deeper than the tokens the request may still emit.
    p = specdec.RoundPlanner(max_nodes=16, max_depth=8)
    p.set_target_cost([1.0, 16.0], [1.0, 1.5])
    p.set_drafter_cost(0.0, 0.01, 0.0)
    p.set_loop_cost(0.0, 0.0)
    rng = np.random.default_rng(3)
    for _ in range(40):
        plan = p.next()
        p.observe(plan.shape, simulate_path(plan.shape, rng, p0=1.0), plan.nodes, 1.0)
    assert p.next().depth >= 6
    plan = p.next()
    p.observe(plan.shape, simulate_path(plan.shape, rng, p0=1.0), plan.nodes, 1.0, tokens_left=3)
    assert p.next().depth <= 2


def test_observe_skipped_learns_while_decoding_plainly():
    # Each round drafts the next 6 tokens of a text that follows the drafts
    # (95% per token) at q = 0.5: plain steps that report the skipped draft
    # teach the planner to speculate; without reports (control) the prior
    # never pays.
    parent = np.arange(-1, 6, dtype=np.int32)
    q = np.full(7, 0.5, dtype=np.float32)
    q[0] = 1.0
    rng = np.random.default_rng(5)
    nodes = {}
    for report in (True, False):
        p = specdec.RoundPlanner(max_nodes=16, probe_every=0, draft_bonus=0.0)
        p.set_target_cost([1.0, 16.0], [1.0, 11.5])
        p.set_loop_cost(0.0, 0.0)
        for pos in range(60):
            plan = p.plan_drafted(parent, q)
            if plan.nodes > 1:
                break
            p.observe(plan.shape, [0], 1, 1.0)
            tokens = np.arange(pos, pos + 7, dtype=np.int32)  # root = the newest text token
            emitted = pos + 1 if rng.random() < 0.95 else -7
            if report:
                p.observe_skipped(parent, q, tokens, emitted)
        nodes[report] = plan.nodes
    assert nodes[True] > 1 and nodes[False] == 1
    with pytest.raises(specdec.Error, match="size_mismatch"):
        p.observe_skipped(parent, q, np.arange(3, dtype=np.int32), 0)


def test_plan_drafted_follows_the_draft_confidence():
    # A chain of 6 deterministic drafts per round, confident (q = 0.95, each
    # accepted with 0.95) or weak (q = 0.15); passes cost 1 + 0.7 (n - 1).
    p = specdec.RoundPlanner(max_nodes=16, probe_every=0)
    p.set_target_cost([1.0, 16.0], [1.0, 11.5])
    p.set_loop_cost(0.0, 0.0)
    rng = np.random.default_rng(11)
    parent = np.arange(-1, 6, dtype=np.int32)
    chosen = {True: [], False: []}
    for i in range(600):
        strong = bool(rng.random() < 0.5)
        q = np.full(7, 0.95 if strong else 0.15, dtype=np.float32)
        q[0] = 1.0
        plan = p.plan_drafted(parent, q)
        assert (plan.shape == parent[:plan.nodes]).all()  # a prefix of the draft
        path = [0]
        while len(path) < plan.nodes and rng.random() < q[1]:
            path.append(path[-1] + 1)
        p.observe(plan.shape, path, plan.nodes, 1.0 + 0.7 * (plan.nodes - 1), draft_prob=q[:plan.nodes])
        if i >= 150:
            chosen[strong].append(plan.nodes)
    assert np.mean(np.array(chosen[True]) > 1) > 0.9
    assert np.mean(np.array(chosen[False]) == 1) > 0.9
    with pytest.raises(specdec.Error, match="size_mismatch"):
        p.plan_drafted(parent, q[:3])


def test_accept_prob_counts_in_place_of_the_indicator():
    # Chains of one draft, always accepted, whose chance was 0.4: the
    # estimate follows the chance, not the lucky indicators.
    p = specdec.RoundPlanner(max_nodes=4, max_depth=2)
    for _ in range(200):
        p.observe([-1, 0], [0, 1], 2, 1e-3, accept_prob=[-1.0, 0.4])
    assert p.acceptance(1, 0) == pytest.approx(0.4, abs=0.03)
    with pytest.raises(specdec.Error, match="size_mismatch"):
        p.observe([-1, 0], [0, 1], 2, 1e-3, accept_prob=[0.4])


def test_confidence_stop_past_the_planned_depth():
    p = specdec.RoundPlanner(max_nodes=16, prior_accept=0.9, draft_bonus=0.0)
    p.set_target_cost([1, 16], [1.0, 1.6])
    p.set_drafter_cost(0.01, 0.02, 0.0)
    p.set_loop_cost(0.0, 0.0)
    depth = p.next().depth
    assert depth >= 1
    p.start_draft()
    for d in range(1, depth + 1):
        assert p.expand_node(d - 1, d - 1, 0.0)
        assert p.keep_child(d - 1, d, 1.0)
    assert p.expand_node(depth, depth, 1.0)
    assert not p.expand_node(depth, depth, 0.0)
    assert not p.keep_child(depth, depth + 1, 0.0)
    assert p.keep_child(depth, depth + 1, 1.0)
    # Sampled drafts: every child kept and recorded, every level below the
    # root priced, planned or not.
    p.start_draft(sampled=True)
    assert p.expand_node(0, 0, 0.0)
    p.note_child(0, 1, 0.0)
    assert not p.expand_node(1, 1, 0.0)
    p.start_draft(True)
    for d in range(1, depth + 1):
        p.note_child(d - 1, d, 1.0)
        assert p.expand_node(d, d, 1.0)
    off = specdec.RoundPlanner(confidence_stop=False)
    off.next()
    off.start_draft()
    assert off.keep_child(0, 1, 0.0)
    assert off.expand_node(1, 5, 0.0)
    with pytest.raises(specdec.Error, match="invalid_argument"):
        specdec.RoundPlanner(stop_extend=-1)
