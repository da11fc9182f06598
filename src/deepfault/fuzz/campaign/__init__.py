"""The campaign engine: DRFuzz's loop and what it keeps (``spec/drfuzz.md``, sections 2-4, 7, 10).

- :mod:`.loop`: :class:`Campaign` (setup, ``run``, ``state_dict``, result) and :func:`run_campaign`.
- :mod:`.config` (:class:`CampaignConfig`), :mod:`.result` (:class:`CampaignResult`),
  :mod:`.budget` (:class:`Budget`).
- :mod:`.seeds` (evaluating the test inputs, the roots), :mod:`.step` (one step of ``B``
  iterations), :mod:`.generate` (making and checking mutants), :mod:`.execution` (both
  models), :mod:`.oracle` (buckets), :mod:`.keep` (keep rules), :mod:`.faults` and
  :mod:`.metrics`, :mod:`.corpus` (the queue), :mod:`.clock`.
- :mod:`.strategies`: ``STRATEGIES`` (``drfuzz``, ``deephunter``) <- add a strategy here.
- :mod:`.checkpoint`: checkpoints in the results store, through ``Campaign.state_dict``.
"""

from .budget import Budget, parse_budget
from .config import CHECKPOINT_EVERY, DEFAULT_BATCH, CampaignConfig, CampaignProgress
from .loop import Campaign, run_campaign
from .result import CampaignResult

__all__ = [
    "CHECKPOINT_EVERY",
    "DEFAULT_BATCH",
    "Budget",
    "Campaign",
    "CampaignConfig",
    "CampaignProgress",
    "CampaignResult",
    "parse_budget",
    "run_campaign",
]
