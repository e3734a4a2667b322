"""CLI commands beyond the core ones in `rlsim.cli`, one module per topic.

Each module defines `register(app)`, which adds its typer commands; `rlsim.cli` imports the
modules and calls each `register`. They share `common` (consoles, the one-line-error boundary,
signals, output checks) and `options` (option types); none imports `rlsim.cli`. Commands stay
thin: parse, call one library function, render.
"""
