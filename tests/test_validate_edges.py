"""The smaller input cases of issue 29, each reported as what it is, where it stands: negative
quantities, every duplicated key, a second YAML document, names that display as other text,
zones named like another zone's region; and compile naming the node scripts it wrote.

Positions are checked against the text itself (the oracle: the column where the offending
token starts, found by searching the line). Each test failed before the fix (checked on the
main checkout): "cannot read ... as price_rate", one duplicate at `(root)`, "YAML syntax: but
found another document", no warning, `node<index>.sh`."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hetc.cli import app
from hetc.schema import check_text

runner = CliRunner()
ROOT = Path(__file__).resolve().parent.parent
BASE = """\
version: 1
name: edges
model: {{preset: Llama-7B}}
training: {{global_batch_size: 16}}
zones:
  - name: a
    region: r
    pools: [{{device: A100-40GB, quota: 8, gpus_per_node: 4{pool}}}]
{extra}"""


def _lines(text: str) -> list[str]:
    """`LINE:COL: path: message` of every diagnostic of `text` (warnings marked)."""
    result = check_text(text, "s.yaml")
    return [
        f"{d.line}:{d.column}: {d.path}: {'warning: ' if d.severity == 'warning' else ''}"
        f"{d.message}"
        for d in result.diagnostics
    ]


def _at(text: str, token: str) -> str:
    """`LINE:COL` of the first `token` in `text`: the oracle for positions."""
    offset = text.index(token)
    before = text[:offset]
    return f"{before.count(chr(10)) + 1}:{offset - (before.rfind(chr(10)) + 1) + 1}"


@pytest.mark.parametrize(
    ("pool", "extra", "token", "path", "message"),
    [
        (
            ", price: -3 USD/h",
            "",
            "-3 USD/h",
            "zones[0].pools[0].price",
            "'-3 USD/h' must not be negative: a price rate is zero or more, for example"
            " '3.67 USD/h'",
        ),
        (
            ", price: -1",
            "",
            "-1",
            "zones[0].pools[0].price",
            "-1 must not be negative: a price rate is zero or more",
        ),
        (
            ", nic_bandwidth: -100Gbps",
            "",
            "-100Gbps",
            "zones[0].pools[0].nic_bandwidth",
            "'-100Gbps' must not be negative: a bandwidth is positive, for example '100Gbps'",
        ),
        (
            "",
            "network:\n  inter_zone: {bandwidth: -1Gbps}\n",
            "-1Gbps",
            "network.inter_zone.bandwidth",
            "'-1Gbps' must not be negative: a bandwidth is positive",
        ),
        (
            "",
            "network:\n  egress_price: {inter_region: -0.02 USD/GB}\n",
            "-0.02 USD/GB",
            "network.egress_price.inter_region",
            "'-0.02 USD/GB' must not be negative: a price per byte is zero or more",
        ),
    ],
)
def test_a_negative_quantity_must_not_be_negative(
    pool: str, extra: str, token: str, path: str, message: str
) -> None:
    """A negative price or bandwidth, with or without a unit, says so at its value."""
    text = BASE.format(pool=pool, extra=extra)
    (line,) = _lines(text)
    assert line.startswith(f"{_at(text, token)}: {path}: {message}")


def test_every_duplicate_key_is_reported_at_its_own_position_and_path() -> None:
    """Three keys given twice, at three depths: three errors, each at the second key, with
    its dotted path and the first key's position."""
    text = (
        "version: 1\nname: a\nname: b\nmodel: {preset: OPT-350M}\n"
        "training: {global_batch_size: 16, seq_len: 1024, seq_len: 2048}\n"
        "zones:\n  - name: z\n    region: r\n"
        "    pools: [{device: T4, quota: 2, gpus_per_node: 2, quota: 4}]\n"
    )
    assert _lines(text) == [
        "3:1: name: key 'name' is given twice in this mapping (first at line 2, column 1):"
        " each key may appear once",
        "5:50: training.seq_len: key 'seq_len' is given twice in this mapping (first at line 5,"
        " column 35): each key may appear once",
        "9:54: zones[0].pools[0].quota: key 'quota' is given twice in this mapping (first at"
        " line 9, column 26): each key may appear once",
    ]
    assert _at(text, "seq_len: 2048") == "5:50" and _at(text, "quota: 4") == "9:54"


def test_a_second_yaml_document_is_named_at_its_start() -> None:
    """A file of two documents: one error at the second `---`, saying what it is in full."""
    text = BASE.format(pool="", extra="") + "---\nversion: 1\n"
    (line,) = _lines(text)
    assert line == (
        f"{_at(text, '---')}: (root): a second YAML document starts here: a spec file holds one"
        " document (delete this `---` and what follows, or put each spec in its own file)"
    )


@pytest.mark.parametrize(
    ("where", "character", "words"),
    [
        ("zone", "\u202e", "U+202E (RIGHT-TO-LEFT OVERRIDE), a bidirectional control"),
        ("pool", "\u2067", "U+2067 (RIGHT-TO-LEFT ISOLATE), a bidirectional control"),
        ("device", "\u200b", "U+200B (ZERO WIDTH SPACE), an invisible character"),
        ("site", "\u2060", "U+2060 (WORD JOINER), an invisible character"),
        ("zone", "\u00a0", "U+00A0 (NO-BREAK SPACE), a space that is not a plain one"),
    ],
)
def test_a_name_that_displays_as_other_text_is_warned_of(
    where: str, character: str, words: str
) -> None:
    """A zone, pool, custom device or site name with a bidi control or an invisible character
    gets one warning at that name; the spec stays valid."""
    name = f"x{character}y"
    zone = name if where == "zone" else "a"
    pool = f', name: "{name}"' if where == "pool" else ""
    device = name if where == "device" else "A100-40GB"
    extra = ""
    if where == "device":
        extra = (
            f'devices:\n  - {{name: "{name}", memory: 40GB, peak_tflops: {{fp16: 312}},'
            " memory_bandwidth: 1555GB/s, price: 1 USD/h}\n"
        )
    if where == "site":
        extra = f'sites:\n  - {{name: "{name}", scheduler: torchrun, zones: [a]}}\n'
    text = (
        BASE.format(pool=pool, extra=extra)
        .replace("name: a\n", f'name: "{zone}"\n')
        .replace("device: A100-40GB", f'device: "{device}"')
    ).replace("zones: [a]", f'zones: ["{zone}"]')
    result = check_text(text, "s.yaml")
    warned = [d for d in result.diagnostics if words in d.message]
    assert result.spec is not None, [d.format() for d in result.diagnostics]
    assert warned and all(d.severity == "warning" for d in warned)
    paths = {
        "zone": "zones[0].name",
        "pool": "zones[0].pools[0].name",
        "device": "devices[0].name",
        "site": "sites[0].name",
    }
    assert paths[where] in {d.path for d in warned}
    assert all(f"{name!r}" in d.message for d in warned)


def test_plain_names_get_no_name_warning() -> None:
    """Every bundled example validates without a warning (no false alarm on real names) but
    the runtime's refusal of OPT-350M's and GPT-Neo's model fields, at `model.preset`."""
    for example in sorted((ROOT / "examples").glob("*.yaml")):
        result = check_text(example.read_text(), str(example), spec_dir=str(example.parent))
        warned = [d.format() for d in result.warnings if d.path != "model.preset"]
        assert warned == []


def test_crossed_zone_and_region_names_are_warned_of() -> None:
    """Zone r1 in region r2 beside zone r2 in region r1: a warning at each zone's name; a zone
    named like its own region, or in another zone's region, is fine."""
    crossed = (
        "version: 1\nname: crossed\nmodel: {preset: GPT-3-1.3B}\n"
        "training: {global_batch_size: 16}\nzones:\n"
        "  - name: r1\n    region: r2\n"
        "    pools: [{device: A100-40GB, quota: 8, gpus_per_node: 4}]\n"
        "  - name: r2\n    region: r1\n"
        "    pools: [{device: A100-40GB, quota: 8, gpus_per_node: 4}]\n"
    )
    assert _lines(crossed) == [
        "6:11: zones[0].name: warning: zone 'r1' is named like the region of zone 'r2'"
        " (zones[1].region), but lies in region 'r2': a `between:` or report that says 'r1'"
        " reads two ways; give zones and regions distinct names",
        "9:11: zones[1].name: warning: zone 'r2' is named like the region of zone 'r1'"
        " (zones[0].region), but lies in region 'r1': a `between:` or report that says 'r2'"
        " reads two ways; give zones and regions distinct names",
    ]
    fine = crossed.replace("region: r2", "region: r1").replace("name: r2\n", "name: r3\n")
    assert _lines(fine) == []


def test_compile_names_the_node_scripts_it_wrote(tmp_path: Path) -> None:
    """The closing line names the real files (launch/node0000.sh ...), each of which exists."""
    out = tmp_path / "out"
    result = runner.invoke(
        app, ["compile", str(ROOT / "examples" / "local-cpu.yaml"), "-o", str(out)]
    )
    assert result.exit_code == 0, result.output
    (line,) = [r for r in result.stderr.splitlines() if "start each node" in r]
    named = re.findall(r"\S+/launch/node\d{4}\.sh", line)
    assert named == [f"{out}/launch/node0000.sh", f"{out}/launch/node0001.sh"]
    assert all(Path(p).is_file() for p in named) and "<index>" not in line
