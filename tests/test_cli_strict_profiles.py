"""Profiles through `hetc plan`, `hetc compile` and `hetc simulate`: the list of terms that
rest on a formula, `--measured-points`, `--strict-profiles`, and the refusal of a profile of
another model or precision or of a broken file (exit 1, a `To fix:` line, nothing written)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from typer.testing import CliRunner

from hetc.cli import app
from hetc.costmodel.profile import (
    BandwidthFit,
    LayerMemory,
    LayerProfile,
    read_profile,
    write_profile,
)

runner = CliRunner()
SPEC = """\
version: 1
name: strict
model:
  architecture: {layers: 2, hidden: 64, heads: 4, ffn: 256, vocab: 512, max_positions: 64}
training: {global_batch_size: 8, seq_len: 32, precision: fp32, zero_stage: 0,
           activation_checkpointing: CHECKPOINTING}
devices:
  - {name: CPU-A, kind: cpu, memory: 4GiB, peak_tflops: {fp32: 0.05},
     memory_bandwidth: 10GB/s, intra_node: {kind: shared-memory, bandwidth: 5GB/s},
     price: 1 USD/h}
zones:
  - name: z
    pools: [{device: CPU-A, quota: 4, gpus_per_node: 2}]
"""
FIT = BandwidthFit(coefficients=(0.0, 0.0, 1.0), peak=1e9)
ALL = {m: (1, 2) for m in (1, 2, 4, 8)}
"""Every (microbatch, TP) point the planner considers for SPEC."""


def _files(
    tmp_path: Path,
    points: dict[int, tuple[int, ...]],
    *,
    seconds: float = 1e-3,
    checkpointing: bool = False,
) -> tuple[Path, Path]:
    """The spec, and CPU-A's profile timed at `points` (each layer `seconds` forward), with
    memory at each, and the collectives inside a node and the link between nodes."""
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.replace("CHECKPOINTING", str(checkpointing).lower()))
    times = {i: (seconds, 2 * seconds, 1e-4) for i in range(4)}
    memory: dict[int, dict[int, LayerMemory]] = {}
    for micro, tps in points.items():
        for tp in tps:
            row = memory.setdefault(
                tp, {i: LayerMemory(weight_bytes=1.0, activation_bytes={}) for i in range(4)}
            )
            for entry in row.values():
                entry.activation_bytes[micro] = 1e6 * micro
    profile = LayerProfile(
        model="custom",
        device="CPU-A",
        precision="fp32",
        seq_len=32,
        times={m: dict.fromkeys(tps, times) for m, tps in points.items()},
        memory=memory,
        network={
            "intra_node": {"p2p": {2: FIT}, "all_reduce": {2: FIT}},
            "inter_node": {"p2p": {1: FIT, 2: FIT}},
        },
    )
    path = tmp_path / "cpu-a.json"
    write_profile(profile, path)
    return spec, path


def test_a_fully_measured_profile_gives_every_term_measured(tmp_path: Path) -> None:
    """compile's report.md and plan's text say "every term measured" and list nothing."""
    spec, profile = _files(tmp_path, ALL)
    out = tmp_path / "out"
    compiled = runner.invoke(app, ["compile", str(spec), "-o", str(out), "--profile", str(profile)])
    assert compiled.exit_code == 0, compiled.output
    report = (out / "report.md").read_text()
    assert "from cpu-a.json; every term measured" in report
    assert "rests on a formula" not in report
    planned = runner.invoke(app, ["plan", str(spec), "--profile", str(profile), "--top", "3"])
    assert planned.exit_code == 0, planned.output
    assert planned.stdout.count("cost model: every term measured") == 3


def test_measured_points_keep_the_planner_to_what_was_timed(tmp_path: Path) -> None:
    """Timed at microbatch 1 and 2, TP 1 only, and slowly: unrestricted, plan 1 takes a point
    the formula prices and the text names it; with --measured-points every plan is at a
    measured point and nothing is listed."""
    spec, profile = _files(tmp_path, {1: (1,), 2: (1,)}, seconds=1.0)
    free = runner.invoke(app, ["plan", str(spec), "--profile", str(profile), "--json"])
    assert free.exit_code == 0, free.output
    best = json.loads(free.stdout)["plans"][0]
    point = (best["plan"]["microbatch_size"], best["plan"]["stages"][0]["replicas"][0]["tp"])
    assert point not in {(1, 1), (2, 1)}
    assert best["formula_fallbacks"] == [
        {
            "device": "CPU-A",
            "term": term,
            "missing": f"microbatch {point[0]} at TP {point[1]} not measured",
        }
        for term in ("activation memory", "layer times")
    ]
    text = runner.invoke(app, ["plan", str(spec), "--profile", str(profile)])
    assert f"CPU-A: layer times: microbatch {point[0]} at TP {point[1]} not measured" in text.stdout
    kept = runner.invoke(
        app, ["plan", str(spec), "--profile", str(profile), "--json", "--measured-points"]
    )
    assert kept.exit_code == 0, kept.output
    for found in json.loads(kept.stdout)["plans"]:
        plan = found["plan"]
        points = {(plan["microbatch_size"], r["tp"]) for s in plan["stages"] for r in s["replicas"]}
        assert points <= {(1, 1), (2, 1)} and found["formula_fallbacks"] == []


def test_strict_profiles_refuses_a_formula_with_the_list_and_a_fix(tmp_path: Path) -> None:
    """Under activation checkpointing activation memory is a formula whatever was measured:
    plan and compile exit 1 with the list and a `To fix:` line, and compile writes nothing;
    without the flag the same compile succeeds and its report lists the term."""
    spec, profile = _files(tmp_path, ALL, checkpointing=True)
    out = tmp_path / "out"
    args = ["compile", str(spec), "-o", str(out), "--profile", str(profile)]
    refused = runner.invoke(app, [*args, "--strict-profiles"])
    assert refused.exit_code == 1
    lines = refused.stdout.splitlines()
    assert lines[0] == (
        "hetc: --strict-profiles: plan 1's prediction rests on formulas where nothing was measured:"
    )
    assert lines[1] == (
        "  CPU-A: activation memory: formula under activation checkpointing (a profile"
        " measures layers that keep their activations)"
    )
    assert lines[2].startswith("To fix: no hetc command measures CPU-A: activation memory")
    assert not out.exists()
    planned = runner.invoke(
        app, ["plan", str(spec), "--profile", str(profile), "--strict-profiles"]
    )
    assert planned.exit_code == 1 and planned.stdout.splitlines()[:3] == lines[:3]
    accepted = runner.invoke(app, args)
    assert accepted.exit_code == 0, accepted.output
    report = (out / "report.md").read_text()
    assert "- CPU-A: activation memory: formula under activation checkpointing" in report


def test_strict_profiles_without_a_profile_names_the_measure_command(tmp_path: Path) -> None:
    spec, _ = _files(tmp_path, ALL)
    result = runner.invoke(app, ["plan", str(spec), "--strict-profiles"])
    assert result.exit_code == 1
    assert "no profile of a device of the spec" in result.stdout
    assert f"To fix: measure one: hetc profile measure {spec} --device CPU-A -o cpu-a.json" in (
        result.stdout
    )


def _plan_at(tmp_path: Path, spec: Path, profile: Path, micro: int) -> Path:
    """plan.json of the spec's best plan, its microbatch size set to `micro`."""
    out = tmp_path / "planned"
    compiled = runner.invoke(app, ["compile", str(spec), "-o", str(out), "--profile", str(profile)])
    assert compiled.exit_code == 0, compiled.output
    plan = json.loads((out / "plan.json").read_text())
    plan["microbatch_size"] = micro
    total = 8 // micro
    pipelines = plan["pipelines"]
    for i, pipeline in enumerate(pipelines):
        pipeline["microbatches"] = total // len(pipelines) + (i < total % len(pipelines))
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    return path


def test_simulate_lists_the_formulas_and_strict_refuses_them(tmp_path: Path) -> None:
    """A plan at microbatch 4 with a profile timed at 1 and 2: simulate prints the prediction
    and the list; with --strict-profiles exit 1, the list and the measure command, and no
    prediction."""
    spec, profile = _files(tmp_path, {1: (1, 2), 2: (1, 2)})
    plan = _plan_at(tmp_path, spec, profile, 4)
    args = ["simulate", str(spec), "--plan", str(plan), "--profile", str(profile)]
    shown = runner.invoke(app, args)
    assert shown.exit_code == 0, shown.output
    assert "formula where not measured:" in shown.stdout
    assert "  CPU-A: layer times: microbatch 4 at TP " in shown.stdout
    strict = runner.invoke(app, [*args, "--strict-profiles"])
    assert strict.exit_code == 1
    assert "iteration time" not in strict.stdout
    assert "  CPU-A: layer times: microbatch 4 at TP " in strict.stdout
    assert f"To fix: hetc profile measure {spec} --device CPU-A -o {profile}" in strict.stdout
    measured = runner.invoke(app, [*args[:-2], "--profile", str(_files(tmp_path, ALL)[1])])
    assert measured.exit_code == 0 and "cost model: every term measured" in measured.stdout


def test_a_profile_of_another_model_or_precision_is_refused_and_nothing_written(
    tmp_path: Path,
) -> None:
    """compile exits 1 with one line naming the mismatch and a `To fix:` line; no output."""
    spec, profile = _files(tmp_path, ALL)
    out = tmp_path / "out"
    for change, reason in (
        ({"model": "OPT-350M"}, "profiles model 'OPT-350M'; the spec trains 'custom'"),
        (
            {"precision": "bf16"},
            "measured at bf16; the spec trains fp32, whose layers run other kernels at"
            " another speed",
        ),
    ):
        other = tmp_path / "other.json"
        write_profile(replace(read_profile(profile), **change), other)  # type: ignore[arg-type]
        result = runner.invoke(app, ["compile", str(spec), "-o", str(out), "--profile", str(other)])
        assert result.exit_code == 1
        assert result.stdout.splitlines() == [
            f"{other}: {reason}",
            f"To fix: list a profile of the spec's training, measured with: hetc profile"
            f" measure {spec} --device CPU-A -o NEW_PROFILE.json",
        ]
        assert not out.exists()


def test_a_truncated_profile_is_one_positioned_error(tmp_path: Path) -> None:
    spec, profile = _files(tmp_path, ALL)
    text = profile.read_text()
    profile.write_text(text[: len(text) // 2])
    out = tmp_path / "out"
    result = runner.invoke(app, ["compile", str(spec), "-o", str(out), "--profile", str(profile)])
    assert result.exit_code == 1
    (line,) = result.stdout.splitlines()
    assert line.startswith(f"{profile}:") and "not valid JSON" in line
    row, column = line[len(str(profile)) + 1 :].split(":")[:2]
    assert row.isdigit() and column.isdigit()
    assert not out.exists() and "Traceback" not in result.output


def test_no_plan_at_the_measured_points_says_so_and_what_to_measure(tmp_path: Path) -> None:
    """A profile timed only at points the planner never uses (TP 4 on nodes of 2): exit 3
    naming the measured points as what binds, not memory, with the measure command."""
    spec, _ = _files(tmp_path, ALL)
    times = {i: (1e-3, 2e-3, 1e-4) for i in range(4)}
    odd = tmp_path / "odd.json"
    write_profile(
        LayerProfile(
            model="custom", device="CPU-A", precision="fp32", seq_len=32, times={3: {4: times}}
        ),
        odd,
    )
    result = runner.invoke(app, ["plan", str(spec), "--profile", str(odd), "--measured-points"])
    assert result.exit_code == 3
    assert (
        "measured points is binding: no plan at the points the profiles timed (CPU-A TP 4 at"
        " microbatch 3)" in result.stderr
    )
    assert f"To fix: measure them: hetc profile measure {spec} --device CPU-A -o {odd}" in (
        result.stderr
    )


def test_simulate_reports_a_point_measured_out_of_memory_as_not_fitting(tmp_path: Path) -> None:
    """A plan at microbatch 4 where the profile found microbatch 4 out of memory: every rank
    at that point is reported as not fitting, naming the profile, and it is no formula."""
    spec, profile = _files(tmp_path, {1: (1, 2), 2: (1, 2)})
    plan = _plan_at(tmp_path, spec, profile, 4)
    oom = replace(read_profile(profile), out_of_memory={4: frozenset({1, 2})})
    write_profile(oom, profile)
    result = runner.invoke(
        app, ["simulate", str(spec), "--plan", str(plan), "--profile", str(profile), "--json"]
    )
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert not document["fits"]
    for rank in document["ranks"]:
        assert rank["problem"].endswith(
            f"ran out of memory at microbatch 4, TP {_rank_tp(document, rank)} when profiled"
            f" ({profile})"
        )
    assert not [f for f in document["formula_fallbacks"] if f["term"] == "layer times"]


def _rank_tp(document: dict[str, object], rank: dict[str, object]) -> int:
    """The TP degree of a rank's replica, from the ranks sharing its stage and replica."""
    ranks = document["ranks"]
    assert isinstance(ranks, list)
    return sum(1 for r in ranks if (r["stage"], r["replica"]) == (rank["stage"], rank["replica"]))
