"""The one error type users see: a field path and the reason it is wrong.

The CLI catches `ScenarioError` (and pydantic's ValidationError) at its boundary and prints
one line per problem with exit code 2; library code raises it wherever an input, a catalog
lookup or a profile cannot be used. Its `args` are `(field, reason)`, so code that rebuilds an
exception from its args (SimPy re-raises a process's exception as `type(e)(*e.args)`; pickling
across a process pool does the same) gets the same error back, not a TypeError.
"""


class ScenarioError(ValueError):
    """A user input that cannot be used; `field` is the dotted path of the culprit."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(field, reason)
        self.field = field
        self.reason = reason

    def __str__(self) -> str:
        return f"{self.field}: {self.reason}"
