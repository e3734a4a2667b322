"""The report's "Libraries compared" section: presets simulated on the scenario, beside their facts.

Only with `rlsim report --presets a,b,...`. One table with a column per preset: the simulated step
time, idle share and dollars of the run, whether the library's facts let it run the scenario, then
the library's facts (engines, backends, scale, LoRA, maturity) from the fact sheet. Flags and the
facts' sources follow as lists, so every number in the table can be traced.
"""

from __future__ import annotations

from collections.abc import Sequence

from rlsim.catalog.libraries import SUMMARY_FACTS, fact_text, short_source
from rlsim.presets import PresetRun
from rlsim.report.choice import money
from rlsim.report.document import Block, Bullets, Paragraph, Table


def _fit_cell(r: PresetRun) -> str:
    if r.ruled_out:
        return "ruled out (" + ", ".join(f.fact.replace("_", " ") for f in r.fit if f.verdict == "ruled_out") + ")"
    if r.fit:
        return "caution (" + ", ".join(f.fact.replace("_", " ") for f in r.fit) + ")"
    return "nothing in the facts rules it out"


def _sim_rows(rows: Sequence[PresetRun], run_steps: int) -> list[list[str]]:
    def cell(r: PresetRun, what: str) -> str:
        if r.run is None:
            return "cannot run" if what == "step" else "-"
        m, c = r.run.metrics, r.run.cost
        if what == "step":
            return f"{m.step_time_s:,.1f}"
        if what == "idle":
            return f"{100 * m.idle_fraction:.0f}%"
        usd = (c.usd_per_1000_steps * (1.0 if what == "usd_1k" else run_steps / 1000.0)) if c else None
        return "-" if usd is None else money(usd) if usd < 100 else f"${usd:,.0f}"

    return [
        ["step time, s", *(cell(r, "step") for r in rows)],
        ["idle share of GPU time", *(cell(r, "idle") for r in rows)],
        [f"$ per {run_steps:,}-step run", *(cell(r, "usd") for r in rows)],
        ["$ per 1,000 steps", *(cell(r, "usd_1k") for r in rows)],
        ["fit for this scenario", *(_fit_cell(r) for r in rows)],
    ]


def _fact_rows(rows: Sequence[PresetRun]) -> list[list[str]]:
    return [
        [title, *(fact_text(getattr(r.facts, key)) if r.facts else "no entry" for r in rows)]
        for key, title in SUMMARY_FACTS.items()
    ]


def _sources(rows: Sequence[PresetRun]) -> list[str]:
    seen: dict[str, list[str]] = {}
    for r in rows:
        lib = r.facts
        if lib is None or lib.library in seen:
            continue
        snap = f"github {lib.repository}@{lib.snapshot.commit[:7]}"
        where = sorted({short_source(f.source) for k, f in lib.facts().items() if k in SUMMARY_FACTS and f.source})
        history = f"{snap} git tags and authors (snapshot of {lib.snapshot.date})"
        seen[lib.library] = [history if w == snap else w for w in where]
    return [f"{name}: {'; '.join(where)}" for name, where in seen.items()]


def library_blocks(rows: Sequence[PresetRun], steps: int, run_steps: int) -> list[Block]:
    """The section's blocks for presets simulated `steps` steps by `compare_presets`; dollars are
    priced over the run's `run_steps`, as the rest of the report."""
    read = sorted({f.date for r in rows if r.facts for f in r.facts.facts().values()})
    caption = (
        f"Simulated: {steps} steps of this scenario under each preset, same GPUs and tokens. Facts: "
        f"rlsim/catalog/libraries.yaml, read {', '.join(read)}; maturity signals measured on each "
        "library's git snapshot (`rlsim libraries --details` prints every fact with its source)."
    )
    flags = [f.line(r.preset.name) for r in rows for f in r.fit]
    errors = [f"{r.preset.name} cannot run: {r.error}" for r in rows if r.error]
    blocks: list[Block] = [
        Paragraph(
            "The same scenario under each library preset, beside what the libraries support and how "
            "mature they are. A library is ruled out when one of its facts says it cannot run the "
            "scenario: a multi-node cluster without multi-node support, a LoRA scenario without LoRA "
            "RL, or an engine the team does not run (pipeline.inference.engine); an unknown fact "
            "gives a caution. Ruled-out libraries are still simulated so their numbers stay comparable."
        ),
        Table(
            ["", *(r.preset.name for r in rows)],
            _sim_rows(rows, run_steps) + _fact_rows(rows),
            caption=caption,
            align="l" + "l" * len(rows),
        ),
    ]
    if flags or errors:
        blocks += [Paragraph("Flags:"), Bullets(flags + errors)]
    else:
        blocks.append(Paragraph("No library's facts rule it out for this scenario."))
    blocks += [Paragraph("Sources of the facts shown:"), Bullets(_sources(rows))]
    return blocks
