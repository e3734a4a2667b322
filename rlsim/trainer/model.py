"""The policy: a tiny GPT in the style of nanoGPT's `model.py`, with a KV cache for generation.

Token + learned position embeddings, `n_layer` pre-LayerNorm blocks (causal self-attention and a
GELU MLP of width 4*n_embd), a final LayerNorm and an LM head tied to the token embedding. No
biases anywhere, so `n_params` is exactly `V*C + T*C + L*(12*C^2 + 2*C) + C`. Shapes use B batch,
T time (tokens), C channels (n_embd), V vocabulary, nh heads, hd = C // nh head dimension.
"""

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
from torch.nn import functional as F

# One layer's cache: keys and values, each [B, nh, T_past, hd].
LayerCache = tuple[torch.Tensor, torch.Tensor]


@dataclass(frozen=True)
class GPTConfig:
    n_layer: int = 2
    """number of transformer blocks"""
    n_head: int = 2
    """attention heads per block (n_embd must be divisible by it)"""
    n_embd: int = 64
    """embedding width C; the MLP is 4*C wide"""
    vocab_size: int = 16
    """tokens in the vocabulary (the task's characters, padded up)"""
    block_size: int = 24
    """longest sequence (prompt + completion) in tokens: the position-embedding table size"""


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        assert config.n_embd % config.n_head == 0, "n_embd must be divisible by n_head"
        self.n_head = config.n_head
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=False)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=False)

    def forward(self, x: torch.Tensor, past: LayerCache | None) -> tuple[torch.Tensor, LayerCache]:
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        if past is not None:  # decode: append this step's keys/values to the cache
            k = torch.cat([past[0], k], dim=2)  # [B, nh, T_past + T, hd]
            v = torch.cat([past[1], v], dim=2)
            # a decode step feeds one token, which may attend to every cached position
            assert T == 1, "with a cache, feed one token at a time"
        y = F.scaled_dot_product_attention(q, k, v, is_causal=past is None)  # [B, nh, T, hd]
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y), (k, v)


class MLP(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=False)
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(F.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd, bias=False)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd, bias=False)
        self.mlp = MLP(config)

    def forward(self, x: torch.Tensor, past: LayerCache | None) -> tuple[torch.Tensor, LayerCache]:
        a, cache = self.attn(self.ln_1(x), past)
        x = x + a
        x = x + self.mlp(self.ln_2(x))
        return x, cache


class GPT(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.block_size, config.n_embd)
        self.h = nn.ModuleList([Block(config) for _ in range(config.n_layer)])
        self.ln_f = nn.LayerNorm(config.n_embd, bias=False)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight  # weight tying, as in GPT-2
        self.apply(self._init_weights)
        # GPT-2's scaled init of the residual projections
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

    def _init_weights(self, module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(
        self, idx: torch.Tensor, cache: list[LayerCache] | None = None
    ) -> tuple[torch.Tensor, list[LayerCache]]:
        """idx [B, T] token ids -> (logits [B, T, V], new cache). With a cache, T must be 1."""
        B, T = idx.shape
        t0 = 0 if cache is None else cache[0][0].shape[2]  # tokens already cached
        assert t0 + T <= self.config.block_size, f"sequence of {t0 + T} > block_size"
        pos = torch.arange(t0, t0 + T, dtype=torch.long, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)  # [B, T, C]
        new_cache = []
        for i, block in enumerate(self.h):
            x, layer_cache = block(x, None if cache is None else cache[i])
            new_cache.append(layer_cache)
        return self.lm_head(self.ln_f(x)), new_cache


def n_params(config: GPTConfig) -> int:
    """Exact parameter count (the tied LM head counted once)."""
    V, T, L, C = config.vocab_size, config.block_size, config.n_layer, config.n_embd
    per_block = 2 * C + 3 * C * C + C * C + 4 * C * C + 4 * C * C  # 2 LayerNorms, attn, MLP
    return V * C + T * C + L * per_block + C


def to_hf_config(config: GPTConfig) -> dict:
    """The architecture as a Hugging Face-style config dict, for the simulator's catalog.

    The MLP is GPT-2's (two matrices, GELU), not a gated SwiGLU: `hidden_act` says so.
    """
    return {
        "model_type": "rlsim-tiny-gpt",
        "num_hidden_layers": config.n_layer,
        "hidden_size": config.n_embd,
        "intermediate_size": 4 * config.n_embd,
        "num_attention_heads": config.n_head,
        "num_key_value_heads": config.n_head,
        "head_dim": config.n_embd // config.n_head,
        "vocab_size": config.vocab_size,
        "max_position_embeddings": config.block_size,
        "tie_word_embeddings": True,
        "hidden_act": "gelu",
        "attention_bias": False,
        "num_parameters": n_params(config),
        "torch_dtype": "float32",
    }
