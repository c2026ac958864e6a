"""KV caches (include/specdec/cache): keep indices and the KV commit."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from . import _core
from ._core import Error
from ._common import (
    _EMPTY_I32, _check_now, _cuda_empty, _cuda_in, _device_of, _doc, _inp, _is_torch, _on_device, _out,
    _stream_handle, _to_host, _where, _workspace,
)


def keep_indices(parent: Any, path: Any, cache_len: int, *, slot_of_node: Any = None, out: Any = None) -> Any:
    """Cache positions the accepted path keeps: cache_len + slot(path[k])
    (slot = node id, or slot_of_node[node] when the nodes were written in
    another order). A -1 in `path` ends it. Returns the filled prefix of `out`."""
    par = _inp(parent, np.int32, "parent")
    pa = _inp(path, np.int32, "path")
    so = _EMPTY_I32 if slot_of_node is None else _inp(slot_of_node, np.int32, "slot_of_node")
    o = _out(out, path, (len(pa),), np.int64, "out")
    count = _core.keep_indices(par, pa, so, int(cache_len), o)
    return o[:count]


def keep_indices_batch(parent: Any, tree_offsets: Any, path: Any, path_offsets: Any, cache_len: Any, *,
                       slot_of_node: Any = None, keep: Any = None, keep_offsets: Any = None) -> tuple:
    """Keep lists of a batch (CSR in, CSR out): returns (keep, keep_offsets)
    ready for commit_kv."""
    par = _inp(parent, np.int32, "parent")
    pa = _inp(path, np.int32, "path")
    cl = _inp(cache_len, np.int64, "cache_len")
    so = _EMPTY_I32 if slot_of_node is None else _inp(slot_of_node, np.int32, "slot_of_node")
    k = _out(keep, path, (len(pa),), np.int64, "keep")
    ko = _out(keep_offsets, path, (len(cl) + 1,), np.int32, "keep_offsets")
    _core.keep_indices_batch(par, _inp(tree_offsets, np.int32, "tree_offsets"), so, pa,
                             _inp(path_offsets, np.int32, "path_offsets"), cl, k, ko)
    return k[:int(ko[len(cl)])], ko


def keep_indices_from_results(tree_offsets: Any, parent: Any, paths: Any, results: Any, cache_len: Any, *,
                              slot_of_node: Any = None, keep: Any = None, keep_offsets: Any = None,
                              status: Any = None, stream: Any = None) -> tuple:
    """Keep lists straight from verify_batch's outputs (the batch's
    tree_offsets and local parents, its paths R x L and results R x 4):
    request r keeps cache_len[r] + slot of each node of its accepted path
    when its result is ok (slot = node id, or slot_of_node), nothing
    otherwise. Returns (keep, keep_offsets, status): the CSR lists for
    commit_kv / KVCommit and one code per request (offsets out of place:
    every request not_sorted). Host arrays: keep is the filled prefix.
    CUDA arrays: one kernel on `stream`; keep is the whole buffer (one entry
    per node; commit_kv reads keep_offsets[R] of them) and nothing is read
    back, so with the outputs given nothing is allocated or waited for
    either (the call can sit in a CUDA graph between verify_batch and
    KVCommit)."""
    dev = _where("tree_offsets parent paths results cache_len slot_of_node keep keep_offsets status", tree_offsets,
                 parent, paths, results, cache_len, slot_of_node, keep, keep_offsets, status)
    if dev is not None:
        par = _cuda_in(parent, np.int32)
        cl = _cuda_in(cache_len, np.int64)
        R, N = int(cl.shape[0]), int(par.shape[0])
        keep = _cuda_empty(par, (N,), np.int64, dev) if keep is None else keep
        keep_offsets = _cuda_empty(par, (R + 1,), np.int32, dev) if keep_offsets is None else keep_offsets
        status = _cuda_empty(par, (R,), np.int32, dev) if status is None else status
        _core.cuda_keep_indices_from_results(_cuda_in(tree_offsets, np.int32), par, _cuda_in(slot_of_node, np.int32),
                                             _cuda_in(paths, np.int32), _cuda_in(results, np.int32), cl, keep,
                                             keep_offsets, status, _stream_handle(stream, dev))
        return keep, keep_offsets, status
    par = _inp(parent, np.int32, "parent")
    cl = _inp(cache_len, np.int64, "cache_len")
    R = len(cl)
    k = _out(keep, parent, (len(par),), np.int64, "keep")
    ko = _out(keep_offsets, parent, (R + 1,), np.int32, "keep_offsets")
    st = _out(status, parent, (R,), np.int32, "status")
    _core.keep_indices_from_results(_inp(tree_offsets, np.int32, "tree_offsets"), par,
                                    None if slot_of_node is None else _inp(slot_of_node, np.int32, "slot_of_node"),
                                    _inp(paths, np.int32, "paths"), _inp(results, np.int32, "results"), cl, k, ko, st)
    return k[:int(ko[R])], ko, st


def commit_kv(caches: Sequence[Any], layout: str, cache_len: Any, keep: Any, keep_offsets: Any = None, *,
              block_table: Any = None, blocks_used: Any = None, status: Any = None, check: Any = None,
              workspace: Any = None, stream: Any = None, threads: int = 1) -> None:
    """In-place KV commit on the caller's cache tensors: request r's k-th kept
    position moves to cache_len[r] + k in every layer and head of every tensor.
    `layout` names each axis of the tensors: S (request row; physical page
    when `block_table` is given), L (layer, optional), H (kv head), T (position;
    slot within a page), D (head dim), e.g. "SLHTD", "SLTHD", paged "STHD".
    Elements move as raw bits (fp16/bf16/fp8 caches are fine). A single
    request may pass cache_len as an int and keep as one list.
    CUDA tensors: the kv_commit kernel on `stream` (cache_len, keep,
    keep_offsets, block_table, blocks_used on the device too; a host int /
    list is uploaded). It validates on the device, one status per request:
    a request that fails a check is left untouched and the others commit (a
    fault of the whole batch, such as a bad tensor, stops all of them). The
    statuses land in `status` (an int32 CUDA array of R entries, status_code
    values, 0 = ok; kv_commit_check reads it once the stream gets there) and
    the call returns at once; without `status` it waits and raises the first
    failure (check=True waits even with one, check=False never does and needs one). The
    tensors' descriptions are uploaded on every call: for a commit without
    uploads (e.g. captured in a CUDA graph), prepare one with KVCommit.
    Host caches: the same per-request rule and `status=` (an int32 host
    array of R entries, filled in place; without it the first failure
    raises after the good requests committed; check as for CUDA). The
    Python lock is released while bytes move; `threads`
    > 1 runs the (tensor, request) items on that many threads (a pool owned
    by this call; 0 = one per hardware thread). Same bytes for any count;
    it pays off only with many large items and idle cores."""
    if isinstance(caches, (list, tuple)):
        cs = list(caches)
    else:
        cs = [caches]
    dev = _where("status workspace caches[0] caches[1] caches[2] caches[3]", status, workspace, *cs)
    if dev is not None:
        if int(threads) != 1:
            raise Error("invalid_argument: threads applies to host caches (CUDA commits run on the stream)")
        return _commit_kv_cuda(dev, cs, layout, cache_len, keep, keep_offsets, block_table, blocks_used, status,
                               _check_now(check, status), workspace, stream)
    # Host caches: index arrays on a device are refused.
    _where("cache_len keep keep_offsets block_table blocks_used caches", cache_len, keep, keep_offsets, block_table,
           blocks_used, cs[0])
    if np.ndim(cache_len) == 0:
        cl = np.array([int(cache_len)], dtype=np.int64)
        kp = _inp(keep, np.int64, "keep")
        ko = np.array([0, len(kp)], dtype=np.int32) if keep_offsets is None else _inp(keep_offsets, np.int32,
                                                                                       "keep_offsets")
    else:
        cl = _inp(cache_len, np.int64, "cache_len")
        kp = _inp(keep, np.int64, "keep")
        if keep_offsets is None:
            raise Error("invalid_argument: keep_offsets is required for a batch")
        ko = _inp(keep_offsets, np.int32, "keep_offsets")
    bt = None if block_table is None else _inp(block_table, np.int32, "block_table")
    bu = None if blocks_used is None else _inp(blocks_used, np.int32, "blocks_used")
    _core.commit_kv(cs, layout, cl, ko, kp, bt, bu, status, _check_now(check, status), int(threads))


def _commit_kv_cuda(dev: int, cs: list, layout: str, cache_len: Any, keep: Any, keep_offsets: Any,
                    block_table: Any, blocks_used: Any, status: Any, check_now: bool, workspace: Any,
                    stream: Any) -> None:
    like = cs[0]
    if _device_of(cache_len) is None and np.ndim(cache_len) == 0:
        cl = _on_device([int(cache_len)], np.int64, like, dev)
        kp = _on_device(keep, np.int64, like, dev)
        ko = (_on_device([0, int(kp.shape[0])], np.int32, like, dev) if keep_offsets is None
              else _on_device(keep_offsets, np.int32, like, dev))
    else:
        if keep_offsets is None:
            raise Error("invalid_argument: keep_offsets is required for a batch")
        cl = _on_device(cache_len, np.int64, like, dev)
        kp = _on_device(keep, np.int64, like, dev)
        ko = _on_device(keep_offsets, np.int32, like, dev)
    bt = None if block_table is None else _on_device(block_table, np.int32, like, dev).reshape(
        tuple(block_table.shape))
    bu = None if blocks_used is None else _on_device(blocks_used, np.int32, like, dev)
    handle = _stream_handle(stream, dev)
    workspace = _workspace(int(_core.cuda_commit_kv_workspace_size(len(cs), int(cl.shape[0]))), like, dev, handle,
                           workspace)
    _core.cuda_commit_kv(cs, layout, cl, ko, kp, bt, bu, status, workspace, handle, check_now)


class KVCommit:
    """A CUDA KV commit prepared for fixed cache tensors: `caches`, `layout`,
    `block_table` and `blocks_used` as in commit_kv. The tensors are
    described and their descriptions uploaded once, here (one wait); each
    call then only launches the kernels on its requests: cache_len, keep and
    keep_offsets as CUDA arrays (int64, int64, int32), nothing uploaded or
    allocated, so a call can be captured in a CUDA graph and replayed (keep
    may be a buffer of fixed capacity: only keep_offsets[R] entries are
    read, so rounds that keep different counts share one graph). The
    tensors' contents (and the block table's) may change between calls;
    they must not be reallocated (this object keeps them alive)."""

    def __init__(self, caches: Sequence[Any], layout: str, *, block_table: Any = None,
                 blocks_used: Any = None) -> None:
        cs = list(caches) if isinstance(caches, (list, tuple)) else [caches]
        dev = _where(" ".join(["block_table", "blocks_used"] + [f"caches[{i}]" for i in range(len(cs))]),
                     block_table, blocks_used, *cs)
        if dev is None:
            raise Error("invalid_argument: KVCommit needs CUDA cache tensors (host caches: use commit_kv)")
        self.device = dev
        self._keep = (cs, block_table, blocks_used)
        self._plan = _core.CudaPreparedKVCommit(cs, layout, block_table, blocks_used)

    def __call__(self, cache_len: Any, keep: Any, keep_offsets: Any, *, status: Any = None, check: Any = None,
                 stream: Any = None) -> None:
        """Commits one round: request r's k-th kept position moves to
        cache_len[r] + k. The request statuses land in `status` (int32 CUDA
        array of R entries, read with kv_commit_check) without a wait;
        without `status` the call waits and raises the first failure (check
        as in commit_kv)."""
        for name, v, dt in (("cache_len", cache_len, np.int64), ("keep", keep, np.int64),
                            ("keep_offsets", keep_offsets, np.int32)):
            if _device_of(v) != self.device:
                raise Error(f"invalid_argument: {name} must be a CUDA array on device {self.device}")
            if _is_torch(v) and (str(v.dtype) != f"torch.{np.dtype(dt).name}" or not v.is_contiguous()):
                # A converted copy would not follow the caller's buffer when a graph replays.
                raise Error(f"invalid_argument: {name} must be a contiguous {np.dtype(dt).name} CUDA array")
        self._plan(cache_len, keep_offsets, keep, status, _stream_handle(stream, self.device),
                   _check_now(check, status))


def kv_commit_check(status: Any) -> None:
    """Raises the first request's error a CUDA commit_kv (or KVCommit)
    recorded in `status` (read it after synchronizing the stream); returns
    if every request was committed."""
    codes = np.asarray(_to_host(status) if _device_of(status) is not None else status).reshape(-1)
    _core.kv_commit_check([int(c) for c in codes])


for _name, _key in [
    ("keep_indices", "keep_indices_from_path"),
    ("keep_indices_batch", "keep_indices_batch"),
    ("keep_indices_from_results", "keep_indices_from_results"),
    ("commit_kv", "commit_kv"),
]:
    _doc(globals()[_name], _key)
del _name, _key
