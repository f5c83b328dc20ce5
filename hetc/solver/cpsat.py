"""The CP-SAT cross-check of the search: the same problem for one fixed shape, by another method.

For a fixed shape (microbatch size b, stage boundaries, so P stages, and D pipelines) a CP-SAT
model chooses integer replica counts. Its counts are read back and re-scored with the float
`PlanningModel.estimate`, and that score is what gets compared with the search. Notation:

    i in 0..P-1          stages;  m = ceil(B / (b D)) microbatches of the busiest pipeline
    k in K_i             replica kinds that fit stage i in memory (the others are absent)
    p(k), z(k), tp(k)    a kind's pool, zone and TP degree
    g_p, pi_p, N_p^max   a pool's gpus_per_node, USD per device-second, nodes it may rent

    variables
    n[i,k] in 0..D       replicas of stage i on kind k;   sum_k n[i,k] = D
    x[i,k]               kind used:  x <= n <= D x
    q[i,p], r[i,z], v[i,tau]   stage i uses pool p, zone z, TP degree tau (each the OR of the
                         x[i,k] concerned); without mixed TP, exactly one v[i,tau] per stage
    N_p in 0..N_p^max    rented nodes:  g_p N_p >= sum over i and k of pool p of tp(k) n[i,k]

    constants (seconds, or USD for egress; the planning method that gives each)
    c[i,k], o[i,k]       forward + backward, optimizer step of one microbatch   stage_time
    s(p,p')              activation send                                        send
    y_i(k,k')            the stage's ring over D ranks, every hop like k-k'     ring (D >= 2)
    d(k,k')              tied-embedding all-reduce, first stage to last         tied (P >= 2)
    a(z,z')              2 x activation bytes x B / b x price(z,z')             boundary_egress
    h_i(z,z',lo,hi)      2 (D-1) / D x gradient bytes per rank at TP lo x hi x price(z,z')
    f(k,k')              the tied embedding's gradient, both ways, per pipeline tied_egress

    t_i >= c[i,k] x[i,k]                          u_i >= o[i,k] x[i,k]
    s_i >= s(p,p') (q[i,p] + q[i+1,p'] - 1)        (i < P-1;  s_-1 = s_(P-1) = 0)
    w_i >= y_i(k,k') (x[i,k] + x[i,k'] - 1)        (k <= k')
    e   >= d(k,k') (x[0,k] + x[P-1,k'] - 1)
    S   >= t_i + s_(i-1) + s_i
    X   >= w_i + u_i  (+ e for i = 0 and i = P-1)
    T    = F + (m-1) S + X,   F = sum_i t_i + 2 sum_i s_i
    G_i >= a(z,z') (r[i,z] + r[i+1,z'] - 1)
    H_i >= h_i(z,z',lo,hi) sum_z'' r[i,z'']        (D >= 2) when r[i,z], r[i,z'], v[i,lo],
                                                   v[i,hi] and no v[i,tau] outside [lo, hi]
    E   >= f(k,k') (x[0,k] + x[P-1,k'] - 1)
    cost = T sum_p g_p pi_p N_p + sum_i G_i + sum_i H_i + E

    minimise T (max_throughput) or cost (min_cost), subject to
    sum_p g_p N_p <= max_gpus,  T <= 1 / min_throughput,  cost <= max_cost_per_iteration.

How it maps to `planning`: t_i is `stage_compute`, s_i `send_between`, w_i + u_i
`stage_sync`, e `tied_time`, S, F and T those of `time_of_sets`; G_i, H_i and E are
`boundary_egress`, `ring_egress` (Z_i = sum_z r[i,z] crossings at the worst price of the zones
used, the hop at the least and largest TP used) and `tied_egress`; N_p is `nodes` and the
limits are `resource_problems` and `objective_problems`. Each ">=" is a maximum over
indicator-selected constants: a variable has only lower bounds set by the counts, and the
objective and the limits only grow with it, so its least value, the planning term, is always
a best choice. Nothing but the counts is read back.

The product T x rate is linearised with one enforcement literal per pool and node count:
a[p,j] = (N_p >= j) for j = 1..N_p^max, W[p,j] >= T enforced by a[p,j], and
T x rate = sum_p g_p pi_p sum_j W[p,j]. The issue suggests one literal per candidate
straggler value, but F and X vary with the counts as much as S does, so fixing S alone leaves
a product; a pool's node count takes at most quota / g_p values, so this is exact and keeps
every constraint linear.

Integers: seconds are counted in steps of T^max / 2^30 and USD in steps of cost^max / 1e17,
where T^max and cost^max put every term at its worst over the kinds that fit. Every constant
is rounded up, so the integer T and cost are never below the float ones of the same counts
and a plan accepted under the budget and the throughput floor passes them in the float model
too. The integer T exceeds the float one by under 3 (P + m) steps, and a pool's rate per node
(about 1e8 g_p pi_p T^max / cost^max steps per time step) by under one step: plans closer
than that may be ordered either way. The split gives time and rate about the same relative
resolution while the largest linear sum, the cost, stays near 1e17, far inside int64.

The solver runs without presolve and without its LP relaxation (integer propagation and
search alone), one worker, seed 0. CP-SAT 9.15's presolve loses feasible solutions of these
models, answering INFEASIBLE, or OPTIMAL with a worse plan, where brute force over the counts
finds better (`max_presolve_iterations = 0` made it rarer, not rare); with presolve off, the
default LP stalls for tens of seconds on some three-stage min_cost shapes that propagation
alone closes in milliseconds.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import Any, TypeVar

from ortools.sat.python import cp_model

from hetc.costmodel.planning import Assignment, Estimate, PlanningModel, Shape

__all__ = ["CpSatSolution", "objective_value", "solve_all_shapes", "solve_shape"]

TIME_STEPS = 2**30
"""Integer steps of the largest iteration time a shape can have."""
MONEY_STEPS = 10**17
"""Integer steps of the largest cost a shape can have."""


@dataclass(frozen=True, slots=True)
class CpSatSolution:
    """CP-SAT's counts for one shape and the float model's score of them."""

    shape: Shape
    assignment: Assignment
    estimate: Estimate
    status: str
    """CP-SAT's status name: OPTIMAL, or FEASIBLE when a time limit stopped it."""
    wall_time: float


def objective_value(model: PlanningModel, estimate: Estimate) -> float:
    """The spec's objective, as the search's `Candidate.value` reads it."""
    if model.spec.objective == "max_throughput":
        return estimate.iteration_time
    return estimate.cost


# -- constants ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Terms:
    """The float constants of one shape over the kinds that fit (notation of the docstring)."""

    compute: tuple[dict[int, float], ...]
    """c[i,k]"""
    update: tuple[dict[int, float], ...]
    """o[i,k]"""
    send: tuple[dict[tuple[int, int], float], ...]
    """s(p,p') across boundary i, pools of stage i first."""
    ring: tuple[dict[tuple[int, int], float], ...]
    """y_i(k,k') for k <= k'; empty for D = 1."""
    tied: dict[tuple[int, int], float]
    """d(k,k'), first-stage kind first; empty for P = 1 or untied embeddings."""
    boundary_egress: tuple[dict[tuple[str, str], float], ...]
    """a(z,z') across boundary i, for priced zone pairs."""
    ring_egress: tuple[dict[tuple[str, str, int, int], float], ...]
    """h_i(z,z',lo,hi) for priced zone pairs z < z' and lo <= hi; empty for D = 1."""
    tied_egress: dict[tuple[int, int], float]
    """f(k,k')"""
    zones: tuple[tuple[str, ...], ...]
    """Zones stage i can use."""


def _terms(model: PlanningModel, shape: Shape, fits: Sequence[Sequence[int]]) -> _Terms:
    """Every constant once, from the planning model's own cached methods, so the integer model
    and `estimate` read the same numbers."""
    kinds, pools = model.kinds, model.pools
    stages, dp, mbs = shape.stages, shape.pipelines, shape.microbatch
    ranges = [model.layer_range(shape, i) for i in range(stages)]
    times = [{k: model.stage_time(k, mbs, *ranges[i]) for k in fits[i]} for i in range(stages)]
    stage_pools = [sorted({kinds[k].pool for k in fit}) for fit in fits]
    zones = tuple(tuple(sorted({pools[p].zone.name for p in sp})) for sp in stage_pools)
    zone_pool = {slot.zone.name: slot.index for slot in pools}
    """Egress prices depend on the zones alone, so any pool stands for its zone."""
    price = {
        (za, zb): model.egress_price(zone_pool[za], zone_pool[zb])
        for za in zone_pool
        for zb in zone_pool
    }
    samples_bytes = model.activation_bytes(mbs) * (model.batch // mbs)
    ring: list[dict[tuple[int, int], float]] = []
    ring_egress: list[dict[tuple[str, str, int, int], float]] = []
    for i, fit in enumerate(fits):
        key = model.stage_key(shape, i)
        if dp < 2:
            ring.append({})
            ring_egress.append({})
            continue
        ring.append({(a, b): model.ring(a, b, key, dp) for a, b in _pairs(fit)})
        tps = sorted({kinds[k].tp for k in fit})
        ring_egress.append(
            {
                (za, zb, lo, hi): 2 * (dp - 1) / dp * model.gradient_bytes(key, lo) * hi * cost
                for za, zb in combinations(zones[i], 2)
                if (cost := price[za, zb]) > 0
                for lo, hi in _pairs(tps)
            }
        )
    tied: dict[tuple[int, int], float] = {}
    tied_egress: dict[tuple[int, int], float] = {}
    if stages > 1 and model.arch.tied_embeddings:
        for a in fits[0]:
            for b in fits[-1]:
                tied[a, b] = model.tied(a, b)
                if (egress := model.tied_egress([a], [b], dp)) > 0:
                    tied_egress[a, b] = egress
    return _Terms(
        compute=tuple({k: t[0] for k, t in stage.items()} for stage in times),
        update=tuple(
            {k: model.update_time(k, mbs, *ranges[i], dp) for k in stage}
            for i, stage in enumerate(times)
        ),
        send=tuple(
            {(a, b): model.send(a, b, mbs) for a in stage_pools[i] for b in stage_pools[i + 1]}
            for i in range(stages - 1)
        ),
        ring=tuple(ring),
        tied=tied,
        boundary_egress=tuple(
            {
                (za, zb): 2 * samples_bytes * cost
                for za in zones[i]
                for zb in zones[i + 1]
                if (cost := price[za, zb]) > 0
            }
            for i in range(stages - 1)
        ),
        ring_egress=tuple(ring_egress),
        tied_egress=tied_egress,
        zones=zones,
    )


def _pairs(items: Sequence[int]) -> Iterator[tuple[int, int]]:
    """The pairs `stage_sync` takes its maximum over: each item with itself and with every
    later one."""
    for x, a in enumerate(items):
        for b in items[x:]:
            yield a, b


def _worst(values: Mapping[Any, float]) -> float:
    return max(values.values(), default=0.0)


def _time_bound(terms: _Terms, microbatches: int, unit: Callable[[float], int | float]) -> float:
    """T with every term at its worst, each worst converted by `unit` (seconds or steps)."""
    t = [unit(_worst(c)) for c in terms.compute]
    s = [0, *(unit(_worst(d)) for d in terms.send), 0]
    tie = unit(_worst(terms.tied))
    last = len(t) - 1
    sync = [
        unit(_worst(terms.ring[i])) + unit(_worst(terms.update[i])) + (tie if i in (0, last) else 0)
        for i in range(len(t))
    ]
    straggler = max(t[i] + s[i] + s[i + 1] for i in range(len(t)))
    return sum(t) + 2 * sum(s) + (microbatches - 1) * straggler + max(sync)


def _egress_bound(terms: _Terms) -> float:
    """Egress with every term at its worst (a ring crossing every zone it can use)."""
    total = sum(_worst(d) for d in terms.boundary_egress)
    total += sum(_worst(d) * len(z) for d, z in zip(terms.ring_egress, terms.zones, strict=True))
    return total + _worst(terms.tied_egress)


# -- the model ---------------------------------------------------------------------------

_Key = TypeVar("_Key", int, str)
_Expr = cp_model.LinearExpr | int


class _Formulation:
    """The CP-SAT model of one shape, built in the order of the module docstring."""

    def __init__(self, model: PlanningModel, shape: Shape, fits: Sequence[Sequence[int]]) -> None:
        self.model, self.shape, self.fits = model, shape, fits
        self.terms = _terms(model, shape, fits)
        self.microbatches = model.microbatches(shape)
        self.seconds_hi = _time_bound(self.terms, self.microbatches, float)
        self.per_second = TIME_STEPS / self.seconds_hi
        self.time_hi = int(_time_bound(self.terms, self.microbatches, self.time_steps))
        self.cp = cp_model.CpModel()
        self.counts = [{k: self.cp.new_int_var(0, shape.pipelines, "") for k in f} for f in fits]
        self.used = [{k: self.cp.new_bool_var("") for k in f} for f in fits]
        kinds, pools = model.kinds, model.pools
        stages = range(shape.stages)
        self.pool_used = [self._grouped(i, lambda k: kinds[k].pool) for i in stages]
        self.zone_used = [
            self._grouped(i, lambda k: pools[kinds[k].pool].zone.name) for i in stages
        ]
        self.tp_used = [self._grouped(i, lambda k: kinds[k].tp) for i in stages]
        self._replicas()
        self.iteration = self._iteration_time()
        self.node_max = {
            p: self._node_max(p) for p in sorted({kinds[k].pool for f in fits for k in f})
        }
        self.nodes = self._nodes()
        self.per_usd = 0.0
        self.cost: _Expr = 0
        self.cost_hi = 0
        spec = model.spec
        if spec.objective == "min_cost" or spec.constraints.max_cost_per_iteration is not None:
            self._money()

    def time_steps(self, seconds: float) -> int:
        return math.ceil(seconds * self.per_second)

    def money_steps(self, usd: float) -> int:
        return math.ceil(usd * self.per_usd)

    def time_var(self) -> cp_model.IntVar:
        return self.cp.new_int_var(0, self.time_hi, "")

    def _grouped(self, stage: int, group: Callable[[int], _Key]) -> dict[_Key, cp_model.IntVar]:
        """q, r or v of the docstring: per value of `group`, the OR of the stage's x[i,k]."""
        used = self.used[stage]
        out: dict[_Key, cp_model.IntVar] = {}
        for value in sorted({group(k) for k in used}):
            members: list[cp_model.IntVar] = [x for k, x in used.items() if group(k) == value]
            out[value] = self.cp.new_bool_var("")
            for x in members:
                self.cp.add_implication(x, out[value])
            self.cp.add_bool_or([~out[value], *members])
        return out

    def _replicas(self) -> None:
        dp = self.shape.pipelines
        for counts, used in zip(self.counts, self.used, strict=True):
            self.cp.add(sum(counts.values()) == dp)
            for k, n in counts.items():
                self.cp.add(n >= used[k])
                self.cp.add(n <= dp * used[k])
        if not self.model.mixed_tp_allowed:
            for tps in self.tp_used:
                self.cp.add_exactly_one(tps.values())

    def _iteration_time(self) -> cp_model.IntVar:
        terms, cp, steps, used = self.terms, self.cp, self.time_steps, self.used
        stages = self.shape.stages
        t, u, w = [], [], []
        for i in range(stages):
            t.append(self.time_var())
            u.append(self.time_var())
            w.append(self.time_var())
            for k, x in used[i].items():
                cp.add(t[i] >= steps(terms.compute[i][k]) * x)
                cp.add(u[i] >= steps(terms.update[i][k]) * x)
            for (a, b), seconds in terms.ring[i].items():
                cp.add(w[i] >= steps(seconds) * (used[i][a] + used[i][b] - 1))
        sends = []
        for i, pairs in enumerate(terms.send):
            s = self.time_var()
            here, there = self.pool_used[i], self.pool_used[i + 1]
            for (a, b), seconds in pairs.items():
                cp.add(s >= steps(seconds) * (here[a] + there[b] - 1))
            sends.append(s)
        tie = self.time_var()
        for (a, b), seconds in terms.tied.items():
            cp.add(tie >= steps(seconds) * (used[0][a] + used[-1][b] - 1))
        straggler, sync, total = self.time_var(), self.time_var(), self.time_var()
        padded: list[_Expr] = [0, *sends, 0]
        for i in range(stages):
            cp.add(straggler >= t[i] + padded[i] + padded[i + 1])
            cp.add(sync >= w[i] + u[i] + (tie if i in (0, stages - 1) else 0))
        fill = sum(t) + 2 * sum(sends)
        cp.add(total == fill + (self.microbatches - 1) * straggler + sync)
        return total

    def _node_max(self, pool: int) -> int:
        """N_p^max: the least of the quota, the nodes that every stage's D replicas at the
        pool's largest fitting TP take, and what max_gpus allows."""
        model, dp = self.model, self.shape.pipelines
        per_node = model.pools[pool].pool.gpus_per_node
        devices = sum(
            max((dp * model.kinds[k].tp for k in fit if model.kinds[k].pool == pool), default=0)
            for fit in self.fits
        )
        most = min(model.pools[pool].pool.max_nodes, -(-devices // per_node))
        limit = model.spec.constraints.max_gpus
        return most if limit is None else min(most, limit // per_node)

    def _nodes(self) -> dict[int, cp_model.IntVar]:
        kinds, pools = self.model.kinds, self.model.pools
        nodes = {p: self.cp.new_int_var(0, most, "") for p, most in self.node_max.items()}
        devices: dict[int, list[_Expr]] = {p: [] for p in nodes}
        for counts in self.counts:
            for k, n in counts.items():
                devices[kinds[k].pool].append(kinds[k].tp * n)
        for p, parts in devices.items():
            self.cp.add(pools[p].pool.gpus_per_node * nodes[p] >= sum(parts))
        limit = self.model.spec.constraints.max_gpus
        if limit is not None:
            self.cp.add(sum(pools[p].pool.gpus_per_node * n for p, n in nodes.items()) <= limit)
        return nodes

    def _money(self) -> None:
        """cost = rent + egress in money steps; left at 0 when every price is 0."""
        pools = self.model.pools
        rates = {p: pools[p].pool.gpus_per_node * pools[p].pool.price for p in self.nodes}
        usd_hi = self.seconds_hi * sum(rates[p] * self.node_max[p] for p in rates)
        usd_hi += _egress_bound(self.terms)
        if usd_hi <= 0:
            return
        self.per_usd = MONEY_STEPS / usd_hi
        rent: list[_Expr] = []
        for p, nodes in self.nodes.items():
            per_node = math.ceil(rates[p] * self.per_usd / self.per_second)
            if per_node == 0:
                continue
            at_least = [self.cp.new_bool_var("") for _ in range(self.node_max[p])]
            self.cp.add(nodes == sum(at_least))
            for more, fewer in zip(at_least[1:], at_least[:-1], strict=True):
                self.cp.add_implication(more, fewer)
            for literal in at_least:
                share = self.time_var()
                self.cp.add(share >= self.iteration).only_enforce_if(literal)
                rent.append(per_node * share)
            self.cost_hi += per_node * self.time_hi * self.node_max[p]
        self.cost = sum(rent) + self._egress()

    def _egress_var(self, most: int) -> cp_model.IntVar:
        self.cost_hi += most
        return self.cp.new_int_var(0, most, "")

    def _egress(self) -> _Expr:
        terms, cp, steps = self.terms, self.cp, self.money_steps
        zone_used, used = self.zone_used, self.used
        parts: list[_Expr] = []
        for i, prices in enumerate(terms.boundary_egress):
            g = self._egress_var(steps(_worst(prices)))
            for (za, zb), usd in prices.items():
                cp.add(g >= steps(usd) * (zone_used[i][za] + zone_used[i + 1][zb] - 1))
            parts.append(g)
        for i, crossings in enumerate(terms.ring_egress):
            zones = sum(zone_used[i].values())
            h = self._egress_var(steps(_worst(crossings)) * len(zone_used[i]))
            tps = self.tp_used[i]
            for (za, zb, lo, hi), usd in crossings.items():
                outside = [~v for tp, v in tps.items() if not lo <= tp <= hi]
                cp.add(h >= steps(usd) * zones).only_enforce_if(
                    [zone_used[i][za], zone_used[i][zb], tps[lo], tps[hi], *outside]
                )
            parts.append(h)
        e = self._egress_var(steps(_worst(terms.tied_egress)))
        for (a, b), usd in terms.tied_egress.items():
            cp.add(e >= steps(usd) * (used[0][a] + used[-1][b] - 1))
        parts.append(e)
        return sum(parts)

    def _at_most(self, expr: _Expr, hi: int, limit: float) -> None:
        """expr <= floor(limit) in steps, left out when expr can never exceed it anyway."""
        if limit < hi:
            self.cp.add(expr <= math.floor(limit))

    def set_goal(self, upper_bound: float | None) -> None:
        """The objective, the throughput floor, the budget and the caller's cutoff."""
        constraints = self.model.spec.constraints
        if constraints.min_throughput is not None:
            self._at_most(
                self.iteration, self.time_hi, self.per_second / constraints.min_throughput
            )
        budget = constraints.max_cost_per_iteration
        if budget is not None and self.per_usd > 0:
            self._at_most(self.cost, self.cost_hi, budget * self.per_usd)
        goal: _Expr
        if self.model.spec.objective == "max_throughput":
            goal, hi, scale = self.iteration, self.time_hi, self.per_second
        elif self.per_usd > 0:
            goal, hi, scale = self.cost, self.cost_hi, self.per_usd
        else:
            return
        self.cp.minimize(goal)
        if upper_bound is not None:
            self._at_most(goal, hi, upper_bound * scale)


def _fitting(model: PlanningModel, shape: Shape) -> list[list[int]]:
    """K_i: the kinds each stage's layers fit on in memory."""
    return [
        [k.index for k in model.kinds if model.kind_fits(shape, i, k.index)]
        for i in range(shape.stages)
    ]


def solve_shape(
    model: PlanningModel,
    shape: Shape,
    *,
    time_limit: float | None = None,
    upper_bound: float | None = None,
) -> CpSatSolution | None:
    """CP-SAT's best counts for `shape`, re-scored by the float model.

    None when nothing is feasible (or nothing at most `upper_bound`, up to the rounding of the
    module docstring), when `time_limit` stops CP-SAT before it finds any counts, or when the
    float model rejects the counts it found. Without presolve and LP, shapes of a few stages
    and a dozen kinds take milliseconds to seconds; the examples' P = 8, D = 16 shapes are not
    proved optimal within a minute."""
    fits = _fitting(model, shape)
    if not all(fits):
        return None
    formulation = _Formulation(model, shape, fits)
    formulation.set_goal(upper_bound)
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    solver.parameters.random_seed = 0
    solver.parameters.cp_model_presolve = False
    solver.parameters.linearization_level = 0
    if time_limit is not None:
        solver.parameters.max_time_in_seconds = time_limit
    status = solver.solve(formulation.cp)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None
    assignment = tuple(
        tuple((k, c) for k, n in sorted(counts.items()) if (c := int(solver.value(n))) > 0)
        for counts in formulation.counts
    )
    estimate = model.estimate(shape, assignment)
    if not estimate.feasible:
        return None
    return CpSatSolution(shape, assignment, estimate, solver.status_name(status), solver.wall_time)


# -- every shape -------------------------------------------------------------------------


def _lower_bound(model: PlanningModel, shape: Shape) -> float | None:
    """A lower bound on the shape's objective, or None when no counts can be feasible.

    Whatever kinds stage i uses, t_i >= the fastest fitting kind's c[i,k] (call it c_i), so
    F >= sum_i c_i and S >= max_i c_i; w_i + u_i >= y_i(k,k) + o[i,k] for any used k, so
    X >= max_i min_k (y_i(k,k) + o[i,k]). Every replica rents at least its tp(k) devices at
    its pool's price, so rate >= sum_i D min_k tp(k) pi_p(k), and egress >= 0.
    """
    fits = _fitting(model, shape)
    if not all(fits):
        return None
    dp, mbs = shape.pipelines, shape.microbatch
    fastest, sync, rate = [], [], 0.0
    for i, fit in enumerate(fits):
        first, end = model.layer_range(shape, i)
        key = model.stage_key(shape, i)
        times = {k: model.stage_time(k, mbs, first, end) for k in fit}
        fastest.append(min(times[k][0] for k in fit))
        sync.append(
            min(
                model.update_time(k, mbs, first, end, dp)
                + (model.ring(k, k, key, dp) if dp > 1 else 0.0)
                for k in fit
            )
        )
        rate += dp * min(
            model.kinds[k].tp * model.pools[model.kinds[k].pool].pool.price for k in fit
        )
    seconds = sum(fastest) + (model.microbatches(shape) - 1) * max(fastest) + max(sync)
    constraints = model.spec.constraints
    floor, budget = constraints.min_throughput, constraints.max_cost_per_iteration
    if (floor is not None and seconds * floor > 1) or (
        budget is not None and seconds * rate > budget
    ):
        return None
    return seconds if model.spec.objective == "max_throughput" else seconds * rate


def _shapes(model: PlanningModel) -> Iterator[Shape]:
    """Every microbatch size, P, D with D P min_tp within the devices there are, and split
    of the blocks into P contiguous non-empty stages."""
    capacity = sum(slot.pool.max_nodes * slot.pool.gpus_per_node for slot in model.pools)
    limit = model.spec.constraints.max_gpus
    devices = capacity if limit is None else min(capacity, limit)
    min_tp = min((k.tp for k in model.kinds), default=1)
    for mbs in model.microbatch_sizes():
        for stages in range(1, model.blocks + 1):
            for dp in range(1, model.batch // mbs + 1):
                if dp * stages * min_tp > devices:
                    break
                for cuts in combinations(range(1, model.blocks), stages - 1):
                    yield Shape(microbatch=mbs, boundaries=(0, *cuts, model.blocks), pipelines=dp)


def solve_all_shapes(
    model: PlanningModel, *, time_limit_per_shape: float | None = None
) -> CpSatSolution | None:
    """The best `solve_shape` over every shape, by objective value; None if none is feasible.

    Exhaustive over shapes, so meant for small specs: shapes are solved in order of
    `_lower_bound`, and the rest skipped once that bound reaches the best value found."""
    bounded = []
    for shape in _shapes(model):
        bound = _lower_bound(model, shape)
        if bound is not None:
            bounded.append((bound, shape))
    bounded.sort(
        key=lambda e: (e[0], e[1].microbatch, e[1].stages, e[1].pipelines, e[1].boundaries)
    )
    best: CpSatSolution | None = None
    best_value = math.inf
    for bound, shape in bounded:
        if bound >= best_value:
            break
        found = solve_shape(
            model,
            shape,
            time_limit=time_limit_per_shape,
            upper_bound=None if best is None else best_value,
        )
        if found is not None and objective_value(model, found.estimate) < best_value:
            best, best_value = found, objective_value(model, found.estimate)
    return best
