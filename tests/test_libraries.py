"""The library fact sheet: every fact sourced and dated, the fit rules, and their CLI and report."""

from __future__ import annotations

import json

import pytest
import yaml
from typer.testing import CliRunner

from rlsim.catalog.libraries import (
    LIBRARIES_YAML,
    RULE_OF,
    Fact,
    library_facts,
    load_fact_sheet,
    parse_fact_sheet,
)
from rlsim.cli import app
from rlsim.errors import ScenarioError
from rlsim.presets import compare_presets, list_presets
from rlsim.presets.fit import library_fit
from rlsim.scenario import load_scenario

runner = CliRunner()


def _raw() -> dict:
    return yaml.safe_load(LIBRARIES_YAML.read_text(encoding="utf-8"))


def test_every_fact_has_a_source_and_a_date_or_says_why_it_is_unknown():
    sheet = load_fact_sheet()
    count = 0
    for lib in sheet.libraries:
        facts = lib.facts()
        assert set(facts) == set(RULE_OF), lib.library
        for name, f in facts.items():
            count += 1
            assert f.date, (lib.library, name)
            if f.value is not None:
                assert f.source and ("@" in f.source or f.source.startswith("https://")), (lib.library, name)
                if f.source.startswith("github "):  # owner/repo@40-hex commit
                    assert len(f.source.split("@", 1)[1].split(":")[0].split(" ")[0]) == 40, f.source
            else:
                assert f.note, (lib.library, name)
    assert count == 16 * len(sheet.libraries)


@pytest.mark.parametrize("drop", ["source", "date"])
def test_a_fact_sheet_row_without_source_or_date_is_refused(drop):
    data = _raw()
    row = data["libraries"][0]["multi_node"]
    assert row["value"] is True
    del row[drop]
    with pytest.raises(ScenarioError) as exc:
        parse_fact_sheet(data)
    assert "libraries.0.multi_node" in str(exc.value)
    assert drop in str(exc.value)


def test_an_unknown_fact_needs_a_note_and_a_judgement_needs_its_rule():
    data = _raw()
    data["libraries"][0]["lora"] = {"value": None, "date": "2026-12-01"}
    with pytest.raises(ScenarioError, match="note"):
        parse_fact_sheet(data)
    data = _raw()
    del data["rules"]["multi_node"]
    with pytest.raises(ScenarioError, match="multi_node"):
        parse_fact_sheet(data)
    with pytest.raises(ValueError, match="ISO date"):
        Fact[bool](value=True, source="https://example.org/x", date="Dec 2026")


def test_every_preset_library_has_an_entry():
    libraries = {p.library for p in list_presets()}
    assert all(library_facts(name) is not None for name in libraries)
    assert {lib.library for lib in load_fact_sheet().libraries} == libraries


def test_the_big_libraries_have_their_scale_facts():
    for name in (
        "verl",
        "OpenRLHF",
        "TRL",
        "NeMo-RL",
        "SLIME",
        "PipelineRL",
        "SkyRL",
        "AReaL",
        "ROLL",
        "PRIME-RL",
        "open-instruct",
    ):
        lib = library_facts(name)
        for fact in (
            "inference_engines",
            "training_backends",
            "multi_node",
            "lora",
            "multi_turn",
            "licence",
            "contributors",
            "releases_last_12_months",
        ):
            assert getattr(lib, fact).known, (name, fact)


# ------------------------------------------------------------------ fit rules


def test_lora_scenario_rules_out_a_library_without_lora_with_its_reason():
    sc = load_scenario("small-budget", ["steps=2", "pipeline.lora.rank=16"])
    rows = {r.preset.name: r for r in compare_presets(sc, ["slime", "verl"])}
    slime = rows["slime"]
    assert slime.ruled_out
    (lora,) = [f for f in slime.fit if f.fact == "lora"]
    assert lora.verdict == "ruled_out"
    assert "LoRA (rank 16)" in lora.reason and "THUDM/slime@624b824" in lora.reason
    assert not rows["verl"].fit and rows["verl"].run is not None


def test_multi_node_cluster_rules_out_a_single_node_library_with_its_reason():
    one_node = load_scenario("small-budget", ["steps=2"])
    four_nodes = load_scenario("llama70b-multinode", ["steps=2"])
    verl = library_facts("verl")
    single = verl.model_copy(
        update={"multi_node": Fact[bool](value=False, source="https://example.org/single-node", date="2026-12-01")}
    )
    assert library_fit(one_node, single) == []
    (flag,) = library_fit(four_nodes, single)
    assert flag.fact == "multi_node" and flag.verdict == "ruled_out"
    assert "4 nodes" in flag.reason and "example.org/single-node" in flag.reason
    assert library_fit(four_nodes, verl) == []  # verl's sheet says it trains across nodes
    (caution,) = library_fit(four_nodes, library_facts("OAT"))  # not established: a caution, not a ruling
    assert caution.verdict == "caution" and "not established" in caution.reason


def test_an_engine_the_team_does_not_run_rules_the_library_out():
    sc = load_scenario("small-budget", ["pipeline.inference.engine=sglang"])
    (flag,) = library_fit(sc, library_facts("TRL"))
    assert flag.fact == "inference_engines" and "sglang" in flag.reason and "vllm" in flag.reason
    assert library_fit(sc, library_facts("SLIME")) == []
    (flag,) = library_fit(load_scenario("small-budget"), library_facts("SLIME"))
    assert "runs vllm" in flag.reason


# ------------------------------------------------------------------ CLI and report


def test_libraries_details_prints_facts_with_sources():
    res = runner.invoke(app, ["libraries", "--details", "verl", "slime-async"])
    assert res.exit_code == 0, res.output
    assert "verl: github verl-project/verl" in res.output and "SLIME: github THUDM/slime" in res.output
    assert "DeepSeek-V3 671B, 96 GPUs" in res.output
    assert "source: github verl-project/verl@1dda039b9c6311889a9c9a26040677e1254814f9:docs/perf/dpsk.md" in res.output
    assert "Rules behind the judgements" in res.output and "multi_node: true when" in res.output
    assert "OpenRLHF" not in res.output


def test_libraries_details_json_and_unknown_name():
    res = runner.invoke(app, ["libraries", "--details", "TRL", "--json", "-"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert [d["library"] for d in data["libraries"]] == ["TRL"] and "multi_node" in data["rules"]
    assert data["libraries"][0]["lora"]["source"].startswith("github huggingface/trl@")
    res = runner.invoke(app, ["libraries", "--details", "nope"])
    assert res.exit_code == 2 and "unknown library or preset 'nope'" in res.output
    assert "Traceback" not in res.output


def test_compare_presets_puts_facts_beside_the_simulation():
    args = [
        "compare-presets",
        "small-budget",
        "--presets",
        "verl,slime",
        "--steps",
        "2",
        "--set",
        "algorithm.prompts_per_step=8",
    ]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    assert "Library facts beside the simulation" in res.output
    assert "slime ruled out: the team runs vllm" in res.output
    res = runner.invoke(app, [*args, "--json", "-"])
    rows = {r["preset"]: r for r in json.loads(res.output)["presets"]}
    assert rows["slime"]["fit"][0]["verdict"] == "ruled_out" and rows["verl"]["fit"] == []
    assert rows["verl"]["facts"]["library"] == "verl" and rows["verl"]["metrics"]["step_time_s"] > 0


def test_report_with_presets_has_the_libraries_section(tmp_path):
    path = tmp_path / "r.md"
    res = runner.invoke(
        app,
        [
            "report",
            "small-budget",
            "-o",
            str(path),
            "--steps",
            "2",
            "--no-sensitivity",
            "--modes",
            "sync",
            "--presets",
            "verl,slime,trl-colocate,prime-rl",
            "--set",
            "pipeline.lora.rank=8",
        ],
    )
    assert res.exit_code == 0, res.output
    text = path.read_text()
    assert "## 4. Libraries compared" in text
    section = text.split("## 4. Libraries compared", 1)[1].split("\n## 5.", 1)[0]
    header = next(line for line in section.splitlines() if line.startswith("|  |"))
    assert all(f"| {name} " in header for name in ("verl", "slime", "trl-colocate", "prime-rl"))
    for row in (
        "| step time, s |",
        "| idle share of GPU time |",
        "| $ per 500-step run |",  # small-budget's run_steps, as the report prices every architecture
        "| engines |",
        "| largest published run |",
        "| contributors |",
    ):
        assert row in section, row
    assert "slime ruled out: the scenario trains LoRA (rank 8)" in section
    assert "DeepSeek-V3 671B, 96 GPUs" in section
    assert "Sources of the facts shown:" in section and "github verl-project/verl@1dda039" in section


def test_report_without_presets_has_no_libraries_section(tmp_path):
    path = tmp_path / "r.md"
    res = runner.invoke(
        app, ["report", "small-budget", "-o", str(path), "--steps", "2", "--no-sensitivity", "--modes", "sync"]
    )
    assert res.exit_code == 0, res.output
    assert "Libraries compared" not in path.read_text()
