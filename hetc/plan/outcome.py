"""How a rank's run ends: the exit codes the runtime returns and every launch path (node
scripts, Slurm, `hetc launch`) and the `hetc run` supervisor act on, and the outcome record
each rank leaves behind.

A launcher must tell apart a run that finished, one that can go on from its last checkpoint
on the nodes still there (a peer was lost, or the ranks were asked to stop and saved), and
one that cannot (bad input, a bug): only the middle two are worth a restart or a re-plan.
An exit code says which, but not who was lost or where to resume from, and torchrun reports
only the first failing worker's code. So on every exit each rank also writes a small JSON
record, `HETC_RUN_DIR/outcome/rank-<plan rank, 5 digits>.json` (`outcome_path`), atomically
(a reader sees the old record or the new one, never half of one). The runtime writes it, and
launchers and the supervisor read it without torch: this module is standard library only.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

EXIT_DONE = 0
"""Every step of the run trained (and the final checkpoint, if any, is complete)."""
EXIT_FAILED = 1
"""Training cannot go on as compiled: bad or inconsistent input, a bug; one line said why.
Restarting the same compiled output would fail the same way."""
EXIT_PEER_LOST = 75
"""Another rank of the plan was lost (it died, or stopped answering its heartbeat): the
survivors stopped; the run can resume from its last complete checkpoint on the nodes left
(EX_TEMPFAIL in sysexits.h)."""
EXIT_PREEMPTED = 76
"""The ranks were told to stop (SIGTERM: a spot preemption, a scheduler's stop) and stopped
cleanly after saving a checkpoint within the grace period; or, the grace having run out
first, without one (the outcome record's `checkpoint_saved` says which, and its `checkpoint`
names the newest complete one either way)."""

RESTARTABLE = frozenset({EXIT_PEER_LOST, EXIT_PREEMPTED})
"""Codes after which resuming (on the same or another plan) makes progress."""

CODE_NAMES = {
    EXIT_DONE: "done",
    EXIT_FAILED: "failed",
    EXIT_PEER_LOST: "peer lost",
    EXIT_PREEMPTED: "preempted",
}

OUTCOME_FORMAT = 1
"""The record's `format`; a reader refuses others rather than misreading them."""
OUTCOME_DIR = "outcome"
"""The folder of the run directory (`HETC_RUN_DIR`) that holds the records."""


class OutcomeError(ValueError):
    """An outcome record that cannot be read; the message names the file."""


@dataclass(frozen=True, kw_only=True, slots=True)
class LostPeer:
    """The rank whose loss stopped the run."""

    node: str | None
    """Its node id in the plan (HETC_NODE); None where only its address is known (the
    rendezvous store's host stopped answering)."""
    rank: int | None
    """Its plan rank; None where only its address is known."""
    local_rank: int | None
    address: str | None = None
    """host:port of the rendezvous store, where the store's host was the one lost."""


@dataclass(frozen=True, kw_only=True, slots=True)
class CheckpointRef:
    """A complete checkpoint: where it is and where in training and data it stands."""

    path: str
    step: int
    """The step a run resumed from it trains first."""
    sample: int
    """The data position: the sample stream's index of that step's first sample (step times
    the global batch size; `hetc.runtime.data`)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Outcome:
    """One rank's end. `step` is the first step it had not finished (None when it stopped
    before training); `checkpoint` the newest complete checkpoint in the run's checkpoint
    directory when it stopped (None when there is none)."""

    code: int
    reason: str
    """The one line the rank printed."""
    rank: int | None
    """Its plan rank; None when it stopped before it knew it (its key is not in the plan)."""
    node: str | None
    local_rank: int | None
    plan_hash: str | None
    step: int | None
    lost: LostPeer | None = None
    checkpoint: CheckpointRef | None = None
    checkpoint_saved: bool = False
    """Whether this run saved `checkpoint` as it stopped (SIGTERM within the grace period)."""
    time: float = 0.0
    """Seconds since the epoch when the record was written (ordering records of one run)."""

    @property
    def restartable(self) -> bool:
        return self.code in RESTARTABLE

    def to_json(self) -> dict[str, Any]:
        return {"format": OUTCOME_FORMAT, "code_name": CODE_NAMES.get(self.code), **asdict(self)}

    @classmethod
    def from_json(cls, record: Mapping[str, Any]) -> Outcome:
        """Raises KeyError, TypeError or ValueError on a malformed record."""
        if record["format"] != OUTCOME_FORMAT:
            raise ValueError(f"outcome format {record['format']!r}, not {OUTCOME_FORMAT}")
        fields = {k: record[k] for k in cls.__dataclass_fields__}
        lost, checkpoint = fields["lost"], fields["checkpoint"]
        fields["lost"] = None if lost is None else LostPeer(**lost)
        fields["checkpoint"] = None if checkpoint is None else CheckpointRef(**checkpoint)
        if not isinstance(fields["code"], int) or not isinstance(fields["reason"], str):
            raise ValueError("code must be an integer and reason a string")
        return cls(**fields)


def outcome_path(run_dir: Path, rank: int | None, *, torch_rank: int | None = None) -> Path:
    """Where a rank's record goes: `outcome/rank-<plan rank>.json`; a process that never
    learnt its plan rank writes `outcome/torch-rank-<torch rank>.json` instead."""
    folder = Path(run_dir) / OUTCOME_DIR
    if rank is not None:
        return folder / f"rank-{rank:05d}.json"
    return folder / f"torch-rank-{torch_rank if torch_rank is not None else os.getpid()}.json"


def write_outcome(path: Path, outcome: Outcome) -> None:
    """Write `outcome` to `path` atomically: a temporary file in the same folder, fsynced and
    renamed over the old record."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(outcome.to_json(), sort_keys=True, indent=2) + "\n"
    with tempfile.NamedTemporaryFile(
        "w", encoding="utf-8", dir=path.parent, prefix=f".{path.name}.", delete=False
    ) as file:
        file.write(text)
        file.flush()
        os.fsync(file.fileno())
    os.replace(file.name, path)


def read_outcome(path: Path) -> Outcome:
    """One record; raises OutcomeError naming the file when it cannot be read."""
    try:
        record = json.loads(Path(path).read_text(encoding="utf-8"))
        return Outcome.from_json(record)
    except OSError as exc:
        raise OutcomeError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except (ValueError, KeyError, TypeError) as exc:
        raise OutcomeError(f"{path}: not an outcome record: {exc}") from None


def read_outcomes(run_dir: Path) -> list[Outcome]:
    """Every rank's record in `run_dir`, by file name (plan ranks in order, then processes that
    never learnt theirs)."""
    folder = Path(run_dir) / OUTCOME_DIR
    if not folder.is_dir():
        return []
    return [read_outcome(p) for p in sorted(folder.glob("*.json"))]


def run_code(outcomes: Iterable[Outcome]) -> int | None:
    """The code of the run as a whole: failed if any rank failed (a restart would fail
    again), else peer lost if any rank lost one, else preempted if any was, else done; None
    for no records."""
    codes = {o.code for o in outcomes}
    if not codes:
        return None
    for code in (EXIT_FAILED, EXIT_PEER_LOST, EXIT_PREEMPTED):
        if code in codes:
            return code
    unknown = codes - {EXIT_DONE}
    return EXIT_FAILED if unknown else EXIT_DONE
