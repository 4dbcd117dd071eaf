"""Problem-set runs: whole KernelBench-style sets through the referee and the agent, and their
reports.

- runner.py: what every pass over a set shares: the resumable result log, progress lines, the
  problems handed out to several devices, the reference's health probe, summary.json.
- summary.py: KernelBench's metrics per level over a set's records (and against baselines).
- rescore.py: existing generations judged by the referee (`kernelopt bench --solutions`).
- agent_runs.py: the agent over a set, one stored search per problem (`kernelopt bench`).
- generate.py: K scored samples per problem for datasets (`kernelopt generate`).
- baselines.py: torch.compile and friends as baselines (`kernelopt baselines`).
- report/: a bench run folder as data (report.json), Markdown and HTML (`kernelopt report`).

Why beside kernelopt/kernelbench rather than inside it: kernelbench is the layer *below* the
referee and the agent (the problem format, loading sets, the metrics' definitions) and imports
neither; bench runs whole sets *through* the referee (kernelopt.sandbox) and the agent
(kernelopt.agent), so it sits above both. Putting it inside kernelbench would make the bottom
layer depend on the top. Only the command line (kernelopt.cli) imports this package.
"""
