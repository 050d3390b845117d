"""The lineage inventory: which artifacts exist, which data units each one saw, what is served.

Pure data; the store serialises it to ``inventory.json`` (DESIGN §1, §6).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class ArtifactRecord:
    """One trained, stored thing and the units whose data influenced it."""

    artifact_id: str
    sha256: str
    kind: str
    lineage: list[str]
    valid: bool = True
    meta: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "artifact_id": self.artifact_id,
            "sha256": self.sha256,
            "kind": self.kind,
            "lineage": sorted(self.lineage),
            "valid": self.valid,
            "meta": self.meta,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ArtifactRecord:
        return cls(
            artifact_id=str(data["artifact_id"]),
            sha256=str(data["sha256"]),
            kind=str(data["kind"]),
            lineage=[str(u) for u in data["lineage"]],
            valid=bool(data["valid"]),
            meta=dict(data.get("meta", {})),
        )


@dataclass
class Inventory:
    """Artifacts by id, plus the ids the method chose to serve."""

    artifacts: dict[str, ArtifactRecord] = field(default_factory=dict)
    serving: list[str] = field(default_factory=list)

    def add(self, record: ArtifactRecord) -> None:
        """Add or replace an artifact (a retrain replaces the record under the same id)."""
        self.artifacts[record.artifact_id] = record

    def set_serving(self, artifact_ids: Iterable[str]) -> None:
        ids = list(artifact_ids)
        missing = [a for a in ids if a not in self.artifacts]
        if missing:
            raise KeyError(f"cannot serve unknown artifact(s): {missing}")
        self.serving = ids

    def invalidate_units(self, units: Iterable[str]) -> list[str]:
        """Mark every artifact whose lineage meets ``units`` invalid; return the newly invalid ids."""
        touched = set(units)
        newly = []
        for aid, rec in sorted(self.artifacts.items()):
            if rec.valid and touched.intersection(rec.lineage):
                rec.valid = False
                newly.append(aid)
        return newly

    def to_json(self) -> dict[str, Any]:
        return {
            "artifacts": [self.artifacts[a].to_json() for a in sorted(self.artifacts)],
            "serving": list(self.serving),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Inventory:
        inv = cls()
        for item in data.get("artifacts", []):
            inv.add(ArtifactRecord.from_json(item))
        inv.set_serving(data.get("serving", []))
        return inv
