"""The commands of `rlsim/commands/` topic modules, imported when a command line names them.

`rlsim simulate --help` used to import every topic module (planning's options, validation's,
presets', ...) to build commands it never shows: ~40 ms of a ~265 ms start on a slow host
(`benchmarks/bench_startup.py`). The app's group knows each topic's command names up front and
imports a module the first time one of its commands is looked up; `rlsim --help`, shell
completion and a mistyped command (which suggests the nearest names) look them all up.
"""

import importlib

import typer
from typer.core import TyperGroup

# Each topic module's commands, in the order `rlsim --help` lists them; each module's
# `register(app)` adds exactly these (tests/test_cli_topics.py checks it).
TOPIC_COMMANDS: dict[str, tuple[str, ...]] = {
    "rlsim.commands.presets": ("libraries", "compare-presets"),
    "rlsim.commands.outputs": ("report",),
    "rlsim.commands.planning": ("cost", "sweep", "plan"),
    "rlsim.commands.validation": ("calibrate", "validate"),
    "rlsim.commands.fitting": ("fit",),
}
_MODULE_OF = {name: module for module, names in TOPIC_COMMANDS.items() for name in names}


def topic_commands(module_name: str, rich_markup_mode: str) -> dict:
    """The click commands a topic module registers, built as typer builds an app's own."""
    module = importlib.import_module(module_name)
    topic = typer.Typer(rich_markup_mode=rich_markup_mode)
    module.register(topic)
    return dict(typer.main.get_group(topic).commands)


class TopicGroup(TyperGroup):
    """The app's command group: its own commands, then each topic's, loaded on first look-up."""

    def list_commands(self, ctx) -> list[str]:
        return [*(name for name in self.commands if name not in _MODULE_OF), *_MODULE_OF]

    def get_command(self, ctx, cmd_name: str):
        module = _MODULE_OF.get(cmd_name)
        if module is not None and cmd_name not in self.commands:
            self.commands.update(topic_commands(module, self.rich_markup_mode))
        return self.commands.get(cmd_name)

    def resolve_command(self, ctx, args: list[str]):
        if args and args[0] not in self.commands and args[0] not in _MODULE_OF:
            for module in TOPIC_COMMANDS:  # an unknown name: suggest among every command
                self.commands.update(topic_commands(module, self.rich_markup_mode))
        return super().resolve_command(ctx, args)
