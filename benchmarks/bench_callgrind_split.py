"""Instructions one simulation spends inside named Python functions (callgrind, load-independent).

Run: `python benchmarks/bench_callgrind_split.py long-cot streaming steps=4 --target
rlsim.simulator.engine:plan_refill --target rlsim.simulator.planned:_commit_steps`. For the
whole simulation and for each target (module:attribute, dotted for a class's method), it runs
the scenario once under valgrind's callgrind and prints the instructions counted. On a shared
machine CPU times swing by 30% and more; instruction counts do not.

How a Python function is counted: callgrind sees the interpreter's C functions only (every Python
frame is `_PyEval_EvalFrameDefault`), so the target is replaced by a wrapper that calls it through
a ctypes callback, and callgrind collects only inside ctypes' `closure_fcn`
(`--collect-atstart=no --toggle-collect=closure_fcn`): the count is the target's own work and
everything it calls, plus the callback's conversions (a few thousand instructions a call).
Name one target per run: two targets where one calls the other were not seen to add up (the
outer one's count held its callee's), so count nested functions in separate runs. A warm-up
simulation (default, colocated, one step) runs first, uncounted, as in bench_scale.py. The module
attribute is replaced, so a target reached through another module's import
(`refill.plan_refill` as `engine.plan_refill`) is named where it is called from. Needs valgrind
and the interpreter's own binary (`sys.executable`; a pyenv shim is a shell script valgrind would
not follow).
"""

from __future__ import annotations

import argparse
import ctypes
import importlib
import os
import re
import subprocess
import sys
import tempfile


def _wrap(target: str) -> None:
    """Replace module:attr.path with a wrapper that calls it through a ctypes callback."""
    module, path = target.split(":")
    owner = importlib.import_module(module)
    *outer, name = path.split(".")
    for part in outer:
        owner = getattr(owner, part)
    func = getattr(owner, name)
    callback = ctypes.CFUNCTYPE(ctypes.py_object, ctypes.py_object)(lambda call: func(*call[0], **call[1]))

    def wrapper(*args, **kwargs):
        return callback((args, kwargs))

    wrapper.callback = callback  # kept alive with the wrapper
    setattr(owner, name, wrapper)


def inside(scenario: str, mode: str, overrides: list[str], target: str | None) -> None:
    """Under callgrind: warm up, then simulate with collection inside the target (or all of it)."""
    from rlsim.placement import resolve
    from rlsim.scenario import load_scenario
    from rlsim.simulator.run import simulate

    simulate(resolve(load_scenario("default", ["steps=1"]).with_mode("colocated")))
    res = resolve(load_scenario(scenario, overrides).with_mode(mode))
    if target is None:
        ctypes.CFUNCTYPE(ctypes.py_object, ctypes.py_object)(simulate)(res)
    else:
        _wrap(target)
        simulate(res)


def count(scenario: str, mode: str, overrides: list[str], target: str | None) -> int:
    """Instructions collected in one run under callgrind."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [
            "valgrind",
            "--tool=callgrind",
            "--collect-atstart=no",
            "--toggle-collect=closure_fcn",
            f"--callgrind-out-file={os.path.join(tmp, 'out')}",
            sys.executable,
            __file__,
            "--inside",
            *(["--target", target] if target else []),
            scenario,
            mode,
            *overrides,
        ]
        env = dict(os.environ, PYTHONPATH=os.getcwd() + os.pathsep + os.environ.get("PYTHONPATH", ""))
        err = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True).stderr
    return int(re.search(r"Collected : (\d+)", err).group(1))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("scenario")
    ap.add_argument("mode")
    ap.add_argument("overrides", nargs="*")
    ap.add_argument("--target", action="append", default=[], help="module:attribute to count inside")
    ap.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.inside:
        inside(args.scenario, args.mode, args.overrides, args.target[0] if args.target else None)
        return
    total = count(args.scenario, args.mode, args.overrides, None)
    print(f"{args.scenario} {args.mode} {' '.join(args.overrides)}: {total:,} instructions")
    for target in args.target:
        n = count(args.scenario, args.mode, args.overrides, target)
        print(f"  {target}: {n:,} ({n / total:.0%})")


if __name__ == "__main__":
    main()
