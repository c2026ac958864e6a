"""What the CUDA tests (test_<area>_cuda.py) share: torch when installed,
the skip mark, host <-> device copies and random batches of trees and rows."""
import numpy as np
import pytest

import specdec
from conftest import random_tree

try:
    import torch
except ImportError:  # the CUDA tests skip; the host tests never need torch
    torch = None

needs_cuda = pytest.mark.skipif(not (specdec.cuda_available() and torch is not None and torch.cuda.is_available()),
                                reason="needs the CUDA build of specdec, torch and a CUDA device")

DEV = "cuda"


def cu(a):
    return torch.from_numpy(np.ascontiguousarray(a)).to(DEV)


def host(t):
    return t.cpu().numpy()


def random_batch(rng, sizes):
    parents = [random_tree(rng, n) for n in sizes]
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int32)
    return np.concatenate(parents).astype(np.int32), offsets


def random_rows(rng, n, V, peaked=True):
    logits = rng.standard_normal((n, V)) * (3.0 if peaked else 1.0)
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    return (p / p.sum(axis=1, keepdims=True)).astype(np.float32)
