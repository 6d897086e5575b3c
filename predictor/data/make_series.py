"""Regenerate the model-based benchmark series of this folder (see PROVENANCE.md).

    python predictor/data/make_series.py [OUT_DIR]

Deterministic (fixed seeds). Writes NAME.csv (step,bytes) and NAME.json (capacity, horizon,
parameters) for each scenario.
"""
from __future__ import annotations

import json
import random
import sys
from pathlib import Path

from predictor.kvmodel import LLAMA3_8B, MIB, QWEN2_7B, DecodeScenario, ModelConfig, decode_series
from predictor.series import write_series


def _decode(name: str, sc: DecodeScenario, capacity_gib: float, note: str):
    rows = decode_series(sc)
    meta = {
        "capacity_gib": capacity_gib,
        "horizon": sc.new_tokens,
        "description": note,
        "model": sc.model.name,
        "model_source": sc.model.source,
        "parameters": sc.model.parameter_count(),
        "kv_bytes_per_token": sc.model.kv_bytes_per_token(sc.dtype_bytes),
        "batch": sc.batch,
        "prompt_tokens": sc.prompt_tokens,
        "new_tokens": sc.new_tokens,
        "sample_every": sc.sample_every,
        "dtype_bytes": sc.dtype_bytes,
        "context_bytes": sc.context_bytes,
        "seed": sc.seed,
    }
    return name, rows, meta


def _lora_training(model: ModelConfig, steps: int, batch: int, max_seq: int, seed: int):
    """Frozen bf16 weights, LoRA adapters, gradient checkpointing: after the first two steps
    (optimizer state) memory only follows the padded length of each batch; the running peak
    flattens once a batch of near-maximum length has been seen."""
    rng = random.Random(seed)
    weights = model.parameter_count() * 2
    lora = model.num_hidden_layers * 4 * 2 * 16 * model.hidden_size * 2  # r=16 on q,k,v,o
    rows = []
    for step in range(steps):
        seq = min(max_seq, int(rng.lognormvariate(6.3, 0.5)))  # padded length of this batch
        saved = batch * seq * model.hidden_size * 2 * model.num_hidden_layers  # checkpoints
        layer = batch * seq * (4 * model.hidden_size + 3 * model.intermediate_size) * 2  # one recompute
        logits = batch * seq * model.vocab_size * 4 if seq else 0
        optim = 0 if step == 0 else lora * 4  # fp32 master, grad, Adam m and v
        rows.append((step, weights + 512 * MIB + lora + optim + saved + layer + logits // 4))
    return rows


def _serving(model: ModelConfig, steps: int, sample_every: int, slots: int, seed: int):
    """Continuous batching: up to ``slots`` requests decode together; each arrives with a
    prompt, generates a random number of tokens and leaves, its slot refilled at once. The KV
    cache fills during the first request lifetimes and then holds a steady level."""
    rng = random.Random(seed)
    weights = model.parameter_count() * 2
    per_token = model.kv_bytes_per_token(2)
    active: list[list[int]] = []  # [context, remaining]
    rows = []
    for step in range(steps + 1):
        while len(active) < slots and (step == 0 or rng.random() < 0.05):
            active.append([rng.randint(200, 1200), rng.randint(200, 1800)])
        for req in active:
            req[0] += 1
            req[1] -= 1
        active = [r for r in active if r[1] > 0]
        if step % sample_every == 0:
            kv = sum(r[0] for r in active) * per_token
            act = len(active) * model.vocab_size * 4 + rng.randint(0, 256) * MIB
            rows.append((step, weights + 512 * MIB + kv + act))
    return rows


def scenarios():
    yield _decode(
        "qwen2-7b_decode_b32_cross20g",
        DecodeScenario(QWEN2_7B, batch=32, prompt_tokens=512, new_tokens=4096, seed=1),
        20, "Qwen2-7B bf16, 32 sequences, 512-token prompts, 4096 new tokens; outgrows a 20 GiB partition",
    )
    yield _decode(
        "qwen2-7b_decode_b16_fits40g",
        DecodeScenario(QWEN2_7B, batch=16, prompt_tokens=512, new_tokens=4096, seed=2),
        40, "Qwen2-7B bf16, 16 sequences; grows but fits a 40 GiB partition",
    )
    yield _decode(
        "llama3-8b_decode_b32_cross40g",
        DecodeScenario(LLAMA3_8B, batch=32, prompt_tokens=1024, new_tokens=7168, seed=3),
        40, "Llama-3-8B bf16, 32 sequences, 1024-token prompts up to the 8192 context; outgrows 40 GiB",
    )
    yield _decode(
        "llama3-8b_decode_b16_cross20g",
        DecodeScenario(LLAMA3_8B, batch=16, prompt_tokens=1024, new_tokens=7168, seed=4),
        20, "Llama-3-8B bf16, 16 sequences; outgrows a 20 GiB partition early",
    )
    yield _decode(
        "llama3-8b_decode_b16_fits40g",
        DecodeScenario(LLAMA3_8B, batch=16, prompt_tokens=1024, new_tokens=7168, seed=5),
        40, "Llama-3-8B bf16, 16 sequences; grows but fits a 40 GiB partition",
    )
    yield (
        "qwen2-7b_lora_train_plateau20g",
        _lora_training(QWEN2_7B, steps=1000, batch=4, max_seq=2048, seed=6),
        {"capacity_gib": 20, "horizon": 999, "model": QWEN2_7B.name, "model_source": QWEN2_7B.source,
         "description": "Qwen2-7B LoRA r=16 fine-tuning, batch 4, padded length lognormal(6.3, 0.5) "
                        "capped at 2048, gradient checkpointing; flat after warm-up, never crosses"},
    )
    yield (
        "llama3-8b_serving_plateau40g",
        _serving(LLAMA3_8B, steps=40000, sample_every=100, slots=24, seed=7),
        {"capacity_gib": 40, "horizon": 40000, "model": LLAMA3_8B.name, "model_source": LLAMA3_8B.source,
         "description": "Llama-3-8B continuous batching, 24 slots, prompts 200-1200, outputs 200-1800 "
                        "tokens; KV cache fills then holds steady, never crosses 40 GiB"},
    )


def main(argv: list[str]) -> int:
    out = Path(argv[1]) if len(argv) > 1 else Path(__file__).parent
    for name, rows, meta in scenarios():
        write_series(out / f"{name}.csv", rows, comments=[f"generated by make_series.py: {meta['description']}"])
        (out / f"{name}.json").write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
