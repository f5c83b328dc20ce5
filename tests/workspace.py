"""Where the workspace's shared data lives for tests: beside the checkout (CI lays a copy of
shared/ there), else the developers' /work/shared, else $HETC_SAILOR_DATA."""

from __future__ import annotations

import os
from pathlib import Path

_CANDIDATES = [
    Path(__file__).resolve().parents[2] / "shared" / "data" / "sailor-measurements",
    Path("/work/shared/data/sailor-measurements"),
]
SAILOR_DATA = Path(
    os.environ.get("HETC_SAILOR_DATA")
    or next((str(c) for c in _CANDIDATES if c.is_dir()), str(_CANDIDATES[0]))
)
"""Sailor's published measurements (see shared/data/sailor-measurements/README.md)."""
