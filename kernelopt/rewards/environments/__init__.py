"""Multi-turn RL environments: the referee's verdict fed back turn by turn (docs/rewards.md
"Environments for multi-turn RL"). `episode.KernelEpisode` holds the logic; the trainer shells
are imported from their own modules, each needing its trainer's package:
`verifiers_env` (verifiers' MultiTurnEnv, prime-rl), `trl_env` (TRL's `environment_factory`),
`openrlhf_agent` (OpenRLHF's `--agent_func_path`)."""

from kernelopt.rewards.environments.episode import (
    EpisodeError,
    KernelEpisode,
    Turn,
    first_prompt,
    problem_label,
)
from kernelopt.rewards.environments.feedback import turn_feedback, verdict_text

__all__ = ["EpisodeError", "KernelEpisode", "Turn", "first_prompt", "problem_label", "turn_feedback",
           "verdict_text"]
