"""The campaign engine: DRFuzz's loop and what it keeps (``spec/drfuzz.md``, sections 2-4, 7, 10).

Placeholder re-exports; see the modules.
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
