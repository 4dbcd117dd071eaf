"""Reward functions: a referee verdict in, one number out. Pure, no I/O.

A reward is chosen by a spec string, `name` or `name:param=value,param=value` (for example
`cuda_l1:k=3` or `speedup:cap=10,incorrect=-0.5`), so that a run, an export and the reward
service can all name the same function in their settings. The formulas, with s the referee's
speedup (reference time / candidate time) of a correct candidate:

- `binary`:      1 when correct.
- `speedup`:     min(s, cap) + bonus.
- `log_speedup`: clip(ln s, -clip, +clip). Failures default to -clip, so that no correct
                 candidate, however slow, is worth less than a broken one.
- `sol`:         the speed-of-light score in [0, 1] (SOL-ExecBench): 1 / (1 + (T_k - T_SOL) /
                 (T_b - T_SOL)), 0.5 at the reference, 1 at the roofline bound that the
                 profile pass computes, else at the verdict's physical floor (s / (1 + s)
                 without either).
- `milestone`:   the highest step reached: `correct` (0.25), faster than eager by `margin`
                 (`eager`, 0.5), faster than torch.compile by `margin` (`beyond_compile`, 1),
                 the last from the cached compile baseline (`Outcome.compile_speedup`).
- `cuda_l1`:     s rounded toward 1 in steps of `step` (1.04 -> 1.0 and 0.97 -> 1.0 with the
                 default 0.05: a gain inside the timing noise earns nothing), then, over a group
                 of outcomes for one prompt (`RewardFunction.group`), normalized to zero mean and
                 unit deviation and clipped to +-k, in the style of CUDA-L1.

Every reward also takes the shaping parameters, the reward of each way of failing: `format`
(no program in the answer), `compile`, `runtime` (a crash or a timeout), `incorrect` and
`rejected` (the referee caught a forbidden behaviour; by default no better than the worst other
failure; `rejected=-2` gives KernelGuard's penalty for a blocked hack). And a penalty per flag
the referee can raise (named as the flag, e.g. `reduced_precision=0.5`), subtracted from a
correct outcome's reward for each flag it carries: by default 0.5 for `reduced_precision` (a
half-precision answer within a loosened tolerance is not paid as much as a full-precision one)
and 0 for the others. Multi-turn returns are computed from per-turn rewards by `discounted_returns` (Kevin's
discounted sum) and `max_reward_returns` (the best reward still reachable, as in MaxCode).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from kernelopt.sandbox.results import FLAGS

FAILURE_STATUSES = {
    "format_error": "format",
    "compile_error": "compile",
    "runtime_error": "runtime",
    "timeout": "runtime",
    "incorrect": "incorrect",
    "rejected": "rejected",
    # No verdict: the response could not be told from the prompt with certainty, its problem is
    # unknown, or the service could not judge it in time. Paid as a format error (the answer
    # gave nothing that can be judged), never from the prompt's text.
    "unscorable": "format",
}
SHAPING = ("format", "compile", "runtime", "incorrect", "rejected")
# Subtracted from a correct outcome's reward for each flag it carries (a parameter named as the
# flag).
FLAG_PENALTIES = {flag: 0.0 for flag in sorted(FLAGS)} | {"reduced_precision": 0.5}
# Precision: with `max_interval` set, a correct verdict whose speedup interval (relative
# half-width p of its 95 % interval) is wider than it is discounted to s / (1 + p), or paid
# `noisy` when that is given. Written in the spec only when set.
NOISE = ("max_interval", "noisy")


class RewardError(ValueError):
    """A reward spec that names no reward, or a parameter the reward does not have."""


@dataclass(frozen=True)
class Outcome:
    """What a reward sees of a verdict: the status and, when correct, the speedup."""

    status: str
    speedup: float | None = None
    flags: tuple[str, ...] = ()
    precision: float | None = None  # half the speedup's 95 % interval, relative to it (None: not known)
    sol_fraction: float | None = None  # the roofline's bound on a call's time over the reference's time
    compile_speedup: float | None = None  # torch.compile's speedup over the reference (a cached baseline)

    @property
    def correct(self) -> bool:
        return self.status == "correct"

    @classmethod
    def from_result(cls, result) -> Outcome:
        """From an EvalResult, its JSON dict, or any mapping with "status" (and "speedup", "flags")."""
        data = result if isinstance(result, Mapping) else result.model_dump()
        status = data.get("status")
        if status != "correct" and status not in FAILURE_STATUSES:
            raise RewardError(f"unknown verdict status {status!r}: expected correct or one of "
                              f"{', '.join(sorted(FAILURE_STATUSES))}")
        speedup = data.get("speedup")
        precision = data.get("speedup_precision", (data.get("timing") or {}).get("speedup_precision"))
        return cls(status, float(speedup) if speedup is not None else None, tuple(data.get("flags") or ()),
                   float(precision) if precision is not None else None, _sol_fraction(data),
                   float(data["compile_speedup"]) if data.get("compile_speedup") else None)

    def interval(self) -> tuple[float, float] | None:
        """The speedup's 95 % interval [s (1 - p), s (1 + p)], None when either is not known."""
        if self.speedup is None or self.precision is None or not math.isfinite(self.precision):
            return None
        return max(0.0, self.speedup * (1 - self.precision)), self.speedup * (1 + self.precision)

    @classmethod
    def format_error(cls) -> Outcome:
        return cls("format_error")


def _sol_fraction(data: Mapping) -> float | None:
    """T_SOL / T_b: the profile pass's roofline bound (docs/referee.md) over the reference's time;
    without one, the verdict's physical floor (`timing.floor_ms`)."""
    bound = (((data.get("profile") or {}).get("roofline")) or {}).get("bound_ms") \
        or (data.get("timing") or {}).get("floor_ms")
    reference = data.get("reference_ms")
    return float(bound) / float(reference) if bound and reference else None


@dataclass(frozen=True)
class RewardFunction:
    name: str
    params: dict = field(hash=False)
    _score: Callable[[float, dict, Outcome], float] = field(repr=False, compare=False)
    _group: Callable[[list[float], dict], list[float]] | None = field(default=None, repr=False, compare=False)

    @property
    def spec(self) -> str:
        """The canonical spec: every parameter, defaults included, so the spec alone reproduces it."""
        return self.name + ":" + ",".join(f"{k}={_number(v)}" for k, v in sorted(self.params.items()))

    def __call__(self, outcome: Outcome) -> float:
        """The reward of one outcome on its own."""
        if outcome.correct:
            if outcome.speedup is None or not outcome.speedup > 0:
                raise RewardError("a correct outcome needs a positive speedup")
            if "noisy" in self.params and self.too_noisy(outcome):
                reward = float(self.params["noisy"])  # withheld: a fixed amount instead
            else:
                reward = float(self._score(self._trusted_speedup(outcome.speedup, outcome), self.params, outcome))
            return reward - self.flag_penalty(outcome)
        return float(self.params[FAILURE_STATUSES[outcome.status]])

    def flag_penalty(self, outcome: Outcome) -> float:
        """The sum of the penalties of the flags a correct outcome carries (each flag once)."""
        return sum(self.params.get(flag, 0.0) for flag in set(outcome.flags) if flag in FLAG_PENALTIES)

    def too_noisy(self, outcome: Outcome) -> bool:
        """Whether `max_interval` applies to this correct outcome: its interval is wider than the
        threshold, or not known."""
        limit = self.params.get("max_interval")
        if limit is None or not outcome.correct:
            return False
        p = outcome.precision
        return p is None or not math.isfinite(p) or p > limit

    def _trusted_speedup(self, speedup: float, outcome: Outcome) -> float:
        """`speedup` (the correct outcome's), discounted by its interval under `max_interval`."""
        if not self.too_noisy(outcome):
            return speedup
        p = outcome.precision
        if p is None or not math.isfinite(p):
            return 1.0  # no interval: no measured gain is credited
        return speedup / (1.0 + p)

    def group(self, outcomes: Sequence[Outcome]) -> list[float]:
        """The rewards of a group of outcomes for one prompt (for cuda_l1: normalized within the
        group; for the others the same as one at a time)."""
        rewards = [self(o) for o in outcomes]
        return self._group(rewards, self.params) if self._group else rewards


def _binary(speedup: float, params: dict, outcome: Outcome | None = None) -> float:
    return 1.0


def _speedup(speedup: float, params: dict, outcome: Outcome | None = None) -> float:
    return min(speedup, params["cap"]) + params["bonus"]


def _log_speedup(speedup: float, params: dict, outcome: Outcome | None = None) -> float:
    clip = params["clip"]
    return max(-clip, min(clip, math.log(speedup)))


def _toward_one(speedup: float, params: dict, outcome: Outcome | None = None) -> float:
    step = params["step"]
    if step <= 0:
        return speedup
    steps = math.trunc((speedup - 1.0) / step + 1e-9 * math.copysign(1, speedup - 1.0))
    return round(1.0 + steps * step, 12)


def _speed_of_light(speedup: float, params: dict, outcome: Outcome | None = None) -> float:
    """SOL-ExecBench's score 1 / (1 + (T_k - T_SOL) / (T_b - T_SOL)), with the reference's time
    T_b as 1: T_k = 1 / s and T_SOL = the roofline's bound over T_b. 0.5 at the baseline, 1 at
    the bound, toward 0 as the kernel slows; clamped to [0, 1]. Without a bound below T_b (no
    profile pass), T_SOL = 0: s / (1 + s)."""
    bound = outcome.sol_fraction if outcome is not None else None
    if bound is None or not 0 <= bound < 1:
        bound = 0.0
    score = 1.0 / (1.0 + (1.0 / speedup - bound) / (1.0 - bound))
    return min(1.0, max(0.0, score))


def _milestone(speedup: float, params: dict, outcome: Outcome | None = None) -> float:
    """The highest milestone reached: correct, faster than eager by the margin, faster than
    torch.compile by the margin (reachable only where the compile baseline is known)."""
    factor = 1.0 + params["margin"]
    compiled = outcome.compile_speedup if outcome is not None else None
    if compiled is not None and speedup >= compiled * factor:
        return params["beyond_compile"]
    return params["eager"] if speedup >= factor else params["correct"]


def _normalize_clip(rewards: list[float], params: dict) -> list[float]:
    """Zero mean, unit (population) deviation within the group, clipped to +-k. A group whose
    rewards are all equal carries no signal: every member gets 0."""
    if len(rewards) < 2:
        return [0.0 for _ in rewards]
    mean, deviation = statistics.fmean(rewards), statistics.pstdev(rewards)
    if deviation == 0:
        return [0.0 for _ in rewards]
    k = params["k"]
    return [max(-k, min(k, (r - mean) / deviation)) for r in rewards]


_FAILURES_ZERO = dict.fromkeys(SHAPING, 0.0)

# name -> (score of a correct outcome, its own parameters and defaults, failure defaults, group step)
_REWARDS: dict[str, tuple] = {
    "binary": (_binary, {}, _FAILURES_ZERO, None),
    "speedup": (_speedup, {"cap": math.inf, "bonus": 0.0}, _FAILURES_ZERO, None),
    "log_speedup": (_log_speedup, {"clip": 3.0}, None, None),   # failures default to -clip
    "cuda_l1": (_toward_one, {"step": 0.05, "k": 3.0}, _FAILURES_ZERO, _normalize_clip),
    "sol": (_speed_of_light, {}, _FAILURES_ZERO, None),
    "milestone": (_milestone, {"correct": 0.25, "eager": 0.5, "beyond_compile": 1.0, "margin": 0.1},
                  _FAILURES_ZERO, None),
}


def reward_names() -> list[str]:
    return list(_REWARDS)


def make_reward(spec: str = "speedup") -> RewardFunction:
    """The reward a spec names, e.g. "speedup", "cuda_l1:k=3", "log_speedup:clip=2,format=-5"."""
    name, _, text = spec.strip().partition(":")
    if name not in _REWARDS:
        raise RewardError(f"unknown reward {name!r}: choose one of {', '.join(_REWARDS)} (see docs/rewards.md)")
    score, own, failures, group = _REWARDS[name]
    given = _parse_params(name, text, allowed=[*own, *SHAPING, *NOISE, *FLAG_PENALTIES])
    if "noisy" in given and "max_interval" not in given:
        raise RewardError(f"reward {name}: noisy= needs max_interval= (the interval width beyond which it is paid)")
    if given.get("max_interval", 0.0) < 0:
        raise RewardError(f"reward {name}: max_interval must be at least 0 (a relative half-width, e.g. 0.1)")
    params = {**own, **{k: v for k, v in given.items() if k in own or k in NOISE}}
    if failures is None:  # log_speedup: the floor follows the clip actually chosen
        failures = dict.fromkeys(SHAPING, -params["clip"])
    params.update(failures)
    params.update({k: v for k, v in given.items() if k in SHAPING})
    if "rejected" not in given:  # a caught hack is never worth more than an honest failure
        params["rejected"] = min(params[k] for k in SHAPING)
    penalties = {flag: given.get(flag, default) for flag, default in FLAG_PENALTIES.items()}
    # In the spec: every penalty that is not 0, and every one whose default is not (so that a
    # spec's `reduced_precision=0` reads back as 0, not as the default).
    params.update({flag: penalty for flag, penalty in penalties.items() if penalty != 0 or FLAG_PENALTIES[flag] != 0})
    return RewardFunction(name, params, score, group)


def _parse_params(name: str, text: str, allowed: list[str]) -> dict:
    params = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, equals, value = item.partition("=")
        key = key.strip()
        if not equals or key not in allowed:
            raise RewardError(f"reward {name}: bad parameter {item!r}; its parameters are {', '.join(allowed)} "
                              f"(written name:param=value,param=value)")
        try:
            params[key] = float(value)
        except ValueError:
            raise RewardError(f"reward {name}: parameter {key} must be a number, not {value.strip()[:40]!r}") from None
        _check_range(name, key, params[key])
    return params


# Every parameter's range (inclusive unless noted): finite, so that no reward is NaN or infinite;
# only `cap` may be inf (its default: no cap).
PARAMETER_LIMIT = 1e6  # the largest magnitude of a reward parameter
_POSITIVE = ("cap", "clip", "k")  # above 0


def _check_range(name: str, key: str, value: float) -> None:
    if key == "cap" and value == math.inf:
        return
    if not math.isfinite(value) or abs(value) > PARAMETER_LIMIT:
        raise RewardError(f"reward {name}: parameter {key} must be a finite number between {-PARAMETER_LIMIT:g} "
                          f"and {PARAMETER_LIMIT:g}{' (or inf)' if key == 'cap' else ''}, not {value}")
    if key in _POSITIVE and not value > 0:
        raise RewardError(f"reward {name}: parameter {key} must be above 0, not {value:g}")
    if key == "step" and value < 0:
        raise RewardError(f"reward {name}: parameter step must be 0 or more, not {value:g}")


def discounted_returns(rewards: Sequence[float], gamma: float) -> list[float]:
    """G_t = r_t + gamma * G_{t+1}: each turn is credited with the (discounted) rewards of the
    refinements it led to, as in Kevin's multi-turn training."""
    returns, following = [], 0.0
    for reward in reversed(rewards):
        following = reward + gamma * following
        returns.append(following)
    return returns[::-1]


def max_reward_returns(rewards: Sequence[float], gamma: float = 1.0) -> list[float]:
    """G_t = max(r_t, gamma * G_{t+1}): a turn is worth the best reward reachable from it, since a
    search keeps its best candidate (the max-reward objective of MaxCode)."""
    returns: list[float] = []
    for reward in reversed(rewards):
        returns.append(max(float(reward), gamma * returns[-1]) if returns else float(reward))
    return returns[::-1]


def _number(value: float) -> str:
    return "inf" if value == math.inf else f"{value:g}"
