"""`hetc profile measure` under torchrun on several nodes: the zone each node names, what the
writing node files and keeps, and for real (two torchrun launches on this host, gloo over
loopback) the links between two "nodes" in two zones of one region, priced as measured.

The real runs check the profile against what it must hold whatever the machine's speed:
the sizes asked for, positive rates that grow with the message (loopback is latency-bound at
4 KiB), the one pair's link entry equal to its class fit, and `LinkPricer` naming the
measured fact for a hop between those zones and the spec's for a hop to another region.
Mutation check done: `points.merged` dropping the file's links fails the two merging tests."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from hetc.cli import app
from hetc.costmodel.pricing import End, LinkPricer
from hetc.costmodel.profile import (
    BandwidthFit,
    LayerProfile,
    MeasuredLink,
    read_profile,
    write_profile,
)
from hetc.profiler import command
from hetc.profiler.collectives import message_bytes
from hetc.profiler.pairs import Filed, Rank
from hetc.profiler.points import merged
from hetc.schema import check_file
from hetc.schema.spec import Spec
from tests.test_profiler_points import Fakes

runner = CliRunner()
SIZES = (4096, 65536, 1048576)
TORCHRUN_ENV = {
    "RANK": "0",
    "WORLD_SIZE": "4",
    "LOCAL_RANK": "0",
    "LOCAL_WORLD_SIZE": "2",
    "GROUP_RANK": "0",
}


def write_spec(folder: Path) -> Path:
    """Zones a and b of region r1, c of r2 with no LOCAL-CPU pool but another device's."""
    path = folder / "zones.yaml"
    path.write_text(
        """version: 1
name: zones
model:
  architecture: {layers: 2, hidden: 64, heads: 4, ffn: 256, vocab: 256, max_positions: 32}
training: {global_batch_size: 4, seq_len: 32, precision: fp32}
devices:
  - {name: LOCAL-CPU, kind: cpu, memory: 2GiB, peak_tflops: {fp32: 0.05},
     memory_bandwidth: 10GB/s, intra_node: {kind: shared-memory, bandwidth: 5GB/s},
     price: 0 USD/h}
  - {name: OTHER-CPU, kind: cpu, memory: 2GiB, peak_tflops: {fp32: 0.05},
     memory_bandwidth: 10GB/s, intra_node: {kind: shared-memory, bandwidth: 5GB/s},
     price: 0 USD/h}
zones:
  - {name: zone-a, region: r1, pools: [{device: LOCAL-CPU, quota: 4, gpus_per_node: 2}]}
  - {name: zone-b, region: r1, pools: [{device: LOCAL-CPU, quota: 4, gpus_per_node: 2}]}
  - {name: zone-c, region: r2, pools: [{device: OTHER-CPU, quota: 4, gpus_per_node: 2},
                                       {device: LOCAL-CPU, quota: 2, gpus_per_node: 1}]}
""",
        encoding="utf-8",
    )
    return path


def _measure(spec: Path, output: Path, *options: str) -> Any:
    args = ["profile", "measure", str(spec), "--device", "LOCAL-CPU", "-o", str(output)]
    return runner.invoke(app, [*args, *options])


def load(path: Path) -> Spec:
    spec = check_file(str(path)).spec
    assert spec is not None
    return spec


def _fit(peak: float) -> BandwidthFit:
    return BandwidthFit(coefficients=(0.0, 0.0, peak / 1e9), peak=peak, points=((1e6, peak),))


def test_a_zone_the_spec_lacks_is_refused_naming_its_zones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--zone, else $HETC_ZONE, must be a zone of the spec holding a pool of the device:
    one line naming the zones, exit 1, nothing written."""
    spec, output = write_spec(tmp_path), tmp_path / "p.json"
    bad = _measure(spec, output, "--zone", "zone-d")
    assert bad.exit_code == 1
    assert bad.stderr.startswith(
        f"hetc: --zone 'zone-d' is not a zone of {spec} (its zones: zone-a, zone-b, zone-c)"
    )
    assert len(bad.stderr.splitlines()) == 1
    monkeypatch.setenv("HETC_ZONE", "nowhere")
    from_env = _measure(spec, output)
    assert from_env.exit_code == 1 and "$HETC_ZONE 'nowhere' is not a zone" in from_env.stderr
    monkeypatch.setenv("HETC_ZONE", "zone-a")
    other = runner.invoke(
        app, ["profile", "measure", str(spec), "--device", "OTHER-CPU", "-o", str(output)]
    )
    assert other.exit_code == 1 and "the zone has no pool of OTHER-CPU" in other.stderr
    assert "zones with OTHER-CPU: zone-c" in other.stderr
    assert not output.exists()


def test_the_zone_sets_the_node_size(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A LOCAL-CPU node in zone-c has one device: --tp 2 is refused there, not in zone-a."""
    fakes = Fakes()
    fakes.install(monkeypatch)
    spec, output = write_spec(tmp_path), tmp_path / "p.json"
    small = _measure(spec, output, "--zone", "zone-c", "--tp", "2", "--no-network")
    assert small.exit_code == 1 and "LOCAL-CPU nodes have 1 device" in small.stderr
    large = _measure(spec, output, "--zone", "zone-a", "--tp", "2", "--microbatch", "1")
    assert large.exit_code == 0, large.stderr
    assert fakes.points == [(2, 1)]


class Between:
    """Stands in for `cluster.between_nodes`: records what this node published, answers."""

    def __init__(self, answer: Filed | int) -> None:
        self.answer = answer
        self.published: list[Rank] = []

    def __call__(self, me: Rank, regions: dict[str, str], **_: Any) -> Filed | int:
        self.published.append(me)
        assert regions == {"zone-a": "r1", "zone-b": "r1", "zone-c": "r2"}
        if me.problem is not None:
            return me.problem[1]
        return self.answer


def _under_torchrun(monkeypatch: pytest.MonkeyPatch, answer: Filed | int) -> Between:
    for key, value in TORCHRUN_ENV.items():
        monkeypatch.setenv(key, value)
    fake = Between(answer)
    monkeypatch.setattr(command, "between_nodes", fake)
    return fake


def test_the_writer_files_what_the_pairs_measured_and_keeps_what_the_file_held(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rank 0 publishes its zone, node size, flows (each TP degree up to the processes per
    node) and -o; it then writes the class fits, links and notes filed for it, with the
    file's other link, fits and notes kept, and its own points."""
    Fakes().install(monkeypatch)
    spec, output = write_spec(tmp_path), tmp_path / "p.json"
    first = _measure(spec, output, "--zone", "zone-a", "--microbatch", "1", "--tp", "1",
                     "--no-network")  # fmt: skip
    assert first.exit_code == 0, first.stderr
    earlier = read_profile(output)
    old_link = MeasuredLink(source="zone-a", target="zone-c", peer="OTHER-CPU",
                            collective="p2p", devices=2, fit=_fit(1e8))  # fmt: skip
    write_profile(
        replace(
            earlier,
            network={"inter_node": {"p2p": {1: _fit(7e9)}}},
            links=(old_link,),
            meta={**earlier.meta, "inter_node.p2p[1]": "an earlier run's note"},
        ),
        output,
    )
    filed = Filed(
        network={"inter_zone": {"p2p": {2: _fit(3e9)}}},
        links=[
            MeasuredLink(
                source="zone-a",
                target="zone-b",
                peer="LOCAL-CPU",
                collective="p2p",
                devices=2,
                fit=_fit(3e9),
            )
        ],
        notes={"inter_zone.p2p[2]": "the slowest pair"},
    )
    fake = _under_torchrun(monkeypatch, filed)
    result = _measure(spec, output, "--zone", "zone-a", "--microbatch", "2", "--tp", "1")
    assert result.exit_code == 0, result.stderr
    (me,) = fake.published
    assert (me.zone, me.devices, me.flows, me.device, me.output) == (
        "zone-a", 2, (1, 2), "LOCAL-CPU", str(output.resolve())
    )  # fmt: skip
    profile = read_profile(output)
    assert profile.points() == [(1, 1), (2, 1)]
    assert profile.network["inter_zone"]["p2p"][2].peak == 3e9
    assert profile.network["inter_node"]["p2p"][1].peak == 7e9
    assert [(li.target, li.peer) for li in profile.links] == [
        ("zone-c", "OTHER-CPU"),
        ("zone-b", "LOCAL-CPU"),
    ]
    assert profile.meta["inter_node.p2p[1]"] == "an earlier run's note"
    assert profile.meta["inter_zone.p2p[2]"] == "the slowest pair"
    assert "the links between nodes" in result.stderr


def test_a_node_that_does_not_write_stops_after_the_links(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another node writes: nothing measured here, nothing written, exit 0."""
    fakes = Fakes()
    fakes.install(monkeypatch)
    _under_torchrun(monkeypatch, 0)
    output = tmp_path / "p.json"
    assert _measure(write_spec(tmp_path), output, "--zone", "zone-b").exit_code == 0
    assert fakes.points == [] and not output.exists()


def test_a_refused_zone_under_torchrun_is_published_for_every_node(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The refusal goes to the others (who refuse alike) instead of leaving them waiting;
    its text has no `hetc: ` of its own, the node's name goes there."""
    fake = _under_torchrun(monkeypatch, Filed())
    result = _measure(write_spec(tmp_path), tmp_path / "p.json", "--zone", "zone-d")
    assert result.exit_code == 1
    (me,) = fake.published
    assert me.problem is not None and me.problem[0].startswith("--zone 'zone-d' is not a zone")
    assert me.device is None


def test_merging_keeps_the_file_links_the_new_profile_lacks() -> None:
    """A link is replaced only by one of the same zones, peer and devices per node."""
    link = MeasuredLink(
        source="a", target="b", peer="X", collective="p2p", devices=1, fit=_fit(1e9)
    )
    base = LayerProfile(model="m", device="X", precision="fp32", seq_len=1, times={})
    old = replace(base, links=(link, replace(link, devices=2)), meta={"x": "old", "y": "kept"})
    new = replace(base, links=(replace(link, fit=_fit(2e9)),), meta={"x": "new"})
    both = merged(old, new)
    assert [(li.devices, li.fit.peak) for li in both.links] == [(2, 1e9), (1, 2e9)]
    assert both.meta == {"x": "new", "y": "kept"}


def _torchrun(
    spec: Path, output: Path, zones: list[str], per_node: int, *options: str
) -> list[subprocess.CompletedProcess[str]]:
    """One torchrun per "node" on this host, met by a c10d rendezvous; each node's output."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    launch = [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(len(zones))]
    launch += ["--nproc-per-node", str(per_node), "--rdzv-backend", "c10d", "--rdzv-id", "t"]
    launch += ["--rdzv-endpoint", f"127.0.0.1:{port}", "-m", "hetc", "profile", "measure"]
    launch += [str(spec), "--device", "LOCAL-CPU", "-o", str(output), "--warmup", "1"]
    launch += ["--repeats", "3", "--sizes", "4KiB,64KiB,1MiB", *options]
    launches = [
        subprocess.Popen(
            [*launch, "--zone", zone],
            env={**os.environ, "PYTHONPATH": os.getcwd()},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for zone in zones
    ]
    return [
        subprocess.CompletedProcess(p.args, p.wait(timeout=300), p.communicate()[0], "")
        for p in launches
    ]


@pytest.mark.slow  # two torchruns, four processes importing torch
def test_two_nodes_in_two_zones_of_a_region_measure_their_link(tmp_path: Path) -> None:
    """2 nodes x 2 processes in zone-a and zone-b: the profile holds inter_zone.p2p[1] and
    [2] at the sizes asked for, sane rates, the same fit as a zone-a/zone-b link, the notes;
    LinkPricer prices that hop by the link (by the class fit without it), and a hop to the
    other region by the spec."""
    spec, output = write_spec(tmp_path), tmp_path / "p.json"
    runs = _torchrun(spec, output, ["zone-a", "zone-b"], 2, "--tp", "1", "--microbatch", "1",
                     "--network-devices", "1")  # fmt: skip
    assert [r.returncode for r in runs] == [0, 0], [r.stdout for r in runs]
    written = [r.stdout for r in runs if "wrote" in r.stdout]
    assert len(written) == 1
    assert "writes the profile of LOCAL-CPU" in "".join(r.stdout for r in runs)
    profile = read_profile(output)
    assert profile.points() == [(1, 1)]
    fits = profile.network["inter_zone"]["p2p"]
    assert sorted(fits) == [1, 2] and "inter_node" not in profile.network
    for flows, fit in fits.items():
        assert [b for b, _ in fit.points] == [float(message_bytes("p2p", s, 2)) for s in SIZES]
        rates = [r for _, r in fit.points]
        assert all(0 < r < 1e12 for r in rates) and rates[-1] > rates[0]
        (link,) = [li for li in profile.links if li.devices == flows]
        assert (link.source, link.target, link.peer, link.fit) == (
            "zone-a", "zone-b", "LOCAL-CPU", fit
        )  # fmt: skip
    assert "slowest peak of 1 node pair" in str(profile.meta["inter_zone.p2p[2]"])
    assert "zone-a" in str(profile.meta["links[zone-a -> zone-b, LOCAL-CPU, 1 per node]"])
    typed = load(spec)
    zones = {z.name: z for z in typed.zones}
    ends = [End(zones[z], "LOCAL-CPU", 1e10) for z in ("zone-a", "zone-b", "zone-c")]
    pricer = LinkPricer(typed, {"LOCAL-CPU": profile})
    hop = pricer.between_nodes(ends[1], ends[0], 2)
    assert hop.measured and "links[zone-a -> zone-b, LOCAL-CPU, 2 per node]" in hop.source
    assert hop.link.bandwidth == fits[2].peak / 2
    classed = LinkPricer(typed, {"LOCAL-CPU": replace(profile, links=())})
    assert classed.between_nodes(ends[0], ends[1], 2).source.endswith("inter_zone.p2p[2]")
    assert not pricer.between_nodes(ends[0], ends[2], 2).measured


@pytest.mark.slow  # two torchruns
def test_a_zone_the_spec_lacks_on_one_node_refuses_every_node(tmp_path: Path) -> None:
    """One node names zone-d: both nodes exit 1 at once with the same line, nothing
    written (the others do not wait for it in a collective)."""
    spec, output = write_spec(tmp_path), tmp_path / "p.json"
    runs = _torchrun(spec, output, ["zone-a", "zone-d"], 1)
    assert [r.returncode for r in runs] == [1, 1]
    for run in runs:
        assert "--zone 'zone-d' is not a zone of" in run.stdout
        assert "(its zones: zone-a, zone-b, zone-c)" in run.stdout
    assert not output.exists()
