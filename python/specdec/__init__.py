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

from . import _core  # noqa: F401 (the low-level module, specdec._core)
from ._core import Error
from ._common import has_cuda, cuda_available, build_info
from .tree import (
    relabel_topological, from_choices, from_paths, validate_parents, dfs_order, bfs_order, packed_mask,
    dense_mask, additive_mask, depths, positions, tree_masks_batched,
)
from .verify import (
    Mode, VerifyParams, VerifyResult, verify_tree, verify_chain, verify_batch, philox_uniforms, sampling_table,
)
from .cache import keep_indices, keep_indices_batch, keep_indices_from_results, commit_kv, kv_commit_check, KVCommit
from .ssm import (
    tree_scan, ssm_commit_path, ssm_replay_masked, tree_conv1d, tree_conv1d_commit_state, tree_scan_batch,
    tree_conv1d_batch,
)
from .draft import (
    DraftMode, prune_batch, topk_tree, beam_tree, sampled_tree, static_tree, DraftedTree, prune_to_budget,
)
from .plan import (
    sequoia_tree, fit_linear_cost, fit_quadratic_cost, best_tree_size, expected_accepted_length,
    AcceptanceCounts, MemoryConfig, MemoryPlan, memory_total_bytes, plan_memory,
)
from .loop import Plan, RoundPlanner
from .interop import (
    tree_from_linked_list, linked_list_from_tree, verify_greedy_ids, choice_buffers, chain_coins,
    write_sglang_results, gather_candidate_tokens, count_acceptance_per_depth, medusa_typical_select,
)
from .interop_sglang import (
    sglang_verify_tree_greedy, sglang_tree_sampling_target_only, chain_acceptance_counts, sglang_build_tree,
    sglang_verify_tree, chain_acceptance_counts_batch,
)

__all__ = [
    "Error",
    "Mode",
    "DraftMode",
    "has_cuda",
    "cuda_available",
    "build_info",
    "relabel_topological",
    "from_choices",
    "from_paths",
    "validate_parents",
    "dfs_order",
    "bfs_order",
    "packed_mask",
    "dense_mask",
    "additive_mask",
    "depths",
    "positions",
    "tree_masks_batched",
    "VerifyParams",
    "VerifyResult",
    "verify_tree",
    "verify_chain",
    "verify_batch",
    "philox_uniforms",
    "sampling_table",
    "keep_indices",
    "keep_indices_batch",
    "keep_indices_from_results",
    "commit_kv",
    "kv_commit_check",
    "KVCommit",
    "tree_scan",
    "ssm_commit_path",
    "ssm_replay_masked",
    "tree_conv1d",
    "tree_conv1d_commit_state",
    "tree_scan_batch",
    "tree_conv1d_batch",
    "prune_batch",
    "topk_tree",
    "beam_tree",
    "sampled_tree",
    "static_tree",
    "DraftedTree",
    "prune_to_budget",
    "sequoia_tree",
    "fit_linear_cost",
    "fit_quadratic_cost",
    "best_tree_size",
    "tree_from_linked_list",
    "linked_list_from_tree",
    "verify_greedy_ids",
    "choice_buffers",
    "sglang_verify_tree_greedy",
    "sglang_tree_sampling_target_only",
    "chain_acceptance_counts",
    "sglang_build_tree",
    "sglang_verify_tree",
    "chain_acceptance_counts_batch",
    "chain_coins",
    "write_sglang_results",
    "gather_candidate_tokens",
    "count_acceptance_per_depth",
    "medusa_typical_select",
    "expected_accepted_length",
    "AcceptanceCounts",
    "MemoryConfig",
    "MemoryPlan",
    "memory_total_bytes",
    "plan_memory",
    "Plan",
    "RoundPlanner",
]
