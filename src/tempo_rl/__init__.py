"""tempo-rl: long-horizon RL for LLM agents with TEMPO.

TEMPO (Test-Time-Scaled Value Estimation with Macro-Step Policy Optimization) optimises segments of H
rounds ("macro-steps") that resume from saved, verifiably restored environment states, and bootstraps the
truncated future with a generative critic: the same model, prompted with privileged information, that
reasons about a state and ends with ``<value>x</value>``.

Importing this package imports no optional dependency (no torch, no TextWorld, no PyTRIO): the submodules
that need one import it lazily and name the extra to install when it is missing.
"""

from tempo_rl._version import __version__

__all__ = ["__version__"]
