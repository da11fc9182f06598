"""Provenance: where a corpus entry came from (which run, which models, which method, when)."""

from __future__ import annotations

import datetime as _dt
import json
from dataclasses import asdict, dataclass, replace

from ..errors import DeepFaultError

__all__ = ["Provenance"]


@dataclass(frozen=True)
class Provenance:
    """Where the entries of one :meth:`~deepfault.corpus.RegressionCorpus.add` came from.

    Every entry of one add shares one provenance; it is stored in the entries' shard and in
    the manifest's line for that shard.

    Args:
        method: what found the inputs (``"regress"``, ``"xplore"``, ``"run"``, ``"gate"``, ...).
        run: the run's identifier (a campaign id, a result file's name, a CI job).
        models: the model files (or names) the method ran on, M1 first where there are two.
        note: free text (a scenario, a seed).
        time: when the entries were added, ISO 8601 in UTC; empty until the add stamps it.
        fingerprints: the models' weight fingerprints
            (:func:`~deepfault.models.fingerprint.fingerprint`), in the order of ``models``;
            ``gate`` reads them to tell a challenger's own earlier findings from earlier
            versions' failures.

    Examples:
        >>> Provenance("regress", "drfuzz-seed0", ("m1.pt", "m2.onnx")).method
        'regress'
    """

    method: str
    run: str
    models: tuple[str, ...] = ()
    note: str = ""
    time: str = ""
    fingerprints: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.method, str) or not self.method.strip():
            raise DeepFaultError(f"provenance method must be a non-empty name; got {self.method!r}")
        if not isinstance(self.run, str):
            raise DeepFaultError(f"provenance run must be text; got {self.run!r}")
        models = (self.models,) if isinstance(self.models, str) else tuple(self.models)
        if not all(isinstance(m, str) for m in models):
            raise DeepFaultError(f"provenance models must be names (text); got {self.models!r}")
        object.__setattr__(self, "models", models)
        prints = tuple(self.fingerprints)
        if not all(isinstance(f, str) for f in prints):
            raise DeepFaultError(f"provenance fingerprints must be text; got {self.fingerprints!r}")
        object.__setattr__(self, "fingerprints", prints)

    def stamped(self, now: _dt.datetime | None = None) -> Provenance:
        """This provenance with ``time`` set (to ``now``, UTC, when it was empty)."""
        if self.time:
            return self
        now = now or _dt.datetime.now(_dt.UTC)
        return replace(self, time=now.isoformat(timespec="microseconds"))

    def to_dict(self) -> dict:
        """A JSON-ready dict (``models`` as a list)."""
        out = asdict(self)
        out["models"] = list(self.models)
        out["fingerprints"] = list(self.fingerprints)
        return out

    def to_json(self) -> str:
        """The dict as compact JSON text, keys sorted (the shard's stored form)."""
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_dict(cls, data: dict) -> Provenance:
        """The inverse of :meth:`to_dict`; unknown keys are ignored (a newer writer's)."""
        return cls(method=data["method"], run=data.get("run", ""), models=tuple(data.get("models", ())),
                   note=data.get("note", ""), time=data.get("time", ""),
                   fingerprints=tuple(data.get("fingerprints", ())))
