"""The search agent and the passes over problem sets: the LLM client, prompts, strategies, the
run store, one run (optimize.py), bench, baselines, reports and datasets. Depends on
kernelopt.sandbox and kernelopt.kernelbench; only the command line (kernelopt.cli) imports it."""
