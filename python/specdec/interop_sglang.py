"""SGLang's batch entry points (include/specdec/interop/sglang*.hpp, results.hpp): greedy and
sampled tree verification, build_tree, verify_tree, chain acceptance counts."""
from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np

from . import _core
from ._core import Error
from ._common import (
    _check_host, _cuda_empty, _cuda_in, _doc, _inp, _is_torch, _np, _out, _per_request, _stream_handle,
    _strided, _to_host, _where, _workspace,
)
from .verify import Mode, _verify_params
from .interop import count_acceptance_per_depth


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
    c = _sglang_tree_host(candidates, retrive_index, retrive_next_token, retrive_next_sibling)
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
            nbytes = _core.cuda_sglang_tree_sampling_workspace_size(B, int(c[0].shape[1]), int(tprobs.shape[1]))
            ws = _workspace(int(nbytes), c[0], dev, handle, workspace)
            _core.cuda_sglang_tree_sampling_target_only(*c, tprobs, _cuda_in(coins, np.float32),
                                                        _cuda_in(final_coins, np.float32),
                                                        int(num_speculative_tokens), float(threshold_single),
                                                        float(threshold_acc), *outs, accepted_per_depth, st, ws,
                                                        handle)
        _sglang_launch(dev, c[0], B, request_status, stream, "sglang_tree_sampling_target_only", launch)
        return outs
    c = _sglang_tree_host(candidates, retrive_index, retrive_next_token, retrive_next_sibling)
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


def _sglang_tree_host(candidates: Any, retrive_index: Any, retrive_next_token: Any,
                      retrive_next_sibling: Any) -> list:
    return [_inp(a, np.int64, n) for a, n in ((candidates, "candidates"), (retrive_index, "retrive_index"),
                                           (retrive_next_token, "retrive_next_token"),
                                           (retrive_next_sibling, "retrive_next_sibling"))]


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
                       workspace: Any = None, stream: Any = None, params: Any = None) -> tuple:
    """specdec's lossless verification on SGLang's own batch layout: the
    linked-list trees (int64 [batch][num_draft_tokens]), target rows p and
    draft rows q by slot ([batch * num_draft_tokens][V]), each request with
    its own mode and Philox key (scalars broadcast; requests default to
    0..batch-1) or the caller's uniforms ([batch * num_draft_tokens][draws],
    slot-major). Writes SGLang's int32 predicts / accept_index /
    accept_token_num; returns (predicts, accept_index, accept_token_num,
    request_status). accepted_per_depth: int64 counters, added to.
    request_status as in sglang_build_tree. CUDA arrays: a thread block
    per request on `stream`. `params`: as verify_batch's."""
    dev = _where("candidates retrive_index retrive_next_token retrive_next_sibling p q uniforms predicts "
                 "accept_index accept_token_num accepted_per_depth request_status workspace", candidates,
                 retrive_index, retrive_next_token, retrive_next_sibling, p, q, uniforms, predicts, accept_index,
                 accept_token_num, accepted_per_depth, request_status, workspace)
    B = int(np.shape(candidates)[0]) if dev is None else int(candidates.shape[0])
    n = int(np.shape(candidates)[1]) if dev is None else int(candidates.shape[1])
    settings = (_verify_params(params, 0, 0, 0, 0, typical_epsilon, typical_delta, normalization_tolerance),
                _per_request(modes, B, np.int32), _per_request(seeds, B, np.uint64),
                _per_request(np.arange(B) if requests is None else requests, B, np.uint32),
                _per_request(rounds, B, np.uint32))
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


for _name, _key in [
    ("sglang_verify_tree_greedy", "sglang_verify_tree_greedy"),
    ("chain_acceptance_counts", "chain_acceptance_counts"),
    ("sglang_build_tree", "sglang_build_tree"),
    ("sglang_verify_tree", "sglang_verify_tree"),
    ("chain_acceptance_counts_batch", "chain_acceptance_counts_batch"),
    ("sglang_tree_sampling_target_only", "sglang_tree_sampling_target_only"),
]:
    _doc(globals()[_name], _key)
del _name, _key
