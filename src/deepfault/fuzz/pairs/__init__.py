"""The model pairs DRFuzz fuzzes: ``M1`` and its new version ``M2`` (``spec/drfuzz.md``, section 9).

- :mod:`.scenarios`: the regression scenarios (``SCENARIOS``: supply, adv-bim, adv-cw,
  fixing, prune, quant-fp16, quant-int8) that make a pair from a data set <- add one here.
  Their transformations (pruning, quantisation) and the deployment formats are the models'
  (:mod:`deepfault.models.deploy`).
"""

from .scenarios import (
    SCENARIOS,
    Scenario,
    ScenarioContext,
    ScenarioResult,
    list_scenarios,
    make_scenario,
    register_scenario,
)

__all__ = ["SCENARIOS", "Scenario", "ScenarioContext", "ScenarioResult", "list_scenarios", "make_scenario",
           "register_scenario"]
