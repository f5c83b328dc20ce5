"""Whether the runtime can train the spec's model, as a positioned warning for `hetc compile`.

`hetc validate`, `plan` and `simulate` accept every catalog model: the cost model prices them
all. The runtime trains fewer (`plan.model_problems`: it refuses OPT-350M's embedding
projection and GPT-Neo's local attention at start-up). `hetc compile` checks the same list
when it compiles, so that a user learns it then rather than at launch, and says where the spec
names the model: the field under `model.architecture` where the spec writes it, else the
preset's name. It warns rather than refuses: the launch files of such a plan are still what
the planner chose (the Sailor scenarios' OPT-350M and GPT-Neo examples compile), and the
runtime's own refusal stops them before any training step.
"""

from __future__ import annotations

from dataclasses import asdict

from hetc.plan import model_problems
from hetc.schema.diagnostics import Diagnostic
from hetc.schema.source import parse, read_text
from hetc.schema.spec import Spec


def untrainable(filename: str, spec: Spec) -> list[Diagnostic]:
    """One warning per model field the runtime cannot train, at its place in `filename`
    (the spec `spec` was read from); none when the runtime trains the model."""
    model = asdict(spec.model)
    problems = model_problems(model)
    if not problems:
        return []
    _, positions = parse(read_text(filename))
    out = []
    for name, why in problems:
        path: tuple[str, ...] = ("model", "architecture", name)
        if path not in positions.values:
            path = ("model", "preset") if ("model", "preset") in positions.values else ("model",)
        line, column = positions.locate(path)
        out.append(
            Diagnostic(
                filename,
                line,
                column,
                ".".join(path),
                f"model {spec.model_name} has {name} {model[name]!r}: {why}; the training runtime"
                " refuses this model at start-up",
                severity="warning",
            )
        )
    return out
