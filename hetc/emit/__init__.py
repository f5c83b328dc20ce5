"""Plan to files: topology per rank, DeepSpeed configs, launch files, report.

Renders the jinja2 templates shipped in `hetc/templates/`; the launch files come from the
launchers in `hetc.emit.launchers` (torchrun, Slurm, SkyPilot, Kubernetes).
"""
