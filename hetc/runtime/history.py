"""A checkpoint directory's history: which checkpoint is the newest, and the rules that keep one
run from destroying another's.

Runs resume by default, so the checkpoint directory is the job's memory across restarts,
requeues and re-plans, and more than one run may write into it: a run resumed from an older
checkpoint (`--resume PATH`), one started `--from-scratch`, a Slurm requeue that overlaps a
run still ending, two generations of `hetc run`. The rules, for a run that started at step s
(the step of the checkpoint it resumed from, 0 from scratch):

1. A published checkpoint directory `step-<k>` is never replaced, renamed or deleted by a run.
   A run that reaches step k where `step-<k>` exists (written by another run, or by an
   earlier history when this one resumed from an older checkpoint or from scratch) keeps the
   existing one and does not publish its own (`publish` returns False; the runtime says so).
   The rename that publishes is the check: rename(2) onto a non-empty directory fails, so of
   two racing runs exactly one publishes each step, with no window between look and act.
2. `latest` only moves forward: it is replaced only by a higher step (`advance_latest`),
   under an exclusive lock on `.latest.lock` (POSIX record locks, which NFS passes to the
   server), so two runs that publish at once cannot leave it on the lower step.
3. The newest complete checkpoint is the highest k with a `step-<k>` directory
   (`newest_checkpoint`); `latest` is what a person or tool reads, not what resuming trusts:
   the directory listing is right even where `latest`'s lock was not available. A
   `step-<k>` directory is complete by construction: it appears by one rename, after every
   file and meta.json in it were written and fsynced (`hetc.runtime.checkpoint`).

So a run never overwrites a checkpoint newer than its own start, nor any other: what it
writes goes only to names that did not exist (temporary directories carry a random token),
and the only file it replaces is `latest`, with a higher step.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
from pathlib import Path

LATEST = "latest"
LOCK = ".latest.lock"
STEP = re.compile(r"step-(\d+)")


def step_directory(root: Path, step: int) -> Path:
    return root / f"step-{step}"


def checkpoints(root: Path) -> dict[int, Path]:
    """Every published checkpoint in `root` by step (none when `root` does not exist)."""
    try:
        names = os.listdir(root)
    except FileNotFoundError:
        return {}
    found = {}
    for name in names:
        match = STEP.fullmatch(name)
        if match and (root / name).is_dir():
            found[int(match.group(1))] = root / name
    return found


def newest_checkpoint(root: Path) -> tuple[Path, int] | None:
    """The newest complete checkpoint in `root` and its step, or None."""
    found = checkpoints(root)
    if not found:
        return None
    step = max(found)
    return found[step], step


def publish(tmp: Path, final: Path) -> bool:
    """Rename the finished checkpoint `tmp` to `final` unless a checkpoint is there already
    (rule 1); returns whether it was published."""
    try:
        os.rename(tmp, final)
    except OSError as exc:
        if exc.errno in (errno.ENOTEMPTY, errno.EEXIST):
            return False
        raise
    return True


def advance_latest(root: Path, step: int) -> bool:
    """Point `latest` at `step-<step>` if it names a lower step or nothing (rule 2); returns
    whether it moved."""
    descriptor = os.open(root / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.lockf(descriptor, fcntl.LOCK_EX)
        except OSError as exc:
            if exc.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS):
                raise
            # A file system without locks: still never backwards as far as this run sees.
        current = latest_step(root)
        if current is not None and current >= step:
            return False
        pointer = root / f"{LATEST}.tmp-{os.getpid()}"
        with open(pointer, "w", encoding="utf-8") as file:
            file.write(f"step-{step}\n")
            file.flush()
            os.fsync(file.fileno())
        os.replace(pointer, root / LATEST)
        return True
    finally:
        os.close(descriptor)


def latest_step(root: Path) -> int | None:
    """The step `latest` names, or None (no `latest`, or not a step name)."""
    try:
        text = (root / LATEST).read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return None
    match = STEP.fullmatch(text)
    return int(match.group(1)) if match else None
