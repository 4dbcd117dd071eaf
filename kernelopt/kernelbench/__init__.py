"""The problem format and the benchmark: loading KernelBench-style problems and problem sets,
and KernelBench's metrics."""

from kernelopt.kernelbench.problem import Problem, ProblemError, load_problem, problem_from_source
from kernelopt.kernelbench.problem_set import ProblemSet, ProblemSetError, load_problem_set, parse_id_ranges

__all__ = ["Problem", "ProblemError", "ProblemSet", "ProblemSetError", "load_problem", "load_problem_set",
           "parse_id_ranges", "problem_from_source"]
