"""The mutation library: how DRFuzz changes an input and chooses how to change it.

- :mod:`.rules`: the 15 batched mutation rules for images (``RULES``: affine and pixel-value
  ones) and the registry <- add a rule here.
- :mod:`.vectors`: the rules for vectors ``(N, F)`` and 1-D sequences ``(N, C, L)`` (noise,
  per-feature perturbation, masking, scaling; time shift and crop), in the same registry.
- :mod:`.mcmc`: the rule choosers (``CHOOSERS``: DRFuzz's MCMC, uniform).
- :mod:`.diversity`: the failure-tendency table that judges whether a mutant is new, and
  the unique failures per seed.

Nothing here knows the campaign: each piece is a plain function or a small object on arrays.
"""

from .diversity import ROOT_FAILURE_LIMIT, DiversityTable, FailureSet, tendency_of
from .mcmc import CHOOSERS, RuleChooser, gain_delta, make_chooser
from .rules import (
    AFFINE,
    PIXEL,
    MutationRule,
    apply_rule,
    get_rule,
    list_rules,
    register_rule,
    rule_kind,
)
from .vectors import SEQUENCE_RULES, VECTOR_RULES

__all__ = [
    "AFFINE",
    "CHOOSERS",
    "PIXEL",
    "ROOT_FAILURE_LIMIT",
    "DiversityTable",
    "FailureSet",
    "MutationRule",
    "RuleChooser",
    "SEQUENCE_RULES",
    "VECTOR_RULES",
    "apply_rule",
    "gain_delta",
    "get_rule",
    "list_rules",
    "make_chooser",
    "register_rule",
    "rule_kind",
    "tendency_of",
]
