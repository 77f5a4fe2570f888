"""The shipped weights: where they live, their manifest, and ``load_pretrained``, which checks both checksums."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch

from mla_edu.model.tiny import TinyDeepseek, TinyDeepseekConfig

WEIGHTS_DIR = Path(__file__).parent / "weights"
# The shipped variants by name. "tiny-yarn": the shipped model fine-tuned with rope_scaling yarn,
# factor 40 (DeepSeek-V3's), so its softmax scale is mscale**2/sqrt(80) with mscale = 0.1 ln 40 + 1
# = 1.369: the scale sgl-kernel 0.1.7's hard-coded 1/sqrt(192) drops (see serving's "scale" defect).
VARIANTS = {"tiny": WEIGHTS_DIR, "tiny-yarn": Path(__file__).parent / "weights_yarn"}
WEIGHTS_FILE = "tiny.safetensors"
MANIFEST_FILE = "manifest.json"


def sha256_file(path: str | Path) -> str:
    """Hex sha256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def config_sha256(config: dict) -> str:
    """Hex sha256 of a model config's canonical JSON (sorted keys, no spaces): the manifest's ``config_sha256``.

    The weights' checksum alone does not cover the config beside them, yet a changed
    ``rms_norm_eps`` or ``rope_theta`` changes every answer; so the config gets its own digest.
    """
    return hashlib.sha256(json.dumps(config, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def load_manifest(weights_dir: str | Path | None = None) -> dict:
    """The ``manifest.json`` beside the weights (config, task, seed, sha256, measured accuracy)."""
    path = Path(weights_dir or WEIGHTS_DIR) / MANIFEST_FILE
    if not path.is_file():
        raise FileNotFoundError(f"no manifest at {path}: "
                                f"expected {MANIFEST_FILE} written by python -m mla_edu.model.train")
    try:
        manifest = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"manifest {path} is not valid JSON ({e})") from None
    if not isinstance(manifest, dict):
        raise ValueError(f"manifest {path} must hold a JSON object, got a {type(manifest).__name__}")
    return manifest


def _digest(manifest: dict, key: str, path: Path) -> str:
    """The manifest's hex digest under ``key``, lower-cased; ValueError if missing or not 64 hex digits."""
    value = manifest.get(key)
    if value is None:
        raise ValueError(f"manifest {path} has no {key!r}: it cannot be verified (re-write it with "
                         "python -m mla_edu.model.train, or load with verify=False)")
    if not isinstance(value, str) or len(value) != 64 or any(c not in "0123456789abcdef" for c in value.lower()):
        raise ValueError(f"manifest {path}: {key!r} must be 64 hex digits, got {value!r}")
    return value.lower()


def _weights_path(weights_dir: Path, manifest: dict) -> Path:
    """The weights file the manifest names: a file inside ``weights_dir``, never elsewhere."""
    name = manifest.get("weights", WEIGHTS_FILE)
    if not isinstance(name, str) or not name:
        raise ValueError(f"manifest in {weights_dir}: 'weights' must be a file name, got {name!r}")
    path = weights_dir / name
    if Path(name).is_absolute() or (weights_dir / Path(name).name) != path:
        raise ValueError(f"manifest in {weights_dir} names weights file {name!r}, which is not in that directory; "
                         "expected a plain file name beside manifest.json")
    if path.resolve().parent != weights_dir.resolve():
        raise ValueError(f"weights file {path} is a symlink to {path.resolve()}, outside {weights_dir}; "
                         "expected a file inside that directory")
    if not path.is_file():
        raise FileNotFoundError(f"weights file {path} named by the manifest is missing")
    return path


def load_pretrained(
    weights_dir: str | Path | None = None,
    attn_impl: str = "absorbed",
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    verify: bool = True,
) -> TinyDeepseek:
    """The shipped ``TinyDeepseek`` in eval mode, after checking the weights file's sha256 and the
    config's (``config_sha256``) against the manifest.

    ``weights_dir``: a directory, or a name from ``VARIANTS`` (``"tiny"``, ``"tiny-yarn"``).
    """
    from safetensors.torch import load_file

    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating torch.dtype, got {dtype!r}")
    if isinstance(weights_dir, str) and weights_dir in VARIANTS:
        weights_dir = VARIANTS[weights_dir]
    weights_dir = Path(weights_dir or WEIGHTS_DIR)
    manifest = load_manifest(weights_dir)
    mpath = weights_dir / MANIFEST_FILE
    if not isinstance(manifest.get("config"), dict):
        raise ValueError(f"manifest {mpath} must hold the model 'config' as a JSON object, "
                         f"got {type(manifest.get('config')).__name__}")
    path = _weights_path(weights_dir, manifest)
    if verify:
        retrain = manifest.get("command", f"python -m mla_edu.model.train --out {weights_dir} --force")
        want, got = _digest(manifest, "sha256", mpath), sha256_file(path)
        if got != want:
            raise ValueError(
                f"checksum mismatch for {path}: manifest expects sha256 {want}, "
                f"the file has {got} (corrupt or replaced; re-train with: {retrain})")
        want, got = _digest(manifest, "config_sha256", mpath), config_sha256(manifest["config"])
        if got != want:
            raise ValueError(
                f"config checksum mismatch in {mpath}: 'config_sha256' expects {want}, the config there hashes "
                f"to {got} (the config was edited: the weights were trained with the original one)")
    model = TinyDeepseek(TinyDeepseekConfig.from_dict(manifest["config"]), attn_impl=attn_impl)
    state = load_file(str(path))
    bad = [k for k, v in state.items() if v.is_floating_point() and not torch.isfinite(v).all()]
    if bad:  # a checksum proves the file is the one written, not that it holds numbers
        raise ValueError(f"{path}: expected finite weights, got NaN or infinite values in {len(bad)} tensors "
                         f"(first: {bad[0]}); re-train")
    model.load_state_dict(state)
    return model.to(device=device, dtype=dtype).eval()
