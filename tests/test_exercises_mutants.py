"""Notebook 08's checkers are strict by construction: systematic wrong answers, made by mutating each reference
solution (every integer constant +-1 and doubled, floor <-> ceil, each additive term dropped, each factor dropped
or doubled, two arguments swapped, min <-> max, < <-> <=, padded rows in/out, padded rows writing their whole row,
the captured batch size for the real one, pages <-> tokens, bf16 <-> fp32 element sizes, writing into another
view of the page table, a fresh workspace at every replay), are rejected wherever they differ from the reference
on the checker's own domain or a denser one; the classic ones get the hint naming their mistake, and no message
of a rejected mutant contains the expected value. Bad inputs of every kind get a hint from every checker, never
an exception. The closing line of the run counts the mutants per exercise (tests/conftest.py). On a GPU, the
worst replay mutants leave the CUDA context usable (``test_replay_mutants_leave_the_gpu_usable``)."""

import ast
import copy
import itertools
import re
import types
from unittest import mock

import matplotlib
import numpy as np
import pytest
import torch

matplotlib.use("Agg")

from mla_edu.kernels import get_workspace_size  # noqa: E402
from mla_edu.kvcache import fill_page_table  # noqa: E402
from mla_edu.workshop import checks, exercises as ex  # noqa: E402
from solutions import require_solutions  # noqa: E402

require_solutions()
from instructor import ex08  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")


# ---- the mutant generator -------------------------------------------------------------------------
def _is_ceil(node) -> bool:  # -(-a // b)
    return (isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.BinOp)
            and isinstance(node.operand.op, ast.FloorDiv) and isinstance(node.operand.left, ast.UnaryOp)
            and isinstance(node.operand.left.op, ast.USub))


def _int(c) -> ast.Constant:
    return ast.Constant(c)


def _variants(node, names: dict) -> list:
    """``(label, replacement)`` for one node. ``names``: argument name -> the names it may be swapped with."""
    out = []
    if isinstance(node, ast.Constant) and type(node.value) is int:
        c = node.value
        out += [(f"{c}+1", _int(c + 1)), (f"{c}-1", _int(c - 1)), (f"{c}*2", _int(2 * c))]
        if c in (2, 4):
            out.append((f"element size {c}->{6 - c}", _int(6 - c)))  # bf16 <-> fp32
    elif _is_ceil(node):
        a, b = node.operand.left.operand, node.operand.right
        out.append(("ceil->floor", ast.BinOp(a, ast.FloorDiv(), b)))
        out.append(("pages->tokens", ast.UnaryOp(ast.USub(), ast.BinOp(ast.UnaryOp(ast.USub(), a), ast.FloorDiv(),
                                                                          _int(1)))))
    elif isinstance(node, ast.BinOp):
        if isinstance(node.op, ast.FloorDiv):
            out.append(("floor->ceil", ast.UnaryOp(ast.USub(), ast.BinOp(ast.UnaryOp(ast.USub(), node.left),
                                                                         ast.FloorDiv(), node.right))))
        if isinstance(node.op, (ast.Add, ast.Sub)):
            out += [("term dropped (right)", node.left), ("term dropped (left)", node.right)]
        if isinstance(node.op, ast.Mult):
            out += [("factor dropped (right)", node.left), ("factor dropped (left)", node.right),
                    ("factor doubled", ast.BinOp(node, ast.Mult(), _int(2)))]
    elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
        if node.id in names:
            out += [(f"{node.id}->{other}", ast.Name(other, ast.Load())) for other in names[node.id]]
            out += [(f"{node.id}+1", ast.BinOp(ast.Name(node.id, ast.Load()), ast.Add(), _int(1))),
                    (f"{node.id}-1", ast.BinOp(ast.Name(node.id, ast.Load()), ast.Sub(), _int(1)))]
        swap = {"minimum": "maximum", "maximum": "minimum", "min": "max", "max": "min"}
        if node.id in swap:
            out.append((f"{node.id}->{swap[node.id]}", ast.Name(swap[node.id], ast.Load())))
    elif isinstance(node, ast.Compare) and len(node.ops) == 1:
        flip = {ast.GtE: ast.Gt, ast.Gt: ast.GtE, ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Eq: ast.NotEq}
        if type(node.ops[0]) in flip:
            out.append(("comparison flipped", ast.Compare(node.left, [flip[type(node.ops[0])]()], node.comparators)))
    return out


def mutants(source: str, names: dict) -> list:
    """Every single-point mutant of ``source`` (one function or expression): ``(label, source)``."""
    tree = ast.parse(source)
    out, seen = [], {ast.unparse(tree)}
    n_nodes = sum(1 for _ in ast.walk(tree))
    for i in range(n_nodes):
        for k in itertools.count():
            t = copy.deepcopy(tree)
            node = list(ast.walk(t))[i]
            variants = _variants(node, names)
            if k >= len(variants):
                break
            label, new = variants[k]

            class Swap(ast.NodeTransformer):
                def visit(self, n):
                    return copy.deepcopy(new) if n is node else self.generic_visit(n)

            text = ast.unparse(ast.fix_missing_locations(Swap().visit(t)))
            if text not in seen:
                seen.add(text)
                out.append((label, text))
    return out


def _compile(source: str, name: str, namespace: dict):
    ns = dict(namespace)
    exec(compile(source, f"<mutant {name}>", "exec"), ns)
    return ns[name]


def _quiet(fn):
    """The checker's result for ``fn`` without its printed line (numpy's division warnings off)."""
    with np.errstate(all="ignore"):
        return fn()


def _record(counts, exercise: str, generated: int, differing: int, rejected: int):
    counts[exercise] = (generated, differing, rejected)


def _check_mutant(check, fn):
    """``check(fn)``, quietly, without the checker's put-back of the library's globals after each call (about 0.5 ms
    a call, most of the time of exercise 4's 1800 calls): a mutant changes no library state. The watch and every
    case stay; the put-back has its own tests (tests/test_exercises.py, "rebound")."""
    with mock.patch.object(checks, "library_globals", list), mock.patch.object(ex, "library_globals", list):
        return _quiet(lambda: check(fn))


def _judge(all_mutants, name: str, namespace: dict, same, check, secrets=()) -> tuple:
    """``(differing, accepted)``: how many mutants differ from the reference (``same(fn)`` is False), and those
    of them that ``check`` passes (each one a wrong answer the checker accepts). A rejected mutant's message must
    contain none of ``secrets`` (the expected values, as a message would print them)."""
    differing, accepted = 0, []
    for label, src in all_mutants:
        fn = _compile(src, name, namespace)
        if same(fn):
            continue
        differing += 1
        r = _check_mutant(check, fn)
        if r.passed:
            accepted.append((label, src))
        leaked = secrets(r.message) if callable(secrets) else [x for x in secrets if x in r.message]
        assert not leaked, (label, leaked, r.message)
    return differing, accepted


# ---- exercise 1: the replay hook ------------------------------------------------------------------
REPLAY_REF = """
def replay(backend, bs, req_pool_indices, seq_lens, seq_lens_cpu):
    fill_page_table(backend.req_to_token, req_pool_indices[:bs], seq_lens[:bs], backend.cuda_graph_kv_indices[:bs], 128)
"""
REPLAY_EXTRA = [  # the mutants no single-node rule makes
    ("capture batch size", REPLAY_REF.replace("[:bs]", "[:backend.cuda_graph_kv_indices.shape[0]]")),
    # the pre-fix 1-wide view: each row's first page id only (fill_page_table refuses so narrow a table)
    ("one-wide view", REPLAY_REF.split("    fill")[0] + "    backend.cuda_graph_kv_indices[:bs, 0] = "
                      "backend.req_to_token[req_pool_indices[:bs], 0] // 128\n"),
    ("first row only", REPLAY_REF.replace("[:bs]", "[:1]")),
    ("batch row as pool row", REPLAY_REF.replace("req_pool_indices[:bs]", "torch.arange(bs, dtype=torch.int32)")),
    ("another view: the metadata's table", REPLAY_REF.replace("backend.cuda_graph_kv_indices[:bs]",
                                                              "backend.forward_metadata.block_kv_indices[:bs]")),
    ("a fresh workspace per replay", REPLAY_REF.rstrip() + "\n    backend.cuda_graph_mla_workspace = "
                                     "torch.empty_like(backend.cuda_graph_mla_workspace)\n"),
    ("token slots, not pages", REPLAY_REF.replace("128)", "1)")),
    ("lengths written", REPLAY_REF.rstrip() + "\n    seq_lens[:bs] += 1\n"),
    # the view one column short: floor(context / 128) = 3 of the buffer's 4 columns; only seq_len 385 reads the 4th
    ("three of four columns", REPLAY_REF.replace(
        "backend.cuda_graph_kv_indices[:bs]", "backend.cuda_graph_kv_indices[:bs, :backend.max_context_len // 128]")),
]


def _replay_domain():
    """Batches on a fake backend: every decode length 2..385 in some row, 1 to 4 real rows, padded to 2 or 4; the
    checker's context (386: an engine never decodes at seq_len = context, so reading req_to_token one token past
    the request is no mistake there)."""
    pool, ctx, W, max_bs = 8, ex.REPLAY_SETUP["context_length"], 4, 4
    slots = torch.arange(pool * ctx, dtype=torch.int32).reshape(pool, ctx) * 3 + 7  # distinct pages per token
    cases = []
    for i, L in enumerate(range(2, 386)):
        raw = 1 + i % 4
        lens = [L] + [2 + (L * 37 + 61 * r) % 383 for r in range(1, raw)]
        bs = 2 if raw <= 2 else 4
        rpi = torch.tensor([(5 * (r + i)) % pool for r in range(raw)] + [0] * (max_bs - raw), dtype=torch.int32)
        sl = torch.tensor(lens + [1] * (max_bs - raw), dtype=torch.int32)
        cases.append((bs, raw, rpi, sl))
    return slots, W, max_bs, cases


def _replay_run(fn, domain) -> list:
    """What rows [:raw] of the buffer hold, in each row's first ceil(len / 128) entries, after ``fn`` (or the error),
    and whether the captured buffer, workspace and inputs are as they were. The metadata holds an eager step's own
    table (a running server's state before a replay)."""
    slots, W, max_bs, cases = domain
    out = []
    for bs, raw, rpi, sl in cases:
        eager = torch.full((raw, W), -5, dtype=torch.int32)
        ws = torch.zeros(64, dtype=torch.uint8)
        backend = types.SimpleNamespace(req_to_token=slots, device=torch.device("cpu"),
                                        max_context_len=ex.REPLAY_SETUP["context_length"],
                                        cuda_graph_kv_indices=torch.full((max_bs, W), -7, dtype=torch.int32),
                                        cuda_graph_mla_workspace=ws,
                                        forward_metadata=types.SimpleNamespace(block_kv_indices=eager, workspace=ws))
        buf, given = backend.cuda_graph_kv_indices, (rpi.clone(), sl.clone(), sl.clone())
        try:
            fn(backend, *((bs,) + given))
        except Exception as e:
            out.append(type(e).__name__)
            continue
        kept = (backend.cuda_graph_kv_indices is buf and backend.cuda_graph_mla_workspace is ws
                and all(torch.equal(g, w) for g, w in zip(given, (rpi, sl, sl))))
        out.append((kept, tuple(tuple(buf[b, : -(-int(sl[b]) // 128)].tolist()) for b in range(raw))))
    return out


def test_replay_mutants_are_rejected(mutant_counts):
    ns = {"fill_page_table": fill_page_table, "torch": torch}
    names = {"bs": [], "seq_lens": ["seq_lens_cpu", "req_pool_indices"], "req_pool_indices": ["seq_lens"]}
    all_mutants = mutants(REPLAY_REF.strip(), names) + [(lbl, src.strip()) for lbl, src in REPLAY_EXTRA]
    domain = _replay_domain()
    ref = _replay_run(_compile(REPLAY_REF, "replay", ns), domain)
    assert ex.check_replay(_compile(REPLAY_REF, "replay", ns)).passed
    # the same pages wherever the graph reads: not a wrong answer
    differing, accepted = _judge(all_mutants, "replay", ns, lambda fn: _replay_run(fn, domain) == ref, ex.check_replay)
    _record(mutant_counts, "1 replay hook", len(all_mutants), differing, differing - len(accepted))
    assert differing >= 10 and not accepted, accepted


def test_replay_classic_mutants_get_their_hint():
    ns = {"fill_page_table": fill_page_table, "torch": torch}
    for src, hint in [(REPLAY_REF.replace("seq_lens[:bs]", "seq_lens[:bs] - 1"), "lack their last page id"),
                      (REPLAY_EXTRA[1][1], "only the first page id of each row"),
                      (REPLAY_EXTRA[3][1], "read wrong (but valid) pages"),
                      (REPLAY_REF.replace("[:bs]", "[:bs - 1]"), "still held the poison page id")]:
        r = ex.check_replay(_compile(src, "replay", ns))
        assert not r.passed and hint in r.message, r.message
    # the captured size for the real one writes padded rows too, which the graph's real rows never read: right
    assert ex.check_replay(_compile(REPLAY_EXTRA[0][1], "replay", ns)).passed


# ---- exercise 2: mysteries ------------------------------------------------------------------------
def test_mystery_wrong_options_are_rejected(mutant_counts):
    n = 0
    for k, answer in ex08.MYSTERY_ANSWERS.items():
        for other in sorted(set(ex.OPTIONS) - {answer}):
            r = ex.check_mystery(k, other)
            assert not r.passed and f"not ({other}); the figure contradicts" in r.message, r.message
            n += 1
    _record(mutant_counts, "2 mysteries", n, n, n)


# ---- exercise 3: row stride -----------------------------------------------------------------------
ROW_STRIDE_REF = "(1, (640 + 128) // 128, 3 * 1 + 2)"


def test_row_stride_mutants_are_rejected(mutant_counts):
    assert eval(ROW_STRIDE_REF) == ex08.ROW_STRIDE_ANSWERS
    all_mutants = mutants(ROW_STRIDE_REF, {}) + [("bs for stride", "(8, 6, 3 * 8 + 2)"), ("swap", "(6, 1, 20)")]
    differing = rejected = 0
    for label, src in all_mutants:
        values = eval(src)
        if values == ex08.ROW_STRIDE_ANSWERS:
            continue
        differing += 1
        r = ex.check_row_stride(*values)
        rejected += not r.passed
        assert not r.passed and str(values[0] if values[0] != 1 else "") in r.message, (label, src, r.message)
    _record(mutant_counts, "3 row stride", len(all_mutants), differing, rejected)
    assert differing == rejected >= 8


# ---- exercise 4: workspace size -------------------------------------------------------------------
WORKSPACE_REF = """
def workspace_size(max_seq_len, num_batches, sm_count, num_kv_splits):
    if num_kv_splits == -1:
        max_splits = -(-max_seq_len // 128)
        heur = minimum(max_splits, maximum(1, sm_count // num_batches))
        split = -(-max_splits // -(-max_splits // heur))
    else:
        split = num_kv_splits
    return (4 * 512 + 4) * 128 * split * num_batches
"""


def _workspace_grid():
    """Every length 1..1100 and 4000..4300, batches 1..20, 60..70, 125..140, 200, 256, for five (sm_count, splits)."""
    L = np.array(list(range(1, 1101)) + list(range(4000, 4301)), dtype=np.int64)[:, None]
    B = np.array(list(range(1, 21)) + list(range(60, 71)) + list(range(125, 141)) + [200, 256], dtype=np.int64)[None]
    return L, B, [(132, -1), (148, -1), (1, -1), (132, 1), (132, 3), (16, 7)]


def _workspace_values(fn, grid):
    L, B, settings = grid
    with np.errstate(all="ignore"):
        try:
            return [np.broadcast_to(np.asarray(fn(L, B, sms, ns)), (L.shape[0], B.shape[1])) for sms, ns in settings]
        except Exception as e:
            return type(e).__name__


def test_workspace_mutants_are_rejected(mutant_counts):
    ns = {"minimum": np.minimum, "maximum": np.maximum}
    names = {"max_seq_len": ["num_batches", "sm_count"], "num_batches": ["max_seq_len", "sm_count"],
             "sm_count": ["num_batches", "max_seq_len"], "num_kv_splits": []}
    all_mutants = mutants(WORKSPACE_REF.strip(), names)
    grid = _workspace_grid()
    ref = _workspace_values(_compile(WORKSPACE_REF, "workspace_size", ns), grid)
    assert _quiet(lambda: ex.check_workspace_size(_compile(WORKSPACE_REF, "workspace_size", ns))).passed
    def same(fn):
        got = _workspace_values(fn, grid)
        return not isinstance(got, str) and all(np.array_equal(g, r) for g, r in zip(got, ref))

    def secrets(message: str) -> list:
        """The expected bytes of the case a message names, if the message prints them."""
        named = re.search(r"workspace_size\((\d+), (\d+), (\d+), (-?\d+)\)", message)
        want = get_workspace_size(*map(int, named.groups())) if named else None
        shown = {str(want), f"{want:,}"} if want else set()
        return [w for w in shown if re.search(rf"(?<![\d,-]){w}(?![\d,])", message)]

    differing, accepted = _judge(all_mutants, "workspace_size", ns, same, ex.check_workspace_size, secrets)
    _record(mutant_counts, "4 workspace", len(all_mutants), differing, differing - len(accepted))
    assert differing >= 40 and not accepted, accepted


def test_workspace_classic_mutants_get_their_hint():
    ns = {"minimum": np.minimum, "maximum": np.maximum}
    for old, new, hint in [("-(-max_seq_len // 128)", "max_seq_len // 128", "a partial chunk is a chunk too"),
                           ("-(-max_seq_len // 128)", "max_seq_len", "not of tokens"),
                           ("(4 * 512 + 4)", "(2 * 512 + 2)", "bf16 partials"),
                           ("(4 * 512 + 4)", "(2 * 512 + 4)", "o_acc in bf16"),
                           ("(4 * 512 + 4)", "(4 * 576 + 4)", "576 wide"),
                           ("(4 * 512 + 4)", "(4 * 512)", "not lse_acc"),
                           (" * num_batches\n", "\n", "its own partials"),
                           ("maximum(1, sm_count // num_batches)", "sm_count // num_batches", "heur has a floor")]:
        src = WORKSPACE_REF.replace(old, new, 1)
        assert src != WORKSPACE_REF
        r = _check_mutant(ex.check_workspace_size, _compile(src, "workspace_size", ns))
        assert not r.passed and hint in r.message, (new, r.message)


# ---- exercise 5: stale reads ----------------------------------------------------------------------
STALE_REF = """
def stale_reads(buffer, seq_lens, row_stride):
    rows, width = buffer.shape
    lens = list(seq_lens) + [1] * (rows - len(seq_lens))
    out = set()
    for b in range(rows):
        for j in range(-(-lens[b] // 128)):
            r, slot = divmod(b * row_stride + j, width)
            if r >= rows or slot >= -(-lens[r] // 128):
                out.add((b, j))
    return out
"""
STALE_EXTRA = [  # padded rows in/out, and the landing row's request for the reader's
    ("padded rows do not read", STALE_REF.replace("for b in range(rows):", "for b in range(len(seq_lens)):")),
    ("padded rows write nothing", STALE_REF.replace("slot >= -(-lens[r] // 128)",
                                                    "slot >= (-(-lens[r] // 128) if r < len(seq_lens) else 0)")),
    ("reader's length", STALE_REF.replace("slot >= -(-lens[r] // 128)", "slot >= -(-lens[b] // 128)")),
    ("one row per request", STALE_REF.replace("rows, width = buffer.shape",
                                              "rows, width = len(seq_lens), buffer.numel() // len(seq_lens)")),
    ("padded rows write their whole row", STALE_REF.replace(
        "slot >= -(-lens[r] // 128)", "slot >= (-(-lens[r] // 128) if r < len(seq_lens) else width)")),
]


def _stale_domain():
    """The checker's own domain (``ex.stale_domain()``: W 2..6, rows 1..7, real rows 1..rows, row stride 1..W,
    lengths from the page edges) and its named steps."""
    return ex.stale_cases() + ex.stale_domain()


def _stale_values(fn, steps):
    try:
        return [fn(buf, list(lens), rs) for buf, lens, rs in steps]
    except Exception as e:
        return type(e).__name__


def test_stale_mutants_are_rejected(mutant_counts):
    names = {"row_stride": ["width"], "width": ["row_stride"], "rows": [], "r": ["b"], "b": ["r"], "j": []}
    all_mutants = mutants(STALE_REF.strip(), names) + [(lbl, src.strip()) for lbl, src in STALE_EXTRA]
    steps = _stale_domain()
    ref = _stale_values(_compile(STALE_REF, "stale_reads", {}), steps)
    assert ex.check_stale_reads(_compile(STALE_REF, "stale_reads", {})).passed
    secrets = {repr(sorted(t)) for t in ref if t} | {repr(t) for t in ref if t}
    differing, accepted = _judge(all_mutants, "stale_reads", {}, lambda fn: _stale_values(fn, steps) == ref,
                                 ex.check_stale_reads, secrets)
    _record(mutant_counts, "5 stale reads", len(all_mutants), differing, differing - len(accepted))
    assert differing >= 20 and not accepted, accepted


def test_stale_classic_mutants_get_their_hint():
    for (label, src), key in zip(STALE_EXTRA, ["padded_readers", "padded_writes", "landing_row", "buffer_rows",
                                               "padded_writes_all"]):
        r = ex.check_stale_reads(_compile(src, "stale_reads", {}))
        assert not r.passed and ex.STALE_MISTAKES[key] in r.message, (label, r.message)
    for old, new, key in [("-(-lens[r] // 128)", "lens[r] // 128", "round_up"),
                          ("-(-lens[r] // 128)", "lens[r]", "pages"),
                          ("b * row_stride", "b * width", "frozen_stride"),
                          ("slot >= ", "slot > ", "slot_past_end")]:
        r = ex.check_stale_reads(_compile(STALE_REF.replace(old, new), "stale_reads", {}))
        assert not r.passed and ex.STALE_MISTAKES[key] in r.message, (new, r.message)


# ---- bad inputs: every checker answers with a hint, none raises -----------------------------------
class _Weird:
    def __repr__(self):
        raise RuntimeError("no repr")

    def __iter__(self):
        raise RuntimeError("no iteration")


BAD_VALUES = [None, Ellipsis, "1", 1.5, float("nan"), float("inf"), True, [1], (1, 2), {"a": 1}, 10 ** 5000,
              -(10 ** 5000), np.float64("nan"), torch.tensor([1, 2]), torch.tensor(float("nan")),
              torch.tensor(1, device="meta"), torch.zeros(3, 3), _Weird()]


def _returning(value):
    return lambda *args: value


def _raising(exc):
    def fn(*args):
        raise exc
    return fn


def _breaking_hook(backend, bs, req_pool_indices, seq_lens, seq_lens_cpu):
    ex08.replay(backend, bs, req_pool_indices, seq_lens, seq_lens_cpu)
    backend.forward_metadata = None
    backend.cuda_graph_mla_workspace = None


def _deleting_hook(backend, *args):
    del backend.cuda_graph_kv_indices


RAISED = (ValueError(), SystemExit(3), ZeroDivisionError("x"), RuntimeError("a\nb"), NotImplementedError("stub"))
BAD_FUNCTIONS = ([_returning(v) for v in BAD_VALUES] + [_raising(e) for e in RAISED]
                 + [_breaking_hook, _deleting_hook, lambda: 0, lambda *a, **k: iter([(1,)]),
                    lambda *a: {(10 ** 5000, 0)}, lambda *a: [torch.tensor([1, 2])]])


@pytest.mark.parametrize("checker", ["check_replay", "check_workspace_size", "check_stale_reads"])
def test_function_checkers_never_raise(checker, capsys):
    check = getattr(ex, checker)
    for fn in BAD_VALUES + BAD_FUNCTIONS:
        r = _quiet(lambda: check(fn))
        assert isinstance(r, ex.ExerciseResult) and "\n" not in r.message
        assert not r.passed, (checker, r.message)  # _breaking_hook too: it drops the captured workspace
    out = capsys.readouterr().out.splitlines()
    assert len(out) == len(BAD_VALUES) + len(BAD_FUNCTIONS)
    assert all(line.startswith(("NOT YET", "PASS")) for line in out)


def test_value_checkers_never_raise(capsys):
    n = 0
    for v in BAD_VALUES:
        for args in [(v, 6, 5), (1, v, 5), (1, 6, v), (v, v, v)]:
            r = ex.check_row_stride(*args)
            assert not r.passed and "\n" not in r.message
            n += 1
        for args in [(v, "a"), (1, v), (v, v)]:
            r = ex.check_mystery(*args)
            assert not r.passed and "\n" not in r.message
            n += 1
    assert len(capsys.readouterr().out.splitlines()) == n
    # integer-likes are ints: numpy scalars and one-element tensors
    assert ex.check_row_stride(*(np.int64(a) for a in ex08.ROW_STRIDE_ANSWERS)).passed
    assert ex.check_row_stride(*(torch.tensor(a) for a in ex08.ROW_STRIDE_ANSWERS)).passed
    assert ex.check_mystery(np.int64(1), " (B) ").passed


# ---- the case sets themselves (issue 26 item 9): what each one must contain --------------------------
def test_replay_cases_cover_every_page_edge_and_both_paddings():
    lens = {n for case in ex.REPLAY_CASES for n in case}
    assert {2, 127, 128, 129, 255, 256, 257, 383, 384, 385} <= lens
    sizes = {len(case) for case in ex.REPLAY_CASES}
    assert {1, 2, 3, 4} <= sizes  # padded (1 -> 2, 3 -> 4) and exact
    assert any(-(-n // 128) == 3 for n in ex.REPLAY_CASES[0]) and len(ex.REPLAY_CASES[0]) > 1
    assert max(lens) == ex.REPLAY_SETUP["context_length"] - 1  # the longest decode: every column of W is read


def test_workspace_cases_cover_every_edge():
    cases = set(ex.WORKSPACE_CASES)
    assert {c[0] for c in cases} >= {1, 127, 128, 129, 255, 256, 257}
    for sms, ns in [(132, -1), (132, 1)]:
        assert {(L, B) for L, B, s, n in cases if (s, n) == (sms, ns)} == \
            set(itertools.product(ex.WORKSPACE_LENGTHS, ex.WORKSPACE_BATCHES))
    assert any(s // B == 0 for _, B, s, n in cases if n == -1) and any(n > 1 for *_, n in cases)
    # a split count capped anywhere (an audit's 33-, 64- and 128-chunk caps passed every enumerated case) is caught
    # by the enumerated cases alone, not by the draws' luck
    def capped(L, B, sms, ns, cap):
        ms = min(-(-L // 128), cap)
        heur = min(ms, max(1, sms // B))
        return B * (4 * 512 + 4) * 128 * (ns if ns >= 1 else -(-ms // -(-ms // heur)))

    want = [get_workspace_size(*c) for c in ex.WORKSPACE_CASES]
    for cap in (33, 64, 128, 132, 200, 263):
        assert [capped(*c, cap) for c in ex.WORKSPACE_CASES] != want, cap
    assert [capped(*c, 10 ** 9) for c in ex.WORKSPACE_CASES] == want  # uncapped: the formula itself


def test_stale_cases_cover_strides_paddings_and_edges():
    cases = ex.stale_cases()
    assert all(len(case) == 3 for case in cases)  # inputs only
    shapes = [(b.shape[1], b.shape[0], rs, tuple(lens)) for b, lens, rs in cases]
    truths = [ex._stale_variant(*case) for case in cases]
    assert {rs == 1 for W, _, rs, _ in shapes} == {True, False} and any(rs == W for W, _, rs, _ in shapes)
    assert {rows > len(lens) for _, rows, _, lens in shapes} == {True, False}  # with and without padded rows
    assert {1, 127, 128, 129, 255, 256, 257} <= {n for *_, lens in shapes for n in lens}
    # a padded row's read is stale in some step (padded readers in/out tell apart), and some padded row reads
    # its own first entry (padded writers in/out tell apart)
    assert any(b >= len(case[1]) for case, truth in zip(cases, truths) for b, _ in truth)
    assert any(rs == b.shape[1] and b.shape[0] > len(lens) for b, lens, rs in cases)
    # a padded row's read lands on another padded row's slot past its first (a padded row writing its whole row
    # tells apart)
    assert any(ex._stale_variant(*case, padded_writes="all") != truth for case, truth in zip(cases, truths))


def test_a_built_steps_page_ids_tell_nothing_of_what_was_written():
    """A review's cheat: the built steps held fresh ids (2 + i) where a step wrote and old ones (1000 + ...) where it
    did not, so "stale" could be read off the values, and the five measured steps looked up in a table made before
    the check. Every built step's buffer is now a shuffle of the ids 1 .. rows * W, and both cheats fail."""
    built = ex.stale_cases()[len(ex.STALE_ENGINE_CASES):] + ex.stale_domain()
    for buffer, _, _ in built:
        assert sorted(buffer.flatten().tolist()) == list(range(1, buffer.numel() + 1))
    table = {(b.numpy().tobytes(), tuple(lens), rs): ex._stale_variant(b, lens, rs)
             for b, lens, rs in ex.stale_cases()[:len(ex.STALE_ENGINE_CASES)]}
    for cut in (1000, None):  # the old split, and the middle of each step's ids

        def by_value(buffer, seq_lens, row_stride, cut=cut):
            key = (buffer.numpy().tobytes(), tuple(seq_lens), row_stride)
            if key in table:
                return table[key]
            rows, _ = buffer.shape
            flat = buffer.flatten().tolist()
            cut = cut or len(flat) // 2 + 1
            lens = list(seq_lens) + [1] * (rows - len(seq_lens))
            return {(b, j) for b, n in enumerate(lens) for j in range(-(-n // 128))
                    if b * row_stride + j >= len(flat) or flat[b * row_stride + j] >= cut}

        assert not ex.check_stale_reads(by_value).passed


def test_workspace_cases_enumerate_fixed_counts_above_the_sms_and_bytes_past_32_bits():
    """A review's two wrong answers, each caught only by luck of the draws before: a fixed split count capped at the
    SM count, and a byte count kept in 32 bits (wraps past 2**31). The enumerated cases now hold both edges."""
    cases = ex.WORKSPACE_CASES
    assert any(ns > sms for _, _, sms, ns in cases)
    assert any(2**31 <= get_workspace_size(*c) < 2**32 for c in cases)
    assert any(get_workspace_size(*c) >= 2**32 for c in cases)
    capped = lambda L, B, s, n: ex08.workspace_size(L, B, s, n if n == -1 else min(n, s))  # noqa: E731
    wrapped = lambda L, B, s, n: (ex08.workspace_size(L, B, s, n) + 2**31) % 2**32 - 2**31  # noqa: E731
    for wrong in (capped, wrapped):
        assert [wrong(*c) for c in cases] != [get_workspace_size(*c) for c in cases]
        with mock.patch.object(ex, "_workspace_drawn", lambda: ()):  # the enumerated cases alone catch it
            assert not ex.check_workspace_size(wrong).passed


def test_replay_pool_rows_are_a_cycle_so_a_hook_that_maps_them_backwards_is_caught():
    """A review's finding: pool rows were the batch rows reversed, an involution, so a hook that scattered where it
    should gather (pool row b for batch row req_pool_indices[b]) passed. Now from 3 rows on the rows form a cycle."""
    for rows in range(1, 5):
        order = ex._replay_order(rows)
        pool_of = {b: order.index(b) for b in range(rows)}  # batch row b takes the pool row of its prefill turn
        assert sorted(order) == list(range(rows))
        if rows >= 2:
            assert all(pool_of[b] != b for b in range(rows))  # no batch row is its pool row
        if rows >= 3:
            assert any(pool_of[pool_of[b]] != b for b in range(rows))  # not its own inverse
    backwards = REPLAY_REF.replace("req_pool_indices[:bs]", "torch.argsort(req_pool_indices[:bs]).to(torch.int32)")
    assert backwards != REPLAY_REF
    assert not ex.check_replay(_compile(backwards, "replay", {"fill_page_table": fill_page_table,
                                                              "torch": torch})).passed


def test_nothing_a_checker_hands_out_is_shared_between_calls():
    """A review's sabotage: ``toy_model()`` and ``stale_cases()`` were cached, so a learner's function could change
    them in place (weights to NaN, a buffer resized) and break every later check. Each call now builds its own."""
    assert ex.toy_model() is not ex.toy_model()
    a, b = ex.toy_model(), ex.toy_model()
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))  # seeded: the same weights
    first, again = ex.stale_cases(), ex.stale_cases()
    assert all(x[0] is not y[0] and torch.equal(x[0], y[0]) for x, y in zip(first, again))
    with torch.no_grad():
        for p in a.parameters():
            p.fill_(float("nan"))
    first[0][0].resize_(1)
    assert all(torch.isfinite(p).all() for p in ex.toy_model().parameters())
    assert ex.stale_cases()[0][0].shape == again[0][0].shape


def test_a_random_padded_case_fails_the_case_set_pins(monkeypatch):
    """Issue 26 item 9: exercise 1's fixed padded batch replaced by a random batch size is caught."""
    import random

    rng = random.Random(1)
    swapped = tuple(tuple(rng.randint(2, 384) for _ in range(rng.choice([2, 4]))) if len(c) in (1, 3) else c
                    for c in ex.REPLAY_CASES)
    monkeypatch.setattr(ex, "REPLAY_CASES", swapped)
    with pytest.raises(AssertionError):
        test_replay_cases_cover_every_page_edge_and_both_paddings()


# ---- issue 43: on a GPU, the worst wrong hooks never reach a kernel -----------------------------------
def _worst_replay_mutants() -> list:
    """The generated replay mutants that write what no page id is (token slots, garbage, ids past the cache), gather
    with the wrong indices, or change the engine's inputs: on a GPU each would fire a device-side assert."""
    ns = {"fill_page_table": fill_page_table, "torch": torch}
    names = {"bs": [], "seq_lens": ["seq_lens_cpu", "req_pool_indices"], "req_pool_indices": ["seq_lens"]}
    chosen = [src for label, src in mutants(REPLAY_REF.strip(), names)
              if label in ("req_pool_indices->seq_lens", "seq_lens->req_pool_indices", "128-1", "128*2", "128+1")]
    chosen += [src for label, src in REPLAY_EXTRA if label in ("token slots, not pages", "lengths written")]
    chosen.append(REPLAY_REF.rstrip() + "\n    backend.cuda_graph_kv_indices[:bs] += 10 ** 6\n")
    chosen.append(REPLAY_REF.rstrip() + "\n    backend.cuda_graph_kv_indices.fill_(-3)\n")
    return [_compile(src, "replay", ns) for src in chosen]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU: checks that the CUDA context survives")
def test_replay_mutants_leave_the_gpu_usable():
    """Issue 43: a wrong hook that wrote a page id past the cache fired a device-side assert in check_replay and
    killed the CUDA context for the rest of the process. The checker runs the learner's hook on the CPU and checks
    what it wrote on the host first; after the worst mutants, a normal decode on the GPU runs in the same
    process."""
    from mla_edu.serving import Engine

    worst = _worst_replay_mutants()
    assert len(worst) >= 6
    for fn in worst:
        assert not _quiet(lambda: ex.check_replay(fn)).passed
    assert all(e.runner.device.type == "cpu" for e in ex._REPLAY_ENGINES.values())
    engine = Engine(ex.toy_model(), attention_backend="cutlass_mla", defects="none", device="cuda",
                    **ex.REPLAY_SETUP)
    reqs = engine.generate([[3, 5, 7], [11, 13], [17] * 200], max_new_tokens=4)
    torch.cuda.synchronize()
    assert all(r.finished_reason in ("length", "stop") and r.error is None for r in reqs), [r.error for r in reqs]


def test_the_worst_replay_mutants_are_rejected_on_the_host():
    """The same mutants on any machine: each is rejected, and none by a failed launch ("the replay failed")."""
    for fn in _worst_replay_mutants():
        r = _quiet(lambda: ex.check_replay(fn))
        assert not r.passed and "the replay failed" not in r.message, r.message
