"""One spec, one answer: does `hetc compile` write the same bytes on a quiet and on a loaded
machine?

Each spec (the bundled examples, the Sailor scenarios of bench/scenarios and a generated
family, bench/spec_family.py) is compiled with `hetc compile SPEC -o DIR` and its default
work budget, twice on a quiet machine and twice while busy loops load every core (one
process per core spinning in Python, the load the issue names), each run in a fresh
process. A run's fingerprint is its exit code, the sha256 of every file of its output
directory, and its stdout and stderr with the output directory's own path taken out (an
infeasible spec writes no files; its diagnosis is on stderr). `IGNORED` names the files
that may hold wall-clock figures and are skipped; today there are none. Every spec's four
fingerprints must agree (target: 100%).

Prints one row per spec (identical or which runs differ, and the quiet runs' wall seconds),
then `identical: N of M specs (P%); median wall time of the default budget, quiet: X s`.

Usage: python bench/determinism.py [--family N] [--seed S] [--spec PATH ...] [--no-load]
"""

from __future__ import annotations

import argparse
import hashlib
import multiprocessing
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from spec_family import family_text  # noqa: E402

IGNORED: frozenset[str] = frozenset()
"""Output files that may record wall-clock figures, by path inside the output directory:
none does (report.md and manifest.json say what the search did in work, not seconds)."""


def family_texts(count: int, seed: int) -> list[str]:
    """The YAML of `count` family specs, kept as text so that each run reads its spec from a
    file, as a user's command does."""
    rng = random.Random(seed)
    return [family_text(rng) for _ in range(count)]


def fingerprint(spec: Path, folder: Path) -> tuple[tuple[object, ...], float]:
    """(exit code, every output file's sha256, stdout, stderr) of one `hetc compile`, and its
    wall seconds."""
    out = folder / "out"
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "hetc", "compile", str(spec), "-o", str(out)],
        capture_output=True,
        text=True,
        check=False,
        cwd=folder,
    )
    seconds = time.perf_counter() - started
    files: list[tuple[str, str]] = []
    if out.exists():
        root = out.resolve()
        for path in sorted(root.rglob("*")):
            name = str(path.relative_to(root))
            if path.is_file() and name not in IGNORED:
                files.append((name, hashlib.sha256(path.read_bytes()).hexdigest()))
        target = str(root)
        texts = [done.stdout.replace(target, "OUT"), done.stderr.replace(target, "OUT")]
    else:
        texts = [done.stdout, done.stderr]
    texts = [t.replace(str(folder), "DIR") for t in texts]
    return (done.returncode, tuple(files), *texts), seconds


def _spin() -> None:
    """A busy loop, one core's worth of load."""
    while True:
        pass


@contextmanager
def loaded(cores: int) -> Iterator[None]:
    """Every core busy for the duration of the block."""
    context = multiprocessing.get_context("spawn")
    spinners = [context.Process(target=_spin, daemon=True) for _ in range(cores)]
    for spinner in spinners:
        spinner.start()
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.join()


def specs(family: int, seed: int, given: list[str], folder: Path) -> list[Path]:
    """The bundled examples, the scenarios, the family written to `folder`, and `given`."""
    paths = sorted((ROOT / "examples").glob("*.yaml"))
    paths += sorted((ROOT / "bench" / "scenarios").glob("*.yaml"))
    for k, text in enumerate(family_texts(family, seed)):
        path = folder / f"family{seed}-{k}.yaml"
        path.write_text(text)
        paths.append(path)
    return paths + [Path(p).resolve() for p in given]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", type=int, default=12)
    parser.add_argument("--seed", type=int, default=27)
    parser.add_argument("--spec", nargs="*", default=[])
    parser.add_argument("--no-load", action="store_true", help="Four quiet runs.")
    args = parser.parse_args(argv)
    cores = os.cpu_count() or 2
    same = 0
    quiet_seconds: list[float] = []
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        paths = specs(args.family, args.seed, args.spec, folder)
        for path in paths:
            prints: list[tuple[object, ...]] = []
            seconds: list[float] = []
            for run in range(4):
                with tempfile.TemporaryDirectory(dir=folder) as work:
                    if run < 2 or args.no_load:
                        found, took = fingerprint(path, Path(work))
                        seconds.append(took)
                    else:
                        with loaded(cores):
                            found, took = fingerprint(path, Path(work))
                prints.append(found)
            differing = [k + 1 for k in range(1, 4) if prints[k] != prints[0]]
            quiet_seconds.append(statistics.median(seconds))
            same += not differing
            verdict = "identical" if not differing else f"runs {differing} differ from run 1"
            print(
                f"{path.name:36s} exit {prints[0][0]}  {len(prints[0][1]):5d} files"
                f"  quiet {seconds[0]:6.2f} / {seconds[1]:6.2f} s  {verdict}",
                flush=True,
            )
    print(
        f"identical: {same} of {len(paths)} specs ({100 * same / len(paths):.0f}%);"
        f" median wall time of the default budget, quiet: {statistics.median(quiet_seconds):.2f} s"
    )
    return 0 if same == len(paths) else 1


if __name__ == "__main__":
    raise SystemExit(main())
