"""The availability file: how many devices each pool of the spec can give now.

The spec's quotas say the most a job may rent; what a cloud or a cluster gives changes by the
hour (spot preemptions, returned reservations, nodes drained for repair). `hetc run
--availability FILE` watches one small YAML file that a user, a cron job or a cloud watcher
rewrites, naming pools the way the compiled nodes are named (`<pool>@<zone>`, the pool's
`name` or by default its device in lower case):

    pools:
      local-cpu@localhost: 2    # devices this pool can give now (0: none)

A pool the file does not name keeps the spec's quota. A quota above the spec's is refused, not
clamped: the spec's quota is the most the user agreed to rent (and pay for), so raising it
is an edit of the spec. Every problem is reported at its line and column and nothing is
applied from a file with a problem.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from hetc.schema.diagnostics import Diagnostic, did_you_mean, dotted
from hetc.schema.source import SyntaxProblem, parse, read_text
from hetc.schema.spec import Spec

TOP_KEY = "pools"


def pool_label(pool_name: str, zone_name: str) -> str:
    """A pool's name in availability files and node ids: `<pool>@<zone>`."""
    return f"{pool_name}@{zone_name}"


def spec_quotas(spec: Spec) -> dict[str, int]:
    """Every pool's quota in the spec, by label, in the spec's order."""
    return {pool_label(p.name, z.name): p.quota for z in spec.zones for p in z.pools}


def node_pool(node_id: str) -> str:
    """The pool label of a compiled node id (`<pool>@<zone>/n<k>`)."""
    return node_id.rsplit("/", 1)[0]


class AvailabilityError(Exception):
    """An availability file that cannot be used: one positioned diagnostic per problem."""

    def __init__(self, diagnostics: list[Diagnostic]) -> None:
        super().__init__("; ".join(d.format() for d in diagnostics))
        self.diagnostics = diagnostics


@dataclass(frozen=True, kw_only=True, slots=True)
class Availability:
    quotas: dict[str, int]
    """Devices by pool label, for the pools the file names."""


def parse_availability(text: str, spec: Spec, *, file: str) -> Availability:
    """The quotas of an availability file's text; raises AvailabilityError."""
    try:
        data, where = parse(text)
    except SyntaxProblem as exc:
        raise AvailabilityError(
            [Diagnostic(file, p.line, p.column, dotted(p.path), p.message) for p in exc.problems]
        ) from None
    problems: list[Diagnostic] = []

    def problem(path: tuple[str, ...], message: str, at_key: bool = False) -> None:
        line, column = where.locate(path, at_key=at_key)
        problems.append(Diagnostic(file, line, column, ".".join(path) or "(root)", message))

    if not isinstance(data, dict):
        problem((), f"an availability file is a mapping with one key, `{TOP_KEY}:`")
        raise AvailabilityError(problems)
    for key in data:
        if key != TOP_KEY:
            problem((key,), f"unknown key {key!r}; the only key is `{TOP_KEY}`", at_key=True)
    pools = data.get(TOP_KEY, {})
    if pools is None:
        pools = {}
    if not isinstance(pools, dict):
        problem((TOP_KEY,), "must map `<pool>@<zone>` labels to device counts")
        raise AvailabilityError(problems)
    limits = spec_quotas(spec)
    quotas: dict[str, int] = {}
    for label, value in pools.items():
        path = (TOP_KEY, str(label))
        if label not in limits:
            problem(
                path,
                f"unknown pool {label!r}{did_you_mean(str(label), list(limits))}; the spec's"
                f" pools are {', '.join(limits)}",
                at_key=True,
            )
        elif isinstance(value, bool) or not isinstance(value, int):
            problem(path, f"{value!r} is not a whole number of devices")
        elif value < 0:
            problem(path, f"{value} devices: a quota cannot be negative (0 means none now)")
        elif value > limits[label]:
            problem(
                path,
                f"{value} devices is more than the spec's quota {limits[label]} for this pool;"
                " the spec's quota is the most the job may rent: raise it in the spec",
            )
        else:
            quotas[str(label)] = value
    if problems:
        raise AvailabilityError(problems)
    return Availability(quotas=quotas)


def read_availability(path: str, spec: Spec) -> Availability:
    """Read and check an availability file; raises AvailabilityError for its content and
    EnvironmentProblem when it cannot be read."""
    try:
        text = read_text(path)
    except SyntaxProblem as exc:
        raise AvailabilityError(
            [Diagnostic(path, exc.line, exc.column, "(root)", exc.message)]
        ) from None
    return parse_availability(text, spec, file=path)


def with_quotas(spec: Spec, quotas: Mapping[str, int]) -> Spec:
    """`spec` with the quotas of the pools `quotas` names replaced (a planning input only:
    the plan's spec hash stays the original spec's, so every generation checks against it)."""
    zones = tuple(
        replace(
            zone,
            pools=tuple(
                replace(pool, quota=quotas.get(pool_label(pool.name, zone.name), pool.quota))
                for pool in zone.pools
            ),
        )
        for zone in spec.zones
    )
    return replace(spec, zones=zones)
