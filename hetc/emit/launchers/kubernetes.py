"""The Kubernetes launcher: `launch/kubernetes/<site>.yaml` per site, to `kubectl apply -f`.

Per site: one headless Service (no cluster IP; it gives each pod a stable DNS name) and one
indexed Job per pool (`completionMode: Indexed`, as many pods as the pool has nodes, all
started together). Pod `i` of Job `j` is `j-i.<service>` inside the namespace; node 0 of the
site's first Job is the rendezvous when the site starts the whole plan, else HETC_RDZV_ENDPOINT
must be set in the manifests (the same host:port for every site). Each pod runs the node script
at its `JOB_COMPLETION_INDEX` in its Job's list.

What the manifests assume, documented in docs/launchers.md: an image with hetc's runtime
(torch, deepspeed, hetc; IMAGE below unless edited), the compiled output copied to `out/` on a
ReadWriteMany volume claimed as `hetc-out`, mounted at /hetc (the pods run there and write
their run directory beside it, in `run/`), GPU nodes labelled `hetc.dev/device=<device>` with
the spec's device name, and the NVIDIA device plugin (`nvidia.com/gpu`). A pod asks for one
node's devices (GPUs, or CPU cores for a CPU device) and stops without restarts: resuming is
left to whoever applies the manifests again (every run starts from the newest complete
checkpoint).
"""

from __future__ import annotations

import json

from hetc.emit.launch import LaunchContext, LaunchSite, PoolNodes, dns_label, job_name
from hetc.units import plural

DEVICE_LABEL = "hetc.dev/device"
"""The node label the GPU pools select on; its value is the spec's device name."""
VOLUME_CLAIM = "hetc-out"
"""The PersistentVolumeClaim holding the compiled output (at `out/`)."""
MOUNT = "/hetc"
IMAGE = "hetc-runtime:{version}"
"""The container image, by hetc version: one the user builds with torch, deepspeed and hetc."""


def _q(text: str) -> str:
    """A YAML scalar: a JSON string is also a YAML one (the same escapes)."""
    return json.dumps(text, ensure_ascii=False)


def _label_value(text: str) -> str:
    """A Kubernetes label value: letters, digits, - _ . inside, alphanumeric at both ends."""
    value = "".join(c if c.isascii() and (c.isalnum() or c in "-_.") else "-" for c in text)
    return value.strip("-_.")[:63].strip("-_.") or "x"


def _grace(context: LaunchContext) -> int:
    """Seconds between the pod's SIGTERM and SIGKILL: the ranks' grace, torchrun's margin
    after it, and as much again for the node script to exit."""
    common = context.common
    return int(common["term_grace"]) + 2 * int(common["shutdown_margin"])


def _service(name: str, labels: dict[str, str], port: int) -> str:
    return "\n".join(
        [
            "apiVersion: v1",
            "kind: Service",
            "metadata:",
            f"  name: {_q(name)}",
            "  labels:",
            *(f"    {k}: {_q(v)}" for k, v in labels.items()),
            "spec:",
            "  clusterIP: None",
            "  publishNotReadyAddresses: true",
            "  selector:",
            *(f"    {k}: {_q(v)}" for k, v in labels.items()),
            "  ports:",
            "    - name: rendezvous",
            f"      port: {port}",
            f"      targetPort: {port}",
            "",
        ]
    )


def _command(context: LaunchContext, site: LaunchSite, group: PoolNodes, head: str) -> str:
    scripts = " ".join(n.script for n in group.nodes)
    if site.whole_plan:
        endpoint = f'export HETC_RDZV_ENDPOINT="${{HETC_RDZV_ENDPOINT:-{head}}}"\n'
    else:
        endpoint = (
            f': "${{HETC_RDZV_ENDPOINT:?this plan spans several sites ({len(site.nodes)} of'
            f" {len(context.nodes)} nodes here): set HETC_RDZV_ENDPOINT=host:port, a node every"
            ' site reaches, the same for every site}"\n'
        )
    return (
        f"scripts=({scripts})\n"
        f"{endpoint}"
        'export HETC_RUN_DIR="${HETC_RUN_DIR:-$PWD/run}"\n'
        'exec bash "out/launch/${scripts[$JOB_COMPLETION_INDEX]}"\n'
    )


def _job(
    context: LaunchContext,
    site: LaunchSite,
    group: PoolNodes,
    name: str,
    service: str,
    labels: dict[str, str],
    head: str,
) -> str:
    pool = group.pool
    count = len(group.nodes)
    if group.cpu:
        resources = [
            "          resources:",
            "            requests:",
            f"              cpu: {_q(str(pool.gpus_per_node))}",
        ]
        selector: list[str] = []
    else:
        resources = [
            "          resources:",
            "            limits:",
            f"              nvidia.com/gpu: {pool.gpus_per_node}",
        ]
        selector = [
            "      nodeSelector:",
            f"        {DEVICE_LABEL}: {_q(_label_value(pool.device))}",
        ]
    command = _command(context, site, group, head)
    script = "".join(f"              {line}\n" for line in command.splitlines())
    return (
        "\n".join(
            [
                "apiVersion: batch/v1",
                "kind: Job",
                "metadata:",
                f"  name: {_q(name)}",
                "  labels:",
                *(f"    {k}: {_q(v)}" for k, v in labels.items()),
                f"    hetc.dev/pool: {_q(_label_value(pool.name))}",
                "spec:",
                "  completionMode: Indexed",
                f"  completions: {count}",
                f"  parallelism: {count}",
                "  backoffLimit: 0",
                "  template:",
                "    metadata:",
                "      labels:",
                *(f"        {k}: {_q(v)}" for k, v in labels.items()),
                "    spec:",
                f"      subdomain: {_q(service)}",
                "      restartPolicy: Never",
                f"      terminationGracePeriodSeconds: {_grace(context)}",
                *selector,
                "      containers:",
                "        - name: node",
                f"          image: {_q(IMAGE.format(version=context.common['hetc_version']))}",
                f"          workingDir: {_q(MOUNT)}",
                "          command:",
                "            - bash",
                "            - -c",
                "            - |",
            ]
        )
        + "\n"
        + script
        + "\n".join(
            [
                "          env:",
                "            - name: HETC_RDZV_ENDPOINT",
                '              value: ""',
                "          ports:",
                f"            - containerPort: {context.rdzv_port}",
                "              name: rendezvous",
                *resources,
                "          volumeMounts:",
                "            - name: hetc-out",
                f"              mountPath: {_q(MOUNT)}",
                "      volumes:",
                "        - name: hetc-out",
                "          persistentVolumeClaim:",
                f"            claimName: {_q(VOLUME_CLAIM)}",
                "",
            ]
        )
    )


def manifests(context: LaunchContext, site: LaunchSite) -> str:
    """The site's manifests: its headless Service, then one indexed Job per pool."""
    common = context.common
    base = dns_label(f"{job_name(context.spec)}-{site.stem}", 40)
    labels = {
        "hetc.dev/job": _label_value(base),
        "hetc.dev/plan": common["plan_hash"][:12],
    }
    names = [dns_label(f"{base}-{i}-{group.pool.name}", 52) for i, group in enumerate(site.pools)]
    head = f"{names[0]}-0.{base}:{context.rdzv_port}"
    header = (
        f"# Generated by hetc {common['hetc_version']} for spec {common['spec_name']},"
        f" plan {common['plan_hash'][:12]}. Recompile instead of editing.\n"
        f"# Site {site.site.name}: {len(site.nodes)} of {plural(len(context.nodes), 'node')}, a"
        f" headless Service and {plural(len(site.pools), 'indexed Job')}; kubectl apply -f this"
        " file.\n"
    )
    documents = [_service(base, labels, context.rdzv_port)]
    documents += [
        _job(context, site, group, name, base, labels, head)
        for group, name in zip(site.pools, names, strict=True)
    ]
    return header + "---\n".join(documents)


class KubernetesLauncher:
    """`launch/kubernetes/<site>.yaml` per site."""

    name = "kubernetes"

    def files(self, context: LaunchContext, sites: tuple[LaunchSite, ...]) -> dict[str, str]:
        """One manifest file per site of `sites`."""
        return {f"launch/kubernetes/{s.stem}.yaml": manifests(context, s) for s in sites}
