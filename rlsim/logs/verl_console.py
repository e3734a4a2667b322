"""verl's console lines: `step:N - timing_s/gen:12.345 - response_length/mean:901.000 - ...`.

verl's console backend prints `concat_dict_to_str(data, step)`: "step:{step}" then
" - {key}:{value:.3f}" for every numeric metric
(volcengine/verl@261205bb2161d2cd0ee1b0007a3f124a1a9131ae:verl/utils/logger/aggregate_logger.py).
Other lines of the console (Ray prefixes, warnings) are skipped; a line holding "step:N - " whose
pairs do not parse (a cut-off line included) is an error naming the line. Keys: `verl_keys`.
"""

from __future__ import annotations

import re
from pathlib import Path

from rlsim.logs.record import RunLog, build_steps, log_error, require_any
from rlsim.logs.verl_keys import EXPECTED, VERL_KEYS

FORMAT = "verl-console"
_START = re.compile(r"(?:^|\s)step:(\d+) - ")
_PAIR = re.compile(r"^(\S+?):(-?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|nan|-?inf)$")


def read(path: str) -> RunLog:
    rows = []
    for lineno, line in enumerate(Path(path).read_text(errors="replace").splitlines(), start=1):
        m = _START.search(line)
        if m is None:
            continue
        row: dict[str, str] = {}
        for pair in line[m.end() :].rstrip().split(" - "):
            p = _PAIR.match(pair.strip())
            if p is None:
                raise log_error(path, lineno, f"'{pair.strip()[:60]}' is not key:value (a cut-off line?)")
            row[p.group(1)] = p.group(2)
        rows.append((lineno, int(m.group(1)), row))
    return require_any(RunLog(path, FORMAT, build_steps(path, rows, VERL_KEYS)), EXPECTED)
