"""Property-based fuzzing of the CLI (issue 15): every case is a clean success or one error line.

Hypothesis draws small valid scenarios (every mode, interrupt, staleness policy, transport and
dispatch) and one-point hostile mutations of them (tests/fuzz_cases.py). Each runs as
`rlsim compare FILE --json -` under a time limit and must end in exit 0 with strict JSON whose
invariants hold, or exit 2 with exactly one `error: field: reason` line: no traceback, no hang.
300 cases here (about 15 s); `python benchmarks/bench_fuzz.py --seconds 300` runs thousands.
"""

from __future__ import annotations

from fuzz_cases import Case, cases, filtering_cases, filtering_scenarios, mutated_cases, run_case, valid_cases
from hypothesis import HealthCheck, given, settings

FUZZ = settings(
    max_examples=300,
    deadline=None,  # the per-case time limit (fuzz_cases.TIME_LIMIT_S) catches hangs
    database=None,
    derandomize=True,  # the same cases on every run: CI never flakes on a new draw
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@FUZZ
@given(cases())
def test_every_case_is_json_or_one_error_line(case: Case) -> None:
    outcome, detail = run_case(case)
    assert outcome in ("ok", "refused"), detail


@settings(FUZZ, max_examples=25)
@given(valid_cases())
def test_valid_scenarios_mostly_simulate(case: Case) -> None:
    """The valid strategy really is valid: a refusal must be a cross-field rule, not a typo."""
    outcome, detail = run_case(case)
    assert outcome == "ok" or (outcome == "refused" and "unknown field" not in detail), detail


@settings(FUZZ, max_examples=25)
@given(mutated_cases())
def test_mutations_that_break_types_are_refused(case: Case) -> None:
    outcome, detail = run_case(case)
    assert outcome != "failure", detail
    if case.what.startswith(("corrupt: latin1", "corrupt: nul", "corrupt: utf16", "duplicate")):
        assert outcome == "refused", detail


@settings(FUZZ, max_examples=40)
@given(filtering_cases())
def test_dynamic_sampling_scenarios_simulate(case: Case) -> None:
    """DAPO filtering on every kind of valid scenario: JSON whose token identity counts the
    filtered tokens, or (a cross-field rule, the cap) one error line."""
    outcome, detail = run_case(case)
    assert outcome == "ok" or (outcome == "refused" and "unknown field" not in detail), detail


@settings(FUZZ, max_examples=60)
@given(mutated_cases(filtering_scenarios()))
def test_mutated_dynamic_sampling_scenarios_are_json_or_one_error_line(case: Case) -> None:
    outcome, detail = run_case(case)
    assert outcome in ("ok", "refused"), detail
