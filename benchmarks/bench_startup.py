"""CLI start-up time and peak memory per simulated sequence.

Run: `python benchmarks/bench_startup.py` (add --quick for fewer repeats, --holders for what holds
the memory). Prints:
 (a) start-up of `rlsim --help`, `rlsim simulate --help` and `rlsim simulate` (the default
     scenario, every mode, the table on a pipe): min and median wall time of --repeats fresh
     processes, and the min CPU time (user + system) of one, next to the floors on the same
     host: `python -c pass`, `import typer` and `import typer.rich_utils` (what typer's rich
     help imports before it prints anything), and the same with the stand-ins `rlsim.cli`
     installs for its Markdown and Traceback (`rlsim.commands.typer_adjustments`); target for
     `rlsim simulate --help` <= 0.2 s;
 (b) peak memory per simulated sequence: the growth of a fresh process's peak resident set over
     one simulation of the default scenario scaled to 1,024 x 16 prompts per step, 2 steps
     (32,768 sequences), in every mode, and async over 1 and 8 steps (what is held for a step in
     flight against what is kept per step); target <= 1 KB;
 (c) with --holders: the source lines holding the most traced memory near the peak (tracemalloc,
     sampled every 5 ms from a thread; tracing makes the run ~15x slower), async, 2 steps;
 (d) with --instructions (needs valgrind): the instructions each help command and floor executes
     (cachegrind's I refs), a count that does not depend on what else the machine runs.
Processes run as the `rlsim` console script does (`from rlsim.cli import app; app()`), with
bytecode cached in a temporary folder as an installed package has it (this environment may set
PYTHONDONTWRITEBYTECODE, which would compile every rlsim module at every start). The machine is
shared: the minimum is the figure to compare, the median shows the noise.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ENTRY = "import sys; from rlsim.cli import app; sys.argv[0] = 'rlsim'; sys.exit(app())"
DEFERRED = "from rlsim.commands import typer_adjustments as t; t.help_without_markdown_or_tracebacks()"
SCALED = ["algorithm.prompts_per_step=1024", "algorithm.group_size=16"]
MODES = ["colocated", "sync", "one_step_off", "async", "streaming"]


def timed(cmd: list[str], env: dict[str, str], repeats: int) -> tuple[float, float, float]:
    """(min wall s, median wall s, min CPU s) of `repeats` runs of `cmd`, after one warm-up."""
    subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    walls, cpus = [], []
    for _ in range(repeats):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t = time.perf_counter()
        subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        walls.append(time.perf_counter() - t)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return min(walls), statistics.median(walls), min(cpus)


def commands() -> dict[str, list[str]]:
    py = sys.executable
    return {
        "python -c pass": [py, "-c", "pass"],
        "import typer": [py, "-c", "import typer"],
        "import typer.rich_utils": [py, "-c", "import typer.rich_utils"],
        "typer.rich_utils, deferred": [py, "-c", DEFERRED],
        "rlsim --help": [py, "-c", ENTRY, "--help"],
        "rlsim simulate --help": [py, "-c", ENTRY, "simulate", "--help"],
        "rlsim simulate": [py, "-c", ENTRY, "simulate"],
    }


def startup(env: dict[str, str], repeats: int) -> None:
    for label, cmd in commands().items():
        low, mid, cpu = timed(cmd, env, repeats if label != "rlsim simulate" else max(3, repeats // 3))
        target = " (target <= 200 ms)" if label == "rlsim simulate --help" else ""
        print(f"(a) {label:<27} min {low * 1e3:5.0f} ms, median {mid * 1e3:5.0f} ms, CPU {cpu * 1e3:5.0f} ms{target}")


_MEMORY = """
import resource, sys
from rlsim.placement import resolve
from rlsim.scenario import load_scenario
from rlsim.simulator.run import simulate
mode, steps, sets = sys.argv[1], sys.argv[2], sys.argv[3:]
res = resolve(load_scenario("default", [f"steps={steps}", *sets]).with_mode(mode))
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
result = simulate(res)
grown_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
print(grown_kb * 1024, sum(s.samples for s in result.recorder.steps))
"""


def peak_per_sequence(mode: str, steps: int, env: dict[str, str]) -> tuple[float, int]:
    """(bytes of peak resident set growth per simulated sequence, sequences) in a fresh process."""
    cmd = [sys.executable, "-c", _MEMORY, mode, str(steps), *SCALED]
    grown, n = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout.split()
    return int(grown) / int(n), int(n)


def memory(env: dict[str, str]) -> None:
    cells = []
    for mode in MODES:
        per, n = peak_per_sequence(mode, 2, env)
        cells.append(f"{mode} {per:,.0f}")
    figures = ", ".join(cells)
    print(f"(b) peak memory, 1,024 x 16, 2 steps ({n:,} sequences), bytes per sequence: {figures} (target <= 1,024)")
    cells = [
        f"{label} {peak_per_sequence('async', steps, env)[0]:,.0f}" for steps, label in ((1, "1 step"), (8, "8 steps"))
    ]
    print("(b) async, bytes per sequence: " + ", ".join(cells))


_HOLDERS = """
import sys, threading, time, tracemalloc
from rlsim.placement import resolve
from rlsim.scenario import load_scenario
from rlsim.simulator.run import simulate
res = resolve(load_scenario("default", ["steps=2", *sys.argv[1:]]).with_mode("async"))
peak = {"bytes": 0, "snapshot": None}
done = threading.Event()

def sample():
    while not done.wait(0.005):
        now = tracemalloc.get_traced_memory()[0]
        if now > 1.02 * peak["bytes"]:
            peak["bytes"], peak["snapshot"] = now, tracemalloc.take_snapshot()

tracemalloc.start()
watcher = threading.Thread(target=sample)
watcher.start()
result = simulate(res)
done.set()
watcher.join()
n = sum(s.samples for s in result.recorder.steps)
print(f"(c) traced peak {tracemalloc.get_traced_memory()[1] / n:,.0f} bytes per sequence; "
      f"near it ({peak['bytes'] / n:,.0f}), the largest holders:")
for stat in peak["snapshot"].statistics("lineno")[:10]:
    frame = stat.traceback[0]
    print(f"      {stat.size / n:6,.0f} bytes per sequence, {stat.count:7,} blocks  {frame.filename}:{frame.lineno}")
"""


def holders(env: dict[str, str]) -> None:
    print(
        subprocess.run(
            [sys.executable, "-c", _HOLDERS, *SCALED], env=env, capture_output=True, text=True, check=True
        ).stdout,
        end="",
    )


def instructions(env: dict[str, str]) -> None:
    if shutil.which("valgrind") is None:
        print("(d) instructions: valgrind is not installed")
        return
    grind = ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null"]
    for label, cmd in commands().items():
        if label == "rlsim simulate":
            continue  # a simulation under valgrind takes minutes; its time is in (a)
        subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)  # bytecode
        err = subprocess.run(grind + cmd, env=env, capture_output=True, text=True, check=True).stderr
        count = int(re.search(r"I\s+refs:\s+([\d,]+)", err).group(1).replace(",", ""))
        print(f"(d) {label:<27} {count / 1e6:7,.0f} M instructions")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="3 repeats instead of --repeats")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--holders", action="store_true", help="also print what holds the memory near the peak")
    ap.add_argument("--instructions", action="store_true", help="also count instructions (valgrind)")
    ap.add_argument("--only", choices=["a", "b", "c", "d"], help="print one figure")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="rlsim-pycache-") as cache:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPYCACHEPREFIX"] = cache
        if args.only in (None, "a"):
            startup(env, 3 if args.quick else args.repeats)
        if args.only in (None, "b"):
            memory(env)
        if args.only == "c" or (args.only is None and args.holders):
            holders(env)
        if args.only == "d" or (args.only is None and args.instructions):
            instructions(env)


if __name__ == "__main__":
    main()
