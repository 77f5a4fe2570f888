"""The kernel lab's commands, run from the repository root as ``python -m kernel_lab.tools.<name>``: A/B timings of
kernel versions, profiles and stall readings, the schedule's constants varied (kernel_lab/README.md)."""
