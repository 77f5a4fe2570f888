"""The tiny DeepSeek-style model, its recall task, its training, and the shipped weights.

    from mla_edu.model import load_pretrained, task
    model = load_pretrained()                      # TinyDeepseek, eval mode, checksum verified
    q = task.default_eval_set()[0]
    task.decode(model.generate(q.prompt_ids))      # e.g. "40"
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch

from mla_edu.model import task
from mla_edu.model.tiny import TinyDeepseek, TinyDeepseekConfig

WEIGHTS_DIR = Path(__file__).parent / "weights"
WEIGHTS_FILE = "tiny.safetensors"
MANIFEST_FILE = "manifest.json"

__all__ = ["TinyDeepseek", "TinyDeepseekConfig", "load_manifest", "load_pretrained", "task", "WEIGHTS_DIR"]


def sha256_file(path: str | Path) -> str:
    """Hex sha256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def load_manifest(weights_dir: str | Path | None = None) -> dict:
    """The ``manifest.json`` beside the weights (config, task, seed, sha256, measured accuracy)."""
    path = Path(weights_dir or WEIGHTS_DIR) / MANIFEST_FILE
    if not path.is_file():
        raise FileNotFoundError(f"no manifest at {path}: expected {MANIFEST_FILE} written by python -m mla_edu.model.train")
    return json.loads(path.read_text())


def load_pretrained(
    weights_dir: str | Path | None = None,
    attn_impl: str = "absorbed",
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    verify: bool = True,
) -> TinyDeepseek:
    """The shipped ``TinyDeepseek`` in eval mode, after checking the file's sha256 against the manifest."""
    from safetensors.torch import load_file

    weights_dir = Path(weights_dir or WEIGHTS_DIR)
    manifest = load_manifest(weights_dir)
    path = weights_dir / manifest.get("weights", WEIGHTS_FILE)
    if not path.is_file():
        raise FileNotFoundError(f"weights file {path} named by the manifest is missing")
    if verify:
        got = sha256_file(path)
        if got != manifest["sha256"]:
            raise ValueError(
                f"checksum mismatch for {path}: manifest expects sha256 {manifest['sha256']}, "
                f"the file has {got} (corrupt or replaced; re-train with: {manifest.get('command', 'python -m mla_edu.model.train')})"
            )
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating torch.dtype, got {dtype!r}")
    model = TinyDeepseek(TinyDeepseekConfig.from_dict(manifest["config"]), attn_impl=attn_impl)
    model.load_state_dict(load_file(str(path)))
    return model.to(device=device, dtype=dtype).eval()
