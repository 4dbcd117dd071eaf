"""The search: an LLM proposes kernels, the referee judges them, a strategy decides what to ask next.

- search.py: one run from settings (`OptimizeConfig`) to `RunSummary`, and the search loop.
- strategies.py: best-of-n, refine, tree, evolve, samples (what each round asks), the
  `STRATEGIES` registry.
- attempt.py: `AttemptPipeline`, one prompt to one judged `Attempt` (budget, LLM call, code
  extraction, evaluation, records).
- llm.py: the OpenAI-compatible client; budget.py: the run's limits; prompting.py: the
  templates (kernelopt/prompts) into messages and verdicts into feedback.
- session.py: `Session`, the search driven by hand (notebooks, `kernelopt tune`) on the same
  pipeline and store.
- store.py: the SQLite run store (`RunStore.open`); records.py: its candidates as attempt
  records for the export formats (kernelopt/rewards/export.py).

Depends on kernelopt.sandbox and kernelopt.kernelbench. Problem-set runs and reports are
kernelopt.bench, the command line kernelopt.cli; this package imports neither.
"""
