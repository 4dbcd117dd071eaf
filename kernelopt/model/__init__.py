"""`kernelopt model`: a user's whole model as the unit of work (docs/model.md).

A model file in the KernelBench format is profiled (profiler.py: hot spots attributed to
submodule paths, Amdahl bounds), its hot spots written as standalone problems (extract.py),
replacements composed back into a `ModelNew` for the whole model and judged end to end by the
referee (compose.py), and the search run on every hot spot before composing (optimize.py);
report.py renders what came of it. Sits beside bench/ and tune/: imports kernelbench, sandbox
and agent; only cli imports it. Heavy imports (torch) happen inside the modules that need them.
"""
