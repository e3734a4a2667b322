"""The topic modules' commands load when named (rlsim/commands/topics.py), and look as before."""

import importlib
import subprocess
import sys

import typer
from typer.testing import CliRunner

from rlsim.cli import app
from rlsim.commands.topics import TOPIC_COMMANDS

runner = CliRunner()


def test_each_topic_module_registers_exactly_the_commands_named_for_it():
    for module_name, names in TOPIC_COMMANDS.items():
        topic = typer.Typer()
        importlib.import_module(module_name).register(topic)
        assert tuple(typer.main.get_group(topic).commands) == names, module_name


def test_a_core_command_imports_no_topic_module():
    code = (
        "import sys\nfrom rlsim.cli import app\nsys.argv = ['rlsim', 'simulate', '--help']\n"
        "try:\n    app()\nexcept SystemExit:\n    pass\n"
        "print(' '.join(sorted(m for m in sys.modules if m.startswith('rlsim.commands.'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    loaded = set(out.split("\n")[-2].split())
    assert loaded, "the probe printed nothing"
    assert not loaded & set(TOPIC_COMMANDS), loaded


def test_the_app_help_lists_every_topic_command_in_its_panel():
    result = runner.invoke(app, ["--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    for names in TOPIC_COMMANDS.values():
        for name in names:
            assert f" {name} " in result.output, name
    assert result.output.index("Planning") < result.output.index(" plan ")


def test_a_topic_command_runs_when_named():
    result = runner.invoke(app, ["plan", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0 and "--max-gpus" in result.output


def test_a_mistyped_command_is_matched_against_every_command():
    result = runner.invoke(app, ["valdate"])
    assert result.exit_code == 2
    assert "Did you mean 'validate'" in result.output
