#!/usr/bin/env python3
"""Train the example models that examples/model_demo.cpp runs through specdec.

Four byte-level models (vocab = the 256 byte values), trained on the CPU:
  target  a Llama-style transformer (RMSNorm, RoPE, SwiGLU, grouped-query attention)
  drafter a much smaller transformer of the same kind, distilled from the target
  hybrid  Mamba2 layers next to attention layers (the SSM path)
  hybrid_drafter  the drafter's shape, distilled from the hybrid (shipped: started from the
          drafter with --init)
Corpus: the Python standard library's own top-level sources (/usr/lib/python3.11/*.py,
PSF licence), read as bytes; every 20th file (index % 20 == 7 in sorted order) is held out.

Writes <name>.gguf (the weights) and <name>.ref.gguf (a prompt and the model's logits at
every prompt position, for the C++ test) into --out. Not part of CI.
Usage: python3 train.py {target,drafter,hybrid,hybrid_drafter} --out examples/models [--steps N] [--seed S]
"""
import argparse
import glob
import math
import os
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

CORPUS_GLOB = "/usr/lib/python3.11/*.py"
VOCAB = 256
CONFIGS = {
    # d_model, layers, heads, kv heads, ffn, layer kinds ("a" attention, "m" Mamba2)
    "target": dict(d=192, heads=6, kv_heads=2, ffn=512, kinds="aaaa"),
    "drafter": dict(d=96, heads=3, kv_heads=1, ffn=256, kinds="aa"),
    "hybrid": dict(d=128, heads=4, kv_heads=2, ffn=384, kinds="mama",
                   ssm_heads=8, ssm_headdim=32, ssm_groups=1, ssm_state=16, conv=4),
}
CONFIGS["hybrid_drafter"] = CONFIGS["drafter"]
TEACHERS = {"drafter": "target", "hybrid_drafter": "hybrid"}  # distilled models and their teachers
CTX = 256
ROPE_BASE = 10000.0
EPS = 1e-5


def load_corpus():
    train, val = [], []
    for i, f in enumerate(sorted(glob.glob(CORPUS_GLOB))):
        with open(f, "rb") as fh:
            (val if i % 20 == 7 else train).append(fh.read())
    return (np.frombuffer(b"".join(train), dtype=np.uint8).copy(),
            np.frombuffer(b"".join(val), dtype=np.uint8).copy())


class RMSNorm(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * self.weight


def rope(x, pos):
    # Rotates consecutive pairs (x[2i], x[2i+1]) by pos * base^(-2i/D): llama.cpp's "normal" RoPE.
    d = x.shape[-1]
    inv = ROPE_BASE ** (-torch.arange(0, d, 2, dtype=torch.float32) / d)
    ang = pos[:, None].float() * inv[None, :]  # [T, D/2]
    cos, sin = ang.cos()[None, :, None, :], ang.sin()[None, :, None, :]
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1).flatten(-2)


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.h, self.hkv, self.dh = c["heads"], c["kv_heads"], c["d"] // c["heads"]
        self.wq = nn.Linear(c["d"], self.h * self.dh, bias=False)
        self.wk = nn.Linear(c["d"], self.hkv * self.dh, bias=False)
        self.wv = nn.Linear(c["d"], self.hkv * self.dh, bias=False)
        self.wo = nn.Linear(self.h * self.dh, c["d"], bias=False)

    def forward(self, x):
        b, t, _ = x.shape
        pos = torch.arange(t)
        q = rope(self.wq(x).view(b, t, self.h, self.dh), pos).transpose(1, 2)
        k = rope(self.wk(x).view(b, t, self.hkv, self.dh), pos).transpose(1, 2)
        v = self.wv(x).view(b, t, self.hkv, self.dh).transpose(1, 2)
        rep = self.h // self.hkv
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        att = (q @ k.transpose(-1, -2)) / math.sqrt(self.dh)
        att = att.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
        y = att.softmax(-1) @ v
        return self.wo(y.transpose(1, 2).reshape(b, t, self.h * self.dh))


class Mamba2(nn.Module):
    """Mamba2 mixer (one group), computed in its quadratic "dual" form for training."""

    def __init__(self, c):
        super().__init__()
        self.H, self.P, self.G, self.S, self.W = (c["ssm_heads"], c["ssm_headdim"], c["ssm_groups"],
                                                  c["ssm_state"], c["conv"])
        di = self.H * self.P
        self.di, self.conv_ch = di, di + 2 * self.G * self.S
        self.in_proj = nn.Linear(c["d"], 2 * di + 2 * self.G * self.S + self.H, bias=False)
        self.conv = nn.Conv1d(self.conv_ch, self.conv_ch, self.W, groups=self.conv_ch, padding=self.W - 1)
        dt = torch.exp(torch.rand(self.H) * (math.log(0.1) - math.log(0.001)) + math.log(0.001))
        self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))
        self.A_log = nn.Parameter(torch.log(torch.empty(self.H).uniform_(1, 16)))
        self.D = nn.Parameter(torch.ones(self.H))
        self.norm = RMSNorm(di)
        self.out_proj = nn.Linear(di, c["d"], bias=False)

    def forward(self, u):
        b, t, _ = u.shape
        z, xbc, dt = torch.split(self.in_proj(u), [self.di, self.conv_ch, self.H], dim=-1)
        xbc = F.silu(self.conv(xbc.transpose(1, 2))[..., :t].transpose(1, 2))
        x, bm, cm = torch.split(xbc, [self.di, self.G * self.S, self.G * self.S], dim=-1)
        x = x.view(b, t, self.H, self.P)
        dt = F.softplus(dt + self.dt_bias)  # [b, t, H]
        cum = torch.cumsum(dt * -torch.exp(self.A_log), dim=1)  # [b, t, H]
        seg = cum[:, :, None, :] - cum[:, None, :, :]  # [b, i, j, H]
        causal = torch.ones(t, t, dtype=torch.bool).tril()[None, :, :, None]
        decay = torch.exp(seg.masked_fill(~causal, float("-inf")))  # select before exp
        cb = torch.einsum("bis,bjs->bij", cm, bm)  # one group
        w = decay * cb[..., None] * dt[:, None, :, :]
        y = torch.einsum("bijh,bjhp->bihp", w, x) + self.D[None, None, :, None] * x
        y = y.reshape(b, t, self.di) * F.silu(z)
        return self.out_proj(self.norm(y))


class Block(nn.Module):
    def __init__(self, c, kind):
        super().__init__()
        self.kind = kind
        self.norm1, self.norm2 = RMSNorm(c["d"]), RMSNorm(c["d"])
        self.mixer = Attention(c) if kind == "a" else Mamba2(c)
        self.gate = nn.Linear(c["d"], c["ffn"], bias=False)
        self.up = nn.Linear(c["d"], c["ffn"], bias=False)
        self.down = nn.Linear(c["ffn"], c["d"], bias=False)

    def forward(self, x):
        x = x + self.mixer(self.norm1(x))
        h = self.norm2(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class Model(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.embed = nn.Embedding(VOCAB, c["d"])
        self.blocks = nn.ModuleList(Block(c, k) for k in c["kinds"])
        self.norm = RMSNorm(c["d"])
        self.output = nn.Linear(c["d"], VOCAB, bias=False)
        for n, p in self.named_parameters():
            if n.endswith("weight") and p.dim() == 2:
                nn.init.normal_(p, std=0.02)
            if n.endswith("down.weight") or n.endswith("wo.weight") or n.endswith("out_proj.weight"):
                nn.init.normal_(p, std=0.02 / math.sqrt(2 * len(c["kinds"])))

    def forward(self, tokens):
        x = self.embed(tokens)
        for blk in self.blocks:
            x = blk(x)
        return self.output(self.norm(x))


def batches(data, batch, seq, gen):
    idx = torch.randint(0, len(data) - seq - 1, (batch,), generator=gen)
    t = torch.from_numpy(np.stack([data[i:i + seq + 1] for i in idx.tolist()]).astype(np.int64))
    return t[:, :-1], t[:, 1:]


@torch.no_grad()
def evaluate(model, val, teacher=None, n=16, seq=CTX):
    gen = torch.Generator().manual_seed(1234)
    loss, agree, count = 0.0, 0, 0
    for _ in range(n):
        x, y = batches(val, 8, seq, gen)
        logits = model(x)
        loss += F.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1)).item()
        if teacher is not None:
            agree += (logits.argmax(-1) == teacher(x).argmax(-1)).sum().item()
            count += y.numel()
    return loss / n / math.log(2), (agree / count if count else None)


def round_to_f16(model):
    # The shipped 2-D weights are f16; the reference logits use exactly those values.
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.copy_(p.half().float())


def model_tensors(model):
    """The model's tensors under llama.cpp's names, as float32 arrays."""
    out = []

    def put(tname, t):
        out.append((tname, t.detach().float().numpy()))

    put("token_embd.weight", model.embed.weight)
    for i, blk in enumerate(model.blocks):
        p = f"blk.{i}."
        put(p + "attn_norm.weight", blk.norm1.weight)
        if blk.kind == "a":
            put(p + "attn_q.weight", blk.mixer.wq.weight)
            put(p + "attn_k.weight", blk.mixer.wk.weight)
            put(p + "attn_v.weight", blk.mixer.wv.weight)
            put(p + "attn_output.weight", blk.mixer.wo.weight)
        else:
            m = blk.mixer
            put(p + "ssm_in.weight", m.in_proj.weight)
            put(p + "ssm_conv1d.weight", m.conv.weight.squeeze(1))  # [channels, W]
            put(p + "ssm_conv1d.bias", m.conv.bias)
            put(p + "ssm_a", -torch.exp(m.A_log))
            put(p + "ssm_d", m.D)
            put(p + "ssm_dt.bias", m.dt_bias)
            put(p + "ssm_norm.weight", m.norm.weight)
            put(p + "ssm_out.weight", m.out_proj.weight)
        put(p + "ffn_norm.weight", blk.norm2.weight)
        put(p + "ffn_gate.weight", blk.gate.weight)
        put(p + "ffn_up.weight", blk.up.weight)
        put(p + "ffn_down.weight", blk.down.weight)
    put("output_norm.weight", model.norm.weight)
    put("output.weight", model.output.weight)
    return out


def write_gguf(c, name, path, f16, trained_text, tensors):
    """Writes GGUF v3: llama.cpp's metadata keys, a byte vocabulary, and the
    tensors (2-D float32 ones stored as f16 when f16 is set)."""
    import gguf
    arch = "llama" if "m" not in c["kinds"] else "specdec-hybrid"
    w = gguf.GGUFWriter(path, arch)
    w.add_name(f"specdec-{name}")
    w.add_description(trained_text)
    w.add_context_length(CTX)
    w.add_embedding_length(c["d"])
    w.add_block_count(len(c["kinds"]))
    w.add_feed_forward_length(c["ffn"])
    w.add_head_count(c["heads"])
    w.add_head_count_kv(c["kv_heads"])
    w.add_rope_dimension_count(c["d"] // c["heads"])
    w.add_rope_freq_base(ROPE_BASE)
    w.add_layer_norm_rms_eps(EPS)
    w.add_vocab_size(VOCAB)
    w.add_file_type(1 if f16 else 0)
    if arch != "llama":
        w.add_string(f"{arch}.layer_kinds", c["kinds"])
        w.add_ssm_conv_kernel(c["conv"])
        w.add_ssm_inner_size(c["ssm_heads"] * c["ssm_headdim"])
        w.add_ssm_state_size(c["ssm_state"])
        w.add_ssm_time_step_rank(c["ssm_heads"])
        w.add_ssm_group_count(c["ssm_groups"])
    # Byte-level vocabulary as SentencePiece pieces: byte b is "<0xBB>" (type
    # BYTE), except the space, which SentencePiece writes as U+2581 and
    # llama.cpp looks up as that piece (type NORMAL) before any byte fallback.
    tokens = [f"<0x{i:02X}>".encode() for i in range(VOCAB)]
    types = [gguf.TokenType.BYTE] * VOCAB
    tokens[0x20], types[0x20] = "\u2581".encode(), gguf.TokenType.NORMAL
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * VOCAB)
    w.add_token_types(types)
    w.add_bos_token_id(0x02)  # STX; never prepended (add_bos_token = false)
    w.add_eos_token_id(0x03)  # ETX
    w.add_add_bos_token(False)
    w.add_add_eos_token(False)
    w.add_add_space_prefix(False)
    for tname, a in tensors:
        w.add_tensor(tname, a.astype(np.float16) if (f16 and a.ndim == 2 and a.dtype == np.float32) else a)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def rewrite_metadata(name, path):
    """Rewrites a shipped file's metadata (e.g. after a vocabulary change)
    keeping its tensors bit for bit."""
    import gguf
    r = gguf.GGUFReader(path)
    f = r.fields["general.description"]
    text = bytes(f.parts[f.data[0]]).decode()
    tensors = [(t.name, np.array(t.data)) for t in r.tensors]
    f16 = any(a.dtype == np.float16 for _, a in tensors)
    del r  # the reader maps the file: write next to it, then replace it
    write_gguf(CONFIGS[name], name, path + ".tmp", f16, text, tensors)
    os.replace(path + ".tmp", path)


def round_file_to_f16(name, out):
    """Rounds a trained model's matrices to f16 (half the bytes a forward
    streams) and rewrites the file, its reference logits and its description."""
    import gguf
    path = f"{out}/{name}.gguf"
    r = gguf.GGUFReader(path)
    f = r.fields["general.description"]
    text = bytes(f.parts[f.data[0]]).decode()
    del r
    model = Model(CONFIGS[name])
    load_gguf_into(model, path)
    model.eval()
    round_to_f16(model)
    _, val = load_corpus()
    teacher = None
    if name in TEACHERS:
        teacher = Model(CONFIGS[TEACHERS[name]])
        load_gguf_into(teacher, f"{out}/{TEACHERS[name]}.gguf")
        teacher.eval()
    bpb, agree = evaluate(model, val, teacher)
    text = text.split(", held-out")[0] + f", matrices rounded to f16, held-out {bpb:.3f} bits/byte" + (
        f", top-1 agreement with {TEACHERS[name]} {agree:.3f}" if agree is not None else "")
    print(text, flush=True)
    write_gguf(CONFIGS[name], name, path + ".tmp", True, text, model_tensors(model))
    os.replace(path + ".tmp", path)
    write_reference(model, f"{out}/{name}.ref.gguf", val)


def write_reference(model, path, val):
    import gguf
    prompt = val[1000:1000 + 48].astype(np.int32)
    with torch.no_grad():
        logits = model(torch.from_numpy(prompt.astype(np.int64))[None])[0].numpy().astype(np.float32)
    w = gguf.GGUFWriter(path, "specdec-reference")
    w.add_tensor("prompt", prompt)
    w.add_tensor("logits", logits)  # [positions, vocab]
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model", choices=list(CONFIGS))
    ap.add_argument("--out", default="examples/models")
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=CTX)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--init", help="start from this GGUF's weights (same shape) instead of random ones")
    ap.add_argument("--rewrite-metadata", action="store_true",
                    help="rewrite <out>/<model>.gguf's metadata, keeping its tensors, instead of training")
    ap.add_argument("--round-f16", action="store_true",
                    help="round <out>/<model>.gguf's matrices to f16 and rewrite it and its reference, instead of "
                         "training (how the shipped drafters, trained in f32, became f16)")
    args = ap.parse_args()
    if args.rewrite_metadata:
        rewrite_metadata(args.model, f"{args.out}/{args.model}.gguf")
        return
    if args.round_f16:
        round_file_to_f16(args.model, args.out)
        return
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    train, val = load_corpus()
    c = CONFIGS[args.model]
    model = Model(c)
    if args.init:
        load_gguf_into(model, args.init)
    teacher = None
    if args.model in TEACHERS:
        teacher = Model(CONFIGS[TEACHERS[args.model]])
        load_gguf_into(teacher, f"{args.out}/{TEACHERS[args.model]}.gguf")
        teacher.eval()
    nparam = sum(p.numel() for p in model.parameters())
    print(f"{args.model}: {nparam} parameters, corpus {len(train)} train / {len(val)} val bytes", flush=True)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.01)
    t0 = time.time()
    for step in range(args.steps):
        lr = args.lr * min(1.0, (step + 1) / 30) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * step / args.steps)))
        for g in opt.param_groups:
            g["lr"] = lr
        x, y = batches(train, args.batch, args.seq, gen)
        logits = model(x)
        if teacher is None:
            loss = F.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1))
        else:  # distillation: cross-entropy against the target's full next-byte distribution
            with torch.no_grad():
                pt = teacher(x).softmax(-1)
            loss = -(pt * logits.log_softmax(-1)).sum(-1).mean()
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 50 == 0 or step == args.steps - 1:
            print(f"step {step} loss {loss.item() / math.log(2):.3f} bits lr {lr:.2e} {time.time() - t0:.0f}s",
                  flush=True)
    model.eval()
    round_to_f16(model)
    bpb, agree = evaluate(model, val, teacher)
    text = (f"specdec example {args.model}: {nparam} params, {args.steps} steps x {args.batch} x {args.seq} bytes, "
            f"seed {args.seed}, held-out {bpb:.3f} bits/byte"
            + (f", top-1 agreement with {TEACHERS[args.model]} {agree:.3f}" if agree is not None else ""))
    print(text, f"train time {time.time() - t0:.0f}s", flush=True)
    write_gguf(c, args.model, f"{args.out}/{args.model}.gguf", True, text, model_tensors(model))
    write_reference(model, f"{args.out}/{args.model}.ref.gguf", val)


def load_gguf_into(model, path):
    """Loads our own GGUF back (a distilled drafter's teacher): the inverse of model_tensors."""
    import gguf
    r = gguf.GGUFReader(path)
    t = {x.name: torch.from_numpy(np.array(x.data, dtype=np.float32).reshape(list(reversed(
        [int(v) for v in x.shape])))) for x in r.tensors}
    names = [n for n, _ in model_tensors(model)]
    with torch.no_grad():
        for name, (p, to_param) in zip(names, model_parameters_in_gguf_order(model)):
            p.copy_(to_param(t[name]).reshape(p.shape))


def model_parameters_in_gguf_order(model):
    """(parameter, GGUF value -> parameter value) in model_tensors' order."""
    same = lambda v: v  # noqa: E731
    out = [(model.embed.weight, same)]
    for blk in model.blocks:
        out.append((blk.norm1.weight, same))
        m = blk.mixer
        if blk.kind == "a":
            out += [(m.wq.weight, same), (m.wk.weight, same), (m.wv.weight, same), (m.wo.weight, same)]
        else:
            out += [(m.in_proj.weight, same), (m.conv.weight, same), (m.conv.bias, same),
                    (m.A_log, lambda v: torch.log(-v)), (m.D, same), (m.dt_bias, same),
                    (m.norm.weight, same), (m.out_proj.weight, same)]
        out += [(blk.norm2.weight, same), (blk.gate.weight, same), (blk.up.weight, same), (blk.down.weight, same)]
    out += [(model.norm.weight, same), (model.output.weight, same)]
    return out


if __name__ == "__main__":
    main()
