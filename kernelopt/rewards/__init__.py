"""Rewards computed from evaluation results (see DESIGN.md); depends on sandbox and kernelbench."""
