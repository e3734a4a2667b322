"""Fitting a scenario to a real run's log (`rlsim fit`): workload, efficiencies, provenance.

`run.fit_log` is the entry point; `lengths` fits the response-length distribution, `efficiency`
the per-phase efficiency terms by simulating the base scenario, `phases` counts phase times the
same way on the log's side and the simulator's.
"""
