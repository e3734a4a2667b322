"""CLI commands beyond the core ones in `rlsim.cli`, one module per topic.

Each module defines `register(app)`, which adds its typer commands; `rlsim.cli` calls every
`register` listed in MODULES. Commands stay thin: parse, call one library function, render.
"""

MODULES: list[str] = []
MODULES.append("presets")
MODULES.append("outputs")
MODULES.append("planning")
MODULES.append("validation")
MODULES.append("fitting")
