"""Builds hetc. With HETC_COMPILE=1, also compiles the planner's search and the planning
model under it to C with mypyc (`scripts/install-compiled.sh`).

Why: the search is pure Python, and on Sailor's scenarios its time is spent running Python
opcodes (bounds, memory lookups and table reads, tens of thousands of each); mypyc turns
the same typed source into a C extension per module, 2-3x faster there (docs/planner.md,
Speed). The source stays the one definition: a build without HETC_COMPILE (the editable
install the tests use) runs the .py files, and tests/test_compiled.py builds this one and
checks it plans every bench scenario and a set of random specs to the same objective, to
the last bit.

mypyc checks the annotated types at run time, which plain Python does not: a value whose
type differs from what mypy inferred (an int where a float was declared, an attribute mypy
has narrowed to None) raises TypeError in the compiled build, so the compiled modules keep
their float sums started at 0.0 and the like. mypyc inlines `min` and `max` of two
arguments as one comparison, but calls the builtin for three or more (or a generator), so
the search's hot paths nest two-argument calls.
"""

import os

from setuptools import setup

COMPILED = [
    "hetc/solver/search/incumbent.py",
    "hetc/solver/search/bounds.py",
    "hetc/solver/search/mix_cost.py",
    "hetc/solver/search/ring_frontier.py",
    "hetc/solver/search/replica_slots.py",
    "hetc/solver/search/stage_shares.py",
    "hetc/solver/search/windows.py",
    "hetc/solver/search/counts.py",
    "hetc/solver/search/exact.py",
    "hetc/solver/search/options.py",
    "hetc/solver/search/zones.py",
    "hetc/solver/search/pairs.py",
    "hetc/solver/search/splits.py",
    "hetc/solver/search/reach.py",
    "hetc/solver/search/profiles.py",
    "hetc/solver/search/stripes.py",
    "hetc/solver/search/shape_solver.py",
    "hetc/solver/search/driver.py",
    "hetc/solver/cover.py",
    "hetc/costmodel/planning.py",
    "hetc/costmodel/tables.py",
    "hetc/costmodel/network.py",
    "hetc/costmodel/compute.py",
    "hetc/costmodel/memory.py",
    "hetc/costmodel/optimizer_layout.py",
]
"""The modules compiled together (one C extension group, so calls among them are native):
the search and the planning model it calls per shape, down to the stage tables and the
memory check. Not the parsers of user input (schema, plan codec, profiles): a mistyped
value there must get its clear error, not the compiled build's TypeError."""

ext_modules = []
if os.environ.get("HETC_COMPILE") == "1":
    try:
        from mypyc.build import mypycify
    except ImportError:
        raise SystemExit(
            "HETC_COMPILE=1 compiles hetc with mypyc, which comes with mypy, and this build"
            " environment has none: run `pip install mypy==2.4.1 setuptools wheel`, then"
            " `HETC_COMPILE=1 pip install --no-build-isolation .` (scripts/install-compiled.sh"
            " does both)"
        ) from None
    ext_modules = mypycify(COMPILED, opt_level="3", group_name="hetc_compiled")

setup(ext_modules=ext_modules)
