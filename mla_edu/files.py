"""Output files of the commands: checked before the work, written atomically after it.

A command that runs for minutes checks where it will write first (``check_out_dir``,
``check_out_file``), so a bad path fails in a second, not after the run; it then writes each file
with ``write_atomic`` (a temporary file in the same folder, then ``os.replace``), so an interrupted
write never leaves half a file where a whole one was. A path that is a symbolic link is followed:
the link's target gets the new content (in the target's folder) and the link stays a link.
Inputs are read with ``read_json`` (or ``check_in_file``): a missing file, a folder or a file that is
not JSON is refused by name before any work.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

__all__ = ["check_in_file", "check_out_dir", "check_out_file", "read_json", "write_atomic"]


def _check_writable(folder: Path, what: str, path) -> None:
    try:
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".write-check-")
    except OSError as e:
        raise ValueError(f"{what}: expected a folder this process can write, got {path} ({e.strerror})") from None
    os.close(fd)
    os.unlink(probe)


def check_out_dir(path, what: str) -> Path:
    """``path`` as a folder that exists (created, with its parents, if missing) and can be written;
    ValueError naming ``what`` (e.g. ``"--out"``) and the path otherwise."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ValueError(f"{what}: expected a folder, got {path}, which is a file")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ValueError(f"{what}: expected a folder that can be created, got {path} ({e.strerror})") from None
    _check_writable(path, what, path)
    return path


def check_out_file(path, what: str) -> Path:
    """``path`` as a file that can be written: its folder exists and is writable, and it is not a
    folder itself; ValueError naming ``what`` (e.g. ``"--json-out"``) and the path otherwise."""
    if str(path) == "":
        raise ValueError(f"{what}: expected a file name, got an empty one")
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{what}: expected a file name, got {path}, which is a folder")
    folder = Path(os.path.realpath(path)).parent  # a link's target's folder: write_atomic writes there
    if not folder.is_dir():
        raise ValueError(f"{what}: expected a file in an existing folder, got {path} (no folder {folder})")
    _check_writable(folder, what, path)
    return path


def check_in_file(path, what: str) -> Path:
    """``path`` as a file that exists and is not a folder; ValueError naming ``what`` (e.g. ``"--render"``)."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{what}: expected a file, got {path}, which is a folder")
    if not path.is_file():
        raise ValueError(f"{what}: expected an existing file, got {path}, which does not exist")
    return path


def read_json(path, what: str):
    """The JSON value in the file at ``path``; ValueError naming ``what`` for a missing file, a folder, or text
    that is not JSON."""
    path = check_in_file(path, what)
    try:
        return json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{what}: expected a JSON file, got {path}, which is not JSON ({e})") from None


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_atomic(path, data: str | bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same folder and ``os.replace``:
    readers see the old file or the new one, never a part. The new file keeps the old one's mode, or gets
    the umask's for a new file. A symbolic link is followed: its target is replaced and the link stays."""
    path = Path(os.path.realpath(path))
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")  # mode 0600
    try:
        f = os.fdopen(fd, "wb" if isinstance(data, bytes) else "w")  # from here f owns fd and closes it
    except BaseException:
        os.close(fd)
        os.unlink(tmp)
        raise
    try:
        with f:
            os.chmod(tmp, path.stat().st_mode & 0o777 if path.exists() else 0o666 & ~_umask())
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
