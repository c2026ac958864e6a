"""specdec: speculative-decoding primitives for Python engines.

The functions take and return arrays through DLPack (numpy arrays, torch
tensors, anything with ``__dlpack__``). Inputs of the right dtype and layout
are read in place; outputs passed as ``out=`` / named output arguments are
written in place (their data pointer is the one the caller passed), and are
allocated (numpy, or torch when the main input is a torch tensor) when
omitted. Every function validates its inputs before writing: on error it
raises :class:`specdec.Error` (a ``ValueError``) with specdec's status name
and message, and outputs are left untouched.

Devices: each function dispatches on where its arrays live. All in host
memory: the host templates. All in CUDA memory on one device (a build with
the CUDA kernels, see :func:`build_info`): the ``specdec::kernels`` entry
point, enqueued on the caller's stream (``stream=``: an int
``cudaStream_t`` handle or any object with ``.cuda_stream``, e.g. a
``torch.cuda.Stream``; default: torch's current stream when torch is
imported, else the legacy default stream 0). Mixed host and CUDA arrays
raise. Functions without a kernel raise on CUDA arrays.
"""
from __future__ import annotations

import enum
import math
import sys
from typing import Any, NamedTuple, Optional, Sequence

import numpy as np

from . import _core
from ._core import Error

try:
    from ._cppdocs import DOCS as _DOCS
except ImportError:  # running from a source tree without a build
    _DOCS = {}

__all__ = [
    "Error", "Mode", "DraftMode", "has_cuda", "cuda_available", "build_info",
    "relabel_topological", "from_choices", "from_paths", "validate_parents",
    "dfs_order", "bfs_order", "packed_mask", "dense_mask", "additive_mask", "depths", "positions",
    "tree_masks_batched",
    "VerifyResult", "verify_tree", "verify_chain", "verify_batch", "philox_uniforms",
    "keep_indices", "keep_indices_batch", "commit_kv", "kv_commit_check",
    "tree_scan", "ssm_commit_path", "ssm_replay_masked", "tree_conv1d", "tree_conv1d_commit_state", "prune_batch",
    "topk_tree", "beam_tree", "sampled_tree", "static_tree", "DraftedTree", "prune_to_budget",
    "sequoia_tree", "fit_linear_cost", "fit_quadratic_cost", "best_tree_size",
    "tree_from_linked_list", "linked_list_from_tree", "verify_greedy_ids", "choice_buffers",
    "sglang_verify_tree_greedy", "sglang_tree_sampling_target_only", "chain_acceptance_counts",
    "sglang_build_tree", "sglang_verify_tree", "chain_acceptance_counts_batch",
    "chain_coins", "write_sglang_results", "gather_candidate_tokens", "count_acceptance_per_depth",
    "medusa_typical_select", "expected_accepted_length", "AcceptanceCounts", "MemoryConfig", "MemoryPlan",
    "memory_total_bytes", "plan_memory", "Plan", "RoundPlanner",
]

has_cuda: bool = bool(_core.has_cuda)


def cuda_available() -> bool:
    """Whether CUDA arrays can be used: this build has the CUDA kernels and
    the driver sees at least one device."""
    return has_cuda and int(_core.cuda_device_count()) > 0


def build_info() -> dict:
    """How this module was built: ``build`` (the line CMake printed, e.g.
    "with CUDA kernels (archs 80;90)" or "host-only (no nvcc found)"),
    ``cuda`` (bool), ``cuda_archs`` and ``cuda_devices`` (visible now)."""
    return {"build": str(_core.build), "cuda": has_cuda, "cuda_archs": str(_core.cuda_archs),
            "cuda_devices": int(_core.cuda_device_count()) if has_cuda else 0}


class Mode(enum.IntEnum):
    """Verification modes (C++ specdec::verify_mode). Pick the one matching how
    the drafts were produced; only then is the output distributed exactly as
    the target model. TYPICAL_LOSSY is Medusa's lossy typical acceptance;
    BLOCK (chains only) and the TRAVERSAL modes verify from the leaves back to
    the root (host only in C++ too)."""

    SAMPLED_IID = 0
    SAMPLED_WITHOUT_REPLACEMENT = 1
    DETERMINISTIC = 2
    GREEDY = 3
    NAIVE_MATCHING = 4
    TYPICAL_LOSSY = 5
    BLOCK = 6
    TRAVERSAL = 7
    TRAVERSAL_WITHOUT_REPLACEMENT = 8


class DraftMode(enum.IntEnum):
    """How a drafted node's children were produced (C++ specdec::draft_mode)."""

    LEAF = 0
    DETERMINISTIC = 1
    IID = 2
    WITHOUT_REPLACEMENT = 3


# ---------------------------------------------------------------------------
# array plumbing
# ---------------------------------------------------------------------------

def _is_torch(x: Any) -> bool:
    return type(x).__module__.split(".")[0] == "torch"


def _device_of(x: Any) -> Optional[int]:
    """None for host memory (numpy, lists, CPU tensors), else the CUDA device index."""
    if x is None or type(x) is np.ndarray:
        return None
    dev = getattr(x, "__dlpack_device__", None)
    if dev is None:
        return None
    kind, index = dev()
    if kind in (1, 3):  # kDLCPU, kDLCUDAHost
        return None
    if kind == 2:  # kDLCUDA
        return int(index)
    raise Error(f"unsupported: an array lives on DLPack device type {kind}; specdec takes host or CUDA memory")


def _check_host(x: Any, name: str) -> None:
    if _device_of(x) is not None:
        raise Error(f"unsupported: {name} is in CUDA memory, and this function has no CUDA kernel "
                    "(pass host arrays)" if has_cuda else
                    f"unsupported: {name} is in CUDA memory; this specdec build is host-only "
                    "(CUDA arrays need the build with the kernels, see python/README.md)")


def _where(names: str, *arrays: Any) -> Optional[int]:
    """The device of a call: None when every array is in host memory, the CUDA
    device index when every array is on that device; raises otherwise.
    `names` (space separated, one per array) only serve the error message."""
    device = None
    for a in arrays:  # fast path: numpy arrays and host objects
        if a is None or type(a) is np.ndarray:
            continue
        d = _device_of(a)
        if d is not None:
            device = d
            break
    if device is None:
        return None
    if not has_cuda:  # any CUDA array is refused here, mixed with host arrays or not
        raise Error("unsupported: CUDA arrays passed, but this specdec build is host-only "
                    "(build with nvcc for the kernels, see python/README.md)")
    label = names.split()
    host, cuda = [], {}
    for i, a in enumerate(arrays):
        if a is None:
            continue
        name = label[i] if i < len(label) else f"argument {i}"
        d = _device_of(a)
        if d is None:
            host.append(name)
        else:
            cuda.setdefault(d, []).append(name)
    if host or len(cuda) > 1:
        where = ", ".join([f"{n} on the host" for n in host] +
                          [f"{n} on cuda:{d}" for d, ns in cuda.items() for n in ns])
        raise Error(f"invalid_argument: arrays of one call must all be in host memory or all on one CUDA "
                    f"device ({where})")
    return device


def _stream_handle(stream: Any, device: int) -> int:
    """The cudaStream_t of `stream` (int, or .cuda_stream / .ptr); None means
    torch's current stream when torch is imported, else the legacy default."""
    if stream is None:
        torch = sys.modules.get("torch")
        if torch is not None:
            return int(torch.cuda.current_stream(device).cuda_stream)
        return 0
    if isinstance(stream, int):
        return stream
    for attr in ("cuda_stream", "ptr"):
        h = getattr(stream, attr, None)
        if h is not None:
            return int(h)
    raise Error("invalid_argument: stream must be an int cudaStream_t handle or have .cuda_stream")


def _cuda_empty(like: Any, shape: tuple, dtype: Any, device: int, zero: bool = False) -> Any:
    """A new CUDA array from the library of `like` (torch or cupy)."""
    mod = type(like).__module__.split(".")[0]
    if mod == "torch":
        import torch
        tdt = {np.int32: torch.int32, np.int64: torch.int64, np.float32: torch.float32, np.float64: torch.float64,
               np.uint8: torch.uint8, np.uint32: getattr(torch, "uint32", None),
               np.uint64: getattr(torch, "uint64", None)}[dtype]
        if tdt is None:
            raise Error(f"unsupported: this torch has no {np.dtype(dtype).name} tensors; pass the output")
        f = torch.zeros if zero else torch.empty
        return f(shape, dtype=tdt, device=torch.device("cuda", device))
    if mod == "cupy":
        import cupy
        with cupy.cuda.Device(device):
            return (cupy.zeros if zero else cupy.empty)(shape, dtype=dtype)
    raise Error("invalid_argument: pass the output arrays (only torch and cupy outputs are allocated for you)")


def _cuda_in(x: Any, dtype: Any, contiguous: bool = True) -> Any:
    """A CUDA input in `dtype` (torch tensors are converted on the device,
    without a copy when they already match; others must match)."""
    if x is None or not _is_torch(x):
        return x
    import torch
    tdt = {np.int32: torch.int32, np.int64: torch.int64, np.float32: torch.float32,
           np.float64: torch.float64, np.uint8: torch.uint8}[dtype]
    x = x if x.dtype == tdt else x.to(tdt)
    return x.contiguous() if contiguous else x


def _workspace(nbytes: int, like: Any, device: int, handle: int, workspace: Any) -> Any:
    """The caller's workspace, or one from torch's caching allocator on the
    call's stream (so it is reused, not malloc'ed, call after call); None
    lets the binding take stream-ordered memory (cudaMallocAsync)."""
    if workspace is not None or nbytes == 0 or not _is_torch(like):
        return workspace
    import torch
    dev = torch.device("cuda", device)
    if handle == torch.cuda.current_stream(dev).cuda_stream:
        return torch.empty(nbytes, dtype=torch.uint8, device=dev)
    with torch.cuda.stream(torch.cuda.ExternalStream(handle, device=dev)):
        return torch.empty(nbytes, dtype=torch.uint8, device=dev)


def _to_host(x: Any) -> np.ndarray:
    """A host copy of a CUDA array (after the caller synchronized)."""
    if _is_torch(x):
        return x.cpu().numpy()
    if hasattr(x, "get"):
        return np.asarray(x.get())
    raise Error("invalid_argument: cannot read this CUDA array back (use torch or cupy)")


def _np_dtype_of_torch(t: Any) -> Any:
    import torch
    return {torch.int32: np.int32, torch.int64: np.int64, torch.float32: np.float32,
            torch.float64: np.float64, torch.uint8: np.uint8, torch.bool: np.bool_}.get(t.dtype)


def _np(x: Any) -> np.ndarray:
    """A numpy view of a host array (torch through DLPack, no copy)."""
    return np.from_dlpack(x) if _is_torch(x) else np.asarray(x)


def _inp(x: Any, dtype: Any, name: str) -> Any:
    """An input as a C-contiguous array of `dtype`, without a copy when it
    already is one (numpy or torch, read in place through DLPack)."""
    if x is None:
        return None
    if type(x) is np.ndarray and x.dtype == dtype and x.flags.c_contiguous:
        return x  # fast path: already what the binding reads in place
    _check_host(x, name)
    if _is_torch(x):
        import torch
        tdt = {np.int32: torch.int32, np.int64: torch.int64, np.float32: torch.float32,
               np.float64: torch.float64, np.uint8: torch.uint8, np.uint32: None, np.uint64: None}.get(dtype)
        if tdt is not None:
            return x.to(tdt).contiguous()
        x = np.from_dlpack(x.contiguous())
    return np.ascontiguousarray(x, dtype=dtype)


def _strided(x: Any, dtype: Any, name: str) -> Any:
    """An input matrix read in place with any strides when its dtype is right."""
    if x is None:
        return None
    _check_host(x, name)
    if _is_torch(x):
        import torch
        tdt = {np.float32: torch.float32, np.float64: torch.float64}[dtype]
        return x if x.dtype == tdt else x.to(tdt)
    x = np.asarray(x)
    return x if x.dtype == dtype else x.astype(dtype)


def _out(out: Any, like: Any, shape: tuple, dtype: Any, name: str) -> Any:
    """The caller's output (checked to be on the host), or a new array."""
    if out is not None:
        _check_host(out, name)
        return out
    if _is_torch(like):
        import torch
        tdt = {np.int32: torch.int32, np.int64: torch.int64, np.float32: torch.float32,
               np.float64: torch.float64, np.uint8: torch.uint8, np.bool_: torch.bool}.get(dtype)
        if tdt is not None:
            return torch.empty(shape, dtype=tdt)
    return np.empty(shape, dtype=dtype)


def _doc(fn: Any, key: str) -> Any:
    extra = _DOCS.get(key)
    if extra:
        fn.__doc__ = (fn.__doc__ or "").rstrip() + "\n\n" + extra
    return fn


# ---------------------------------------------------------------------------
# trees
# ---------------------------------------------------------------------------

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
    build_tree_masks kernel on `stream` (asynchronous; tree_status is valid
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


# ---------------------------------------------------------------------------
# verification
# ---------------------------------------------------------------------------

class VerifyResult(NamedTuple):
    """One request's outcome: `accepted` draft nodes on the path (root first)
    ending at `last_node`; the emitted tokens are those nodes' tokens then
    `next_token`. `path` and `tokens` are views (length accepted + 1) of the
    output arrays, so they share the caller's memory when outputs were given."""

    accepted: int
    last_node: int
    next_token: int
    path: Any
    tokens: Any


def _max_depth_plus_one(p: np.ndarray) -> int:
    d = np.zeros(len(p), dtype=np.int64)
    for i in range(1, len(p)):
        pi = int(p[i])
        d[i] = d[pi] + 1 if 0 <= pi < i else 0
    return int(d.max(initial=0)) + 1


def verify_tree(parent: Any, tokens: Any, p: Any, q: Any = None, *, mode: int = Mode.SAMPLED_IID, seed: int = 0,
                request: int = 0, round: int = 0, uniforms: Any = None, typical_epsilon: float = 0.09,
                typical_delta: float = 0.3, normalization_tolerance: float = 1e-3, path: Any = None,
                tokens_out: Any = None, workspace: Any = None, stream: Any = None) -> VerifyResult:
    """Verifies one token tree against the target rows p (N x V, any strides;
    probabilities, or logits in greedy mode) and, for the sampled modes, the
    draft rows q (row u = the distribution that produced u's children).
    Randomness: the keyed Philox streams (seed, request, round), or the
    caller's `uniforms` (N x draws doubles in [0, 1); draw 0 = emission at a
    node, draw 1 + j = test of its j-th child). `path` and `tokens_out` (int32,
    capacity >= depth + 1) receive the accepted path and emitted tokens.
    CUDA arrays: the batched kernel with one request on `stream`, then a
    wait for the stream to read the result (use verify_batch to stay
    asynchronous); BLOCK and TRAVERSAL modes are host only."""
    dev = _where("parent tokens p q uniforms path tokens_out workspace", parent, tokens, p, q, uniforms, path,
                 tokens_out, workspace)
    if dev is not None:
        n = int(parent.shape[0])
        if path is None:
            path = _cuda_empty(parent, (n,), np.int32, dev)
        if tokens_out is None:
            tokens_out = _cuda_empty(parent, (n,), np.int32, dev)
        return _verify_one_cuda(dev, n, parent, tokens, p, q, mode, seed, request, round, uniforms,
                                typical_epsilon, typical_delta, normalization_tolerance, path, tokens_out,
                                workspace, stream)
    par = _inp(parent, np.int32, "parent")
    tok = _inp(tokens, np.int32, "tokens")
    pp = _strided(p, np.float32, "p")
    qq = _strided(q, np.float32, "q")
    u = _inp(uniforms, np.float64, "uniforms")
    cap = _max_depth_plus_one(_np(par)) if (path is None or tokens_out is None) else 0
    path = _out(path, parent, (cap,), np.int32, "path")
    tokens_out = _out(tokens_out, parent, (cap,), np.int32, "tokens_out")
    a, last, nxt = _core.verify_tree(par, tok, pp, qq, int(mode), int(seed), int(request), int(round),
                                     float(typical_epsilon), float(typical_delta), float(normalization_tolerance),
                                     u, path, tokens_out)
    return VerifyResult(a, last, nxt, path[:a + 1], tokens_out[:a + 1])


def verify_chain(drafts: Any, p: Any, q: Any = None, *, mode: int = Mode.SAMPLED_IID, seed: int = 0,
                 request: int = 0, round: int = 0, uniforms: Any = None, typical_epsilon: float = 0.09,
                 typical_delta: float = 0.3, normalization_tolerance: float = 1e-3,
                 tokens_out: Any = None, workspace: Any = None, stream: Any = None) -> VerifyResult:
    """Verifies a chain of gamma drafts (Leviathan/Chen speculative sampling in
    SAMPLED_IID): p has gamma + 1 rows, q at least gamma. Node ids in the
    random keys are those of the same chain as a tree, so verify_chain and
    verify_tree agree token for token. Returns path = arange(accepted + 1).
    CUDA arrays: as verify_tree (the chain is verified as a path tree; q,
    when read, needs gamma + 1 rows there, the last one unread)."""
    dev = _where("drafts p q uniforms tokens_out workspace", drafts, p, q, uniforms, tokens_out, workspace)
    if dev is not None:
        g = int(drafts.shape[0])
        d = _cuda_in(drafts, np.int32)
        parent = _on_device(np.arange(-1, g, dtype=np.int32), np.int32, d, dev)
        tok = _cuda_empty(d, (g + 1,), np.int32, dev, zero=True)  # root token 0 (never read), then the drafts
        tok[1:] = d
        path = _cuda_empty(d, (g + 1,), np.int32, dev)
        if tokens_out is None:
            tokens_out = _cuda_empty(d, (g + 1,), np.int32, dev)
        return _verify_one_cuda(dev, g + 1, parent, tok, p, q, mode, seed, request, round, uniforms,
                                typical_epsilon, typical_delta, normalization_tolerance, path, tokens_out,
                                workspace, stream)
    d = _inp(drafts, np.int32, "drafts")
    pp = _strided(p, np.float32, "p")
    qq = _strided(q, np.float32, "q")
    u = _inp(uniforms, np.float64, "uniforms")
    tokens_out = _out(tokens_out, drafts, (len(d) + 1,), np.int32, "tokens_out")
    a, last, nxt = _core.verify_chain(d, pp, qq, int(mode), int(seed), int(request), int(round),
                                      float(typical_epsilon), float(typical_delta), float(normalization_tolerance),
                                      u, tokens_out)
    return VerifyResult(a, last, nxt, np.arange(a + 1, dtype=np.int32), tokens_out[:a + 1])


def philox_uniforms(nodes: int, draws: int, *, seed: int = 0, request: int = 0, round: int = 0,
                    purpose: str = "verify", out: Any = None) -> Any:
    """The keyed Philox stream's uniforms in the caller-uniforms layout
    (nodes x draws float64, out[node, draw]): what verification (purpose
    "verify": draw 0 the 53-bit emission uniform, draw d >= 1 the 24-bit
    acceptance uniform) or a sampling tree builder (purpose "draft")
    reads for (seed, request, round) when no `uniforms` are given. Passing
    them back as `uniforms=` reproduces the seeded run exactly; an engine
    that owns its randomness passes its own numbers in the same layout."""
    if purpose not in ("verify", "draft"):
        raise Error('invalid_argument: purpose must be "verify" or "draft"')
    if int(nodes) < 0 or int(draws) < 0:
        raise Error("invalid_argument: nodes and draws must be >= 0")
    o = _out(out, None, (int(nodes), int(draws)), np.float64, "out")
    if tuple(o.shape) != (int(nodes), int(draws)):
        raise Error("size_mismatch: out must be nodes x draws")
    _core.philox_uniforms(int(seed), int(request), int(round), purpose == "draft", o)
    return o


def verify_batch(offsets: Any, parent: Any, tokens: Any, p: Any, q: Any = None, *, modes: Any = Mode.SAMPLED_IID,
                 seeds: Any = 0, requests: Any = None, rounds: Any = 0, uniforms: Any = None,
                 typical_epsilon: float = 0.09, typical_delta: float = 0.3, normalization_tolerance: float = 1e-3,
                 paths: Any = None, tokens_out: Any = None, results: Any = None,
                 accepted_per_depth: Any = None, workspace: Any = None, stream: Any = None) -> tuple:
    """Verifies R ragged requests (request r owns nodes and rows
    offsets[r]..offsets[r+1], local parent ids), each with its own mode and
    Philox key (scalars broadcast; requests default to 0..R-1). Returns
    (paths R x L, tokens R x L, results R x 4 = accepted, last_node,
    next_token, status code). A request with bad inputs gets its code in
    results and its rows untouched; batch-level errors raise.
    CUDA arrays: the verify_batch kernel on `stream`, asynchronous (results
    are valid once the stream gets there). `offsets` may stay on the host
    (they are uploaded with the per-request settings, no sync) or be on the
    device (then they are read back first: one sync). `workspace`: a CUDA
    uint8 array of cuda_verify_batch_workspace_size bytes, 256-aligned;
    default: torch's caching allocator (torch inputs) or cudaMallocAsync.
    accepted_per_depth: int64 counters (added to, not reset). BLOCK and
    TRAVERSAL modes get `unsupported` in their result code."""
    dev = _where("parent tokens p q uniforms paths tokens_out results accepted_per_depth workspace", parent, tokens, p,
                 q, uniforms, paths, tokens_out, results, accepted_per_depth, workspace)
    if dev is not None:
        return _verify_batch_cuda(dev, offsets, parent, tokens, p, q, modes, seeds, requests, rounds, uniforms,
                                  typical_epsilon, typical_delta, normalization_tolerance, paths, tokens_out,
                                  results, accepted_per_depth, workspace, stream)
    off = _inp(offsets, np.int32, "offsets")
    R = max(len(off) - 1, 0)

    def per_request(v: Any, dtype: Any) -> np.ndarray:
        a = np.asarray(v, dtype=dtype)
        return np.ascontiguousarray(np.broadcast_to(a, (R,)) if a.ndim == 0 else a)

    m = per_request(modes, np.int32)
    s = per_request(seeds, np.uint64)
    rq = per_request(np.arange(R) if requests is None else requests, np.uint32)
    rd = per_request(rounds, np.uint32)
    par = _inp(parent, np.int32, "parent")
    tok = _inp(tokens, np.int32, "tokens")
    pp = _strided(p, np.float32, "p")
    qq = _strided(q, np.float32, "q")
    u = _inp(uniforms, np.float64, "uniforms")
    if paths is None or tokens_out is None:
        L = 1
        pa = _np(par)
        for r in range(R):
            L = max(L, _max_depth_plus_one(pa[off[r]:off[r + 1]]))
    paths = _out(paths, parent, (R, L), np.int32, "paths") if paths is None else paths
    tokens_out = _out(tokens_out, parent, (R, L), np.int32, "tokens_out") if tokens_out is None else tokens_out
    if results is None:
        results = _out(None, parent, (R, 4), np.int32, "results")
        results[:] = 0
    _core.verify_batch(off, par, tok, pp, qq, m, s, rq, rd, float(typical_epsilon), float(typical_delta),
                       float(normalization_tolerance), u, paths, tokens_out, results, accepted_per_depth)
    return paths, tokens_out, results


def _per_request(v: Any, R: int, dtype: Any) -> np.ndarray:
    a = np.asarray(_to_host(v) if _device_of(v) is not None else v, dtype=dtype)
    return np.ascontiguousarray(np.broadcast_to(a, (R,)) if a.ndim == 0 else a)


def _verify_batch_cuda(dev: int, offsets: Any, parent: Any, tokens: Any, p: Any, q: Any, modes: Any, seeds: Any,
                       requests: Any, rounds: Any, uniforms: Any, eps: float, delta: float, tol: float,
                       paths: Any, tokens_out: Any, results: Any, accepted_per_depth: Any, workspace: Any,
                       stream: Any) -> tuple:
    on_dev = _device_of(offsets) is not None
    if on_dev and _device_of(offsets) != dev:
        raise Error("invalid_argument: offsets are on another CUDA device than the other arrays")
    off = _cuda_in(offsets, np.int32) if on_dev else _inp(offsets, np.int32, "offsets")
    R = max(int(off.shape[0]) - 1, 0)
    par = _cuda_in(parent, np.int32)
    # Sizes for what is allocated here: device offsets are read back for them.
    need_sizes = paths is None or tokens_out is None or (workspace is None and _is_torch(par))
    off_h = _np(off) if not on_dev else (_to_host(off) if need_sizes else None)
    tok = _cuda_in(tokens, np.int32)
    pp = _cuda_in(p, np.float32, contiguous=False)
    qq = _cuda_in(q, np.float32, contiguous=False)
    u = _cuda_in(uniforms, np.float64)
    largest = 1
    if off_h is not None and len(off_h) > 1:
        largest = max(int(np.diff(off_h.astype(np.int64)).max()), 1)
    if paths is None or tokens_out is None:
        L = largest  # a request of n nodes is at most n - 1 deep
        paths = _cuda_empty(par, (R, L), np.int32, dev) if paths is None else paths
        tokens_out = _cuda_empty(par, (R, L), np.int32, dev) if tokens_out is None else tokens_out
    if results is None:
        results = _cuda_empty(par, (R, 4), np.int32, dev, zero=True)
    handle = _stream_handle(stream, dev)
    vocab = int(pp.shape[1])
    if workspace is None and _is_torch(par):
        nbytes = _core.cuda_verify_batch_workspace_size(R, vocab, largest, not on_dev)
        workspace = _workspace(nbytes, par, dev, handle, None)
    rq = np.arange(R) if requests is None else requests
    _core.cuda_verify_batch(off, par, tok, pp, qq, _per_request(modes, R, np.int32), _per_request(seeds, R, np.uint64),
                            _per_request(rq, R, np.uint32), _per_request(rounds, R, np.uint32), float(eps),
                            float(delta), float(tol), u, paths, tokens_out, results, accepted_per_depth, workspace,
                            handle)
    return paths, tokens_out, results


def _verify_one_cuda(dev: int, n: int, parent: Any, tokens: Any, p: Any, q: Any, mode: int, seed: int, request: int,
                     round: int, uniforms: Any, eps: float, delta: float, tol: float, path: Any, tokens_out: Any,
                     workspace: Any, stream: Any) -> VerifyResult:
    off = np.array([0, n], dtype=np.int32)
    res = _cuda_empty(path, (1, 4), np.int32, dev, zero=True)
    _verify_batch_cuda(dev, off, parent, tokens, p, q, int(mode), int(seed), [int(request)], int(round), uniforms,
                       eps, delta, tol, path[None, :], tokens_out[None, :], res, None, workspace, stream)
    _core.cuda_synchronize(_stream_handle(stream, dev))
    a, last, nxt, code = (int(v) for v in _to_host(res)[0])
    if code != 0:
        raise Error(f"{_core.status_code_name(code)}: verification failed on the device (the host path gives "
                    "the detailed message)")
    return VerifyResult(a, last, nxt, path[:a + 1], tokens_out[:a + 1])


# ---------------------------------------------------------------------------
# caches
# ---------------------------------------------------------------------------

_EMPTY_I32 = np.zeros(0, dtype=np.int32)


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


def commit_kv(caches: Sequence[Any], layout: str, cache_len: Any, keep: Any, keep_offsets: Any = None, *,
              block_table: Any = None, blocks_used: Any = None, status: Any = None, sync: bool = True,
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
    list is uploaded). It validates on the device and writes nothing unless
    every check passed; with sync=True (default) the call waits for the
    stream and raises on failure; with sync=False it returns at once and the
    result lands in `status` (a 1-element int64 CUDA array, check it with
    kv_commit_check after synchronizing).
    Host caches: the Python lock is released while bytes move; `threads`
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
                               sync, workspace, stream)
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
    _core.commit_kv(cs, layout, cl, ko, kp, bt, bu, int(threads))


def _on_device(x: Any, dtype: Any, like: Any, dev: int) -> Any:
    """A CUDA array of `dtype`: torch tensors converted on the device, host
    values uploaded with `like`'s library."""
    if _device_of(x) is not None:
        return _cuda_in(x, dtype)
    h = np.ascontiguousarray(np.asarray(_np(x) if _is_torch(x) else x, dtype=dtype).reshape(-1))
    if _is_torch(like):
        import torch
        return torch.from_numpy(h).to(torch.device("cuda", dev))
    if type(like).__module__.split(".")[0] != "cupy":
        raise Error("invalid_argument: host index arrays are uploaded only next to torch or cupy tensors; "
                    "pass them in CUDA memory")
    import cupy
    with cupy.cuda.Device(dev):
        return cupy.asarray(h)


def _commit_kv_cuda(dev: int, cs: list, layout: str, cache_len: Any, keep: Any, keep_offsets: Any,
                    block_table: Any, blocks_used: Any, status: Any, sync: bool, workspace: Any,
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
    workspace = _workspace(int(_core.cuda_commit_kv_workspace_size(len(cs))), like, dev, handle, workspace)
    _core.cuda_commit_kv(cs, layout, cl, ko, kp, bt, bu, status, workspace, handle, bool(sync))


def kv_commit_check(status: Any) -> None:
    """Raises the error a CUDA commit_kv(sync=False) recorded in `status`
    (read it after synchronizing the stream); returns if it succeeded."""
    word = int(np.asarray(_to_host(status) if _device_of(status) is not None else status).reshape(-1)[0])
    _core.kv_commit_check(word & 0xFFFFFFFFFFFFFFFF)


# ---------------------------------------------------------------------------
# SSM
# ---------------------------------------------------------------------------

_SCAN_METHODS = {"automatic": 0, "recurrent": 1, "dual": 2}


def _ssm_dtype(x: Any) -> Any:
    s = str(getattr(x, "dtype", np.asarray(x).dtype))
    return np.float64 if s in ("float64", "torch.float64") else np.float32


def tree_scan(parent: Any, x: Any, dt: Any, A: Any, B: Any, C: Any, *, D: Any = None, dt_bias: Any = None,
              z: Any = None, h0: Any = None, dt_softplus: bool = True, dt_min: float = 0.0,
              dt_max: float = math.inf, y: Any = None, states: Any = None, method: str = "automatic",
              status: Any = None, sync: bool = True, workspace: Any = None, stream: Any = None) -> Any:
    """Tree-masked selective scan (Mamba2 conventions): x [N, H, P], dt [N, H],
    A [H], B and C [N, G, S], optional D [H, P] or [H, 1], dt_bias [H], gate z
    [N, H, P], initial state h0 [H, P, S]. Writes y [N, H, P] and, when
    `states` [N, H, P, S] is given, every node's state (recurrent form).
    float32 or float64 (the dtype of x). Returns y.
    CUDA arrays: the recurrent tree_scan kernel on `stream` (`method` is
    ignored; results equal the host's up to float rounding). The kernel
    checks the parent links; with sync=True (default) the call waits and
    raises on a bad tree, with sync=False the fault code (0 = ok) lands in
    `status` (a 1-element int32 CUDA array). Input values (NaN, A > 0) are
    not checked on the device."""
    dev = _where("parent x dt A B C D dt_bias z h0 y states status workspace", parent, x, dt, A, B, C, D, dt_bias, z,
                 h0, y, states, status, workspace)
    if dev is not None:
        dt_ = _ssm_dtype(x)
        y = _cuda_empty(x, tuple(int(v) for v in x.shape), dt_, dev) if y is None else y
        par = _cuda_in(parent, np.int32)
        handle = _stream_handle(stream, dev)
        sz = (_core.cuda_tree_scan_workspace_size_f64 if dt_ == np.float64 else
              _core.cuda_tree_scan_workspace_size_f32)(int(x.shape[0]), int(x.shape[1]), int(x.shape[2]),
                                                       int(B.shape[2]), states is not None)
        workspace = _workspace(int(sz), x, dev, handle, workspace)
        c = lambda a: _cuda_in(a, dt_, contiguous=False)  # noqa: E731
        (_core.cuda_tree_scan_f64 if dt_ == np.float64 else _core.cuda_tree_scan_f32)(
            par, c(x), c(dt), c(A), c(B), c(C), c(D), c(dt_bias), c(z), c(h0), bool(dt_softplus), float(dt_min),
            float(dt_max), y, states, status, workspace, handle, bool(sync))
        return y
    dt_ = _ssm_dtype(x)
    f = _core.tree_scan_f64 if dt_ == np.float64 else _core.tree_scan_f32
    xs = _strided(x, dt_, "x")
    shape = tuple(int(v) for v in xs.shape)
    y = _out(y, x, shape, dt_, "y")
    if states is not None:
        _check_host(states, "states")
    if method not in _SCAN_METHODS:
        raise Error("invalid_argument: method must be automatic, recurrent or dual")
    f(_inp(parent, np.int32, "parent"), xs, _strided(dt, dt_, "dt"), _strided(A, dt_, "A"), _strided(B, dt_, "B"),
      _strided(C, dt_, "C"), _strided(D, dt_, "D"), _strided(dt_bias, dt_, "dt_bias"), _strided(z, dt_, "z"),
      _strided(h0, dt_, "h0"), bool(dt_softplus), float(dt_min), float(dt_max), y, states, _SCAN_METHODS[method])
    return y


def ssm_commit_path(parent: Any, x: Any, dt: Any, A: Any, B: Any, C: Any, path: Any, *, dt_bias: Any = None,
                    h0: Any = None, dt_softplus: bool = True, dt_min: float = 0.0, dt_max: float = math.inf,
                    out: Any = None) -> Any:
    """SSM state after accepting `path` (root first), rebuilt from this
    round's cached x, dt, B (and h0) in O(depth) steps. `out` [H, P, S] may be
    h0 itself (in-place commit). Returns the state."""
    dt_ = _ssm_dtype(x)
    f = _core.ssm_commit_path_f64 if dt_ == np.float64 else _core.ssm_commit_path_f32
    xs = _strided(x, dt_, "x")
    Bs = _strided(B, dt_, "B")
    o = _out(out, x, (int(xs.shape[1]), int(xs.shape[2]), int(Bs.shape[2])), dt_, "out")
    f(_inp(parent, np.int32, "parent"), xs, _strided(dt, dt_, "dt"), _strided(A, dt_, "A"), Bs,
      _strided(C, dt_, "C"), _strided(dt_bias, dt_, "dt_bias"), _strided(h0, dt_, "h0"), bool(dt_softplus),
      float(dt_min), float(dt_max), _inp(path, np.int32, "path"), o)
    return o


def ssm_replay_masked(parent: Any, x: Any, dt: Any, A: Any, B: Any, C: Any, mask: Any, *, dt_bias: Any = None,
                      h0: Any = None, dt_softplus: bool = True, dt_min: float = 0.0, dt_max: float = math.inf,
                      out: Any = None) -> Any:
    """Activation replay: the SSM state after the nodes set in `mask` (one
    packed uint64 row, e.g. the accepted node's row of packed_mask), visiting
    the tree in storage order; the same state as ssm_commit_path on that
    path. `out` [H, P, S] may be h0 itself. Returns the state."""
    dt_ = _ssm_dtype(x)
    f = _core.ssm_replay_masked_f64 if dt_ == np.float64 else _core.ssm_replay_masked_f32
    xs = _strided(x, dt_, "x")
    Bs = _strided(B, dt_, "B")
    o = _out(out, x, (int(xs.shape[1]), int(xs.shape[2]), int(Bs.shape[2])), dt_, "out")
    m = _np(mask) if _is_torch(mask) else np.asarray(mask)
    f(_inp(parent, np.int32, "parent"), xs, _strided(dt, dt_, "dt"), _strided(A, dt_, "A"), Bs,
      _strided(C, dt_, "C"), _strided(dt_bias, dt_, "dt_bias"), _strided(h0, dt_, "h0"), bool(dt_softplus),
      float(dt_min), float(dt_max), np.ascontiguousarray(m.view(np.uint64) if m.dtype == np.int64 else m,
                                                         dtype=np.uint64), o)
    return o


def tree_conv1d(parent: Any, x: Any, weight: Any, *, bias: Any = None, conv_state: Any = None, silu: bool = False,
                out: Any = None, status: Any = None, sync: bool = True, workspace: Any = None,
                stream: Any = None) -> Any:
    """Tree causal conv1d (Mamba's short convolution along each root path):
    x [N, channels], weight [channels, W] (column W - 1 multiplies the node
    itself), optional bias [channels] and conv_state [channels, L >= W - 1]
    (newest column last, read where a path runs out). float32 or float64.
    Returns out [N, channels]. CUDA arrays: the tree_conv1d kernel on
    `stream` (status / sync as in tree_scan)."""
    dev = _where("parent x weight bias conv_state out status workspace", parent, x, weight, bias, conv_state, out,
                 status, workspace)
    dt_ = _ssm_dtype(x)
    if dev is not None:
        out = _cuda_empty(x, (int(x.shape[0]), int(x.shape[1])), dt_, dev) if out is None else out
        handle = _stream_handle(stream, dev)
        workspace = _workspace(int(_core.cuda_tree_conv1d_workspace_size()), x, dev, handle, workspace)
        c = lambda a: _cuda_in(a, dt_, contiguous=False)  # noqa: E731
        (_core.cuda_tree_conv1d_f64 if dt_ == np.float64 else _core.cuda_tree_conv1d_f32)(
            _cuda_in(parent, np.int32), c(x), c(weight), c(bias), c(conv_state), bool(silu), out, status, workspace,
            handle, bool(sync))
        return out
    xs = _strided(x, dt_, "x")
    o = _out(out, x, (int(xs.shape[0]), int(xs.shape[1])), dt_, "out")
    (_core.tree_conv1d_f64 if dt_ == np.float64 else _core.tree_conv1d_f32)(
        _inp(parent, np.int32, "parent"), xs, _strided(weight, dt_, "weight"), _strided(bias, dt_, "bias"),
        _strided(conv_state, dt_, "conv_state"), bool(silu), o)
    return o


def tree_conv1d_commit_state(parent: Any, x: Any, path: Any, state: Any) -> Any:
    """Conv-state commit after accepting `path` (root first): `state`
    [channels, L] then holds the newest L columns of its old columns followed
    by x[path[0]], ..., x[path[-1]]. In place (host arrays). Returns state."""
    dt_ = _ssm_dtype(x)
    _check_host(state, "state")
    (_core.tree_conv1d_commit_f64 if dt_ == np.float64 else _core.tree_conv1d_commit_f32)(
        _inp(parent, np.int32, "parent"), _strided(x, dt_, "x"), _inp(path, np.int32, "path"), state)
    return state


# ---------------------------------------------------------------------------
# drafting and planning
# ---------------------------------------------------------------------------

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
    kernel on `stream`, asynchronous (offsets on the host are uploaded; on
    the device they are read back first)."""
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


# ---------------------------------------------------------------------------
# peer formats (SGLang / EAGLE / Medusa) and planning models
# ---------------------------------------------------------------------------

AcceptanceCounts = _core.AcceptanceCounts
MemoryConfig = _core.MemoryConfig


class Plan(NamedTuple):
    """One round's plan from :class:`RoundPlanner` (loop/planner.hpp)."""

    shape: np.ndarray  #: parent array of the tree to draft (int32, root -1)
    min_path_probability: np.ndarray  #: per depth: do not expand a node whose draft path probability is below
    kind: str  #: "autoregressive", "chain", "widths", "optimal" or "fixed"
    nodes: int  #: planned nodes, root included
    depth: int  #: planned depth
    expected_tokens: float  #: predicted tokens of the round (accepted drafts + 1)
    predicted_seconds: float  #: predicted round time


class RoundPlanner:
    """Sizes every speculative round from measured cost and acceptance.

    An engine with its own loop calls :meth:`next` before drafting (draft the
    returned shape; a one-node shape is a plain decoding step) and
    :meth:`observe` after verification with its own step times, e.g. from
    ``torch.cuda.Event`` timers. Options are those of ``planner_options``
    (max_nodes, max_depth, max_children, forget, prior_weight, prior_accept,
    replan_every, cost_window, explore, prior_node_cost, probe_every, prune). Lossless:
    the plan never depends on the round's target rows (docs/loop.md).
    """

    def __init__(self, **options: Any) -> None:
        self._p = _core.RoundPlanner(**options)

    def next(self) -> Plan:
        """The plan of the next round."""
        shape, thr, kind, nodes, depth, tokens, seconds = self._p.next()
        return Plan(np.asarray(shape, dtype=np.int32), np.asarray(thr, dtype=np.float64), kind, nodes, depth, tokens,
                    seconds)

    def observe(self, parent: Any, path: Any, forward_nodes: int, forward_seconds: float, *, drafter_calls: int = 0,
                drafted_nodes: int = 0, drafter_seconds: float = 0.0, other_seconds: float = 0.0,
                draft_prob: Any = None) -> None:
        """Records one round: the drafted tree's parents, the accepted path
        from the root (accepted drafts + 1 node ids), the target pass size and
        time, the drafter's calls, nodes and time, the rest of the round's
        time, and optionally each node's draft probability."""
        self._p.observe(np.ascontiguousarray(parent, dtype=np.int32), np.ascontiguousarray(path, dtype=np.int32),
                        forward_nodes, forward_seconds, drafter_calls, drafted_nodes, drafter_seconds, other_seconds,
                        None if draft_prob is None else np.ascontiguousarray(draft_prob, dtype=np.float32))

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

    def drafter_seconds(self, levels: int, nodes: int) -> float:
        """Estimated drafter time of a round."""
        return self._p.drafter_seconds(levels, nodes)

    def acceptance(self, depth: int, rank: int) -> float:
        """Estimated acceptance of a rank-`rank` child at `depth`."""
        return self._p.acceptance(depth, rank)

    @property
    def rounds(self) -> int:
        """Rounds observed."""
        return self._p.rounds


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


def _sglang_outputs(candidates: Any, target_rows: int, num_speculative_tokens: int, predicts: Any,
                    accept_index: Any, accept_token_num: Any) -> tuple:
    B = int(np.shape(candidates)[0])
    if predicts is None:
        predicts = np.zeros(target_rows, np.int32)
    if accept_index is None:
        accept_index = np.full((B, int(num_speculative_tokens)), -1, np.int32)
    if accept_token_num is None:
        accept_token_num = np.zeros(B, np.int32)
    for a, name in ((predicts, "predicts"), (accept_index, "accept_index"), (accept_token_num, "accept_token_num")):
        _check_host(a, name)
    return predicts, accept_index, accept_token_num


_CODE_OF_NAME: dict = {}


def _code_of(e: Exception) -> int:
    """The status code named at the start of a specdec.Error message."""
    if not _CODE_OF_NAME:
        _CODE_OF_NAME.update({_core.status_code_name(i): i for i in range(1, 128)})
    return _CODE_OF_NAME.get(str(e).split(":", 1)[0], _CODE_OF_NAME.get("invalid_argument", 1))


def _failed_request(e: Exception) -> Optional[int]:
    """The request index of a per-request error ("... (index r)"), None for
    a whole-call error."""
    msg = str(e)
    if not msg.endswith(")") or "(index " not in msg:
        return None
    return int(msg.rsplit("(index ", 1)[1][:-1])


def _host_request_codes(B: int, request_status: Any, run: Any) -> None:
    """Runs a host entry point that stops at its first failing request
    (requests before it written, the failing one untouched) request by
    request from there: run(r0) verifies requests r0.. and raises on the
    first failure with its index relative to r0. Codes land in
    request_status; whole-call errors raise."""
    codes = _np(request_status)
    r0 = 0
    while r0 < B:
        try:
            run(r0)
            codes[r0:B] = 0
            return
        except Error as e:
            k = _failed_request(e)
            if k is None:
                raise
            codes[r0:r0 + k] = 0
            codes[r0 + k] = _code_of(e)
            r0 += k + 1


def _sglang_common(B: int, accept_token_num: Any, accepted_per_depth: Any, request_status: Any,
                   launch_host: Any) -> None:
    """Host side of SGLang's two entry points: the batch, or request by
    request when the caller wants per-request codes; then the per-depth
    counters of the requests that were verified."""
    if request_status is None:
        launch_host(0)
        ok = slice(None)
    else:
        _check_host(request_status, "request_status")
        _host_request_codes(B, request_status, launch_host)
        ok = _np(request_status)[:B] == 0
    if accepted_per_depth is not None:
        _check_host(accepted_per_depth, "accepted_per_depth")
        count_acceptance_per_depth(_np(accept_token_num)[:B][ok], accepted_per_depth)


def sglang_verify_tree_greedy(candidates: Any, retrive_index: Any, retrive_next_token: Any,
                              retrive_next_sibling: Any, target_predict: Any, num_speculative_tokens: int, *,
                              predicts: Any = None, accept_index: Any = None, accept_token_num: Any = None,
                              accepted_per_depth: Any = None, request_status: Any = None, workspace: Any = None,
                              stream: Any = None) -> tuple:
    """SGLang's verify_tree_greedy on SGLang's own batch layout: int64
    [batch][num_draft_tokens] candidates / retrive_index /
    retrive_next_token / retrive_next_sibling, the target's argmax id of
    every row (indexed by retrive_index), int32 outputs. Returns
    (predicts, accept_index, accept_token_num). Without request_status, the
    first failing request raises (requests before it written); with it
    (int32 [batch]) each request's code lands there and a failing request's
    outputs stay untouched. accepted_per_depth: int64 counters, added to.
    CUDA arrays: the kernel (one thread per request) on `stream`;
    asynchronous when request_status is given, else the call waits and
    raises on a failed request."""
    dev = _where("candidates retrive_index retrive_next_token retrive_next_sibling target_predict predicts "
                 "accept_index accept_token_num accepted_per_depth request_status workspace", candidates,
                 retrive_index, retrive_next_token, retrive_next_sibling, target_predict, predicts, accept_index,
                 accept_token_num, accepted_per_depth, request_status, workspace)
    if dev is not None:
        c = _sglang_tree_cuda((candidates, retrive_index, retrive_next_token, retrive_next_sibling))
        B, tp = int(c[0].shape[0]), _cuda_in(target_predict, np.int64)
        outs = _sglang_outputs_cuda(c[0], dev, B, int(tp.shape[0]), num_speculative_tokens, predicts, accept_index,
                                    accept_token_num)

        def launch(st: Any, handle: int) -> None:
            ws = _workspace(int(_core.cuda_sglang_tree_workspace_size(B, int(c[0].shape[1]))), c[0], dev, handle,
                            workspace)
            _core.cuda_sglang_verify_tree_greedy(*c, tp, int(num_speculative_tokens), *outs, accepted_per_depth,
                                                 st, ws, handle)
        _sglang_launch(dev, c[0], B, request_status, stream, "sglang_verify_tree_greedy", launch)
        return outs
    c = [_inp(a, np.int64, n) for a, n in ((candidates, "candidates"), (retrive_index, "retrive_index"),
                                           (retrive_next_token, "retrive_next_token"),
                                           (retrive_next_sibling, "retrive_next_sibling"))]
    tp = _inp(target_predict, np.int64, "target_predict")
    outs = _sglang_outputs(c[0], len(tp), num_speculative_tokens, predicts, accept_index, accept_token_num)
    B = int(c[0].shape[0])

    def run(r0: int) -> None:
        _core.sglang_verify_tree_greedy(*(a[r0:] for a in c), tp, int(num_speculative_tokens), outs[0],
                                        outs[1][r0:], outs[2][r0:])
    _sglang_common(B, outs[2], accepted_per_depth, request_status, run)
    return outs


def sglang_tree_sampling_target_only(candidates: Any, retrive_index: Any, retrive_next_token: Any,
                                     retrive_next_sibling: Any, target_probs: Any, coins: Any, final_coins: Any,
                                     num_speculative_tokens: int, *, threshold_single: float = 1.0,
                                     threshold_acc: float = 1.0, predicts: Any = None, accept_index: Any = None,
                                     accept_token_num: Any = None, accepted_per_depth: Any = None,
                                     request_status: Any = None, workspace: Any = None,
                                     stream: Any = None) -> tuple:
    """SGLang's tree_speculative_sampling_target_only (the coin rule) on
    SGLang's batch layout: target_probs [batch * num_draft_tokens, V] by
    slot, coins [batch * num_draft_tokens], final_coins [batch]. Exact with
    both thresholds 1; any threshold below 1 is LOSSY. Returns (predicts,
    accept_index, accept_token_num); request_status, accepted_per_depth and
    CUDA arrays as in sglang_verify_tree_greedy."""
    dev = _where("candidates retrive_index retrive_next_token retrive_next_sibling target_probs coins final_coins "
                 "predicts accept_index accept_token_num accepted_per_depth request_status workspace", candidates,
                 retrive_index, retrive_next_token, retrive_next_sibling, target_probs, coins, final_coins, predicts,
                 accept_index, accept_token_num, accepted_per_depth, request_status, workspace)
    if dev is not None:
        c = _sglang_tree_cuda((candidates, retrive_index, retrive_next_token, retrive_next_sibling))
        B = int(c[0].shape[0])
        tprobs = _cuda_in(target_probs, np.float32, contiguous=False)
        outs = _sglang_outputs_cuda(c[0], dev, B, int(tprobs.shape[0]), num_speculative_tokens, predicts,
                                    accept_index, accept_token_num)

        def launch(st: Any, handle: int) -> None:
            ws = _workspace(int(_core.cuda_sglang_tree_workspace_size(B, int(c[0].shape[1]))), c[0], dev, handle,
                            workspace)
            _core.cuda_sglang_tree_sampling_target_only(*c, tprobs, _cuda_in(coins, np.float32),
                                                        _cuda_in(final_coins, np.float32),
                                                        int(num_speculative_tokens), float(threshold_single),
                                                        float(threshold_acc), *outs, accepted_per_depth, st, ws,
                                                        handle)
        _sglang_launch(dev, c[0], B, request_status, stream, "sglang_tree_sampling_target_only", launch)
        return outs
    c = [_inp(a, np.int64, n) for a, n in ((candidates, "candidates"), (retrive_index, "retrive_index"),
                                           (retrive_next_token, "retrive_next_token"),
                                           (retrive_next_sibling, "retrive_next_sibling"))]
    tp = _strided(target_probs, np.float32, "target_probs")
    outs = _sglang_outputs(c[0], int(tp.shape[0]), num_speculative_tokens, predicts, accept_index,
                           accept_token_num)
    B, n = int(c[0].shape[0]), int(c[0].shape[1])
    co = _inp(coins, np.float32, "coins")
    fc = _inp(final_coins, np.float32, "final_coins")

    def run(r0: int) -> None:
        _core.sglang_tree_sampling_target_only(*(a[r0:] for a in c), tp[r0 * n:], co[r0 * n:], fc[r0:],
                                               int(num_speculative_tokens), float(threshold_single),
                                               float(threshold_acc), outs[0], outs[1][r0:], outs[2][r0:])
    _sglang_common(B, outs[2], accepted_per_depth, request_status, run)
    return outs


def _request_codes_or_raise(status: Any, handle: int, what: str) -> None:
    """Waits for the stream and raises on the first request whose code is not ok."""
    _core.cuda_synchronize(handle)
    codes = _to_host(status)
    bad = np.flatnonzero(codes)
    if len(bad):
        r = int(bad[0])
        raise Error(f"{_core.status_code_name(int(codes[r]))}: {what} failed on the device for request {r} "
                    "(the host path gives the detailed message)")


def _sglang_tree_cuda(arrays: Sequence[Any]) -> list:
    return [_cuda_in(a, np.int64) for a in arrays]


def _sglang_outputs_cuda(like: Any, dev: int, B: int, rows: int, num_speculative_tokens: int, predicts: Any,
                         accept_index: Any, accept_token_num: Any) -> tuple:
    if predicts is None:
        predicts = _cuda_empty(like, (rows,), np.int32, dev, zero=True)
    if accept_index is None:
        accept_index = _cuda_empty(like, (B, int(num_speculative_tokens)), np.int32, dev)
        (accept_index.fill_ if hasattr(accept_index, "fill_") else accept_index.fill)(-1)  # torch / cupy
    if accept_token_num is None:
        accept_token_num = _cuda_empty(like, (B,), np.int32, dev, zero=True)
    return predicts, accept_index, accept_token_num


def _sglang_launch(dev: int, like: Any, B: int, request_status: Any, stream: Any, what: str, launch: Any) -> Any:
    """Runs a CUDA interop launch with request codes: the caller's array
    (asynchronous), or a new one waited for and checked (raises)."""
    handle = _stream_handle(stream, dev)
    given = request_status is not None
    if not given:
        request_status = _cuda_empty(like, (B,), np.int32, dev, zero=True)
    launch(request_status, handle)
    if not given:
        _request_codes_or_raise(request_status, handle, what)
    return request_status


_SGLANG_MASK_MODES = {"full_mask": 0, "qlen_only": 1, "qlen_only_bitpacking": 2}


def _mask_bytes(x: Any, name: str) -> Any:
    """A flat uint8 view of a contiguous bool / uint8 mask buffer (no copy)."""
    if _is_torch(x):
        import torch
        if not x.is_contiguous() or x.dtype not in (torch.bool, torch.uint8):
            raise Error(f"invalid_argument: {name} must be a contiguous bool or uint8 tensor")
        return x.view(torch.uint8).reshape(-1)
    if not isinstance(x, np.ndarray) or not x.flags.c_contiguous or x.dtype not in (np.bool_, np.uint8):
        raise Error(f"invalid_argument: {name} must be a contiguous bool or uint8 array")
    return x.view(np.uint8).reshape(-1)


def sglang_build_tree(parent_list: Any, selected_index: Any, verified_seq_len: Any, *, topk: int, depth: int,
                      draft_token_num: int, mode: str = "full_mask", tree_mask: Any = None, positions: Any = None,
                      retrive_index: Any = None, retrive_next_token: Any = None, retrive_next_sibling: Any = None,
                      request_status: Any = None, workspace: Any = None, stream: Any = None) -> tuple:
    """SGLang's build_tree_kernel_efficient: from EAGLE's parent_list
    [batch][topk * (depth - 1) + 1] and selected_index [batch][n - 1]
    (int64; n = draft_token_num) and verified_seq_len [batch] to the tree
    mask, positions and linked lists SGLang's verification reads. `mode`:
    "full_mask" (prefix + tree columns, one byte per entry), "qlen_only" or
    "qlen_only_bitpacking" (n <= 32). Returns (tree_mask, positions,
    retrive_index, retrive_next_token, retrive_next_sibling,
    request_status); outputs are int64 [batch * n] except the mask (bool or
    uint8, contiguous; allocated zeroed when omitted, bool for the byte
    modes). request_status omitted: the first failing request raises (host)
    or the call waits and raises (CUDA); given (int32 [batch]): each
    request's code lands there, a failing request's outputs untouched (CUDA:
    asynchronous on `stream`)."""
    if mode not in _SGLANG_MASK_MODES:
        raise Error("invalid_argument: mode must be full_mask, qlen_only or qlen_only_bitpacking")
    n = int(draft_token_num)
    dev = _where("parent_list selected_index verified_seq_len tree_mask positions retrive_index retrive_next_token "
                 "retrive_next_sibling request_status workspace", parent_list, selected_index, verified_seq_len,
                 tree_mask, positions, retrive_index, retrive_next_token, retrive_next_sibling, request_status,
                 workspace)
    if dev is None:
        sl = _inp(verified_seq_len, np.int64, "verified_seq_len")
        B = len(sl)
        new = lambda shape, dt: np.zeros(shape, dt)  # noqa: E731
        conv = lambda x, dt, nm: _inp(x, dt, nm)  # noqa: E731
    else:
        sl = _cuda_in(verified_seq_len, np.int64)
        B = int(sl.shape[0])
        new = lambda shape, dt: _cuda_empty(sl, shape, dt, dev, zero=True)  # noqa: E731
        conv = lambda x, dt, nm: _cuda_in(x, dt)  # noqa: E731
    if tree_mask is None:
        if mode == "full_mask":
            total = n * n * B + n * int(_to_host(sl).sum() if dev is not None else sl.sum())
        elif mode == "qlen_only":
            total = B * n * n
        else:
            total = B * n * (4 if n > 16 else 2 if n > 8 else 1)
        if dev is None:
            tree_mask = np.zeros(total, np.uint8 if mode == "qlen_only_bitpacking" else np.bool_)
        else:
            tree_mask = new((total,), np.uint8)
            if mode != "qlen_only_bitpacking" and _is_torch(tree_mask):
                import torch
                tree_mask = tree_mask.to(torch.bool)
    outs = [positions, retrive_index, retrive_next_token, retrive_next_sibling]
    outs = [new((B * n,), np.int64) if o is None else o for o in outs]
    pl = conv(parent_list, np.int64, "parent_list")
    si = conv(selected_index, np.int64, "selected_index")
    if np.ndim(si) == 1 or (hasattr(si, "dim") and si.dim() == 1):
        si = si.reshape(B, max(n - 1, 0))
    if dev is None:
        if n == 1 and np.size(si) == 0:
            si = np.zeros((B, 0), np.int64)
        if request_status is not None:
            _check_host(request_status, "request_status")
        _core.sglang_build_tree(pl, si, sl, int(topk), int(depth), n, _SGLANG_MASK_MODES[mode],
                                _mask_bytes(tree_mask, "tree_mask"), *outs, request_status)
        return (tree_mask, *outs, request_status)

    def launch(st: Any, handle: int) -> None:
        ws = _workspace(int(_core.cuda_sglang_build_tree_workspace_size(B, n)), sl, dev, handle, workspace)
        _core.cuda_sglang_build_tree(pl, si, sl, int(topk), int(depth), n, _SGLANG_MASK_MODES[mode],
                                     _mask_bytes(tree_mask, "tree_mask"), *outs, st, ws, handle)
    request_status = _sglang_launch(dev, sl, B, request_status, stream, "sglang_build_tree", launch)
    return (tree_mask, *outs, request_status)


def sglang_verify_tree(candidates: Any, retrive_index: Any, retrive_next_token: Any, retrive_next_sibling: Any,
                       p: Any, q: Any = None, *, num_speculative_tokens: int, modes: Any = Mode.SAMPLED_IID,
                       seeds: Any = 0, requests: Any = None, rounds: Any = 0, uniforms: Any = None,
                       typical_epsilon: float = 0.09, typical_delta: float = 0.3,
                       normalization_tolerance: float = 1e-3, predicts: Any = None, accept_index: Any = None,
                       accept_token_num: Any = None, accepted_per_depth: Any = None, request_status: Any = None,
                       workspace: Any = None, stream: Any = None) -> tuple:
    """specdec's lossless verification on SGLang's own batch layout: the
    linked-list trees (int64 [batch][num_draft_tokens]), target rows p and
    draft rows q by slot ([batch * num_draft_tokens][V]), each request with
    its own mode and Philox key (scalars broadcast; requests default to
    0..batch-1) or the caller's uniforms ([batch * num_draft_tokens][draws],
    slot-major). Writes SGLang's int32 predicts / accept_index /
    accept_token_num; returns (predicts, accept_index, accept_token_num,
    request_status). accepted_per_depth: int64 counters, added to.
    request_status as in sglang_build_tree. CUDA arrays: a thread block
    per request on `stream`."""
    dev = _where("candidates retrive_index retrive_next_token retrive_next_sibling p q uniforms predicts "
                 "accept_index accept_token_num accepted_per_depth request_status workspace", candidates,
                 retrive_index, retrive_next_token, retrive_next_sibling, p, q, uniforms, predicts, accept_index,
                 accept_token_num, accepted_per_depth, request_status, workspace)
    B = int(np.shape(candidates)[0]) if dev is None else int(candidates.shape[0])
    n = int(np.shape(candidates)[1]) if dev is None else int(candidates.shape[1])
    settings = (_per_request(modes, B, np.int32), _per_request(seeds, B, np.uint64),
                _per_request(np.arange(B) if requests is None else requests, B, np.uint32),
                _per_request(rounds, B, np.uint32), float(typical_epsilon), float(typical_delta),
                float(normalization_tolerance))
    if dev is None:
        c = [_inp(a, np.int64, nm) for a, nm in ((candidates, "candidates"), (retrive_index, "retrive_index"),
                                                 (retrive_next_token, "retrive_next_token"),
                                                 (retrive_next_sibling, "retrive_next_sibling"))]
        outs = _sglang_outputs(c[0], B * n, num_speculative_tokens, predicts, accept_index, accept_token_num)
        if request_status is not None:
            _check_host(request_status, "request_status")
        _core.sglang_verify_tree(*c, _strided(p, np.float32, "p"), _strided(q, np.float32, "q"), *settings,
                                 _inp(uniforms, np.float64, "uniforms"), int(num_speculative_tokens), *outs,
                                 accepted_per_depth, request_status)
        return (*outs, request_status)
    c = _sglang_tree_cuda((candidates, retrive_index, retrive_next_token, retrive_next_sibling))
    pp = _cuda_in(p, np.float32, contiguous=False)
    outs = _sglang_outputs_cuda(c[0], dev, B, B * n, num_speculative_tokens, predicts, accept_index,
                                accept_token_num)

    def launch(st: Any, handle: int) -> None:
        ws = _workspace(int(_core.cuda_sglang_verify_tree_workspace_size(B, n, int(pp.shape[1]))), c[0], dev,
                        handle, workspace)
        _core.cuda_sglang_verify_tree(*c, pp, _cuda_in(q, np.float32, contiguous=False), *settings,
                                      _cuda_in(uniforms, np.float64), int(num_speculative_tokens), *outs,
                                      accepted_per_depth, st, ws, handle)
    request_status = _sglang_launch(dev, c[0], B, request_status, stream, "sglang_verify_tree", launch)
    return (*outs, request_status)


def chain_acceptance_counts_batch(draft_token_ids: Any, target_probs: Any, draft_probs: Any, coins: Any, *,
                                  accepted_num: Any = None, emitted_num: Any = None, request_status: Any = None,
                                  stream: Any = None) -> tuple:
    """FlashInfer's chain counters over a batch: draft_token_ids
    [batch][gamma] (int32), target_probs and draft_probs [batch][>= gamma][V]
    (float32, any strides; FlashInfer's target rows have gamma + 1), coins
    [batch][>= gamma] (FlashInfer's uniform_samples). Returns (accepted_num,
    emitted_num, request_status), int32 [batch] each: accepted counts every
    position whose own test passes, emitted those before the first
    rejection. request_status as in sglang_build_tree."""
    dev = _where("draft_token_ids target_probs draft_probs coins accepted_num emitted_num request_status",
                 draft_token_ids, target_probs, draft_probs, coins, accepted_num, emitted_num, request_status)
    if dev is None:
        d = _inp(draft_token_ids, np.int32, "draft_token_ids")
        if d.ndim != 2:
            raise Error("invalid_argument: draft_token_ids must be [batch][gamma]")
        B = int(d.shape[0])
        accepted_num = _out(accepted_num, draft_token_ids, (B,), np.int32, "accepted_num")
        emitted_num = _out(emitted_num, draft_token_ids, (B,), np.int32, "emitted_num")
        if request_status is not None:
            _check_host(request_status, "request_status")
        _core.chain_acceptance_counts_batch(d, _strided(target_probs, np.float32, "target_probs"),
                                            _strided(draft_probs, np.float32, "draft_probs"),
                                            _strided(coins, np.float32, "coins"), accepted_num, emitted_num,
                                            request_status)
        return accepted_num, emitted_num, request_status
    d = _cuda_in(draft_token_ids, np.int32)
    B = int(d.shape[0])
    accepted_num = _cuda_empty(d, (B,), np.int32, dev, zero=True) if accepted_num is None else accepted_num
    emitted_num = _cuda_empty(d, (B,), np.int32, dev, zero=True) if emitted_num is None else emitted_num

    def launch(st: Any, handle: int) -> None:
        _core.cuda_chain_acceptance_counts_batch(d, _cuda_in(target_probs, np.float32, contiguous=False),
                                                 _cuda_in(draft_probs, np.float32, contiguous=False),
                                                 _cuda_in(coins, np.float32, contiguous=False), accepted_num,
                                                 emitted_num, st, handle)
    request_status = _sglang_launch(dev, d, B, request_status, stream, "chain_acceptance_counts_batch", launch)
    return accepted_num, emitted_num, request_status


def chain_acceptance_counts(drafts: Any, p: Any, q: Any, coins: Any = None, *, seed: int = 0, request: int = 0,
                            round: int = 0) -> tuple:
    """FlashInfer's chain counters for gamma drafts: returns (accepted,
    emitted). `emitted` = drafts accepted before the first rejection,
    `accepted` also counts later positions whose own test passes
    (coins[i] * q_i(x_i) < p_i(x_i)). Without `coins`, specdec's own coins
    for (seed, request, round), so that `emitted` equals verify_chain's
    accepted count on the same key."""
    c = np.zeros(0, np.float32) if coins is None else _inp(coins, np.float32, "coins")
    return _core.chain_acceptance_counts(_inp(drafts, np.int32, "drafts"), _strided(p, np.float32, "p"),
                                         _strided(q, np.float32, "q"), c, int(seed), int(request), int(round))


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
    ("validate_parents", "validate_topological_parents"), ("relabel_topological", "relabel_topological"),
    ("from_choices", "from_choices"), ("from_paths", "from_paths"), ("dfs_order", "dfs_order"),
    ("bfs_order", "bfs_order"), ("packed_mask", "build_packed_mask"), ("dense_mask", "build_dense_mask"),
    ("additive_mask", "build_additive_mask"), ("depths", "build_depths"), ("positions", "build_positions"),
    ("tree_masks_batched", "build_tree_masks_batched"), ("verify_tree", "verify_tree"),
    ("verify_chain", "verify_chain"), ("philox_uniforms", "philox_uniforms"),
    ("verify_batch", "verify_batch"), ("keep_indices", "keep_indices_from_path"),
    ("keep_indices_batch", "keep_indices_batch"), ("commit_kv", "commit_kv"), ("tree_scan", "tree_scan"),
    ("ssm_commit_path", "tree_ssm_commit_path"), ("ssm_replay_masked", "tree_ssm_replay_masked"),
    ("tree_conv1d", "tree_conv1d"),
    ("tree_conv1d_commit_state", "tree_conv1d_commit_state"), ("prune_batch", "batch_prune_to_budget"),
    ("topk_tree", "topk_tree_builder"),
    ("beam_tree", "beam_tree_builder"), ("prune_to_budget", "prune_to_budget"), ("sequoia_tree", "sequoia_tree"),
    ("tree_from_linked_list", "tree_from_linked_list"), ("linked_list_from_tree", "linked_list_from_tree"),
    ("verify_greedy_ids", "verify_greedy_ids"), ("choice_buffers", "retrieve_indices"),
    ("sglang_verify_tree_greedy", "sglang_verify_tree_greedy"), ("chain_acceptance_counts", "chain_acceptance_counts"),
    ("sglang_build_tree", "sglang_build_tree"), ("sglang_verify_tree", "sglang_verify_tree"),
    ("chain_acceptance_counts_batch", "chain_acceptance_counts_batch"), ("chain_coins", "chain_coins"),
    ("write_sglang_results", "write_sglang_results"), ("gather_candidate_tokens", "gather_candidate_tokens"),
    ("count_acceptance_per_depth", "count_acceptance_per_depth"),
    ("sglang_tree_sampling_target_only", "sglang_tree_sampling_target_only"),
    ("medusa_typical_select", "medusa_typical_select"), ("expected_accepted_length", "expected_accepted_length"),
    ("plan_memory", "plan_memory"), ("sampled_tree", "sampled_tree_builder"), ("static_tree", "static_tree_builder"),
    ("fit_linear_cost", "fit_linear_cost"), ("fit_quadratic_cost", "fit_quadratic_cost"),
    ("best_tree_size", "best_tree_size"),
]:
    _doc(globals()[_name], _key)
del _name, _key
