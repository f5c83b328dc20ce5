"""Topology files: their schemas accept what the emitter writes and name every violation."""

from __future__ import annotations

import json
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft7Validator
from runtime_harness import HASH, node, one_stage_plan, replica, small_plan, write_output

from hetc.draft07 import SUPPORTED
from hetc.plan import (
    Pipeline,
    Plan,
    RankFileError,
    Stage,
    read_cluster_file,
    read_rank_file,
)
from hetc.plan.topology import Topology

SCHEMAS = ["cluster.schema.json", "rank.schema.json"]


def _schema(name: str) -> dict[str, Any]:
    loaded = json.loads(resources.files("hetc.plan").joinpath(name).read_text(encoding="utf-8"))
    assert isinstance(loaded, dict)
    return loaded


def _worked_example() -> Plan:
    """The plan of hetc/plan/topology.py's docstring: mixed TP degrees, uneven shares."""
    a0, v0, a1 = "a100@z/n0", "v100@z/n0", "a100@z/n1"
    return Plan(
        spec_hash=HASH,
        hetc_version="0.1.0",
        model_blocks=24,
        global_batch_size=64,
        microbatch_size=2,
        nodes=(node(a0, 4), node(v0, 4), node(a1, 4)),
        stages=(
            Stage(first_block=0, end_block=10, replicas=(replica(v0, 0, 1), replica(v0, 2, 3))),
            Stage(
                first_block=10, end_block=24, replicas=(replica(a0, 0, 1, 2, 3), replica(a1, 0, 1))
            ),
        ),
        pipelines=(
            Pipeline(replicas=(0, 0), microbatches=18),
            Pipeline(replicas=(1, 1), microbatches=14),
        ),
    )


def _keywords(node: object) -> set[str]:
    if isinstance(node, dict):
        found = set(node)
        for key, child in node.items():
            if key in ("properties", "definitions"):
                for sub in child.values():
                    found |= _keywords(sub)
            elif key not in ("const", "enum"):
                found |= _keywords(child)
        return found
    if isinstance(node, list):
        return set().union(*map(_keywords, node)) if node else set()
    return set()


@pytest.mark.parametrize("name", SCHEMAS)
def test_schemas_are_draft_07_in_the_supported_subset(name: str) -> None:
    """Both schemas are valid draft-07 and use only keywords hetc's validator implements."""
    Draft7Validator.check_schema(_schema(name))
    assert _keywords(_schema(name)) <= SUPPORTED


def _rank_files(out: Path) -> list[Path]:
    return sorted((out / "topology" / "ranks").glob("*.json"))


@pytest.mark.parametrize(
    ("plan", "tied"),
    [
        (_worked_example(), True),
        (small_plan(), True),
        (small_plan(), False),
        (one_stage_plan(), True),
    ],
)
def test_emitted_records_validate_and_read_back(tmp_path: Path, plan: Plan, tied: bool) -> None:
    """Every cluster and rank record of several plans passes both validators, unchanged."""
    topology: Topology = write_output(plan, tmp_path, tied_embeddings=tied)
    cluster_path = tmp_path / "topology" / "cluster.json"
    cluster = read_cluster_file(cluster_path)
    assert cluster == json.loads(cluster_path.read_text())
    assert not list(Draft7Validator(_schema("cluster.schema.json")).iter_errors(cluster))
    assert len(_rank_files(tmp_path)) == topology.world_size
    for path in _rank_files(tmp_path):
        record = read_rank_file(path)
        assert not list(Draft7Validator(_schema("rank.schema.json")).iter_errors(record))


Mutation = Callable[[dict[str, Any]], object]
CLUSTER_MUTATIONS: list[tuple[str, Mutation, str]] = [
    ("missing", lambda c: c.pop("world_size"), "(root): missing key 'world_size'"),
    ("extra", lambda c: c.update(extra=1), "(root): unexpected key 'extra'"),
    ("hash", lambda c: c.update(plan_hash="ABC"), 'plan_hash: "ABC" violates `pattern'),
    (
        "nested missing",
        lambda c: c["nodes"][1]["processes"][0].pop("rank_file"),
        "nodes/1/processes/0: missing key 'rank_file'",
    ),
    (
        "rank file outside ranks/",
        lambda c: c["nodes"][0]["processes"][0].update(rank_file="../../etc/passwd"),
        "nodes/0/processes/0/rank_file:",
    ),
    ("group name", lambda c: c["groups"][0].update(name="pp/0"), "groups/0/name:"),
    ("version", lambda c: c.update(version=1), "version: 1 violates `const: 2`"),
]
RANK_MUTATIONS: list[tuple[str, Mutation, str]] = [
    ("missing", lambda r: r.pop("groups"), "(root): missing key 'groups'"),
    ("extra", lambda r: r["tp"].update(extra=True), "tp: unexpected key 'extra'"),
    ("hash", lambda r: r.update(plan_hash="0" * 63), "plan_hash:"),
    ("negative rank", lambda r: r.update(rank=-1), "rank: -1 violates `minimum: 0`"),
    ("schedule", lambda r: r["schedule"].update(rule="gpipe"), "schedule/rule:"),
    ("schedule list", lambda r: r.update(schedule=["F0", "B0"]), 'schedule: ["F0", "B0"]'),
    ("transfer", lambda r: r["next_stage"][0].pop("peer"), "next_stage/0: missing key 'peer'"),
]


def _mutated(path: Path, mutate: Mutation) -> None:
    data = json.loads(path.read_text())
    mutate(data)
    path.write_text(json.dumps(data))


@pytest.mark.parametrize(
    ("case", "mutate", "message"), CLUSTER_MUTATIONS, ids=[m[0] for m in CLUSTER_MUTATIONS]
)
def test_mutated_cluster_file_is_refused(
    tmp_path: Path, case: str, mutate: Mutation, message: str
) -> None:
    """A changed cluster.json is refused; the message names the file and the place in it."""
    write_output(small_plan(), tmp_path)
    path = tmp_path / "topology" / "cluster.json"
    _mutated(path, mutate)
    with pytest.raises(RankFileError) as caught:
        read_cluster_file(path)
    assert any(p.startswith(f"{path}: {message}") for p in caught.value.problems), case
    assert all(p.startswith(f"{path}: ") for p in caught.value.problems)
    data = json.loads(path.read_text())
    assert list(Draft7Validator(_schema("cluster.schema.json")).iter_errors(data))


@pytest.mark.parametrize(
    ("case", "mutate", "message"), RANK_MUTATIONS, ids=[m[0] for m in RANK_MUTATIONS]
)
def test_mutated_rank_file_is_refused(
    tmp_path: Path, case: str, mutate: Mutation, message: str
) -> None:
    """A changed rank file is refused; the message names the file and the place in it."""
    write_output(small_plan(), tmp_path)
    path = _rank_files(tmp_path)[0]
    _mutated(path, mutate)
    with pytest.raises(RankFileError) as caught:
        read_rank_file(path)
    assert any(p.startswith(f"{path}: {message}") for p in caught.value.problems), case
    data = json.loads(path.read_text())
    assert list(Draft7Validator(_schema("rank.schema.json")).iter_errors(data))


def test_every_violation_is_reported(tmp_path: Path) -> None:
    """Several violations give one problem each, not just the first."""
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps({"version": 1, "extra": 1, "plan_hash": "x"}))
    with pytest.raises(RankFileError) as caught:
        read_cluster_file(path)
    problems = caught.value.problems
    assert any("unexpected key 'extra'" in p for p in problems)
    assert any("plan_hash:" in p for p in problems)
    assert sum("missing key" in p for p in problems) == 5  # hetc_version ... groups
    assert str(caught.value) == "; ".join(problems)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "cannot read"),
        (b"{", "not JSON"),
        (b"\xff{}", "not UTF-8"),
        (b"[]", "(root): [] violates `type"),
    ],
)
def test_unreadable_files_are_one_problem(
    tmp_path: Path, content: bytes | None, message: str
) -> None:
    """A missing, truncated or binary file is one problem naming the file, not a crash."""
    path = tmp_path / "node0000-local00.json"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(RankFileError) as caught:
        read_rank_file(path)
    assert caught.value.problems[0].startswith(f"{path}: {message}")
