"""`hetc profile import`: Sailor's published measurements converted into hetc profiles.

The converted numbers feed the planner, so every one is checked against the source JSON,
loaded here independently of the importer: times exactly, memory as floats x 2 bytes (x the
microbatch for activations), the intra-node fits exactly, and the same-zone inter-node fits
exactly (the slowest-peak zone per size). Error cases use small synthetic trees, so they run
without the measurements; the shipped example profiles are checked to be what the importer
produces today, so they cannot go stale.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

import pytest
from typer.testing import CliRunner
from workspace import SAILOR_DATA

from hetc.catalog import architecture_from_mapping, models
from hetc.cli import app
from hetc.costmodel.profile import LayerProfile, read_profile, write_profile
from hetc.costmodel.published import (
    SAILOR_BUILDS,
    Imported,
    NotThisModel,
    architecture_spelling,
    grouped_warnings,
    import_sailor_profile,
    import_sailor_tree,
    profile_file_name,
    run_import_command,
)
from hetc.schema.structure import conforms

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ROOT / "examples" / "profiles"
PROFILES = sorted((SAILOR_DATA / "layer-profiles").glob("*/*/profile.json"))
needs_data = pytest.mark.skipif(
    not PROFILES, reason="Sailor measurements not present (set HETC_SAILOR_DATA)"
)
runner = CliRunner()

EXPECTED_MODEL = {
    "OPT-350": "OPT-350",  # a Megatron build of OPT-350M: recorded with its own architecture
    "GPT-Neo-2.7": "GPT-Neo-2.7",  # likewise of GPT-Neo-2.7B
    "LLAMA-3-8": "LLAMA-3-8",  # Sailor's has no GQA, 35 layers: not the catalog's Llama-3-8B
    "OPT-30": "OPT-30",  # no catalog entry
}
EXPECTED_DEVICE = {
    "A100-40": "A100-40GB",
    "A100-80": "A100-80GB",
    "GH-96": "GH200",
    "V100-16": "V100-16GB",
    "Titan-RTX": "Titan-RTX",
    "RTX-2080": "RTX-2080",
    "RTX-3090": "RTX-3090",
}
KNOWN_BAD = {("GPT-Neo-2.7", "GH-96"): ("OPT-350", "GH-96")}
"""Sailor files that are a copy of another model's profile: (the copy) -> (the original)."""


def _json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def _echo_to(lines: list[str]) -> Any:
    def echo(message: str = "", **_: object) -> None:
        lines.append(message)

    return echo


# -- every Sailor file, round-tripped ----------------------------------------------------------


def _check_against_sources(read: LayerProfile, path: Path) -> None:
    """Every number of `read` equals the source files' (loaded here, not by the importer)."""
    model, gpu = path.parent.parent.name, path.parent.name
    times = _json(path)
    assert (read.model, read.device) == (EXPECTED_MODEL[model], EXPECTED_DEVICE[gpu])
    assert (read.precision, read.seq_len) == ("fp16", 2048)

    assert {str(m) for m in read.times} == set(times)
    for m, by_tp in times.items():
        assert {str(t) for t in read.times[int(m)]} == set(by_tp)
        for t, layers in by_tp.items():
            assert {str(i) for i in read.times[int(m)][int(t)]} == set(layers)
            for i, value in layers.items():
                forward, backward, update = read.times[int(m)][int(t)][int(i)]
                assert (forward, backward) == tuple(value[:2])
                assert update == pytest.approx(value[2] * _share(model, int(t), int(i)))

    memory = _json(SAILOR_DATA / "layer-memory.json")[model]
    timed_tps = {t for by_tp in times.values() for t in by_tp}
    assert {str(t) for t in read.memory} == timed_tps & set(memory)
    for t, layers in read.memory.items():
        assert {str(i) for i in layers} == set(memory[str(t)])
        for i, entry in layers.items():
            source = memory[str(t)][str(i)]
            assert entry.weight_bytes == source["params_floats"] * 2
            assert entry.activation_bytes == {
                int(m): source["act_mem_floats"] * 2 * int(m) for m in times
            }

    intra = _json(SAILOR_DATA / "network" / "intra_node_bandwidths.json")[gpu]
    fits = read.network["intra_node"]["all_reduce"]
    assert {str(n) for n in fits} == set(intra)
    for n, (coefficients, peak) in intra.items():
        assert fits[int(n)].coefficients == tuple(coefficients)
        assert fits[int(n)].peak == peak

    multizone = _json(SAILOR_DATA / "network" / "multizone_bandwidths_het.json")
    slowest: dict[str, dict[str, tuple[float, str, str, list[float]]]] = {}
    links = set()
    for source, senders in multizone.items():
        for n, targets in senders.get(gpu, {}).items():
            for target, receivers in targets.items():
                for receiver, by_count in receivers.items():
                    entry = by_count.get(n)
                    if entry is None:
                        continue
                    links.add((source, target, EXPECTED_DEVICE.get(receiver, receiver), int(n)))
                    if receiver != gpu:
                        continue
                    scope = (
                        "inter_node"
                        if source == target
                        else "inter_zone"
                        if source[:-2] == target[:-2]
                        else "inter_region"
                    )
                    kept = slowest.setdefault(scope, {}).get(n)
                    if kept is None or (entry[1], source, target) < kept[:3]:
                        slowest[scope][n] = (entry[1], source, target, entry[0])
    assert {(k.source, k.target, k.peer, k.devices) for k in read.links} == links
    for scope, by_n in slowest.items():
        p2p = read.network[scope]["p2p"]
        assert {str(n) for n in p2p} == set(by_n)
        for n, (peak, source, target, coefficients) in by_n.items():
            assert (p2p[int(n)].coefficients, p2p[int(n)].peak) == (tuple(coefficients), peak)
            assert f"{n} per VM: {source} -> {target}" in str(read.meta[scope])

    origin = str(read.meta["origin"])
    assert origin.startswith("Sailor's published measurements: ")
    for name in (f"layer-profiles/{model}/{gpu}/profile.json", "layer-memory.json"):
        assert name in origin
    if model in SAILOR_BUILDS:
        assert read.architecture is not None
        arch = architecture_from_mapping(read.architecture)
        parts = arch.parameter_breakdown()
        layers = _json(SAILOR_DATA / "layer-memory.json")[model]["1"]
        last = str(len(layers) - 1)
        assert parts["embedding"] == layers["0"]["params_floats"]
        assert arch.layer_parameters() == layers["1"]["params_floats"]
        assert parts["head"] == layers[last]["params_floats"]
    else:
        assert read.architecture is None


def _share(model: str, tp: int, layer: int) -> float:
    """A layer's part of the one optimizer step Sailor's update column repeats: its parameters
    over those of the embedding, one block and the output layers (layer-memory.json)."""
    memory = _json(SAILOR_DATA / "layer-memory.json")[model]
    near = min((int(t) for t in memory), key=lambda t: (abs(t - tp), t))
    rows = memory[str(near)]
    last = str(len(rows) - 1)
    mini = sum(rows[i]["params_floats"] for i in ("0", "1", last))
    return float(rows[str(layer)]["params_floats"] / mini)


@needs_data
@pytest.mark.parametrize("path", PROFILES, ids=lambda p: f"{p.parent.parent.name}/{p.parent.name}")
def test_every_sailor_profile_round_trips(path: Path, tmp_path: Path) -> None:
    key = (path.parent.parent.name, path.parent.name)
    if key in KNOWN_BAD:
        original = SAILOR_DATA / "layer-profiles" / KNOWN_BAD[key][0] / KNOWN_BAD[key][1]
        assert _json(path) == _json(original / "profile.json")
        with pytest.raises(NotThisModel, match=r"its content equals layer-profiles/OPT-350/GH"):
            import_sailor_profile(path)
        return
    imported = import_sailor_profile(path)
    target = tmp_path / profile_file_name(imported.profile)
    write_profile(imported.profile, target)
    _check_against_sources(read_profile(target), path)


@needs_data
def test_tree_import_writes_every_good_profile_and_skips_the_copy(tmp_path: Path) -> None:
    out: list[str] = []
    code = run_import_command(SAILOR_DATA, tmp_path / "all", echo=_echo_to(out))
    assert code == 0, out
    expected = {
        f"{EXPECTED_MODEL[p.parent.parent.name].lower()}--"
        f"{EXPECTED_DEVICE[p.parent.name].lower()}.json"
        for p in PROFILES
        if (p.parent.parent.name, p.parent.name) not in KNOWN_BAD
    }
    assert {p.name for p in (tmp_path / "all").iterdir()} == expected
    assert any("skipped" in line and "GPT-Neo-2.7/GH-96" in line for line in out)
    for written in (tmp_path / "all").iterdir():
        source = read_profile(written).meta["sailor_names"]
        assert isinstance(source, dict)
        path = SAILOR_DATA / "layer-profiles" / source["model"] / source["device"] / "profile.json"
        _check_against_sources(read_profile(written), path)


@needs_data
def test_shipped_profiles_are_what_the_importer_writes_today(tmp_path: Path) -> None:
    shipped = sorted(SHIPPED.glob("*.json"))
    assert [p.name for p in shipped] == [
        "gpt-neo-2.7--a100-40gb.json",
        "gpt-neo-2.7--v100-16gb.json",
        "opt-350--a100-40gb.json",
        "opt-350--v100-16gb.json",
    ]
    for path in shipped:
        names = _json(path)["meta"]["sailor_names"]
        source = SAILOR_DATA / "layer-profiles" / names["model"] / names["device"] / "profile.json"
        write_profile(import_sailor_profile(source).profile, tmp_path / path.name)
        assert (tmp_path / path.name).read_bytes() == path.read_bytes(), (
            f"{path} is stale: rerun `hetc profile import {source} -o examples/profiles/`"
        )


@needs_data
def test_cli_imports_one_file_into_a_folder(tmp_path: Path) -> None:
    source = SAILOR_DATA / "layer-profiles" / "OPT-350" / "A100-40" / "profile.json"
    result = runner.invoke(app, ["profile", "import", str(source), "--output", str(tmp_path)])
    assert result.exit_code == 0, result.output
    written = tmp_path / "opt-350--a100-40gb.json"
    assert f"wrote {written}" in result.stdout
    assert "not the catalog" not in result.stderr
    assert "Sailor's OPT-350 is the catalog's OPT-350M with a vocabulary padded" in result.stderr
    _check_against_sources(read_profile(written), source)


# -- the catalog spelling ------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(models()))
def test_architecture_spelling_reads_back_as_the_catalog_model(name: str) -> None:
    arch = models()[name].architecture
    spelled = architecture_spelling(arch)
    assert conforms(spelled, "properties", "model", "properties", "architecture")
    assert architecture_from_mapping(spelled) == arch


# -- synthetic trees: names, zones and errors ------------------------------------------------------


def _tree(
    root: Path,
    *,
    model: str = "TOY",
    gpu: str = "A100-40",
    layers: int = 3,
    memory_layers: int = 3,
) -> Path:
    """A measurements folder with one profile: mbs 1, 2 x TP 1, 2; memory at TP 1, 4."""
    times = {
        str(m): {
            str(t): {str(i): [0.1 * m / t, 0.2 * m / t, 0.01] for i in range(layers)}
            for t in (1, 2)
        }
        for m in (1, 2)
    }
    path = root / "layer-profiles" / model / gpu / "profile.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(times), encoding="utf-8")
    counts = {"params_floats": 1000, "act_mem_floats": 50, "act_input_floats": 7}
    memory = {model: {str(t): {str(i): counts for i in range(memory_layers)} for t in (1, 4)}}
    (root / "layer-memory.json").write_text(json.dumps(memory), encoding="utf-8")
    (root / "network").mkdir()
    fit = [[0.5, 1.5, 2.5], 3e9]
    (root / "network" / "intra_node_bandwidths.json").write_text(
        json.dumps({gpu: {"2": fit}}), encoding="utf-8"
    )
    zones = {
        "zone-b": {gpu: {"1": {"zone-b": {gpu: {"1": [[0, 0, 1.0], 1e9]}}}}},
        "zone-a": {
            gpu: {
                "1": {"zone-a": {gpu: {"1": [[0, 0, 2.0], 2e9]}}},
                "8": {"zone-b": {gpu: {"8": [[0, 0, 9.0], 9e9]}}},  # cross-zone only
            }
        },
    }
    (root / "network" / "multizone_bandwidths_het.json").write_text(
        json.dumps(zones), encoding="utf-8"
    )
    return path


def test_synthetic_tree_converts_every_number(tmp_path: Path) -> None:
    path = _tree(tmp_path / "m")
    imported = import_sailor_profile(path)
    write_profile(imported.profile, tmp_path / "p.json")
    read = read_profile(tmp_path / "p.json")
    forward, backward, update = read.times[2][2][1]
    assert (forward, backward) == (0.1, 0.2)
    assert update == pytest.approx(0.01 / 3), "one of three equal layers of the profiled step"
    assert set(read.memory) == {1}, "TP 2 is not in the memory file, TP 4 not timed"
    assert read.memory[1][2].weight_bytes == 2000
    assert read.memory[1][2].activation_bytes == {1: 100, 2: 200}
    assert read.network["intra_node"]["all_reduce"][2].coefficients == (0.5, 1.5, 2.5)
    p2p = read.network["inter_node"]["p2p"]
    assert set(p2p) == {1}, "the 8-GPU entry is cross-zone"
    assert (p2p[1].coefficients, p2p[1].peak) == ((0, 0, 1.0), 1e9), "the slowest zone"
    assert "1 per VM: zone-b -> zone-b" in str(read.meta["inter_node"])
    across = read.network["inter_zone"]["p2p"]
    assert set(across) == {8} and across[8].peak == 9e9, "zone-a and zone-b: region `zone`"
    assert {(k.source, k.target, k.devices) for k in read.links} == {
        ("zone-a", "zone-a", 1),
        ("zone-a", "zone-b", 8),
        ("zone-b", "zone-b", 1),
    }
    assert (read.model, read.device, read.architecture) == ("TOY", "A100-40GB", None)
    assert any("'TOY' has no catalog entry" in w for w in imported.warnings)
    assert any("TP [2]" in w for w in imported.warnings)


def test_unknown_gpu_keeps_sailors_name_and_says_so(tmp_path: Path) -> None:
    path = _tree(tmp_path, gpu="TPU-v9")
    out: list[str] = []
    assert run_import_command(path, tmp_path / "p.json", echo=_echo_to(out)) == 0
    assert read_profile(tmp_path / "p.json").device == "TPU-v9"
    assert any("GPU 'TPU-v9' has no catalog entry" in line for line in out)


def test_a_relative_path_finds_its_measurements_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _tree(tmp_path)
    monkeypatch.chdir(tmp_path / "layer-profiles")
    imported = import_sailor_profile(Path("TOY/A100-40/profile.json"))
    assert set(imported.profile.memory) == {1}
    assert "layer-profiles/TOY/A100-40/profile.json, layer-memory.json" in str(
        imported.profile.meta["origin"]
    )


def test_a_model_whose_blocks_differ_from_the_catalog_keeps_its_name(tmp_path: Path) -> None:
    """26 layers like OPT-350M, but blocks of 1,000 parameters: not the catalog's model."""
    path = _tree(tmp_path, model="OPT-350", layers=26, memory_layers=26)
    imported = import_sailor_profile(path)
    assert (imported.profile.model, imported.profile.architecture) == ("OPT-350", None)
    assert any("not the catalog's OPT-350M" in w for w in imported.warnings)


def test_a_profile_with_another_layer_count_than_its_model_is_refused(tmp_path: Path) -> None:
    path = _tree(tmp_path / "m", layers=5, memory_layers=3)
    out: list[str] = []
    assert run_import_command(path, tmp_path / "p.json", echo=_echo_to(out)) == 1
    assert f"{path}: times 5 layers" in out[0] and "not a TOY profile" in out[0]
    out.clear()
    assert run_import_command(tmp_path / "m", tmp_path / "all", echo=_echo_to(out)) == 0
    assert any(line.startswith("hetc: warning: skipped") for line in out)
    assert not any((tmp_path / "all").iterdir())


def test_malformed_json_is_one_line_naming_the_file(tmp_path: Path) -> None:
    path = _tree(tmp_path)
    path.write_text('{"1": {"1": ', encoding="utf-8")
    result = runner.invoke(app, ["profile", "import", str(path), "-o", str(tmp_path / "p.json")])
    assert result.exit_code == 1
    assert result.stderr.startswith(f"hetc: {path}: not valid JSON")
    assert len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "p.json").exists()


def test_a_missing_layer_memory_entry_names_the_layer(tmp_path: Path) -> None:
    path = _tree(tmp_path)
    memory = _json(tmp_path / "layer-memory.json")
    del memory["TOY"]["1"]["1"]
    (tmp_path / "layer-memory.json").write_text(json.dumps(memory), encoding="utf-8")
    out: list[str] = []
    assert run_import_command(path, tmp_path / "p.json", echo=_echo_to(out)) == 1
    assert "layer-memory.json[TOY][1]: no entry for layer [1]" in out[0]


def test_a_missing_count_names_the_field(tmp_path: Path) -> None:
    path = _tree(tmp_path)
    memory = _json(tmp_path / "layer-memory.json")
    memory["TOY"]["1"]["2"] = {"params_floats": 10}
    (tmp_path / "layer-memory.json").write_text(json.dumps(memory), encoding="utf-8")
    with pytest.raises(ValueError, match=r"\[TOY\]\[1\]\[2\]\.act_mem_floats: expected a non-neg"):
        import_sailor_profile(path)


def test_a_malformed_bandwidth_fit_says_what_is_expected(tmp_path: Path) -> None:
    path = _tree(tmp_path)
    (tmp_path / "network" / "intra_node_bandwidths.json").write_text(
        json.dumps({"A100-40": {"2": [[1, 2], 3e9]}}), encoding="utf-8"
    )
    out: list[str] = []
    assert run_import_command(path, tmp_path / "p.json", echo=_echo_to(out)) == 1
    assert "[A100-40][2]: expected [[a, b, c], peak_bytes_per_s]" in out[0]


def test_missing_network_files_are_warned_about_not_fatal(tmp_path: Path) -> None:
    path = _tree(tmp_path)
    (tmp_path / "network" / "multizone_bandwidths_het.json").unlink()
    imported = import_sailor_profile(path)
    assert "inter_node" not in imported.profile.network
    assert any("multizone_bandwidths_het.json not found" in w for w in imported.warnings)


def test_missing_source_is_an_environment_error(tmp_path: Path) -> None:
    result = runner.invoke(
        app, ["profile", "import", str(tmp_path / "nope.json"), "-o", str(tmp_path / "p.json")]
    )
    assert result.exit_code == 4
    assert "no such file or folder" in result.stderr and "To fix:" in result.stderr


def test_a_folder_without_profiles_is_an_environment_error(tmp_path: Path) -> None:
    out: list[str] = []
    assert run_import_command(tmp_path, tmp_path / "out", echo=_echo_to(out)) == 4
    assert "layer-profiles/MODEL/GPU/profile.json: not found" in out[0]


def test_a_file_outside_layer_profiles_is_refused(tmp_path: Path) -> None:
    stray = tmp_path / "profile.json"
    stray.write_text("{}", encoding="utf-8")
    out: list[str] = []
    assert run_import_command(stray, tmp_path / "p.json", echo=_echo_to(out)) == 1
    assert "expected Sailor's layer-profiles/MODEL/GPU/profile.json" in out[0]


def test_a_tree_into_a_file_is_refused(tmp_path: Path) -> None:
    _tree(tmp_path / "m")
    (tmp_path / "file").write_text("", encoding="utf-8")
    out: list[str] = []
    assert run_import_command(tmp_path / "m", tmp_path / "file", echo=_echo_to(out)) == 2
    assert "give --output a folder" in out[0]


def test_an_unwritable_output_is_an_environment_error(tmp_path: Path) -> None:
    path = _tree(tmp_path)
    out: list[str] = []
    target = tmp_path / "no" / "such" / "p.json"
    assert run_import_command(path, target, echo=_echo_to(out)) == 4
    assert "cannot write" in out[-1] and "To fix:" in out[-1]


def test_tree_import_returns_every_profile(tmp_path: Path) -> None:
    _tree(tmp_path)
    imported, skipped = import_sailor_tree(tmp_path)
    assert [i.profile.model for i in imported] == ["TOY"] and skipped == []


def test_grouped_warnings_name_each_warning_once_with_its_models_and_devices() -> None:
    """A warning shared by profiles is one line: models with the same devices share a list."""
    profile = cast(LayerProfile, None)

    def one(model: str, device: str, *warnings: str) -> Imported:
        return Imported(
            profile=profile, sailor_model=model, sailor_device=device, warnings=warnings
        )

    lines = grouped_warnings(
        [
            one("M", "A", "about M", "about A"),
            one("M", "B", "about M"),
            one("N", "A", "about N", "about A"),
            one("K", "B", "about A"),
        ]
    )
    assert lines == ["M (A, B): about M", "M, N (A); K (B): about A", "N (A): about N"]


@needs_data
def test_tree_import_prints_each_distinct_warning_once(tmp_path: Path) -> None:
    """Sailor's tree: one line per distinct warning, each naming every profile it concerns."""
    imported, _skipped = import_sailor_tree(SAILOR_DATA)
    raw = {(i.sailor_model, i.sailor_device, w) for i in imported for w in i.warnings}
    result = runner.invoke(app, ["profile", "import", str(SAILOR_DATA), "-o", str(tmp_path)])
    assert result.exit_code == 0, result.output
    lines = [
        line.removeprefix("hetc: warning: ")
        for line in result.stderr.splitlines()
        if line.startswith("hetc: warning: ") and not line.startswith("hetc: warning: skipped")
    ]
    texts = {w for _m, _d, w in raw}
    assert len(lines) == len(texts) < len(raw)
    for line in lines:
        warning = next(w for w in texts if line.endswith(f"): {w}"))
        concerned = {(m, d) for m, d, w in raw if w == warning}
        assert all(m in line and d in line for m, d in concerned), line
