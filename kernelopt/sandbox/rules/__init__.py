"""The referee's rules in one table: every reason a candidate is rejected, flagged or judged
incorrect (or ends in a timeout, a crash or a compile error).

A rule is a function of records (a call's record, a side's round, a worker's reply, a
comparison) that returns a `Verdict` or None. Each is registered in RULES with its status, its
flag, the hack family it answers and a candidate of tests/adversarial/ that triggers it (or,
where no candidate can reach it, the reason, listed in NO_CORPUS_EXAMPLE). The worker's failure
kinds (`FAILURE_RULES`) and the guard's findings (`GUARD_RULES`) map through the same table. This
module is the only one that makes a verdict: the session calls the rules and `enforce`s what
they return (`VerdictReached` ends the evaluation; a flag-only verdict is noted in `Findings`).

The package: `registry` (verdicts, the table, `enforce`), and the rules by what they judge:
`replies` (a worker's failure kinds, the guard's findings, protocol frames), `host` (the host's
view of the workers: deadlines, memory, processes, threads, CPU time), `calls` (calls' records,
correctness, timed calls, labels). Every name is importable from the package itself.
`python -m kernelopt.sandbox.rules` prints the table that docs/referee.md carries.
"""

# The registry first; then the rules, in the order of docs/referee.md's table.
from kernelopt.sandbox.rules.registry import *  # noqa: F403
from kernelopt.sandbox.rules.replies import *  # noqa: F403
from kernelopt.sandbox.rules.host import *  # noqa: F403
from kernelopt.sandbox.rules.calls import *  # noqa: F403
