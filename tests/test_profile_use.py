"""How a measured profile reaches the cost model and the planner: what is refused, warned
about and used, measured memory and bandwidth in the simulator, and a slow profile's effect."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hetc.cli import app
from hetc.costmodel.compute import ComputeModel
from hetc.costmodel.memory import CPU_OVERHEAD, received_input_bytes
from hetc.costmodel.profile import (
    BandwidthFit,
    LayerMemory,
    LayerProfile,
    ProfileError,
    fit_bandwidth,
    write_profile,
)
from hetc.costmodel.simulate import read_profiles_for_command, read_spec_profiles, simulate
from hetc.costmodel.tables import build_stage_tables, peak_memory
from hetc.plan import Node, Pipeline, Plan, Replica, Stage
from hetc.schema import check_file
from hetc.solver.planner import plan_spec

runner = CliRunner()
ARCH = {"layers": 2, "hidden": 64, "heads": 4, "ffn": 256, "vocab": 512, "max_positions": 64}
SPEC = """\
version: 1
name: profiled
model:
  architecture: {layers: 2, hidden: 64, heads: 4, ffn: 256, vocab: 512, max_positions: 64}
training: {global_batch_size: 8, seq_len: 32, precision: fp32, zero_stage: 0}
devices:
  - {name: CPU-A, kind: cpu, memory: 4GiB, peak_tflops: {fp32: 0.05},
     memory_bandwidth: 10GB/s, intra_node: {kind: shared-memory, bandwidth: 5GB/s},
     price: 1 USD/h}
zones:
  - name: z
    pools: [{device: CPU-A, quota: 2, gpus_per_node: 2}]
"""


def _spec(tmp_path: Path, text: str = SPEC) -> object:
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    spec = check_file(str(path)).spec
    assert spec is not None
    return spec


def _profile(**changes: object) -> LayerProfile:
    """Layer i takes (i + 1) ms forward, 2 (i + 1) ms backward, 0.1 ms update; keeps
    (i + 1) MiB per microbatch; a 1 GB/s point-to-point and all-reduce link at every message
    size (a measured link adds no latency: its fit is of whole transfer times)."""
    times = {i: ((i + 1) * 1e-3, 2 * (i + 1) * 1e-3, 1e-4) for i in range(4)}
    fit = BandwidthFit(coefficients=(0.0, 0.0, 1.0), peak=1e9, sizes=(1.0, 1e12))
    base = LayerProfile(
        model="custom",
        device="CPU-A",
        precision="fp32",
        seq_len=32,
        times={1: {1: times}},
        architecture=dict(ARCH),
        memory={
            1: {
                i: LayerMemory(weight_bytes=0.0, activation_bytes={1: (i + 1) * 2.0**20})
                for i in range(4)
            }
        },
        network={"intra_node": {"p2p": {2: fit}, "all_reduce": {2: fit}}},
    )
    return replace(base, **changes)  # type: ignore[arg-type]


def _write(tmp_path: Path, profile: LayerProfile, name: str = "p.json") -> Path:
    path = tmp_path / name
    write_profile(profile, path)
    return path


def test_a_profile_round_trips(tmp_path: Path) -> None:
    """Every section survives writing and reading, links between named zones and fit sizes
    included."""
    from hetc.costmodel.profile import MeasuredLink, read_profile

    link = MeasuredLink(
        source="z",
        target="y",
        peer="V100-16GB",
        collective="p2p",
        devices=4,
        fit=BandwidthFit(coefficients=(0.1, 0.2, 0.3), peak=5e9, sizes=(1e6, 1e9)),
    )
    profile = _profile(meta={"origin": "test", "threads": 1}, links=(link,))
    again = read_profile(_write(tmp_path, profile))
    assert replace(again, source="") == profile
    assert again.link_between("z", "y", "v100-16gb", 3) == link, "nearest count, any case"
    assert again.link_between("y", "z", "V100-16GB", 4) is None, "links have a direction"


@pytest.mark.parametrize(
    ("links", "message"),
    [
        ({"from": "z", "to": "y", "fit": {}}, r"links\[0\]: expected keys .*missing \['devices'\]"),
        (
            {"from": "z", "to": "y", "devices": 0, "fit": {"coefficients": [0, 0, 1], "peak": 1}},
            r"devices must be a positive integer",
        ),
        (
            {"from": "z", "to": "y", "devices": 1, "collective": "all_reduce", "fit": {}},
            r"only p2p links are measured",
        ),
        (
            {
                "from": "z",
                "to": "y",
                "devices": 1,
                "fit": {"coefficients": [0, 0, 1], "peak": 1, "sizes": [5, 1]},
            },
            r"links\[0\]\.fit: sizes must be 0 < smallest <= largest",
        ),
    ],
)
def test_a_malformed_link_names_its_key_path(
    tmp_path: Path, links: dict[str, object], message: str
) -> None:
    from hetc.costmodel.profile import read_profile

    data = _profile().to_json()
    data["network"] = {"links": [links]}
    path = tmp_path / "p.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ProfileError, match=message):
        read_profile(path)


def test_a_recorded_architecture_decides_which_specs_a_profile_serves(tmp_path: Path) -> None:
    """A profile that records the architecture it timed serves a spec training exactly that
    architecture, whatever either calls the model; one that records none, the model of its
    name."""
    from hetc.costmodel.simulate import check_profile_model

    spec = _spec(tmp_path)
    check_profile_model(_profile(model="Sailor's build"), spec)  # type: ignore[arg-type]
    with pytest.raises(ProfileError, match=r"ffn: 128 vs 256"):
        check_profile_model(_profile(architecture={**ARCH, "ffn": 128}), spec)  # type: ignore[arg-type]
    with pytest.raises(ProfileError, match=r"profiles model 'other'"):
        check_profile_model(_profile(model="other", architecture=None), spec)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"architecture": {**ARCH, "hidden": 128}}, "hidden: 128 vs 64"),
        ({"seq_len": 64}, "measured at seq_len 64"),
        ({"model": "other", "architecture": None}, "profiles model 'other'"),
        ({"precision": "bf16"}, "measured at bf16; the spec trains fp32"),
        ({"times": {1: {1: {i: (1.0, 1.0, 1.0) for i in range(3)}}}}, "the spec's model has 4"),
    ],
)
def test_a_mismatched_profile_is_refused(
    tmp_path: Path, change: dict[str, object], message: str
) -> None:
    spec = _spec(tmp_path)
    if "times" in change:
        change["memory"] = {}
    path = _write(tmp_path, _profile(**change))
    with pytest.raises(ProfileError, match=message):
        read_spec_profiles(spec, str(tmp_path), extra=[str(path)])  # type: ignore[arg-type]


def test_a_device_no_pool_rents_is_warned_about_and_ignored(tmp_path: Path) -> None:
    """A profile of a device the spec does not rent is skipped with a warning, not refused."""
    spec = _spec(tmp_path)
    warnings: list[str] = []
    mine = _write(tmp_path, _profile(), "cpu.json")
    other = _write(tmp_path, _profile(device="H100"), "h100.json")
    found = read_spec_profiles(
        spec,  # type: ignore[arg-type]
        str(tmp_path),
        extra=[str(mine), str(other)],
        warn=warnings.append,
    )
    assert [p.device for p in found] == ["CPU-A"] and found[0].precision == "fp32"
    assert warnings == [f"{other}: profiles 'H100', which no pool of the spec rents: ignored"]


def test_a_command_prints_a_refused_profile_and_gets_none(tmp_path: Path) -> None:
    """read_profiles_for_command: a refused profile is its line and its `To fix:` on stdout and
    None (the command exits 1); an accepted one comes back, a device not rented is a warning on
    stderr."""
    spec = _spec(tmp_path)
    lines: list[tuple[str, bool]] = []

    def echo(text: str, err: bool = False) -> None:
        lines.append((text, err))

    bad = _write(tmp_path, _profile(seq_len=64), "bad.json")
    found = read_profiles_for_command(spec, str(tmp_path), "spec.yaml", [str(bad)], echo)  # type: ignore[arg-type]
    assert found is None
    assert [err for _, err in lines] == [False, False]
    assert "measured at seq_len 64" in lines[0][0]
    assert lines[1][0].startswith("To fix: list a profile of the spec's training")
    lines.clear()
    mine = _write(tmp_path, _profile(), "cpu.json")
    other = _write(tmp_path, _profile(device="H100"), "h100.json")
    found = read_profiles_for_command(
        spec,  # type: ignore[arg-type]
        str(tmp_path),
        "spec.yaml",
        [str(mine), str(other)],
        echo,
    )
    assert found is not None and [p.device for p in found] == ["CPU-A"]
    assert lines == [
        (f"hetc: warning: {other}: profiles 'H100', which no pool of the spec rents: ignored", True)
    ]


def _two_stage_plan() -> Plan:
    node = Node(id="n0", zone="z", region="z", pool="cpu-a", device="CPU-A", devices=2)
    return Plan(
        spec_hash="0" * 64,
        hetc_version="0.1.0",
        model_blocks=2,
        global_batch_size=8,
        microbatch_size=1,
        nodes=(node,),
        stages=(
            Stage(
                first_block=0,
                end_block=1,
                replicas=(Replica(device="CPU-A", tp=1, node="n0", local_ranks=(0,)),),
            ),
            Stage(
                first_block=1,
                end_block=2,
                replicas=(Replica(device="CPU-A", tp=1, node="n0", local_ranks=(1,)),),
            ),
        ),
        pipelines=(Pipeline(replicas=(0, 0), microbatches=8),),
    )


def test_measured_activations_and_bandwidth_are_what_the_simulator_uses(tmp_path: Path) -> None:
    """Stage 0 (embedding + block 0) keeps (1 + 2) MiB per microbatch, 2 in flight; stage 1
    keeps (3 + 4) MiB plus its fp32 input, 1 in flight; each also the token tensors. A
    boundary send of 1 x 32 x 64 fp32 takes latency + bytes / 1 GB/s. Mutating any of these
    breaks the equalities."""
    spec = _spec(tmp_path)
    profile = _profile()
    plan = _two_stage_plan()
    with_profile = simulate(plan, spec, profiles=[profile])  # type: ignore[arg-type]
    without = simulate(plan, spec)  # type: ignore[arg-type]
    mib = 2.0**20
    first, last = (r.memory.activations for r in with_profile.ranks)
    received = received_input_bytes(spec.model, seq_len=32, microbatch=1)  # type: ignore[attr-defined]
    logits_gradient = 4 * 32 * 512
    tokens = 2 * 8 * 32  # a microbatch's int64 ids and targets: in flight, and one more
    assert first == pytest.approx(2 * 3 * mib + 3 * tokens)
    boundaries = 3 * received  # receive buffer, its concatenation, a gradient sent back
    assert last == pytest.approx(7 * mib + received + logits_gradient + 2 * tokens + boundaries)
    assert first != next(r.memory.activations for r in without.ranks)
    boundary = 1 * 32 * 64 * 4
    expected_send = boundary / 1e9
    forward = [(1 + 2) * 1e-3, (3 + 4) * 1e-3]
    backward = [2 * f for f in forward]
    # The closed form (hetc.costmodel.planning's docstring): F = sum t + 2 sum s,
    # S = max_i (t_i + s_i + s_(i-1)), T = F + (m - 1) S + max_i (y_i + u_i); y: the tied
    # token table (512 x 64 fp32) all-reduced by 2 ranks over the measured 1 GB/s link.
    stage_times = [f + b for f, b in zip(forward, backward, strict=True)]
    fill = sum(stage_times) + 2 * expected_send
    period = max(stage_times) + expected_send
    tied = 2 * (512 * 64 * 4 / 2 / 1e9)
    update = 2 * 1e-4
    assert with_profile.closed_form_time == pytest.approx(
        fill + 7 * period + tied + update, rel=1e-9
    )


def test_tables_use_measured_activations_like_the_simulator(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    profile = _profile()
    compute = ComputeModel(
        arch=spec.model,  # type: ignore[attr-defined]
        device=spec.devices["CPU-A"],  # type: ignore[attr-defined]
        seq_len=32,
        precision="fp32",
        profile=profile,
    )
    tables = build_stage_tables(
        compute, tp=1, microbatch=1, zero_stage=0, optimizer="adamw", overhead=CPU_OVERHEAD
    )
    simulated = simulate(_two_stage_plan(), spec, profiles=[profile])  # type: ignore[arg-type]
    for (first, end, flight), rank in zip(((0, 2, 2), (2, 4, 1)), simulated.ranks, strict=True):
        assert peak_memory(tables, first, end, 1, flight) == pytest.approx(rank.memory.total)


def test_the_fit_recovers_a_known_curve_and_weights_small_messages() -> None:
    """Exact points give the coefficients back; a curve spanning two decades is fitted in
    relative terms, so the smallest message is not sacrificed to the largest."""
    a, b, c = -0.02, 0.3, 1.5
    exact = [(2.0**k * 1e6, 1e9 * (a * k * k + b * k + c)) for k in range(-2, 7)]
    fit = fit_bandwidth(exact)
    assert fit.coefficients == pytest.approx((a, b, c), rel=1e-9)
    assert fit.residual == pytest.approx(0.0, abs=1e-12)
    steep = [(4.0**k * 4096, 1e9 * min(2.0, 0.01 * 3.0**k)) for k in range(8)]
    relative = fit_bandwidth(steep)
    x0 = math.log2(4096 / 1e6)
    smallest = relative.coefficients[0] * x0 * x0 + relative.coefficients[1] * x0
    assert smallest + relative.coefficients[2] > 0  # absolute least squares goes negative here
    with pytest.raises(ValueError, match="three distinct"):
        fit_bandwidth(exact[:2])


def test_a_profile_slower_than_the_datasheet_changes_the_plan(tmp_path: Path) -> None:
    """Two device types; measured times 20x the estimate for the one the planner preferred
    make it prefer the other."""
    text = SPEC.replace(
        "zones:",
        "  - {name: CPU-B, kind: cpu, memory: 4GiB, peak_tflops: {fp32: 0.03},\n"
        "     memory_bandwidth: 10GB/s, intra_node: {kind: shared-memory, bandwidth: 5GB/s},\n"
        "     price: 1 USD/h}\nzones:",
    ).replace(
        "pools: [{device: CPU-A, quota: 2, gpus_per_node: 2}]",
        "pools: [{device: CPU-A, quota: 2, gpus_per_node: 2},"
        " {device: CPU-B, quota: 2, gpus_per_node: 2}]",
    )
    text += "constraints: {max_gpus: 2}\n"
    spec = _spec(tmp_path, text)

    def devices_used(plan: Plan) -> set[str]:
        return {r.device for s in plan.stages for r in s.replicas}

    before = plan_spec(spec).proposals[0].plan  # type: ignore[arg-type]
    assert devices_used(before) == {"CPU-A"}
    estimate = ComputeModel(
        arch=spec.model,  # type: ignore[attr-defined]
        device=spec.devices["CPU-A"],  # type: ignore[attr-defined]
        seq_len=32,
        precision="fp32",
    )
    times = {
        m: {t: {i: _scaled(estimate.layer_times(i, m, t), 20) for i in range(4)} for t in (1, 2)}
        for m in (1, 2, 4, 8)
    }
    slow = _profile(times=times, memory={}, network={})
    after = plan_spec(spec, profiles=[slow]).proposals[0].plan  # type: ignore[arg-type]
    assert "CPU-A" not in devices_used(after)


def _scaled(times: object, factor: float) -> tuple[float, float, float]:
    f, b, u = times.forward, times.backward, times.update  # type: ignore[attr-defined]
    return (factor * f, factor * b, factor * u)


def test_compile_with_a_profile_names_it_in_the_report(tmp_path: Path) -> None:
    (tmp_path / "spec.yaml").write_text(SPEC)
    path = _write(tmp_path, _profile(meta={"origin": "measured by a test"}))
    out = tmp_path / "out"
    result = runner.invoke(
        app, ["compile", str(tmp_path / "spec.yaml"), "-o", str(out), "--profile", str(path)]
    )
    assert result.exit_code == 0, result.output
    report = (out / "report.md").read_text()
    assert "measured profiles: CPU-A from p.json (measured by a test)" in report
    assert "CPU-A: measured profile" in result.stderr
    plain = runner.invoke(app, ["compile", str(tmp_path / "spec.yaml"), "-o", str(tmp_path / "o2")])
    assert (
        "no measured profile; formulas where nothing was measured, listed below"
        in (tmp_path / "o2" / "report.md").read_text()
    )
    bad = _write(tmp_path, _profile(seq_len=64), "bad.json")
    refused = runner.invoke(
        app, ["compile", str(tmp_path / "spec.yaml"), "-o", str(out), "--profile", str(bad)]
    )
    assert refused.exit_code == 1 and "measured at seq_len 64" in refused.output
    assert plain.exit_code == 0


def test_an_inter_node_fit_replaces_the_spec_link_between_nodes_of_one_zone(
    tmp_path: Path,
) -> None:
    """Two one-device nodes: the boundary send takes its bytes over the measured one-flow
    rate, with no latency of its own (the fit is of whole transfer times); without the
    inter-node fit, the spec's latency plus bytes over the spec's bandwidth."""
    from hetc.costmodel.network import link_between

    spec = _spec(tmp_path, SPEC.replace("gpus_per_node: 2", "gpus_per_node: 1"))
    nodes = tuple(
        Node(id=f"n{k}", zone="z", region="z", pool="cpu-a", device="CPU-A", devices=1)
        for k in range(2)
    )
    plan = replace(
        _two_stage_plan(),
        nodes=nodes,
        stages=tuple(
            Stage(
                first_block=k,
                end_block=k + 1,
                replicas=(Replica(device="CPU-A", tp=1, node=f"n{k}", local_ranks=(0,)),),
            )
            for k in range(2)
        ),
    )
    one_flow = BandwidthFit(coefficients=(0.0, 0.0, 2.0), peak=2e9, sizes=(1.0, 1e12))
    four_flows = BandwidthFit(coefficients=(0.0, 0.0, 6.0), peak=6e9, sizes=(1.0, 1e12))
    profile = _profile(network={"inter_node": {"p2p": {1: one_flow, 4: four_flows}}})
    spec_link = link_between(spec.network, spec.zones[0], spec.zones[0])  # type: ignore[attr-defined]
    boundary = 32 * 64 * 4
    measured = simulate(plan, spec, profiles=[profile])  # type: ignore[arg-type]
    nominal = simulate(plan, spec, profiles=[_profile(network={})])  # type: ignore[arg-type]
    change = measured.closed_form_time - nominal.closed_form_time
    per_byte = 1 / 2e9 - 1 / spec_link.bandwidth
    # 8 microbatches: fill crosses the boundary twice, each later period once more; the tied
    # token table (512 x 64 fp32) is all-reduced by the two stages: 2 steps of half of it;
    # each of those 11 messages pays the spec's latency only without the fit
    moved = (2 + 7) * boundary + 2 * (512 * 64 * 4 / 2)
    assert change == pytest.approx(moved * per_byte - 11 * spec_link.latency, rel=1e-6)
    assert spec_link.bandwidth != 2e9


def test_a_missing_or_broken_profile_file_is_a_clear_error(tmp_path: Path) -> None:
    """A missing --profile: exit 4 with a fix, no traceback; malformed JSON: exit 1 naming
    file:line:col; either way nothing is written."""
    (tmp_path / "spec.yaml").write_text(SPEC)
    out = tmp_path / "out"
    missing = runner.invoke(
        app, ["compile", str(tmp_path / "spec.yaml"), "-o", str(out), "--profile", "no.json"]
    )
    assert missing.exit_code == 4
    assert "cannot read the profile no.json" in missing.stderr and "To fix:" in missing.stderr
    assert "Traceback" not in missing.output
    broken = tmp_path / "broken.json"
    broken.write_text('{"format":\n  oops}')
    bad = runner.invoke(app, ["plan", str(tmp_path / "spec.yaml"), "--profile", str(broken)])
    assert bad.exit_code == 1 and f"{broken}:2:3: not valid JSON" in bad.output
    assert not out.exists()


def test_the_planner_prices_links_between_nodes_by_the_inter_node_fit(tmp_path: Path) -> None:
    """`PlanningModel.measured_link`: between nodes of one device in one zone, one flow's
    share of the measured peak with the fit's curve, no latency and no NIC term (the fit
    measured both); without the fit, the spec's link and NIC."""
    from hetc.costmodel.network import FLAT, link_between
    from hetc.costmodel.planning import PlanningModel

    spec = _spec(tmp_path, SPEC.replace("gpus_per_node: 2", "gpus_per_node: 1"))
    four_flows = BandwidthFit(coefficients=(0.0, 0.0, 6.0), peak=6e9)
    fitted = _profile(network={"inter_node": {"p2p": {4: four_flows}}})
    spec_link = link_between(spec.network, spec.zones[0], spec.zones[0])  # type: ignore[attr-defined]
    link, curve, nic = PlanningModel(spec, profiles=[fitted]).measured_link(0, 0, 1)  # type: ignore[arg-type]
    assert link.bandwidth == pytest.approx(6e9 / 4)
    assert link.latency == 0.0
    assert curve == four_flows.curve()
    assert nic == math.inf
    plain = PlanningModel(spec, profiles=[_profile(network={})]).measured_link(0, 0, 1)  # type: ignore[arg-type]
    assert plain == (spec_link, FLAT, spec.zones[0].pools[0].nic_bandwidth)  # type: ignore[attr-defined]
