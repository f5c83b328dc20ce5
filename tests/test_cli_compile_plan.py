"""`hetc compile SPEC --plan FILE`: a given plan is compiled exactly as the planner's own would
be, in either form hetc writes, and every kind of bad plan gets one line per problem at the
position of the offending value, exit 1, and nothing written.

The positions' oracle is the text itself: each test writes the plan with `json.dumps`, finds
the offending value by searching the text for it, and compares that line and column with the
diagnostic's. Mutation checks done: with the quota test's `>` in `plan_spec_issues` turned into
`>=`, the good-plan tests fail (a full pool is refused); with the memory check skipped, the
memory case compiles and fails here."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from hetc.cli import app
from hetc.schema import check_file, spec_hash
from hetc.units import plural

runner = CliRunner()
ROOT = Path(__file__).resolve().parent.parent
LOCAL = ROOT / "examples" / "local-cpu.yaml"
SLURM = ROOT / "examples" / "slurm-local-cpu.yaml"
DIAGNOSTIC = re.compile(r"(?P<file>.+?):(?P<line>\d+):(?P<column>\d+): (?P<path>\S+): (?P<what>.*)")

Plan = dict[str, Any]


def _invoke(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("compiled") / "out"
    code, _, stderr = _invoke("compile", str(LOCAL), "-o", str(out))
    assert code == 0, stderr
    return out


@pytest.fixture
def plan(compiled: Path) -> Plan:
    loaded: Plan = json.loads((compiled / "plan.json").read_text())
    return loaded


def _tree(directory: Path) -> dict[str, bytes]:
    return {
        p.relative_to(directory).as_posix(): p.read_bytes()
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


def test_a_compiled_plan_handed_back_compiles_to_the_same_files(
    compiled: Path, tmp_path: Path
) -> None:
    """Every file but the report (which says the plan was given) and the manifest is
    byte-identical: the plan's predictions, topology, configs and scripts are the planner's."""
    out = tmp_path / "out"
    code, _, stderr = _invoke(
        "compile", str(LOCAL), "--plan", str(compiled / "plan.json"), "-o", str(out)
    )
    assert code == 0, stderr
    assert "read as a plan as `hetc compile` writes plan.json" in stderr
    first, second = _tree(compiled), _tree(out)
    assert set(first) == set(second)
    differ = sorted(path for path in first if first[path] != second[path])
    assert differ == ["manifest.json", "report.md"]
    report = second["report.md"].decode()
    assert "The plan given in plan.json (`hetc compile --plan`)" in report
    assert "None: the plan was given, not searched" in report
    assert "planning model (what the search ranked)" not in report


def test_an_entry_of_plan_json_output_and_the_whole_output_with_rank_compile_alike(
    tmp_path: Path,
) -> None:
    """`hetc plan --json`'s second-best plan, handed in as its entry or as the whole output
    with `--rank 2`, is compiled as it is (its predictions agree with the simulator's, so
    plan.json is that plan); a rank the output does not hold is a usage error naming the ranks
    it does, and nothing is written."""
    listing = subprocess.run(
        [sys.executable, "-m", "hetc", "plan", str(LOCAL), "--json", "--top", "2"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    document = json.loads(listing)
    entry = document["plans"][1]
    given = tmp_path / "second.json"
    given.write_text(json.dumps(entry, indent=2))
    out = tmp_path / "out"
    code, _, stderr = _invoke("compile", str(LOCAL), "--plan", str(given), "-o", str(out))
    assert code == 0, stderr
    assert "read as an entry of `hetc plan --json`'s plans (rank 2)" in stderr
    assert json.loads((out / "plan.json").read_text()) == entry["plan"]

    whole = tmp_path / "whole.json"
    whole.write_text(listing)
    second = tmp_path / "second-out"
    code, _, stderr = _invoke(
        "compile", str(LOCAL), "--plan", str(whole), "--rank", "2", "-o", str(second)
    )
    assert code == 0, stderr
    assert "read as plan 2 of the output of `hetc plan --json`" in stderr
    assert (second / "plan.json").read_bytes() == (out / "plan.json").read_bytes()

    code, stdout, stderr = _invoke(
        "compile", str(LOCAL), "--plan", str(whole), "--rank", "3", "-o", str(tmp_path / "x")
    )
    assert code == 2, stdout + stderr
    assert f"--rank 3: {whole} holds the plans ranked 1, 2" in stderr
    assert not (tmp_path / "x").exists()


def test_a_plan_without_the_training_fields_gets_the_specs(
    compiled: Path, plan: Plan, tmp_path: Path
) -> None:
    """A plan written before model, seq_len and precision were recorded (null) compiles, and
    the compiled plan.json records the spec's."""
    old = dict(plan, model=None, seq_len=None, precision=None)
    given = tmp_path / "old.json"
    given.write_text(json.dumps(old, indent=2))
    out = tmp_path / "out"
    code, _, stderr = _invoke("compile", str(LOCAL), "--plan", str(given), "-o", str(out))
    assert code == 0, stderr
    written = json.loads((out / "plan.json").read_text())
    assert (written["model"], written["seq_len"], written["precision"]) == ("custom", 64, "fp32")
    assert written == plan


def _position(text: str, needle: str, occurrence: int = 0) -> tuple[int, int]:
    """Line and column (1-based) of the `occurrence`-th `needle` in `text`: the oracle."""
    offset = -1
    for _ in range(occurrence + 1):
        offset = text.index(needle, offset + 1)
    before = text[:offset]
    return before.count("\n") + 1, offset - (before.rfind("\n") + 1) + 1


def _value_at(text: str, key_line: str, occurrence: int = 0) -> tuple[int, int]:
    """Position of the value of the `"key": value` line `key_line` (a unique text)."""
    line, column = _position(text, key_line, occurrence)
    return line, column + key_line.index(":") + 2


def _after(text: str, needle: str, occurrence: int = 0) -> tuple[int, int]:
    """Position of the first character after `needle` that is not white space: the first item
    of the list that `needle` opens."""
    line, column = _position(text, needle, occurrence)
    offset = sum(len(row) + 1 for row in text.split("\n")[: line - 1]) + column - 1 + len(needle)
    while text[offset] in " \n":
        offset += 1
    before = text[:offset]
    return before.count("\n") + 1, offset - (before.rfind("\n") + 1) + 1


def _pipe(plan: Plan, p: int, microbatches: int) -> Plan:
    plan["pipelines"][p]["microbatches"] = microbatches
    return plan


def _extra_node(plan: Plan) -> Plan:
    node = dict(plan["nodes"][1], id="local-cpu@localhost/n2")
    plan["nodes"].append(node)
    return plan


def _mixed_tp(plan: Plan) -> Plan:
    """Stage 0's last two TP-1 replicas on node 1 merged into one TP-2 replica (ZeRO 1 in the
    spec: refused by the capability matrix)."""
    replicas = plan["stages"][0]["replicas"]
    replicas[2] = {**replicas[2], "tp": 2, "local_ranks": [0, 1]}
    del replicas[3]
    plan["pipelines"] = [
        {"microbatches": 3, "replicas": [0]},
        {"microbatches": 3, "replicas": [1]},
        {"microbatches": 2, "replicas": [2]},
    ]
    return plan


def _set(*path: str | int, value: Any) -> Callable[[Plan], Plan]:
    def change(plan: Plan) -> Plan:
        node: Any = plan
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
        return plan

    return change


# (id, change, expected [(dotted path, message fragment, position oracle)])
CASES: list[
    tuple[str, Callable[[Plan], Plan], list[tuple[str, str, Callable[[str], tuple[int, int]]]]]
] = [
    (
        "schema-type",
        _set("stages", 0, "replicas", 1, "tp", value="2"),
        [
            (
                "stages[0].replicas[1].tp",
                "expected an integer, got string '2'",
                lambda t: _value_at(t, '"tp": "2"'),
            )
        ],
    ),
    (
        "schema-missing-key",
        lambda p: {k: v for k, v in p.items() if k != "microbatch_size"},
        [("microbatch_size", "missing required key 'microbatch_size'", lambda t: (1, 1))],
    ),
    (
        "wrong-device",
        lambda p: _set("nodes", 0, "device", value="A100")(
            _set("stages", 0, "replicas", 0, "device", value="A100")(
                _set("stages", 0, "replicas", 1, "device", value="A100")(p)
            )
        ),
        [
            (
                "nodes[0].device",
                "is A100, but pool 'local-cpu' rents LOCAL-CPU",
                lambda t: _value_at(t, '"device": "A100"'),
            )
        ],
    ),
    (
        "unknown-zone",
        _set("nodes", 1, "zone", value="elsewhere"),
        [
            (
                "nodes[1].zone",
                "the spec has no zone 'elsewhere' (its zones: localhost)",
                lambda t: _value_at(t, '"zone": "elsewhere"'),
            )
        ],
    ),
    (
        "unknown-pool",
        _set("nodes", 0, "pool", value="big"),
        [
            (
                "nodes[0].pool",
                "the spec has no pool 'big' in zone 'localhost' (its pools: local-cpu)",
                lambda t: _value_at(t, '"pool": "big"'),
            )
        ],
    ),
    (
        "wrong-region",
        _set("nodes", 0, "region", value="mars"),
        [
            (
                "nodes[0].region",
                "zone 'localhost' is in region 'localhost', not 'mars'",
                lambda t: _value_at(t, '"region": "mars"'),
            )
        ],
    ),
    (
        "wrong-node-size",
        _set("nodes", 1, "devices", value=3),
        [
            (
                "nodes[1]",
                "the plan rents 5 devices, over its quota of 4",
                lambda t: _after(t, "},"),  # the nodes are the first objects listed
            ),
            (
                "nodes[1].devices",
                "has 3 devices, but pool 'local-cpu' rents nodes of 2",
                lambda t: _value_at(t, '"devices": 3'),
            ),
        ],
    ),
    (
        "over-quota",
        _extra_node,
        [
            (
                "nodes[2]",
                "the plan rents 6 devices, over its quota of 4 (at most 2 nodes of 2)",
                lambda t: _after(t, "},", 1),  # the nodes are the first objects listed
            )
        ],
    ),
    (
        "model-blocks",
        _set("model_blocks", value=6),
        [
            (
                "model_blocks",
                "the plan cuts 6 blocks; the spec's model has 4",
                lambda t: _value_at(t, '"model_blocks": 6'),
            ),
            (
                "stages[0].end_block",
                "stages end at block 4; the model has 6",
                lambda t: _value_at(t, '"end_block": 4'),
            ),
        ],
    ),
    (
        "shares-do-not-add-up",
        lambda p: _pipe(p, 3, 3),
        [
            (
                "pipelines",
                "pipelines process 9 samples per iteration; the global batch is 8",
                lambda t: _value_at(t, '"pipelines": ['),
            )
        ],
    ),
    (
        "global-batch",
        lambda p: _pipe(_set("global_batch_size", value=9)(p), 3, 3),
        [
            (
                "global_batch_size",
                "the plan was made for global_batch_size 9; the spec's"
                " training.global_batch_size is 8",
                lambda t: _value_at(t, '"global_batch_size": 9'),
            )
        ],
    ),
    (
        "device-used-twice",
        _set("stages", 0, "replicas", 1, "local_ranks", value=[0]),
        [
            (
                "stages[0].replicas[1].local_ranks[0]",
                "device local-cpu@localhost/n0#0 is already used by stage 0 replica 0",
                lambda t: _after(t, '"local_ranks": [', 1),
            ),
        ],
    ),
    (
        "capability",
        _mixed_tp,
        [
            (
                "stages[0]",
                "mixed-tp-stage/zero-1: not supported",
                lambda t: _after(t, '"stages": ['),
            )
        ],
    ),
]


@pytest.mark.parametrize(("change", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_bad_plan_gets_one_positioned_line_per_problem_and_nothing_is_written(
    plan: Plan,
    tmp_path: Path,
    change: Callable[[Plan], Plan],
    expected: list[tuple[str, str, Callable[[str], tuple[int, int]]]],
) -> None:
    """Each kind of problem: exit 1, exactly the expected lines, each at its value."""
    text = json.dumps(change(plan), indent=2)
    given = tmp_path / "plan.json"
    given.write_text(text)
    out = tmp_path / "out"
    code, stdout, stderr = _invoke("compile", str(LOCAL), "--plan", str(given), "-o", str(out))
    assert code == 1, stdout + stderr
    assert not out.exists() and list(tmp_path.iterdir()) == [given]
    found = [DIAGNOSTIC.fullmatch(line) for line in stdout.splitlines()]
    assert all(found), stdout
    assert len(found) == len(expected), stdout
    for match, (path, what, where) in zip(found, expected, strict=True):
        assert match is not None
        assert (match["file"], match["path"]) == (str(given), path), stdout
        assert what in match["what"], stdout
        assert (int(match["line"]), int(match["column"])) == where(text), (path, stdout)
    assert f"{plural(len(expected), 'problem')}; nothing was written" in stderr


def _variant(tmp_path: Path, old: str, new: str) -> Path:
    """local-cpu.yaml with one change (its data file found where it is)."""
    text = LOCAL.read_text()
    assert old in text
    text = text.replace(old, new).replace(
        "data/tiny-corpus.bin", str(ROOT / "examples" / "data" / "tiny-corpus.bin")
    )
    spec = tmp_path / "variant.yaml"
    spec.write_text(text)
    checked = check_file(str(spec))
    assert checked.spec is not None, [d.format() for d in checked.diagnostics]
    return spec


def _refused(spec: Path, text: str, tmp_path: Path) -> tuple[Path, list[re.Match[str]]]:
    given = tmp_path / "given.json"
    given.write_text(text)
    out = tmp_path / "out"
    code, stdout, stderr = _invoke("compile", str(spec), "--plan", str(given), "-o", str(out))
    assert code == 1, stdout + stderr
    assert not out.exists()
    found = [DIAGNOSTIC.fullmatch(line) for line in stdout.splitlines()]
    assert found and all(found), stdout
    return given, [m for m in found if m is not None]


@pytest.mark.parametrize(
    ("text", "where", "what"),
    [
        ('{"version": 1,\n  "nodes": [1, 2,]\n}', (2, 18), "expected a JSON value, found ']'"),
        (
            '{"version": 1,\n "version": 2}',
            (2, 2),
            "key 'version' is given twice (first at line 1)",
        ),
        ('{"version": 1, "nodes": NaN}', (1, 25), "NaN is not a JSON number"),
        ("[1, 2]", (1, 1), "expected a plan (a JSON object"),
    ],
    ids=["syntax", "duplicate-key", "nan", "not-an-object"],
)
def test_a_file_that_is_not_a_plan_object_is_one_positioned_line(
    tmp_path: Path, text: str, where: tuple[int, int], what: str
) -> None:
    """JSON a careless edit breaks: the first problem, where it stands."""
    _, found = _refused(LOCAL, text, tmp_path)
    (match,) = found
    assert (int(match["line"]), int(match["column"])) == where
    assert what in match["what"]


def test_tp_degrees_the_model_cannot_split_are_refused(tmp_path: Path, plan: Plan) -> None:
    """A TP 3 replica on a 4-device node of a 4-head model: the heads cannot be split in 3."""
    spec = _variant(tmp_path, "quota: 4, gpus_per_node: 2", "quota: 4, gpus_per_node: 4")
    node = dict(plan["nodes"][0], devices=4)
    replica = {"device": node["device"], "tp": 3, "node": node["id"], "local_ranks": [0, 1, 2]}
    single = {
        **plan,
        "nodes": [node],
        "stages": [{"first_block": 0, "end_block": 4, "replicas": [replica]}],
        "pipelines": [{"replicas": [0], "microbatches": 8}],
    }
    text = json.dumps(single, indent=2)
    _, found = _refused(spec, text, tmp_path)
    (match,) = found
    assert match["path"] == "stages[0].replicas[0].tp"
    assert (int(match["line"]), int(match["column"])) == _value_at(text, '"tp": 3')
    assert match["what"].endswith("(TP degrees that do, up to the node's 4 devices: 1, 2, 4)")


def test_a_rank_that_does_not_fit_is_refused_at_its_replica(tmp_path: Path, compiled: Path) -> None:
    """Every replica's ranks need about 5.7 MB by the simulator: on 5 MB devices each of the
    plan's four replicas is refused, at its own position."""
    spec = _variant(tmp_path, "memory: 2GiB", "memory: 5MB")
    text = (compiled / "plan.json").read_text()
    _, found = _refused(spec, text, tmp_path)
    assert [m["path"] for m in found] == [f"stages[0].replicas[{j}]" for j in range(4)]
    stage = text.index('"stages"')
    for j, match in enumerate(found):
        # the j-th object after "stages" opens replica j (a replica holds no object)
        where = _position(text, "{", text[:stage].count("{") + 1 + j)
        assert (int(match["line"]), int(match["column"])) == where
        assert "does not fit:" in match["what"] and "over by" in match["what"]


def test_max_gpus_is_a_limit_for_a_given_plan_too(tmp_path: Path, compiled: Path) -> None:
    """The plan rents 4 devices; a spec that allows 2 refuses it at its node list."""
    spec = _variant(tmp_path, "sites:", "constraints: {max_gpus: 2}\nsites:")
    text = (compiled / "plan.json").read_text()
    _, found = _refused(spec, text, tmp_path)
    (match,) = found
    assert match["path"] == "nodes"
    assert match["what"] == "the plan rents 4 devices; the spec's constraints.max_gpus is 2"
    assert (int(match["line"]), int(match["column"])) == _value_at(text, '"nodes": [')


def test_a_plan_of_another_version_of_the_spec_is_accepted_and_restamped(
    tmp_path: Path, compiled: Path
) -> None:
    """A changed learning rate does not change what the plan rents: it compiles, with the
    spec's hash in plan.json and a note saying what was recomputed."""
    spec = _variant(tmp_path, "lr: 1.0e-3", "lr: 2.0e-3")
    out = tmp_path / "out"
    code, _, stderr = _invoke(
        "compile", str(spec), "--plan", str(compiled / "plan.json"), "-o", str(out)
    )
    assert code == 0, stderr
    assert "was made for another version of the spec" in stderr
    assert "its spec hash and predictions are recomputed" in stderr
    checked = check_file(str(spec)).spec
    assert checked is not None
    written = json.loads((out / "plan.json").read_text())
    assert written["spec_hash"] == spec_hash(checked)
    given = json.loads((compiled / "plan.json").read_text())
    assert written["spec_hash"] != given["spec_hash"]
    assert {k: v for k, v in written.items() if k != "spec_hash"} == {
        k: v for k, v in given.items() if k != "spec_hash"
    }, "same nodes, stages, shares and (same model and batch) predictions"


def test_an_edited_plan_json_is_compiled_in_place_with_plan(tmp_path: Path, compiled: Path) -> None:
    """Edit out/plan.json, then `hetc compile SPEC --plan out/plan.json -o out`: accepted
    without --force (the plan is what is compiled); a plain recompile over the edited output
    is refused and names --plan."""
    out = tmp_path / "out"
    code, _, stderr = _invoke("compile", str(LOCAL), "-o", str(out))
    assert code == 0, stderr
    plan = json.loads((out / "plan.json").read_text())
    shares = [3, 1, 2, 2]
    for pipeline, share in zip(plan["pipelines"], shares, strict=True):
        pipeline["microbatches"] = share
    (out / "plan.json").write_text(json.dumps(plan, indent=2))

    code, _, stderr = _invoke("compile", str(LOCAL), "-o", str(out))
    assert code == 4
    assert "--plan PLAN.json" in stderr

    code, _, stderr = _invoke(
        "compile", str(LOCAL), "--plan", str(out / "plan.json"), "-o", str(out)
    )
    assert code == 0, stderr
    assert "predictions are not the simulator's for this spec: recomputed" in stderr
    written = json.loads((out / "plan.json").read_text())
    assert [p["microbatches"] for p in written["pipelines"]] == shares
    manifest = json.loads((out / "manifest.json").read_text())
    assert {e["path"] for e in manifest["files"]} >= {"plan.json", "launch/node0000.sh"}


def test_search_options_do_not_apply_with_plan(compiled: Path, tmp_path: Path) -> None:
    """--plan compiles without searching: a search option beside it is a usage error."""
    code, _, stderr = _invoke(
        "compile",
        str(LOCAL),
        "--plan",
        str(compiled / "plan.json"),
        "-o",
        str(tmp_path / "out"),
        "--top",
        "2",
        "--exact",
    )
    assert code == 2
    assert "--top, --exact: search options do not apply with --plan" in stderr
    assert not (tmp_path / "out").exists()


def test_compile_plan_imports_neither_torch_nor_ortools(compiled: Path, tmp_path: Path) -> None:
    """Checking and compiling a given plan runs the simulator, never torch or a solver."""
    probe = (
        "import sys\n"
        "from hetc.cli import main\n"
        f"sys.argv = ['hetc', 'compile', {str(LOCAL)!r}, '--plan',"
        f" {str(compiled / 'plan.json')!r}, '-o', {str(tmp_path / 'out')!r}]\n"
        "try:\n    main()\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
        "heavy = sorted(m for m in ('torch', 'deepspeed', 'ortools') if m in sys.modules)\n"
        "print(','.join(heavy))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ""
