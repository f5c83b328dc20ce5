"""`hetc profile measure` as a whole with the measuring itself replaced by fakes (the real
measuring is pinned by tests/test_profiler.py): which points it measures by default, what it
keeps from the output file, the time budget, out-of-memory points, the progress display, the
refusals of a foreign or broken output file, and the parent's side of a layers group.

The fakes count every point they are asked to measure, so "measures only what is missing" is
checked by counting, against sets enumerated here from the spec."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from hetc.cli import app
from hetc.costmodel.profile import BandwidthFit, LayerProfile, read_profile, write_profile
from hetc.profiler import command, steps
from hetc.profiler.layers import LayerTask, RankMeasurement
from hetc.profiler.progress import Progress
from hetc.profiler.worker import Group, GroupFailed, follow
from hetc.schema import check_file

runner = CliRunner()
FIT = BandwidthFit(coefficients=(0.0, 0.0, 1.0), peak=1e9, residual=0.0, points=((1.0, 1e9),))


def _spec(
    folder: Path, *, batch: int = 8, node: int = 2, heads: int = 4, precision: str = "fp32"
) -> Path:
    path = folder / f"spec-{batch}-{node}-{heads}-{precision}.yaml"
    path.write_text(
        f"""version: 1
name: points
model:
  architecture: {{layers: 2, hidden: 64, heads: {heads}, ffn: 256, vocab: 512,
                 max_positions: 64}}
training: {{global_batch_size: {batch}, seq_len: 32, precision: {precision}}}
devices:
  - {{name: LOCAL-CPU, kind: cpu, memory: 4GiB, peak_tflops: {{fp32: 0.05, bf16: 0.05}},
     memory_bandwidth: 10GB/s, intra_node: {{kind: shared-memory, bandwidth: 5GB/s}},
     price: 0 USD/h}}
zones:
  - name: z
    pools: [{{device: LOCAL-CPU, quota: 8, gpus_per_node: {node}}}]
"""
    )
    return path


def _planner_set(batch: int, node: int, heads: int) -> list[tuple[int, int]]:
    """(microbatch, TP) the planner considers, enumerated from its rules: divisors of the
    batch up to 16; powers of two dividing the node size, the heads (= KV heads) and FFN."""
    sizes = [m for m in range(1, 17) if batch % m == 0]
    degrees = [t for t in (1, 2, 4, 8, 16) if node % t == 0 and heads % t == 0 and 256 % t == 0]
    return sorted((m, t) for m in sizes for t in degrees)


def _fake(micro: int) -> RankMeasurement:
    return RankMeasurement(
        times={micro: [(1e-3 * micro, 2e-3 * micro, 1e-4)] * 3},
        weight_bytes=[10, 20, 30],
        activation_bytes={micro: [micro, 2 * micro, 3 * micro]},
        peak_bytes={micro: 100 * micro},
    )


class Fakes:
    """Stand-ins for the measuring steps, counting what they were asked to measure."""

    def __init__(self, out_of_memory: set[tuple[int, int]] | None = None) -> None:
        self.points: list[tuple[int, int]] = []
        """(tp, microbatch) in the order measured."""
        self.network: list[str] = []
        self.flows: list[Sequence[int]] = []
        self.out_of_memory = out_of_memory or set()
        self.tick: Callable[[], None] = lambda: None

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(steps, "measure_points", self.measure_points)
        monkeypatch.setattr(steps, "run_layer_group", self.run_layer_group)
        monkeypatch.setattr(command, "measure_intra_node", self.intra_node)
        monkeypatch.setattr(command, "measure_loopback", self.loopback)

    def _points(self, task: LayerTask, tp: int) -> Iterator[tuple[int, RankMeasurement | None]]:
        for micro in task.microbatches:
            self.points.append((tp, micro))
            self.tick()
            if (tp, micro) in self.out_of_memory:
                yield micro, None
                return
            yield micro, _fake(micro)

    def measure_points(
        self, task: LayerTask, group: object, tp: int, rank: int, device: object
    ) -> Iterator[tuple[int, RankMeasurement | None]]:
        return self._points(task, tp)

    def run_layer_group(
        self,
        task: LayerTask,
        size: int,
        *,
        threads: object,
        deadline_s: float,
        on_point: Callable[[int, RankMeasurement | None], bool],
    ) -> None:
        for micro, result in self._points(task, size):
            if not on_point(micro, result) or result is None:
                return

    def intra_node(self, *args: Any) -> dict[str, Any]:
        self.network.append("intra")
        self.tick()
        args[-1].point("collectives inside a node")
        return {"intra_node": {c: {2: FIT} for c in ("all_reduce", "all_gather", "p2p")}}

    def loopback(self, sizes: object, flows: Sequence[int], *args: Any) -> dict[str, Any]:
        self.network.append("loopback")
        self.flows.append(list(flows))
        self.tick()
        args[-1].point("link between nodes")
        return {"inter_node": {"p2p": dict.fromkeys(flows, FIT)}}


def _measure(spec: Path, output: Path, *options: str) -> Any:
    args = ["profile", "measure", str(spec), "--device", "LOCAL-CPU", "-o", str(output)]
    return runner.invoke(app, [*args, *options])


@pytest.mark.parametrize(("batch", "node", "heads"), [(8, 2, 4), (12, 4, 4), (32, 8, 2), (5, 1, 4)])
def test_by_default_every_point_the_planner_may_choose_is_measured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, batch: int, node: int, heads: int
) -> None:
    """The points measured are the planner's set, each once, whatever the batch, node size
    and heads; the collectives inside a node and the loopback link (each TP degree's flows
    and the node's) once each, where a node has two devices or more."""
    fakes = Fakes()
    fakes.install(monkeypatch)
    output = tmp_path / "p.json"
    result = _measure(_spec(tmp_path, batch=batch, node=node, heads=heads), output)
    assert result.exit_code == 0, result.output
    wanted = _planner_set(batch, node, heads)
    assert sorted((m, t) for t, m in fakes.points) == wanted
    assert len(fakes.points) == len(wanted)
    assert read_profile(output).points() == wanted
    degrees = sorted({t for _, t in wanted} | {node})
    assert fakes.flows == ([degrees] if node > 1 else [[1]])
    assert fakes.network == (["intra", "loopback"] if node > 1 else ["loopback"])


def test_microbatch_and_tp_options_narrow_the_points(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fakes = Fakes()
    fakes.install(monkeypatch)
    result = _measure(_spec(tmp_path), tmp_path / "p.json", "--microbatch", "2,4", "--tp", "2")
    assert result.exit_code == 0, result.output
    assert fakes.points == [(2, 2), (2, 4)]


def _drop(path: Path, points: Sequence[tuple[int, int]]) -> None:
    """Remove (microbatch, tp) points from the profile in `path`, as if never measured."""
    profile = read_profile(path)
    times = {m: dict(by_tp) for m, by_tp in profile.times.items()}
    for micro, tp in points:
        del times[micro][tp]
    write_profile(replace(profile, times={m: t for m, t in times.items() if t}), path)


def test_reuse_measures_only_the_missing_points(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A second run measures nothing; with two points and the node's collectives removed
    from the file, exactly those; `--remeasure` everything again."""
    fakes = Fakes()
    fakes.install(monkeypatch)
    spec, output = _spec(tmp_path), tmp_path / "p.json"
    assert _measure(spec, output).exit_code == 0
    everything = len(fakes.points)
    fakes.points.clear()
    fakes.network.clear()
    again = _measure(spec, output)
    assert again.exit_code == 0 and fakes.points == [] and fakes.network == []
    assert "holds every point asked for: nothing to measure" in again.stderr
    _drop(output, [(4, 2), (1, 1)])
    profile = read_profile(output)
    write_profile(replace(profile, network={"inter_node": profile.network["inter_node"]}), output)
    missing = _measure(spec, output)
    assert missing.exit_code == 0, missing.output
    assert fakes.points == [(1, 1), (2, 4)] and fakes.network == ["intra"]
    assert f"2 points measured, {everything - 2} kept" in missing.stderr
    assert read_profile(output).points() == _planner_set(8, 2, 4)
    fakes.points.clear()
    assert _measure(spec, output, "--remeasure").exit_code == 0
    assert len(fakes.points) == everything


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"environment": {"threads": 64}}, "threads 1 (profiled with 64)"),
        ({"meta": {"activation_checkpointing": True}}, "activation_checkpointing False"),
    ],
)
def test_a_file_measured_otherwise_is_measured_again_with_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: dict[str, Any], named: str
) -> None:
    """Another environment or other training settings: a warning naming the difference, and
    every point measured again."""
    fakes = Fakes()
    fakes.install(monkeypatch)
    spec, output = _spec(tmp_path), tmp_path / "p.json"
    assert _measure(spec, output).exit_code == 0
    everything = len(fakes.points)
    profile = read_profile(output)
    key, values = next(iter(change.items()))
    write_profile(replace(profile, **{key: {**getattr(profile, key), **values}}), output)
    fakes.points.clear()
    result = _measure(spec, output)
    assert result.exit_code == 0, result.output
    assert named in result.stderr and "measuring every point again" in result.stderr
    assert len(fakes.points) == everything


def test_the_budget_stops_after_the_point_in_progress_and_the_same_command_finishes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each fake point takes 10 s of a fake clock; a 25 s budget stops after the third (the
    one in progress when it ran out), writes those three, names what is left and the command;
    that command then measures exactly the rest."""
    fakes = Fakes()
    fakes.install(monkeypatch)
    now = [0.0]

    def tick() -> None:
        now[0] += 10.0

    fakes.tick = tick
    spec, output = _spec(tmp_path), tmp_path / "p.json"
    lines: list[str] = []
    code = command.run_measure_command(
        check_file(str(spec)).spec,  # type: ignore[arg-type]
        spec,
        "LOCAL-CPU",
        output,
        echo=lambda text="", **_: lines.append(text),
        budget=25.0,
        clock=lambda: now[0],
    )
    assert code == 0
    assert fakes.points == [(1, 1), (1, 2), (1, 4)]
    assert read_profile(output).points() == [(1, 1), (2, 1), (4, 1)]
    text = "\n".join(lines)
    assert (
        "not measured: TP 1 at microbatch 8; TP 2 at microbatch 1,2,4,8; the collectives"
        " inside a node; the link between nodes" in text
    )
    rerun = f"hetc profile measure {spec} --device LOCAL-CPU -o {output}"
    assert f"to measure them (the points in the file are kept): {rerun}" in text
    fakes.points.clear()
    assert _measure(spec, output).exit_code == 0
    assert fakes.points == [(1, 8), (2, 1), (2, 2), (2, 4), (2, 8)]
    assert read_profile(output).points() == _planner_set(8, 2, 4)


def test_out_of_memory_is_recorded_for_that_point_and_every_larger_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """TP 1 runs out of memory at microbatch 4: 4 and 8 are recorded out of memory (8 never
    tried), the next run measures nothing, and the planner never gives TP 1 microbatch 4."""
    fakes = Fakes(out_of_memory={(1, 4)})
    fakes.install(monkeypatch)
    spec, output = _spec(tmp_path), tmp_path / "p.json"
    result = _measure(spec, output)
    assert result.exit_code == 0, result.output
    assert (1, 8) not in fakes.points
    assert "TP 1, microbatch 8: out of memory (as microbatch 4 did)" in result.stderr
    profile = read_profile(output)
    assert profile.out_of_memory == {4: frozenset({1}), 8: frozenset({1})}
    assert (4, 1) not in profile.points() and (4, 2) in profile.points()
    fakes.points.clear()
    assert _measure(spec, output).exit_code == 0 and fakes.points == []
    planned = runner.invoke(app, ["plan", str(spec), "--profile", str(output), "--json"])
    assert planned.exit_code == 0, planned.output
    for found in json.loads(planned.stdout)["plans"]:
        plan = found["plan"]
        tps = {r["tp"] for s in plan["stages"] for r in s["replicas"]}
        assert not (plan["microbatch_size"] >= 4 and 1 in tps)


@pytest.mark.parametrize(
    ("other", "named"),
    [
        ({"model": "OPT-350M"}, "it profiles model OPT-350M, not custom"),
        ({"device": "A100-40GB"}, "it profiles device A100-40GB, not LOCAL-CPU"),
        ({"precision": "bf16"}, "it profiles precision bf16, not fp32"),
        ({"seq_len": 64}, "it profiles seq_len 64, not 32"),
    ],
)
def test_an_output_holding_another_profile_is_refused_and_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, other: dict[str, Any], named: str
) -> None:
    """Another model, device, precision or sequence length: exit 1, one line naming it and a
    `To fix:` line, nothing measured, the file's bytes unchanged."""
    fakes = Fakes()
    fakes.install(monkeypatch)
    output = tmp_path / "p.json"
    times = {i: (1.0, 1.0, 1.0) for i in range(4)}
    base = LayerProfile(
        model="custom", device="LOCAL-CPU", precision="fp32", seq_len=32, times={1: {1: times}}
    )
    write_profile(replace(base, **other), output)
    before = output.read_bytes()
    result = _measure(_spec(tmp_path), output)
    assert result.exit_code == 1
    assert f"hetc: {output} holds another profile: {named}" in result.stderr
    assert f"To fix: pass another -o, or remove {output} to replace it" in result.stderr
    assert "Traceback" not in result.output
    assert output.read_bytes() == before and fakes.points == []


def test_a_truncated_output_is_one_positioned_error_and_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fakes = Fakes()
    fakes.install(monkeypatch)
    output = tmp_path / "p.json"
    output.write_text('{"format": "hetc-layer-profile",\n "version": 3, "times": {"1"')
    result = _measure(_spec(tmp_path), output)
    assert result.exit_code == 1
    assert result.stderr.startswith(f"{output}:2:")
    assert "not valid JSON" in result.stderr.splitlines()[0]
    assert result.stderr.splitlines()[1].startswith(f"To fix: remove {output}")
    assert fakes.points == [] and "Traceback" not in result.output


def test_progress_lines_count_points_and_estimate_the_rest() -> None:
    """Off a terminal: one line per point with done/total, elapsed and the mean pace times the
    points left; on a terminal: the bar redrawn after each point's line, closed at the end."""
    now = [0.0]
    lines: list[tuple[str, bool]] = []

    def echo(text: str = "", err: bool = False, nl: bool = True) -> None:
        lines.append((text, nl))

    plain = Progress(echo, 4, terminal=False, clock=lambda: now[0])
    now[0] = 6.0
    plain.point("TP 1, microbatch 1")
    assert lines == [("hetc: [1/4] TP 1, microbatch 1 (6.0 s elapsed, about 18 s left)", True)]
    lines.clear()
    bar = Progress(echo, 4, terminal=True, clock=lambda: now[0])
    now[0] = 16.0
    bar.point("TP 1, microbatch 2")
    bar.close()
    assert lines[0] == ("hetc: [........................] 0/4 points, 0 s elapsed", False)
    assert lines[1] == ("\r\x1b[KTP 1, microbatch 2", True)
    assert lines[2] == (
        "hetc: [######..................] 1/4 points, 10 s elapsed, about 30 s left",
        False,
    )
    assert lines[3] == ("", True)


class _Finished(Group):
    """A layers group whose ranks have all exited: 0, or failed."""

    def __init__(self, folder: Path, size: int, failed: bool) -> None:
        super().__init__(folder, [], [])
        self.size, self.failed = size, failed
        self.processes = [None] * size  # type: ignore[list-item]

    def poll(self, deadline: float) -> bool:
        if self.failed:
            raise GroupFailed("rank 1 of 2: OutOfMemoryError: ran out of memory at microbatch 2")
        return True


def test_the_parent_answers_each_point_and_turns_an_out_of_memory_exit_into_none(
    tmp_path: Path,
) -> None:
    """Both ranks wrote point 0 (microbatch 1), then rank 1 ran out of memory at microbatch 2:
    the parent gets the slowest rank's point, answers `go`, then (2, None)."""
    slow = replace(_fake(1), times={1: [(9.0, 9.0, 9.0)] * 3})
    for rank, measured in enumerate((_fake(1), slow)):
        (tmp_path / f"rank-{rank}-point-0.json").write_text(json.dumps(measured.to_json()))
    (tmp_path / "rank-1-oom.json").write_text("2")
    seen: list[tuple[int, object]] = []
    follow(
        _Finished(tmp_path, 2, failed=True),
        (1, 2, 4),
        1e18,
        lambda m, r: seen.append((m, r)) or True,
    )
    assert seen[0][0] == 1 and seen[0][1].times[1][0] == (9.0, 9.0, 9.0)  # type: ignore[union-attr]
    assert seen[1] == (2, None)
    assert (tmp_path / "decision-0").read_text() == "go"
    (tmp_path / "rank-1-oom.json").unlink()
    with pytest.raises(GroupFailed, match="rank 1 of 2"):
        follow(_Finished(tmp_path, 2, failed=True), (1, 2, 4), 1e18, lambda m, r: True)


def test_the_parent_says_stop_when_told(tmp_path: Path) -> None:
    """`on_point` answering False writes `stop` for the ranks and ends the group there."""
    for rank in range(2):
        (tmp_path / f"rank-{rank}-point-0.json").write_text(json.dumps(_fake(1).to_json()))
        (tmp_path / f"rank-{rank}-point-1.json").write_text(json.dumps(_fake(2).to_json()))
    seen: list[int] = []
    follow(_Finished(tmp_path, 2, failed=False), (1, 2), 1e18, lambda m, r: seen.append(m) or False)
    assert seen == [1] and (tmp_path / "decision-0").read_text() == "stop"
    assert not (tmp_path / "decision-1").exists()
