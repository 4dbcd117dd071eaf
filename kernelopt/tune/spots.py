"""The hot spots `kernelopt model extract` wrote (its manifest.json), as `kernelopt tune
--model-spots DIR` lists them on the page: each an ordinary problem file the workbench can open.

Read as data: kernelopt/tune does not import kernelopt/model (tests/test_layout.py), so the
manifest's fields read here (`problems[].module`, `share`, `file`, `constructor`; `not_extracted`)
are the interface between the two.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path


class SpotsError(ValueError):
    """A folder that holds no readable manifest; the message says what to give instead."""


@dataclass
class Spot:
    module: str
    share: float | None
    path: Path
    constructor: str = ""

    def to_json(self) -> dict:
        return {"module": self.module, "share": self.share, "file": self.path.name, "path": str(self.path),
                "constructor": self.constructor}


@dataclass
class ModelSpots:
    manifest: Path
    model: str
    spots: list[Spot]
    not_extracted: list[dict] = field(default_factory=list)

    def find(self, module: str) -> Spot | None:
        return next((s for s in self.spots if s.module == module), None)

    def of_problem(self, problem: str | Path | None) -> str | None:
        """The module whose problem file is `problem`, if one is."""
        if not problem:
            return None
        target = Path(problem).resolve()
        return next((s.module for s in self.spots if s.path.resolve() == target), None)

    def to_json(self) -> dict:
        return {"manifest": str(self.manifest), "model": self.model, "spots": [s.to_json() for s in self.spots],
                "not_extracted": self.not_extracted}


def read_spots(folder: str | Path) -> ModelSpots:
    """The spots of `folder`: a `kernelopt model extract --out` folder (manifest.json), or a
    `kernelopt model optimize --out` folder (problems/manifest.json)."""
    folder = Path(folder).expanduser()
    candidates = [folder / "manifest.json", folder / "problems" / "manifest.json"]
    path = next((p for p in candidates if p.is_file()), None)
    if path is None:
        raise SpotsError(f"--model-spots {folder}: no manifest.json in it (give the --out folder of "
                         "`kernelopt model extract` or of `kernelopt model optimize`)")
    fix = f"write it again with `kernelopt model extract MODEL.py --out {path.parent}`"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise SpotsError(f"{path} is damaged ({exc}): {fix}") from None
    if not isinstance(data, dict) or not isinstance(data.get("problems"), list):
        raise SpotsError(f"{path} is not a `kernelopt model extract` manifest (no problems list): {fix}")
    spots = []
    for index, row in enumerate(data["problems"]):
        if not isinstance(row, dict) or not isinstance(row.get("module"), str) or not isinstance(row.get("file"), str):
            raise SpotsError(f"{path} is damaged (problems[{index}] lacks module or file): {fix}")
        file = path.parent / row["file"]
        if file.parent.resolve() != path.parent.resolve() or not file.is_file():
            raise SpotsError(f"{path}: problems[{index}]'s file {row['file']!r} is not a file beside it: {fix}")
        share = row.get("share")
        spots.append(Spot(row["module"], share if isinstance(share, (int, float)) else None, file,
                          str(row.get("constructor") or "")))
    if not spots:
        raise SpotsError(f"{path} lists no extracted hot spot (see its not_extracted for why)")
    not_extracted = [{"module": str(r.get("module", "?")), "reason": str(r.get("reason", ""))}
                     for r in data.get("not_extracted") or [] if isinstance(r, dict)]
    return ModelSpots(path, str(data.get("model", "")), spots, not_extracted)
