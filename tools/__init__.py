"""Benchmarks and maintenance commands, outside the library's import path. Run them from the
repository root as ``python -m tools.<name>``: kernel_bench, kernel_sweep, launch_bench, figures,
run_notebooks."""
