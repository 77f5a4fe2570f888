"""The right prediction of each "predict, then run" variable of notebooks 01-08, for the instructor (the why is in
``instructor/solutions/``). ``tests/test_exercises_checks.py`` reads them to check that no committed output of a
learner's notebook shows an answer before its prediction."""

ANSWERS = {
    "01_mla_from_the_paper": {
        "ex1_still_agrees": True,
        "ex2_disappear": {"q_a_proj.weight", "q_a_layernorm.weight", "q_b_proj.weight"},
        "ex2_appear": {"q_proj.weight"},
        "ex3_mla_bytes": 9_210_691_584,
        "ex3_mha_bytes": 654_982_512_640,
    },
    "02_weight_absorption": {
        "ex1_right_positions": {3},
        "ex2_intensity": 117.4,
        "ex2_bound": "memory",
        "ex3_product_bytes": 201_326_592,
        "ex3_factor_bytes": 67_108_864,
    },
    "03_paged_kv_cache": {
        "ex1_wasted_fraction": 1 - 131_328 / 163_840,
        "ex2_outside_at_stride_1": 0,
        "ex2_first_outside_at_stride_11": 5,
        "ex3_reads_of_poison": 5,
    },
    "04_decode_kernel": {
        "ex1_first_single_split_batch": 75,
        "ex2_nan_requests": {1, 2, 3},
        "ex3_empty_lse": "-inf",
        "ex3_empty_o": "zeros",
        "ex3_merge_right": True,
    },
    "05_cuda_graphs_and_their_pitfalls": {
        "ex1_right_rows": {0},
        "ex2_caught_by": "b",
        "ex3_report": "c",
        "ex4_host_code_reruns": True,
    },
    "06_reproducing_the_zero_accuracy_bug": {
        "ex1_row_stride": 33,
        "ex1_stale_entries_remain": True,
        "ex2_flat_entries": [6],
        "ex3_accuracy": "c",
        "ex4_first_step_in_row0": "b",
    },
    "07_the_fix": {
        "ex1_frozen_splits": 13,
        "ex2_loud_rows": set(),
        "ex3_instead_of_width": "b",
        "ex4_graph_bs": 128,
        "ex4_padded_rows": 112,
    },
    "08_workshop_exercises": {
        "more1_guess_holds": False,
        "more2_when": "a",
        "more3_old_ids_remain": True,
    },
}
