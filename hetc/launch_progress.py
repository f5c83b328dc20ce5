"""What `hetc launch` shows while the nodes train: one line per node (step, loss, samples/s).

The numbers come from the channel the runtime already writes for every launch path: one JSON
line per rank and step in `HETC_RUN_DIR/metrics/rank-<r>.jsonl` (`hetc.runtime.session`). A
launch reads only what its own run appended (each file from its size at the start), so a
resumed run or an earlier run in the same directory does not show. On a terminal the lines are
redrawn in place; otherwise (a pipe, a CI log) they are printed as plain lines at most every
PLAIN_EVERY seconds and only when a node advanced, so a log stays short.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PLAIN_EVERY = 10.0
"""Seconds between plain progress lines when the output is not a terminal."""

Record = dict[str, Any]


def metrics_file(run_dir: Path, rank: int) -> Path:
    return run_dir / "metrics" / f"rank-{rank:05d}.jsonl"


@dataclass(kw_only=True, slots=True)
class MetricsTail:
    """The metrics lines the ranks append from now on; a partial last line waits for its end."""

    run_dir: Path
    ranks: Sequence[int]
    offsets: dict[int, int] = field(default_factory=dict)
    records: dict[int, list[Record]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for rank in self.ranks:
            path = metrics_file(self.run_dir, rank)
            self.offsets[rank] = path.stat().st_size if path.is_file() else 0
            self.records[rank] = []

    def poll(self) -> None:
        """Read every complete line appended since the last poll; skip lines that are not
        JSON objects (the calibration reader refuses them; progress only shows numbers)."""
        for rank in self.ranks:
            path = metrics_file(self.run_dir, rank)
            try:
                with open(path, "rb") as file:
                    file.seek(self.offsets[rank])
                    data = file.read()
            except OSError:
                continue
            complete = data.rfind(b"\n") + 1
            self.offsets[rank] += complete
            for line in data[:complete].splitlines():
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                if isinstance(record, dict) and isinstance(record.get("step"), int):
                    self.records[rank].append(record)


def _number(record: Record, key: str) -> float | None:
    value = record.get(key)
    return float(value) if isinstance(value, int | float) else None


def node_line(label: str, ranks: Sequence[int], records: Mapping[int, list[Record]]) -> str:
    """`label: step S, loss L, N samples/s` from the newest record of the node's ranks: the
    highest step any of them finished, the loss of the first rank reporting one at that step
    (stages before the last have none), the mean samples/s of the ranks at that step."""
    latest = [records[r][-1] for r in ranks if records.get(r)]
    if not latest:
        return f"{label}: starting"
    step = max(int(r["step"]) for r in latest)
    at_step = [r for r in latest if r["step"] == step]
    losses = [x for x in (_number(r, "loss") for r in at_step) if x is not None]
    rates = [x for x in (_number(r, "samples_per_second") for r in at_step) if x is not None]
    loss = f"loss {losses[0]:.4f}" if losses else "loss -"
    rate = f"{sum(rates) / len(rates):.1f} samples/s" if rates else "- samples/s"
    return f"{label}: step {step}, {loss}, {rate}"


@dataclass(kw_only=True, slots=True)
class Board:
    """The progress lines of every node, drawn through `write` (which takes whole text)."""

    nodes: Sequence[tuple[str, Sequence[int]]]
    """(label, plan ranks) per node."""
    tail: MetricsTail
    write: Callable[[str], None]
    terminal: bool
    drawn: int = 0
    """Lines on the terminal that the next redraw replaces."""
    shown: tuple[str, ...] = ()
    last_plain: float | None = None

    def lines(self) -> tuple[str, ...]:
        return tuple(node_line(label, ranks, self.tail.records) for label, ranks in self.nodes)

    def refresh(self, now: float, *, final: bool = False) -> None:
        """Read new metrics and show them: redraw on a terminal, else a plain block when a
        node advanced and PLAIN_EVERY seconds passed since the last one (or it is the
        `final` refresh, so the last numbers are always shown)."""
        self.tail.poll()
        lines = self.lines()
        if self.terminal:
            if lines != self.shown:
                up = f"\x1b[{self.drawn}F" if self.drawn else ""
                self.write(up + "".join(f"\x1b[2K{line}\n" for line in lines))
                self.drawn = len(lines)
        elif lines != self.shown and (
            final or self.last_plain is None or now - self.last_plain >= PLAIN_EVERY
        ):
            self.write("".join(f"hetc: {line}\n" for line in lines))
            self.last_plain = now
        else:
            return
        self.shown = lines
