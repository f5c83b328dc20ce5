"""Plan to files: topology per rank, DeepSpeed configs, torchrun and Slurm scripts, report.

Renders the jinja2 templates shipped in `hetc/templates/`. Arrives with the compile issue (#5).
"""
