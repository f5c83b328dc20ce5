"""The lines `hetc launch` ends with: what the run reached and how it compares with the plan.

Measured numbers come from this launch's metrics lines (`hetc.launch_progress.MetricsTail`),
predicted ones from the compiled `plan.json` (`predictions`), the checkpoint from the ranks'
outcome records (`hetc.plan.outcome`). Mean throughput leaves out the first WARMUP steps when
there are more (start-up, first-touch allocation, and on CPU the memory-tracked steps run
several times slower), and is the global batch times the steps over their summed seconds,
so a slow step weighs as much as it cost. Peak memory is the largest any rank recorded,
against the largest the plan predicts for a rank.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from hetc.launch_progress import Record
from hetc.plan.outcome import Outcome

WARMUP = 2


def _predictions(out_dir: Path) -> tuple[dict[str, Any], int | None]:
    """plan.json's predictions and global batch; empty when unreadable (the run is over, and
    the summary says what it lacks rather than failing)."""
    try:
        plan = json.loads((out_dir / "plan.json").read_text(encoding="utf-8"))
        predictions = plan["predictions"]
        batch = plan["global_batch_size"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}, None
    if not isinstance(predictions, dict) or not isinstance(batch, int):
        return {}, None
    return predictions, batch


def size(value: float) -> str:
    """Bytes in the largest binary unit that keeps the number at least 1."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if value >= scale:
            return f"{value / scale:.1f} {unit}"
    return f"{value:.0f} B"


def _ratio(measured: float, predicted: object) -> str:
    if not isinstance(predicted, int | float) or predicted <= 0:
        return "no prediction"
    return f"predicted {predicted:.1f} ({measured / predicted:.2f}x)"


def final_loss(records: Mapping[int, Sequence[Record]]) -> tuple[float, int] | None:
    """The loss at the highest step any rank finished, from the lowest rank reporting one."""
    with_loss = [
        (int(r["step"]), rank, float(r["loss"]))
        for rank, rs in records.items()
        for r in rs
        if isinstance(r.get("loss"), int | float)
    ]
    if not with_loss:
        return None
    step = max(s for s, _, _ in with_loss)
    rank_loss = min((rank, loss) for s, rank, loss in with_loss if s == step)
    return rank_loss[1], step


def throughput(records: Sequence[Record], batch: int) -> tuple[float, int, int] | None:
    """(samples/s, first step, last step) over one rank's steps after WARMUP (all of them
    when there are no more than WARMUP)."""
    timed = [r for r in records if isinstance(r.get("seconds"), int | float) and r["seconds"] > 0]
    kept = timed[WARMUP:] if len(timed) > WARMUP else timed
    if not kept:
        return None
    seconds = sum(float(r["seconds"]) for r in kept)
    return batch * len(kept) / seconds, int(kept[0]["step"]), int(kept[-1]["step"])


def summary_lines(
    *,
    out_dir: Path,
    run_dir: Path,
    records: Mapping[int, Sequence[Record]],
    outcomes: Sequence[Outcome],
) -> list[str]:
    """The summary, one fact a line, each saying where a missing number would come from."""
    predictions, batch = _predictions(out_dir)
    lines = ["hetc: summary"]
    loss = final_loss(records)
    lines.append(
        f"  final loss    {loss[0]:.4f} (step {loss[1]})"
        if loss
        else "  final loss    - (no rank finished a step)"
    )
    first = min((r for r, rs in records.items() if rs), default=None)
    rate = throughput(records[first], batch) if first is not None and batch else None
    if rate is None:
        lines.append("  throughput    - (no timed step)")
    else:
        lines.append(
            f"  throughput    {rate[0]:.1f} samples/s, mean of steps {rate[1]}-{rate[2]};"
            f" {_ratio(rate[0], predictions.get('samples_per_second'))}"
        )
    peaks = [
        float(r["peak_bytes"])
        for rs in records.values()
        for r in rs
        if isinstance(r.get("peak_bytes"), int | float)
    ]
    predicted = predictions.get("peak_memory")
    most = max(predicted.values(), default=None) if isinstance(predicted, dict) else None
    if not peaks:
        lines.append("  peak memory   - (no step recorded it)")
    else:
        versus = (
            f"predicted {size(most)} ({max(peaks) / most:.2f}x)"
            if isinstance(most, int | float) and most > 0
            else "no prediction"
        )
        lines.append(f"  peak memory   {size(max(peaks))} on the largest rank; {versus}")
    saved = [o.checkpoint for o in outcomes if o.checkpoint is not None]
    newest = max(saved, key=lambda c: c.step, default=None)
    lines.append(
        f"  checkpoint    {newest.path} (resumes at step {newest.step})"
        if newest
        else "  checkpoint    none written"
    )
    lines.append(f"  metrics       {run_dir / 'metrics'}")
    lines.append(f"  logs          {run_dir / 'logs'}/node<NNNN>.log")
    return lines
