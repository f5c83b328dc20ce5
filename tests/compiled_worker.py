"""Plans a list of specs and prints what tests/test_compiled.py compares: run once on the
source and once on the mypyc build (setup.py), each in its own process, with the same code.

Usage: python compiled_worker.py JOBS.json  -- JOBS is a list of {"path": spec file,
"exact": bool, "profiles": bool}: plan_spec's top 3 with the default approximations, or
with "exact" every approximation off; with "profiles", on Sailor's measured profiles as
bench/planner.py reads them. Prints one JSON object: "modules" (each compiled module's
file, so the test can tell which build ran) and "values" (per job, the top candidates'
objectives as repr strings, and the first's shape), so a difference in the last bit shows.
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from types import ModuleType

from hetc.schema import check_file
from hetc.solver.planner import plan_spec

COMPILED = (
    "hetc.solver.search.incumbent",
    "hetc.solver.search.bounds",
    "hetc.solver.search.counts",
    "hetc.solver.search.exact",
    "hetc.solver.search.options",
    "hetc.solver.search.zones",
    "hetc.solver.search.pairs",
    "hetc.solver.search.splits",
    "hetc.solver.search.reach",
    "hetc.solver.search.profiles",
    "hetc.solver.search.stripes",
    "hetc.solver.search.driver",
    "hetc.solver.cover",
    "hetc.costmodel.planning",
    "hetc.costmodel.tables",
    "hetc.costmodel.network",
    "hetc.costmodel.compute",
    "hetc.costmodel.memory",
)


def _planned(path: str, exact: bool, profiles: bool) -> dict[str, object]:
    checked = check_file(path)
    assert checked.spec is not None, checked.diagnostics
    spec, measured = _bench().measured(checked.spec) if profiles else (checked.spec, [])
    result = plan_spec(
        spec,
        profiles=measured,
        top=3,
        approximations=frozenset() if exact else None,
    )
    proposals = result.proposals
    return {
        "values": [repr(p.candidate.value) for p in proposals],
        "shape": repr(proposals[0].candidate.shape) if proposals else None,
    }


def _bench() -> ModuleType:
    """bench/planner.py, for its `measured` (the scenario as its profiles timed it)."""
    bench = str(Path(__file__).resolve().parent.parent / "bench")
    if bench not in sys.path:
        sys.path.insert(0, bench)
    return importlib.import_module("planner")


def main() -> None:
    with open(sys.argv[1], encoding="utf-8") as handle:
        jobs = json.load(handle)
    modules = {name: str(importlib.import_module(name).__file__) for name in COMPILED}
    values = [_planned(job["path"], job["exact"], job["profiles"]) for job in jobs]
    print(json.dumps({"modules": modules, "values": values}))


if __name__ == "__main__":
    main()
