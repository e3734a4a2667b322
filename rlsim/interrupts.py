"""Stopping on Ctrl-C and SIGTERM without orphans: what the parent and its workers each do.

The parent: `on_signals()` turns SIGINT and SIGTERM into `Interrupted`, a KeyboardInterrupt
raised in the main thread, so whatever owns worker processes (the process-pool executor, the
validation trainer's supervisor) stops them in its cleanup path whichever signal came, and the
command prints one line and exits 128 + the signal number (130, 143) as a shell expects.

A worker: `die_with_parent(parent_pid)` runs first in every worker process. The worker ignores
SIGINT (a terminal's Ctrl-C reaches the whole process group; the parent alone decides, and a
worker's KeyboardInterrupt traceback would spill on stderr) and asks Linux to SIGKILL it when
its parent dies (`prctl(PR_SET_PDEATHSIG)`), so even a parent killed with SIGKILL, which runs
no cleanup at all, leaves no worker behind. Elsewhere a daemon thread polls the parent instead.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
PR_SET_PDEATHSIG = 1  # linux/prctl.h
PARENT_POLL_S = 0.5


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM arrived; `signum` says which."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


@dataclass
class Received:
    """The stop signal a command received (None: none yet); survives a re-raised KeyboardInterrupt."""

    signum: int | None = None

    @property
    def name(self) -> str:
        return signal.Signals(self.signum or signal.SIGINT).name

    @property
    def exit_code(self) -> int:
        return 128 + (self.signum or signal.SIGINT)


@contextmanager
def on_signals() -> Iterator[Received]:
    """Within the block, SIGINT and SIGTERM raise Interrupted in the main thread."""
    received = Received()
    if threading.current_thread() is not threading.main_thread():
        yield received  # signal handlers can only be set from the main thread
        return

    def handler(signum: int, _frame: object) -> None:
        first = received.signum is None
        received.signum = received.signum or signum
        if first:  # a second signal while cleaning up must not abort the cleanup
            raise Interrupted(signum)

    previous = {s: signal.signal(s, handler) for s in STOP_SIGNALS}
    try:
        yield received
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def die_with_parent(parent_pid: int) -> None:
    """Worker-process initializer: ignore Ctrl-C, and die when the process `parent_pid` dies."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    else:
        threading.Thread(target=_watch_parent, args=(parent_pid,), daemon=True).start()
    if os.getppid() != parent_pid:  # the parent died before the death signal was armed
        os._exit(1)


def _watch_parent(parent_pid: int) -> None:
    while os.getppid() == parent_pid:
        time.sleep(PARENT_POLL_S)
    os._exit(1)
