"""Fidelity checks: is a mutant still a realistic input? (``spec/drfuzz.md``, section 6).

- :mod:`.checks`: the checks by name (``FIDELITIES``: ``ssim``, ``ssim-compat``,
  ``discriminator``, ``none``, ``linf``, and :mod:`.surprise`'s) and the batched SSIM <- add a check here.
- :mod:`.surprise`: M1's surprise adequacy (``dsa``, ``lsa``, ``mdsa``), scored from the
  activations of the forward pass a campaign runs anyway.
- :mod:`.validity`: DeepHunter's validity rule, as a check.
- :mod:`.gan`: the DCGAN whose discriminator is the default check, trained on first use.
"""

from .checks import (
    DEFAULT_FIDELITY,
    FIDELITIES,
    SSIM_THRESHOLD,
    DiscriminatorFidelity,
    Fidelity,
    FidelityCheck,
    LinfFidelity,
    NoFidelity,
    SSIMCompatFidelity,
    SSIMFidelity,
    TraceFidelity,
    check_fidelity_inputs,
    check_fidelity_spec,
    default_fidelity,
    list_fidelities,
    make_fidelity,
    register_fidelity,
    ssim,
)
from .surprise import SurpriseFidelity, make_surprise_fidelity, parse_surprise_spec
from .validity import ValidityCheck

__all__ = [
    "DEFAULT_FIDELITY",
    "FIDELITIES",
    "SSIM_THRESHOLD",
    "DiscriminatorFidelity",
    "Fidelity",
    "FidelityCheck",
    "LinfFidelity",
    "NoFidelity",
    "SSIMCompatFidelity",
    "SSIMFidelity",
    "SurpriseFidelity",
    "TraceFidelity",
    "ValidityCheck",
    "check_fidelity_inputs",
    "check_fidelity_spec",
    "default_fidelity",
    "list_fidelities",
    "make_fidelity",
    "make_surprise_fidelity",
    "parse_surprise_spec",
    "register_fidelity",
    "ssim",
]
