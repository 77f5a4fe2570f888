"""SGLang PR #6998, the case study: cutlass MLA under CUDA graphs scores 0.060 on GSM8K instead of 0.910-0.920.

- ``diagnose``: the launch record, one decode step under the graph compared with eager, the row study (measurement)
- ``plots``: the figures drawn from those measurements
- ``accuracy``: the accuracy benchmark (one engine, one eval set, one score)
- ``seed``: what the seed ran (its server flags) and measured
- ``repro``: ``python -m mla_edu.case_study.repro``, the whole reproduction (``make repro``)
"""
