"""The profile format's version 3 sections, `out_of_memory` and `environment`: written and
read back exactly, older versions still read, and malformed sections refused by key path."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hetc.costmodel.profile import (
    HETC_VERSION,
    LayerProfile,
    ProfileError,
    parse_profile,
    read_profile,
    write_profile,
)

TIMES = {str(i): [1e-3, 2e-3, 1e-4] for i in range(4)}
ENVIRONMENT = {
    "torch": "2.13.0",
    "cuda": None,
    "driver": None,
    "device_name": "AMD EPYC",
    "host": "vm",
    "threads": 1,
}


def _document(**fields: object) -> dict[str, object]:
    return {
        "format": "hetc-layer-profile",
        "version": HETC_VERSION,
        "model": "custom",
        "device": "CPU-A",
        "precision": "fp32",
        "seq_len": 32,
        "units": "s",
        "times": {"1": {"1": TIMES, "2": TIMES}},
        **fields,
    }


def test_out_of_memory_and_environment_round_trip(tmp_path: Path) -> None:
    """Written as microbatch -> sorted TP degrees and the environment as given; read back to
    the same profile, and `ran_out_of_memory` answers from it."""
    parsed = parse_profile(
        _document(out_of_memory={"2": [2, 1], "4": [1]}, environment=ENVIRONMENT)
    )
    assert parsed.out_of_memory == {2: frozenset({1, 2}), 4: frozenset({1})}
    assert parsed.environment == ENVIRONMENT
    assert parsed.ran_out_of_memory(2, 2) and not parsed.ran_out_of_memory(1, 1)
    write_profile(parsed, tmp_path / "p.json")
    written = json.loads((tmp_path / "p.json").read_text())
    assert written["version"] == 3 and written["out_of_memory"] == {"2": [1, 2], "4": [1]}
    again = read_profile(tmp_path / "p.json")
    assert (again.out_of_memory, again.environment) == (parsed.out_of_memory, ENVIRONMENT)


def test_version_2_is_still_read_with_no_environment() -> None:
    """A version 2 file has neither section: nothing out of memory, an empty environment."""
    parsed = parse_profile(_document(version=2))
    assert parsed.out_of_memory == {} and parsed.environment == {}
    assert parsed.points() == [(1, 1), (1, 2)]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"out_of_memory": {"1": [2]}}, r"out_of_memory\[1\]: TP 2 is also in `times`"),
        ({"out_of_memory": {"1": "2"}}, r"out_of_memory\[1\]: expected a list of TP degrees"),
        ({"out_of_memory": {"x": [1]}}, r"out_of_memory: key 'x' is not a positive integer"),
        ({"environment": {"threads": 1.5}}, r"environment.threads: expected a string"),
        ({"environment": []}, r"environment: expected an object"),
        ({"version": 4}, r"version 4 is not 'hetc-layer-profile' version 1 or 2 or 3"),
    ],
)
def test_malformed_sections_are_refused_by_key_path(
    fields: dict[str, object], message: str
) -> None:
    with pytest.raises(ProfileError, match=message):
        parse_profile(_document(**fields), source="p.json")


def test_a_profile_without_the_new_sections_writes_none_of_them(tmp_path: Path) -> None:
    """Imported profiles (no environment, nothing out of memory) keep their old shape."""
    times = {i: (1e-3, 2e-3, 1e-4) for i in range(4)}
    profile = LayerProfile(
        model="custom", device="CPU-A", precision="fp32", seq_len=32, times={1: {1: times}}
    )
    write_profile(profile, tmp_path / "p.json")
    written = json.loads((tmp_path / "p.json").read_text())
    assert "out_of_memory" not in written and "environment" not in written
