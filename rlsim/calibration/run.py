"""`calibrate()`: run every kernel family on one device, fit, and return a measured Profile.

The driver picks the device (``auto``: the current CUDA GPU if torch sees one, else the CPU),
the LLM shape (a catalog model, or the device's default), and a sweep (quick or full, sized
per device type); it then runs the kernels' cases one by one, reporting progress through an
optional ``progress(done, total, label)`` callback, and hands the rows to
`assemble.measured_profile`. It never prints; the CLI renders.

torch is imported inside the functions, so importing this module (and `rlsim.calibration`)
stays torch-free. Units: seconds, bytes, tokens.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from typing import TYPE_CHECKING, Any

from rlsim.calibration.assemble import DeviceFacts, measured_profile
from rlsim.calibration.profile import Profile, datasheet_profile
from rlsim.calibration.shapes import LlmShape, resolve_shape
from rlsim.errors import ScenarioError

if TYPE_CHECKING:
    import torch

Progress = Callable[[int, int, str], None]
MB = 1 << 20
# The CPU "device" shares RAM with the OS, the Python process and host copies of the data:
# grant it half of physical memory (an assumption, stated in the profile's notes).
CPU_MEMORY_SHARE = 0.5


@dataclass(frozen=True)
class Sweep:
    """Sizes each kernel family is measured at, and how many timed repeats."""

    gemm_tokens: tuple[int, ...]
    attention_grid: tuple[tuple[int, int], ...]  # (batch, KV length) of uniform batches
    attention_mixed: tuple[tuple[int, int], ...]  # (batch, mean KV length) of lognormal batches
    pool_bytes: int  # cold pool for KV caches, weights and CPU copies
    stream_bytes: tuple[int, ...]
    copy_bytes: tuple[int, ...]
    train_tokens: tuple[int, ...]
    train_seq_cap: int
    collective_bytes: tuple[int, ...]
    warmup: int
    repeats: int


SWEEPS = {
    ("cpu", True): Sweep(
        gemm_tokens=(1, 4, 16, 64, 256, 1024), attention_grid=((1, 512), (4, 512), (4, 2048), (16, 2048)),
        attention_mixed=((8, 1024), (24, 512)), pool_bytes=512 * MB, stream_bytes=(256 * MB, 512 * MB),
        copy_bytes=(4 * MB, 32 * MB, 128 * MB), train_tokens=(64, 256, 1024), train_seq_cap=256,
        collective_bytes=(64 << 10, 1 * MB, 8 * MB), warmup=2, repeats=5,
    ),
    ("cpu", False): Sweep(
        gemm_tokens=tuple(2**i for i in range(13)),
        attention_grid=tuple((b, n) for b in (1, 2, 4, 8, 16, 32, 64) for n in (256, 1024, 4096)),
        attention_mixed=((4, 2048), (8, 1024), (24, 512), (48, 1024)), pool_bytes=1024 * MB,
        stream_bytes=(256 * MB, 512 * MB, 1024 * MB), copy_bytes=(1 * MB, 4 * MB, 16 * MB, 64 * MB, 256 * MB),
        train_tokens=(32, 64, 128, 256, 512, 1024, 2048), train_seq_cap=256,
        collective_bytes=tuple(4**i << 10 for i in range(9)), warmup=3, repeats=9,
    ),
    ("cuda", True): Sweep(
        gemm_tokens=(1, 8, 64, 512, 4096), attention_grid=((1, 1024), (8, 8192), (64, 2048), (64, 8192)),
        attention_mixed=((32, 4096), (128, 2048)), pool_bytes=8192 * MB, stream_bytes=(1024 * MB, 4096 * MB),
        copy_bytes=(1 * MB, 64 * MB, 1024 * MB), train_tokens=(512, 2048, 8192), train_seq_cap=2048,
        collective_bytes=(64 << 10, 4 * MB, 256 * MB), warmup=5, repeats=10,
    ),
    ("cuda", False): Sweep(
        gemm_tokens=tuple(2**i for i in range(14)),
        attention_grid=tuple((b, n) for b in (1, 4, 16, 64, 256) for n in (512, 2048, 8192, 32768)),
        attention_mixed=((16, 8192), (64, 4096), (128, 2048), (256, 1024)), pool_bytes=16384 * MB,
        stream_bytes=(1024 * MB, 2048 * MB, 4096 * MB), copy_bytes=tuple(4**i * MB for i in range(6)),
        train_tokens=(256, 512, 1024, 2048, 4096, 8192, 16384), train_seq_cap=4096,
        collective_bytes=tuple(8**i << 10 for i in range(7)), warmup=10, repeats=20,
    ),
}  # fmt: skip


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
        index = int(device[5:]) if device[5:].isdigit() else torch.cuda.current_device()
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
    """Catalog facts of the CUDA GPU (matched by its torch name), or the CPU's RAM share."""
    import torch

    from rlsim.calibration.timer import environment

    if dev.type == "cpu":
        ram_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e9
        return DeviceFacts(
            key="cpu", name=environment(dev)["device_name"], memory_gb=round(CPU_MEMORY_SHARE * ram_gb, 1),
            software=_software(),
            citations=("Peaks measured on this host by rlsim.calibration (best GEMM rate, stream copy).",),
        )  # fmt: skip
    name = torch.cuda.get_device_name(dev)
    gpu = catalog_gpu(name)
    return DeviceFacts(
        key=gpu.key, name=name, memory_gb=gpu.hbm_gb, peak_tflops=gpu.bf16_tflops,
        peak_memory_gbps=gpu.hbm_tbps * 1000.0, datasheet=datasheet_profile(gpu.key), software=_software(),
        citations=tuple(getattr(gpu, "sources", ())),
    )  # fmt: skip


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
            "device", f"GPU '{torch_name}' is not in the catalog: add it (or this spelling as an alias) to "
            f"rlsim/catalog/gpus.yaml, see docs/calibration.md ({exc.reason})"
        ) from None


def plan(dev: torch.device, shape: LlmShape, sweep: Sweep) -> list[tuple[str, Callable[[], list[dict[str, Any]]]]]:
    """Every case of the calibration, in run order."""
    import torch

    from rlsim.calibration import attention, copies, gemm, memory, training

    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    rep = {"warmup": sweep.warmup, "repeats": sweep.repeats}
    batches = [(n,) * b for b, n in sweep.attention_grid] + [
        attention.mixed_lengths(b, n, seed=i) for i, (b, n) in enumerate(sweep.attention_mixed)
    ]
    return [
        *gemm.gemm_cases(shape, sweep.gemm_tokens, dev, dtype, **rep),
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
    try:
        return collectives.collective_rows(sweep.collective_bytes, dev, warmup=sweep.warmup, repeats=sweep.repeats)
    except Exception as exc:  # a failed rendezvous must not lose the other kernels' minutes
        return [{"kernel": "note", "text": f"Collectives failed ({type(exc).__name__}: {exc})."}]


def calibrate(
    device: str = "auto", model: str | None = None, quick: bool = False, progress: Progress | None = None
) -> Profile:
    """Measure this machine's kernels and return its Profile (source 'measured').

    `device`: 'auto', 'cpu', 'cuda' or 'cuda:N'. `model`: a catalog LLM whose layer shapes
    the sweep uses (default: a small shape on the CPU, Qwen2.5-7B on a GPU). `quick`: a
    smaller sweep (under a minute on two CPU cores). `progress(done, total, label)` is called
    before each case and once at the end.
    """
    dev = select_device(device)
    facts = device_facts(dev)
    shape = resolve_shape(model, dev.type)
    cases = plan(dev, shape, SWEEPS[(dev.type, quick)])
    rows: list[dict[str, Any]] = []
    for done, (label, run_case) in enumerate(cases):
        if progress:
            progress(done, len(cases), label)
        rows.extend(run_case())
    if progress:
        progress(len(cases), len(cases), "fitting")
    notes = [f"Sweep: {'quick' if quick else 'full'}, shape {shape.name}."]
    if dev.type == "cpu":
        notes.append(f"memory_gb: {CPU_MEMORY_SHARE:.0%} of physical RAM granted to the CPU device.")
    return measured_profile(rows, facts, notes)
