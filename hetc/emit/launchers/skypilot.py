"""The SkyPilot launcher: one task YAML per site (`launch/skypilot/<site>.yaml`).

A SkyPilot task's nodes share one resource request, so a site with one pool is one task of
`num_nodes` nodes (`sky launch` or `sky jobs launch`), and a site with several pools is a job
group (`sky jobs launch`): one task per pool, started together, each node reachable as
`<task>-<rank>.<group>`. Each node runs the node script at its `SKYPILOT_NODE_RANK` in the
task's list; the rendezvous is node 0 of the site's first task (the first of
`SKYPILOT_NODE_IPS`, or its job-group host name) when the site starts the whole plan, else
whatever HETC_RDZV_ENDPOINT says (`--env HETC_RDZV_ENDPOINT=host:port`, the same for every
site). The task's workdir is the compiled output: launch it from there
(`cd OUT && sky launch launch/skypilot/<site>.yaml`). The image or the site's prologue must
provide hetc's runtime (torch, deepspeed, hetc). A site's `cloud` names where, with the zone's
region and zone; without it SkyPilot chooses.
"""

from __future__ import annotations

import json

from hetc.emit.launch import LaunchContext, LaunchSite, PoolNodes, dns_label, job_name
from hetc.units import plural

ACCELERATORS = {
    "A100-40GB": "A100",
    "A100-80GB": "A100-80GB",
    "H100-80GB": "H100",
    "H100-NVL": "H100-NVL",
    "H200": "H200",
    "GH200": "GH200",
    "V100-16GB": "V100",
    "V100-32GB": "V100-32GB",
    "A10G": "A10G",
    "L4": "L4",
    "T4": "T4",
    "RTX-3090": "RTX3090",
    "RTX-2080": "RTX2080",
    "Titan-RTX": "TitanRTX",
}
"""hetc's catalog device -> SkyPilot's accelerator name; a device the spec defines itself is
passed under its own name."""


def _q(text: str) -> str:
    """A YAML scalar: a JSON string is also a YAML one (the same escapes)."""
    return json.dumps(text, ensure_ascii=False)


def _block(text: str, indent: str) -> str:
    return "".join(f"{indent}{line}\n" if line else "\n" for line in text.splitlines())


def _resources(context: LaunchContext, site: LaunchSite, group: PoolNodes) -> list[str]:
    pool = group.pool
    lines = ["resources:"]
    if group.cpu:
        lines.append(f"  cpus: {_q(f'{pool.gpus_per_node}+')}")
    else:
        name = ACCELERATORS.get(pool.device, pool.device)
        lines.append(f"  accelerators: {{{_q(name)}: {pool.gpus_per_node}}}")
    if site.site.cloud:
        zone = next(z for z in context.spec.zones if z.name == group.zone)
        lines.append(f"  infra: {_q(f'{site.site.cloud}/{zone.region}/{zone.name}')}")
    return lines


def _run(context: LaunchContext, site: LaunchSite, group: PoolNodes, head: str | None) -> str:
    scripts = " ".join(n.script for n in group.nodes)
    if site.whole_plan:
        where = f'"{head}"' if head else '$(echo "$SKYPILOT_NODE_IPS" | head -n 1)'
        endpoint = (
            'if [[ -z "${HETC_RDZV_ENDPOINT:-}" ]]; then\n'
            f"    head_host={where}\n"
            f'    export HETC_RDZV_ENDPOINT="$head_host:{context.rdzv_port}"\nfi\n'
        )
    else:
        endpoint = (
            'if [[ -z "${HETC_RDZV_ENDPOINT:-}" ]]; then\n'
            f'    echo "hetc: this plan spans several sites ({len(site.nodes)} of'
            f" {len(context.nodes)} nodes here): pass --env HETC_RDZV_ENDPOINT=host:port, a"
            ' node every site reaches, the same for every site" >&2\n'
            "    exit 2\nfi\n"
        )
    return (
        f"scripts=({scripts})\n"
        f'if [[ "$SKYPILOT_NUM_NODES" != "{len(group.nodes)}" ]]; then\n'
        f'    echo "hetc: this task starts {plural(len(group.nodes), "node")}, SkyPilot gave'
        ' $SKYPILOT_NUM_NODES" >&2\n'
        "    exit 2\nfi\n"
        f"{endpoint}"
        'export HETC_RUN_DIR="${HETC_RUN_DIR:-$HOME/hetc-run}"\n'
        'exec bash "launch/${scripts[$SKYPILOT_NODE_RANK]}"\n'
    )


def _setup(context: LaunchContext, site: LaunchSite) -> str:
    prologue = context.prologues.get(site.site.name)
    lines = f'# shellcheck source=/dev/null\nsource "launch/{prologue}"\n' if prologue else ""
    return (
        f"{lines}"
        'if ! command -v "${HETC_TORCHRUN:-torchrun}" >/dev/null; then\n'
        "    echo \"hetc: torchrun not found: the image or the site's prologue must provide"
        ' torch, deepspeed and hetc" >&2\n'
        "    exit 1\nfi\n"
    )


def _task(
    context: LaunchContext, site: LaunchSite, group: PoolNodes, name: str, head: str | None
) -> str:
    lines = [
        f"name: {_q(name)}",
        f"num_nodes: {len(group.nodes)}",
        *_resources(context, site, group),
        "envs:",
        '  HETC_RDZV_ENDPOINT: ""',
        '  HETC_RDZV_ID: ""',
        "workdir: .",
        "setup: |",
    ]
    text = "\n".join(lines) + "\n" + _block(_setup(context, site), "  ")
    return text + "run: |\n" + _block(_run(context, site, group, head), "  ")


def task_yaml(context: LaunchContext, site: LaunchSite) -> str:
    """The site's SkyPilot YAML: one task, or a job group of one task per pool."""
    common = context.common
    base = dns_label(f"{job_name(context.spec)}-{site.stem}")
    header = (
        f"# Generated by hetc {common['hetc_version']} for spec {common['spec_name']},"
        f" plan {common['plan_hash'][:12]}. Recompile instead of editing.\n"
        f"# Site {site.site.name}: {len(site.nodes)} of {plural(len(context.nodes), 'node')};"
        f" start from the compiled output: cd OUT && sky {'jobs ' if len(site.pools) > 1 else ''}"
        f"launch launch/skypilot/{site.stem}.yaml\n"
    )
    if len(site.pools) == 1:
        return header + _task(context, site, site.pools[0], base, None)
    names = [dns_label(f"{group.pool.name}-{i}", 30) for i, group in enumerate(site.pools)]
    group_name = dns_label(base, 30)
    head = f"{names[0]}-0.{group_name}"
    documents = [f"name: {_q(group_name)}\nexecution: parallel\n"]
    documents += [_task(context, site, g, n, head) for g, n in zip(site.pools, names, strict=True)]
    return header + "---\n".join(documents)


class SkyPilotLauncher:
    """`launch/skypilot/<site>.yaml` per site."""

    name = "skypilot"

    def files(self, context: LaunchContext, sites: tuple[LaunchSite, ...]) -> dict[str, str]:
        """One task YAML per site of `sites`."""
        return {f"launch/skypilot/{s.stem}.yaml": task_yaml(context, s) for s in sites}
