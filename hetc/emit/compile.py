"""The whole output of `hetc compile` for one planned spec, as bytes by path.

Kept free of the file system so that what is compiled can be checked (and hashed) before
anything is written; `output.write_output` then writes it atomically.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from hetc.costmodel.compiled import compiled_spec_files
from hetc.costmodel.profile import LayerProfile
from hetc.costmodel.simulate import Simulation
from hetc.emit.deepspeed import ConfigKey, config_problems, deepspeed_config
from hetc.emit.launchers import launch_files
from hetc.emit.output import manifest_json
from hetc.emit.report import given_plan_markdown, report_markdown, timeline_svg
from hetc.plan import Plan, capability_problems, plan_to_json
from hetc.plan.canonical import canonical_json_text
from hetc.plan.topology import (
    Topology,
    batch_triple,
    cluster_record,
    rank_file_name,
    rank_record,
    topology_of,
)
from hetc.schema.spec import Spec
from hetc.solver.given import GivenPlan
from hetc.solver.planner import PlanningResult

TRAINING_FORMAT_VERSION = 1


class CompileError(RuntimeError):
    """The compiler was about to write something inconsistent: a bug in hetc, never the
    user's input (that is rejected earlier, with positions)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class CompiledOutput:
    plan: Plan
    topology: Topology
    files: dict[str, bytes]
    """Every file, `manifest.json` included, by path under the output directory."""
    executable: set[str]


def canonical_json(value: Any) -> bytes:
    """Sorted keys, two-space indent, shortest round-tripping floats, a final newline."""
    return (canonical_json_text(value) + "\n").encode()


def training_record(
    spec: Spec, *, spec_dir: str | None = None, profiles: Sequence[LayerProfile] = ()
) -> dict[str, Any]:
    """`training.json`: what the runtime needs from the spec besides the plan (it never reads
    the spec: the runtime imports `hetc.plan` alone). `data.path` is as the spec wrote it;
    `data.resolved` is that path made absolute from the spec's directory (`spec_dir`), which the
    runtime reads unless HETC_DATA_DIR says where the data lives on the training machines.
    `profiles` lists the measured profiles the plan's predictions used, by device, with the
    environment each was measured in, which every rank compares with its own at start-up
    (`hetc.runtime.environment`)."""
    training = spec.training
    data = None
    if spec.data is not None:
        data = asdict(spec.data)
        if spec_dir is not None:
            data["resolved"] = os.path.abspath(os.path.join(spec_dir, spec.data.path))
    return {
        "version": TRAINING_FORMAT_VERSION,
        "spec_name": spec.name,
        "model_name": spec.model_name,
        "model": asdict(spec.model),
        "seq_len": training.seq_len,
        "global_batch_size": training.global_batch_size,
        "precision": training.precision,
        "zero_stage": training.zero_stage,
        "activation_checkpointing": training.activation_checkpointing,
        "dropout": training.dropout,
        "gradient_clipping": training.gradient_clipping,
        "seed": training.seed,
        "optimizer": asdict(training.optimizer),
        "lr_schedule": asdict(training.lr_schedule),
        "data": data,
        "run": asdict(spec.run),
        "profiles": [
            {"device": p.device, "file": Path(p.source).name, "environment": p.environment}
            for p in sorted(profiles, key=lambda p: p.device)
        ],
    }


def _deepspeed_files(
    spec: Spec, plan: Plan, topology: Topology
) -> tuple[dict[str, bytes], dict[int, str]]:
    """Every distinct DeepSpeed config, and each plan rank's config path."""
    files: dict[str, bytes] = {}
    path_of: dict[int, str] = {}
    device_of = {node.id: node.device for node in plan.nodes}
    for process in topology.processes:
        triple = batch_triple(plan, process, microbatches_total=topology.microbatches_total)
        key = ConfigKey(triple=triple, on_cpu=spec.devices[device_of[process.node]].kind == "cpu")
        if key.file_name not in files:
            config = deepspeed_config(spec, key)
            problems = config_problems(config, triple)
            if problems:
                raise CompileError(f"{key.file_name}: " + "; ".join(problems))
            files[key.file_name] = canonical_json(config)
        path_of[process.rank] = key.file_name
    return files, path_of


def compile_output(
    spec: Spec,
    result: PlanningResult,
    *,
    spec_file_name: str,
    spec_dir: str | None = None,
    launchers: Sequence[str] | None = None,
) -> CompiledOutput:
    """The files for the best plan of `result` (which must have at least one proposal);
    `spec_dir`, the spec's directory, resolves a relative data path; `launchers` (None: each
    site's scheduler) chooses the launch files (`hetc.emit.launchers.launch_files`)."""
    best = result.proposals[0]
    return _compiled(
        spec,
        best.plan,
        best.simulation,
        result.model.profiles,
        report=report_markdown(spec, result, spec_path_name=spec_file_name),
        spec_dir=spec_dir,
        launchers=launchers,
    )


def compile_given(
    spec: Spec,
    given: GivenPlan,
    profiles: Sequence[LayerProfile],
    *,
    spec_file_name: str,
    plan_file_name: str,
    spec_dir: str | None = None,
    launchers: Sequence[str] | None = None,
) -> CompiledOutput:
    """The files for a plan given with `hetc compile --plan` (checked: `check_given_plan`),
    simulated with `profiles`; `launchers` as for `compile_output`."""
    report = given_plan_markdown(
        spec,
        given.plan,
        given.simulation,
        profiles,
        spec_path_name=spec_file_name,
        plan_path_name=plan_file_name,
    )
    return _compiled(
        spec,
        given.plan,
        given.simulation,
        profiles,
        report=report,
        spec_dir=spec_dir,
        launchers=launchers,
    )


def _compiled(
    spec: Spec,
    plan: Plan,
    simulation: Simulation,
    profiles: Sequence[LayerProfile],
    *,
    report: str,
    spec_dir: str | None,
    launchers: Sequence[str] | None,
) -> CompiledOutput:
    training = spec.training
    refused = capability_problems(
        plan, zero_stage=training.zero_stage, precision=training.precision
    )
    if refused:
        raise CompileError(
            "the chosen plan is outside the capability matrix: " + "; ".join(refused)
        )
    plan_json = plan_to_json(plan)
    topology = topology_of(plan, tied_embeddings=spec.model.tied_embeddings, plan_json=plan_json)
    files: dict[str, bytes] = {
        "plan.json": plan_json.encode(),
        "training.json": canonical_json(
            training_record(spec, spec_dir=spec_dir, profiles=profiles)
        ),
        "topology/cluster.json": canonical_json(cluster_record(plan, topology)),
        **compiled_spec_files(spec, profiles),
    }
    configs, config_of = _deepspeed_files(spec, plan, topology)
    files.update(configs)
    node_index = {n.id: i for i, n in enumerate(plan.nodes)}
    for process in topology.processes:
        record = rank_record(plan, topology, process, deepspeed_config=config_of[process.rank])
        name = rank_file_name(process, node_index[process.node])
        files[f"topology/{name}"] = canonical_json(record)
    scripts = launch_files(spec, plan, topology, launchers)
    files.update({path: text.encode() for path, text in scripts.items()})
    files["report.md"] = report.encode()
    files["timeline.svg"] = timeline_svg(plan, simulation).encode()
    files["manifest.json"] = manifest_json(
        files, hetc_version=plan.hetc_version, plan_hash=topology.plan_hash
    )
    executable = {
        p for p in scripts if p.endswith((".sh", ".sbatch")) and not p.endswith(".prologue.sh")
    }
    return CompiledOutput(plan=plan, topology=topology, files=files, executable=executable)
