"""Sizes written by people: '8G', '512M', '1.5GiB', '1000000' (binary units)."""

from __future__ import annotations

import re

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b?)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_size(text: str) -> int:
    """Bytes, or ValueError saying what a size looks like."""
    match = _SIZE.match(text)
    if not match:
        raise ValueError(f"invalid size {text!r}: use e.g. 8G, 512M or a byte count")
    return int(float(match[1]) * _UNITS[match[2].lower()])
