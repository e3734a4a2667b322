"""`calibrate()`: run every kernel family on one device, fit, and return a measured Profile.

The driver picks the device (``auto``: the current CUDA GPU if torch sees one, else the CPU),
the LLM shape (a catalog model, a config.json, or the device's default), and a sweep (quick or
full, sized per device type); it then runs the kernels' cases one by one, reporting progress
through an optional ``progress(done, total, label)`` callback, and hands the rows to
`assemble.measured_profile`. When the model is a config.json whose module calibration can
build (`model_ops_fit.OpsModel`), its own operators are timed too (`model_ops.py`) and the
profile keeps them in `model_ops`; `add_model_ops` times them for an existing profile. It never
prints; the CLI renders.

torch is imported inside the functions, so importing this module (and `rlsim.calibration`)
stays torch-free. Units: seconds, bytes, tokens.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import platform
from collections.abc import Callable
from importlib import metadata
from typing import TYPE_CHECKING, Any

from rlsim.calibration.assemble import CONTENDED, DeviceFacts, measured_profile
from rlsim.calibration.model_ops_fit import OpsModel, fit_model_ops, is_config_path, ops_model
from rlsim.calibration.profile import GIB_BYTES, Profile, datasheet_profile
from rlsim.calibration.shapes import LlmShape, resolve_shape
from rlsim.calibration.sweeps import OPS_SWEEPS, SWEEPS, Sweep, fit_to_memory
from rlsim.errors import ScenarioError
from rlsim.host_allocator import steady_allocator

if TYPE_CHECKING:
    import torch

Progress = Callable[[int, int, str], None]
# The CPU "device" shares RAM with the OS, the Python process and host copies of the data:
# grant it half of physical memory (an assumption, stated in the profile's notes).
CPU_MEMORY_SHARE = 0.5


def select_device(device: str) -> torch.device:
    """'auto' | 'cpu' | 'cuda' | 'cuda:N' -> a torch device (ScenarioError if unusable)."""
    try:
        import torch
    except ImportError:
        raise ScenarioError("device", "calibration needs torch: pip install 'rlsim[torch]'") from None
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu":
        return torch.device("cpu")
    if device == "cuda" or device.startswith("cuda:"):
        if not torch.cuda.is_available():
            raise ScenarioError("device", f"'{device}' requested but torch sees no CUDA GPU; use 'cpu'")
        if device != "cuda" and not device[5:].isdigit():
            raise ScenarioError("device", f"'{device}' is not one of auto, cpu, cuda, cuda:N")
        index = int(device[5:]) if device != "cuda" else torch.cuda.current_device()
        if index >= torch.cuda.device_count():
            raise ScenarioError("device", f"'{device}': only {torch.cuda.device_count()} CUDA GPU(s) visible")
        return torch.device("cuda", index)
    raise ScenarioError("device", f"'{device}' is not one of auto, cpu, cuda, cuda:N")


def _software() -> dict[str, str]:
    import torch

    versions = {"python": platform.python_version(), "torch": torch.__version__}
    for dist in ("numpy", "scipy", "rlsim"):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    if torch.cuda.is_available():
        versions["cuda"] = torch.version.cuda or ""
        versions["cudnn"] = str(torch.backends.cudnn.version())
        versions["nccl"] = ".".join(str(v) for v in torch.cuda.nccl.version())
    return versions


def device_facts(dev: torch.device) -> DeviceFacts:
    """Catalog facts of the CUDA GPU (matched by its torch name), or the CPU's RAM share.

    A GPU's memory is the total CUDA reports for it (torch.cuda.mem_get_info), the figure vLLM
    and SGLang take their memory shares of, not the catalog's nominal size.
    """
    import torch

    from rlsim.calibration.timer import environment

    if dev.type == "cpu":
        ram_bytes = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        return DeviceFacts(
            key="cpu",
            name=environment(dev)["device_name"],
            memory_gib=round(CPU_MEMORY_SHARE * ram_bytes / GIB_BYTES, 1),
            software=_software(),
            citations=("Peaks measured on this host by rlsim.calibration (best GEMM rate, stream copy).",),
        )
    name = torch.cuda.get_device_name(dev)
    gpu = catalog_gpu(name)
    return DeviceFacts(
        key=gpu.key,
        name=name,
        memory_gib=int(torch.cuda.mem_get_info(dev)[1]) / GIB_BYTES,
        peak_tflops=gpu.bf16_tflops,
        peak_memory_gbps=gpu.hbm_tbps * 1000.0,
        datasheet=datasheet_profile(gpu.key),
        software=_software(),
        citations=tuple(getattr(gpu, "sources", ())),
    )


def catalog_gpu(torch_name: str) -> Any:
    """The catalog GpuSpec for a name as torch reports it ('NVIDIA H200' -> 'h200')."""
    from rlsim.catalog import get_gpu

    candidates = [torch_name, torch_name.removeprefix("NVIDIA ").removeprefix("AMD ")]
    for name in candidates[:-1]:
        try:
            return get_gpu(name, field="device")
        except ScenarioError:
            pass
    try:
        return get_gpu(candidates[-1], field="device")
    except ScenarioError as exc:
        raise ScenarioError(
            "device",
            f"GPU '{torch_name}' is not in the catalog: add it (or this spelling as an alias) to "
            f"rlsim/catalog/gpus.yaml, see docs/calibration.md ({exc.reason})",
        ) from None


def free_bytes(dev: torch.device) -> int:
    """Memory free on the device now (CUDA: mem_get_info; CPU: available physical pages)."""
    import torch

    if dev.type == "cuda":
        return int(torch.cuda.mem_get_info(dev)[0])
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")


def _dtype(dev: torch.device) -> torch.dtype:
    import torch

    return torch.bfloat16 if dev.type == "cuda" else torch.float32


def plan(dev: torch.device, shape: LlmShape, sweep: Sweep) -> list[tuple[str, Callable[[], list[dict[str, Any]]]]]:
    """Every case of the calibration, in run order."""
    from rlsim.calibration import attention, copies, gemm, memory, training

    dtype = _dtype(dev)
    rep = {"warmup": sweep.warmup, "repeats": sweep.repeats}
    per_token = 2 * shape.kv_heads * shape.head_dim * dtype.itemsize  # K and V of one layer
    batches = [(n,) * b for b, n in sweep.attention_grid] + [
        attention.mixed_lengths(b, n, seed=i) for i, (b, n) in enumerate(sweep.attention_mixed)
    ]
    # The pool must hold a batch's K and V at least once (a batch that fills it is far larger
    # than any last-level cache, so re-reading it is still cold).
    batches = [ls for ls in batches if len(ls) * max(ls) * per_token <= sweep.pool_bytes]
    return [
        *gemm.gemm_cases(shape, sweep.gemm_tokens, dev, dtype, **rep),
        *gemm.gemm_size_cases(shape, sweep.gemm_size_tp, sweep.gemm_size_tokens, dev, dtype, **rep),
        *attention.attention_cases(batches, shape, dev, dtype, pool_bytes=sweep.pool_bytes, **rep),
        *memory.memory_cases(shape, sweep.stream_bytes, sweep.pool_bytes, dev, dtype, **rep),
        *copies.copy_cases(sweep.copy_bytes, dev, pool_bytes=sweep.pool_bytes, **rep),
        *training.training_cases(sweep.train_tokens, sweep.train_seq_cap, shape, dev, dtype, **rep),
        ("collectives", lambda: _collectives(sweep, dev)),
    ]


def _collectives(sweep: Sweep, dev: torch.device) -> list[dict[str, Any]]:
    from rlsim.calibration import collectives

    if collectives.collective_world(dev) < 2:
        return [{"kernel": "note", "text": "Collectives skipped: one GPU visible."}]
    if dev.type == "cuda":
        import torch

        torch.cuda.empty_cache()  # rank 0 shares this GPU: hand back the pools' cached blocks
    try:
        return collectives.collective_rows(sweep.collective_bytes, dev, warmup=sweep.warmup, repeats=sweep.repeats)
    except Exception as exc:  # a failed rendezvous must not lose the other kernels' minutes
        first_line = (str(exc).strip().splitlines() or [""])[0][:200]
        return [{"kernel": "note", "text": f"Collectives failed ({type(exc).__name__}: {first_line})."}]


def _contention(rows: list[dict[str, Any]]) -> float:
    """The worst foreign CPU share among wall-clock rows (thread-time rows are immune)."""
    wall = [r for r in rows if str(r.get("timing", "")).startswith("perf_counter")]
    return max((r.get("foreign_cpu") or 0.0 for r in wall), default=0.0)


def _run_case(run_case: Callable[[], list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Run a case; retake it once if, timed on the wall clock, others took > CONTENDED of the CPUs.

    What stays contended after the retake is counted in the profile's notes (see
    `timer.Timing.foreign_cpu`).
    """
    rows = run_case()
    if _contention(rows) > CONTENDED:
        again = run_case()
        rows = again if _contention(again) < _contention(rows) else rows
    return rows


def _ops_plan(dev: torch.device, ops: OpsModel | None, quick: bool) -> list[tuple[str, Callable[[], list[Any]]]]:
    """The model's own operator cases (none when its module cannot be built here)."""
    if ops is None:
        return []
    from rlsim.calibration import model_ops

    return model_ops.ops_cases(ops, OPS_SWEEPS[quick], dev, _dtype(dev))


def _run_all(dev: torch.device, cases: list[Any], progress: Progress | None) -> list[dict[str, Any]]:
    """Run the cases in order, reporting progress before each and once at the end."""
    import torch

    if dev.type == "cpu":
        steady_allocator()  # as the trainer's processes do: see rlsim/host_allocator.py
    rows: list[dict[str, Any]] = []
    # CUDA events record on the current device's stream: make the measured GPU current.
    with torch.cuda.device(dev) if dev.type == "cuda" else contextlib.nullcontext():
        for done, (label, run_case) in enumerate(cases):
            if progress:
                progress(done, len(cases), label)
            rows.extend(_run_case(run_case))
    if progress:
        progress(len(cases), len(cases), "fitting")
    return rows


def _ops_model(model: str | None) -> tuple[OpsModel | None, list[str]]:
    """The model whose operators to time (a config.json path only), and a note when there is none."""
    if not model or not is_config_path(model):
        return None, []
    ops = ops_model(model)
    if ops is None:
        return None, [f"model_ops: not timed for {model} (no module for its model_type here); generic terms apply."]
    return ops, [f"model_ops: {ops.name} ({ops.key}) timed with its own module."]


def calibrate(
    device: str = "auto",
    model: str | None = None,
    quick: bool = False,
    progress: Progress | None = None,
) -> Profile:
    """Measure this machine's kernels and return its Profile (source 'measured').

    `device`: 'auto', 'cpu', 'cuda' or 'cuda:N'. `model`: a catalog LLM or a config.json
    whose layer shapes the sweep uses (default: a small shape on the CPU, Qwen2.5-7B on a
    GPU); a config.json of a model whose module is available (the validation trainer's
    rlsim-tiny-gpt) also gets its own operators timed into `model_ops`. `quick`: a smaller
    sweep (under a minute on two CPU cores). `progress(done, total, label)` is called before
    each case and once at the end.
    """
    dev = select_device(device)
    facts = device_facts(dev)
    shape = resolve_shape(model, dev.type)
    ops, ops_notes = _ops_model(model)
    cases = plan(dev, shape, fit_to_memory(SWEEPS[(dev.type, quick)], free_bytes(dev))) + _ops_plan(dev, ops, quick)
    rows = _run_all(dev, cases, progress)
    notes = [f"Sweep: {'quick' if quick else 'full'}, shape {shape.name}.", *ops_notes]
    if dev.type == "cpu":
        notes.append(f"memory_gib: {CPU_MEMORY_SHARE:.0%} of physical RAM granted to the CPU device.")
    return measured_profile(rows, facts, notes)


def add_model_ops(profile: Profile, model: str, quick: bool = True, progress: Progress | None = None) -> Profile:
    """`profile` with the operators of the config.json `model` timed now on its device and added.

    For a profile measured earlier without them (`rlsim validate --profile`). The device is the
    profile's (a CPU profile: the CPU; a GPU profile: the current CUDA GPU). A model without a
    module here is a ScenarioError on `model`.
    """
    ops, _ = _ops_model(model)
    if ops is None:
        raise ScenarioError("model", f"{model}: only config.json files of model_type rlsim-tiny-gpt can be timed")
    dev = select_device("cpu" if profile.device == "cpu" else "cuda")
    rows = _run_all(dev, _ops_plan(dev, ops, quick), progress)
    timed, fits = fit_model_ops(rows)
    today = datetime.date.today().isoformat()
    note = f" model_ops: {ops.name} ({ops.key}) timed with its own module on {today}, after the rest."
    return profile.model_copy(
        update={
            "model_ops": {**profile.model_ops, **timed},
            "measurements": [*profile.measurements, *rows, *fits],
            "notes": profile.notes + note,
        }
    )
