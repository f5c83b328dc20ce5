"""Property tests: `hetc validate` on mutated example specs never crashes and points at the fault.

Each generated case is one of examples/*.yaml with ONE mutation at one site: a dropped key (a),
a value of the wrong type (b), junk injected into the text (c), an extreme number (d), an
arbitrary unicode string (e), or a malformed unit string in a quantity field (f). Every run must
end with exit 0 or 1, no exception and no traceback, and print only `FILE:LINE:COL: path: message`
lines. For the single-site mutations the diagnostics must name the mutated path whenever the
mutated value is wrong on its own (judged from the JSON Schema file and the unit table, not from
hetc's code), and must leave it alone where it is right and no cross-check reads it.

HETC_PROPERTY_SCALE=N multiplies every example count (600 in all by default; N=6 gives 3600).
"""

from __future__ import annotations

import copy
import io
import json
import math
import os
import re
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, currently_in_test_context, given, settings
from hypothesis import note as _hypothesis_note
from hypothesis import strategies as st
from jsonschema import Draft7Validator
from ruamel.yaml import YAML
from ruamel.yaml.representer import SafeRepresenter
from typer.testing import CliRunner

from hetc.catalog import device_entries
from hetc.cli import app
from hetc.units import DIMENSIONS

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE_FILES = sorted((ROOT / "examples").glob("*.yaml"))
SCHEMA: dict[str, Any] = json.loads(
    (ROOT / "hetc" / "schema" / "spec.schema.json").read_text(encoding="utf-8")
)
SCALE = max(1, int(os.environ.get("HETC_PROPERTY_SCALE", "1")))
RUNNER = CliRunner()
LINE = re.compile(r"^.+:\d+:\d+: \S+: .+$")
PLAIN_SCALAR = (bool, int, float, str, type(None))

Path_ = tuple[str | int, ...]


def note(text: str) -> None:
    """Hypothesis's `note`, which the plain (non-hypothesis) tests may call as well."""
    if currently_in_test_context():
        _hypothesis_note(text)


def _settings(examples: int) -> settings:
    return settings(
        max_examples=examples * SCALE,
        deadline=None,
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.filter_too_much,
        ],
    )


# --------------------------------------------------------------------------- documents


class _Representer(SafeRepresenter):
    """Writes a string with anything but printable ASCII double-quoted, so escapes keep it.

    (ruamel reads a raw NEL or U+2028 inside a plain or single-quoted scalar as a line break,
    which would change the value before hetc ever sees it.)
    """


def _represent_str(representer: SafeRepresenter, text: str) -> Any:
    style = None if all(" " <= c <= "~" for c in text) else '"'
    return representer.represent_scalar("tag:yaml.org,2002:str", text, style=style)


_Representer.add_representer(str, _represent_str)


def _yaml() -> YAML:
    yaml = YAML(typ="safe", pure=True)
    yaml.Representer = _Representer
    yaml.default_flow_style = False
    yaml.allow_unicode = True
    return yaml


def _load(text: str) -> Any:
    return _yaml().load(text)


def _dump(document: Any) -> str:
    buffer = io.StringIO()
    _yaml().dump(document, buffer)
    return buffer.getvalue()


def _anchored(document: Any, folder: Any) -> Any:
    """The example with its relative data path made absolute: the tests validate documents
    written elsewhere, and a token file is looked up from the spec's folder."""
    data = document.get("data") if isinstance(document, dict) else None
    if isinstance(data, dict) and isinstance(data.get("path"), str):
        data["path"] = str(folder / data["path"])
    return document


TEXTS = {f.stem: f.read_text(encoding="utf-8") for f in EXAMPLE_FILES}
DOCS = {f.stem: _anchored(_load(TEXTS[f.stem]), f.parent) for f in EXAMPLE_FILES}
NAMES = sorted(DOCS)


def _walk(node: Any, path: Path_ = ()) -> Iterator[tuple[Path_, Any]]:
    yield path, node
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _walk(value, (*path, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _walk(value, (*path, index))


def _get(document: Any, path: Path_) -> Any:
    for part in path:
        document = document[part]
    return document


def _replaced(document: Any, path: Path_, value: Any) -> Any:
    if not path:
        return value
    changed = copy.deepcopy(document)
    _get(changed, path[:-1])[path[-1]] = value
    return changed


def dotted(path: Path_) -> str:
    """How the CLI names a path: `zones[0].pools[1].device`; the root is `(root)`."""
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text or "(root)"


def _shape(path: Path_) -> str:
    """`zones[*].pools[*].device`: the path with every list index replaced by `*`."""
    return dotted(tuple("*" if isinstance(p, int) else p for p in path)).replace(".*", "[*]")


# --------------------------------------------------------------------------- the schema as oracle


def _deref(node: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        node = SCHEMA["definitions"][node["$ref"].rsplit("/", 1)[1]]
    return node


def subschema(path: Path_, resolve: bool = True) -> dict[str, Any] | None:
    """The JSON Schema node that governs the value at `path`, or None for an unknown key."""
    node: Any = SCHEMA
    for part in path:
        node = _deref(node)
        if isinstance(part, int):
            node = node.get("items")
        else:
            node = node.get("properties", {}).get(part, node.get("additionalProperties"))
        if not isinstance(node, dict):
            return None
    return _deref(node) if resolve else node


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    return {float: "number", str: "string", type(None): "null", list: "array"}.get(
        type(value), "object"
    )


def allowed_types(schema: dict[str, Any]) -> set[str]:
    """JSON types the schema node accepts (`number` includes `integer`)."""
    if "type" in schema:
        kinds = schema["type"]
        found = {kinds} if isinstance(kinds, str) else set(kinds)
    elif "enum" in schema:
        found = {_json_type(v) for v in schema["enum"]}
    elif "const" in schema:
        found = {_json_type(schema["const"])}
    else:
        found = set(JSON_TYPES)
    return found | ({"integer"} if "number" in found else set())


_NUMBER = re.compile(r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
BARE_NUMBER_FACTOR = {"tflops": 1e12}
"""A bare number in a `tflops` field is in TFLOP/s (the schema's description says so)."""


def quantity_ok(value: Any, dimension: str) -> bool:
    """Whether `value` is a valid quantity, from the unit table and the schema's wording."""
    dim = DIMENSIONS[dimension]
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return False
    if isinstance(value, str):
        text = value.strip()
        readings = [(text, 1.0)] if not dim.units else []
        readings += [
            (text[: -len(unit)].rstrip(), factor)
            for unit, factor in dim.units.items()
            if text.endswith(unit)
        ]
        magnitudes = [float(n) * f for n, f in readings if _NUMBER.fullmatch(n)]
        if not magnitudes:
            return False
        magnitude = magnitudes[0]
    else:
        try:
            magnitude = float(value) * BARE_NUMBER_FACTOR.get(dimension, 1.0)
        except OverflowError:
            return False
    if not math.isfinite(magnitude):
        return False
    return magnitude > 0 or (magnitude == 0 and dim.zero_allowed)


def _non_finite(value: Any) -> bool:
    """NaN, infinities, and integers no float can hold (hetc computes in floats)."""
    return any(
        (isinstance(v, float) and not math.isfinite(v))
        or (isinstance(v, int) and not isinstance(v, bool) and abs(v) > sys.float_info.max)
        for _, v in _walk(value)
    )


def wrong_on_its_own(path: Path_, value: Any) -> bool:
    """Whether `value` at `path` breaks the schema (or the unit rules) with no other context."""
    schema = subschema(path)
    if schema is None or _non_finite(value):
        return True
    validator = Draft7Validator({**schema, "definitions": SCHEMA["definitions"]})
    if any(True for _ in validator.iter_errors(value)):
        return True
    # JSON Schema patterns are ECMA-262: `$` is the end of the text, not before a last `\n`.
    if isinstance(value, str) and "pattern" in schema:
        ecma = re.sub(r"(?<!\\)\$", r"\\Z", schema["pattern"])
        if not re.search(ecma, value):
            return True
    return "x-quantity" in schema and not quantity_ok(value, schema["x-quantity"])


SEMANTIC_AT_PATH = {
    # Checks across the document that report at the very value they read, so a value that is
    # fine on its own may still be reported there.
    "model.preset",  # unknown preset
    "model.architecture.heads",  # heads must divide hidden; kv_heads must divide heads
    "model.architecture.kv_heads",
    "training.seq_len",  # at most the model's learned positions
    "training.global_batch_size",  # at most 2^40 tokens per iteration with seq_len
    "training.zero_stage",  # stage 3 is not supported
    "training.lr_schedule.min_lr",  # at most the peak lr
    "devices[*].name",  # defined twice
    "zones[*].name",  # listed twice
    "zones[*].pools[*].device",  # unknown device, precision not supported, cpu with gpu
    "zones[*].pools[*].name",  # two pools of one name
    "zones[*].pools[*].gpus_per_node",  # a node larger than the quota
    "network.links[*].between",
    "network.links[*].between[*]",  # names no zone or region
    "sites[*].name",  # defined twice
    "sites[*].zones[*]",  # unknown zone, or one already scheduled by another site
    "profiles[*]",  # file not found
}
NEW_DEVICE_NEEDS = ("memory", "peak_tflops", "memory_bandwidth")
"""What a device absent from the catalog must give (semantic rule, not in the schema)."""
CATALOG_DEVICES = {name.casefold() for name in device_entries()}


# --------------------------------------------------------------------------- running validate


@dataclass
class Outcome:
    exit_code: int
    entries: list[str]
    """Each stdout line without its `FILE:LINE:COL: ` prefix: `path: [warning: ]message`."""

    def errors_at(self, path: Path_) -> list[str]:
        head = dotted(path) + ": "
        return [
            e
            for e in self.entries
            if e.startswith(head) and not e[len(head) :].startswith("warning: ")
        ]

    def located(self) -> list[str]:
        """`path: error` or `path: warning` of each diagnostic, without its wording."""
        return sorted(
            re.sub(r"^(\S+): (warning: )?.*$", lambda m: f"{m[1]}: {m[2] or 'error: '}", e)
            for e in self.entries
        )

    def at_or_below(self, path: Path_) -> list[str]:
        name = dotted(path)
        return [e for e in self.entries if e.startswith((f"{name}: ", f"{name}.", f"{name}["))]


def validate(content: str | bytes) -> Outcome:
    """Run `hetc validate` in-process on `content`; assert what holds for every input."""
    raw = content.encode("utf-8") if isinstance(content, str) else content
    with tempfile.TemporaryDirectory() as folder:
        file = os.path.join(folder, "spec.yaml")
        with open(file, "wb") as handle:
            handle.write(raw)
        result = RUNNER.invoke(app, ["validate", file])
    note(f"exit {result.exit_code}\nstdout:\n{result.stdout}stderr:\n{result.stderr}")
    assert result.exit_code in (0, 1), f"exit code {result.exit_code}: {result.output}"
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(
        result.exception
    )
    assert "Traceback" not in result.output + result.stderr
    entries = []
    for line in result.stdout.split("\n"):
        if not line.strip():
            continue
        assert LINE.match(line), f"malformed diagnostic line: {line!r}"
        assert line.startswith(f"{file}:"), f"diagnostic for another file: {line!r}"
        entries.append(re.sub(r"^\d+:\d+: ", "", line[len(file) + 1 :]))
    errors = [e for e in entries if not re.match(r"^\S+: warning: ", e)]
    if result.exit_code == 1:
        assert errors, "exit 1 (invalid) but no error was printed"
    else:
        assert not errors, f"exit 0 (valid) but errors were printed: {errors}"
    return Outcome(result.exit_code, entries)


def _validate_document(document: Any) -> tuple[Outcome, Any]:
    """Dump, validate, and return the outcome with the document as YAML reads it back."""
    text = _dump(document)
    note(f"spec:\n{text}")
    return validate(text), _load(text)


def assert_pointed(outcome: Outcome, path: Path_) -> None:
    assert outcome.exit_code == 1, f"{dotted(path)} is wrong but the spec passed"
    assert outcome.errors_at(path), f"no error at {dotted(path)}: {outcome.entries}"


def check_single_value(outcome: Outcome, path: Path_, seen: Any) -> None:
    """Where a value is wrong on its own it is reported; where right, unreported unless read."""
    if wrong_on_its_own(path, seen):
        assert_pointed(outcome, path)
    elif _shape(path) not in SEMANTIC_AT_PATH:
        assert not outcome.errors_at(path), f"{dotted(path)} is fine: {outcome.entries}"


# --------------------------------------------------------------------------- strategies

JSON_TYPES = ("integer", "number", "string", "boolean", "null", "array", "object")
_SMALL_SCALARS = st.one_of(
    st.integers(-10, 10), st.text(max_size=5), st.booleans(), st.none(), st.just(1.5)
)
VALUE_OF_TYPE = {
    "integer": st.integers(),
    "number": st.one_of(
        st.sampled_from([0.5, -2.25, 1e-9, 3.14159, -1e-300]),
        st.floats(-1e12, 1e12).filter(lambda x: not x.is_integer()),
    ),
    "string": st.text(max_size=20),
    "boolean": st.booleans(),
    "null": st.none(),
    "array": st.lists(_SMALL_SCALARS, max_size=3),
    "object": st.dictionaries(st.text(min_size=1, max_size=8), _SMALL_SCALARS, max_size=3),
}
EXTREME_NUMBERS = st.one_of(
    st.sampled_from(
        [
            0,
            0.0,
            -0.0,
            -1,
            -1.5,
            1,
            2**31,
            2**63,
            2**64,
            -(2**63) - 1,
            10**30,
            -(10**30),
            10**400,
            -(10**400),
            1e308,
            -1e308,
            1.7976931348623157e308,
            5e-324,
            1e-320,
            math.nan,
            math.inf,
            -math.inf,
            3.0,
            4096.0,
            1e6,
            2.0**53,
        ]
    ),
    st.integers(),
    st.floats(),
)
UNICODE = st.one_of(
    st.text(st.characters(exclude_categories=("Cs",)), max_size=30),
    st.lists(
        st.sampled_from(
            [
                "🚀",
                "👩‍👩‍👧",
                "\u202e",
                "עברית",
                "العربية",
                "e\u0301",
                "\u0300",
                "\u200d",
                "\ufeff",
                "\x85",
                "\u2028",
                "\u2029",
                "\x00",
                "\n",
                "\r",
                "\t",
                "\x7f",
                "\x1b",
                "\ufffe",
                "\uffff",
                "\U0010ffff",
                " ",
                "#",
                ": ",
                "- ",
                "'",
                '"',
                "\\",
                "A100",
                "\ud800",  # written as the escape "\uD800", which YAML readers accept
            ]
        ),
        min_size=1,
        max_size=6,
    ).map("".join),
)
ALL_UNITS = sorted({unit for d in DIMENSIONS.values() for unit in d.units} | {"Gb", "gb", "μs"})
NUMBER_TEXT = st.one_of(
    st.sampled_from(
        [
            "40",
            "0",
            "0.0",
            "-3",
            "+3",
            "1e999",
            "1e-400",
            ".5",
            "5.",
            "1.2.3",
            "1_000",
            "1,000",
            "0x10",
            "nan",
            "inf",
            "\uff11\uff10",  # fullwidth digits
            "",
            " ",
            "-0",
            "1e308",
        ]
    ),
    st.from_regex(r"\A-?[0-9]{1,4}(\.[0-9]{0,3})?([eE][+-]?[0-9]{1,3})?\Z"),
)
BAD_UNIT_TEXT = st.one_of(
    st.sampled_from(
        [
            "40GX",
            "GB40",
            "-3GB",
            "1e999GB",
            "0Gbps",
            "",
            "GB",
            "40 G B",
            "40GBGB",
            "40gb",
            "4O GB",
            "40 GB/s/s",
            "0 USD/h",
            "-0 USD/h",
            "1e308 TFLOPS",
            "5 USD",
            "$5",
            "10 µs",
            "10 μs",
            "1e-400 GB",
            "1e-400 USD/h",
        ]
    ),
    st.tuples(NUMBER_TEXT, st.sampled_from(["", " ", "  "]), st.sampled_from(ALL_UNITS)).map(
        "".join
    ),
    st.tuples(NUMBER_TEXT, st.text(max_size=6)).map("".join),
)


def _example_and_path(data: st.DataObject, keep: Any) -> tuple[str, Path_]:
    """An example and one of its paths that `keep` accepts: a uniform kind, then one of it."""
    name = data.draw(st.sampled_from(NAMES), label="example")
    by_shape: dict[str, list[Path_]] = {}
    for path, value in _walk(DOCS[name]):
        if keep(path, value):
            by_shape.setdefault(_shape(path), []).append(path)
    shape = data.draw(st.sampled_from(sorted(by_shape)), label="kind of path")
    return name, data.draw(st.sampled_from(by_shape[shape]), label="path")


# --------------------------------------------------------------------------- the tests


@pytest.mark.parametrize("name", NAMES)
def test_examples_survive_the_round_trip(name: str) -> None:
    """Each example, loaded and dumped again as the tests do, validates cleanly: no problem
    but the runtime's refusal of OPT-350M's or GPT-Neo's model fields, at the preset."""
    outcome = validate(_dump(DOCS[name]))
    refused = [e for e in outcome.entries if e.startswith("model.preset: warning: model ")]
    assert outcome.exit_code == 0 and outcome.entries == refused, outcome.entries


@pytest.mark.slow
@_settings(100)
@given(st.data())
def test_dropped_key_is_reported(data: st.DataObject) -> None:
    """(a) A dropped required key is named; a dropped default acts as the default."""
    name, path = _example_and_path(data, lambda p, _: bool(p) and isinstance(p[-1], str))
    parent_path, key = path[:-1], path[-1]
    document = copy.deepcopy(DOCS[name])
    parent = _get(document, parent_path)
    del parent[key]
    outcome, _ = _validate_document(document)
    parent_schema = subschema(parent_path) or {}
    key_schema = subschema(path, resolve=False) or {}
    new_device = (
        len(parent_path) == 2
        and parent_path[0] == "devices"
        and isinstance(parent.get("name"), str)
        and parent["name"].casefold() not in CATALOG_DEVICES
        and not any(
            isinstance(d, dict) and str(d.get("name", "")).casefold() == parent["name"].casefold()
            for d in document["devices"][: parent_path[1]]
        )
    )
    if key in parent_schema.get("required", ()):
        assert_pointed(outcome, path)
    elif parent_path == ("model",) and key in ("preset", "architecture"):
        assert_pointed(outcome, parent_path)  # the schema's oneOf: exactly one of the two
    elif new_device and key in NEW_DEVICE_NEEDS:
        assert_pointed(outcome, path)
    elif len(parent) < parent_schema.get("minProperties", 0):
        assert_pointed(outcome, parent_path)  # the mapping is now too small
    elif "default" in key_schema:
        # Leaving a key out must mean exactly its documented default, problems included.
        explicit, _ = _validate_document(_replaced(document, path, key_schema["default"]))
        assert outcome.exit_code == explicit.exit_code
        assert sorted(outcome.entries) == sorted(explicit.entries)
    else:
        # An optional key without default: nothing can be wrong at or inside what is gone.
        assert not outcome.at_or_below(path), outcome.entries


@pytest.mark.slow
@_settings(100)
@given(st.data())
def test_swapped_type_is_reported(data: st.DataObject) -> None:
    """(b) A value of a type the schema does not allow there is reported at its path."""

    def swappable(path: Path_, _: Any) -> bool:
        schema = subschema(path)
        return schema is not None and not allowed_types(schema) >= set(JSON_TYPES)

    name, path = _example_and_path(data, swappable)
    schema = subschema(path)
    assert schema is not None
    kind = data.draw(
        st.sampled_from([t for t in JSON_TYPES if t not in allowed_types(schema)]), label="type"
    )
    value = data.draw(VALUE_OF_TYPE[kind], label="value")
    outcome, seen = _validate_document(_replaced(DOCS[name], path, value))
    assert _json_type(_get(seen, path)) == kind, "the dump changed the value's type"
    assert wrong_on_its_own(path, _get(seen, path))
    assert_pointed(outcome, path)


@pytest.mark.slow
@_settings(120)
@given(st.data())
def test_injected_junk_is_handled(data: st.DataObject) -> None:
    """(c) Junk anywhere in the text gives exit 0 or 1 and well-formed diagnostics only."""
    name = data.draw(st.sampled_from(NAMES), label="example")
    raw = TEXTS[name].encode("utf-8")
    lines = raw.split(b"\n")
    kind = data.draw(
        st.sampled_from(
            ["text", "bytes", "control", "indent", "tab", "bracket", "duplicate", "yaml"]
        ),
        label="kind",
    )
    at = data.draw(st.integers(0, len(raw)), label="offset")
    row = data.draw(st.integers(0, len(lines) - 1), label="line")
    must_fail, junk = False, b""
    if kind == "text":
        junk = data.draw(st.text(max_size=40), label="junk").encode("utf-8")
    elif kind == "bytes":
        junk = data.draw(st.binary(min_size=1, max_size=20), label="junk")
    elif kind == "control":
        char = data.draw(
            st.sampled_from(
                [
                    *map(
                        chr,
                        [*range(0, 9), 11, 12, *range(14, 32), *range(127, 133), *range(134, 160)],
                    ),
                    "\ufffe",
                    "\uffff",
                ]
            ),
            label="char",
        )
        junk = char.encode("utf-8")
        must_fail = True  # YAML allows none of these anywhere, comments included
    elif kind == "indent":
        spaces = data.draw(st.integers(-4, 6), label="spaces")
        line = lines[row]
        lines[row] = b" " * spaces + line if spaces >= 0 else line[-spaces:]
    elif kind == "tab":
        junk = b"\t"
        if data.draw(st.booleans(), label="indent with tabs"):
            kind = "tab-indent"
            line = lines[row]
            lines[row] = b"\t" * (len(line) - len(line.lstrip(b" "))) + line.lstrip(b" ")
    elif kind == "bracket":
        junk = data.draw(
            st.sampled_from([b"[", b"]", b"{", b"}", b"[{", b"}]", b"{a: [", b'"', b"'", b"]]]"]),
            label="junk",
        )
    elif kind == "duplicate":
        keyed = [
            i
            for i, line in enumerate(lines)
            if re.match(rb"^ *[A-Za-z_][\w-]*: *\S", line) and not line.lstrip().startswith(b"#")
        ]
        row = data.draw(st.sampled_from(keyed), label="duplicated line")
        lines.insert(row + 1, lines[row])
        must_fail = True  # the same key twice in one mapping, or a broken flow collection
    else:
        junk = data.draw(
            st.sampled_from(
                [
                    b"&a ",
                    b"*a",
                    b"*undefined",
                    b"!!binary ",
                    b"!tag ",
                    b"<<: *a\n",
                    b"? ",
                    b"? [a, b]\n: c\n",
                    b"---\n",
                    b"\n...\n",
                    b"%YAML 1.1\n",
                    b"{[1]: 2}",
                    b"!!python/object:os.system ",
                    b"&x [*x]",
                    b"|\n",
                    b">-\n",
                    b"\n? {a: 1}\n: 2\n",
                    b"\n~: 1\n",
                    b'\n"": 1\n',
                    b"\n1: 1\n",
                    b"\nnull: 1\n",
                    b"\n.inf: 1\n",
                    b'\n"my key": 1\n',
                    b'\n"a\\tb": 1\n',
                    b'\n"a\\nb": 1\n',
                    b'\n"\\ud800": 1\n',
                    b' "\\udfff"',
                    b' "\\x85\\u2028"',
                ]
            ),
            label="junk",
        )
    if kind in ("indent", "duplicate", "tab-indent"):
        mutated = b"\n".join(lines)
    else:
        mutated = raw[:at] + junk + raw[at:]
    note(f"mutated bytes: {mutated!r}")
    try:
        mutated.decode("utf-8")
    except UnicodeDecodeError:
        must_fail = True  # a spec is UTF-8 text
    outcome = validate(mutated)
    if must_fail:
        assert outcome.exit_code == 1


@pytest.mark.slow
@_settings(100)
@given(st.data())
def test_extreme_number_is_reported(data: st.DataObject) -> None:
    """(d) Huge, negative, zero, NaN or infinite numbers are reported where they are wrong."""
    name, path = _example_and_path(data, lambda p, v: bool(p) and isinstance(v, PLAIN_SCALAR))
    value = data.draw(EXTREME_NUMBERS, label="number")
    outcome, seen = _validate_document(_replaced(DOCS[name], path, value))
    number = _get(seen, path)
    check_single_value(outcome, path, number)
    schema = subschema(path) or {}
    if (
        isinstance(number, float)
        and number.is_integer()
        and "integer" in allowed_types(schema)
        and not outcome.errors_at(path)
    ):
        # JSON has one number type and the schema takes 3.0 as an integer: where hetc accepts
        # the float it must judge the spec exactly as with the equal int (problems, not wording).
        twin, _ = _validate_document(_replaced(DOCS[name], path, int(number)))
        assert (outcome.exit_code, outcome.located()) == (twin.exit_code, twin.located())


@pytest.mark.slow
@_settings(80)
@given(st.data())
def test_unicode_string_is_reported_or_accepted(data: st.DataObject) -> None:
    """(e) Any unicode string is reported where the schema forbids it and accepted elsewhere."""
    name, path = _example_and_path(data, lambda _, v: isinstance(v, str))
    value = data.draw(UNICODE, label="text")
    outcome, seen = _validate_document(_replaced(DOCS[name], path, value))
    assert _get(seen, path) == value, "the dump changed the string"
    check_single_value(outcome, path, value)


@pytest.mark.slow
@_settings(100)
@given(st.data())
def test_bad_unit_is_reported(data: st.DataObject) -> None:
    """(f) A quantity string with a bad number or unit is reported at its path."""
    name, path = _example_and_path(
        data, lambda p, _: "x-quantity" in (subschema(p) or {}) and bool(p)
    )
    value = data.draw(BAD_UNIT_TEXT, label="quantity")
    outcome, seen = _validate_document(_replaced(DOCS[name], path, value))
    assert _get(seen, path) == value, "the dump changed the string"
    check_single_value(outcome, path, value)
