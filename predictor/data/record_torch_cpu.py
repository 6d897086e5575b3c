"""Record real memory series from PyTorch programs on the CPU (see PROVENANCE.md).

    python predictor/data/record_torch_cpu.py generate OUT.csv   # growing KV cache
    python predictor/data/record_torch_cpu.py train OUT.csv      # training loop (plateau)

Each step samples the process' resident set (``VmRSS`` of /proc/self/status), the memory
the kernel would count against a Slurm job's cgroup. Needs torch (not a dependency of the
project: ``pip install torch``).
"""
from __future__ import annotations

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
        (generate if kind == "generate" else train)(emit)
        fh.write(f"# done in {time.time() - t0:.0f} s\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
