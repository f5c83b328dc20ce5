"""Writing a compiled output directory atomically, and never over someone else's files.

`hetc compile -o out` writes the files into `out.<hash>/` beside `out` (the hash is the
manifest's, so the same spec always names the same directory) and then points `out`, a
symbolic link, at it with one atomic rename. What a crash at each step leaves:

1. while writing `.out.<hash>.tmp-<pid>/`: a hidden half-written directory; `out` unchanged
   (the next compile removes stale temporary directories). Every file is written, then one
   sync of the file system (syncfs(2)) makes them all durable before any rename can expose
   them; the parent directory is synced after the last rename;
2. after renaming it to `out.<hash>/`: a complete directory not yet in use; `out` unchanged;
3. after renaming a new link over `out`: the new output, complete. The previous target stays
   (a job started from it keeps its files); older targets hetc wrote are removed.

Where `out` is a real directory hetc wrote earlier (its manifest lists exactly its files, all
unchanged), it is moved aside, replaced by the link and then removed: a crash between those two
renames leaves it as `.out.replaced-<pid>/` and no `out`. Anything else at `out` - a directory
hetc did not write, one whose files were edited, a file, a link elsewhere - is kept unless
`--force` is given, and then it is removed only once the new output is in place.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import hashlib
import json
import os
import shutil
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from hetc.schema import EnvironmentProblem

MANIFEST = "manifest.json"
GENERATOR = "hetc"


def manifest_json(files: Mapping[str, bytes], *, hetc_version: str, plan_hash: str) -> bytes:
    """`manifest.json`: every other file with its sha256 and size, canonical and sorted."""
    entries = [
        {"path": path, "sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
        for path, data in sorted(files.items())
    ]
    record = {
        "generator": GENERATOR,
        "hetc_version": hetc_version,
        "plan_hash": plan_hash,
        "files": entries,
    }
    return (json.dumps(record, indent=2, sort_keys=True) + "\n").encode("utf-8")


def _manifest_files(directory: Path) -> dict[str, str] | None:
    """path -> sha256 from a directory's hetc manifest; None when it has none."""
    try:
        record = json.loads((directory / MANIFEST).read_text(encoding="utf-8"))
        if record.get("generator") != GENERATOR:
            return None
        return {e["path"]: e["sha256"] for e in record["files"]}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def unchanged_hetc_output(directory: Path, may_differ: frozenset[str] = frozenset()) -> bool:
    """Whether `directory` holds exactly what its hetc manifest lists, every file unchanged
    (but those in `may_differ`, which must still be there)."""
    listed = _manifest_files(directory)
    if listed is None:
        return False
    present = {
        p.relative_to(directory).as_posix()
        for p in directory.rglob("*")
        if p.is_file() or p.is_symlink()
    } - {MANIFEST}
    if present != set(listed):
        return False
    return all(
        hashlib.sha256((directory / path).read_bytes()).hexdigest() == digest
        for path, digest in listed.items()
        if path not in may_differ
    )


def _owned(target: Path, may_differ: frozenset[str]) -> bool:
    """Whether hetc may replace `target` without --force."""
    if target.is_symlink():
        pointed = target.parent / os.readlink(target)
        return (
            pointed.parent == target.parent
            and pointed.name.startswith(f"{target.name}.")
            and pointed.is_dir()
            and unchanged_hetc_output(pointed, may_differ)
        )
    if not target.exists():
        return True
    if target.is_dir():
        return not any(target.iterdir()) or unchanged_hetc_output(target, may_differ)
    return False


WRITERS = 8
"""Threads creating files at once: creating a file waits on the disk with the GIL released, so
several overlap (docs/compile.md, the compile-at-scale measurement)."""


def _write_tree(directory: Path, files: Mapping[str, bytes], executable: set[str]) -> None:
    """Write every file under `directory`, then make them all durable with one sync of the
    file system (one fsync per file costs a journal commit each: minutes at 10,000 ranks)."""
    for parent in sorted({(directory / path).parent for path in files}):
        parent.mkdir(parents=True, exist_ok=True)

    def write(path: str) -> None:
        mode = 0o755 if path in executable else 0o644
        descriptor = os.open(directory / path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        try:
            left = memoryview(files[path])
            while left:
                left = left[os.write(descriptor, left) :]
            os.fchmod(descriptor, mode)
        finally:
            os.close(descriptor)

    with ThreadPoolExecutor(max_workers=WRITERS) as pool:
        for _ in pool.map(write, sorted(files), chunksize=64):
            pass
    sync_file_system(directory)


def sync_file_system(directory: Path) -> None:
    """Flush everything written to `directory`'s file system to disk: Linux's syncfs(2) on that
    file system alone, elsewhere sync(2) on all of them."""
    syncfs = getattr(_libc(), "syncfs", None)
    if syncfs is None:
        os.sync()
        return
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        if syncfs(descriptor) != 0:
            error = ctypes.get_errno()
            raise OSError(error, os.strerror(error), str(directory))
    finally:
        os.close(descriptor)


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _sync_directory(directory: Path) -> None:
    """Make the renames inside `directory` durable."""
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _remove(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)


def write_output(
    target: Path,
    files: Mapping[str, bytes],
    *,
    executable: set[str],
    force: bool,
    may_differ: frozenset[str] = frozenset(),
) -> Path:
    """Write `files` (with `manifest.json` among them) as the new content of `target`; returns
    the directory `target` now points at. `may_differ` names files of the present output that
    may have been edited without making it foreign (its plan.json, when that is the plan being
    compiled). Raises EnvironmentProblem when `target` holds what hetc must not replace, or
    cannot be written."""
    target = Path(os.path.abspath(target))
    parent, name = target.parent, target.name
    if not force and not _owned(target, may_differ):
        raise EnvironmentProblem(
            f"{target} exists and hetc did not write it (or its files were edited since)",
            "choose another -o, move it away, or pass --force to replace it (an edited"
            " plan.json is compiled with `hetc compile SPEC --plan PLAN.json -o OUT`)",
        )
    digest = hashlib.sha256(files[MANIFEST]).hexdigest()[:16]
    final = parent / f"{name}.{digest}"
    previous = parent / os.readlink(target) if target.is_symlink() else None
    try:
        parent.mkdir(parents=True, exist_ok=True)
        for stale in parent.glob(f".{name}.*.tmp-*"):
            _remove(stale)
        if not (final.is_dir() and unchanged_hetc_output(final)):
            temporary = parent / f".{name}.{digest}.tmp-{os.getpid()}"
            _write_tree(temporary, files, executable)
            if final.exists() or final.is_symlink():
                _remove(final)
            os.rename(temporary, final)
        _switch(target, final)
        _sync_directory(parent)
    except OSError as exc:
        raise EnvironmentProblem(
            f"cannot write {target}: {exc.strerror or exc}",
            f"make {parent} writable, or choose another -o",
        ) from None
    for old in parent.glob(f"{name}.*"):
        if old not in (final, previous) and old.is_dir() and unchanged_hetc_output(old):
            with contextlib.suppress(OSError):
                _remove(old)
    return final


def _switch(target: Path, final: Path) -> None:
    """Point `target` at `final` (a sibling) with an atomic rename; whatever was at `target`
    has been checked (or forced) by the caller."""
    link = target.parent / f".{target.name}.link-{os.getpid()}"
    if link.is_symlink() or link.exists():
        _remove(link)
    os.symlink(final.name, link)
    if target.is_symlink() or not target.exists():
        os.replace(link, target)
        return
    aside = target.parent / f".{target.name}.replaced-{os.getpid()}"
    os.rename(target, aside)
    os.replace(link, target)
    _remove(aside)
