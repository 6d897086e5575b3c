"""Memory of LLM inference built from real model configurations.

Used to generate benchmark series (``predictor/data/``) and usable by the cluster simulator
to give fake workloads a realistic memory curve. Pure arithmetic; no model is loaded.

Per token and sequence, the KV cache holds one key and one value vector per layer and KV
head: ``2 * layers * kv_heads * head_dim * dtype_bytes``.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

__all__ = ["ModelConfig", "QWEN2_7B", "LLAMA3_8B", "MODELS", "DecodeScenario", "decode_series"]

GIB = 1 << 30
MIB = 1 << 20


@dataclass(frozen=True)
class ModelConfig:
    """The fields of a Hugging Face ``config.json`` that decide memory."""

    name: str
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    hidden_size: int
    intermediate_size: int
    vocab_size: int
    tie_word_embeddings: bool
    qkv_bias: bool
    source: str

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    def kv_bytes_per_token(self, dtype_bytes: int = 2) -> int:
        """KV-cache bytes per token of one sequence."""
        return 2 * self.num_hidden_layers * self.num_key_value_heads * self.head_dim * dtype_bytes

    def parameter_count(self) -> int:
        h, kv = self.hidden_size, self.num_key_value_heads * self.head_dim
        attn = h * h + 2 * h * kv + h * h  # q, k, v, o
        if self.qkv_bias:
            attn += h + 2 * kv
        mlp = 3 * h * self.intermediate_size  # gate, up, down
        per_layer = attn + mlp + 2 * h  # two RMSNorm weights
        embed = self.vocab_size * h
        head = 0 if self.tie_word_embeddings else self.vocab_size * h
        return self.num_hidden_layers * per_layer + embed + head + h  # + final norm


# https://huggingface.co/Qwen/Qwen2-7B/blob/main/config.json
QWEN2_7B = ModelConfig(
    name="Qwen2-7B",
    num_hidden_layers=28,
    num_attention_heads=28,
    num_key_value_heads=4,
    hidden_size=3584,
    intermediate_size=18944,
    vocab_size=152064,
    tie_word_embeddings=False,
    qkv_bias=True,
    source="https://huggingface.co/Qwen/Qwen2-7B/blob/main/config.json",
)

# https://huggingface.co/meta-llama/Meta-Llama-3-8B/blob/main/config.json (gated; the same
# values are in public copies, e.g. huggingface.co/pandyamarut/Meta-Llama-3-8B, which also
# states head_dim 128)
LLAMA3_8B = ModelConfig(
    name="Llama-3-8B",
    num_hidden_layers=32,
    num_attention_heads=32,
    num_key_value_heads=8,
    hidden_size=4096,
    intermediate_size=14336,
    vocab_size=128256,
    tie_word_embeddings=False,
    qkv_bias=False,
    source="https://huggingface.co/meta-llama/Meta-Llama-3-8B/blob/main/config.json",
)

MODELS = {m.name: m for m in (QWEN2_7B, LLAMA3_8B)}


@dataclass(frozen=True)
class DecodeScenario:
    """Batched generation: ``batch`` sequences, a prompt, then one token per step."""

    model: ModelConfig
    batch: int
    prompt_tokens: int
    new_tokens: int
    sample_every: int = 16  # one sample per this many decode steps
    dtype_bytes: int = 2  # bf16 weights and cache
    context_bytes: int = 512 * MIB  # CUDA context and library handles (constant)
    block_bytes: int = 2 * MIB  # the caching allocator rounds large blocks to this
    seed: int = 0


def _round_up(value: int, block: int) -> int:
    return -(-value // block) * block


def decode_series(sc: DecodeScenario) -> list[tuple[int, int]]:
    """(decode step, device bytes) of a batched generation, sampled every ``sample_every`` steps.

    Bytes = weights + context + KV cache (each layer's K and V rounded to allocator blocks)
    + the activations of that step (a random share of one step's worst case, as temporary
    buffers come and go between samples). Step 0 is the prefill, whose activations over the
    whole prompt make an early spike that the KV cache only later outgrows.
    """
    m = sc.model
    rng = random.Random(sc.seed)
    weights = m.parameter_count() * sc.dtype_bytes
    per_layer_token = m.num_key_value_heads * m.head_dim * sc.dtype_bytes  # K (or V) of one layer
    out: list[tuple[int, int]] = []
    for step in range(0, sc.new_tokens + 1, sc.sample_every):
        tokens = sc.batch * (sc.prompt_tokens + step)
        kv = 2 * m.num_hidden_layers * _round_up(tokens * per_layer_token, sc.block_bytes)
        rows = sc.batch * (sc.prompt_tokens if step == 0 else 1)
        # MLP gate+up, attention scores, fp32 logits of the last position per sequence
        act = rows * 2 * m.intermediate_size * sc.dtype_bytes
        act += sc.batch * m.num_attention_heads * (rows // sc.batch) * (sc.prompt_tokens + step) * sc.dtype_bytes
        act += sc.batch * m.vocab_size * 4
        act = int(act * (0.6 + 0.4 * rng.random()))
        out.append((step, weights + sc.context_bytes + kv + _round_up(act, sc.block_bytes)))
    return out
