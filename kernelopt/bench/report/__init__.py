"""`kernelopt report RUN`: a bench run folder as report.json, report.md and report.html."""
