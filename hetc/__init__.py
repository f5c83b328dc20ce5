"""hetc: compile one YAML spec of a training job into a plan and the files that launch it."""

__version__ = "0.1.0"
