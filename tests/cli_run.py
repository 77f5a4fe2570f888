"""Running a command line in-process, as the tests of its flags do."""

import importlib

import pytest


def cli_module(module: str):
    """The module whose ``main`` is ``python -m module``: the module, or a package's ``__main__``."""
    mod = importlib.import_module(module)
    return importlib.import_module(module + ".__main__") if hasattr(mod, "__path__") else mod


def main_exit(module: str, argv, capsys) -> tuple:
    """``python -m module argv`` in-process must exit through argparse: (exit status, stderr)."""
    with pytest.raises(SystemExit) as info:
        cli_module(module).main(argv)
    return info.value.code, capsys.readouterr().err
