"""The problem format: loading and validating KernelBench-style reference programs."""

from kernelopt.kernelbench.problem import Problem, ProblemError, load_problem, problem_from_source

__all__ = ["Problem", "ProblemError", "load_problem", "problem_from_source"]
