"""Problem-set runs: whole KernelBench-style sets through the referee and the agent, and their
reports.

rescore.py: existing generations judged by the referee (`kernelopt bench --solutions`);
agent_runs.py: the agent over a set (`kernelopt bench`); generate.py: K scored samples per
problem (`kernelopt generate`); baselines.py (`kernelopt baselines`); report/ (`kernelopt report`).

Why beside kernelopt/kernelbench rather than inside it: kernelbench is the layer *below* the
referee and the agent (the problem format, loading sets, the metrics' definitions) and imports
neither; bench runs whole sets *through* the referee (kernelopt.sandbox) and the agent
(kernelopt.agent), so it sits above both. Putting it inside kernelbench would make the bottom
layer depend on the top. Only the command line (kernelopt.cli) imports this package.
"""
