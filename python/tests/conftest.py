"""Shared fixtures: seeded generators (the seed is printed so a failure can be
replayed), random trees, an optional torch, and the C++ reference program."""
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]

try:  # torch is optional: its tests are skipped when it is absent
    import torch  # noqa: F401
    HAVE_TORCH = True
except Exception:  # pragma: no cover - depends on the machine
    HAVE_TORCH = False

needs_torch = pytest.mark.skipif(not HAVE_TORCH, reason="torch is not installed")


@pytest.fixture
def rng(request):
    seed = int(os.environ.get("SPECDEC_TEST_SEED", "20240917")) + sum(map(ord, request.node.name))
    print(f"[seed {seed}]")
    return np.random.default_rng(seed)


def random_tree(rng, n):
    """A random tree in topological order (parent[i] uniform in [0, i))."""
    parent = np.empty(n, dtype=np.int32)
    parent[0] = -1
    for i in range(1, n):
        parent[i] = rng.integers(0, i)
    return parent


def ref_depths(parent):
    d = np.zeros(len(parent), dtype=np.int64)
    for i in range(1, len(parent)):
        d[i] = d[parent[i]] + 1
    return d


def ref_ancestor_mask(parent):
    n = len(parent)
    m = np.zeros((n, n), dtype=np.uint8)
    for i in range(n):
        j = i
        while j >= 0:
            m[i, j] = 1
            j = parent[j]
    return m


def data_ptr(a):
    """Address of an array's first element (numpy or torch)."""
    if hasattr(a, "data_ptr"):
        return a.data_ptr()
    return a.__array_interface__["data"][0]


@pytest.fixture(scope="session")
def cpp_ref(tmp_path_factory):
    """Compiles python/tests/cpp_reference.cpp against the headers (the C++
    side of the cross-checks); skipped without a C++20 compiler."""
    cxx = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.skip("no C++ compiler for the reference program")
    exe = tmp_path_factory.mktemp("cppref") / "cpp_reference"
    src = Path(__file__).with_name("cpp_reference.cpp")
    subprocess.run([cxx, "-std=c++20", "-O1", "-I", str(REPO / "include"), str(src), "-o", str(exe)], check=True)

    def run(text):
        out = subprocess.run([str(exe)], input=text, capture_output=True, text=True, check=True).stdout
        return [line.split() for line in out.splitlines()]

    return run
