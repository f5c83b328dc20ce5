"""Whether the runtime can train the spec's model, as a positioned warning of every check.

The cost model prices every catalog model, so `hetc plan` and `simulate` take them all; the
runtime trains fewer (`plan.model_problems`: it refuses OPT-350M's embedding projection and
GPT-Neo's local attention at start-up). Reporting that among the spec's checks means a user
learns it from `hetc validate` and the pre-commit hook, and `hetc compile` prints it with the
spec's other warnings, rather than from a launch that stops. It points where the spec names
the model: the field under `model.architecture` where the spec writes it, else the preset. It
warns rather than refuses: the launch files of such a plan are still what the planner chose
(the Sailor scenarios' OPT-350M and GPT-Neo examples compile), and the runtime's own refusal
stops them before any training step.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict
from typing import Any

from hetc import catalog
from hetc.plan import model_problems
from hetc.schema.diagnostics import Finding, Path

_WRITTEN_AT: dict[str, tuple[str, ...]] = {
    "embedding_projection": ("embedding_projection",),
    "local_attention_window": ("local_attention", "window"),
    "attention_pattern": ("local_attention", "pattern"),
}
"""Where `model.architecture` writes each field `model_problems` names."""


def untrainable(
    model: dict[str, Any], architecture: catalog.ModelArchitecture
) -> Iterator[Finding]:
    """A warning per field of `architecture` (the model the spec's `model` mapping names or
    describes) that the runtime cannot train; none when it trains the model."""
    fields = asdict(architecture)
    preset = model.get("preset")
    found = catalog.find_model(preset) if isinstance(preset, str) else None
    name = found.name if found is not None else "custom"
    for field, why in model_problems(fields):
        yield Finding(
            _place(model, field),
            f"model {name} has {field} {fields[field]!r}: {why}; the training runtime refuses"
            " this model at start-up",
            severity="warning",
        )


def _place(model: dict[str, Any], field: str) -> Path:
    """The deepest path of `field` the spec writes: under `architecture`, else the preset."""
    if "architecture" not in model:
        return ("model", "preset")
    path: Path = ("model", "architecture")
    node: Any = model["architecture"]
    for key in _WRITTEN_AT.get(field, (field,)):
        if not isinstance(node, dict) or key not in node:
            break
        path, node = (*path, key), node[key]
    return path
