"""rlsim: a GPU cost and idle-time simulator and planner for RL training of LLMs.

Data flows one way: scenario -> performance models (+ calibration profile, catalog)
-> simulator -> recorder -> metrics -> cost -> outputs.
"""

__version__ = "0.1.0"
