"""A model's own operators: which models can be timed, and their rows -> `ModelOps` (pure).

`model_ops.py` times the real module of a model at its shapes (decode iterations, prefills,
training passes, the optimizer step, an in-memory weight update); this module decides which
models it can build and fits the rows into the linear terms a profile stores:

| term | fit |
|---|---|
| decode iteration | ``fixed + per_sequence * b + per_kv_token * K`` (K: the batch's cached tokens, new ones included) |
| prefill | ``fixed + per_sequence * prompts + per_token * tokens`` |
| training pass, log-prob forward | ``fixed + per_token * tokens`` (tokens = rows x sequence length) |
| optimizer step | the median of its timings |
| weight update | flat copies: ``latency + bytes / bandwidth``; the update's latency = its time - bytes / bandwidth |

All linear fits are `fit.fit_linear` (non-negative terms, robust relative residuals). Only
`rlsim-tiny-gpt` configs (the validation trainer's policy, `rlsim.trainer.model.GPT`) have a
module here; other models keep the generic terms, and `ops_model` says so by returning None.
No torch here. Units: seconds, bytes, tokens.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlsim.calibration import fit
from rlsim.calibration.profile import ModelOps, model_key
from rlsim.errors import ScenarioError

# config.json model types whose real module calibration can build (the trainer's GPT).
OPS_MODEL_TYPES = ("rlsim-tiny-gpt",)
KERNELS = ("op_decode", "op_prefill", "op_train", "op_forward", "op_optimizer", "op_copy", "op_weight_sync")


@dataclass(frozen=True)
class OpsModel:
    """A model whose operators can be timed: its profile key and the trainer GPT's sizes."""

    key: str  # rlsim.calibration.profile.model_key of its LlmSpec
    name: str
    model_type: str
    n_layer: int
    n_head: int
    n_embd: int
    vocab_size: int
    block_size: int  # longest sequence: the position table


def is_config_path(model: str) -> bool:
    """A `--model` value naming a config.json file rather than a catalog LLM."""
    return model.endswith(".json") or "/" in model


def ops_model(path: str | Path, field: str = "model") -> OpsModel | None:
    """The timeable model a config.json describes; None when its model_type has no module here.

    An rlsim-tiny-gpt config the trainer's GPT cannot express (an MLP not 4x wide, grouped KV
    heads, untied embeddings) is a ScenarioError on `field`: timing another module would file
    operators under the wrong model.
    """
    from rlsim.catalog import llm_from_hf_config

    spec = llm_from_hf_config(path, field=field)  # every unreadable or invalid file is refused here
    model_type = str(json.loads(Path(path).read_text()).get("model_type", "")).lower()
    if model_type not in OPS_MODEL_TYPES:
        return None
    problems = [
        (spec.intermediate_size != 4 * spec.hidden_size, f"intermediate_size must be 4 x {spec.hidden_size}"),
        (spec.num_kv_heads != spec.num_attention_heads, "num_key_value_heads must equal num_attention_heads"),
        (spec.head_dim * spec.num_attention_heads != spec.hidden_size, "head_dim x heads must be hidden_size"),
        (not spec.tie_word_embeddings, "tie_word_embeddings must be true"),
    ]
    for bad, reason in problems:
        if bad:
            raise ScenarioError(field, f"{path}: model_type '{model_type}' is the trainer's GPT: {reason}")
    return OpsModel(
        key=model_key(spec),
        name=spec.name,
        model_type=model_type,
        n_layer=spec.num_layers,
        n_head=spec.num_attention_heads,
        n_embd=spec.hidden_size,
        vocab_size=spec.vocab_size,
        block_size=spec.max_position_embeddings,
    )


def _span(values: Sequence[float]) -> list[float]:
    return [float(min(values)), float(max(values))]


def _fit_row(name: str, quantity: str, formula: str, params: dict[str, float], q: fit.FitQuality) -> dict[str, Any]:
    return {
        "kernel": "fit",
        "quantity": f"{quantity} ({name})",
        "formula": formula,
        "params": params,
        "r2": q.r2,
        "max_rel_residual": q.max_rel_residual,
        "n": q.n,
    }


# Linear fits: quantity -> (kernel, row fields the terms multiply, parameter names incl. fixed_s).
LINEAR = {
    "decode": ("op_decode", ("batch", "kv_tokens"), ("fixed_s", "per_sequence_s", "per_kv_token_s")),
    "prefill": ("op_prefill", ("prompts", "tokens"), ("fixed_s", "per_sequence_s", "per_token_s")),
    "train": ("op_train", ("tokens",), ("fixed_s", "per_token_s")),
    "forward": ("op_forward", ("tokens",), ("fixed_s", "per_token_s")),
}


def _linear(rows: Sequence[Mapping[str, Any]], kernel: str, terms: Sequence[str]) -> fit.LinearFit:
    """Fit seconds = c_fixed + sum c_term * row[term] over the rows of one kernel."""
    picked = fit.select(rows, kernel)
    return fit.fit_linear([[1.0, *(float(r[t]) for t in terms)] for r in picked], [r["seconds"] for r in picked])


def _one_model(rows: Sequence[Mapping[str, Any]]) -> tuple[ModelOps, list[dict[str, Any]]]:
    """The ModelOps of one model's rows, and a fit row per fitted quantity."""
    first, name = rows[0], str(rows[0]["model"])
    lines = {q: _linear(rows, kernel, terms) for q, (kernel, terms, _) in LINEAR.items()}
    terms = {f"{q}_{p}": c for q, f in lines.items() for p, c in zip(LINEAR[q][2], f.coefs, strict=True)}
    copies = fit.select(rows, "op_copy")
    copy = fit.fit_latency_bandwidth([r["bytes"] for r in copies], [r["seconds"] for r in copies])
    syncs = fit.select(rows, "op_weight_sync")
    latency = max(0.0, statistics.mean(r["seconds"] - r["bytes"] / copy.bytes_per_s for r in syncs))
    ops = ModelOps(
        model=name,
        model_type=str(first["model_type"]),
        dtype=str(first["dtype"]),
        **terms,
        optimizer_s=statistics.median(r["seconds"] for r in fit.select(rows, "op_optimizer")),
        weight_bytes=float(syncs[0]["bytes"]),
        weight_sync_latency_s=latency,
        weight_copy_gbps=copy.bytes_per_s / 1e9,
        measured_range={
            "decode_batch": _span([r["batch"] for r in fit.select(rows, "op_decode")]),
            "decode_kv_tokens": _span([r["kv_tokens"] for r in fit.select(rows, "op_decode")]),
            "prefill_tokens": _span([r["tokens"] for r in fit.select(rows, "op_prefill")]),
            "train_tokens": _span([r["tokens"] for r in fit.select(rows, "op_train")]),
        },
    )
    fits = [
        _fit_row(
            name,
            f"ops_{q}",
            "seconds = " + " + ".join(["fixed_s", *(f"{p} * {t}" for p, t in zip(params[1:], terms_, strict=True))]),
            dict(zip(params, lines[q].coefs, strict=True)),
            lines[q].quality,
        )
        for q, (_, terms_, params) in LINEAR.items()
    ]
    copy_params = {"latency_s": copy.latency_s, "gbps": copy.bytes_per_s / 1e9}
    fits.append(_fit_row(name, "ops_copy", "seconds = latency_s + bytes / bandwidth", copy_params, copy.quality))
    return ops, fits


def fit_model_ops(rows: Sequence[Mapping[str, Any]]) -> tuple[dict[str, ModelOps], list[dict[str, Any]]]:
    """Every timed model's ModelOps by model key, and the fit rows (empty when none was timed)."""
    by_key: dict[str, list[Mapping[str, Any]]] = {}
    for r in rows:
        if r.get("kernel") in KERNELS:
            by_key.setdefault(str(r["model_key"]), []).append(r)
    ops: dict[str, ModelOps] = {}
    fits: list[dict[str, Any]] = []
    for key in sorted(by_key):
        ops[key], more = _one_model(by_key[key])
        fits.extend(more)
    return ops, fits
