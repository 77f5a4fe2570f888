"""Bend each rule of ``tests/test_rules_outputs_and_schedule.py`` in a copy of the package and run its test there.

    python tests/bend_rules.py [NAME ...]

For every bend (one rule bent, one small edit of one file): the test named after the rule must fail on the bent
copy and pass on the unbent one. Prints one line per bend and exits 1 if any bend goes unnoticed. The bends live
here, never in the package.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TESTS = "tests/test_rules_outputs_and_schedule.py"

#: write_atomic bent into a plain open-and-write: (the text bent, what it becomes), for two of its tests
PLAIN_WRITE = ("    path = Path(os.path.realpath(path))\n",
               "    path = Path(os.path.realpath(path))\n"
               "    with open(path, 'wb' if isinstance(data, bytes) else 'w') as f:\n"
               "        f.write(data)\n"
               "    return\n")
#: name -> (the test that must catch it, file, the text bent, what it becomes)
BENDS = {
    "schedule modelled on the table's width": (
        "test_the_triton_schedule_choice_models_the_width_the_step_reads",
        "mla_edu/serving/backends/triton.py",
        "        return width, self.choose_schedule(lens, heads, width)",
        "        return width, self.choose_schedule(lens, heads, self.width)"),
    "schedule modelled on the longest request": (
        "test_the_triton_schedule_choice_models_the_width_the_step_reads",
        "mla_edu/serving/backends/triton.py",
        "schedule.prefers_balanced(lens, page_size, heads, sm_count, splits, width)",
        "schedule.prefers_balanced(lens, page_size, heads, sm_count, splits, None)"),
    "the table's split count launched": (
        "test_the_triton_step_launches_at_the_width_and_count_it_chose",
        "mla_edu/serving/backends/triton.py",
        "        splits = -1 if chosen == \"balanced\" else self.splits(bs, heads, width)",
        "        splits = -1 if chosen == \"balanced\" else self.splits(bs, heads)"),
    "the whole table launched": (
        "test_the_triton_step_launches_at_the_width_and_count_it_chose",
        "mla_edu/serving/backends/triton.py",
        "self.page_table[:bs, :width],",
        "self.page_table[:bs],"),
    "workspace sized up to max_bs - 1": (
        "test_the_workspace_fits_every_batch_size_and_width_at_the_models_head_count",
        "mla_edu/serving/backends/triton.py",
        "sizes = [(b, w) for b in range(1, max_bs + 1) for w in self.widths()]",
        "sizes = [(b, w) for b in range(1, max_bs) for w in self.widths()]"),
    "workspace sized for the table's width alone": (
        "test_the_workspace_fits_every_batch_size_and_width_at_the_models_head_count",
        "mla_edu/serving/backends/triton.py",
        "sizes = [(b, w) for b in range(1, max_bs + 1) for w in self.widths()]",
        "sizes = [(b, w) for b in range(1, max_bs + 1) for w in (self.width,)]"),
    "workspace sized for 128 heads": (
        "test_the_workspace_fits_every_batch_size_and_width_at_the_models_head_count",
        "mla_edu/serving/backends/triton.py",
        "        h, dl = self.num_heads, self.kv_cache.kv_lora_rank\n",
        "        h, dl = 128, self.kv_cache.kv_lora_rank\n"),
    "workspace sized for a 512 latent": (
        "test_the_workspace_fits_every_batch_size_and_width_at_the_models_head_count",
        "mla_edu/serving/backends/triton.py",
        "        h, dl = self.num_heads, self.kv_cache.kv_lora_rank\n",
        "        h, dl = self.num_heads, 512\n"),
    "the kernel counts GPU 0's SMs": (
        "test_the_workspace_fits_every_batch_size_and_width_at_the_models_head_count",
        "mla_edu/serving/backends/triton.py",
        "schedule=chosen,\n            sm_count=self.sm_count)",
        "schedule=chosen)"),
    "write_atomic a plain open-and-write (failing writer)": (
        "test_write_atomic_leaves_the_old_content_when_the_writer_fails",
        "mla_edu/files.py",
        *PLAIN_WRITE),
    "write_atomic a plain open-and-write (interrupt)": (
        "test_write_atomic_leaves_the_old_content_when_interrupted_between_write_and_rename",
        "mla_edu/files.py",
        *PLAIN_WRITE),
    "write_atomic keeps mkstemp's 0600": (
        "test_write_atomic_gives_a_replaced_file_its_old_mode_and_a_new_file_the_umasks",
        "mla_edu/files.py",
        "        os.chmod(tmp, path.stat().st_mode & 0o777 if path.exists() else 0o666 & ~_umask())\n",
        ""),
    "check_out_dir without its write probe": (
        "test_check_out_dir_checks_that_the_folder_is_writable_before_the_work",
        "mla_edu/files.py",
        "    _check_writable(path, what, path)\n    return path\n",
        "    return path\n"),
    "check_out_file takes a folder": (
        "test_check_out_file_refuses_a_folder",
        "mla_edu/files.py",
        "    if path.is_dir():\n        raise ValueError(f\"{what}: expected a file name",
        "    if False:\n        raise ValueError(f\"{what}: expected a file name"),
    "training checks the manifest only": (
        "test_training_refuses_without_force_a_folder_holding_the_weights_file_alone",
        "mla_edu/model/train/training.py",
        "for name in (WEIGHTS_FILE, MANIFEST_FILE) if",
        "for name in (MANIFEST_FILE,) if"),
    "a backend built directly takes poison fill": (
        "test_a_backend_whose_class_declares_no_poison_fill_refuses_it_when_built_directly",
        "mla_edu/serving/backends/base.py",
        "        if poison_fill and not self.supports_poison_fill:\n",
        "        if False:\n"),
    "the NaN hint names no buffer": (
        "test_the_checkers_nan_hint_names_the_persistent_buffer_that_causes_it",
        "mla_edu/graphs/check.py",
        "hint = hint.format(buffers=\", \".join(names[id(t)] for t in culprits) or \"persistent buffers\")",
        "hint = hint.format(buffers=\"persistent buffers\")"),
    "B = 0 skips the general checks": (
        "test_mla_decode_with_no_requests_still_runs_the_general_argument_checks",
        "mla_edu/kernels/decode.py",
        "    if stride_policy is not None:  # make_plan's check",
        "    if q_nope.size(0) == 0:\n        return q_nope.new_empty((0, q_nope.size(1), q_nope.size(2)))\n"
        "    if stride_policy is not None:  # make_plan's check"),
}


def run_test(copy: Path, test: str) -> bool:
    """Whether ``test`` passes in ``copy``."""
    env = {**os.environ, "PYTHONPATH": str(copy)}
    cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-p", "no:randomly", "-n", "0",
           f"{TESTS}::{test}"]
    return subprocess.run(cmd, cwd=copy, env=env, capture_output=True).returncode == 0


def main(names: list[str]) -> int:
    unknown = sorted(set(names) - set(BENDS))
    if unknown:
        raise SystemExit(f"unknown bends {unknown}; expected names from {sorted(BENDS)}")
    missed = 0
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "repo"
        shutil.copytree(ROOT, copy, ignore=shutil.ignore_patterns(".git", ".venv", "*.ipynb", "__pycache__",
                                                                  "notebooks", "figures", "build"))
        for name in names or BENDS:
            test, rel, old, new = BENDS[name]
            path = copy / rel
            text = path.read_text()
            if text.count(old) != 1:
                raise SystemExit(f"{name}: the text to bend is not found once in {rel}: the bend is stale")
            path.write_text(text.replace(old, new))
            try:
                caught = not run_test(copy, test)
            finally:
                path.write_text(text)
            passes = run_test(copy, test)
            missed += not (caught and passes)
            print(f"{'caught' if caught else 'MISSED'}, unbent {'passes' if passes else 'FAILS'}: {name} ({test})",
                  flush=True)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
