"""SGLang PR #6998, the case study: cutlass MLA under CUDA graphs scores 0.060 on GSM8K instead of 0.910-0.920.

- ``diagnose``: the launch record, one decode step under the graph compared with eager, the page-grid figures
- ``accuracy``: the accuracy benchmark (one engine, one eval set, one score)
- ``repro``: ``python -m mla_edu.case_study.repro``, the whole reproduction (``make repro``)
"""
