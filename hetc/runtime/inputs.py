"""Every input a rank reads, checked against the compiled output's manifest first.

`hetc compile` lists every file it wrote, with its sha256, in `manifest.json`. The plan hash
alone protects only plan.json: a DeepSpeed config, training.json's seed or a rank file's
pipeline or schedule edited on one node trains to the end with wrong losses (0.3% to 12.5%
off) and no error. So each rank reads its inputs once, here, as bytes: the manifest, then
plan.json, training.json, topology/cluster.json, its own rank file, its DeepSpeed config, and
spec.json and profiles/ where the manifest lists them, and compares each with the manifest.
The rest of the runtime parses these same bytes (`Inputs.text`), never the files again, so
what it trains with is what was checked. Problems are not raised here: start-up gathers every
rank's (with the sha256 of each rank's manifest, which catches a whole output recompiled on
one node) so that all ranks stop with one message naming the files and nodes
(`hetc.runtime.startup`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

MANIFEST = "manifest.json"
FIX = (
    "To fix: copy the output directory of one `hetc compile` to every node unchanged"
    " (to change a setting, change the spec and recompile)"
)
ALWAYS = ("plan.json", "training.json", "topology/cluster.json")
"""What every rank reads; its rank file and DeepSpeed config are added once known."""
IF_LISTED = ("spec.json",)
"""Read and checked where the manifest lists them (with every file under profiles/)."""
EDITED_PLAN = "; to run an edited plan, compile it: hetc compile SPEC --plan OUT/plan.json -o OUT"
"""Said wherever plan.json differs from what was compiled: an edited plan is compiled, never
run as it is."""


@dataclass
class Inputs:
    """One rank's inputs from `out_dir`, read once and checked against its manifest."""

    out_dir: Path
    listed: dict[str, str] | None = None
    """path -> sha256 from the manifest; None when it could not be read."""
    digest: str | None = None
    """The manifest's own sha256: every rank must have the same."""
    problems: list[str] = field(default_factory=list)
    _read: dict[str, bytes] = field(default_factory=dict)

    @classmethod
    def open(cls, out_dir: Path) -> Inputs:
        """Read the manifest, and the files every rank reads (plan, training, cluster)."""
        inputs = cls(out_dir)
        path = out_dir / MANIFEST
        try:
            data = path.read_bytes()
            record = json.loads(data)
            inputs.listed = {e["path"]: e["sha256"] for e in record["files"]}
            inputs.digest = hashlib.sha256(data).hexdigest()
        except FileNotFoundError:
            inputs.problems.append(
                f"{path} is missing: {out_dir} is not the output of `hetc compile`, or was"
                " copied in part"
            )
        except OSError as exc:
            inputs.problems.append(f"{path}: cannot read: {exc.strerror or exc}")
        except (ValueError, KeyError, TypeError) as exc:
            inputs.problems.append(f"{path} is not a hetc manifest ({exc})")
        for relative in ALWAYS:
            inputs.check(relative)
        for relative in sorted(inputs.listed or {}):
            if relative in IF_LISTED or relative.startswith("profiles/"):
                inputs.check(relative)
        return inputs

    def check(self, relative: str) -> bytes | None:
        """Read `relative` (once) and compare it with the manifest; None when unreadable."""
        if relative in self._read:
            return self._read[relative]
        path = self.out_dir / relative
        try:
            data = path.read_bytes()
        except OSError as exc:
            self.problems.append(f"{path}: cannot read: {exc.strerror or exc}")
            return None
        self._read[relative] = data
        if self.listed is None:
            return data
        expected = self.listed.get(relative)
        digest = hashlib.sha256(data).hexdigest()
        if expected is None:
            self.problems.append(f"{path} is not in {MANIFEST}")
        elif digest != expected:
            self.problems.append(
                f"{path} was changed after `hetc compile` (sha256 {digest[:12]}..., {MANIFEST}"
                f" lists {expected[:12]}...)" + (EDITED_PLAN if relative == "plan.json" else "")
            )
        return data

    def text(self, relative: str) -> str | None:
        """The checked content of `relative` as read by `check`; None where it could not be
        read (or was never checked: nothing unchecked is handed out)."""
        data = self._read.get(relative)
        return None if data is None else data.decode("utf-8", errors="replace")

    def digest_of(self, relative: str) -> str | None:
        """The sha256 of `relative` as read by `check`; None where it was not read."""
        data = self._read.get(relative)
        return None if data is None else hashlib.sha256(data).hexdigest()

    def problem(self) -> str | None:
        """Every problem found, as one text ending in what to do; None when every input
        matches the manifest."""
        if not self.problems:
            return None
        return "; ".join(self.problems) + f". {FIX}"
