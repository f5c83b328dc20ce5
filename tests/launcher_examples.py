"""The examples' plans as stored in tests/data/launchers (searched once, so that these tests do
not move when the search does), and the launch files hetc writes for them."""

from __future__ import annotations

import shutil
import subprocess
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from hetc.emit.launch import LaunchContext, launch_context
from hetc.emit.launchers import launch_files
from hetc.plan import plan_from_json
from hetc.plan.topology import topology_of
from hetc.schema import check_file, check_text
from hetc.schema.spec import Spec

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "launchers"
EXAMPLES = sorted(p.stem for p in (ROOT / "examples").glob("*.yaml"))


def example_spec(stem: str, edit: tuple[str, str] | None = None) -> Spec:
    """The example's spec, with one text replacement `edit` (old, new) applied if given."""
    path = ROOT / "examples" / f"{stem}.yaml"
    if edit is None:
        checked = check_file(str(path))
    else:
        text = path.read_text(encoding="utf-8")
        assert edit[0] in text
        checked = check_text(text.replace(*edit), str(path), str(path.parent))
    assert checked.spec is not None, [d.format() for d in checked.diagnostics]
    return checked.spec


def example_files(
    stem: str, launchers: Sequence[str] | None = None, spec: Spec | None = None
) -> dict[str, str]:
    """The launch files of the example's stored plan."""
    spec = spec or example_spec(stem)
    plan = plan_from_json((DATA / f"{stem}.plan.json").read_text(encoding="utf-8"))
    topology = topology_of(plan, tied_embeddings=spec.model.tied_embeddings)
    return launch_files(spec, plan, topology, launchers)


def example_context(stem: str, spec: Spec | None = None) -> LaunchContext:
    spec = spec or example_spec(stem)
    plan = plan_from_json((DATA / f"{stem}.plan.json").read_text(encoding="utf-8"))
    return launch_context(spec, plan, topology_of(plan, tied_embeddings=spec.model.tied_embeddings))


def nodes_per_pool(stem: str) -> Counter[tuple[str, str]]:
    """(zone, pool) -> nodes of the stored plan that start processes, counted from the plan's
    nodes and the rank count of each (independently of hetc.emit)."""
    spec = example_spec(stem)
    plan = plan_from_json((DATA / f"{stem}.plan.json").read_text(encoding="utf-8"))
    topology = topology_of(plan, tied_embeddings=spec.model.tied_embeddings)
    busy = {p.node for p in topology.processes}
    return Counter((n.zone, n.pool) for n in plan.nodes if n.id in busy)


def shellcheck_problems(script: str, directory: Path) -> str:
    """shellcheck's findings on a bash snippet (empty when clean); fails without shellcheck
    (scripts/test.sh installs Debian's package)."""
    if shutil.which("shellcheck") is None:
        raise AssertionError("shellcheck is not installed: scripts/test.sh installs it")
    path = directory / "snippet.sh"
    path.write_text("#!/usr/bin/env bash\n" + script, encoding="utf-8")
    done = subprocess.run(["shellcheck", str(path)], capture_output=True, text=True)
    return done.stdout
