"""Verification (include/specdec/verify): one tree, one chain, a ragged batch; Philox uniforms."""
from __future__ import annotations

import enum
from typing import Any, NamedTuple

import numpy as np

from . import _core
from ._core import Error
from ._common import (
    _cuda_empty, _cuda_in, _cuda_rows, _device_of, _doc, _inp, _is_torch, _np, _on_device, _out, _per_request,
    _rows, _stream_handle, _to_host, _where, _workspace,
)


class Mode(enum.IntEnum):
    """Verification modes (C++ specdec::verify_mode). Pick the one matching how
    the drafts were produced; only then is the output distributed exactly as
    the target model. TYPICAL_LOSSY is Medusa's lossy typical acceptance;
    BLOCK (chains only) and the TRAVERSAL modes verify from the leaves back to
    the root."""

    SAMPLED_IID = 0
    SAMPLED_WITHOUT_REPLACEMENT = 1
    DETERMINISTIC = 2
    GREEDY = 3
    NAIVE_MATCHING = 4
    TYPICAL_LOSSY = 5
    BLOCK = 6
    TRAVERSAL = 7
    TRAVERSAL_WITHOUT_REPLACEMENT = 8


VerifyParams = _core.VerifyParams


def sampling_table(temperature: Any = 1.0, top_k: Any = 0, top_p: Any = 1.0, min_p: Any = 0.0, *,
                   requests: Any = None) -> Any:
    """Per-request sampling settings (C++ specdec::sampling_params) as
    verify_batch's `sampling=` and `draft_sampling=` take them: an R x 4
    int32 array, one 16-byte record per request (the float32 bits of the
    temperature, top_k, the float32 bits of top_p and of min_p).
    Temperature 0 is greedy; top_k 0, top_p 1 and min_p 0 disable their
    filter. Each argument is a scalar (broadcast) or one entry per request;
    R is `requests` or the length of the first array. With a CUDA torch
    tensor among them the table is built on its device by torch operations
    (nothing waits for the stream); else a numpy array."""
    args = (temperature, top_k, top_p, min_p)
    if _device_of(top_k) is None:  # (a CUDA tensor is not read back to check it)
        k = _np(top_k) if _is_torch(top_k) else np.asarray(top_k)
        if k.dtype.kind == "f" and not np.array_equal(k, np.round(k)):
            raise Error("invalid_argument: top_k must hold integers")
    R = requests
    if R is None:
        R = next((len(a) for a in args if np.ndim(a) > 0), 1)
    R = int(R)
    dev = next((a for a in args if _device_of(a) is not None), None)
    if dev is not None:
        import torch
        where = dev.device

        def col(v: Any, dtype: Any) -> Any:
            if not torch.is_tensor(v) and np.ndim(v) == 0:
                return torch.full((R,), v, dtype=dtype, device=where)  # a fill on the device, no copy
            t = (v if torch.is_tensor(v) else torch.as_tensor(np.asarray(v))).to(device=where, dtype=dtype).reshape(-1)
            return t.expand(R).contiguous() if t.numel() == 1 else t

        cols = [col(temperature, torch.float32).view(torch.int32), col(top_k, torch.int32),
                col(top_p, torch.float32).view(torch.int32), col(min_p, torch.float32).view(torch.int32)]
        if any(c.numel() != R for c in cols):
            raise Error("size_mismatch: sampling settings need one entry per request")
        return torch.stack(cols, dim=1).contiguous()

    def arr(v: Any, dtype: Any) -> np.ndarray:
        a = np.asarray(_np(v) if _is_torch(v) else v, dtype=dtype).reshape(-1)
        if a.size == 1:
            a = np.full(R, a[0], dtype=dtype)
        if a.size != R:
            raise Error("size_mismatch: sampling settings need one entry per request")
        return a

    out = np.empty((R, 4), dtype=np.int32)
    out[:, 0] = arr(temperature, np.float32).view(np.int32)
    out[:, 1] = arr(top_k, np.int32)
    out[:, 2] = arr(top_p, np.float32).view(np.int32)
    out[:, 3] = arr(min_p, np.float32).view(np.int32)
    return out


def _verify_params(params: Any, mode: int = 0, seed: int = 0, request: int = 0, round: int = 0,
                   typical_epsilon: float = 0.09, typical_delta: float = 0.3,
                   normalization_tolerance: float = 1e-3) -> Any:
    """`params` when given (a VerifyParams), else one built from the scalars."""
    if params is not None:
        if not isinstance(params, VerifyParams):
            raise Error("invalid_argument: params must be a specdec.VerifyParams")
        return params
    return VerifyParams(int(mode), int(seed), int(request), int(round), float(typical_epsilon), float(typical_delta),
                        float(normalization_tolerance))


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
                tokens_out: Any = None, workspace: Any = None, stream: Any = None,
                params: Any = None) -> VerifyResult:
    """Verifies one token tree against the target rows p (N x V, any strides;
    probabilities, or logits in greedy mode) and, for the sampled modes, the
    draft rows q (row u = the distribution that produced u's children).
    Randomness: the keyed Philox streams (seed, request, round), or the
    caller's `uniforms` (N x draws doubles in [0, 1); draw 0 = emission at a
    node, draw 1 + j = test of its j-th child). `path` and `tokens_out` (int32,
    capacity >= depth + 1) receive the accepted path and emitted tokens.
    CUDA arrays: the batched kernel with one request on `stream`, then a
    wait for the stream to read the result (use verify_batch to stay
    asynchronous). `params`: a
    VerifyParams used instead of mode, seed, request, round,
    typical_epsilon, typical_delta and normalization_tolerance."""
    vp = _verify_params(params, mode, seed, request, round, typical_epsilon, typical_delta, normalization_tolerance)
    dev = _where("parent tokens p q uniforms path tokens_out workspace", parent, tokens, p, q, uniforms, path,
                 tokens_out, workspace)
    if dev is not None:
        n = int(parent.shape[0])
        if path is None:
            path = _cuda_empty(parent, (n,), np.int32, dev)
        if tokens_out is None:
            tokens_out = _cuda_empty(parent, (n,), np.int32, dev)
        return _verify_one_cuda(dev, n, parent, tokens, p, q, vp, uniforms, path, tokens_out, workspace, stream)
    par = _inp(parent, np.int32, "parent")
    tok = _inp(tokens, np.int32, "tokens")
    pp = _rows(p, "p")
    qq = _rows(q, "q")
    u = _inp(uniforms, np.float64, "uniforms")
    cap = _max_depth_plus_one(_np(par)) if (path is None or tokens_out is None) else 0
    path = _out(path, parent, (cap,), np.int32, "path")
    tokens_out = _out(tokens_out, parent, (cap,), np.int32, "tokens_out")
    a, last, nxt = _core.verify_tree(par, tok, pp, qq, vp, u, path, tokens_out)
    return VerifyResult(a, last, nxt, path[:a + 1], tokens_out[:a + 1])


def verify_chain(drafts: Any, p: Any, q: Any = None, *, mode: int = Mode.SAMPLED_IID, seed: int = 0,
                 request: int = 0, round: int = 0, uniforms: Any = None, typical_epsilon: float = 0.09,
                 typical_delta: float = 0.3, normalization_tolerance: float = 1e-3,
                 tokens_out: Any = None, workspace: Any = None, stream: Any = None,
                 params: Any = None) -> VerifyResult:
    """Verifies a chain of gamma drafts (Leviathan/Chen speculative sampling in
    SAMPLED_IID): p has gamma + 1 rows, q at least gamma. Node ids in the
    random keys are those of the same chain as a tree, so verify_chain and
    verify_tree agree token for token. Returns path = arange(accepted + 1).
    CUDA arrays: as verify_tree (the chain is verified as a path tree; q,
    when read, needs gamma + 1 rows there, the last one unread). `params`:
    as verify_tree."""
    vp = _verify_params(params, mode, seed, request, round, typical_epsilon, typical_delta, normalization_tolerance)
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
        return _verify_one_cuda(dev, g + 1, parent, tok, p, q, vp, uniforms, path, tokens_out, workspace, stream)
    d = _inp(drafts, np.int32, "drafts")
    pp = _rows(p, "p")
    qq = _rows(q, "q")
    u = _inp(uniforms, np.float64, "uniforms")
    tokens_out = _out(tokens_out, drafts, (len(d) + 1,), np.int32, "tokens_out")
    a, last, nxt = _core.verify_chain(d, pp, qq, vp, u, tokens_out)
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
                 accepted_per_depth: Any = None, workspace: Any = None, stream: Any = None,
                 params: Any = None, max_nodes: Any = None, sampling: Any = None,
                 draft_sampling: Any = None) -> tuple:
    """Verifies R ragged requests (request r owns nodes and rows
    offsets[r]..offsets[r+1], local parent ids), each with its own mode and
    Philox key (scalars broadcast; requests default to 0..R-1). Returns
    (paths R x L, tokens R x L, results R x 4 = accepted, last_node,
    next_token, status code). A request with bad inputs gets its code in
    results and its rows untouched; batch-level errors raise.
    CUDA arrays: the verify_batch kernel on `stream`, asynchronous (results
    are valid once the stream gets there). p and q may be float32, float16
    or bfloat16, read in place. Scalar modes, seeds and rounds travel in the
    launch's parameters; per-request arrays are read where they are (CUDA
    tensors) or uploaded (host arrays); `offsets` likewise. `max_nodes`
    bounds every request's node count (checked before the launch for host
    offsets, per request on the device for device offsets);
    without it, device offsets are read back first (one wait). With
    offsets and per-request arrays on the device, `max_nodes` and a
    workspace, nothing is uploaded, allocated or waited for: the call can be
    captured in a CUDA graph (update rounds on the device between replays).
    `workspace`: a CUDA uint8 array of cuda_verify_batch_workspace_size
    bytes, 256-aligned; default: torch's caching allocator (torch inputs)
    or cudaMallocAsync.
    accepted_per_depth: int64 counters (added to, not reset). `params`: a
    VerifyParams whose typical_epsilon, typical_delta and
    normalization_tolerance are used instead of those keyword arguments
    (mode and key come from modes, seeds, requests and rounds).
    `sampling` (a sampling_table): p holds logits, and request r's target
    rows are their sampling transform under record r (temperature, top-k,
    top-p, min-p), applied as rows are read: no probability rows are
    written (docs/verify.md, "Logits rows"). `draft_sampling` likewise
    for q. On CUDA arrays the records may be on the device (read there) or
    on the host (staged); a caller workspace for a launch with them is
    sized by cuda_verify_batch_workspace_size(..., logits=True)."""
    base = _verify_params(params, 0, 0, 0, 0, typical_epsilon, typical_delta, normalization_tolerance)
    dev = _where("parent tokens p q uniforms paths tokens_out results accepted_per_depth workspace", parent, tokens, p,
                 q, uniforms, paths, tokens_out, results, accepted_per_depth, workspace)
    if dev is not None:
        return _verify_batch_cuda(dev, offsets, parent, tokens, p, q, base, modes, seeds, requests, rounds, uniforms,
                                  paths, tokens_out, results, accepted_per_depth, workspace, stream, max_nodes,
                                  sampling, draft_sampling)
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
    pp = _rows(p, "p")
    qq = _rows(q, "q")
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
    _core.verify_batch(off, par, tok, pp, qq, base, m, s, rq, rd, u, paths, tokens_out, results, accepted_per_depth,
                       _records(sampling, "sampling"), _records(draft_sampling, "draft_sampling"))
    return paths, tokens_out, results


def _records(v: Any, name: str) -> Any:
    """A sampling table as the binding takes it (None stays None)."""
    if v is None:
        return None
    if _device_of(v) is not None:
        return v if not _is_torch(v) else v.contiguous()
    a = np.ascontiguousarray(_np(v) if _is_torch(v) else np.asarray(v))
    if a.dtype != np.int32 or a.ndim != 2:
        raise Error(f"invalid_argument: {name} must be an R x 4 int32 table (specdec.sampling_table)")
    return a


def _launch_arg(v: Any, dtype: Any, torch_dtype: str) -> Any:
    """A per-request array of a CUDA launch: None stays None, a CUDA tensor
    is converted on the device (to the integer type of the same width; the
    kernel reads the bits as unsigned), anything else is a host array."""
    if v is None:
        return None
    if _device_of(v) is not None:
        if not _is_torch(v):
            return v  # another library's CUDA array: its dtype and layout are checked by the binding
        import torch
        t = getattr(torch, torch_dtype)
        return (v if v.dtype == t else v.to(t)).contiguous()
    return np.ascontiguousarray(np.asarray(v, dtype=dtype))


def _verify_batch_cuda(dev: int, offsets: Any, parent: Any, tokens: Any, p: Any, q: Any, base: Any, modes: Any,
                       seeds: Any, requests: Any, rounds: Any, uniforms: Any, paths: Any, tokens_out: Any,
                       results: Any, accepted_per_depth: Any, workspace: Any, stream: Any,
                       max_nodes: Any = None, sampling: Any = None, draft_sampling: Any = None) -> tuple:
    on_dev = _device_of(offsets) is not None
    if on_dev and _device_of(offsets) != dev:
        raise Error("invalid_argument: offsets are on another CUDA device than the other arrays")
    off = _cuda_in(offsets, np.int32) if on_dev else _inp(offsets, np.int32, "offsets")
    R = max(int(off.shape[0]) - 1, 0)
    par = _cuda_in(parent, np.int32)
    largest = int(max_nodes) if max_nodes is not None else 0
    if largest <= 0:
        # Device offsets are read back here (one wait for the stream).
        off_h = _to_host(off) if on_dev else _np(off)
        largest = max(int(np.diff(off_h.astype(np.int64)).max()), 1) if len(off_h) > 1 else 1
    tok = _cuda_in(tokens, np.int32)
    pp = _cuda_rows(p)
    qq = _cuda_rows(q)
    u = _cuda_in(uniforms, np.float64)
    if paths is None or tokens_out is None:
        L = largest  # a request of n nodes is at most n - 1 deep
        paths = _cuda_empty(par, (R, L), np.int32, dev) if paths is None else paths
        tokens_out = _cuda_empty(par, (R, L), np.int32, dev) if tokens_out is None else tokens_out
    if results is None:
        results = _cuda_empty(par, (R, 4), np.int32, dev, zero=True)
    handle = _stream_handle(stream, dev)
    # Scalars go into the shared settings (request keys default to 0 .. R-1);
    # arrays are pointed to on the device or staged from the host.
    vp = VerifyParams(0, 0, 0, 0, base.typical_epsilon, base.typical_delta, base.normalization_tolerance)
    arrays = []
    for name, v, dt, tdt in (("mode", modes, np.int32, "int32"), ("seed", seeds, np.uint64, "int64"),
                             ("request", requests, np.uint32, "int32"), ("round", rounds, np.uint32, "int32")):
        if v is not None and _device_of(v) is None and np.ndim(v) == 0:
            if name == "request" and R > 1:
                v = np.full(R, int(v), dtype=np.uint32)  # one key for every request
            else:
                setattr(vp, name, int(v))
                v = None
        arrays.append(_launch_arg(v, dt, tdt))
    ps, qs = _records(sampling, "sampling"), _records(draft_sampling, "draft_sampling")
    arrays_in = arrays + [ps, qs]
    staged = not on_dev or any(a is not None and _device_of(a) is None for a in arrays_in)
    vocab = int(pp.shape[1])
    if workspace is None and _is_torch(par):
        nbytes = _core.cuda_verify_batch_workspace_size(R, vocab, largest, staged, ps is not None or qs is not None)
        workspace = _workspace(nbytes, par, dev, handle, None)
    _core.cuda_verify_batch(off, par, tok, pp, qq, vp, *arrays, u, paths, tokens_out, results, accepted_per_depth,
                            workspace, handle, largest, ps, qs)
    return paths, tokens_out, results


def _verify_one_cuda(dev: int, n: int, parent: Any, tokens: Any, p: Any, q: Any, vp: Any, uniforms: Any, path: Any,
                     tokens_out: Any, workspace: Any, stream: Any) -> VerifyResult:
    off = np.array([0, n], dtype=np.int32)
    res = _cuda_empty(path, (1, 4), np.int32, dev, zero=True)
    _verify_batch_cuda(dev, off, parent, tokens, p, q, vp, int(vp.mode), int(vp.seed), int(vp.request),
                       int(vp.round), uniforms, path[None, :], tokens_out[None, :], res, None, workspace, stream,
                       max_nodes=n)
    _core.cuda_synchronize(_stream_handle(stream, dev))
    a, last, nxt, code = (int(v) for v in _to_host(res)[0])
    if code != 0:
        raise Error(f"{_core.status_code_name(code)}: verification failed on the device (the host path gives "
                    "the detailed message)")
    return VerifyResult(a, last, nxt, path[:a + 1], tokens_out[:a + 1])


for _name, _key in [
    ("verify_tree", "verify_tree"),
    ("verify_chain", "verify_chain"),
    ("philox_uniforms", "philox_uniforms"),
    ("verify_batch", "verify_batch"),
]:
    _doc(globals()[_name], _key)
del _name, _key
