"""bench/plan_quality.py and the measured world it plans the scenarios in."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from hetc.costmodel.profile import BandwidthFit, fit_bandwidth, read_profile
from hetc.schema import check_file

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from measured_world import SIZES, as_measured, hockney, link_fit  # noqa: E402


def test_hockney_recovers_a_constant_rate_and_a_startup_cost() -> None:
    """A fit flat at 4 GB/s is 4 GB/s with no latency; a fit rising with size (small messages
    slower) is a latency above zero and a bandwidth near its rate at 1 GB."""
    flat = BandwidthFit(coefficients=(0.0, 0.0, 4.0), peak=4e9, sizes=(1.0, 1e12))
    latency, bandwidth = hockney(flat)
    assert latency == pytest.approx(0.0, abs=1e-12)
    assert bandwidth == pytest.approx(4e9)
    rising = BandwidthFit(coefficients=(0.0, 0.2, 1.0), peak=4e9, sizes=(1e6, 1e9))
    latency, bandwidth = hockney(rising)
    assert latency > 0
    assert rising.rate(1e6) < bandwidth <= rising.rate(1e9) * 1.2


def test_a_scenario_in_the_measured_world_trains_the_build_its_profiles_timed() -> None:
    """opt350m-128a100 with the shipped A100 profile: Sailor's OPT-350 architecture, the
    intra-zone link fitted to the profile's fits for every flow count, the pool's NIC from
    the four-flow fit."""
    spec = check_file(str(ROOT / "bench" / "scenarios" / "opt350m-128a100.yaml")).spec
    assert spec is not None
    profile = read_profile(ROOT / "examples" / "profiles" / "opt-350--a100-40gb.json")
    measured, profiles = as_measured(spec, [profile])
    assert [p.device for p in profiles] == ["A100-40GB"]
    assert measured.model.vocab == 50304 and not measured.model.tied_embeddings
    four = profile.bandwidth("inter_node", "p2p", 4)
    assert four is not None
    nic = hockney(four)[1]
    latency, bandwidth = link_fit(profile.network["inter_node"]["p2p"], nic)
    assert measured.network.intra_zone.bandwidth == pytest.approx(bandwidth)
    assert measured.network.intra_zone.latency == pytest.approx(latency)
    assert measured.zones[0].pools[0].nic_bandwidth == pytest.approx(nic)


def test_a_link_fit_recovers_the_link_model_that_made_the_curves() -> None:
    """Curves made by the spec's link model (0.3 ms + bytes / min(2 GB/s, 6 GB/s / n) for
    n = 1, 2, 4 flows) are fitted back to 0.3 ms and 2 GB/s; fitted to one flow alone the
    latency would be the same here, but not where more flows run with less start-up."""
    latency, bandwidth, nic = 3e-4, 2e9, 6e9
    fits = {}
    for n in (1, 2, 4):
        share = min(bandwidth, nic / n)
        points = [(size, n * size / (latency + size / share)) for size in SIZES]
        fits[n] = fit_bandwidth(points)
    fitted = link_fit(fits, nic)
    assert fitted[0] == pytest.approx(latency, rel=0.15)
    assert fitted[1] == pytest.approx(bandwidth, rel=0.05)


def test_the_bench_runs_and_ends_with_the_worst_ratio() -> None:
    """One scenario end to end with the shipped profiles: both plans found, the ratio printed."""
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "plan_quality.py"),
            "--scenario",
            "opt350m-128a100",
            "--profiles",
            str(ROOT / "examples" / "profiles"),
            "--no-held-out",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("worst ratio: ")]
    assert len(lines) == 1, done.stdout
    assert float(lines[0].split()[2]) > 0
    assert "opt350m-128a100" in done.stdout
