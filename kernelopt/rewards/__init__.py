"""Rewards from evaluation results, RL data export and the reward service (see DESIGN.md);
depends on sandbox and kernelbench, never on agent."""

from kernelopt.rewards.functions import (Outcome, RewardError, RewardFunction, discounted_returns, make_reward,
                                         max_reward_returns, reward_names)

__all__ = ["Outcome", "RewardError", "RewardFunction", "discounted_returns", "make_reward", "max_reward_returns",
           "reward_names"]
