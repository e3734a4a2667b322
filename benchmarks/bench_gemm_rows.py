"""The decode model's GEMM time against measured H100 GEMM kernels at 1-4096 rows.

The decode and prefill models charge a layer's GEMMs at `gemm_rate_flops`, a rate that
saturates in the token count (rows): matmul_tflops x M / (M + half), where half is the
profile's matmul_tokens_half scaled by sqrt(matmul_tokens_half_params / the layer's per-GPU GEMM
parameters) (`decode.tokens_half`), and a decode iteration takes at least its weight reads
(`iteration_cost`: max(weights, GEMMs)). `--flat` compares matmul_tokens_half at every size. This prints,
for each model and TP degree that Vidur profiled on an H100, the measured time of one decoder
layer's four linear layers (QKV, output projection, gate/up, down) against that model time at
each M, and fits the saturating rate to the measurements as `rlsim calibrate` does
(`calibration.fit.gemm_rate_by_tokens` pools the layers by time per token count, then
`fit_saturating`).

Data: benchmarks/data/vidur_h100_gemm.csv, the median kernel times of Vidur's H100 operator
profiles (microsoft/vidur@7d47513363ec447a741ac5e47241580b47724fbf
data/profiling/compute/h100/*/mlp.csv, added 2024-05-14; fp16, whose tensor-core rate is
bf16's). The same configurations on an A100 80GB: benchmarks/data/vidur_a100_gemm.csv (`--gpu a100-80gb`).
`--laws` also fits the law's half at 6.97e8, its exponent and the saturated rate jointly over all
21 configurations (each fixed or free) and prints their rms errors: what decides whether a GPU
needs its own reference (docs/validation.md, the layer-size GEMM row).
Run: python benchmarks/bench_gemm_rows.py [--tokens-half 96] [--gpu a100-80gb] [--laws]
"""

from __future__ import annotations

import argparse
import csv
import math
from collections import defaultdict
from pathlib import Path

import numpy as np
from scipy.optimize import minimize, minimize_scalar

from rlsim.calibration.fit import fit_gemm, fit_gemm_size, fit_saturating, gemm_rate_by_tokens
from rlsim.calibration.profile import datasheet_profile
from rlsim.models.decode import gemm_rate_flops

DATA = Path(__file__).parent / "data" / "vidur_h100_gemm.csv"
# the same configurations measured on other GPUs (same commit and extraction), by catalog key
MEASURED = {"h100-sxm": DATA, "a100-80gb": Path(__file__).parent / "data" / "vidur_a100_gemm.csv"}
BF16_BYTES = 2
REFERENCE = 6.97e8  # the shipped matmul_tokens_half_params: the laws below give their half there
SHOWN = (16, 64, 128, 256, 512, 1024, 4096)
FIT_TOKENS = (128, 256, 512, 1024, 2048, 4096)  # rows where a layer's GEMM term can bind (H100)
# the shapes the datasheet value is taken from: LLM decoder layers at TP1 with hidden 4096-8192
# (Llama-2-7B, InternLM-20B, CodeLlama-34B, Llama-2-70B, Qwen-72B); phi-2's 2560 is smaller
FIT_MODELS = (
    "meta-llama/Llama-2-7b-hf",
    "internlm/internlm-20b",
    "codellama/CodeLlama-34b-Instruct-hf",
    "meta-llama/Llama-2-70b-hf",
    "Qwen/Qwen-72B",
)


def load(path: Path = DATA) -> dict[tuple[str, int], list[dict]]:
    """Measured rows keyed by (model, tp): each op's k, n, tokens, seconds and FLOPs."""
    lines = [line for line in path.read_text().splitlines() if not line.startswith("#")]
    out: dict[tuple[str, int], list[dict]] = defaultdict(list)
    for r in csv.DictReader(lines):
        k, n, t = int(r["k"]), int(r["n"]), int(r["tokens"])
        row = {"kernel": "gemm", "layer": r["op"], "k": k, "n": n, "tokens": t}
        out[(r["model"], int(r["tp"]))].append(row | {"seconds": float(r["ms"]) * 1e-3, "flops": 2.0 * t * k * n})
    return out


def tp1_fit(data: dict[tuple[str, int], list[dict]]):
    """The saturating fit over the TP1 LLM shapes, pooled by time per token count."""
    rows = [r for (model, tp), rs in data.items() if tp == 1 and model in FIT_MODELS for r in rs]
    return fit_saturating(*gemm_rate_by_tokens(rows))


def best_tokens_half(profile, rows: list[dict], tokens=FIT_TOKENS) -> float:
    """The flat half-saturation that fits these GEMMs' measured times best in the decode model's form
    (least squares of log(model / measured) over `tokens`, the rows where the GEMM term can bind)."""
    flat = profile.model_copy(update={"matmul_tokens_half_params": None})
    measured = {t: sum(r["seconds"] for r in rows if r["tokens"] == t) for t in tokens}

    def loss(half: float) -> float:
        p = flat.model_copy(update={"matmul_tokens_half": half})
        return sum(math.log(model_layer_s(p, rows, t) / measured[t]) ** 2 for t in tokens)

    return float(minimize_scalar(loss, bounds=(1.0, 2000.0), method="bounded", options={"xatol": 0.01}).x)


def reference_params(profile, data: dict[tuple[str, int], list[dict]]) -> float:
    """Layer size (per-GPU GEMM parameters) at which the profile's matmul_tokens_half holds, from
    every configuration's best half with the exponent -1/2: mean of log(half x sqrt(P))."""
    logs = []
    for rows in data.values():
        params = sum(r["k"] * r["n"] for r in rows if r["tokens"] == FIT_TOKENS[0])
        logs.append(math.log(best_tokens_half(profile, rows)) + 0.5 * math.log(params))
    return (math.exp(sum(logs) / len(logs)) / profile.matmul_tokens_half) ** 2


def configurations(data: dict[tuple[str, int], list[dict]]) -> list[tuple[float, np.ndarray]]:
    """Per configuration: the layer's per-GPU GEMM parameters P and its measured times at FIT_TOKENS."""
    out = []
    for _, rows in sorted(data.items()):
        params = sum(r["k"] * r["n"] for r in rows if r["tokens"] == FIT_TOKENS[0])
        out.append((params, np.array([sum(r["seconds"] for r in rows if r["tokens"] == t) for t in FIT_TOKENS])))
    return out


def law_errors(profile, configs, rate_flops: float, half: float, exponent: float) -> list[np.ndarray]:
    """model / measured - 1 at FIT_TOKENS per configuration, for the law max(weight reads, GEMMs at
    rate_flops x M / (M + half x (REFERENCE / P)^exponent)): `half` is the rows at the shipped
    reference size (matmul_tokens_half_params), exponent 1/2 the shipped law, 0 a flat half."""
    t = np.array(FIT_TOKENS, float)
    out = []
    for params, measured in configs:
        h = half * (REFERENCE / params) ** exponent
        weights = params * BF16_BYTES / (profile.memory_gbps * 1e9)
        out.append(np.maximum(weights, 2.0 * params * (t + h) / rate_flops) / measured - 1.0)
    return out


def fit_law(profile, configs, fixed: dict[str, float]) -> dict[str, float]:
    """The law's rate (TFLOPS), half at REFERENCE (rows) and exponent, those not in `fixed` fitted
    jointly over every configuration (least squares of log(model / measured) at FIT_TOKENS)."""
    start = {"tflops": profile.matmul_tflops, "half": profile.matmul_tokens_half, "exponent": 0.5}
    free = [k for k in start if k not in fixed]

    def law(x) -> dict[str, float]:
        got = dict(zip(free, x, strict=True))
        for k in ("tflops", "half"):  # fitted in logs (positive)
            if k in got:
                got[k] = math.exp(got[k])
        return {**fixed, **got}

    def loss(x) -> float:
        p = law(x)
        return sum(
            float(np.sum(np.log1p(e) ** 2))
            for e in law_errors(profile, configs, p["tflops"] * 1e12, p["half"], p["exponent"])
        )

    x0 = [math.log(start[k]) if k != "exponent" else start[k] for k in free]
    opts = {"xatol": 1e-6, "fatol": 1e-12, "maxiter": 4000}
    return law(minimize(loss, x0, method="Nelder-Mead", options=opts).x) if free else dict(fixed)


def law_table(profile, data: dict[tuple[str, int], list[dict]]) -> list[tuple[str, dict[str, float], list[float]]]:
    """The laws compared in docs/validation.md: (name, parameters, per-configuration rms error)."""
    configs = configurations(data)
    rate, half = profile.matmul_tflops, profile.matmul_tokens_half
    laws = [
        ("flat (profile)", {"tflops": rate, "half": half, "exponent": 0.0}),
        ("shipped law (profile)", {"tflops": rate, "half": half, "exponent": 0.5}),
        ("own reference, profile rate", {"tflops": rate, "exponent": 0.5}),
        ("own reference + exponent, profile rate", {"tflops": rate}),
        ("shipped law, own rate", {"half": half, "exponent": 0.5}),
        ("own reference + rate", {"exponent": 0.5}),
        ("own reference + exponent + rate", {}),
        ("flat, own half + rate", {"exponent": 0.0}),
    ]
    out = []
    for name, fixed in laws:
        p = fit_law(profile, configs, fixed)
        errs = law_errors(profile, configs, p["tflops"] * 1e12, p["half"], p["exponent"])
        out.append((name, p, [math.sqrt(float(np.mean(e**2))) for e in errs]))
    return out


def calibration_fits(profile, data: dict[tuple[str, int], list[dict]]) -> dict[str, tuple]:
    """What `rlsim calibrate` would fit from these kernels, per model measured at several TP degrees:
    its TP1 rows as the "gemm" sweep and the others as "gemm_size" rows, weight reads at the
    profile's memory_gbps (`fit.fit_gemm`, then `fit.fit_gemm_size`): model -> (TP1 fit, size fit)."""
    out = {}
    for model in sorted({m for m, _ in data}):
        tps = sorted(tp for m, tp in data if m == model)
        if len(tps) < 2:
            continue
        rows = [r | {"kernel": "gemm" if tp == 1 else "gemm_size", "tp": tp} for tp in tps for r in data[(model, tp)]]
        gemm = fit_gemm(data[(model, 1)])
        out[model] = (gemm, fit_gemm_size(rows, gemm, profile.memory_gbps * 1e9))
    return out


def model_layer_s(profile, rows: list[dict], tokens: int) -> float:
    """The decode model's time for these GEMMs at `tokens` rows: max(weight reads, GEMM FLOPs)."""
    params = sum(r["k"] * r["n"] for r in rows if r["tokens"] == tokens)
    weights = params * BF16_BYTES / (profile.memory_gbps * 1e9)
    return max(weights, 2.0 * params * tokens / gemm_rate_flops(profile, tokens, params))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--tokens-half", type=float, default=None, help="matmul_tokens_half to compare (default: the profile's)"
    )
    ap.add_argument("--flat", action="store_true", help="matmul_tokens_half at every layer size (before 2026-12-07)")
    ap.add_argument(
        "--gpu", choices=sorted(MEASURED), default="h100-sxm", help="whose measurements and datasheet profile"
    )
    ap.add_argument(
        "--laws", action="store_true", help="also fit reference, exponent and rate jointly (docs/validation.md)"
    )
    args = ap.parse_args()
    profile = datasheet_profile(args.gpu)
    if args.tokens_half is not None:
        profile = profile.model_copy(update={"matmul_tokens_half": args.tokens_half})
    if args.flat:
        profile = profile.model_copy(update={"matmul_tokens_half_params": None})
    data = load(MEASURED[args.gpu])
    print(
        f"{args.gpu} datasheet profile: matmul_tflops {profile.matmul_tflops:.1f}, "
        f"matmul_tokens_half {profile.matmul_tokens_half:.1f}, weight reads at {profile.memory_gbps:.0f} GB/s"
    )
    print("model time / measured time - 1 of one decoder layer's four GEMMs, at M rows:")
    print(f"{'model':38s} tp " + " ".join(f"{m:>6d}" for m in SHOWN) + "   fit rate_max  x_half")
    for (model, tp), rows in sorted(data.items()):
        cells = []
        for m in SHOWN:
            at = [r for r in rows if r["tokens"] == m]
            measured = sum(r["seconds"] for r in at)
            cells.append(f"{(model_layer_s(profile, rows, m) / measured - 1) * 100:+5.0f}%")
        fit = fit_saturating(*gemm_rate_by_tokens(rows))
        print(f"{model:38s} {tp:2d} " + " ".join(cells) + f"   {fit.rate_max / 1e12:8.1f} {fit.x_half:7.1f}")
    flat = datasheet_profile(args.gpu)
    print(
        f"reference layer size ({flat.matmul_tokens_half:.1f} rows, exponent -1/2) from every configuration: "
        f"{reference_params(flat, data):.3e}"
    )
    fit = tp1_fit(data)
    print(
        f"pooled TP1 fit over {', '.join(FIT_MODELS)}: rate_max {fit.rate_max / 1e12:.1f} TFLOPS, "
        f"x_half {fit.x_half:.1f} tokens"
    )
    if args.laws:
        print(
            f"laws fitted over all {len(data)} configurations at {FIT_TOKENS[0]}-{FIT_TOKENS[-1]} rows "
            "(datasheet profile):"
        )
        print(
            f"{'law':40s} {'TFLOPS':>7s} {'half@6.97e8':>11s} {'exponent':>8s} {'ref(-1/2)':>9s}  "
            "rms: range, median, pooled"
        )
        for name, p, rms in law_table(flat, data):
            ref = REFERENCE * (p["half"] / flat.matmul_tokens_half) ** 2
            pooled = math.sqrt(sum(r * r for r in rms) / len(rms))
            print(
                f"{name:40s} {p['tflops']:7.1f} {p['half']:11.1f} {-p['exponent']:+8.2f} {ref:9.2e}  "
                f"{min(rms):.1%}-{max(rms):.1%}, {float(np.median(rms)):.1%}, {pooled:.1%}"
            )
        print("what rlsim calibrate would fit from each model's kernels at TP 1-8 (fit.fit_gemm_size):")
        for model, (gemm, size) in calibration_fits(flat, data).items():
            print(
                f"{model:38s} TP1 {gemm.rate_max / 1e12:6.1f} TFLOPS, half {gemm.x_half:6.1f}; reference "
                f"{size.reference_params:.3g} ({size.reference_params / size.params[-1]:.2f} x TP1), rms log error "
                f"{size.rms:.3f} vs {size.rms_flat:.3f} flat, free exponent -{size.exponent:.2f}, half at 6.97e8 "
                f"{gemm.x_half * math.sqrt(size.reference_params / REFERENCE):5.1f}"
            )


if __name__ == "__main__":
    main()
