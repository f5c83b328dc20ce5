"""Work units: how much the search has done, counted so that a budget of work ends it at the
same step on any machine and at any load, where a budget of seconds ends it wherever the
clock happens to run out (and so answers differently on a busy machine).

The search tallies the steps of its inner loops, one slot per kind of step (the constants
below, indices into `Incumbent.tally`), and `units` weighs the tallies into one number. A
step's weight is what it costs, fitted by bench/work_calibration.py so that a unit is about
a tenth of a microsecond of the source build on a quiet 2-core machine (the fit, its error on
specs it was not fitted on, and the date are in docs/planner.md, Budgets). The weights only
have to be roughly right: they set how many seconds a budget lasts, never which answer it
gives, and the same tallies weigh the same on every machine.

A tally counts an iteration of a loop whose cost does not grow with the spec beyond what
the slot's weight assumes; where a step does more work on a larger spec (a pair of stage
options priced over more zones), its tally is charged once per unit of that work.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "DOMINANCE",
    "HOSTED_ROW",
    "KIND_SET",
    "LEAF",
    "PAIR_BUILT",
    "POOL_SCAN",
    "PREFIX",
    "PREFIX_PRICED",
    "PROFILE_LENGTH",
    "PROFILE_ROW",
    "PROFILE_TRIED",
    "REACH_PAIR",
    "ROOM_PAIR",
    "SHAPE",
    "SHAPE_BOUND",
    "SLOTS",
    "SPLIT_FILL",
    "WEIGHTS",
    "units",
]

PREFIX: Final = 0
"""A (stage end, kind set) tried on a prefix of the exact search (`Exact.stage`'s loop)."""
DOMINANCE: Final = 1
"""An earlier prefix compared in the dominance memo (`Exact._dominated`)."""
LEAF: Final = 2
"""A candidate scored: replica counts and the planning model's estimate."""
KIND_SET: Final = 3
"""A kind set listed for a run of layers (`Exact.kind_sets`)."""
PROFILE_ROW: Final = 4
"""A row of a pair table read by a shape (`Profiles._profile_queue`)."""
PROFILE_LENGTH: Final = 5
"""A run length n of a pair bounded as a profile (`Profiles._profile_queue`)."""
SPLIT_FILL: Final = 6
"""A stage filled by a greedy split of the blocks (`Splits.min_max_split`)."""
PAIR_BUILT: Final = 7
"""A pair of stage options priced into a pair table (`Pairs.pair_rows`)."""
HOSTED_ROW: Final = 8
"""A pair table row checked against the hosts at a D (`Pairs._hosted_rows`)."""
REACH_PAIR: Final = 9
"""A pair of options checked for the stages it holds in memory (`Reach.profile_last`)."""
SHAPE_BOUND: Final = 10
"""A shape's lower bound, at one D (`Bounds.shape_bounds`, `range_bound`)."""
SHAPE: Final = 11
"""A shape popped from the driver's queue."""
PREFIX_PRICED: Final = 12
"""A (stage end, kind set) of `PREFIX` that passed the first time bound and is priced
(devices, rings, egress, rate, dominance)."""
PROFILE_TRIED: Final = 13
"""A profile taken from a shape's queue to be split and timed (`Profiles.profiles`)."""
POOL_SCAN: Final = 14
"""A pool looked at by a candidate's estimate (nodes rented, quotas): `LEAF`'s part that
grows with the spec, one per pool per estimate."""
ROOM_PAIR: Final = 15
"""A pair of stage options ranked by the devices they hold (`Reach._pairs_by_room`)."""
SLOTS: Final = 16
"""How many kinds of step there are: the length of a tally."""

WEIGHTS: Final[tuple[int, ...]] = (8, 13, 870, 22, 22, 33, 62, 359, 8, 16, 10, 686, 31, 207, 5, 5)
"""Units per step, slot by slot (module docstring)."""


def units(tally: list[int]) -> int:
    """The work of `tally` in units: each slot's count times its weight."""
    total = 0
    for count, weight in zip(tally, WEIGHTS, strict=True):
        total += count * weight
    return total
