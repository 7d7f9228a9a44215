"""Writing output files: the one place that does.

Every document lands whole or not at all: it is written to a hidden temporary file beside its
name, named after its writer's process, then renamed into place. A reader of the folder sees
the old file or the new one, never half of one; a writer killed part-way (``kill -9``, a power
cut) leaves a temporary file that ``sweep_leftovers`` recognises and removes.

Who may read a file is decided here too (``file_mode``): what holds readers (addresses,
consent, personal links) is its owner's alone, whatever the umask; the rest is public.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import glob
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

PUBLIC = 0o644
"""Pages, feeds and the rest of the site: anyone may read them."""
PRIVATE = 0o600
"""What holds readers (addresses, consent records, personal links) or a secret."""
PUBLIC_FOLDER = 0o755
"""A folder of the public site."""
PRIVATE_FOLDER = 0o700
"""A folder made for private files (the state folder): its names are nobody else's either."""
PRIVATE_SUFFIXES = frozenset({".eml"})
"""Names that say what a file holds whoever writes it: a message has an address and links."""


def file_mode(path: Path, *, private: bool = False) -> int:
    """The mode a file written here gets: owner-only when it holds readers (``private``, or a
    name that says so), else readable by all. The one place that decides: under umask 022 a
    file the default way is 0644, every reader's address for any user of the machine."""
    return PRIVATE if private or path.suffix in PRIVATE_SUFFIXES else PUBLIC


def private_folder(folder: Path) -> None:
    """Make ``folder`` (and its parents) where missing; ``folder`` itself, if made now, is
    its owner's alone (a folder that exists is left as its owner set it)."""
    folder.mkdir(mode=PRIVATE_FOLDER, parents=True, exist_ok=True)


def create_private(path: Path) -> None:
    """Create ``path`` empty and owner-only unless it exists, before another program (SQLite)
    creates it with the umask's mode; its folder too (``private_folder``)."""
    private_folder(path.parent)
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE))


def make_private(path: Path) -> None:
    """Owner-only, for a file another library wrote with the umask's mode (a Maildir's)."""
    os.chmod(path, PRIVATE)


def readable_by_others(path: Path) -> bool:
    """Whether a file that exists lets users other than its owner in (group or others)."""
    try:
        return bool(path.stat().st_mode & 0o077)
    except FileNotFoundError:
        return False


def write_atomic(path: Path, data: bytes, *, private: bool = False) -> bool:
    """Replace ``path`` with ``data`` unless it already holds exactly that; True if written.
    A document staged and put in place on its own: see ``Staging``; ``private``: owner-only
    (``file_mode``)."""
    staging = Staging(path.parent, private=private)
    try:
        staging.add(path.name, data)
        written, _ = staging.commit()
    except BaseException:
        staging.discard()
        raise
    return bool(written)


def write_once(path: Path, data: bytes, *, mode: int = PRIVATE) -> None:
    """Create ``path`` with ``data`` unless it exists; when two processes race, the first
    one's file stays and the other's is dropped (a generated key must not change under a
    process that already uses it)."""
    fd, tmp = _temporary_beside(path, private=mode == PRIVATE)
    try:
        with _writing(path), os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.close()
            os.chmod(tmp, mode)
            with contextlib.suppress(FileExistsError):  # another process's came first: theirs
                os.link(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)


@contextmanager
def atomic_file(path: Path, *, private: bool = False) -> Iterator[BinaryIO]:
    """A file to write ``path``'s new content into; it replaces ``path`` when the block ends
    without an error, and is removed when it does not."""
    mode = file_mode(path, private=private)
    fd, tmp = _temporary_beside(path, private=mode == PRIVATE)
    try:
        with _writing(path), os.fdopen(fd, "wb") as handle:
            yield handle
            handle.close()
            os.chmod(tmp, mode)
            os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@contextmanager
def staged_folder(where: Path) -> Iterator[Path]:
    """A new folder to fill in place of ``where``; it replaces ``where`` (whatever was there)
    when the block ends without an error, and is removed either way."""
    where.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{where.name}.", dir=where.parent))
    try:
        yield tmp
        if where.exists():  # damaged, or just written by another process
            shutil.rmtree(where, ignore_errors=True)
        os.replace(tmp, where)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@contextmanager
def swapped_folder(where: Path) -> Iterator[Path]:
    """A new folder beside ``where`` to fill; when the block ends without an error it takes
    ``where``'s place in one step (on Linux, where the two are exchanged: a server reading
    ``where`` sees the whole old folder or the whole new one, never neither) and the old one
    is removed. On an error it is removed and ``where`` is left as it was."""
    where.parent.mkdir(parents=True, exist_ok=True)
    _sweep_folders(where)
    tmp = Path(
        tempfile.mkdtemp(prefix=f".{where.name}.{os.getpid()}.", suffix=".new", dir=where.parent)
    )
    try:
        yield tmp
        os.chmod(tmp, PUBLIC_FOLDER)
        if not where.exists():
            os.replace(tmp, where)
        elif not _exchange(tmp, where):  # another system: moved aside, then replaced
            aside = Path(
                tempfile.mkdtemp(
                    prefix=f".{where.name}.{os.getpid()}.", suffix=".old", dir=where.parent
                )
            )
            os.replace(where, aside / where.name)
            os.replace(tmp, where)
            shutil.rmtree(aside, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def write_new(path: Path, data: bytes, *, previous: Path | None = None) -> None:
    """A public file, in a folder no reader sees yet (``swapped_folder``'s). When
    ``previous`` (its place in the folder this one replaces) holds the same bytes, the file
    keeps its mtime: the Last-Modified and ETag a web server derives from it stay, and so do
    the caches of a page that did not change."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with _writing(path):
        path.write_bytes(data)
        os.chmod(path, PUBLIC)
    if previous is None:
        return
    try:
        before = previous.stat()
        if before.st_size == len(data) and previous.read_bytes() == data:
            os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    except OSError:  # gone, or not a file: a new file
        pass


def _exchange(new: Path, old: Path) -> bool:
    """Exchange two folders' names in one step (Linux's renameat2 RENAME_EXCHANGE); False
    where the system or its file system cannot."""
    if sys.platform != "linux":
        return False
    renameat2 = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
    if renameat2 is None:
        return False
    at_cwd, exchange = -100, 2
    if renameat2(at_cwd, os.fsencode(new), at_cwd, os.fsencode(old), exchange) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(code, os.strerror(code), str(old))


def _sweep_folders(where: Path) -> None:
    """Remove the folders that a ``swapped_folder`` killed part-way left beside ``where``."""
    for tmp in where.parent.glob(f".{glob.escape(where.name)}.*.*"):
        pid, *_, suffix = tmp.name[len(where.name) + 2 :].split(".")
        left = suffix in ("new", "old") and pid.isdigit() and not _running(int(pid))
        if left and tmp.is_dir():
            shutil.rmtree(tmp, ignore_errors=True)


class Staging:
    """Documents on their way into a folder: each goes to a temporary file beside its name as
    soon as it is made, and ``commit`` puts them all in place once everything is made
    (``discard`` removes them). A reader of the folder sees old documents or new ones, never
    a half-written one, and a build that fails leaves the old ones. A document whose bytes
    did not change is left alone, so its mtime (and the Last-Modified a web server derives
    from it) stays. ``private``: every document owner-only (``file_mode``)."""

    def __init__(self, folder: Path, *, private: bool = False) -> None:
        self.folder = folder
        self.private = private
        self.files: dict[str, str | None] = {}  # name -> its temporary file; None: unchanged

    def add(self, name: str, data: bytes) -> None:
        path = self.folder / name
        mode = file_mode(path, private=self.private)
        try:
            if path.stat().st_size == len(data) and path.read_bytes() == data:
                if mode == PRIVATE and readable_by_others(path):  # written before it was
                    os.chmod(path, mode)
                self.files[name] = None
                return
        except FileNotFoundError:
            pass
        fd, tmp = _temporary_beside(path, private=mode == PRIVATE)
        try:
            with _writing(path), os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.close()
                os.chmod(tmp, mode)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        self.files[name] = tmp

    def keep(self, name: str) -> None:
        """Leave the document ``name`` as it is: made by an earlier build, and known unchanged."""
        self.files.setdefault(name, None)

    def commit(self) -> tuple[list[str], list[str]]:
        """Put every new document in place; the names written and those left unchanged."""
        for name, tmp in self.files.items():
            if tmp is not None:
                with _writing(self.folder / name):
                    os.replace(tmp, self.folder / name)
        written = [name for name, tmp in self.files.items() if tmp is not None]
        return written, [name for name, tmp in self.files.items() if tmp is None]

    def discard(self) -> None:
        for tmp in self.files.values():
            if tmp is not None:
                Path(tmp).unlink(missing_ok=True)


def sweep_leftovers(folder: Path) -> None:
    """Remove the temporary files that writers killed part-way (``kill -9``, a power cut)
    left below ``folder``; a file whose process is still running is its writer's."""
    for tmp in folder.rglob(".*.tmp"):
        parts = tmp.name.split(".")  # "", name parts..., pid, random, "tmp"
        if len(parts) >= 5 and parts[-3].isdigit() and not _running(int(parts[-3])):
            tmp.unlink(missing_ok=True)


def file_stats(root: Path, names: list[str]) -> dict[str, list[int]]:
    """Size and mtime (ns) of each of ``names`` below ``root`` that exists."""
    found = {}
    for name in names:
        try:
            st = (root / name).stat()
        except FileNotFoundError:
            continue
        found[name] = [st.st_size, st.st_mtime_ns]
    return found


@contextmanager
def _writing(path: Path) -> Iterator[None]:
    """An OSError while ``path`` is written names ``path``, not its temporary file (nor
    nothing, as a failed write does)."""
    try:
        yield
    except OSError as exc:
        temporary = os.path.join(path.parent, f".{path.name}.")
        if exc.filename is None or os.fspath(exc.filename).startswith(temporary):
            exc.filename, exc.filename2 = str(path), None
        raise


def _temporary_beside(path: Path, *, private: bool = False) -> tuple[int, str]:
    """A new hidden file in ``path``'s folder, named after ``path`` and this process, whose
    id tells ``sweep_leftovers`` whether the file's writer is still at work; the folder, if
    made for a private file, is private too."""
    with _writing(path):
        if private:
            private_folder(path.parent)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
        prefix = f".{path.name}.{os.getpid()}."
        return tempfile.mkstemp(prefix=prefix, suffix=".tmp", dir=path.parent)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True
