"""How rlsim writes numbers for people: shares and dollars, the same way in every table.

One module so that a table, the report and the planner never disagree on how a figure looks:
shares as whole percents; dollars with cents below $1,000 (three significant digits below a
dollar, since a small run's step costs cents) and whole dollars above.
"""

from __future__ import annotations


def pct(x: float) -> str:
    """A share in [0, 1] as a whole percent: 0.256 -> '26%'."""
    return f"{100 * x:.0f}%"


def usd(x: float | None) -> str:
    """Dollars for a table: '-' without a price, cents below $1,000, whole dollars above."""
    if x is None:
        return "-"
    if x < 1:
        return f"${x:.3g}"
    return f"${x:,.2f}" if x < 1000 else f"${x:,.0f}"
