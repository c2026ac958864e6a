"""Peer formats (include/specdec/interop): linked lists, greedy ids, Medusa / EAGLE choice buffers,
typical acceptance, result writers and chain coins."""
from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np

from . import _core
from ._core import Error
from ._common import _EMPTY_I32, _check_host, _doc, _inp, _is_torch, _np, _out, _strided
from .tree import from_choices
from .verify import VerifyResult, _max_depth_plus_one


def tree_from_linked_list(candidates: Any, next_token: Any, next_sibling: Any, *, unused_root: bool = False,
                          root_token: int = 0, require_all: bool = False) -> tuple:
    """A specdec tree from one request's SGLang / EAGLE linked-list arrays
    (candidates, retrive_next_token, retrive_next_sibling; int64 or int32).
    Nodes come in DFS preorder with siblings in list order, so both visit
    orders coincide. Returns (parent, tokens, old_to_new, new_to_old):
    old_to_new[slot] is the node of each slot (-1 when unreached)."""
    c = _np(candidates) if _is_torch(candidates) else np.asarray(candidates)
    dt_ = np.int32 if c.dtype == np.int32 else np.int64
    f = _core.tree_from_linked_list_i32 if dt_ == np.int32 else _core.tree_from_linked_list_i64
    c, nt, ns = (_inp(a, dt_, name) for a, name in ((candidates, "candidates"), (next_token, "next_token"),
                                                    (next_sibling, "next_sibling")))
    n = len(c)
    parent, tokens = np.empty(n, np.int32), np.empty(n, np.int32)
    o2n, n2o = np.empty(n, np.int32), np.empty(n, np.int32)
    count = f(c, nt, ns, bool(unused_root), int(root_token), bool(require_all), parent, tokens, o2n, n2o)
    return parent[:count], tokens[:count], o2n, n2o[:count]


def linked_list_from_tree(parent: Any, tokens: Any) -> tuple:
    """The other way: (next_token, next_sibling) int64 arrays over the same
    node ids (slot = node; first child / next sibling or -1)."""
    par = _inp(parent, np.int32, "parent")
    nt, ns = np.empty(len(par), np.int64), np.empty(len(par), np.int64)
    _core.linked_list_from_tree(par, _inp(tokens, np.int32, "tokens"), nt, ns)
    return nt, ns


def verify_greedy_ids(parent: Any, tokens: Any, target_ids: Any, *, vocab: int = 0, unused_root: bool = False,
                      max_accept: Optional[int] = None, path: Any = None, tokens_out: Any = None) -> VerifyResult:
    """Greedy verification from the target's argmax id after each node
    (SGLang's target_predict) instead of probability rows; token-identical
    to Mode.GREEDY on the rows those ids came from."""
    par = _inp(parent, np.int32, "parent")
    cap = _max_depth_plus_one(_np(par)) if (path is None or tokens_out is None) else 0
    path = _out(path, parent, (cap,), np.int32, "path")
    tokens_out = _out(tokens_out, parent, (cap,), np.int32, "tokens_out")
    a, last, nxt = _core.verify_greedy_ids(par, _inp(tokens, np.int32, "tokens"),
                                           _inp(target_ids, np.int32, "target_ids"), int(vocab), bool(unused_root),
                                           2**31 - 1 if max_accept is None else int(max_accept), path, tokens_out)
    return VerifyResult(a, last, nxt, path[:a + 1], tokens_out[:a + 1])


def chain_coins(gamma: int, *, seed: int = 0, request: int = 0, round: int = 0, out: Any = None) -> Any:
    """The gamma coins specdec's chain verification draws for the acceptance
    tests on the key (seed, request, round): coins[i] decides draft i. Hand
    them to chain_acceptance_counts (or a peer's kernel) to reproduce a
    specdec run. Returns `out` (float32, gamma entries) or a new array."""
    if int(gamma) < 0:
        raise Error("invalid_argument: gamma must be >= 0")
    o = _out(out, None, (int(gamma),), np.float32, "out")
    if len(o) != int(gamma):
        raise Error("size_mismatch: out needs gamma entries")
    _core.chain_coins(int(seed), int(request), int(round), o)
    return o


def write_sglang_results(path: Any, tokens: Any, accepted: int, *, node_slot: Any = None, slot_row: Any = None,
                         accept_index: Any = None, predicts: Any = None) -> tuple:
    """One request's verification result (path and emitted tokens, root
    first, accepted + 1 entries each, e.g. a VerifyResult's path and
    tokens) written in SGLang's layout: accept_index[k] = row of path[k],
    predicts[row of path[k]] = tokens[k] (skipped when `predicts` is None).
    node_slot (node -> slot, e.g. tree_from_linked_list's new_to_old) and
    slot_row (slot -> row, e.g. the request's retrive_index row, int64 or
    int32) translate nodes to rows; None is the identity. Returns
    (accept_index, accept_token_num, predicts); int32 outputs, written in
    place when given (accept_index then needs >= accepted + 1 entries);
    nothing is written on error."""
    pa = _inp(path, np.int32, "path")
    tk = _inp(tokens, np.int32, "tokens")
    ns = _EMPTY_I32 if node_slot is None else _inp(node_slot, np.int32, "node_slot")
    if slot_row is None:
        sr, f = _EMPTY_I32, _core.write_sglang_results_i32
    else:
        _check_host(slot_row, "slot_row")
        is32 = _np(slot_row).dtype == np.int32
        sr = _inp(slot_row, np.int32 if is32 else np.int64, "slot_row")
        f = _core.write_sglang_results_i32 if is32 else _core.write_sglang_results_i64
    if accept_index is None:
        accept_index = np.full(max(int(accepted) + 1, 0), -1, np.int32)
    _check_host(accept_index, "accept_index")
    pr = _EMPTY_I32 if predicts is None else predicts
    _check_host(pr, "predicts")
    num = f(pa, tk, int(accepted), ns, sr, accept_index, pr)
    return accept_index, num, predicts


def gather_candidate_tokens(tree_indices: Any, flat: Any, *, out: Any = None) -> Any:
    """Node tokens from a peer's flat candidate vector (Medusa / EAGLE-1,
    see choice_buffers): out[i] = flat[tree_indices[i]]. Returns `out`
    (int32, one entry per node) or a new array."""
    ti = _inp(tree_indices, np.int32, "tree_indices")
    o = _out(out, tree_indices, (len(ti),), np.int32, "out")
    _core.gather_candidate_tokens(ti, _inp(flat, np.int32, "flat"), o)
    return o


def count_acceptance_per_depth(accepted: Any, per_depth: Any) -> Any:
    """Adds requests' acceptance to per-depth counters in place:
    per_depth[d - 1] (int64) counts the requests whose accepted path reaches
    depth d; deeper ones are not counted. `accepted`: one count or an array
    of counts (e.g. verify_batch's results[:, 0]). Returns per_depth."""
    _check_host(per_depth, "per_depth")
    _check_host(accepted, "accepted")
    a = np.ascontiguousarray(np.atleast_1d(_np(accepted)), dtype=np.int32)
    _core.count_acceptance_per_depth(a, per_depth)
    return per_depth


def choice_buffers(choices: Sequence[Sequence[int]], topk: int, layout: str = "medusa") -> tuple:
    """Medusa's or EAGLE-1's static-tree buffers of a choice list: returns
    (parent, tree_indices, retrieve_indices). tree_indices[i] is where node
    i's token sits in the peer's flat candidate vector; retrieve_indices has
    one root-to-leaf row per leaf (-1 padded) in the peer's row order.
    `layout`: "medusa" or "eagle1". Nodes follow from_choices' order."""
    ranks = np.fromiter((r for c in choices for r in c), dtype=np.int32)
    offsets = np.zeros(len(choices) + 1, dtype=np.int32)
    offsets[1:] = np.cumsum([len(c) for c in choices], dtype=np.int64)
    parent, node_choice = from_choices(choices)
    node_rank = np.empty(len(parent), np.int32)
    _core.choice_node_ranks(ranks, offsets, node_choice, node_rank)
    ti = np.empty(len(parent), np.int32)
    _core.choice_tree_indices(parent, node_rank, int(topk), layout, ti)
    rows, width = _core.retrieve_shape(parent)
    ri = np.empty((rows, width), np.int32)
    _core.retrieve_indices(parent, layout, ri)
    return parent, ti, ri


def medusa_typical_select(retrieve: Any, tokens: Any, p: Any, *, epsilon: float = 0.09, delta: float = 0.3,
                          tie_break: str = "highest_likelihood") -> tuple:
    """LOSSY: Medusa's typical acceptance over retrieve rows (R x L node ids,
    -1 padded). Returns (best_row, accept_length); tie_break
    "highest_likelihood" (Medusa) or "first_row"."""
    if tie_break not in ("highest_likelihood", "first_row"):
        raise Error("invalid_argument: tie_break must be highest_likelihood or first_row")
    return _core.medusa_typical_select(_inp(retrieve, np.int32, "retrieve"), _inp(tokens, np.int32, "tokens"),
                                       _strided(p, np.float32, "p"), float(epsilon), float(delta),
                                       tie_break == "first_row")


for _name, _key in [
    ("tree_from_linked_list", "tree_from_linked_list"),
    ("linked_list_from_tree", "linked_list_from_tree"),
    ("verify_greedy_ids", "verify_greedy_ids"),
    ("choice_buffers", "retrieve_indices"),
    ("chain_coins", "chain_coins"),
    ("write_sglang_results", "write_sglang_results"),
    ("gather_candidate_tokens", "gather_candidate_tokens"),
    ("count_acceptance_per_depth", "count_acceptance_per_depth"),
    ("medusa_typical_select", "medusa_typical_select"),
]:
    _doc(globals()[_name], _key)
del _name, _key
