"""Launch scripts: torchrun per node, Slurm het-jobs per site. Checked by running them - with
fake `scontrol`, `srun` and `torchrun` that record what they were given - by `bash -n`, and by
shellcheck; and with names full of shell syntax, to prove that nothing in them executes."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hetc.cli import app
from hetc.emit.launch import nccl_stream_environment, site_file_name
from hetc.schema import check_text
from hetc.schema.spec import Site

ROOT = Path(__file__).resolve().parent.parent
runner = CliRunner()

NASTY = "a b $(touch PWNED1) `touch PWNED2`; touch PWNED3 'q' \"dq\" ü"

SPEC = """\
version: 1
name: {name}
model:
  architecture: {{layers: 4, hidden: 64, heads: 4, ffn: 256, vocab: 512, max_positions: 128}}
training: {{global_batch_size: 12, seq_len: 64, precision: fp32, zero_stage: 0}}
devices:
  - {{name: {fast}, kind: cpu, memory: 2GiB, peak_tflops: {{fp32: 0.08}}, memory_bandwidth: 10GB/s,
     intra_node: {{kind: shared-memory, bandwidth: 5GB/s}}, source: "nominal"}}
  - {{name: {slow}, kind: cpu, memory: 2GiB, peak_tflops: {{fp32: 0.04}}, memory_bandwidth: 10GB/s,
     intra_node: {{kind: shared-memory, bandwidth: 5GB/s}}, source: "nominal"}}
zones:
  - name: {zone}
    pools:
      - {{name: {pool_a}, device: {fast}, quota: 2, gpus_per_node: 2, price: 0.2 USD/h,
         slurm: {{partition: cpu-a}}}}
      - {{name: {pool_b}, device: {slow}, quota: 4, gpus_per_node: 2, price: 0.1 USD/h,
         slurm: {{partition: cpu-b}}}}
network:
  intra_zone: {{bandwidth: 40Gbps, latency: 5us}}
sites:
  - {{name: {site}, scheduler: slurm, zones: [{zone}], time_limit: "10"{prologue}}}
"""


def _quoted(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def _spec_text(nasty: bool, prologue: str | None = None) -> str:
    def name(base: str) -> str:
        return _quoted(f"{base} {NASTY}" if nasty else base)

    return SPEC.format(
        name=name("spec"),
        fast=name("CPU-FAST"),
        slow=name("CPU-SLOW"),
        zone=name("rack"),
        pool_a=name("pool-a"),
        pool_b=name("pool-b"),
        site=name("ci"),
        prologue="" if prologue is None else f", prologue: {_quoted(prologue)}",
    )


def _compile(tmp_path: Path, text: str) -> Path:
    spec = tmp_path / "spec.yaml"
    spec.write_text(text, encoding="utf-8")
    out = tmp_path / "out"
    result = runner.invoke(app, ["compile", str(spec), "-o", str(out)])
    assert result.exit_code == 0, result.output
    return out


FAKE_TOOLS = {
    "scontrol": """#!/usr/bin/env bash
if [[ "$1 $2" == "show job" ]]; then
    printf 'JobId=%s JobName=x\\n   Command=%s\\n' "$3" "$FAKE_SUBMITTED"
elif [[ "$1 $2" == "show hostnames" ]]; then
    echo fake-host-1
fi
""",
    "srun": """#!/usr/bin/env bash
# Runs the step's command once per node, as Slurm would on N nodes, with SLURM_NODEID set.
echo "$*" >> "$FAKE_LOG.srun"
while [[ "$1" != bash ]]; do shift; done
shift
read -r -a nodes <<< "$HETC_STEP_NODES"
for (( i = 0; i < ${#nodes[@]}; i++ )); do
    SLURM_NODEID=$i bash "$1" || exit $?
done
""",
    "torchrun": """#!/usr/bin/env python3
import json, os, sys
with open(os.environ["FAKE_LOG"], "a", encoding="utf-8") as log:
    log.write(json.dumps({"argv": sys.argv[1:], "node": os.environ["HETC_NODE"],
                          "out": os.environ["HETC_OUT"],
                          "prologue": os.environ.get("FAKE_PROLOGUE_RAN"),
                          "nccl": {k: v for k, v in os.environ.items() if k.startswith("NCCL_")}})
              + "\\n")
""",
}


def _fake_bin(tmp_path: Path) -> Path:
    bin_dir = tmp_path / "fakebin"
    bin_dir.mkdir()
    for name, text in FAKE_TOOLS.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    return bin_dir


def _run_batch_script(
    tmp_path: Path, out: Path, script: Path, **extra: str
) -> tuple[int, str, list[dict[str, object]]]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    bin_dir = _fake_bin(tmp_path)
    log = tmp_path / "torchrun.log"
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    env = {
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "HOME": str(tmp_path),
        "SLURM_JOB_ID": "4242",
        "SLURM_JOB_NODELIST_HET_GROUP_0": "fake-host-[1-2]",
        "SLURM_SUBMIT_DIR": str(work),
        "FAKE_SUBMITTED": os.path.relpath(script, work),
        "FAKE_LOG": str(log),
        "HETC_TORCHRUN": str(bin_dir / "torchrun"),
        **extra,
    }
    done = subprocess.run(
        ["bash", str(script)], cwd=work, env=env, capture_output=True, text=True, check=False
    )
    calls = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return done.returncode, done.stdout + done.stderr, calls


def _no_payload_ran(*places: Path) -> None:
    for place in places:
        found = [p for p in place.rglob("PWNED*")]
        assert not found, found


@pytest.mark.parametrize("nasty", [False, True], ids=["plain", "nasty-names"])
def test_batch_script_starts_one_torchrun_per_node_with_its_literal_node_id(
    tmp_path: Path, nasty: bool
) -> None:
    out = _compile(tmp_path, _spec_text(nasty))
    cluster = json.loads((out / "topology" / "cluster.json").read_text())
    scripts = sorted((out / "launch").glob("*.sbatch"))
    assert len(scripts) == 1
    assert scripts[0].name == ("site0.sbatch" if nasty else "ci.sbatch")
    code, output, calls = _run_batch_script(tmp_path, out, scripts[0])
    assert code == 0, output
    expected = [(n["id"], len(n["processes"])) for n in cluster["nodes"] if n["processes"]]
    assert [(c["node"], _flag(c, "--nproc-per-node")) for c in calls] == [
        (node, str(count)) for node, count in expected
    ]
    for call in calls:
        assert _flag(call, "--nnodes") == str(len(expected))
        assert _flag(call, "--rdzv-endpoint") == "fake-host-1:29500"
        assert _flag(call, "--rdzv-id") == "hetc-4242"
        assert call["argv"][-3:] == ["-m", "hetc.runtime", str(out.resolve())]
        assert call["out"] == str(out.resolve())
    if nasty:
        assert any(NASTY in c["node"] for c in calls)  # type: ignore[operator]
    _no_payload_ran(tmp_path, Path.cwd())


def _flag(call: dict[str, object], name: str) -> str:
    argv = call["argv"]
    assert isinstance(argv, list)
    return next(a.split("=", 1)[1] for a in argv if a.startswith(f"{name}="))


def test_node_scripts_run_alone_with_nasty_names(tmp_path: Path) -> None:
    out = _compile(tmp_path, _spec_text(nasty=True))
    bin_dir = _fake_bin(tmp_path)
    log = tmp_path / "torchrun.log"
    nodes = sorted((out / "launch").glob("node*.sh"))
    cluster = json.loads((out / "topology" / "cluster.json").read_text())
    for script in nodes:
        syntax = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
        assert syntax.returncode == 0, syntax.stderr
        done = subprocess.run(
            ["bash", str(script)],
            cwd=tmp_path,
            env={
                "PATH": os.environ["PATH"],
                "FAKE_LOG": str(log),
                "HETC_TORCHRUN": str(bin_dir / "torchrun"),
            },
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert "rendezvous at 127.0.0.1:29500" in done.stderr
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert [c["node"] for c in calls] == [n["id"] for n in cluster["nodes"] if n["processes"]]
    _no_payload_ran(tmp_path)


def test_prologue_runs_once_per_job_and_in_node_scripts_started_alone(tmp_path: Path) -> None:
    marker = tmp_path / "prologue.count"
    prologue = f'echo ran >> "{marker}"\nexport FAKE_PROLOGUE_RAN=yes'
    out = _compile(tmp_path, _spec_text(nasty=False, prologue=prologue))
    code, output, calls = _run_batch_script(tmp_path, out, out / "launch" / "ci.sbatch")
    assert code == 0, output
    assert marker.read_text().splitlines() == ["ran"], "once, in the batch shell"
    assert all(c["prologue"] == "yes" for c in calls)
    marker.unlink()
    node = next(iter(sorted((out / "launch").glob("node*.sh"))))
    subprocess.run(
        ["bash", str(node)],
        env={
            "PATH": os.environ["PATH"],
            "FAKE_LOG": str(tmp_path / "x.log"),
            "HETC_TORCHRUN": str(tmp_path / "fakebin" / "torchrun"),
        },
        check=True,
        capture_output=True,
    )
    assert marker.read_text().splitlines() == ["ran"]


def test_usr1_trap_requests_a_checkpoint_and_the_step_runs_on(tmp_path: Path) -> None:
    """The batch shell waits on a background srun; USR1 writes the request and the wait
    resumes, so the job's exit status is the step's."""
    out = _compile(tmp_path, _spec_text(nasty=False))
    bin_dir = _fake_bin(tmp_path)
    (bin_dir / "srun").write_text("#!/usr/bin/env bash\nsleep 2\nexit 7\n")
    work = tmp_path / "work"
    work.mkdir()
    env = {
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "SLURM_JOB_ID": "1",
        "SLURM_JOB_NODELIST": "fake-host-1",
        "SLURM_SUBMIT_DIR": str(work),
        "FAKE_SUBMITTED": str(out / "launch" / "ci.sbatch"),
        "HETC_RUN_DIR": str(tmp_path / "run"),
    }
    process = subprocess.Popen(
        ["bash", str(out / "launch" / "ci.sbatch")],
        cwd=work,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    request = tmp_path / "run" / "checkpoint-request"
    import time

    deadline = time.monotonic() + 10
    while not (tmp_path / "run").is_dir():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    time.sleep(0.5)
    process.send_signal(10)
    output, _ = process.communicate(timeout=20)
    assert request.exists(), output
    assert "USR1 received" in output
    assert process.returncode == 7, "the step's own exit status, not the signal's"


TWO_SITES = """\
version: 1
name: two-sites
model:
  architecture: {layers: 4, hidden: 256, heads: 4, ffn: 1024, vocab: 512, max_positions: 128}
training: {global_batch_size: 64, seq_len: 128, precision: fp32, zero_stage: 0}
devices:
  - {name: CPU-FAST, kind: cpu, memory: 2GiB, peak_tflops: {fp32: 0.08}, memory_bandwidth: 10GB/s,
     intra_node: {kind: shared-memory, bandwidth: 5GB/s}, source: "nominal"}
zones:
  - name: east
    pools: [{device: CPU-FAST, quota: 2, gpus_per_node: 2, price: 0.1 USD/h}]
  - name: west
    pools: [{device: CPU-FAST, quota: 2, gpus_per_node: 2, price: 0.1 USD/h}]
network:
  intra_zone: {bandwidth: 40Gbps, latency: 5us}
  inter_zone: {bandwidth: 40Gbps, latency: 5us}
sites:
  - {name: east-site, scheduler: slurm, zones: [east]}
  - {name: west-site, scheduler: slurm, zones: [west]}
"""


def test_multi_site_plan_requires_a_shared_rendezvous(tmp_path: Path) -> None:
    out = _compile(tmp_path, TWO_SITES)
    cluster = json.loads((out / "topology" / "cluster.json").read_text())
    assert {n["zone"] for n in cluster["nodes"]} == {"east", "west"}, "the plan spans both"
    total = sum(1 for n in cluster["nodes"] if n["processes"])
    assert sorted(p.name for p in (out / "launch").glob("*.sbatch")) == [
        "east-site.sbatch",
        "west-site.sbatch",
    ]
    started = []
    for site in ("east-site", "west-site"):
        script = out / "launch" / f"{site}.sbatch"
        code, output, _ = _run_batch_script(tmp_path / site, out, script)
        assert code != 0 and "HETC_RDZV_ENDPOINT" in output
        code, output, calls = _run_batch_script(
            tmp_path / f"{site}-2",
            out,
            script,
            HETC_RDZV_ENDPOINT="head:1234",
            HETC_RDZV_ID="run7",
        )
        assert code == 0, output
        assert {_flag(c, "--rdzv-endpoint") for c in calls} == {"head:1234"}
        assert {_flag(c, "--rdzv-id") for c in calls} == {"run7"}
        assert {_flag(c, "--nnodes") for c in calls} == {str(total)}
        started += [c["node"] for c in calls]
    assert sorted(started) == sorted(n["id"] for n in cluster["nodes"] if n["processes"])


def test_nccl_streams_follow_the_spec_across_regions() -> None:
    checked = check_text(
        _spec_text(nasty=False).replace(
            "network:\n  intra_zone: {bandwidth: 40Gbps, latency: 5us}",
            "network:\n  intra_zone: {bandwidth: 40Gbps, latency: 5us}\n"
            "  inter_region: {bandwidth: 1Gbps, latency: 30ms, tcp_streams: 40}",
        )
    )
    assert checked.spec is not None, [d.format() for d in checked.diagnostics]
    from hetc.plan import Node, Plan

    def plan_over(regions: list[str]) -> Plan:
        nodes = tuple(
            Node(id=f"p@z{i}/n0", zone=f"z{i}", region=r, pool="p", device="CPU-FAST", devices=1)
            for i, r in enumerate(regions)
        )
        return Plan(
            spec_hash="0" * 64,
            hetc_version="x",
            model_blocks=1,
            global_batch_size=1,
            microbatch_size=1,
            nodes=nodes,
            stages=(),
            pipelines=(),
        )

    environment = dict(nccl_stream_environment(checked.spec, plan_over(["r1", "r2"])))
    threads, sockets = (
        int(environment["NCCL_SOCKET_NTHREADS"]),
        int(environment["NCCL_NSOCKS_PERTHREAD"]),
    )
    assert threads * sockets <= 64 and threads <= 16
    assert (threads, sockets) == (16, 2)
    assert nccl_stream_environment(checked.spec, plan_over(["r1", "r1"])) == []


def test_site_file_names_are_plain() -> None:
    assert site_file_name(Site(name="gpu-cluster.1", zones=("z",)), 0) == "gpu-cluster.1.sbatch"
    assert site_file_name(Site(name="../etc", zones=("z",)), 3) == "site3.sbatch"
    assert site_file_name(Site(name=NASTY, zones=("z",)), 1) == "site1.sbatch"


@pytest.mark.slow
def test_every_generated_script_passes_shellcheck(tmp_path: Path) -> None:
    """All bundled examples, the nasty-names spec and one with a prologue: no finding, and no
    disable directive but SC2016 (none is needed today)."""
    if shutil.which("shellcheck") is None:
        pytest.fail("shellcheck is not installed: scripts/test.sh installs Debian's package")
    outputs = []
    for example in sorted((ROOT / "examples").glob("*.yaml")):
        if example.name == "internet-scale.yaml":
            continue  # no plan in 5 s; plain names, the same templates (test_internet_scale)
        out = tmp_path / example.stem
        # The launch scripts do not depend on the plan being proven best.
        result = runner.invoke(app, ["compile", str(example), "-o", str(out), "--time-limit", "5"])
        assert result.exit_code == 0, (example, result.output)
        outputs.append(out)
    for i, text in enumerate([_spec_text(True), _spec_text(False, "module load cuda")]):
        (tmp_path / f"s{i}").mkdir()
        outputs.append(_compile(tmp_path / f"s{i}", text))
    scripts = [
        s
        for out in outputs
        for s in sorted((out / "launch").iterdir())
        if not s.name.endswith(".prologue.sh")  # the user's own shell code
    ]
    assert any(s.suffix == ".sbatch" for s in scripts)
    for script in scripts:
        disables = re.findall(r"shellcheck disable=(\S+)", script.read_text())
        assert set(disables) <= {"SC2016"}, (script, disables)
    checked = subprocess.run(
        ["shellcheck", "--shell=bash", *map(str, scripts)], capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stdout
