"""The spec language: load a YAML spec, check it completely, and type it.

`check_file` is the one entry point: it never raises for anything in the file, only
`EnvironmentProblem` when the file cannot be read at all. Structural checks (JSON Schema) and
semantic checks both run, so a user sees every problem of a file in one pass.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from hetc.schema.diagnostics import Diagnostic, EnvironmentProblem, Finding, dotted
from hetc.schema.semantic import semantic_findings
from hetc.schema.shorthands import expand_shorthands
from hetc.schema.source import SourceMap, SyntaxProblem, parse, read_text
from hetc.schema.spec import Spec, build_spec, spec_hash
from hetc.schema.structure import non_finite_numbers, spec_schema_text, structural_findings

__all__ = [
    "CheckResult",
    "Diagnostic",
    "EnvironmentProblem",
    "Spec",
    "check_file",
    "check_text",
    "spec_hash",
    "spec_schema_text",
]


@dataclass(frozen=True, slots=True)
class CheckResult:
    """The diagnostics of one file and, when it has no errors, its typed spec."""

    file: str
    diagnostics: tuple[Diagnostic, ...]
    spec: Spec | None

    @property
    def errors(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.severity == "error"]

    @property
    def warnings(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.severity == "warning"]


def check_file(filename: str) -> CheckResult:
    """Read and check one spec file; raises only `EnvironmentProblem`."""
    try:
        text = read_text(filename)
    except SyntaxProblem as exc:
        return _unreadable(filename, exc.line, exc.column, exc.message)
    return check_text(text, filename, os.path.dirname(filename) or ".")


def check_text(text: str, filename: str = "<spec>", spec_dir: str = ".") -> CheckResult:
    """Check spec text as if read from `filename` (relative paths resolve from `spec_dir`)."""
    try:
        parsed, positions = parse(text)
    except SyntaxProblem as exc:
        diagnostics = tuple(
            Diagnostic(filename, p.line, p.column, dotted(p.path), p.message) for p in exc.problems
        )
        return CheckResult(filename, diagnostics, None)
    if not isinstance(parsed, dict):
        kind = "a list" if isinstance(parsed, list) else f"a single value ({parsed!r:.40})"
        return _unreadable(
            filename,
            1,
            1,
            f"a spec is a mapping of keys (version:, name:, model:, ...); this file holds {kind}",
        )
    data = expand_shorthands(parsed)
    findings = list(non_finite_numbers(data))
    findings += structural_findings(data)
    structural_paths = {f.path for f in findings}
    findings += [f for f in semantic_findings(data, spec_dir) if f.path not in structural_paths]
    diagnostics = _positioned(findings, positions, filename)
    has_errors = any(d.severity == "error" for d in diagnostics)
    return CheckResult(filename, diagnostics, None if has_errors else build_spec(data))


def _unreadable(filename: str, line: int, column: int, message: str) -> CheckResult:
    """A file that could not be read as a spec at all: one diagnostic about the whole file."""
    return CheckResult(filename, (Diagnostic(filename, line, column, "(root)", message),), None)


def _positioned(
    findings: list[Finding], positions: SourceMap, filename: str
) -> tuple[Diagnostic, ...]:
    """Findings with file positions, duplicates dropped, in document order."""
    unique: dict[tuple[str, str], Diagnostic] = {}
    for finding in findings:
        line, column = positions.locate(finding.path, finding.at_key)
        diagnostic = Diagnostic(
            filename, line, column, dotted(finding.path), finding.message, finding.severity
        )
        unique.setdefault((diagnostic.path, diagnostic.message), diagnostic)
    return tuple(sorted(unique.values(), key=lambda d: (d.line, d.column, d.path)))
