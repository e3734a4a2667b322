"""SIGINT and SIGTERM to `sweep` and `plan`: every worker ends within 5 s, one line on stderr.

Issue 15, classes 11 and 12: a SIGTERM left the pool's workers running forever under init and a
Ctrl-C did nothing for a minute. Each test starts the real CLI in its own session with two
workers, waits until both worker processes exist, signals the parent alone (as `kill` does; a
terminal's Ctrl-C would reach the whole group) and checks the PIDs.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc (Linux)")

REPO = Path(__file__).resolve().parents[1]
LONG = {  # minutes of simulation with two workers: the signal always arrives mid-run
    "sweep": ["sweep", "long-cot", "--set", "steps=100", "--vary", "seed=" + ",".join(map(str, range(24)))],
    "plan": ["plan", "long-cot", "--max-gpus", "32", "--steps", "30"],
}


def _children(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid and fields[0] != "Z":
                out.append(int(entry.name))
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _start(args: list[str]) -> tuple[subprocess.Popen, list[int]]:
    """The CLI running `args` with two workers, and the PIDs of those workers once both exist."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "rlsim.cli", *args, "--workers", "2"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        workers = _children(proc.pid)
        if len(workers) >= 2:
            time.sleep(0.5)  # let them take their first chunks
            return proc, _children(proc.pid)
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    proc.kill()
    pytest.fail(f"no two workers appeared: {proc.communicate()[1]}")


@pytest.mark.slow
@pytest.mark.parametrize("command", ["sweep", "plan"])
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_signal_stops_every_worker(command: str, signum: signal.Signals) -> None:
    proc, workers = _start(LONG[command])
    try:
        sent = time.monotonic()
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=5)
        while any(_alive(w) for w in workers) and time.monotonic() - sent < 5:
            time.sleep(0.05)
        assert not [w for w in workers if _alive(w)], "workers outlived the command by 5 s"
        assert proc.returncode == 128 + signum
        lines = err.strip().splitlines()
        assert len(lines) == 1, err
        assert lines[0].startswith(f"interrupted by {signum.name}: {command} stopped ")
        assert "no output was written" in lines[0]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


@pytest.mark.slow
def test_workers_die_with_a_killed_parent() -> None:
    """SIGKILL runs no cleanup at all: the workers' parent-death signal still ends them."""
    proc, workers = _start(LONG["sweep"])
    try:
        proc.kill()
        proc.wait(timeout=5)
        sent = time.monotonic()
        while any(_alive(w) for w in workers) and time.monotonic() - sent < 5:
            time.sleep(0.05)
        assert not [w for w in workers if _alive(w)]
    finally:
        for w in workers:
            if _alive(w):
                os.kill(w, signal.SIGKILL)
