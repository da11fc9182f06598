"""The mutation library: how DRFuzz changes an input and chooses how to change it.

- :mod:`.rules`: the 15 batched mutation rules (``RULES``: affine and pixel-value ones)
  <- add a rule here.
- :mod:`.mcmc`: the rule choosers (``CHOOSERS``: DRFuzz's MCMC, uniform).
- :mod:`.diversity`: the failure-tendency table that judges whether a mutant is new, and
  the unique failures per seed.

Nothing here knows the campaign: each piece is a plain function or a small object on arrays.
"""

from .diversity import ROOT_FAILURE_LIMIT, DiversityTable, FailureSet, tendency_of
from .mcmc import CHOOSERS, RuleChooser, gain_delta, make_chooser
from .rules import AFFINE, PIXEL, MutationRule, apply_rule, get_rule, list_rules, register_rule

__all__ = [
    "AFFINE",
    "CHOOSERS",
    "PIXEL",
    "ROOT_FAILURE_LIMIT",
    "DiversityTable",
    "FailureSet",
    "MutationRule",
    "RuleChooser",
    "apply_rule",
    "gain_delta",
    "get_rule",
    "list_rules",
    "make_chooser",
    "register_rule",
    "tendency_of",
]
