"""A command's planning budget: units of work, which decide the answer, and a wall clock, which
may only cut it short and then says so.

`hetc plan` and `hetc compile` promise the same answer for the same spec and flags on any
machine and at any load. A budget of seconds cannot keep that promise: a busy machine stops
the search earlier and answers differently. So the default budget counts work (the search's
tallied steps, `search.work`, and the plans built and simulated, `build_work`), calibrated so
that a quiet 2-core machine spends about the seconds the old wall-clock budget allowed
(docs/planner.md, Budgets). Every step of the command (the search, the listing of runners-up,
the reranking simulations, `--explain`'s re-plans, the diagnosis of an infeasible spec) takes
its allowance from one `Budget` and charges it what it spent, so a later step gets what the
earlier ones left, never more than the whole.

Two wall clocks remain, and both are said in the answer when they are what stopped a step:
`--time-limit` (the caller's choice of seconds instead of work: its answers depend on the
machine) and, behind a work budget, a safety cap (`SAFETY_CAP`) that only a machine many
times slower than the calibration one reaches.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

from hetc.plan import Plan
from hetc.solver.deadline import Deadline

__all__ = [
    "DEFAULT_WORK",
    "SAFETY_CAP",
    "Budget",
    "build_work",
    "command_budget",
]

DEFAULT_WORK = 80_000_000
"""Units of work `hetc plan` and `hetc compile` spend unless told otherwise (`--work-limit`):
about 8 s of the source build on a quiet 2-core machine, the wall budget they had before
(docs/planner.md, Budgets, has the calibration)."""

SAFETY_CAP = 60.0
"""Wall seconds after which a command under a work budget stops searching anyway: only a
machine several times slower or busier than the calibration one reaches it, and the answer
then says that the clock, not the work, decided it (`--time-limit 0` lifts the cap)."""

PLAN_WORK = 10_000
"""Units to build and simulate any plan, whatever its size (about a millisecond)."""

RANK_WORK = 1_000
"""Units to build and simulate a plan, per rank (process) of the plan: building it, its
rank records, its memory check and its share of the event simulation (about 0.1 ms each at
thousands of ranks)."""

EVENT_WORK = 8
"""Units per (pipeline, stage, microbatch) of the event simulation's 1F1B timeline."""


def build_work(plan: Plan) -> int:
    """The units building and simulating `plan` costs: a fixed charge, one per rank and one
    per event of its 1F1B timeline (`PLAN_WORK`, `RANK_WORK`, `EVENT_WORK`, fitted on plans
    of 1 to 5,000 ranks, docs/planner.md, Budgets), so that the reranking of thousands-of-ranks
    plans spends a budget as it spends seconds."""
    ranks = sum(r.tp for stage in plan.stages for r in stage.replicas)
    events = sum(len(plan.stages) * p.microbatches for p in plan.pipelines)
    return PLAN_WORK + RANK_WORK * ranks + EVENT_WORK * events


@dataclass(slots=True)
class Budget:
    """What is left of one command's budget (module docstring). Steps take a `part` of it
    and `charge` what they spent; a part charges its whole too."""

    work: int | None = None
    """Units the budget holds in all; None: no limit of work."""
    clock: Deadline | None = None
    """The wall-clock limit, if any: the caller's `--time-limit`, or the safety cap behind a
    work budget (`capped`)."""
    capped: bool = False
    """Whether `clock` is the safety cap rather than the caller's limit."""
    spent: int = 0
    parent: Budget | None = field(default=None, repr=False)

    def left(self) -> int | None:
        """Units left (None: unlimited)."""
        if self.work is None:
            return None
        return max(0, self.work - self.spent)

    def seconds_left(self) -> float | None:
        """Wall seconds left (None: no clock)."""
        return None if self.clock is None else self.clock.remaining()

    def charge(self, units: int) -> None:
        """Count `units` spent, here and in every budget this is a part of."""
        budget: Budget | None = self
        while budget is not None:
            budget.spent += units
            budget = budget.parent

    def exhausted(self) -> bool:
        """Whether nothing is left: no work, or the clock has run out."""
        left = self.left()
        return left == 0 or (self.clock is not None and self.clock.expired())

    def part(self, fraction: float, *, most: int | None = None) -> Budget:
        """`fraction` (0..1) of what is left, and no more than `most` units where given, as a
        budget of its own whose charges count here too: what one step may spend so that the
        steps after it keep the rest."""
        left = self.left()
        work = None if left is None else math.floor(fraction * left)
        if most is not None:
            work = most if work is None else min(work, most)
        clock = None if self.clock is None else self.clock.part(fraction)
        return Budget(work=work, clock=clock, capped=self.capped, parent=self)

    def clock_part(self, fraction: float) -> Budget:
        """The whole of what is left of the work, with `fraction` of what is left of a
        caller's wall clock (the safety cap is kept whole): what planning may spend where
        the command must keep seconds for writing its output, so that the work, and so the
        answer, is the same as `hetc plan`'s."""
        clock = self.clock
        if clock is not None and not self.capped:
            clock = clock.part(fraction)
        return Budget(work=self.left(), clock=clock, capped=self.capped, parent=self)

    def fits(self, units: int) -> bool:
        """Whether a step of `units` fits in what is left (always, without a work limit)."""
        left = self.left()
        return left is None or units <= left

    def root(self) -> Budget:
        """The budget this is a part of, at the top: the command's whole budget."""
        budget = self
        while budget.parent is not None:
            budget = budget.parent
        return budget

    def stop_words(self, stopped_by: str, spent: int) -> str:
        """Why a step under this budget stopped, in one line that names the flag to change:
        `stopped_by` is `SearchResult.stopped_by`, `spent` the step's own work. Empty for
        any other stop (an evaluation limit, Ctrl-C), whose own words stand."""
        whole = self.root()
        if stopped_by == "work" and whole.work is not None:
            return (
                f"work budget of {whole.work:,} units reached (the search spent {spent:,} of"
                " them; --work-limit raises it, and the answer is the same on any machine)"
            )
        if stopped_by == "cap" and self.clock is not None:
            return (
                f"wall-clock safety cap of {self.clock.seconds:g} s reached before the work"
                " budget: this answer depends on the machine's speed and load (--time-limit 0"
                " lifts the cap, so that only the work budget decides)"
            )
        if stopped_by == "time" and self.clock is not None:
            return (
                f"time limit {self.clock.seconds:g} s reached: this answer depends on the"
                " machine's speed and load (without --time-limit the work budget decides, the"
                " same on any machine)"
            )
        return ""


def command_budget(
    *,
    exact: bool = False,
    time_limit: float | None = None,
    work_limit: int | None = None,
    started: float | None = None,
) -> Budget:
    """The budget of `hetc plan` or `hetc compile` from their flags: `--time-limit S` is S
    wall seconds from `started` (the command's start, a `time.perf_counter` reading; now by
    default) instead of the work budget; otherwise `--work-limit` units (DEFAULT_WORK
    without `--exact`, none with it) behind the wall-clock safety cap, which `--exact` and
    `--time-limit 0` lift."""
    if started is None:
        started = time.perf_counter()
    if time_limit:
        return Budget(work=work_limit, clock=Deadline(at=started + time_limit, seconds=time_limit))
    work = work_limit if work_limit is not None or exact else DEFAULT_WORK
    if exact or time_limit == 0:
        return Budget(work=work)
    return Budget(
        work=work, clock=Deadline(at=started + SAFETY_CAP, seconds=SAFETY_CAP), capped=True
    )
