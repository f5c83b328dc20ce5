"""`hetc profile measure` on CPU: the profile it writes against oracles computed here from the
architecture (parameter counts, tensor sizes, the ring formulas), and its refusals."""

from __future__ import annotations

import inspect
import json
import math
import os
import socket
import subprocess
import sys
from dataclasses import asdict
from datetime import datetime
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from hetc.cli import app
from hetc.costmodel.profile import read_profile
from hetc.profiler import collectives
from hetc.profiler.command import ATTENTION, layer_task
from hetc.profiler.layers import BLOCK, RankMeasurement, measure_points
from hetc.profiler.worker import GroupFailed, run_group
from hetc.runtime import model
from hetc.schema import check_file
from hetc.schema.spec import Spec

runner = CliRunner()
LAYERS, HIDDEN, HEADS, FFN, VOCAB, POSITIONS, SEQ = 2, 64, 4, 256, 256, 32, 32
INDEX = {"embedding": 0, "block": 1, "output end": LAYERS + 1}
"""A profile index of each layer kind (every block index holds the one block measured)."""


def write_spec(
    folder: Path,
    *,
    hidden: int = HIDDEN,
    node: int = 2,
    checkpointing: bool = False,
) -> Path:
    path = folder / f"spec-{hidden}-{node}-{checkpointing}.yaml"
    path.write_text(
        f"""version: 1
name: profiler-tiny
model:
  architecture: {{layers: {LAYERS}, hidden: {hidden}, heads: {HEADS}, ffn: {4 * hidden},
                 vocab: {VOCAB}, max_positions: {POSITIONS}}}
training:
  global_batch_size: 4
  seq_len: {SEQ}
  precision: fp32
  optimizer: {{type: adamw, lr: 1.0e-3}}
  activation_checkpointing: {str(checkpointing).lower()}
devices:
  - name: LOCAL-CPU
    kind: cpu
    memory: 2GiB
    peak_tflops: {{fp32: 0.05}}
    memory_bandwidth: 10GB/s
    intra_node: {{kind: shared-memory, bandwidth: 5GB/s}}
    price: 0 USD/h
    source: "test"
zones:
  - name: localhost
    pools:
      - {{device: LOCAL-CPU, quota: 4, gpus_per_node: {node}}}
sites:
  - {{name: local, scheduler: torchrun, zones: [localhost]}}
""",
        encoding="utf-8",
    )
    return path


def load(path: Path) -> Spec:
    spec = check_file(str(path)).spec
    assert spec is not None
    return spec


def parameters(tp: int) -> dict[str, int]:
    """Parameters of each layer kind on one TP rank, from the architecture alone: TP splits
    the vocabulary rows and the attention/MLP matrices (and their column biases); norms, the
    row-parallel biases and the position table are whole on every rank."""
    h, f = HIDDEN, FFN
    split = 3 * (h * h + h) + h * h + (h * f + f) + f * h
    whole = 2 * h + h + 2 * h + h  # two layernorms, the output and fc2 biases
    return {
        "embedding": VOCAB * h // tp + POSITIONS * h,
        "block": split // tp + whole,
        "output end": 2 * h + VOCAB * h // tp,  # final layernorm and the tied table's copy
    }


def run_measure(spec: Path, output: Path, *options: str) -> tuple[int, str]:
    args = ["profile", "measure", str(spec), "--device", "LOCAL-CPU", "-o", str(output)]
    result = runner.invoke(app, [*args, "--warmup", "1", "--repeats", "3", *options])
    return result.exit_code, result.stderr


def test_profile_lists_every_layer_and_point_with_sane_times_and_memory(tmp_path: Path) -> None:
    spec = write_spec(tmp_path)
    output = tmp_path / "profile.json"
    code, stderr = run_measure(spec, output, "--microbatch", "1,2", "--tp", "1", "--no-network")
    assert code == 0, stderr
    assert "TP 1, microbatch 2" in stderr and f"wrote {output}" in stderr
    profile = read_profile(output)
    assert (profile.model, profile.device, profile.precision, profile.seq_len) == (
        "custom",
        "LOCAL-CPU",
        "fp32",
        SEQ,
    )
    assert profile.points() == [(1, 1), (2, 1)]
    assert profile.layer_indices() == list(range(LAYERS + 2))
    for micro, tp in profile.points():
        rows = profile.times[micro][tp]
        assert all(t > 0 for row in rows.values() for t in row)
        assert rows[1] == rows[LAYERS]  # one block measured, written for every block
        assert all(t < 1.0 for row in rows.values() for t in row)
    assert profile.architecture == json.loads(json.dumps(asdict(load(spec).model)))

    memory = profile.memory[1]
    for kind, index in INDEX.items():
        assert memory[index].weight_bytes == parameters(1)[kind] * 4, kind
        one, two = memory[index].activation_bytes[1], memory[index].activation_bytes[2]
        assert two > one > 0, kind
    # The block keeps at least its output, and twice the microbatch keeps about twice.
    block = memory[1].activation_bytes
    assert block[1] >= SEQ * HIDDEN * 4
    assert block[2] == pytest.approx(2 * block[1], rel=0.1)
    # The profiled step runs the embedding, a chain of both blocks (their state is far below
    # any cache) and the output end; per block, the profile lists the chain's average.
    chain = [memory[0], memory[1], memory[1], memory[LAYERS + 1]]
    weights = sum(m.weight_bytes for m in chain)
    kept = sum(m.activation_bytes[1] for m in chain)
    # Weights, gradients, AdamW's two moments and the flat copy the runtime sums gradients in
    # are all alive at the update; weights, the moments and every activation at the end of
    # the forward; at most all of it at once.
    peak = profile.peak_bytes[1][1]
    widest = max(m.weight_bytes for m in chain)  # one layer's flat copy
    assert max(4 * weights + widest, 3 * weights + kept) <= peak <= 5 * weights + 2 * kept

    meta = profile.meta
    assert meta["threads"] == 1 and meta["attention"] == ATTENTION
    assert meta["origin"] == f"measured by hetc profile measure on {socket.gethostname()}"
    assert isinstance(meta["date"], str) and datetime.fromisoformat(meta["date"]).tzinfo
    assert isinstance(meta["software"], dict) and meta["software"]["torch"] == torch.__version__


def test_attention_recorded_is_the_runtimes() -> None:
    source = inspect.getsource(model.Attention.forward)
    assert ATTENTION == "sdpa" and "F.scaled_dot_product_attention(" in source


def _measure_in_process(spec: Path, micro: int = 1) -> RankMeasurement:
    """One thread, as the runtime's CPU ranks (and the command) run: on a busy machine a
    second OpenMP thread waiting for a core makes every kernel slow."""
    task = layer_task(load(spec), (micro,), warmup=1, repeats=5, cuda=False)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        ((measured_micro, result),) = list(measure_points(task, None, 1, 0, torch.device("cpu")))
        assert measured_micro == micro and result is not None
        return result
    finally:
        torch.set_num_threads(threads)


def test_a_four_times_wider_model_is_measurably_slower(tmp_path: Path) -> None:
    narrow = _measure_in_process(write_spec(tmp_path, hidden=64), micro=4)
    wide = _measure_in_process(write_spec(tmp_path, hidden=256), micro=4)
    slow, fast = wide.times[4][BLOCK], narrow.times[4][BLOCK]
    # 16x the block's FLOPs and parameters; at microbatch 4 compute outweighs the overheads
    # that the two share, so even a busy machine shows the forward and backward 3x slower
    # (a ratio, never a wall-clock bound; the update is a few small kernels either way).
    assert slow[0] + slow[1] > 3 * (fast[0] + fast[1])


def test_checkpointing_keeps_only_the_block_output(tmp_path: Path) -> None:
    """The spec's activation checkpointing runs: the block keeps its output and not its
    internals (its input is the embedding's output, counted there)."""
    full = _measure_in_process(write_spec(tmp_path), micro=2)
    checkpointed = _measure_in_process(write_spec(tmp_path, checkpointing=True), micro=2)
    output = 2 * SEQ * HIDDEN * 4
    assert checkpointed.activation_bytes[2][BLOCK] == output
    assert full.activation_bytes[2][BLOCK] > 4 * output
    assert all(t > 0 for t in checkpointed.times[2][BLOCK])


@pytest.mark.slow  # eight processes start torch: ~30 s on 2 cores
def test_tp2_ranks_hold_half_the_split_weights_and_the_network_is_fitted(tmp_path: Path) -> None:
    """TP 2 ranks hold half the split weights; the node's collectives and, for a CPU device,
    the link between two nodes over loopback (one and two flows) are fitted."""
    spec = write_spec(tmp_path)
    output = tmp_path / "tp.json"
    sizes = "4KiB,16KiB,64KiB"
    code, stderr = run_measure(spec, output, "--microbatch", "1", "--tp", "1,2", "--sizes", sizes)
    assert code == 0, stderr
    assert "starting 2 processes for TP 2" in stderr and "fit residual" in stderr
    profile = read_profile(output)
    assert profile.points() == [(1, 1), (1, 2)]
    assert all(t > 0 for row in profile.times[1][2].values() for t in row)
    for kind, index in INDEX.items():
        assert profile.memory[2][index].weight_bytes == parameters(2)[kind] * 4, kind
    half = profile.memory[2][1].weight_bytes / profile.memory[1][1].weight_bytes
    assert 0.5 < half < 0.52  # the block's norms and row biases stay whole
    # TP 2 splits attention heads and the MLP's inner width: each rank keeps less.
    assert profile.memory[2][1].activation_bytes[1] < profile.memory[1][1].activation_bytes[1]
    assert profile.peak_bytes[1][2] < profile.peak_bytes[1][1]
    for collective in ("all_reduce", "all_gather", "p2p"):
        fit = profile.bandwidth("intra_node", collective, 2)
        assert fit is not None and fit.residual is not None and math.isfinite(fit.residual)
        assert [b for b, _ in fit.points] == [4096.0, 16384.0, 65536.0]
        assert all(rate > 0 for _, rate in fit.points)
    between = profile.network["inter_node"]["p2p"]
    assert sorted(between) == [1, 2]  # each TP degree's flows; the node's two devices
    for fit in between.values():
        assert [b for b, _ in fit.points] == [4096.0, 16384.0, 65536.0]
        assert fit.peak == max(rate for _, rate in fit.points) > 0


@pytest.mark.slow  # two TP-2 groups start torch: ~15 s on 2 cores
def test_a_budget_stops_a_tp_group_between_points_and_the_rerun_finishes(tmp_path: Path) -> None:
    """Real ranks: with the budget spent, a TP 2 group stops after the point in progress and
    the file holds it; the same command without a budget measures only the other point."""
    spec = write_spec(tmp_path)
    output = tmp_path / "p.json"
    options = ("--tp", "2", "--microbatch", "1,2", "--no-network")
    code, stderr = run_measure(spec, output, *options, "--budget", "0")
    assert code == 0, stderr
    assert read_profile(output).points() == [(1, 2)]
    assert "not measured: TP 2 at microbatch 2" in stderr
    code, stderr = run_measure(spec, output, *options)
    assert code == 0, stderr
    assert "1 point measured, 1 kept" in stderr
    assert read_profile(output).points() == [(1, 2), (2, 2)]


def test_bandwidth_is_what_the_ring_formulas_divide_by() -> None:
    # 8 MB over 4 devices in 10 ms.
    assert collectives.bandwidth("all_reduce", 8e6, 4, 0.01) == pytest.approx(1.2e9)
    assert collectives.bandwidth("all_gather", 8e6, 4, 0.01) == pytest.approx(6e8)
    assert collectives.bandwidth("p2p", 8e6, 4, 0.01) == pytest.approx(8e8)
    # 4096 bytes gathered from 3 ranks: 341 float32 each, 4092 bytes in all.
    assert collectives.message_bytes("all_gather", 4096, 3) == 4092
    assert collectives.message_bytes("all_reduce", 4096, 3) == 4096


def test_fits_recover_a_constant_link() -> None:
    """Times a 2 GB/s link would give, per collective over 4 devices, fit back to 2 GB/s."""
    sizes = (4096, 65536, 1 << 20, 1 << 24)
    rate, n = 2e9, 4
    factor = {"all_reduce": 2 * (n - 1) / n, "all_gather": (n - 1) / n, "p2p": 1.0}
    seconds = {
        c: [f * collectives.message_bytes(c, s, n) / rate for s in sizes] for c, f in factor.items()
    }
    found = collectives.fits(seconds, sizes, n)
    assert set(found["all_reduce"]) == {4} and set(found["p2p"]) == {2}
    for by_group in found.values():
        (fit,) = by_group.values()
        a, b, c = fit.coefficients
        assert (a, b, c) == pytest.approx((0.0, 0.0, 2.0), abs=1e-9)
        assert fit.peak == pytest.approx(rate) and fit.residual == pytest.approx(0.0, abs=1e-9)


def test_unknown_device_is_refused_by_name(tmp_path: Path) -> None:
    output = tmp_path / "p.json"
    result = runner.invoke(
        app,
        ["profile", "measure", str(write_spec(tmp_path)), "--device", "H100", "-o", str(output)],
    )
    assert result.exit_code == 1
    assert "'H100' is not a device of the spec" in result.stderr and "LOCAL-CPU" in result.stderr
    assert "Traceback" not in result.output and not output.exists()


@pytest.mark.parametrize(
    ("tp", "message"),
    [("4", "LOCAL-CPU nodes have 2 devices"), ("3", "3 does not divide it")],
)
def test_tp_the_runtime_cannot_use_is_refused(tmp_path: Path, tp: str, message: str) -> None:
    node = 2 if tp == "4" else 4
    output = tmp_path / "p.json"
    code, stderr = run_measure(write_spec(tmp_path, node=node), output, "--tp", tp)
    assert code == 1 and message in stderr and not output.exists()


@pytest.mark.slow  # two processes start torch
def test_a_failing_rank_is_one_line_naming_it() -> None:
    """A rank that fails ends the group at once, with its error, not a hang or a traceback."""
    with pytest.raises(GroupFailed) as failed:
        run_group({"kind": "layers", "layers": {}, "cuda": False}, 2, threads=1, deadline_s=120)
    assert str(failed.value) in (
        "rank 0 of 2: KeyError: 'training'",
        "rank 1 of 2: KeyError: 'training'",
    )


def test_malformed_microbatch_is_a_usage_error(tmp_path: Path) -> None:
    code, stderr = run_measure(write_spec(tmp_path), tmp_path / "p.json", "--microbatch", "x")
    assert code == 2 and "--microbatch 'x'" in stderr


@pytest.mark.slow
def test_started_on_two_nodes_the_first_writes_the_link_between_them(tmp_path: Path) -> None:
    """Two processes with the environment a plain env:// launcher gives one process on each
    of two nodes (no GROUP_RANK, rank 0 holding the store): both time the link between them,
    only the first node measures layers and writes; the spec's one zone makes the pair
    `inter_node`, keyed 1 (one device per node sending), and files no link."""
    spec = write_spec(tmp_path, node=1)
    output = tmp_path / "two-nodes.json"
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [
        sys.executable, "-m", "hetc", "profile", "measure", str(spec), "--device", "LOCAL-CPU",
        "-o", str(output), "--warmup", "1", "--repeats", "3", "--tp", "1", "--microbatch", "1",
        "--sizes", "4KiB,64KiB,1MiB",
    ]  # fmt: skip
    base = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    environments = [
        {**base, "RANK": str(r), "WORLD_SIZE": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1"}
        for r in range(2)
    ]
    runs = [
        subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True)
        for env in environments
    ]
    errors = [run.communicate(timeout=300)[1] for run in runs]
    assert [run.returncode for run in runs] == [0, 0], errors
    assert "node 0 (" in errors[1] and "writes the profile of LOCAL-CPU" in errors[1]
    assert "wrote" in errors[0]
    profile = read_profile(output)
    assert list(profile.network["inter_node"]) == ["p2p"]
    fits = profile.network["inter_node"]["p2p"]
    assert sorted(fits) == [1] and fits[1].peak > 0 and profile.links == ()
    assert "intra_node" not in profile.network  # a one-device node has nothing inside it


def test_the_block_chain_outgrows_the_cache() -> None:
    """Twice the cache in state, at most the model's blocks, at least one."""
    from hetc.profiler.layers import STATE_BYTES_PER_PARAMETER, chain_length

    per_block = 1_000_000
    state = per_block * STATE_BYTES_PER_PARAMETER
    assert chain_length(per_block, 32, cache_bytes=4 * state) == 8
    assert chain_length(per_block, 32, cache_bytes=state // 4) == 1
    assert chain_length(per_block, 3, cache_bytes=10 * state) == 3
    assert chain_length(per_block, 32, cache_bytes=state + 1) == 3


def test_the_cpu_cache_is_read_from_sysfs_when_it_says() -> None:
    from hetc.profiler.layers import last_level_cache_bytes

    found = last_level_cache_bytes(torch.device("cpu"))
    sysfs = Path("/sys/devices/system/cpu/cpu0/cache")
    sizes = [e.read_text().strip() for e in sysfs.glob("index*/size")] if sysfs.is_dir() else []
    if sizes:
        largest = max(int(t[:-1]) * (1024 if t[-1] == "K" else 1024**2) for t in sizes)
        assert found == largest
    else:
        assert found == 32 * 1024 * 1024


BLOCK_TORCH = """
import sys

class NoTorch:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] == "torch":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, NoTorch())
from hetc.cli import main
sys.argv[0] = "hetc"
main()
"""


def test_measure_without_torch_is_an_environment_problem(tmp_path: Path) -> None:
    """A Python that cannot import torch: exit 4 with the install line, not exit 70 (an
    internal error); the refusal comes before any file is written."""
    spec = Path(__file__).resolve().parent.parent / "examples" / "local-cpu.yaml"
    out = tmp_path / "profile.json"
    measure = ("profile", "measure", str(spec), "--device", "LOCAL-CPU", "-o", str(out))
    done = subprocess.run(
        [sys.executable, "-c", BLOCK_TORCH, *measure],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 4, done.stderr
    assert f"which {sys.executable} cannot import" in done.stderr
    assert f"To fix: install the runtime extra into this environment: {sys.executable} -m pip" in (
        done.stderr
    )
    assert "torch==2.13.0" in done.stderr and "Traceback" not in done.stderr
    assert not out.exists()
