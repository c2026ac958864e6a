"""Planning models (include/specdec/plan): Sequoia trees, cost fits, acceptance, memory budgets."""
from __future__ import annotations

from typing import Any, NamedTuple, Sequence

import numpy as np

from . import _core
from ._common import _doc, _inp


def sequoia_tree(p: Any, budget: int, max_depth: int) -> tuple:
    """Sequoia's DP: the tree shape of at most `budget` nodes and depth <=
    max_depth maximizing expected tokens per round under positional
    acceptance rates p. Returns (parent, rank, value)."""
    parent, rank, value = _core.sequoia_tree(_inp(p, np.float64, "p"), int(budget), int(max_depth))
    return np.asarray(parent, dtype=np.int32), np.asarray(rank, dtype=np.int32), value


def fit_linear_cost(n: Any, t: Any) -> tuple:
    """Least-squares t = k N + C. Returns (k, C)."""
    return _core.fit_linear_cost(_inp(n, np.float64, "n"), _inp(t, np.float64, "t"))


def fit_quadratic_cost(n: Any, t: Any) -> tuple:
    """Least-squares t = a N^2 + b N + c. Returns (a, b, c)."""
    return _core.fit_quadratic_cost(_inp(n, np.float64, "n"), _inp(t, np.float64, "t"))


def best_tree_size(cost: Sequence[float], tau: Any, draft_time: float = 0.0) -> tuple:
    """Tree size N minimizing (t(N) + draft_time) / tau[N - 1] for a linear
    (k, C) or quadratic (a, b, c) cost. Returns (N, time per token)."""
    return _core.best_tree_size([float(c) for c in cost], _inp(tau, np.float64, "tau"), float(draft_time))


AcceptanceCounts = _core.AcceptanceCounts


MemoryConfig = _core.MemoryConfig


def expected_accepted_length(parent: Any, probs: Any) -> tuple:
    """Expected accepted drafts of a tree under a per-depth, per-rank
    acceptance model (probs: depths x ranks, row d - 1 for depth d; a 1-D
    per-rank vector is Sequoia's positional model). Returns (value, reach)
    with reach[v] the probability that node v is reached."""
    pr = np.asarray(probs, dtype=np.float64)
    pr = np.ascontiguousarray(pr.reshape(1, -1) if pr.ndim == 1 else pr)
    par = _inp(parent, np.int32, "parent")
    reach = np.empty(len(par), np.float64)
    value = _core.expected_accepted_length(par, pr, reach)
    return value, reach


class MemoryPlan(NamedTuple):
    """What plan_memory chose: decoding heads (= tree levels), tree nodes,
    assumed leaves, the KV allocation in bytes and the total (eq. 6)."""

    heads: int
    nodes: int
    leaves: int
    kv_bytes: float
    total: float


def memory_total_bytes(config: Any, turns: float, nodes: float, leaves: float, heads: float) -> float:
    """SpecMemo's eq. 6: model + heads + KV of `turns` turns + tree buffers, in bytes."""
    return _core.memory_total_bytes(config, float(turns), float(nodes), float(leaves), float(heads))


def plan_memory(config: Any, budget: float, *, turns: int = 20, max_heads: int = 5, min_heads: int = 2,
                arity: int = 10, leaf_fraction: float = 0.86, max_nodes: int = 4096) -> MemoryPlan:
    """SpecMemo budgeting: the most heads (then the largest tree) that fit
    `budget` bytes next to the model and the KV of `turns` turns."""
    return MemoryPlan(*_core.plan_memory(config, float(budget), int(turns), int(max_heads), int(min_heads),
                                         int(arity), float(leaf_fraction), int(max_nodes)))


for _name, _key in [
    ("sequoia_tree", "sequoia_tree"),
    ("expected_accepted_length", "expected_accepted_length"),
    ("plan_memory", "plan_memory"),
    ("fit_linear_cost", "fit_linear_cost"),
    ("fit_quadratic_cost", "fit_quadratic_cost"),
    ("best_tree_size", "best_tree_size"),
]:
    _doc(globals()[_name], _key)
del _name, _key
