"""Atomic, owned output directories (`hetc.emit.output`): what is replaced, what is kept,
and what a crash at each step leaves."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hetc.emit import output
from hetc.emit.output import manifest_json, unchanged_hetc_output, write_output
from hetc.schema import EnvironmentProblem


def _files(text: str) -> dict[str, bytes]:
    files = {"plan.json": text.encode(), "launch/node0000.sh": b"#!/usr/bin/env bash\n"}
    files["manifest.json"] = manifest_json(files, hetc_version="0.1.0", plan_hash="0" * 64)
    return files


def _write(target: Path, text: str, force: bool = False) -> Path:
    return write_output(target, _files(text), executable={"launch/node0000.sh"}, force=force)


def test_first_write_makes_a_link_to_a_hashed_directory(tmp_path: Path) -> None:
    target = tmp_path / "out"
    final = _write(target, "one")
    assert target.is_symlink() and os.readlink(target) == final.name
    assert final.name.startswith("out.") and len(final.name) == len("out.") + 16
    assert (target / "plan.json").read_text() == "one"
    assert os.access(target / "launch/node0000.sh", os.X_OK)
    assert not os.access(target / "plan.json", os.X_OK)
    assert unchanged_hetc_output(final)


def test_same_content_same_directory_and_rewrite_keeps_one_previous(tmp_path: Path) -> None:
    target = tmp_path / "out"
    first = _write(target, "one")
    assert _write(target, "one") == first
    second = _write(target, "two")
    assert second != first and first.is_dir(), "the previous output stays for running jobs"
    third = _write(target, "three")
    assert not first.exists(), "older outputs hetc wrote are removed"
    assert second.is_dir() and (target / "plan.json").read_text() == "three"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["out", second.name, third.name])


def test_a_directory_hetc_did_not_write_is_kept_without_force(tmp_path: Path) -> None:
    target = tmp_path / "out"
    target.mkdir()
    (target / "notes.txt").write_text("mine")
    with pytest.raises(EnvironmentProblem) as raised:
        _write(target, "one")
    assert "--force" in raised.value.to_fix
    assert (target / "notes.txt").read_text() == "mine"
    assert not any(p.name.startswith("out.") for p in tmp_path.iterdir())
    _write(target, "one", force=True)
    assert target.is_symlink() and (target / "plan.json").read_text() == "one"


def test_edited_output_needs_force(tmp_path: Path) -> None:
    target = tmp_path / "out"
    _write(target, "one")
    (target / "plan.json").write_text("edited by hand")
    with pytest.raises(EnvironmentProblem):
        _write(target, "two")
    assert (target / "plan.json").read_text() == "edited by hand"


def test_a_plain_directory_of_unchanged_hetc_output_is_replaced(tmp_path: Path) -> None:
    """For example one copied with `cp -r`: its manifest vouches for every file."""
    target = tmp_path / "out"
    final = _write(tmp_path / "elsewhere", "one")
    os.rename(final, target)
    _write(target, "two")
    assert target.is_symlink() and (target / "plan.json").read_text() == "two"
    assert not list(tmp_path.glob(".out.replaced-*"))


def test_files_and_foreign_links_are_not_replaced(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(EnvironmentProblem):
        _write(tmp_path / "file", "one")
    (tmp_path / "somewhere").mkdir()
    os.symlink("somewhere", tmp_path / "link")
    with pytest.raises(EnvironmentProblem):
        _write(tmp_path / "link", "one")
    assert (tmp_path / "file").read_text() == "x"


def test_unwritable_parent_is_an_environment_problem(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        blocked = tmp_path / "not-a-dir"
        blocked.write_text("x")
        target = blocked / "out"
    else:
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        target = locked / "out"
    with pytest.raises(EnvironmentProblem) as raised:
        _write(target, "one")
    assert "cannot write" in raised.value.what


def test_crash_while_writing_leaves_the_previous_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "out"
    _write(target, "one")
    real = output._write_tree

    def crash(directory: Path, files: dict[str, bytes], executable: set[str]) -> None:
        real(directory, dict(list(files.items())[:1]), executable)
        raise KeyboardInterrupt

    monkeypatch.setattr(output, "_write_tree", crash)
    with pytest.raises(KeyboardInterrupt):
        _write(target, "two")
    assert (target / "plan.json").read_text() == "one"
    assert unchanged_hetc_output(target.resolve())
    monkeypatch.undo()
    _write(target, "two")
    assert not list(tmp_path.glob(".out.*.tmp-*")), "stale temporary directories are removed"


def test_crash_before_the_switch_leaves_the_previous_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "out"
    _write(target, "one")

    def crash(target: Path, final: Path) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(output, "_switch", crash)
    with pytest.raises(KeyboardInterrupt):
        _write(target, "two")
    assert (target / "plan.json").read_text() == "one"
    monkeypatch.undo()
    _write(target, "two")
    assert (target / "plan.json").read_text() == "two"


def test_unchanged_hetc_output_notices_extra_and_missing_files(tmp_path: Path) -> None:
    final = _write(tmp_path / "out", "one")
    assert unchanged_hetc_output(final)
    (final / "extra.txt").write_text("x")
    assert not unchanged_hetc_output(final)
    (final / "extra.txt").unlink()
    (final / "plan.json").unlink()
    assert not unchanged_hetc_output(final)
    assert not unchanged_hetc_output(tmp_path)


def test_one_sync_after_every_file_is_written_and_before_any_rename(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tree is synced once, when every file is complete in the hidden temporary directory
    and neither the hashed directory nor `out` exists yet. (Mutation check: syncing inside the
    loop, after the first file, fails here.)"""
    target = tmp_path / "out"
    files = _files("one")
    seen: list[tuple[Path, dict[str, bytes], list[str]]] = []

    def record(directory: Path) -> None:
        written = {p: (directory / p).read_bytes() for p in files}
        seen.append((directory, written, sorted(p.name for p in tmp_path.iterdir())))

    monkeypatch.setattr(output, "sync_file_system", record)
    final = write_output(target, files, executable=set(), force=False)
    assert len(seen) == 1
    directory, written, present = seen[0]
    assert directory.name.startswith(".out.") and ".tmp-" in directory.name
    assert written == files
    assert present == [directory.name]
    assert final.is_dir() and not directory.exists()


def test_sync_file_system_uses_syncfs_or_falls_back_to_sync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Linux's syncfs is called on a descriptor of the directory; without it, sync(2) is; a
    failing syncfs is an OSError naming the directory."""
    calls: list[str] = []

    class Libc:
        def __init__(self, result: int | None) -> None:
            if result is not None:
                self.result = result
                self.syncfs = self._syncfs

        def _syncfs(self, descriptor: int) -> int:
            calls.append(f"syncfs {descriptor >= 0}")
            return self.result

    monkeypatch.setattr(output.os, "sync", lambda: calls.append("sync"))
    monkeypatch.setattr(output, "_libc", lambda: Libc(0))
    output.sync_file_system(tmp_path)
    monkeypatch.setattr(output, "_libc", lambda: Libc(None))
    output.sync_file_system(tmp_path)
    assert calls == ["syncfs True", "sync"]
    monkeypatch.setattr(output, "_libc", lambda: Libc(-1))
    with pytest.raises(OSError, match=str(tmp_path)):
        output.sync_file_system(tmp_path)


def test_the_real_syncfs_runs(tmp_path: Path) -> None:
    """On this machine the file system sync succeeds (no error from the C library)."""
    (tmp_path / "f").write_bytes(b"x")
    output.sync_file_system(tmp_path)
