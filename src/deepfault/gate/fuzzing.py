"""Stage 3, a short fuzz: DRFuzz (:func:`deepfault.fuzz.regress.regress`) from the held-out
inputs and the corpus, under the gate's budget, with its fidelity check; the new regression
faults go into the corpus.
"""

from __future__ import annotations

import itertools
from dataclasses import replace
from typing import Any

import numpy as np

from ..core.runtime import Runtime
from ..fuzz.campaign import CampaignConfig
from ..fuzz.campaign.budget import parse_budget
from ..fuzz.pair import Pair
from ..fuzz.regress import regress
from .config import GateConfig
from .outcome import FuzzResult

__all__ = ["fuzz_stage", "campaign_config", "check_fuzz_stage", "MAX_CORPUS_SEEDS"]

#: Corpus entries added to the seeds at most (the campaign picks among them; memory stays bounded).
MAX_CORPUS_SEEDS = 10_000


def _seeds(pair: Pair, inputs, labels, corpus) -> tuple[np.ndarray, np.ndarray]:
    """The labelled held-out inputs (else the data set's test split), then corpus entries."""
    if labels is None:
        x, y = np.asarray(pair.data.x_test, dtype=np.float32), np.asarray(pair.data.y_test)
    else:
        x, y = np.asarray(inputs, dtype=np.float32), np.asarray(labels)
    if corpus is not None:
        parts = list(itertools.islice(corpus.batches(1024), (MAX_CORPUS_SEEDS + 1023) // 1024))
        if parts:
            x = np.concatenate([x, *(np.asarray(b.inputs, dtype=np.float32) for b in parts)])[
                : len(x) + MAX_CORPUS_SEEDS
            ]
            y = np.concatenate([y, *(np.asarray(b.labels) for b in parts)])[: len(y) + MAX_CORPUS_SEEDS]
    return x, y.astype(np.int64)


def campaign_config(config: GateConfig) -> CampaignConfig:
    """The fuzz stage's campaign: the gate's budget, seed and fidelity (else regress's default)."""
    chosen: dict[str, Any] = {} if config.fidelity is None else {"fidelity": config.fidelity}
    return CampaignConfig(budget=parse_budget(config.budget), seed=config.seed, **chosen)


def check_fuzz_stage(pair: Pair, config: GateConfig) -> None:
    """Refuse, before the held-out stage, a fuzz stage that could not run: what a black box
    cannot give, inputs or models the campaign cannot take, a surprise check whose layer the
    model lacks (the same checks ``regress`` makes before its store, on a few inputs).
    """
    from ..coverage.surprise import default_layer
    from ..fuzz.fidelity.surprise import parse_surprise_spec
    from ..fuzz.mutation.rules import rule_kind
    from ..fuzz.pair import check_black_box, check_pair
    from ..fuzz.regress import surprise_specs

    campaign = campaign_config(config).for_inputs(rule_kind(pair.data.input_shape))  # as regress resolves it
    check_black_box(pair.p1, pair.p2, campaign)
    check_pair(pair.p1.module, pair.p2.module, pair.data, campaign)
    if any(parse_surprise_spec(spec).file is None for spec in surprise_specs(campaign)):
        default_layer(pair.p1.module, pair.data.x_test[:1])  # fitted on M1 at its default layer


def fuzz_stage(pair: Pair, inputs, labels, corpus, config: GateConfig, runtime: Runtime) -> FuzzResult:
    """Fuzz M2 against M1 for ``config.budget`` and add the new faults to ``corpus``.

    Returns:
        The :class:`~.outcome.FuzzResult` (``complete=False`` when interrupted: the campaign
        stops at the interruption and says so, as ``regress`` does).
    """
    x, y = _seeds(pair, inputs, labels, corpus)
    data = replace(pair.data, x_test=x, y_test=y)
    campaign = campaign_config(config)
    outcome = regress(
        (pair.p1, pair.p2),
        data,
        campaign,
        runtime=Runtime(device=runtime.device, threads=runtime.threads, progress=runtime.progress),
    )
    result = outcome.result
    found = outcome.findings()  # every fault with the label regress expects (M1's, the seed's)
    added = 0
    if corpus is not None and config.add_to_corpus and len(found):
        from ..corpus import Provenance  # noqa: PLC0415

        provenance = Provenance(
            "gate-fuzz", f"gate-seed{config.seed}", tuple(pair.names), note=f"DRFuzz, budget {config.budget}",
            fingerprints=(pair.p1.fingerprint, pair.p2.fingerprint))
        added = int(corpus.add(found.inputs, found.labels, provenance))
    return FuzzResult(
        budget=config.budget,
        faults=int(result.metrics.rf),
        unique=int(result.metrics.urf),
        added=added,
        complete=not outcome.interrupted,
    )
