"""Shared plumbing of the package: build facts, where a call's arrays live (host or one CUDA
device), streams, and host/device array conversion."""
from __future__ import annotations

import sys
from typing import Any, Optional

import numpy as np

from . import _core
from ._core import Error

try:
    from ._cppdocs import DOCS as _DOCS
except ImportError:  # running from a source tree without a build
    _DOCS = {}


has_cuda: bool = bool(_core.has_cuda)


def cuda_available() -> bool:
    """Whether CUDA arrays can be used: this build has the CUDA kernels and
    the driver sees at least one device."""
    return has_cuda and int(_core.cuda_device_count()) > 0


def build_info() -> dict:
    """How this module was built: ``build`` (the line CMake printed, e.g.
    "with CUDA kernels (archs 80;90)" or "host-only (no nvcc found)"),
    ``cuda`` (bool), ``cuda_archs``, ``cuda_devices`` (visible now) and
    ``host_vector_bytes`` (the width of the host SSM kernels' vectors: 16
    for a portable build, 32 for one built with
    ``-C cmake.define.SPECDEC_PYTHON_NATIVE=ON`` on a CPU with AVX)."""
    return {"build": str(_core.build), "cuda": has_cuda, "cuda_archs": str(_core.cuda_archs),
            "cuda_devices": int(_core.cuda_device_count()) if has_cuda else 0,
            "host_vector_bytes": int(_core.host_vector_bytes)}


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


def _check_now(check: Any, status: Any) -> bool:
    """Whether a CUDA call waits for its status and raises: as asked, else
    exactly when the caller gave no status array to leave it in (never
    waiting without one would lose the result, so that is refused)."""
    if check is None:
        return status is None
    if not check and status is None:
        raise Error("invalid_argument: check=False needs a status= array (else the result is lost)")
    return bool(check)


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


def _rows(x: Any, name: str) -> Any:
    """Probability rows read in place with any strides: float32, float16 and
    (torch) bfloat16 pass as they are, anything else becomes float32."""
    if x is None:
        return None
    _check_host(x, name)
    if _is_torch(x):
        import torch
        return x if x.dtype in (torch.float32, torch.float16, torch.bfloat16) else x.to(torch.float32)
    x = np.asarray(x)
    return x if x.dtype in (np.float32, np.float16) else x.astype(np.float32)


def _cuda_rows(x: Any) -> Any:
    """CUDA probability rows: float32, float16 and bfloat16 torch tensors
    pass as they are (any strides), others are converted to float32."""
    if x is None or not _is_torch(x):
        return x
    import torch
    return x if x.dtype in (torch.float32, torch.float16, torch.bfloat16) else x.to(torch.float32)


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


def _per_request(v: Any, R: int, dtype: Any) -> np.ndarray:
    a = np.asarray(_to_host(v) if _device_of(v) is not None else v, dtype=dtype)
    return np.ascontiguousarray(np.broadcast_to(a, (R,)) if a.ndim == 0 else a)


_EMPTY_I32 = np.zeros(0, dtype=np.int32)


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
