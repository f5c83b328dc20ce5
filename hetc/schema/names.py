"""Warnings for names that read as something they are not.

A spec's names end up in node ids, rank keys, launch scripts and reports, where a reviewer
reads them. Two kinds mislead without being wrong: a name holding a bidirectional override or
an invisible character (it displays as other text: the "Trojan Source" trick, or two names that
look the same and differ), and a zone named like another zone's region while it lies in a
different region itself (zone `r1` in region `r2` beside zone `r2` in region `r1`), where every
`between:` and every report that says `r1` can be read two ways. Both are warnings: the spec
means something definite, but what a reader sees is not it.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterator
from typing import Any

from hetc.schema.diagnostics import Finding, Path

__all__ = ["name_findings"]

BIDI_CONTROLS = frozenset(
    "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
)
"""The characters that reorder how text around them is displayed (Unicode's bidi controls)."""


def name_findings(data: dict[str, Any]) -> Iterator[Finding]:
    """A warning per name with a bidi control or an invisible character, and per zone named
    like another zone's region while in a region of its own."""
    for path, kind, name in _names(data):
        problem = _unseen(name)
        if problem is not None:
            yield Finding(
                path,
                f"{kind} {name!r} holds {problem}: it displays as other text than it is;"
                " use visible characters only",
                severity="warning",
            )
    yield from _crossed_zones(data)


def _names(data: dict[str, Any]) -> Iterator[tuple[Path, str, str]]:
    """(path, what it names, name) of every name in the spec a person reads."""
    if isinstance(data.get("name"), str):
        yield ("name",), "the job name", data["name"]
    for d, device in enumerate(_list(data.get("devices"))):
        if isinstance(device, dict) and isinstance(device.get("name"), str):
            yield ("devices", d, "name"), "device name", device["name"]
    for z, zone in enumerate(_list(data.get("zones"))):
        if not isinstance(zone, dict):
            continue
        for key, kind in (("name", "zone name"), ("region", "region name")):
            if isinstance(zone.get(key), str):
                yield ("zones", z, key), kind, zone[key]
        for p, pool in enumerate(_list(zone.get("pools"))):
            if not isinstance(pool, dict):
                continue
            for key, kind in (("name", "pool name"), ("device", "device name")):
                if isinstance(pool.get(key), str):
                    yield ("zones", z, "pools", p, key), kind, pool[key]
    for s, site in enumerate(_list(data.get("sites"))):
        if isinstance(site, dict) and isinstance(site.get("name"), str):
            yield ("sites", s, "name"), "site name", site["name"]


def _unseen(name: str) -> str | None:
    """What in `name` does not display as itself, in words; None when nothing."""
    for char in name:
        code = f"U+{ord(char):04X} ({unicodedata.name(char, 'unnamed')})"
        if char in BIDI_CONTROLS:
            return f"{code}, a bidirectional control"
        category = unicodedata.category(char)
        if category == "Cf":
            return f"{code}, an invisible character"
        if category == "Zs" and char != " ":
            return f"{code}, a space that is not a plain one"
    return None


def _crossed_zones(data: dict[str, Any]) -> Iterator[Finding]:
    """A zone whose name is another zone's region while its own region is another one."""
    places: list[tuple[int, str, str]] = []
    for index, zone in enumerate(_list(data.get("zones"))):
        name = zone.get("name") if isinstance(zone, dict) else None
        if isinstance(name, str):
            region = zone.get("region", name)
            places.append((index, name, region if isinstance(region, str) else name))
    region_of: dict[str, tuple[int, str]] = {}
    for index, name, region in places:
        region_of.setdefault(region, (index, name))
    for index, name, region in places:
        other = region_of.get(name)
        if other is None or other[0] == index or region == name:
            continue
        yield Finding(
            ("zones", index, "name"),
            f"zone {name!r} is named like the region of zone {other[1]!r}"
            f" (zones[{other[0]}].region), but lies in region {region!r}: a `between:` or"
            f" report that says {name!r} reads two ways; give zones and regions distinct"
            " names",
            severity="warning",
        )


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []
