"""The critic: a contract for K value estimates of a state, and the generative critic.

``parse_value`` reads ``<value>x</value>`` strictly (last match, finite, clipped to ``[0, R_max]``);
``GenerativeCritic`` prompts the policy model with the task, the condensed history and privileged
information; ``endpoint_value`` averages E endpoint estimates (NaN when none parsed) and ``bootstrap_value``
values terminated branches at 0. Two critics value the restored state itself (``CriticQuery.snapshot``):
``OracleCritic`` reads the env's exact optimal value (optionally noisy) and ``MonteCarloCritic`` averages the
returns of M rollouts of the current policy (VinePPO's estimator). ``warn_missing_privileged_info`` warns at the
start of training when games give the critic nothing privileged
(:class:`~tempo_rl.critic.privileged.PrivilegedInfoTally` logs ``critic/privileged_info_rate`` per update).
"""

from tempo_rl.critic.base import (
    Critic,
    CriticEstimates,
    CriticQuery,
    CriticSample,
    bootstrap_value,
    endpoint_value,
)
from tempo_rl.critic.generative import ANSWER_MODES, AnswerMode, GenerativeCritic, status_counts
from tempo_rl.critic.levels import expected_value, format_level, level_values, restricted_probs
from tempo_rl.critic.monte_carlo import MonteCarloCritic
from tempo_rl.critic.oracle import OracleCritic, OracleUnavailableError
from tempo_rl.critic.parse import ValueParse, ValueStatus, classify_value, parse_value, validate_r_max
from tempo_rl.critic.privileged import PrivilegedInfoWarning, warn_missing_privileged_info
from tempo_rl.critic.prompt import DEFAULT_CRITIC_SYSTEM_PROMPT, build_critic_messages

__all__ = [
    "ANSWER_MODES",
    "DEFAULT_CRITIC_SYSTEM_PROMPT",
    "AnswerMode",
    "Critic",
    "CriticEstimates",
    "CriticQuery",
    "CriticSample",
    "GenerativeCritic",
    "MonteCarloCritic",
    "OracleCritic",
    "OracleUnavailableError",
    "PrivilegedInfoWarning",
    "ValueParse",
    "ValueStatus",
    "bootstrap_value",
    "build_critic_messages",
    "classify_value",
    "endpoint_value",
    "expected_value",
    "format_level",
    "level_values",
    "parse_value",
    "restricted_probs",
    "status_counts",
    "validate_r_max",
    "warn_missing_privileged_info",
]
