"""Trees (include/specdec/tree): building, orders, masks, depths and positions, batched masks."""
from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np

from . import _core
from ._core import Error
from ._common import (
    _check_host, _cuda_empty, _cuda_in, _doc, _inp, _np, _out, _stream_handle, _to_host, _where,
)


def validate_parents(parent: Any) -> None:
    """Raises Error unless `parent` is a tree in topological order
    (parent[0] == -1, 0 <= parent[i] < i)."""
    _core.validate_parents(_inp(parent, np.int32, "parent"))


def relabel_topological(parent: Any) -> tuple:
    """Relabels a parent array in any order (one root with parent -1) into
    DFS pre-order. Returns (new_parent, new_to_old, old_to_new)."""
    p = _inp(parent, np.int32, "parent")
    n = len(p)
    outs = [_out(None, p, (n,), np.int32, "out") for _ in range(3)]
    _core.relabel_topological(p, *outs)
    return tuple(outs)


def from_choices(choices: Sequence[Sequence[int]]) -> tuple:
    """Tree of a Medusa / vLLM choice list (tuples of child ranks, root
    implicit). Returns (parent, node_choice): node k + 1 is the k-th choice in
    Medusa's order, node_choice[k] its index in `choices` (-1 for the root)."""
    ranks = np.fromiter((r for c in choices for r in c), dtype=np.int32)
    offsets = np.zeros(len(choices) + 1, dtype=np.int32)
    offsets[1:] = np.cumsum([len(c) for c in choices], dtype=np.int64)
    parent = np.empty(len(choices) + 1, dtype=np.int32)
    node_choice = np.empty(len(choices) + 1, dtype=np.int32)
    _core.from_choices(ranks, offsets, parent, node_choice)
    return parent, node_choice


def from_paths(paths: Any, num_nodes: Optional[int] = None, *, out: Any = None) -> Any:
    """Tree of a path matrix (retrieve-index rows: node ids from the root,
    -1 padded). Returns the parent array of `num_nodes` nodes (default: the
    largest id + 1), in the ids given."""
    m = _inp(paths, np.int32, "paths")
    if m.ndim != 2:
        raise Error("size_mismatch: paths must be a 2-D matrix")
    n = int(num_nodes) if num_nodes is not None else (int(m.max()) + 1 if m.size else 0)
    parent = _out(out, m, (n,), np.int32, "out")
    _core.from_paths(m, parent)
    return parent


def _order(parent: Any, new_to_old: Any, old_to_new: Any, bfs: bool) -> tuple:
    p = _inp(parent, np.int32, "parent")
    a = _out(new_to_old, p, (len(p),), np.int32, "new_to_old")
    b = _out(old_to_new, p, (len(p),), np.int32, "old_to_new")
    _core.tree_order(p, a, b, bfs)
    return a, b


def dfs_order(parent: Any, *, new_to_old: Any = None, old_to_new: Any = None) -> tuple:
    """Depth-first (pre-order) layout of a topological tree. Returns
    (new_to_old, old_to_new)."""
    return _order(parent, new_to_old, old_to_new, False)


def bfs_order(parent: Any, *, new_to_old: Any = None, old_to_new: Any = None) -> tuple:
    """Breadth-first layout of a topological tree. Returns (new_to_old, old_to_new)."""
    return _order(parent, new_to_old, old_to_new, True)


def packed_mask(parent: Any, *, word_bits: int = 64, out: Any = None) -> Any:
    """Packed ancestor-or-self mask: N rows of ceil(N / word_bits) words
    (uint32 or uint64); bit j of row i is word j // W, bit j % W from the least
    significant bit. `out` may be wider (a row stride) or taller."""
    p = _inp(parent, np.int32, "parent")
    n = len(p)
    if word_bits == 64:
        o = out if out is not None else np.empty((n, (n + 63) // 64), dtype=np.uint64)
        _check_host(o, "out")
        _core.packed_mask64(p, o)
    elif word_bits == 32:
        o = out if out is not None else np.empty((n, (n + 31) // 32), dtype=np.uint32)
        _check_host(o, "out")
        _core.packed_mask32(p, o)
    else:
        raise Error("invalid_argument: word_bits must be 32 or 64")
    return o


def dense_mask(parent: Any, *, out: Any = None, dtype: Any = np.uint8) -> Any:
    """Dense N x N 0/1 ancestor-or-self mask (uint8 or bool)."""
    p = _inp(parent, np.int32, "parent")
    o = _out(out, parent, (len(p), len(p)), dtype, "out")
    is_bool = (str(getattr(o, "dtype", "")) in ("bool", "torch.bool"))
    (_core.dense_mask_bool if is_bool else _core.dense_mask_u8)(p, o)
    return o


def additive_mask(parent: Any, prefix: int = 0, *, out: Any = None, dtype: Any = np.float32) -> Any:
    """Additive attention mask N x (prefix + N): 0 for the committed prefix
    and for ancestors-or-self, -inf elsewhere (float32 or float64)."""
    p = _inp(parent, np.int32, "parent")
    o = _out(out, parent, (len(p), int(prefix) + len(p)), dtype, "out")
    is64 = str(getattr(o, "dtype", "")) in ("float64", "torch.float64")
    (_core.additive_mask_f64 if is64 else _core.additive_mask_f32)(p, o, int(prefix))
    return o


def depths(parent: Any, *, out: Any = None) -> Any:
    """Depth of every node (root 0), int32."""
    p = _inp(parent, np.int32, "parent")
    o = _out(out, parent, (len(p),), np.int32, "out")
    _core.depths(p, o)
    return o


def positions(parent: Any, cache_len: int = 0, *, out: Any = None, dtype: Any = np.int64) -> Any:
    """Position ids cache_len + depth (int32 or int64)."""
    p = _inp(parent, np.int32, "parent")
    o = _out(out, parent, (len(p),), dtype, "out")
    is32 = str(getattr(o, "dtype", "")) in ("int32", "torch.int32")
    (_core.positions_i32 if is32 else _core.positions_i64)(p, int(cache_len), o)
    return o


def tree_masks_batched(parents: Any, offsets: Any, cache_len: Any = None, *, max_nodes: Optional[int] = None,
                       word_bits: int = 64, masks: Any = None, positions: Any = None,
                       tree_status: Any = None, stream: Any = None) -> tuple:
    """Packed masks and positions of a ragged batch of trees in one call
    (tree b owns rows offsets[b]..offsets[b+1], local parent ids). Returns
    (masks, positions, tree_status); a tree that fails gets its status code
    (see C++ status_code) and its rows untouched. CUDA arrays: the
    build_tree_masks_batched kernel on `stream` (asynchronous; tree_status is valid
    once the stream gets there); positions are int64 and masks uint32/uint64
    words (pass them, or use torch >= 2.3 for uint words)."""
    dev = _where("parents offsets cache_len masks positions tree_status", parents, offsets, cache_len, masks, positions,
                 tree_status)
    if dev is not None:
        return _tree_masks_cuda(dev, parents, offsets, cache_len, max_nodes, word_bits, masks, positions,
                                tree_status, stream)
    p = _inp(parents, np.int32, "parents")
    off = _inp(offsets, np.int32, "offsets")
    cl = _inp(cache_len, np.int64, "cache_len")
    sizes = np.diff(_np(off).astype(np.int64)) if len(off) > 1 else np.zeros(0, np.int64)
    mx = int(max_nodes) if max_nodes is not None else int(max(sizes.max(initial=0), 1))
    w = 64 if word_bits == 64 else 32
    if word_bits not in (32, 64):
        raise Error("invalid_argument: word_bits must be 32 or 64")
    wdt = np.uint64 if w == 64 else np.uint32
    m = masks if masks is not None else np.zeros((len(p), (mx + w - 1) // w), dtype=wdt)
    pos = _out(positions, p, (len(p),), np.int64, "positions")
    st = _out(tree_status, p, (max(len(off) - 1, 0),), np.int32, "tree_status")
    _check_host(m, "masks")
    (_core.tree_masks_batched64 if w == 64 else _core.tree_masks_batched32)(p, off, cl, m, pos, st, mx)
    return m, pos, st


def _tree_masks_cuda(dev: int, parents: Any, offsets: Any, cache_len: Any, max_nodes: Optional[int],
                     word_bits: int, masks: Any, positions: Any, tree_status: Any, stream: Any) -> tuple:
    if word_bits not in (32, 64):
        raise Error("invalid_argument: word_bits must be 32 or 64")
    p = _cuda_in(parents, np.int32)
    off = _cuda_in(offsets, np.int32)
    cl = _cuda_in(cache_len, np.int64)
    n, R = int(p.shape[0]), max(int(off.shape[0]) - 1, 0)
    if max_nodes is None:  # reads the offsets back (a sync); pass max_nodes to avoid it
        h = _to_host(off).astype(np.int64)
        max_nodes = int(max(np.diff(h).max(initial=0), 1)) if len(h) > 1 else 1
    w = word_bits
    if masks is None:
        masks = _cuda_empty(p, (n, (int(max_nodes) + w - 1) // w), np.uint64 if w == 64 else np.uint32, dev,
                            zero=True)
    if positions is None:
        positions = _cuda_empty(p, (n,), np.int64, dev)
    if tree_status is None:
        tree_status = _cuda_empty(p, (R,), np.int32, dev)
    f = _core.cuda_tree_masks_batched64 if w == 64 else _core.cuda_tree_masks_batched32
    f(p, off, cl, masks, positions, tree_status, int(max_nodes), _stream_handle(stream, dev))
    return masks, positions, tree_status


for _name, _key in [
    ("validate_parents", "validate_topological_parents"),
    ("relabel_topological", "relabel_topological"),
    ("from_choices", "from_choices"),
    ("from_paths", "from_paths"),
    ("dfs_order", "dfs_order"),
    ("bfs_order", "bfs_order"),
    ("packed_mask", "build_packed_mask"),
    ("dense_mask", "build_dense_mask"),
    ("additive_mask", "build_additive_mask"),
    ("depths", "build_depths"),
    ("positions", "build_positions"),
    ("tree_masks_batched", "build_tree_masks_batched"),
]:
    _doc(globals()[_name], _key)
del _name, _key
