"""The baseline an engine author would write in PyTorch for chain
verification, on bench_gpu_verify's shapes (R requests of n-node chains over
V, fp32 rows), so the two programs' medians can be read side by side:

- greedy: argmax of every row, then the accepted prefix where the drafts
  equal the argmaxes (what vLLM's rejection sampler does at temperature 0);
- sampled: vLLM's rejection-sampling rule (Leviathan et al.) vectorised over
  the batch: accept draft i when u_i < p_i(x_i) / q_i(x_i), stop at the
  first rejection, sample the correction from norm(max(p - q, 0)) of that
  row (the bonus from p after a fully accepted chain). Like vLLM it forms
  the residual over every row, since which row is needed is known only on
  the device.

Rows and drafts are built as in bench_gpu_verify.cpp (greedy: every draft is
the argmax of its parent's row). Time per call with CUDA events, the median
of 20 calls after 3 warm-ups; greedy also prints the rows' read bandwidth
next to a device-to-device copy of the same bytes (bytes read and written).

Usage: python python/benchmarks/bench_torch_verify.py [--quick]
"""
import sys

import torch

POOL = 8


def rows(R, n, V, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    pool = torch.softmax(3.0 * torch.randn(POOL, V, device="cuda", generator=g), dim=-1)
    idx = torch.arange(R * n, device="cuda") % POOL
    return pool[idx].view(R, n, V), pool.argmax(dim=-1)


def greedy(p, draft):
    target = p.argmax(dim=-1)                          # [R, n]
    match = (target[:, :-1] == draft[:, 1:]).int()     # draft i+1 against row i
    accepted = match.cumprod(dim=1).sum(dim=1)          # [R]
    bonus = target.gather(1, accepted.view(-1, 1))     # argmax of the last accepted row
    return accepted, bonus


def sampled(p, q, draft, u):
    R, n, V = p.shape
    x = draft[:, 1:].unsqueeze(-1)                     # [R, n-1, 1]
    px = p[:, :-1].gather(2, x).squeeze(-1)
    qx = q[:, :-1].gather(2, x).squeeze(-1)
    ok = (u[:, : n - 1] * qx < px).int()
    accepted = ok.cumprod(dim=1).sum(dim=1)
    resid = (p - q).clamp_(min=0)
    resid[:, -1] = p[:, -1]                            # after the last draft: the bonus row
    row = resid.gather(1, accepted.view(R, 1, 1).expand(R, 1, V)).squeeze(1)
    nxt = torch.multinomial(row, 1)                    # normalises internally
    return accepted, nxt


def time_ms(fn, reps=20):
    for _ in range(3):
        fn()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b))
    ts.sort()
    return ts[len(ts) // 2]


def shape(R, V, n):
    p, pmax = rows(R, n, V, 11)
    q, qmax = rows(R, n, V, 23)
    par = (torch.arange(R * n, device="cuda").view(R, n) - 1) % POOL
    dg, ds = pmax[par], qmax[par]
    u = torch.rand(R, n, device="cuda", dtype=torch.float64).float()
    bytes_ = p.numel() * 4
    tg = time_ms(lambda: greedy(p, dg))
    acc, _ = greedy(p, dg)
    assert int(acc.sum()) == R * (n - 1), "greedy must accept every draft"
    dst = torch.empty_like(p)
    tc = time_ms(lambda: dst.copy_(p))
    ts = time_ms(lambda: sampled(p, q, ds, u))
    print(f"| {R} | {V} | {n} | {tg * 1e3:.1f} | {bytes_ / tg / 1e6:.0f} | {2 * bytes_ / tc / 1e6:.0f} "
          f"| {ts * 1e3:.1f} |", flush=True)


def main():
    quick = "--quick" in sys.argv
    print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}")
    print("| R | V | n | greedy us | greedy GB/s | copy GB/s | sampled us |")
    print("|---|---|---|---|---|---|---|")
    for R in (1, 64, 256):
        for V in (32000, 128256, 152064):
            for n in (1, 8, 64):
                if quick and R * n * V > 64 * 8 * 152064:
                    continue
                shape(R, V, n)
                torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
