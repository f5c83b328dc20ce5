"""Sailor's reported plans as hetc Plans, so that bench/planner.py can score them with hetc's
cost model beside hetc's own plans (one model for both: Sailor's predictions come from its
own simulator, which counts pipeline stragglers differently and rounds microbatch counts, so
they are printed for reference only).

The plans come from the table "What Sailor's own planner found with these" in
shared/data/sailor-measurements/README.md. Every plan is built the same way:

- the batch: each of the D pipelines gets B / (mbs x D) microbatches, the remainder one more
  to the first pipelines (as evenly as integers allow, as Sailor's plan implies; hetc's own
  plans may share unevenly);
- placement: a pool's replicas fill its nodes in order, largest TP first, so a replica never
  spans nodes and only the last node of a pool is partly used; pipeline k runs replica k of
  every stage; a stage's replicas are listed zone by zone (the 5-zone plan puts each
  pipeline's two stages in one zone, since Sailor's plan is per zone);
- the layer split, which Sailor's summary never gives: the contiguous split of the blocks
  that minimises the slowest stage's forward + backward time per microbatch under hetc's
  model (`PlanningModel.stage_time`), each stage timed on its slowest replica, among the
  splits in which every replica fits in memory (balanced by device speed, as Sailor's
  planner balances its stages). With one device type this is the even split, adjusted for
  the embedding and the output head.

Where the summary leaves the devices of a stage open, every interpretation that fits the
quotas is built and the one hetc's planning model (`PlanningModel.estimate`) rates best is
kept, memory-feasible ones first: the comparison then never flatters hetc by picking a weak
reading of Sailor's plan. Details per scenario are in `_layouts`.

Scenarios without a Sailor plan in that table (gptneo-80a100-240v100, gptneo-3types-256)
get None.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from itertools import combinations_with_replacement

from hetc import __version__
from hetc.costmodel.planning import Assignment, PlanningModel, Shape
from hetc.costmodel.profile import LayerProfile
from hetc.plan import Pipeline, Plan, Stage
from hetc.schema.spec import Spec, spec_hash
from hetc.solver.build import place_replicas

__all__ = ["SAILOR_REPORTED", "SailorReport", "sailor_plan"]


@dataclass(frozen=True, kw_only=True, slots=True)
class SailorReport:
    """One row of the README's table, as Sailor printed it."""

    search_seconds: float
    """Sailor's planner search time, measured on a machine like the bench's."""
    plan: str
    iteration_time: float
    """Seconds, Sailor's own simulator."""
    usd_per_iteration: float


SAILOR_REPORTED: dict[str, SailorReport] = {
    "opt350m-128a100": SailorReport(
        search_seconds=0.09, plan="PP1, DP32, TP4, mbs 8", iteration_time=2.40,
        usd_per_iteration=0.313,
    ),
    "gptneo-128a100": SailorReport(
        search_seconds=0.13, plan="PP2, DP16, TP4, mbs 4", iteration_time=13.6,
        usd_per_iteration=1.77,
    ),
    "gptneo-32a100-96v100": SailorReport(
        search_seconds=1.07,
        plan="PP6, DP9, mbs 1: stages 0-1 V100/TP4, 2-4 A100/TP1, 5 mixed",
        iteration_time=38.1,
        usd_per_iteration=4.07,
    ),
    "gptneo-128a100-384v100": SailorReport(
        search_seconds=12.96, plan="PP13, DP17, mbs 1", iteration_time=11.2,
        usd_per_iteration=4.85,
    ),
    "opt350m-128a100-384v100": SailorReport(
        search_seconds=3.95, plan="PP7, DP32, mbs 1", iteration_time=1.91,
        usd_per_iteration=0.833,
    ),
    "opt350m-5zones": SailorReport(
        search_seconds=0.47, plan="PP2, DP64, TP4, mbs 4, us-central1 only",
        iteration_time=0.98, usd_per_iteration=0.764,
    ),
    "opt350m-budget": SailorReport(
        search_seconds=11.9, plan="PP1, DP32, TP4, mbs 8", iteration_time=2.41,
        usd_per_iteration=0.315,
    ),
    "opt350m-floor": SailorReport(
        search_seconds=0.31, plan="PP1, DP16, TP4, mbs 8 (64 A100)", iteration_time=4.26,
        usd_per_iteration=0.278,
    ),
}  # fmt: skip

Group = tuple[int, int, int]
"""(pool index in `PlanningModel.pools` order, TP degree, replicas) within one stage."""
Layout = tuple[int, tuple[tuple[Group, ...], ...]]
"""(microbatch size, the groups of each stage); every stage's replicas add up to D."""


def sailor_plan(
    scenario_name: str, spec: Spec, profiles: Sequence[LayerProfile] = ()
) -> Plan | None:
    """Sailor's reported plan for the scenario, built for `spec` (see the module docstring);
    None when the README reports no Sailor plan for it. With `profiles`, the layer split and
    the choice among readings use the measured times, as hetc's own search then does."""
    model = PlanningModel(spec, profiles=profiles)
    layouts = _layouts(scenario_name, model)
    if not layouts:
        return None
    best: tuple[tuple[bool, float], Layout, tuple[int, ...]] | None = None
    for layout in layouts:
        boundaries = _balanced_split(model, layout)
        if boundaries is None:
            continue
        estimate = model.estimate(_shape(layout, boundaries), _assignment(model, layout))
        out_of_memory = any("out of memory" in p for p in estimate.problems)
        rank = (out_of_memory, estimate.iteration_time)
        if best is None or rank < best[0]:
            best = (rank, layout, boundaries)
    if best is None:
        return None
    _, layout, boundaries = best
    return _build(spec, model, layout, boundaries)


# -- the plans ---------------------------------------------------------------------------------


def _pool(model: PlanningModel, device: str, zone: str | None = None) -> int:
    """The index of the pool of `device` (in `zone`, else the first zone that has one)."""
    for slot in model.pools:
        if slot.pool.device == device and zone in (None, slot.zone.name):
            return slot.index
    raise KeyError(f"the spec has no {device} pool" + (f" in {zone}" if zone else ""))


def _layouts(name: str, model: PlanningModel) -> list[Layout]:
    """The readings of Sailor's plan for `name`; several where the summary leaves the devices
    of some stage open, [] where the README has no Sailor plan.

    - Single-device plans (OPT-350M or GPT-Neo on 128 A100, the budget and floor plans) are
      fully given. The budget and floor plans name no zone: they go to the first zone,
      us-central1-a (a single-zone plan of either zone costs and runs the same).
    - 5 zones: PP2, DP64, TP4 on the 512 A100 of us-central1's four zones, 16 pipelines per
      zone (each zone's 32 nodes hold both stages of its pipelines).
    - GPT-Neo on 32 A100 + 96 V100, "PP6, DP9, stages 0-1 V100/TP4, 2-4 A100/TP1, 5 mixed":
      stages 0-1 take 72 V100, stages 2-4 take 27 A100; stage 5 mixes a A100 replicas at TP
      ta with 9 - a V100 replicas at TP tv for every (a, ta, tv) within the 5 A100 and 24
      V100 left. Sailor's cost (4.07 USD for 38.1 s) implies all 128 devices are rented,
      which 3 A100/TP1 + 6 V100/TP4 matches; it mixes TP degrees in a stage, which hetc's
      runtime runs only without ZeRO (the bench reports that, and scores it all the same).
    - GPT-Neo on 128 A100 + 384 V100, "PP13, DP17": the cost (4.85 USD for 11.2 s) again
      implies every device is rented. Read, like Sailor's 32 + 96 plan, as V100 stages first
      and A100 stages after: v V100 stages and 13 - v A100 stages, each stage at one TP,
      with 17 x the TP degrees within each quota and no stage's TP raisable (as many devices
      used as the quotas allow); every such multiset of TP degrees is tried, larger TP first.
    - OPT-350M on 128 A100 + 384 V100, "PP7, DP32": read the same way (3 V100/TP4 stages
      then 4 A100/TP1 stages is the reading that uses all 512 devices).
    """
    if name in ("opt350m-128a100", "opt350m-budget"):
        return [(8, (((_pool(model, "A100-40GB"), 4, 32),),))]
    if name == "opt350m-floor":
        return [(8, (((_pool(model, "A100-40GB"), 4, 16),),))]
    if name == "gptneo-128a100":
        a100 = _pool(model, "A100-40GB")
        return [(4, (((a100, 4, 16),),) * 2)]
    if name == "opt350m-5zones":
        central = tuple(
            (slot.index, 4, 16) for slot in model.pools if slot.zone.region == "us-central1"
        )
        return [(4, (central, central))]
    if name == "gptneo-32a100-96v100":
        return _mixed_last_stage(model)
    if name == "gptneo-128a100-384v100":
        return _front_back(model, stages=13, dp=17)
    if name == "opt350m-128a100-384v100":
        return _front_back(model, stages=7, dp=32)
    return []


def _tps(model: PlanningModel, pool: int) -> list[int]:
    return sorted({k.tp for k in model.kinds if k.pool == pool})


def _mixed_last_stage(model: PlanningModel) -> list[Layout]:
    a100, v100 = _pool(model, "A100-40GB"), _pool(model, "V100-16GB")
    front = (((v100, 4, 9),),) * 2 + (((a100, 1, 9),),) * 3
    a100_left = model.pools[a100].pool.quota - 3 * 9
    v100_left = model.pools[v100].pool.quota - 2 * 9 * 4
    layouts: list[Layout] = []
    for a in range(1, 9):
        for ta in _tps(model, a100):
            for tv in _tps(model, v100):
                if a * ta <= a100_left and (9 - a) * tv <= v100_left:
                    layouts.append((1, (*front, ((a100, ta, a), (v100, tv, 9 - a)))))
    return layouts


def _front_back(model: PlanningModel, *, stages: int, dp: int) -> list[Layout]:
    a100, v100 = _pool(model, "A100-40GB"), _pool(model, "V100-16GB")
    layouts: list[Layout] = []
    for v in range(1, stages):
        v_choices = _saturating(_tps(model, v100), v, model.pools[v100].pool.quota // dp)
        a_choices = _saturating(_tps(model, a100), stages - v, model.pools[a100].pool.quota // dp)
        for v_tps in v_choices:
            for a_tps in a_choices:
                groups = tuple(((v100, tp, dp),) for tp in v_tps)
                groups += tuple(((a100, tp, dp),) for tp in a_tps)
                layouts.append((1, groups))
    return layouts


def _saturating(degrees: list[int], stages: int, room: int) -> list[tuple[int, ...]]:
    """TP degrees for `stages` stages, larger first, summing to at most `room`, where no
    stage's degree can be raised to the next one without going over."""
    out = []
    for combo in combinations_with_replacement(sorted(degrees, reverse=True), stages):
        total = sum(combo)
        if total > room:
            continue
        raisable = any(total - tp + nxt <= room for tp in set(combo) for nxt in degrees if nxt > tp)
        if not raisable:
            out.append(combo)
    return out


# -- building ----------------------------------------------------------------------------------


def _kind(model: PlanningModel, pool: int, tp: int) -> int:
    return next(k.index for k in model.kinds if k.pool == pool and k.tp == tp)


def _dp(layout: Layout) -> int:
    return sum(count for _, _, count in layout[1][0])


def _shape(layout: Layout, boundaries: tuple[int, ...]) -> Shape:
    return Shape(microbatch=layout[0], boundaries=boundaries, pipelines=_dp(layout))


def _assignment(model: PlanningModel, layout: Layout) -> Assignment:
    return tuple(
        tuple(sorted((_kind(model, pool, tp), count) for pool, tp, count in groups))
        for groups in layout[1]
    )


def _balanced_split(model: PlanningModel, layout: Layout) -> tuple[int, ...] | None:
    """Block boundaries minimising the slowest stage's time per microbatch, every replica in
    memory (an exact dynamic programme over end blocks); without a memory-feasible split,
    the same minimum ignoring memory (simulate then reports the plan does not fit)."""
    mbs, stages = layout
    count = len(stages)
    dp = _dp(layout)
    blocks = model.blocks
    in_flight_cap = -(-(model.batch // mbs) // dp)
    kinds = [[_kind(model, pool, tp) for pool, tp, _ in groups] for groups in stages]

    def cost(i: int, start: int, end: int, memory: bool) -> float:
        first = 0 if i == 0 else start + 1
        stop = end + 2 if i == count - 1 else end + 1
        flight = max(1, min(count - i, in_flight_cap))
        if memory and not all(model.fits(k, mbs, first, stop, dp, flight) for k in kinds[i]):
            return float("inf")
        return max(model.stage_time(k, mbs, first, stop)[0] for k in kinds[i])

    for memory in (True, False):
        inf = float("inf")
        best = [[inf] * (blocks + 1) for _ in range(count)]
        back = [[0] * (blocks + 1) for _ in range(count)]
        for end in range(1, blocks - count + 2):
            best[0][end] = cost(0, 0, end, memory)
        for i in range(1, count):
            for end in range(i + 1, blocks - (count - 1 - i) + 1):
                for start in range(i, end):
                    if best[i - 1][start] == inf:
                        continue
                    value = max(best[i - 1][start], cost(i, start, end, memory))
                    if value < best[i][end]:
                        best[i][end], back[i][end] = value, start
        if best[count - 1][blocks] < inf:
            bounds = [blocks]
            for i in range(count - 1, 0, -1):
                bounds.append(back[i][bounds[-1]])
            return (0, *reversed(bounds))
    return None


def _build(spec: Spec, model: PlanningModel, layout: Layout, boundaries: tuple[int, ...]) -> Plan:
    mbs, stages = layout
    dp = _dp(layout)
    requests: dict[int, list[tuple[int, int, Hashable]]] = {}
    for i, groups in enumerate(stages):
        position = 0
        for pool, tp, count in groups:
            for _ in range(count):
                requests.setdefault(pool, []).append((tp, i, (i, position)))
                position += 1
    nodes, placed = place_replicas(model, requests)
    plan_stages = tuple(
        Stage(
            first_block=boundaries[i],
            end_block=boundaries[i + 1],
            replicas=tuple(placed[i, j] for j in range(dp)),
        )
        for i in range(len(stages))
    )
    share, extra = divmod(spec.training.global_batch_size // mbs, dp)
    pipelines = tuple(
        Pipeline(replicas=(k,) * len(stages), microbatches=share + (k < extra)) for k in range(dp)
    )
    return Plan(
        spec_hash=spec_hash(spec),
        hetc_version=__version__,
        model_blocks=model.blocks,
        global_batch_size=spec.training.global_batch_size,
        microbatch_size=mbs,
        nodes=tuple(nodes),
        stages=plan_stages,
        pipelines=pipelines,
    )
