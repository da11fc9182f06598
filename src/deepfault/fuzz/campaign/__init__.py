"""The campaign engine: DRFuzz's loop and what it keeps (``spec/drfuzz.md``, sections 2-4, 7, 10).

- :mod:`.loop`: :class:`Campaign` (setup, ``run``, ``state_dict``, result) and :func:`run_campaign`;
  the only module that knows the :class:`Campaign` class.
- :mod:`.parts`: the campaign's state as parts (counters, generators, rule statistics, clock,
  queue, faults, keep rule; checks, models, roots), each with ``state_dict``.
- :mod:`.config` (:class:`CampaignConfig`), :mod:`.result` (:class:`CampaignResult`),
  :mod:`.budget` (:class:`Budget`).
- :mod:`.seeds` (evaluating the test inputs, the roots), :mod:`.step` (one step of ``B``
  iterations), :mod:`.generate` (making and checking mutants), :mod:`.lazy` (the lazy order of
  checks); each takes the parts it touches. :mod:`.execution` (both
  models), :mod:`.oracle` (buckets), :mod:`.keep` (keep rules), :mod:`.faults` and
  :mod:`.metrics`, :mod:`.corpus` (the queue), :mod:`.clock`.
- :mod:`.strategies`: ``STRATEGIES`` (``drfuzz``, ``deephunter``) <- add a strategy here; a
  strategy sees the campaign through ``StrategyContext`` and its parts.
- :mod:`.checkpoint`: checkpoints in the results store: the parts' states, by part.
"""

from .budget import Budget, parse_budget
from .config import CHECKPOINT_EVERY, DEFAULT_BATCH, CampaignConfig, CampaignProgress
from .loop import Campaign, CampaignOptions, run_campaign
from .result import CampaignResult

__all__ = [
    "CHECKPOINT_EVERY",
    "DEFAULT_BATCH",
    "Budget",
    "Campaign",
    "CampaignConfig",
    "CampaignOptions",
    "CampaignProgress",
    "CampaignResult",
    "parse_budget",
    "run_campaign",
]
