"""What a compiled output records of the cost model's inputs: `spec.json` and `profiles/`.

`hetc compile` predicts a plan from the spec and the measured profiles it was given; the runtime
never reads either. To compare a run with its prediction later (`hetc calibrate`), on a machine
where the spec's YAML and its profile files may not be, the output keeps both:

- `spec.json`: `{"format": "hetc-compiled-spec", "version": 1, "spec_hash": ..., "spec": the
  normalised spec (hetc.schema.normalised), "profiles": {device: "profiles/<i>-<device>.json"}}`;
- `profiles/<i>-<device>.json`: each profile the prediction used, as the cost model read it (hetc
  spelling, device and precision as the spec names them).

Both are listed in `manifest.json` like every other file, so an edited copy is noticed; and the
spec's hash must be the plan's `spec_hash`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from hetc.costmodel.measured import RunDataError
from hetc.costmodel.profile import LayerProfile, ProfileError
from hetc.costmodel.simulate import read_spec_profiles
from hetc.schema import EnvironmentProblem, Spec, spec_hash
from hetc.schema.normalised import NormalisedSpecError, spec_from_json, spec_json

COMPILED_SPEC = "spec.json"
FORMAT = "hetc-compiled-spec"
VERSION = 1


def profile_file_name(index: int, device: str) -> str:
    """`profiles/<index>-<device>.json`: the device name lower-cased and made file-name safe,
    after its index among the profiles, since two names may differ only in what is replaced."""
    return f"profiles/{index}-{re.sub(r'[^a-z0-9._-]+', '-', device.lower())}.json"


def _json(value: object) -> bytes:
    return (json.dumps(value, sort_keys=True, indent=2, ensure_ascii=False) + "\n").encode()


def compiled_spec_files(spec: Spec, profiles: Sequence[LayerProfile]) -> dict[str, bytes]:
    """`spec.json` and one `profiles/<device>.json` per profile, by path in the output."""
    devices = sorted(p.device for p in profiles)
    names = {d: profile_file_name(i, d) for i, d in enumerate(devices)}
    record = {
        "format": FORMAT,
        "version": VERSION,
        "spec_hash": spec_hash(spec),
        "spec": spec_json(spec),
        "profiles": dict(sorted(names.items())),
    }
    files = {COMPILED_SPEC: _json(record)}
    for profile in profiles:
        files[names[profile.device]] = _json(profile.to_json())
    return files


def read_compiled_spec(out_dir: Path) -> tuple[Spec, list[LayerProfile]]:
    """The spec and profiles a compiled output was predicted with.

    Raises `EnvironmentProblem` when `spec.json` or a profile it lists cannot be read (an
    output compiled before hetc wrote them), `RunDataError` when they are malformed or the
    spec is not the one the plan was made for.
    """
    path = out_dir / COMPILED_SPEC
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise EnvironmentProblem(
            f"{path} does not exist: the output was compiled by a hetc that did not record its"
            " spec",
            "recompile the spec with this hetc, or pass the spec with --spec (and its"
            " profiles with --profile)",
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise EnvironmentProblem(f"cannot read {path}: {exc}", "make it readable") from None
    except json.JSONDecodeError as exc:
        raise RunDataError(
            f"{path}:{exc.lineno}:{exc.colno}: not valid JSON ({exc.msg})",
            "recompile the spec: hetc writes this file",
        ) from None
    if not isinstance(record, dict) or record.get("format") != FORMAT:
        raise RunDataError(
            f"{path}: not a {FORMAT!r} record", "recompile the spec: hetc writes this file"
        )
    if record.get("version") != VERSION:
        raise RunDataError(
            f"{path}: version {record.get('version')!r}; this hetc reads version {VERSION}",
            "recompile the spec with this hetc",
        )
    try:
        spec = spec_from_json(record.get("spec"))
    except NormalisedSpecError as exc:
        raise RunDataError(f"{path}: {exc}", "recompile the spec with this hetc") from None
    if spec_hash(spec) != record.get("spec_hash"):
        raise RunDataError(
            f"{path}: its spec does not have the hash it records (the file was edited)",
            "recompile the spec; never edit a compiled output",
        )
    listed = record.get("profiles", {})
    if not isinstance(listed, dict) or not all(isinstance(v, str) for v in listed.values()):
        raise RunDataError(
            f"{path}: `profiles` must map device names to files",
            "recompile the spec with this hetc",
        )
    paths = [str(out_dir / name) for name in listed.values()]
    for name in paths:
        if not Path(name).is_file():
            raise EnvironmentProblem(
                f"{name} is missing: {path} lists it", "copy the whole compiled output"
            )
    try:
        profiles = read_spec_profiles(replace(spec, profiles=()), str(out_dir), extra=paths)
    except ProfileError as exc:
        raise RunDataError(str(exc), "recompile the spec with this hetc") from None
    return spec, profiles
