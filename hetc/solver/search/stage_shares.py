"""How much of the gradients the stages that sync longest must hold (`StageShares`), for the
sync bound (`Bounds.sync_bound`).

The mean argument (the largest of P stages holds at least 1/P of the gradients) misses that
the first stage holds the token table and a block, the last the head and a block, and that
with tied embeddings both of them also all-reduce the table between them: on a 2.7B model
in 18 stages the first stage rings 1.4 times the mean and then waits for the tied
all-reduce.
"""

from __future__ import annotations

import math

from hetc.costmodel.planning import PlanningModel


class StageShares:
    """Shares of the whole model's gradient bytes, per pipeline degree, cached."""

    def __init__(self, model: PlanningModel) -> None:
        self.model = model
        self._shares: dict[int, tuple[float, float]] = {}
        self._tied: float | None = None
        self._least: float | None = None

    def shares(self, stages: int) -> tuple[float, float]:
        """(largest, end) for P stages: every layout of P stages has a stage holding at
        least `largest` x the whole model's gradient bytes, and its first and its last stage
        each hold at least `end` x them, at every TP degree of the kinds (bytes per TP rank:
        `PlanningModel.gradient_bytes`). Both at most 1, so that a ring time affine in bytes
        with a non-negative intercept is at least the share x the whole model's ring.

        A stage holds its blocks' parameters, plus the token table on the first and the
        head on the last (a copy of the table where they are tied). With P > 1 the first
        holds the table and at least one block, the last the head and at least one block,
        and the largest at least the mean of all stages' bytes (the table counted twice
        where tied) and at least either end's. One stage holds the whole model."""
        found = self._shares.get(stages)
        if found is None:
            if stages < 2:
                found = (1.0, 1.0)
            else:
                model = self.model
                blocks = model.blocks
                largest = end = 1.0
                for tp in sorted({k.tp for k in model.kinds}):
                    whole = model.gradient_bytes((0, blocks, True, True), tp)
                    if whole <= 0:
                        continue
                    first = model.gradient_bytes((0, 1, True, False), tp)
                    last = model.gradient_bytes((blocks - 1, blocks, False, True), tp)
                    block = model.gradient_bytes((1, 2, False, False), tp)
                    mean = (first + last + (blocks - 2) * block) / stages
                    end = min(end, min(first, last) / whole)
                    largest = min(largest, max(mean, first, last) / whole)
                found = (min(largest, 1.0), min(end, 1.0))
            self._shares[stages] = found
        return found

    def least(self, stages: int) -> float:
        """The share of the whole model's gradient bytes that every stage of P holds at
        least, at every TP degree of the kinds: one block's (all of it with one stage)."""
        if stages < 2:
            return 1.0
        found = self._least
        if found is None:
            model = self.model
            found = 1.0
            for tp in sorted({k.tp for k in model.kinds}):
                whole = model.gradient_bytes((0, model.blocks, True, True), tp)
                if whole > 0:
                    found = min(found, model.gradient_bytes((1, 2, False, False), tp) / whole)
            self._least = found
        return found

    def tied(self) -> float:
        """The least time of the tied embedding's all-reduce between a first and a last
        stage (`PlanningModel.tied`, over every pair of kinds of zones that differ), which
        both of them add to their sync when P > 1; 0 without tied embeddings."""
        if self._tied is None:
            model = self.model
            if not model.arch.tied_embeddings:
                self._tied = 0.0
            else:
                (kept,) = model.classes.keep(tuple(k.index for k in model.kinds))
                self._tied = min(
                    (model.tied(a, b) for x, a in enumerate(kept) for b in kept[x:]),
                    default=math.inf,
                )
        return self._tied
