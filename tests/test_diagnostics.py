"""Diagnostic formatting helpers: dotted paths and suggestions."""

from __future__ import annotations

from hetc.schema.diagnostics import Diagnostic, did_you_mean, dotted


def test_dotted_paths() -> None:
    """List indices print in brackets, keys with dots, and the empty path as (root)."""
    assert dotted(("zones", 0, "pools", 12, "device")) == "zones[0].pools[12].device"
    assert dotted(()) == "(root)"
    assert dotted((3,)) == "[3]"


def test_did_you_mean_prefers_case_insensitive_equality() -> None:
    """A name differing only in case is suggested in the canonical spelling."""
    assert did_you_mean("a100-40gb", ["A100-40GB", "A100-80GB"]) == " (did you mean 'A100-40GB'?)"
    assert did_you_mean("V10016GB", ["V100-16GB", "T4"]) == " (did you mean 'V100-16GB'?)"
    assert did_you_mean("zzzz", ["V100-16GB", "T4"]) == ""


def test_format_and_json_agree() -> None:
    """The text line and the JSON object carry the same facts; warnings are marked."""
    warning = Diagnostic("s.yaml", 3, 7, "zones[0].pools[0].quota", "not a multiple", "warning")
    assert warning.format() == "s.yaml:3:7: zones[0].pools[0].quota: warning: not a multiple"
    assert warning.as_json() == {
        "file": "s.yaml",
        "line": 3,
        "column": 7,
        "path": "zones[0].pools[0].quota",
        "severity": "warning",
        "message": "not a multiple",
    }
