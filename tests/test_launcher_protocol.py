"""The launcher protocol: torchrun and Slurm files byte for byte as before it, which launchers
write for which sites, `--launcher` and the spec's `scheduler`, and determinism.

The golden hashes in tests/data/launchers/*.launch.json were written by `launch_files` of
commit 409cb2e (before the protocol) for the stored plans, except internet-scale's (an example
added after it, hashed from the protocol's launchers when it was added); a change of one byte of any
torchrun or Slurm file fails the first test (checked: editing one comment line of
node.sh.j2 fails it for every example)."""

from __future__ import annotations

import hashlib
import json
import re
import stat
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hetc.cli import app
from hetc.emit.launch import dns_label
from hetc.emit.launchers import LAUNCHERS, UnknownLauncher, parse_launchers
from hetc.schema import check_text
from tests.launcher_examples import (
    DATA,
    EXAMPLES,
    ROOT,
    example_context,
    example_files,
    example_spec,
)

runner = CliRunner()


@pytest.mark.parametrize("stem", EXAMPLES)
def test_torchrun_and_slurm_files_are_byte_identical_to_before_the_protocol(stem: str) -> None:
    """Default launch files of every example hash exactly as the pre-protocol code's did."""
    files = example_files(stem)
    got = {p: hashlib.sha256(t.encode()).hexdigest() for p, t in files.items()}
    want = json.loads((DATA / f"{stem}.launch.json").read_text(encoding="utf-8"))
    assert got == want


@pytest.mark.parametrize("stem", EXAMPLES)
def test_the_two_launchers_together_write_exactly_the_default_files(stem: str) -> None:
    """TorchrunLauncher for every site plus SlurmLauncher for the Slurm sites = the default."""
    context = example_context(stem)
    slurm_sites = tuple(s for s in context.sites if s.scheduler == "slurm")
    files = LAUNCHERS["torchrun"].files(context, context.sites)
    if slurm_sites:
        files.update(LAUNCHERS["slurm"].files(context, slurm_sites))
    assert files == example_files(stem)


def test_launcher_selection_follows_the_flag_else_each_sites_scheduler() -> None:
    """No flag: a site's scheduler picks its launcher; a flag applies its launchers to all."""
    default = example_files("local-cpu")
    assert sorted(default) == ["launch/node0000.sh", "launch/node0001.sh"]
    spec = example_spec("local-cpu", ("scheduler: torchrun", "scheduler: kubernetes"))
    by_site = example_files("local-cpu", spec=spec)
    assert set(by_site) - set(default) == {"launch/kubernetes/local.yaml"}
    flagged = example_files("local-cpu", ("skypilot",), spec=spec)
    assert set(flagged) - set(default) == {"launch/skypilot/local.yaml"}
    slurm = example_files("slurm-local-cpu", ("kubernetes", "skypilot"))
    assert not [p for p in slurm if p.endswith(".sbatch") or p.endswith("slurm-step.sh")]
    assert {"launch/kubernetes/ci.yaml", "launch/skypilot/ci.yaml"} <= set(slurm)
    assert {p for p in slurm if p.startswith("launch/node")} == {
        p for p in example_files("slurm-local-cpu") if p.startswith("launch/node")
    }


def test_zones_without_a_site_get_one_implicit_site_each() -> None:
    """opt350m-5zones names no site: each zone its plan uses gets its own launch files."""
    context = example_context("opt350m-5zones")
    zones = {n.zone for n in context.nodes}
    assert [s.stem for s in context.sites] == sorted(
        zones, key=[n.zone for n in context.nodes].index
    )
    assert all(s.scheduler is None and not s.whole_plan for s in context.sites)
    files = example_files("opt350m-5zones", ("kubernetes",))
    assert {p for p in files if p.startswith("launch/kubernetes/")} == {
        f"launch/kubernetes/{z}.yaml" for z in zones
    }


def test_parse_launchers_checks_names_and_orders_them() -> None:
    """Known names come back in LAUNCHERS' order; an unknown one is named with the valid ones."""
    assert parse_launchers(" kubernetes,skypilot ,kubernetes") == ("skypilot", "kubernetes")
    with pytest.raises(UnknownLauncher, match=r"'k8s': not a launcher; valid: torchrun, slurm,"):
        parse_launchers("slurm,k8s")
    with pytest.raises(UnknownLauncher, match="no launcher"):
        parse_launchers(" , ")


def test_dns_label_keeps_names_valid_and_apart() -> None:
    """Odd or long names become RFC 1123 labels; cut names differ by their hash."""
    assert dns_label("hetc-job-a") == "hetc-job-a"
    assert dns_label("Hetc_Job/A") != dns_label("hetc-job-a")
    long_a, long_b = dns_label("x" * 80 + "a"), dns_label("x" * 80 + "b")
    assert long_a != long_b
    for label in (dns_label("Hetc_Job/A"), long_a, dns_label("$$$"), dns_label("-a-", 5)):
        assert len(label) <= 63
        assert label[0].isalnum() and label[-1].isalnum()
        assert set(label) <= set("abcdefghijklmnopqrstuvwxyz0123456789-")


def test_unknown_scheduler_is_positioned_with_the_valid_values() -> None:
    """A bad `sites[].scheduler` gets file:line:column and the four valid values."""
    path = ROOT / "examples" / "slurm-local-cpu.yaml"
    text = path.read_text(encoding="utf-8").replace("scheduler: slurm", "scheduler: k8s")
    checked = check_text(text, "spec.yaml", str(path.parent))
    line = next(i for i, t in enumerate(text.splitlines(), 1) if "scheduler: k8s" in t)
    column = text.splitlines()[line - 1].index("k8s") + 1
    (message,) = [d.format() for d in checked.diagnostics]
    assert message.startswith(f"spec.yaml:{line}:{column}: sites[0].scheduler:")
    assert "slurm | torchrun | skypilot | kubernetes" in message


def test_compile_with_unknown_launcher_exits_2_listing_the_valid_ones(tmp_path: Path) -> None:
    """`--launcher bogus` is a usage error that writes nothing."""
    spec = ROOT / "examples" / "local-cpu.yaml"
    result = runner.invoke(
        app, ["compile", str(spec), "-o", str(tmp_path / "o"), "--launcher", "bogus"]
    )
    assert result.exit_code == 2
    assert "valid: torchrun, slurm, skypilot, kubernetes" in result.output
    assert not (tmp_path / "o").exists()


def test_compile_with_launchers_is_deterministic_and_yaml_is_not_executable(
    tmp_path: Path,
) -> None:
    """Compiling twice with --launcher skypilot,kubernetes gives the same bytes; YAML is 0644."""
    spec = ROOT / "examples" / "slurm-local-cpu.yaml"
    trees = []
    for name in ("a", "b"):
        out = tmp_path / name
        result = runner.invoke(
            app, ["compile", str(spec), "-o", str(out), "--launcher", "skypilot,kubernetes"]
        )
        assert result.exit_code == 0, result.output
        assert f"kubectl apply -f {out}/launch/kubernetes/ci.yaml" in result.output
        trees.append(
            {p.relative_to(out).as_posix(): p.read_bytes() for p in out.rglob("*") if p.is_file()}
        )
    assert trees[0] == trees[1]
    assert {"launch/skypilot/ci.yaml", "launch/kubernetes/ci.yaml"} <= set(trees[0])
    for path in ("launch/skypilot/ci.yaml", "launch/kubernetes/ci.yaml"):
        assert not (tmp_path / "a" / path).stat().st_mode & stat.S_IXUSR
    assert (tmp_path / "a" / "launch/node0000.sh").stat().st_mode & stat.S_IXUSR


def test_compile_plan_writes_the_launchers_asked_for(tmp_path: Path) -> None:
    """`hetc compile --plan FILE --launcher kubernetes` compiles the stored plan with manifests."""
    spec = ROOT / "examples" / "slurm-local-cpu.yaml"
    out = tmp_path / "o"
    result = runner.invoke(
        app,
        [
            "compile",
            str(spec),
            "--plan",
            str(DATA / "slurm-local-cpu.plan.json"),
            "-o",
            str(out),
            "--launcher",
            "kubernetes",
        ],
    )
    assert result.exit_code == 0, result.output
    written = {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()}
    assert "launch/kubernetes/ci.yaml" in written
    assert not [p for p in written if p.endswith(".sbatch") or "skypilot" in p]
    expected = example_files("slurm-local-cpu", ("kubernetes",))["launch/kubernetes/ci.yaml"]

    def unhashed(text: str) -> str:
        """The manifests without the plan hash (the given plan is re-simulated on compile)."""
        return re.sub(r'(plan |hetc.dev/plan: ")[0-9a-f]{12}', r"\1PLAN", text)

    assert unhashed((out / "launch/kubernetes/ci.yaml").read_text()) == unhashed(expected)
