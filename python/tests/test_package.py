"""Package-level behaviour: host-only refusal of device arrays, read-only and
mistyped outputs refused (never written through a copy), docstrings carry
the C++ descriptions, stubs are installed.

Bindings added with the CUDA build: tree conv1d and its state commit
against a per-path numpy reference, batched pruning against per-request
prune_to_budget, build information, and device dispatch (mixed host and
CUDA arrays raise before anything runs)."""
from pathlib import Path

import numpy as np
import pytest

import specdec


class FakeCudaArray:
    """Looks like a CUDA tensor to DLPack consumers (device type 2)."""

    dtype = np.float32

    def __dlpack_device__(self):
        return (2, 0)

    def __dlpack__(self, stream=None):  # pragma: no cover - must not be reached
        raise AssertionError("a device array must be refused before it is read")

def test_device_arrays_are_refused_with_a_clear_error():
    # Host-only build: any CUDA array is refused. CUDA build: mixing host and
    # device arrays, or a function without a kernel, is refused. Either way
    # before the array is read.
    pattern = "host-only" if not specdec.has_cuda else "one CUDA device|CUDA memory|torch or cupy"
    with pytest.raises(specdec.Error, match=pattern):
        specdec.verify_tree([-1], [0], FakeCudaArray())
    with pytest.raises(specdec.Error, match=pattern):
        specdec.positions([-1, 0], 0, out=FakeCudaArray())
    with pytest.raises(specdec.Error, match=pattern):
        specdec.commit_kv([FakeCudaArray()], "SHTD", 0, [0])

def test_read_only_and_mistyped_outputs_are_refused():
    parent = np.array([-1, 0, 0], dtype=np.int32)
    ro = np.zeros(3, dtype=np.int64)
    ro.flags.writeable = False
    with pytest.raises(TypeError):
        specdec.positions(parent, 0, out=ro)
    cache = np.zeros((1, 2, 4, 2), dtype=np.float32)
    cache.flags.writeable = False
    with pytest.raises(TypeError):
        specdec.commit_kv([cache], "SHTD", 0, [1])
    noncontig = np.zeros((3, 2), dtype=np.int64)[:, 0]
    with pytest.raises(TypeError):
        specdec.positions(parent, 0, out=noncontig)

def test_docstrings_and_stubs():
    doc = specdec.verify_tree.__doc__
    assert "C++ specdec::verify_tree" in doc and "Deterministic for a" in doc
    assert "C++ specdec::commit_kv" in specdec.commit_kv.__doc__
    for fn, cpp in ((specdec.tree_from_linked_list, "tree_from_linked_list"),
                    (specdec.sampled_tree, "sampled_tree_builder"), (specdec.tree_conv1d, "tree_conv1d"),
                    (specdec.plan_memory, "plan_memory"), (specdec.prune_batch, "batch_prune_to_budget")):
        assert f"C++ specdec::{cpp}" in fn.__doc__, cpp
    pkg = Path(specdec.__file__).parent
    assert (pkg / "_core.pyi").is_file() and (pkg / "py.typed").is_file()
    assert "def verify_tree(" in (pkg / "_core.pyi").read_text()

def test_build_info():
    info = specdec.build_info()
    assert info["cuda"] == specdec.has_cuda
    if specdec.has_cuda:
        assert info["build"].startswith("with CUDA kernels (archs ")
        assert info["cuda_archs"]
    else:
        assert info["build"].startswith("host-only")
    assert specdec.cuda_available() == (specdec.has_cuda and info["cuda_devices"] > 0)
    assert info["host_vector_bytes"] in (4, 16, 32, 64)

class FakeCuda:
    """Claims to live on a CUDA device (DLPack device type 2); never read."""

    def __init__(self, index=0):
        self.index = index

    def __dlpack_device__(self):
        return (2, self.index)

def test_mixed_devices_raise_before_running():
    parent = np.array([-1, 0, 0], dtype=np.int32)
    p = np.full((3, 4), 0.25, dtype=np.float32)
    out = np.full(3, -9, dtype=np.int32)
    with pytest.raises(specdec.Error, match="host memory or all on one CUDA device|host-only"):
        specdec.verify_tree(parent, FakeCuda(), p, mode=specdec.Mode.GREEDY, path=out, tokens_out=out.copy())
    assert (out == -9).all()
    with pytest.raises(specdec.Error, match="all on one CUDA device|host-only"):
        specdec.tree_scan(parent, FakeCuda(0), FakeCuda(1), FakeCuda(0), FakeCuda(0), FakeCuda(0))
    with pytest.raises(specdec.Error, match="all on one CUDA device|host-only"):
        specdec.commit_kv([np.zeros((1, 1, 4, 2)), FakeCuda()], "SHTD", 0, [0])
    # Functions without a kernel name the problem.
    with pytest.raises(specdec.Error, match="CUDA memory"):
        specdec.packed_mask(FakeCuda())
