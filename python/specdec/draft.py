"""Drafting (include/specdec/draft): top-k, beam, sampled and static tree builders; pruning."""
from __future__ import annotations

import enum
from typing import Any, NamedTuple, Sequence

import numpy as np

from . import _core
from ._core import Error
from ._common import (
    _cuda_empty, _cuda_in, _device_of, _doc, _inp, _is_torch, _np, _on_device, _out, _stream_handle, _where,
    _workspace,
)


class DraftMode(enum.IntEnum):
    """How a drafted node's children were produced (C++ specdec::draft_mode)."""

    LEAF = 0
    DETERMINISTIC = 1
    IID = 2
    WITHOUT_REPLACEMENT = 3


class DraftedTree(NamedTuple):
    """A builder's tree: parent, tokens, scores (log joint draft probability),
    prob (q_parent(token) of each node, 1 for the root) and child_mode
    (DraftMode of each node's children)."""

    parent: np.ndarray
    tokens: np.ndarray
    scores: np.ndarray
    prob: np.ndarray
    child_mode: np.ndarray


def _drafter(fn: Any) -> Any:
    def call(node: int, depth: int, path: np.ndarray) -> np.ndarray:
        row = fn(node, depth, path)
        if _is_torch(row):  # read in place through DLPack (no numpy round trip)
            import torch
            return row.detach().to("cpu", torch.float32).contiguous()
        return np.ascontiguousarray(row, dtype=np.float32)
    return call


def topk_tree(drafter: Any, root_token: int, *, k: int, depth: int, vocab_size: int = 0,
              max_nodes: int = 1 << 20) -> DraftedTree:
    """Full top-k tree grown level by level; drafter(node, depth, path) returns
    the draft distribution (1-D, V probabilities) after `path` (root-to-node
    tokens). Children are deterministic: verify with Mode.DETERMINISTIC."""
    return DraftedTree(*_core.topk_tree(_drafter(drafter), int(root_token), int(k), int(depth), int(vocab_size),
                                        int(max_nodes)))


def beam_tree(drafter: Any, root_token: int, *, k: int = 8, width: int = 8, depth: int = 6, budget: int = 60,
              vocab_size: int = 0, max_nodes: int = 1 << 20) -> DraftedTree:
    """EAGLE-2 style joint-probability beam tree reranked to `budget` nodes;
    drafter as in topk_tree. Verify with Mode.DETERMINISTIC."""
    return DraftedTree(*_core.beam_tree(_drafter(drafter), int(root_token), int(k), int(width), int(depth),
                                        int(budget), int(vocab_size), int(max_nodes)))


def sampled_tree(drafter: Any, root_token: int, *, widths: Sequence[int], vocab_size: int,
                 mode: int = DraftMode.IID, seed: int = 0, request: int = 0, round: int = 0,
                 max_nodes: int = 1 << 20, uniforms: Any = None) -> tuple:
    """A sampled tree: widths[d] children per node at depth d, drawn i.i.d.
    (DraftMode.IID; verify with Mode.SAMPLED_IID) or without replacement by
    Gumbel-top-k (DraftMode.WITHOUT_REPLACEMENT; verify with
    Mode.SAMPLED_WITHOUT_REPLACEMENT), from the keyed Philox stream (seed,
    request, round; the draft purpose, never the verifier's uniforms);
    drafter as in topk_tree. Returns (DraftedTree, q): q (N x V float32) row
    u is the normalized draft row that produced u's children, the rows the
    sampled verifiers read (leaf rows 0).
    `uniforms`: the caller's drafting uniforms instead of the Philox stream,
    a host float64 array nodes x draws in [0, 1), u[node, draw] for the node
    whose children are drawn: draw j = child j's inverse-CDF uniform (IID,
    draws >= max(widths)), or draw t = token t's Gumbel uniform
    (WITHOUT_REPLACEMENT, draws >= vocab_size). philox_uniforms(...,
    purpose="draft") gives the stream's own values. Never share them with
    the verifier's uniforms."""
    if int(mode) not in (DraftMode.IID, DraftMode.WITHOUT_REPLACEMENT):
        raise Error("invalid_argument: sampled trees are DraftMode.IID or DraftMode.WITHOUT_REPLACEMENT")
    *arrays, q = _core.sampled_tree(_drafter(drafter), int(root_token), int(mode), [int(w) for w in widths],
                                    int(vocab_size), int(max_nodes), int(seed), int(request), int(round),
                                    _inp(uniforms, np.float64, "uniforms"))
    return DraftedTree(*arrays), q


def static_tree(drafter: Any, root_token: int, shape: Any, *, vocab_size: int, mode: int = DraftMode.DETERMINISTIC,
                seed: int = 0, request: int = 0, round: int = 0, uniforms: Any = None) -> tuple:
    """Drafts into a fixed shape (a parent array: a choice list through
    from_choices, a Sequoia tree, any other): shape node s gets as many
    children as nodes name it as parent, drawn top-k (DETERMINISTIC), i.i.d.
    or without replacement. Returns (DraftedTree, q) as sampled_tree (q rows
    are written for every expanded node). `uniforms`: the caller's drafting
    uniforms, as in sampled_tree (node = the shape node being expanded)."""
    sh = [int(v) for v in _np(_inp(shape, np.int32, "shape"))]
    *arrays, q = _core.static_tree(_drafter(drafter), int(root_token), sh, int(mode), int(vocab_size), int(seed),
                                   int(request), int(round), _inp(uniforms, np.float64, "uniforms"))
    return DraftedTree(*arrays), q


def prune_to_budget(parent: Any, scores: Any, budget: int, *, out: Any = None) -> tuple:
    """Keeps the `budget` nodes of highest effective score (running minimum
    along the root path; ties by id), always ancestor-closed. Returns
    (new_index, kept): new_index[i] is node i's id in the pruned tree or -1."""
    par = _inp(parent, np.int32, "parent")
    o = _out(out, parent, (len(par),), np.int32, "out")
    kept = _core.prune_to_budget(par, _inp(scores, np.float32, "scores"), int(budget), o)
    return o, kept


def prune_batch(parent: Any, scores: Any, offsets: Any, budget: Any, *, new_index: Any = None, kept: Any = None,
                request_status: Any = None, workspace: Any = None, stream: Any = None) -> tuple:
    """prune_to_budget on a ragged batch (request r owns nodes
    offsets[r]..offsets[r+1], local parent ids, at least one node each);
    `budget` is one int for all or one per request. Returns (new_index,
    kept, request_status): a request that fails gets its status code and its
    new_index entries untouched. CUDA arrays: the batch_prune_to_budget
    kernel on `stream`, asynchronous: offsets on the host are checked and
    uploaded; on the device they are used in place, never read back (the
    kernel checks every request's span: bad offsets give every request
    out_of_range in request_status). With device offsets and budgets, a
    workspace and outputs given, nothing is uploaded, allocated or waited
    for."""
    per = np.ndim(budget) > 0 or _device_of(budget) is not None
    dev = _where("parent scores budget new_index kept request_status workspace", parent, scores,
                 budget if per else None, new_index, kept, request_status, workspace)
    if dev is not None:
        on_dev = _device_of(offsets) is not None
        off = _cuda_in(offsets, np.int32) if on_dev else _inp(offsets, np.int32, "offsets")
        R = max(int(off.shape[0]) - 1, 0)
        par = _cuda_in(parent, np.int32)
        n = int(par.shape[0])
        new_index = _cuda_empty(par, (n,), np.int32, dev) if new_index is None else new_index
        kept = _cuda_empty(par, (R,), np.int32, dev) if kept is None else kept
        request_status = _cuda_empty(par, (R,), np.int32, dev) if request_status is None else request_status
        handle = _stream_handle(stream, dev)
        workspace = _workspace(int(_core.cuda_prune_batch_workspace_size(R, n, not on_dev)), par, dev, handle,
                               workspace)
        _core.cuda_prune_batch(par, _cuda_in(scores, np.float32), off,
                               _on_device(budget, np.int32, par, dev) if per else None, 0 if per else int(budget),
                               new_index, kept, request_status, workspace, handle)
        return new_index, kept, request_status
    par = _inp(parent, np.int32, "parent")
    off = _inp(offsets, np.int32, "offsets")
    R = max(len(off) - 1, 0)
    b = _inp(budget if per else [int(budget)], np.int32, "budget")
    new_index = _out(new_index, parent, (len(par),), np.int32, "new_index")
    kept = _out(kept, parent, (R,), np.int32, "kept")
    request_status = _out(request_status, parent, (R,), np.int32, "request_status")
    _core.prune_batch(par, _inp(scores, np.float32, "scores"), off, b, new_index, kept, request_status)
    return new_index, kept, request_status


for _name, _key in [
    ("prune_batch", "batch_prune_to_budget"),
    ("topk_tree", "topk_tree_builder"),
    ("beam_tree", "beam_tree_builder"),
    ("prune_to_budget", "prune_to_budget"),
    ("sampled_tree", "sampled_tree_builder"),
    ("static_tree", "static_tree_builder"),
]:
    _doc(globals()[_name], _key)
del _name, _key
