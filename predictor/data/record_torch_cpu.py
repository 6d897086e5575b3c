"""Record real memory series from PyTorch programs on the CPU (see PROVENANCE.md).

    python predictor/data/record_torch_cpu.py generate OUT.csv   # growing KV cache
    python predictor/data/record_torch_cpu.py train OUT.csv      # training loop (plateau)
    python predictor/data/record_torch_cpu.py load_train OUT.csv # load in shards, then train
    python predictor/data/record_torch_cpu.py serve OUT.csv      # a serving loop (requests come and go)

Each step samples the process' resident set (``VmRSS`` of /proc/self/status), the memory
the kernel would count against a Slurm job's cgroup. Needs torch (not a dependency of the
project: ``pip install torch``).
"""
from __future__ import annotations

import math
import platform
import sys
import time

import torch
from torch import nn


def rss_bytes() -> int:
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


class Block(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads, self.hd = heads, d // heads
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        self.n1, self.n2 = nn.LayerNorm(d), nn.LayerNorm(d)

    def forward(self, x, cache=None):
        b, t, d = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, t, 3, self.heads, self.hd).permute(2, 0, 3, 1, 4)
        if cache is not None:  # grow the cache by concatenation, as Hugging Face's DynamicCache does
            k = torch.cat([cache[0], k], dim=2)
            v = torch.cat([cache[1], v], dim=2)
        a = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=cache is None)
        x = x + self.out(a.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.n2(x)), (k, v)


class TinyLM(nn.Module):
    def __init__(self, vocab=32000, d=384, layers=6, heads=6):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.head = nn.Linear(d, vocab)

    def forward(self, ids, caches=None):
        x = self.emb(ids)
        new = []
        for i, blk in enumerate(self.blocks):
            x, c = blk(x, None if caches is None else caches[i])
            new.append(c)
        return self.head(x[:, -1]), new


def generate(emit, batch=8, prompt=128, new_tokens=1536) -> None:
    torch.manual_seed(0)
    model = TinyLM().eval()
    ids = torch.randint(0, 32000, (batch, prompt))
    with torch.no_grad():
        logits, caches = model(ids)
        emit(0, rss_bytes())
        for step in range(1, new_tokens + 1):
            nxt = logits.argmax(-1, keepdim=True)
            logits, caches = model(nxt, caches)
            emit(step, rss_bytes())


def train(emit, steps=200, batch=8, seq=256) -> None:
    torch.manual_seed(0)
    model = TinyLM(d=256, layers=4, heads=4)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for step in range(steps):
        ids = torch.randint(0, 32000, (batch, seq))
        x = model.emb(ids)
        for blk in model.blocks:
            x, _ = blk(x)
        loss = nn.functional.cross_entropy(model.head(x[:, -1]), ids[:, 0])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        emit(step, rss_bytes())


def load_train(emit, shards=4, steps=150, batch=8, seq=256) -> None:
    """Warm-up as a checkpoint load does it: the model is built, then its weights arrive in
    a few large shards (a state dict per shard, copied in, the shard dropped), sampled a few
    times per shard; then a training loop (AdamW's state appears on the first step)."""
    torch.manual_seed(0)
    step = 0
    emit(step, rss_bytes())
    with torch.device("meta"):
        model = TinyLM(d=512, layers=8, heads=8)
    model = model.to_empty(device="cpu")
    names = [n for n, _ in model.named_parameters()]
    per = -(-len(names) // shards)
    params = dict(model.named_parameters())
    for k in range(shards):
        shard = {n: torch.randn_like(params[n]) for n in names[k * per : (k + 1) * per]}
        for _ in range(3):  # the loader reading the shard
            step += 1
            emit(step, rss_bytes())
        with torch.no_grad():
            for n, t in shard.items():
                params[n].copy_(t)
        del shard
        step += 1
        emit(step, rss_bytes())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for _ in range(steps):
        ids = torch.randint(0, 32000, (batch, seq))
        x = model.emb(ids)
        for blk in model.blocks:
            x, _ = blk(x)
        loss = nn.functional.cross_entropy(model.head(x[:, -1]), ids[:, 0])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        step += 1
        emit(step, rss_bytes())


def serve(emit, steps=1200, slots=8, seed=0) -> None:
    """A serving loop: requests with random prompt (32-512) and output (16-384) lengths
    arrive at random; each decode step runs one token for every active request (each with
    its own KV cache, grown by concatenation) and drops finished ones. Memory wanders with
    the load; a long prompt's prefill is a short spike."""
    import random

    rng = random.Random(seed)
    torch.manual_seed(0)
    model = TinyLM().eval()
    active: list[list] = []  # [caches, logits, tokens left]
    with torch.no_grad():
        for step in range(steps):
            load = 0.5 + 0.45 * math.sin(2 * math.pi * step / 400)  # a daily cycle, compressed
            while len(active) < slots and rng.random() < 0.25 * load:
                ids = torch.randint(0, 32000, (1, rng.randint(32, 512)))
                logits, caches = model(ids)
                active.append([caches, logits, rng.randint(16, 384)])
            for req in active:
                nxt = req[1].argmax(-1, keepdim=True)
                req[1], req[0] = model(nxt, req[0])
                req[2] -= 1
            active = [r for r in active if r[2] > 0]
            emit(step, rss_bytes())


def main(argv: list[str]) -> int:
    kind, out = argv[1], argv[2]
    torch.set_num_threads(2)
    with open(out, "w", encoding="ascii") as fh:  # written as it goes: a killed run keeps its samples
        fh.write(f"# real series: {kind} on CPU, torch {torch.__version__}, python {platform.python_version()}, "
                 f"{platform.machine()}, VmRSS sampled after each step\n")
        fh.write("step,bytes\n")

        def emit(step: int, value: int) -> None:
            fh.write(f"{step},{value}\n")
            fh.flush()

        t0 = time.time()
        {"generate": generate, "train": train, "load_train": load_train, "serve": serve}[kind](emit)
        fh.write(f"# done in {time.time() - t0:.0f} s\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
