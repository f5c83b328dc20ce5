"""Checkpoints any plan can resume: whole tensors by parameter name, written atomically in the
background, read back as each rank's shard.

A run is resumed on whatever devices are free, so a checkpoint must not depend on the plan
that wrote it. It stores each parameter of the model contract (`hetc.runtime.model`) as ONE
whole tensor under its name, and the optimizer's per-parameter state the same way, so another
stage cut, data-parallel width or TP degree reads it by name and takes its own `shard`:

    <checkpoint_dir>/latest                  "step-<k>": the newest complete checkpoint (only
                                             ever moved forward; `hetc.runtime.history`)
    <checkpoint_dir>/step-<k>/meta.json      step (the next step to train), data position,
                                             hetc version, model, optimizer (torch's class
                                             name), plan hash that wrote it, the run that
                                             wrote it (a token, the step it started from),
                                             fp16 loss-scaler
                                             state, optimizer state it could not save (then
                                             no run resumes from it), sha256 of every other
                                             file
    <checkpoint_dir>/step-<k>/params/<name>.pt   the whole parameter (`torch.save`)
    <checkpoint_dir>/step-<k>/optim/<name>.pt    {state key: tensor}: the whole exp_avg and
                                             exp_avg_sq and the step count (Adam, AdamW), the
                                             momentum buffer (SGD with momentum); absent
                                             where the optimizer keeps no state

A stage trained through a DeepSpeed engine (ZeRO 1/2, `hetc.runtime.engine`) writes the same
files: its weights are the fp32 masters and its state the base optimizer's, both partitioned
over the stage's replicas, which DeepSpeed's `safe_get_full_*` helpers assemble per parameter
(an all-reduce over the replicas each, so every replica takes part), with the step count in
torch's form. Read back, each rank sets its fragments through `safe_set_full_*` and the
module's low-precision copy from the whole tensor, so a checkpoint from either path resumes
on either.

`run.checkpoint_dir` is taken relative to the run directory (`HETC_RUN_DIR`) unless absolute:
the run directory is where a run's other records go, and each Slurm job gets its own by
default, so set `HETC_RUN_DIR` or an absolute `checkpoint_dir` to resume across jobs. Every
node must see the directory (a shared file system): plan rank 0 publishes what the others
wrote.

Writing. For each stage, replica 0's TP ranks all-gather their shards and its TP rank 0
writes that stage's files (the tied token table only from the first stage). The tensors are
copied to host memory while training waits, then a background thread writes them into
`step-<k>.tmp-<token>/`, fsyncs them and drops a done marker carrying their digests (or a
failed marker with the reason). Plan rank 0's thread waits for every writer's marker, writes
meta.json, renames the directory to `step-<k>/` and moves `latest` forward; a crash at any
earlier point leaves `latest` on the previous complete checkpoint (and a `*.tmp-*` directory
that may be deleted). Where `step-<k>/` exists already (another run's), the existing one is
kept and this run's copy removed: no run replaces a published checkpoint
(`hetc.runtime.history` has the rules). The next checkpoint, and the end of the run, first
wait for the write in flight; a failed write stops every rank with one message.

Triggers (`Checkpointer.after_step`): every `run.checkpoint_every` steps, at the end of the
run, when the run directory's `checkpoint-request` file appears (the Slurm USR1 trap writes
it; the file is removed once that checkpoint is complete), on SIGUSR1 to the process, and on
SIGTERM, after which the ranks stop once the checkpoint is complete (`hetc.runtime.signals`).
Ranks see files and signals at different moments, so each iteration they all-reduce what
they saw (in the iteration's one control all-reduce, before its optimizer step:
`Checkpointer.observe`, `StageTrainer.agree`) and act together after it.

Reading (`load_checkpoint`). `--resume` with no path, and the runtime's default, take the
newest complete checkpoint of the run's checkpoint directory (`hetc.runtime.history`). Every
rank reads the whole tensors of its own parameters, checks their sha256 against meta.json, and
keeps its shard (on an engine's stage, the fragments of it that ZeRO gave the rank); any
failure on any rank (a missing, truncated or corrupted file, another model) is gathered so that
every rank stops with the same message naming the file, rather than some ranks hanging in the
next collective.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import secrets
import shutil
import sys
import threading
import time
import weakref
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from hetc.runtime.data import DataError, DataPosition
from hetc.runtime.history import advance_latest, newest_checkpoint, publish
from hetc.runtime.model import ParamSpec, shard
from hetc.runtime.signals import Signals
from hetc.runtime.startup import CHECKPOINT_REQUEST, checkpoint_requested, installed_hetc_version
from hetc.runtime.train import TOKEN_TABLE, StageTrainer, TrainingError

FORMAT = 1
"""meta.json's `format`; a reader refuses others rather than misreading them."""
LATEST = "latest"
META = "meta.json"
LATEST_CHOICE = "latest"
"""`--resume`'s choice for the newest complete checkpoint of the run's directory."""

Contents = dict[str, Tensor | dict[str, Tensor]]
"""File path inside a checkpoint -> a whole parameter, or a parameter's optimizer state."""


class CheckpointError(RuntimeError):
    """A checkpoint cannot be written or read; the message names the file."""


def checkpoint_root(trainer: StageTrainer) -> Path:
    """Where this run's checkpoints go (see the module docstring)."""
    return trainer.started.run_dir / str(trainer.training["run"]["checkpoint_dir"])


# -- writing -------------------------------------------------------------------------------


class Checkpointer:
    """One process's part in writing checkpoints; every method is called by every rank."""

    def __init__(
        self,
        trainer: StageTrainer,
        root: Path,
        *,
        timeout: float,
        start_step: int,
        signals: Signals,
    ) -> None:
        self.trainer = trainer
        self.root = root
        self.timeout = timeout
        """How long plan rank 0 waits for the other writers' markers."""
        self.every: int | None = trainer.training["run"]["checkpoint_every"]
        self.rank = trainer.started.plan_rank
        self.writers = sorted(
            m.rank for m in trainer.members.values() if m.replica == 0 and m.tp_rank == 0
        )
        self._saved = start_step
        """The step of the newest checkpoint taken or resumed from: never written twice."""
        self._start_step = start_step
        self._run_token = secrets.token_hex(8)
        """Names this run in the meta.json it writes (plan rank 0's token is the one used)."""
        self._thread: threading.Thread | None = None
        self._error: str | None = None
        """Set by the background thread when its write failed."""
        self._serving_request = False
        """A checkpoint-request file is being served by the write in flight."""
        self.signals = signals
        self._checkpoints_seen = 0
        self._stops_seen = 0
        self._stop_weight = trainer.started.world_size + 1
        """The signal field of the agreement counts SIGUSR1s as 1 and SIGTERMs as this, so
        that one float summed over every rank says both (at most world-size of each)."""
        self.stopping = False
        """The ranks agreed to stop (SIGTERM) at this boundary; set by `after_step`."""
        # Weakly: a trainer that kept its checkpointer alive would be a reference cycle, freed
        # only by a later garbage collection, possibly at interpreter shutdown, where a gloo
        # worker thread dropping a tensor aborts the process (see SignalCount).
        trainer.observe = weakref.WeakMethod(self.observe)

    def observe(self) -> list[float]:
        """What this rank sees now, for the iteration's agreement (`StageTrainer.agree`): a
        request file, the signals since the last look (a SIGUSR1 counts 1, a SIGTERM
        `_stop_weight`), its write still in flight, its write failed."""
        checkpoints, stops = self.signals.checkpoints, self.signals.stops
        signalled = float(checkpoints > self._checkpoints_seen)
        signalled += self._stop_weight * float(stops > self._stops_seen)
        self._checkpoints_seen, self._stops_seen = checkpoints, stops
        busy = self._thread is not None and self._thread.is_alive()
        failed = not busy and self._error is not None
        requested = checkpoint_requested(self.trainer.started.run_dir)
        return [float(requested), signalled, float(busy), float(failed)]

    def after_step(self, next_step: int) -> bool:
        """Checkpoint before `next_step` if any rank was asked to (as the iteration just
        trained agreed) or it is time to. Returns True when the ranks must stop now (a
        SIGTERM somewhere): the checkpoint is then complete everywhere."""
        requested, signals, any_busy, any_failed = self.trainer.agreed_values
        stop = round(signals) >= self._stop_weight
        signalled = round(signals) % self._stop_weight > 0
        if any_failed:
            self._settle()
        if self._serving_request:
            requested = False  # the file this look saw is the one being served
            if not any_busy:
                self._remove_request()
        if stop:
            self.signals.stop_learnt()
            self.stopping = True
            self.close(next_step)
            return True
        periodic = self.every is not None and next_step % self.every == 0
        if requested or signalled or periodic:
            self.save(next_step)
            self._serving_request = bool(requested)
        return False

    def close(self, step: int) -> None:
        """The end of the run: checkpoint `step` unless just done, and wait until it is
        complete everywhere."""
        if step != self._saved:
            self.save(step)
        self._settle()

    def save(self, step: int) -> None:
        """Start writing the checkpoint taken before `step`; returns once the tensors are
        copied."""
        token = self._settle()
        self._saved = step
        contents = stage_contents(self.trainer)
        if contents is None and self.rank != 0:
            return
        tmp = self.root / f"step-{step}.tmp-{token}"
        tmp.mkdir(parents=True, exist_ok=True)
        meta = self._meta(step) if self.rank == 0 else None
        unsaved = _unsaved_state(self.trainer)
        self._thread = threading.Thread(
            target=self._write,
            args=(step, tmp, contents, unsaved, meta),
            name=f"hetc-checkpoint-{step}",
        )
        self._thread.start()

    def _meta(self, step: int) -> dict[str, Any]:
        """meta.json but its digests, taken now: the loss scale moves on while the files are
        written."""
        trainer = self.trainer
        return {
            "format": FORMAT,
            "step": step,
            "data_position": trainer.data.position(step).to_json(),
            "hetc_version": installed_hetc_version(),
            "model": trainer.training["model"],
            "optimizer": _update_rule(trainer),
            "plan_hash": trainer.rank_file["plan_hash"],
            "written_by": {"run": self._run_token, "started_from": self._start_step},
            "loss_scaler": _loss_scaler(trainer),
        }

    def _settle(self) -> str:
        """Wait for this rank's write in flight, then agree with every rank: raise the same
        error everywhere if any write failed. Returns a fresh token from plan rank 0 that
        names the next temporary directory (a crashed attempt's markers are never reused)."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        token = secrets.token_hex(4) if self.rank == 0 else None
        gathered = _all_gather((self.rank, self._error, token))
        self._error = None
        failures = [(rank, error) for rank, error, _ in gathered if error is not None]
        if failures:
            rank, error = failures[0]
            more = f" (and {len(failures) - 1} other ranks failed)" if len(failures) > 1 else ""
            raise CheckpointError(f"writing a checkpoint failed on plan rank {rank}: {error}{more}")
        if self._serving_request:
            self._remove_request()
        return next(str(t) for _, _, t in gathered if t is not None)

    def _remove_request(self) -> None:
        (self.trainer.started.run_dir / CHECKPOINT_REQUEST).unlink(missing_ok=True)
        self._serving_request = False

    def _write(
        self,
        step: int,
        tmp: Path,
        contents: Contents | None,
        unsaved: str | None,
        meta: dict[str, Any] | None,
    ) -> None:
        try:
            if contents is not None:
                self._write_part(tmp, contents, unsaved)
            if meta is not None:
                self._commit(step, tmp, meta)
        except Exception as exc:  # reported by every rank at the next agreement
            self._error = f"{type(exc).__name__}: {exc}"

    def _write_part(self, tmp: Path, contents: Contents, unsaved: str | None) -> None:
        digests: dict[str, str] = {}
        try:
            for relative, value in contents.items():
                buffer = io.BytesIO()
                torch.save(value, buffer)
                digests[relative] = _write_synced(tmp / relative, buffer.getvalue())
            for folder in {(tmp / r).parent for r in contents}:
                _sync_directory(folder)
        except Exception as exc:
            # Tell plan rank 0 at once, so that it does not wait out its timeout.
            failure = {"error": f"{type(exc).__name__}: {exc}"}
            _write_marker(tmp / f"failed-{self.rank:05d}.json", failure)
            raise
        marker = {"files": digests, "unsaved_state": unsaved}
        _write_marker(tmp / f"done-{self.rank:05d}.json", marker)

    def _commit(self, step: int, tmp: Path, meta: dict[str, Any]) -> None:
        """Plan rank 0: once every writer is done, publish `tmp` as `step-<step>`."""
        files: dict[str, str] = {}
        unsaved: list[str] = []
        deadline = time.monotonic() + self.timeout
        for writer in self.writers:
            done, failed = tmp / f"done-{writer:05d}.json", tmp / f"failed-{writer:05d}.json"
            while not done.exists():
                if failed.exists():
                    reason = json.loads(failed.read_text(encoding="utf-8"))["error"]
                    raise CheckpointError(f"plan rank {writer} could not write {tmp}: {reason}")
                if time.monotonic() > deadline:
                    raise CheckpointError(
                        f"plan rank {writer} did not finish its part of {tmp} within"
                        f" {self.timeout:g} s (no {done.name}; is the checkpoint directory on a"
                        f" file system every node shares?); {LATEST} still names the previous"
                        " checkpoint"
                    )
                time.sleep(0.05)
            marker = json.loads(done.read_text(encoding="utf-8"))
            files |= marker["files"]
            unsaved += [marker["unsaved_state"]] if marker["unsaved_state"] else []
        complete = {**meta, "unsaved_state": unsaved, "files": dict(sorted(files.items()))}
        _write_synced(tmp / META, _json(complete))
        for writer in self.writers:
            (tmp / f"done-{writer:05d}.json").unlink()
        _sync_directory(tmp)
        final = self.root / f"step-{step}"
        if not _publish(tmp, final):
            shutil.rmtree(tmp, ignore_errors=True)
            print(
                f"hetc-runtime: warning: {final} exists (another run's checkpoint); it is kept"
                f" and this run's checkpoint of step {step} is not published",
                file=sys.stderr,
                flush=True,
            )
            return
        advance_latest(self.root, step)
        _sync_directory(self.root)


def stage_contents(trainer: StageTrainer) -> Contents | None:
    """This stage's whole tensors by file, on TP rank 0 of replica 0 of each stage (None
    elsewhere); copies, so training may go on while they are written. Replica 0's TP ranks
    all-gather together, in parameter order; on a DeepSpeed engine's stage every replica first
    takes part in assembling each master and state tensor from ZeRO's partitions."""
    rank_file = trainer.rank_file
    engine = trainer.engine
    if engine is None and rank_file["replica"] != 0:
        return None
    contents: Contents = {}
    for name, parameter in trainer.parameters.items():
        if name == TOKEN_TABLE and rank_file["stage"] != 0:
            continue  # the last stage's copy of the tied table equals the first stage's
        if engine is None:
            weight, state = parameter.detach(), trainer.optimizer.state.get(parameter)
        else:
            weight, state = engine.full_state(parameter)
        if rank_file["replica"] != 0:
            continue
        spec = trainer.specs[name]
        contents[f"params/{name}.pt"] = _host_copy(_whole(trainer, weight, spec))
        if state:
            contents[f"optim/{name}.pt"] = {
                key: _host_copy(
                    _whole(trainer, value.detach(), spec)
                    if value.shape == parameter.shape
                    else value.detach()
                )
                for key, value in sorted(state.items())
            }
    return contents if rank_file["replica"] == 0 and trainer.tp_rank == 0 else None


def _update_rule(trainer: StageTrainer) -> str:
    """The optimizer a checkpoint names: torch's class name on both paths, so that either
    resumes what the other wrote (a ZeRO optimizer wraps torch's class or DeepSpeed's own)."""
    if trainer.engine is None:
        return type(trainer.optimizer).__name__
    return trainer.engine.update_rule()


def _loss_scaler(trainer: StageTrainer) -> dict[str, Any] | None:
    """fp16's loss-scaler state in `LossScaler`'s fields on either path (None otherwise): every
    rank agrees on overflow, so plan rank 0's scale is every stage's."""
    if trainer.scaler is not None:
        return asdict(trainer.scaler)
    return None if trainer.engine is None else trainer.engine.loss_scaler()


def _unsaved_state(trainer: StageTrainer) -> str | None:
    """Why this stage's optimizer state is not all in the checkpoint, if it is not: a ZeRO
    optimizer's state other than per-element tensors and the step count belongs to no
    parameter. The rest is still written, for inspection, but no run may resume from it as
    if that state were there."""
    unsaved = [] if trainer.engine is None else trainer.engine.unsaved_state()
    if not unsaved:
        return None
    return (
        f"stage {trainer.rank_file['stage']}'s optimizer ({_update_rule(trainer)}) keeps"
        f" {', '.join(unsaved)}, which no parameter owns, so hetc cannot save it by name"
    )


def _host_copy(value: Tensor) -> Tensor:
    """A copy in host memory: the thread writes it while training changes the original, and
    a copy on the GPU would cost device memory."""
    return value.to("cpu", copy=True)


def _whole(trainer: StageTrainer, value: Tensor, spec: ParamSpec) -> Tensor:
    """The whole tensor from replica 0's TP ranks (`value` itself where it is whole)."""
    if spec.tp_dim is None or trainer.tp_size == 1:
        return value
    gathered = [torch.empty_like(value) for _ in range(trainer.tp_size)]
    dist.all_gather(gathered, value.contiguous(), group=trainer.tp_group)
    order = trainer.started.group_ranks[trainer.rank_file["tp"]["group"]]
    by_tp = {trainer.members[r].tp_rank: g for r, g in zip(order, gathered, strict=True)}
    return torch.cat([by_tp[k] for k in range(trainer.tp_size)], dim=spec.tp_dim)


def _publish(tmp: Path, final: Path) -> bool:
    """Rename `tmp` to `final` unless a checkpoint is there already, which is never replaced
    (`hetc.runtime.history.publish`); returns whether it was published."""
    published = publish(tmp, final)
    if published:
        _sync_directory(final.parent)
    return published


def _json(record: Mapping[str, Any]) -> bytes:
    return (json.dumps(record, sort_keys=True, indent=2) + "\n").encode()


def _write_marker(path: Path, record: Mapping[str, Any]) -> None:
    """Write a marker under another name and rename it into place: plan rank 0 reads a marker
    as soon as its name appears, which must not be before its content."""
    part = path.with_name(f"{path.name}.part")
    _write_synced(part, _json(record))
    os.replace(part, path)


def _write_synced(path: Path, data: bytes) -> str:
    """Write and fsync `path`; returns the sha256 of what was written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as file:
        file.write(data)
        file.flush()
        os.fsync(file.fileno())
    return hashlib.sha256(data).hexdigest()


def _sync_directory(path: Path) -> None:
    """fsync a directory, so that the names in it (not only the files' bytes) survive a crash."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _all_gather(item: Any) -> list[Any]:
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, item)
    return gathered


# -- reading -------------------------------------------------------------------------------


def resolve(choice: str, root: Path) -> Path:
    """The checkpoint that `--resume CHOICE` names: 'latest' is `root`'s newest complete one;
    a path is a checkpoint (a directory with meta.json) or a checkpoint directory (its newest
    complete checkpoint, `hetc.runtime.history.newest_checkpoint`)."""
    where = root if choice == LATEST_CHOICE else Path(choice)
    if (where / META).is_file():
        return where
    newest = newest_checkpoint(where)
    if newest is None:
        raise CheckpointError(
            f"{where} is neither a checkpoint (no {META}) nor a checkpoint directory (no"
            " step-<k> directory): nothing to resume from"
        )
    return newest[0]


def load_checkpoint(trainer: StageTrainer, choice: str, root: Path) -> tuple[Path, int]:
    """Load the checkpoint `choice` names (see `resolve`) into this rank's parameters and
    optimizer; returns it and the step to train next. Every rank calls it; all succeed or all
    raise the same CheckpointError."""
    error, step = None, None
    path = root
    try:
        path = resolve(choice, root)
        step = _load(trainer, path)
    except Exception as exc:  # any rank's failure must reach every rank, or the others hang
        error = str(exc) if isinstance(exc, CheckpointError) else f"{type(exc).__name__}: {exc}"
    gathered = _all_gather((trainer.started.plan_rank, error, step))
    failures = [(rank, e) for rank, e, _ in gathered if e is not None]
    if failures:
        rank, error = failures[0]
        more = f" (and {len(failures) - 1} other ranks failed)" if len(failures) > 1 else ""
        raise CheckpointError(f"resuming failed on plan rank {rank}: {error}{more}")
    steps = {s for _, _, s in gathered}
    if len(steps) != 1:
        raise CheckpointError(
            f"the ranks resumed from different steps {sorted(steps)}: every node must see the"
            f" same checkpoints in {root}"
        )
    assert step is not None
    return path, step


def _load(trainer: StageTrainer, path: Path) -> int:
    meta = _read_meta(path)
    if meta["unsaved_state"]:
        raise CheckpointError(
            f"{path / META}: the checkpoint lacks optimizer state, so no run can resume from it:"
            f" {'; '.join(meta['unsaved_state'])}"
        )
    if meta["model"] != trainer.training["model"]:
        raise CheckpointError(f"{path / META}: the checkpoint is of another model")
    kind = _update_rule(trainer)
    if meta["optimizer"] != kind:
        raise CheckpointError(
            f"{path / META}: the checkpoint's optimizer is {meta['optimizer']}, this run's {kind}"
        )
    try:
        step = trainer.data.resume(DataPosition.from_json(meta["data_position"]))
    except DataError as exc:
        raise CheckpointError(f"{path / META}: {exc}") from None
    scaler = meta["loss_scaler"]
    if scaler is not None:
        # fp16 on both sides: go on with the scale the run had reached. Another precision
        # before (other devices) starts the scaler afresh. The settings stay this run's.
        if trainer.scaler is not None:
            for key in ("scale", "iteration", "last_overflow", "hysteresis_left"):
                setattr(trainer.scaler, key, scaler[key])
        elif trainer.engine is not None:
            trainer.engine.set_loss_scaler(scaler)
    files: dict[str, str] = meta["files"]
    with torch.no_grad():
        for name, parameter in trainer.parameters.items():
            spec = trainer.specs[name]
            relative = f"params/{name}.pt"
            if relative not in files:
                raise CheckpointError(f"{path}: no {relative}, which this run's stage needs")
            full = _read(path / relative, files[relative])
            if not isinstance(full, Tensor) or tuple(full.shape) != spec.full_shape:
                raise CheckpointError(f"{path / relative}: not a tensor of {spec.full_shape}")
            weight = shard(full, spec, trainer.tp_size, trainer.tp_rank).to(parameter.device)
            relative = f"optim/{name}.pt"
            state = {}
            if relative in files:
                state = {
                    key: _state_shard(trainer, value, spec, parameter)
                    for key, value in _read(path / relative, files[relative]).items()
                }
            if trainer.engine is not None:
                try:
                    trainer.engine.load_full(parameter, weight, state)
                except TrainingError as exc:
                    raise CheckpointError(f"{path / relative}: {exc}") from None
                continue
            parameter.copy_(weight)
            if state:
                trainer.optimizer.state[parameter] = state
    return step


def _read_meta(path: Path) -> dict[str, Any]:
    try:
        meta = json.loads((path / META).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CheckpointError(f"{path / META} is missing: {path} is not a checkpoint") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{path / META} is corrupted: {exc}") from None
    keys = {"format", "step", "data_position", "model", "optimizer", "loss_scaler"}
    keys |= {"unsaved_state", "files"}
    if not isinstance(meta, dict) or not keys <= set(meta):
        raise CheckpointError(f"{path / META} lacks some of {sorted(keys)}")
    if meta["format"] != FORMAT:
        raise CheckpointError(
            f"{path / META}: checkpoint format {meta['format']}; this hetc reads format {FORMAT}"
        )
    return meta


def _read(path: Path, expected: str) -> Any:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise CheckpointError(f"{path} is missing (meta.json lists it)") from None
    digest = hashlib.sha256(data).hexdigest()
    if digest != expected:
        raise CheckpointError(
            f"{path} is corrupted or truncated: sha256 {digest[:16]}..., meta.json has"
            f" {expected[:16]}...; resume from an earlier checkpoint"
        )
    return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)


def _state_shard(
    trainer: StageTrainer, value: Tensor, spec: ParamSpec, parameter: Tensor
) -> Tensor:
    """Per-element state is cut like its parameter; the rest (Adam's step count) is whole."""
    if tuple(value.shape) == spec.full_shape:
        return shard(value, spec, trainer.tp_size, trainer.tp_rank).to(parameter.device)
    return value
