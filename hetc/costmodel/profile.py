"""Measured per-layer times: Sailor's `profile.json` and hetc's own profile format.

A profile is what a profiler measured on one device type for one model: for every microbatch
size and tensor-parallel degree, the forward, backward and optimizer-update seconds of every
layer. The compute model (`hetc.costmodel.compute`) returns these numbers exactly where they
exist, and its FLOP/roofline estimate elsewhere.

Two spellings are read:

- **Sailor** (`layer-profiles/MODEL/GPU/profile.json` in the Sailor artifact)::

      {"1": {"2": {"0": [fwd_s, bwd_s, update_s], "1": [...], ...}}}

  microbatch size -> TP degree -> layer index -> three seconds. Nothing in the file says
  which model, device, precision or sequence length it is: the caller says so.

- **hetc** -- the same nested table under `times`, with the facts Sailor leaves implicit::

      {"format": "hetc-layer-profile", "version": 1,
       "model": "OPT-350M", "device": "A100-40GB", "precision": "fp16",
       "seq_len": 2048, "units": "s",
       "times": {"1": {"2": {"0": [fwd_s, bwd_s, update_s], ...}}}}

  `units` must be `"s"` (seconds per microbatch, per device). Keys are decimal strings
  because JSON keys are strings; values are non-negative finite numbers.

Layer indices follow the model's layer order (Sailor: 0 is the embedding, the last the output
end, the rest transformer blocks); every (microbatch, TP) entry must list the same indices.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

HETC_FORMAT = "hetc-layer-profile"
HETC_VERSION = 1

Times = tuple[float, float, float]
"""(forward_s, backward_s, update_s) of one layer for one microbatch on one device."""


class ProfileError(ValueError):
    """A profile file is malformed; the message names the file, the key path and the fix."""


@dataclass(frozen=True, kw_only=True, slots=True)
class LayerProfile:
    """Measured per-layer times of one model on one device type."""

    model: str
    device: str
    precision: str
    seq_len: int
    times: dict[int, dict[int, dict[int, Times]]]
    """microbatch size -> TP degree -> layer index -> (forward_s, backward_s, update_s)."""
    source: str = ""
    """Where it was read from (a path), for messages."""

    def lookup(self, microbatch: int, tp: int, layer: int) -> Times | None:
        """The measured times of `layer` at (microbatch, tp), or None when not measured."""
        return self.times.get(microbatch, {}).get(tp, {}).get(layer)

    def points(self) -> list[tuple[int, int]]:
        """Every measured (microbatch, tp) pair, sorted."""
        return sorted((m, t) for m, by_tp in self.times.items() for t in by_tp)

    def to_json(self) -> dict[str, object]:
        """The hetc spelling of this profile (see the module docstring)."""
        return {
            "format": HETC_FORMAT,
            "version": HETC_VERSION,
            "model": self.model,
            "device": self.device,
            "precision": self.precision,
            "seq_len": self.seq_len,
            "units": "s",
            "times": {
                str(m): {
                    str(t): {str(i): list(v) for i, v in sorted(layers.items())}
                    for t, layers in sorted(by_tp.items())
                }
                for m, by_tp in sorted(self.times.items())
            },
        }


def _positive_int(key: object, where: str) -> int:
    if isinstance(key, str) and key.isdigit() and int(key) > 0:
        return int(key)
    raise ProfileError(f'{where}: key {key!r} is not a positive integer (use e.g. "1", "2")')


def _times_table(raw: object, where: str) -> dict[int, dict[int, dict[int, Times]]]:
    if not isinstance(raw, dict) or not raw:
        raise ProfileError(
            f"{where}: expected a non-empty object microbatch -> tp -> layer -> "
            "[forward_s, backward_s, update_s]"
        )
    table: dict[int, dict[int, dict[int, Times]]] = {}
    indices: set[int] | None = None
    for mkey, by_tp in raw.items():
        mbs = _positive_int(mkey, f"{where}")
        if not isinstance(by_tp, dict) or not by_tp:
            raise ProfileError(f"{where}[{mkey}]: expected a non-empty object tp -> layers")
        table[mbs] = {}
        for tkey, layers in by_tp.items():
            tp = _positive_int(tkey, f"{where}[{mkey}]")
            here = f"{where}[{mkey}][{tkey}]"
            if not isinstance(layers, dict) or not layers:
                raise ProfileError(f"{here}: expected a non-empty object layer index -> times")
            row: dict[int, Times] = {}
            for lkey, value in layers.items():
                if not (isinstance(lkey, str) and lkey.isdigit()):
                    raise ProfileError(f"{here}: layer key {lkey!r} is not an index (0, 1, ...)")
                ok = (
                    isinstance(value, list)
                    and len(value) == 3
                    and all(
                        isinstance(x, (int, float))
                        and not isinstance(x, bool)
                        and math.isfinite(x)
                        and x >= 0
                        for x in value
                    )
                )
                if not ok:
                    raise ProfileError(
                        f"{here}[{lkey}]: expected [forward_s, backward_s, update_s], three "
                        f"non-negative numbers, got {value!r}"
                    )
                row[int(lkey)] = (float(value[0]), float(value[1]), float(value[2]))
            if indices is None:
                indices = set(row)
            elif set(row) != indices:
                raise ProfileError(
                    f"{here}: layer indices {sorted(row)} differ from the first entry's "
                    f"{sorted(indices)} (every microbatch/TP entry must list the same layers)"
                )
            table[mbs][tp] = row
    return table


def parse_profile(
    data: object,
    *,
    model: str | None = None,
    device: str | None = None,
    precision: str = "fp16",
    seq_len: int = 2048,
    source: str = "<profile>",
) -> LayerProfile:
    """Read a decoded profile in either spelling; raise `ProfileError` on any malformation.

    For the Sailor spelling, `model` and `device` are required (the file does not say) and
    `precision` / `seq_len` default to what Sailor's published profiles used (fp16 mixed
    precision, 2048 tokens). For the hetc spelling the file's own fields win and must agree
    with any that the caller passes.
    """
    if isinstance(data, dict) and "format" in data:
        if data.get("format") != HETC_FORMAT or data.get("version") != HETC_VERSION:
            raise ProfileError(
                f"{source}: format {data.get('format')!r} version {data.get('version')!r} is "
                f"not {HETC_FORMAT!r} version {HETC_VERSION}"
            )
        for key, kind in (("model", str), ("device", str), ("precision", str), ("seq_len", int)):
            if not isinstance(data.get(key), kind) or isinstance(data.get(key), bool):
                raise ProfileError(f"{source}: `{key}` must be a {kind.__name__}")
        if data.get("units") != "s":
            raise ProfileError(f'{source}: `units` must be "s" (seconds per microbatch)')
        fields = {"model": model, "device": device}
        for key, wanted in fields.items():
            if wanted is not None and data[key] != wanted:
                raise ProfileError(f"{source}: profile is for {key} {data[key]!r}, not {wanted!r}")
        return LayerProfile(
            model=data["model"],
            device=data["device"],
            precision=data["precision"],
            seq_len=data["seq_len"],
            times=_times_table(data.get("times"), f"{source}: times"),
            source=source,
        )
    if model is None or device is None:
        raise ProfileError(
            f"{source}: a Sailor profile does not name its model and device: pass model= and "
            "device= (or use the hetc format, which records them)"
        )
    return LayerProfile(
        model=model,
        device=device,
        precision=precision,
        seq_len=seq_len,
        times=_times_table(data, source),
        source=source,
    )


def read_profile(
    path: str | Path,
    *,
    model: str | None = None,
    device: str | None = None,
    precision: str = "fp16",
    seq_len: int = 2048,
) -> LayerProfile:
    """Read a profile file (Sailor or hetc spelling); see `parse_profile`."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ProfileError(f"{path}: not valid JSON ({exc})") from exc
    return parse_profile(
        data, model=model, device=device, precision=precision, seq_len=seq_len, source=str(path)
    )
