"""What the seed ran and measured: SGLang PR #6998's server flags and its accuracy table (DeepSeek-V3-0324 on
GSM8K). Used by ``repro`` (the script), ``diagnose.accuracy_runs`` (notebooks 06 and 07) and ``tools/seed_*``."""

#: the seed's accuracies, by row of ``repro.seed_table``
SEED = {"eager": "0.910-0.920", "pre_fix": "0.060", "fixed": "0.906-0.917", "triton": "0.927-0.937"}
#: the seed's server flags: --context-length 4096 --dp 8 --enable-dp-attention --cuda-graph-bs 64 128
#: --max-running-requests 128 (``ServerArgs`` fields)
SEED_CONFIG = dict(context_length=4096, dp_size=8, enable_dp_attention=True, cuda_graph_bs=(64, 128),
                   max_running_requests=128)
