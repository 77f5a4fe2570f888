"""``python -m mla_edu.model.train``: the command line of ``mla_edu.model.train`` (its flags, checked before any
training; ``train.run`` does the work)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mla_edu import cli
from mla_edu.model import MANIFEST_FILE, task, train
from mla_edu.model.train import CURRICULUM, check_out, parse_curriculum, parse_facts


def _type(parse, name: str):
    """An argparse ``type=`` from a parser that raises ValueError: the message becomes argparse's error."""
    def run(text: str):
        try:
            return parse(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    run.__name__ = name
    return run


def weights_folder(text: str) -> Path:
    """``--init``: a folder holding a manifest (weights are checked against it when loaded)."""
    path = Path(text)
    if not (path / MANIFEST_FILE).is_file():
        what = "a folder without it" if path.is_dir() else ("a file" if path.exists() else "nothing there")
        raise argparse.ArgumentTypeError(f"expected a folder of weights holding {MANIFEST_FILE}, got {text} ({what})")
    return path


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(prog="python -m mla_edu.model.train", description=train.__doc__.split("\n")[0])
    p.add_argument("--steps", type=cli.positive_int, default=1200)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, required=True,
                   help="folder for the weights and manifest (never the package's by default: the shipped "
                        "weights live in mla_edu/model/weights)")
    p.add_argument("--force", action="store_true", help="overwrite weights already in --out")
    p.add_argument("--batch", type=cli.positive_int, default=32, help="questions per batch at most")
    p.add_argument("--tokens-per-batch", type=cli.positive_int, default=4096,
                   help="long prompts get fewer questions per batch: min(batch, this // prompt length)")
    p.add_argument("--queries", type=cli.positive_int, default=4,
                   help="answers per training sequence (the first as in eval)")
    p.add_argument("--lr", type=cli.positive_float, default=3e-3)
    p.add_argument("--weight-decay", type=cli.float_at_least(0), default=0.01)
    p.add_argument("--warmup", type=cli.int_at_least(0), default=100)
    p.add_argument("--grad-clip", type=cli.positive_float, default=1.0)
    p.add_argument("--attn-impl", choices=("sdpa", "naive", "absorbed"), default="sdpa",
                   help="attention form used for training (same weights either way)")
    p.add_argument("--eval-questions", type=cli.positive_int, default=task.EVAL_SIZE,
                   help="how many questions of the default eval set to decode at the end")
    p.add_argument("--hidden", type=cli.positive_int, default=64, help="hidden_size")
    p.add_argument("--heads", type=cli.positive_int, default=4, help="num_attention_heads")
    p.add_argument("--head-dim", type=cli.positive_int, default=16, help="qk_nope_head_dim = v_head_dim")
    p.add_argument("--layers", type=cli.positive_int, default=2)
    p.add_argument("--intermediate", type=cli.positive_int, default=128, help="SwiGLU intermediate_size")
    p.add_argument("--facts", type=_type(parse_facts, "MIN,MAX"), default="1,1",
                   help="MIN,MAX facts per training prompt (the eval set has 1)")
    p.add_argument("--curriculum", type=_type(parse_curriculum, "curriculum"),
                   default=",".join(f"{l}@{s:g}" for s, l in CURRICULUM),
                   help="prompt length per stage, LENGTH@START_FRACTION, comma-separated")
    p.add_argument("--init", type=weights_folder, default=None,
                   help="start from the weights in this directory (a manifest + safetensors) instead of random")
    p.add_argument("--yarn-factor", type=cli.float_above(1), default=None,
                   help="rope_scaling yarn with this factor (mscale = mscale_all_dim = 1, as DeepSeek-V3; "
                        "original_max_position_embeddings = the task's context): the softmax scale becomes "
                        "mscale**2/sqrt(qk_head_dim); --init may then name weights trained without it")
    p.add_argument("--threads", type=cli.int_at_least(0), default=1,
                   help="torch threads (0: torch's default); 1 is faster when others share the cores")
    args = p.parse_args(argv)
    created = not args.out.exists()
    try:
        args.out = check_out(args.out, args.force)
    except ValueError as e:
        p.error(str(e))
    try:
        return train.run(args, "python -m mla_edu.model.train " + " ".join(argv if argv is not None else sys.argv[1:]))
    except BaseException as e:
        if created and args.out.is_dir() and not any(args.out.iterdir()):
            args.out.rmdir()  # a failed run leaves no empty folder behind
        if isinstance(e, ValueError):
            p.exit(1, f"{p.prog}: error: {e}\n")
        raise


if __name__ == "__main__":
    main()
