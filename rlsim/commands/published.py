"""`rlsim validate --published`: the published-run suite, predicted against published.

Thin: select rows, call `rlsim.validation.published_run.run_suite`, render three tables (every
compared figure, the sync->async speedups and trend ratios, the headline targets) and a caption.
The targets are a benchmark: they are printed, never turned into an exit code.
"""

from __future__ import annotations

from typing import Any

from rlsim.commands.common import console

PHASE_LABEL = {
    "step_s": "step",
    "gen_s": "gen (wait + switch + sync)",
    "wait_s": "trainer wait",
    "generate_s": "generation",
    "logprob_s": "log-prob passes",
    "update_s": "update (train + optimizer)",
    "refit_s": "refit (sync + switch)",
    "sync_s": "weight sync",
    "output_tokens_per_s": "output tokens/s",
}


def _value(figure: str, x: float) -> str:
    return f"{x:,.0f} tok/s" if figure.endswith("tokens_per_s") else f"{x:,.2f} s"


def _published(c: Any) -> str:
    if c.published_range and c.published_range[0] != c.published_range[1]:
        low, high = c.published_range
        return f"{low:g}–{high:g} s"
    return _value(c.figure, c.published)


def run_published(only: str | None, json_out: str | None, list_rows: bool) -> None:
    """Simulate the chosen rows and print predicted against published (the CLI's `--published`)."""
    from rich.table import Table

    from rlsim.tables import write_json
    from rlsim.validation.published import select_rows
    from rlsim.validation.published_run import run_suite

    rows = select_rows([s.strip() for s in only.split(",") if s.strip()] if only else None)
    if list_rows:
        t = Table(title="Published rows (rlsim/validation/published/)", title_justify="left")
        for col in ("id", "kind", "what", "compared"):
            t.add_column(col)
        for r in rows:
            compared = [PHASE_LABEL[k] for k in r.published]
            if r.published_speedup:
                compared.append(f"speedup over {r.pair_with}")
            t.add_row(r.id, r.kind, r.title, ", ".join(compared) or "(the base of a published speedup)")
        console.print(t)
        return
    result = run_suite(rows)
    if json_out:
        write_json(result.to_json(), json_out)
    if json_out == "-":
        return
    for table in published_tables(result, Table):
        console.print(table)
    console.print(
        "Errors are predicted / published - 1 (inside a published range: 0). Dim rows are not counted in the "
        "targets (a trend row's absolute step: its batch is unstated). Every assumption a row makes is in its "
        "YAML file (rlsim/validation/published/<id>.yaml) and in docs/validation.md.",
        markup=False,
        highlight=False,
    )


def published_tables(result: Any, Table: Any) -> list[Any]:
    t = Table(title="Published runs: predicted against published", title_justify="left")
    for col in ("row", "figure", "predicted", "published", "error"):
        t.add_column(col, justify="left" if col in ("row", "figure") else "right", overflow="fold")
    for c in result.checks:
        t.add_row(
            c.row,
            PHASE_LABEL[c.figure],
            _value(c.figure, c.predicted),
            _published(c),
            f"{c.error:+.0%}",
            style=None if c.counted else "dim",
        )
    out = [t]
    if result.speedups or result.ratios:
        s = Table(title="Sync -> async speedups and trend ratios", title_justify="left")
        for col in ("row", "compared", "predicted", "published", "error", "sign"):
            s.add_column(col, justify="left" if col in ("row", "compared") else "right", overflow="fold")
        for c in result.speedups:
            sign = "ok" if (c.predicted > 1) == (c.published > 1) else "[red]WRONG[/]"
            s.add_row(c.row, c.figure, f"{c.predicted:.2f}x", f"{c.published:.2f}x", f"{c.error:+.0%}", sign)
        for c in result.ratios:
            s.add_row(c.row, c.figure, f"{c.predicted:.2f}x", f"{c.published:.2f}x", f"{c.error:+.0%}", "")
        out.append(s)
    title = "Fidelity targets (a benchmark; the exit code does not depend on them)"
    out.append(_targets_table(Table, title, result.targets))
    if any(r.held_out for r in result.rows):
        title = "Held-out rows: the same figures, an independent check (encoded after the terms; not in the targets)"
        out.append(_targets_table(Table, title, result.held_out_targets))
    return out


def _targets_table(Table: Any, title: str, targets: list[Any]) -> Any:
    g = Table(title=title, title_justify="left")
    for col in ("figure", "value", "target", ""):
        g.add_column(col, justify="left" if col in ("figure", "") else "right")
    for tg in targets:
        if tg.name.startswith("every"):
            value = "-" if tg.value is None else f"{tg.value:.0f} wrong"
            limit = "0 wrong"
        else:
            value = "-" if tg.value is None else f"{tg.value:.0%}"
            limit = f"≤ {tg.limit:.0%}"
        verdict = {True: "[green]met[/]", False: "[red]missed[/]", None: ""}[tg.met]
        g.add_row(tg.name, value, limit, verdict)
    return g
