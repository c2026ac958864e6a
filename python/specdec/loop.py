"""The round planner (include/specdec/loop/planner.hpp)."""
from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from . import _core


class Plan(NamedTuple):
    """One round's plan from :class:`RoundPlanner` (loop/planner.hpp)."""

    shape: np.ndarray  #: parent array of the tree to draft (int32, root -1)
    min_path_probability: np.ndarray  #: per depth: do not expand a node whose draft path probability is below
    kind: str  #: "autoregressive", "chain", "widths", "optimal", "fixed" or "drafted"
    nodes: int  #: planned nodes, root included
    depth: int  #: planned depth
    expected_tokens: float  #: predicted tokens of the round (accepted drafts + 1)
    predicted_seconds: float  #: predicted round time (0 before the planner has any pass time)


def _plan(t: tuple) -> Plan:
    shape, thr, kind, nodes, depth, tokens, seconds = t
    return Plan(np.asarray(shape, dtype=np.int32), np.asarray(thr, dtype=np.float64), kind, nodes, depth, tokens,
                seconds)


class RoundPlanner:
    """Sizes every speculative round from measured cost and acceptance.

    An engine with its own loop calls :meth:`next` before drafting (draft the
    returned shape; a one-node shape is a plain decoding step) and
    :meth:`observe` after verification with its own step times, e.g. from
    ``torch.cuda.Event`` timers. Options are those of ``planner_options``
    (max_nodes, max_depth, max_children, forget, prior_weight, prior_accept,
    replan_every, cost_window, cost_quantile, explore, prior_node_cost, probe_every, probe_budget,
    rescore_every, prune, confidence_stop, stop_extend, plain_first, min_gain, draft_bonus,
    expected_acceptance). Lossless:
    the plan never depends on the round's target rows (docs/loop.md).
    """

    def __init__(self, **options: Any) -> None:
        self._p = _core.RoundPlanner(**options)

    def next(self) -> Plan:
        """The plan of the next round."""
        return _plan(self._p.next())

    def start_draft(self, sampled: bool = False) -> None:
        """Before drafting a round of the current plan with the confidence
        stop: deterministically (:meth:`keep_child`, :meth:`expand_node`)
        or, with `sampled`, by sampling (:meth:`note_child`,
        :meth:`expand_node`)."""
        self._p.start_draft(sampled)

    def keep_child(self, parent: int, depth: int, q: float) -> bool:
        """While drafting the current plan deterministically, children in
        the order they are added (a kept child's id is the number of nodes
        kept before it): whether the child drafted with confidence `q` under
        node `parent`, at `depth`, is worth verifying. Past the planned depth
        a child is kept only while its path's calibrated chance of acceptance
        pays for one more node (the confidence stop, docs/loop.md); a chain
        may be drafted up to ``stop_extend`` levels past its plan this way."""
        return self._p.keep_child(parent, depth, q)

    def note_child(self, parent: int, depth: int, q: float) -> None:
        """While drafting the current plan by sampling, children in the
        order they are drawn: records the child drawn with confidence `q`
        under node `parent`, at `depth`, for :meth:`expand_node`. A sampled
        child is always kept: refusing it for its own token would bias the
        drafts that verification corrects."""
        self._p.note_child(parent, depth, q)

    def expand_node(self, node: int, depth: int, q: float) -> bool:
        """While drafting the current plan, before a level's drafter call:
        whether node `node` at `depth`, drafted with confidence `q` (1 for
        the root), is worth drafting children for: while the path's reach
        times its child's calibrated chance at `q` pays for the level's
        drafter call and one node, so that a level the confidence stop
        would refuse is not drafted at all. Deterministic drafts are always
        expanded within the planned depth; sampled ones are priced at every
        depth below the root."""
        return self._p.expand_node(node, depth, q)

    def plan_drafted(self, parent: Any, draft_prob: Any) -> Plan:
        """The plan of a round drafted before planning, with deterministic
        drafts that cost next to nothing (prompt lookup, a suffix index): a
        prefix of the drafted tree (`parent`, topological, root first;
        `draft_prob` = q_parent of each node, 1 for the root), sized by the
        drafter's confidences as past rounds calibrated them. A one-node
        shape is a plain step. Sampled drafts are planned with :meth:`next`
        before drafting (docs/loop.md)."""
        return _plan(self._p.plan_drafted(np.ascontiguousarray(parent, dtype=np.int32),
                                          np.ascontiguousarray(draft_prob, dtype=np.float32)))

    def observe_skipped(self, parent: Any, draft_prob: Any, tokens: Any, emitted: int) -> None:
        """After :meth:`observe` of every plain step: the step's token and
        the draft :meth:`plan_drafted` skipped (`tokens`, one per node; a
        root-only tree when nothing was drafted). The token tells which root
        child would have been accepted, and the following steps check its
        subtree, so the calibration keeps learning for free."""
        self._p.observe_skipped(np.ascontiguousarray(parent, dtype=np.int32),
                                np.ascontiguousarray(draft_prob, dtype=np.float32),
                                np.ascontiguousarray(tokens, dtype=np.int32), emitted)

    def observe(self, parent: Any, path: Any, forward_nodes: int, forward_seconds: float, *, drafter_calls: int = 0,
                drafted_nodes: int = 0, drafter_seconds: float = 0.0, other_seconds: float = 0.0,
                draft_prob: Any = None, tokens_left: int = -1, accept_prob: Any = None) -> None:
        """Records one round: the drafted tree's parents, the accepted path
        from the root (accepted drafts + 1 node ids), the target pass size and
        time, the drafter's calls, nodes and time, the rest of the round's
        time, optionally each node's draft probability, the tokens the
        request may still emit (-1: unknown; the planner then drafts no
        deeper than can be emitted and skips probes that cannot pay), and
        optionally each node's chance of acceptance given its parent was
        reached (-1 where unknown; e.g. sum(min(p, q)) of its parent's rows
        for an i.i.d. first draft), counted instead of the accepted/rejected
        indicator: the same expectation with less variance."""
        self._p.observe(np.ascontiguousarray(parent, dtype=np.int32), np.ascontiguousarray(path, dtype=np.int32),
                        forward_nodes, forward_seconds, drafter_calls, drafted_nodes, drafter_seconds, other_seconds,
                        None if draft_prob is None else np.ascontiguousarray(draft_prob, dtype=np.float32),
                        tokens_left,
                        None if accept_prob is None else np.ascontiguousarray(accept_prob, dtype=np.float32))

    def set_target_cost(self, n: Any, seconds: Any) -> None:
        """Uses the caller's pass-time curve (e.g. measured offline) instead of measured times."""
        self._p.set_target_cost(np.ascontiguousarray(n, dtype=np.float64),
                                np.ascontiguousarray(seconds, dtype=np.float64))

    def set_drafter_cost(self, per_round: float, per_level: float, per_node: float) -> None:
        """Fixes the drafter's time model."""
        self._p.set_drafter_cost(per_round, per_level, per_node)

    def set_loop_cost(self, per_round: float, per_node: float) -> None:
        """Fixes the loop's own time model."""
        self._p.set_loop_cost(per_round, per_node)

    def fix_plan(self, shape: Any) -> None:
        """Drafts `shape` every round (empty: choose again)."""
        self._p.fix_plan(np.ascontiguousarray(shape, dtype=np.int32))

    def target_seconds(self, n: int) -> float:
        """Estimated pass time over n nodes."""
        return self._p.target_seconds(n)

    def drafter_seconds(self, levels: int, nodes: int, tokens: float = 1.0) -> float:
        """Estimated drafter time of a round (catching up on `tokens` committed since it last ran)."""
        return self._p.drafter_seconds(levels, nodes, tokens)

    def acceptance(self, depth: int, rank: int) -> float:
        """Estimated acceptance of a rank-`rank` child at `depth`."""
        return self._p.acceptance(depth, rank)

    @property
    def rounds(self) -> int:
        """Rounds observed."""
        return self._p.rounds
