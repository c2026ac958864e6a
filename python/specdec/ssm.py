"""State-space models (include/specdec/ssm): tree scan, path commit, masked replay, tree conv1d."""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from . import _core
from ._core import Error
from ._common import (
    _check_host, _check_now, _cuda_empty, _cuda_in, _doc, _inp, _is_torch, _np, _out, _stream_handle, _strided, _where,
    _workspace,
)


_SCAN_METHODS = {"automatic": 0, "recurrent": 1, "dual": 2}


def _ssm_dtype(x: Any) -> Any:
    # Not getattr's default: np.asarray of a CUDA tensor raises.
    s = str(x.dtype) if hasattr(x, "dtype") else str(np.asarray(x).dtype)
    return np.float64 if s in ("float64", "torch.float64") else np.float32


def tree_scan(parent: Any, x: Any, dt: Any, A: Any, B: Any, C: Any, *, D: Any = None, dt_bias: Any = None,
              z: Any = None, h0: Any = None, dt_softplus: bool = True, dt_min: float = 0.0,
              dt_max: float = math.inf, y: Any = None, states: Any = None, method: str = "automatic",
              status: Any = None, check: Any = None, workspace: Any = None, stream: Any = None) -> Any:
    """Tree-masked selective scan (Mamba2 conventions): x [N, H, P], dt [N, H],
    A [H], B and C [N, G, S], optional D [H, P] or [H, 1], dt_bias [H], gate z
    [N, H, P], initial state h0 [H, P, S]. Writes y [N, H, P] and, when
    `states` [N, H, P, S] is given, every node's state (recurrent form).
    float32 or float64 (the dtype of x). Returns y.
    CUDA arrays: the recurrent tree_scan kernel on `stream` (`method` is
    ignored; results equal the host's up to float rounding). The kernel
    checks the parent links and puts its fault code (0 = ok) in `status`, a
    1-element int32 CUDA array, without waiting: read it when the stream
    gets there. Without `status` the call waits and raises on a bad tree
    (check=None means "check when no status is given"; check=True waits
    even with one, check=False never does and needs one). Nothing is uploaded; with
    `status` and a `workspace` nothing is allocated either, so the call can
    be captured in a CUDA graph. Input values (NaN, A > 0) are not checked
    on the device."""
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
            float(dt_max), y, states, status, workspace, handle, _check_now(check, status))
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
                out: Any = None, status: Any = None, check: Any = None, workspace: Any = None,
                stream: Any = None) -> Any:
    """Tree causal conv1d (Mamba's short convolution along each root path):
    x [N, channels], weight [channels, W] (column W - 1 multiplies the node
    itself), optional bias [channels] and conv_state [channels, L >= W - 1]
    (newest column last, read where a path runs out). float32 or float64.
    Returns out [N, channels]. CUDA arrays: the tree_conv1d kernel on
    `stream` (status / check as in tree_scan)."""
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
            handle, _check_now(check, status))
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


for _name, _key in [
    ("tree_scan", "tree_scan"),
    ("ssm_commit_path", "tree_ssm_commit_path"),
    ("ssm_replay_masked", "tree_ssm_replay_masked"),
    ("tree_conv1d", "tree_conv1d"),
    ("tree_conv1d_commit_state", "tree_conv1d_commit_state"),
]:
    _doc(globals()[_name], _key)
del _name, _key


def tree_scan_batch(offsets: Any, parent: Any, x: Any, dt: Any, A: Any, B: Any, C: Any, *, D: Any = None,
                    dt_bias: Any = None, z: Any = None, h0: Any = None, dt_softplus: bool = True,
                    dt_min: float = 0.0, dt_max: float = math.inf, y: Any = None, states: Any = None,
                    status: Any = None, workspace: Any = None, stream: Any = None) -> tuple:
    """A ragged batch of tree scans in one call: R = len(offsets) - 1 trees,
    their nodes concatenated along the node axis of x, dt, B, C, z (and y,
    states); request r owns rows offsets[r]:offsets[r + 1], its parent ids
    are local (its root: -1), h0 [R, H, P, S] holds one initial state per
    request. Returns (y, status): status[r] is 0 or the request's status
    code (its name: `specdec._core.status_code_name(code)`); a request that fails (malformed offsets
    fail every request) is not computed and its rows are not written.
    CUDA arrays: the batched kernel on `stream`, asynchronous, with nothing
    staged, allocated by the binding or waited for: `status` (R int32 on the
    device) is valid once the stream reaches it; the workspace (only without
    `states`) is the caller's or comes from torch's caching allocator."""
    dt_ = _ssm_dtype(x)
    R = int(offsets.shape[0] if hasattr(offsets, "shape") else len(offsets)) - 1
    dev = _where("offsets parent x dt A B C D dt_bias z h0 y states status workspace", offsets, parent, x, dt, A, B,
                 C, D, dt_bias, z, h0, y, states, status, workspace)
    if dev is not None:
        y = _cuda_empty(x, tuple(int(v) for v in x.shape), dt_, dev) if y is None else y
        status = _cuda_empty(x, (R,), np.int32, dev) if status is None else status
        handle = _stream_handle(stream, dev)
        sz = (_core.cuda_tree_scan_batch_workspace_size_f64 if dt_ == np.float64 else
              _core.cuda_tree_scan_batch_workspace_size_f32)(int(x.shape[0]), int(x.shape[1]), int(x.shape[2]),
                                                             int(B.shape[2]), states is not None)
        workspace = _workspace(int(sz), x, dev, handle, workspace)
        c = lambda a: _cuda_in(a, dt_, contiguous=False)  # noqa: E731
        (_core.cuda_tree_scan_batch_f64 if dt_ == np.float64 else _core.cuda_tree_scan_batch_f32)(
            _cuda_in(offsets, np.int32), _cuda_in(parent, np.int32), c(x), c(dt), c(A), c(B), c(C), c(D),
            c(dt_bias), c(z), c(h0), bool(dt_softplus), float(dt_min), float(dt_max), y, states, status, workspace,
            handle)
        return y, status
    xs = _strided(x, dt_, "x")
    y = _out(y, x, tuple(int(v) for v in xs.shape), dt_, "y")
    if states is not None:
        _check_host(states, "states")
    status = _out(status, x, (R,), np.int32, "status")
    (_core.tree_scan_batch_f64 if dt_ == np.float64 else _core.tree_scan_batch_f32)(
        _inp(offsets, np.int32, "offsets"), _inp(parent, np.int32, "parent"), xs, _strided(dt, dt_, "dt"),
        _strided(A, dt_, "A"), _strided(B, dt_, "B"), _strided(C, dt_, "C"), _strided(D, dt_, "D"),
        _strided(dt_bias, dt_, "dt_bias"), _strided(z, dt_, "z"), _strided(h0, dt_, "h0"), bool(dt_softplus),
        float(dt_min), float(dt_max), y, states, status)
    return y, status


def tree_conv1d_batch(offsets: Any, parent: Any, x: Any, weight: Any, *, bias: Any = None, conv_state: Any = None,
                      silu: bool = False, out: Any = None, status: Any = None, stream: Any = None) -> tuple:
    """A ragged batch of tree conv1d calls (layout as tree_scan_batch): x
    [capacity, channels], conv_state [R, channels, L] (one per request).
    Returns (out, status); CUDA arrays: asynchronous as tree_scan_batch."""
    dt_ = _ssm_dtype(x)
    R = int(offsets.shape[0] if hasattr(offsets, "shape") else len(offsets)) - 1
    dev = _where("offsets parent x weight bias conv_state out status", offsets, parent, x, weight, bias, conv_state,
                 out, status)
    if dev is not None:
        out = _cuda_empty(x, (int(x.shape[0]), int(x.shape[1])), dt_, dev) if out is None else out
        status = _cuda_empty(x, (R,), np.int32, dev) if status is None else status
        c = lambda a: _cuda_in(a, dt_, contiguous=False)  # noqa: E731
        (_core.cuda_tree_conv1d_batch_f64 if dt_ == np.float64 else _core.cuda_tree_conv1d_batch_f32)(
            _cuda_in(offsets, np.int32), _cuda_in(parent, np.int32), c(x), c(weight), c(bias), c(conv_state),
            bool(silu), out, status, _stream_handle(stream, dev))
        return out, status
    xs = _strided(x, dt_, "x")
    out = _out(out, x, (int(xs.shape[0]), int(xs.shape[1])), dt_, "out")
    status = _out(status, x, (R,), np.int32, "status")
    (_core.tree_conv1d_batch_f64 if dt_ == np.float64 else _core.tree_conv1d_batch_f32)(
        _inp(offsets, np.int32, "offsets"), _inp(parent, np.int32, "parent"), xs, _strided(weight, dt_, "weight"),
        _strided(bias, dt_, "bias"), _strided(conv_state, dt_, "conv_state"), bool(silu), out, status)
    return out, status
