"""A real IMAP server for the tests: Debian's Dovecot, started on an ephemeral port with a
configuration, a passwd-file login and a TLS certificate made for the test, and stopped after.

Dovecot will not deliver to uid 0: run as root, its mail user is Dovecot's own, and the mail
lives in a folder of the system's temporary directory that user can reach (a test's tmp_path
is root's alone). Everything else (configuration, key, logins) stays in tmp_path.
"""

from __future__ import annotations

import contextlib
import imaplib
import os
import pwd
import shutil
import socket
import ssl
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.certificates import self_signed

DOVECOT = Path("/usr/sbin/dovecot")
USER, PASSWORD = "bounces", "a password for the tests"


@dataclass(frozen=True)
class ImapServer:
    port: int
    ca_file: Path
    """The certificate the server presents (self-signed, for localhost): what to trust."""
    log: Path

    def url(self, folder: str = "INBOX") -> str:
        return f"imaps://{USER}@localhost:{self.port}/{folder}"

    @contextlib.contextmanager
    def client(self, folder: str = "INBOX") -> Iterator[imaplib.IMAP4_SSL]:
        """A login of the test's own, to put mail in and look at what became of it."""
        tls = ssl.create_default_context(cafile=str(self.ca_file))
        imap = imaplib.IMAP4_SSL("localhost", self.port, ssl_context=tls, timeout=30)
        try:
            imap.login(USER, PASSWORD)
            imap.select(f'"{folder}"')
            yield imap
        finally:
            imap.logout()

    def append(self, data: bytes, folder: str = "INBOX") -> None:
        with self.client(folder) as imap:
            kind, said = imap.append(f'"{folder}"', None, None, data)
            assert kind == "OK", said

    def folder(self, name: str) -> list[bytes]:
        """Every message of folder ``name``, byte for byte, in order ([] if there is none)."""
        with self.client() as imap:
            kind, _ = imap.select(f'"{name}"', readonly=True)
            if kind != "OK":
                return []
            _, [uids] = imap.uid("SEARCH", "ALL")
            found = []
            for uid in uids.split():
                _, data = imap.uid("FETCH", uid, "(BODY.PEEK[])")
                found.extend(part[1] for part in data if isinstance(part, tuple))
            return found


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _config(folder: Path, port: int, cert: Path, key: Path, users: Path) -> str:
    user = pwd.getpwnam("dovecot").pw_name if os.geteuid() == 0 else pwd.getpwuid(os.getuid())[0]
    login = "dovenull" if os.geteuid() == 0 else user
    return f"""
base_dir = {folder}/run
state_dir = {folder}/state
log_path = {folder}/dovecot.log
protocols = imap
listen = 127.0.0.1
ssl = required
ssl_cert = <{cert}
ssl_key = <{key}
default_internal_user = {user}
default_login_user = {login}
auth_mechanisms = plain
passdb {{
  driver = passwd-file
  args = {users}
}}
userdb {{
  driver = passwd-file
  args = {users}
}}
mail_location = maildir:~/Maildir
first_valid_uid = 1
service imap-login {{
  chroot =
  inet_listener imap {{
    port = 0
  }}
  inet_listener imaps {{
    port = {port}
    ssl = yes
  }}
}}
service anvil {{
  chroot =
}}
service auth {{
  user = {"root" if os.geteuid() == 0 else user}
}}
"""


def _ready(process: subprocess.Popen[bytes], port: int, deadline: float) -> bool:
    """Whether Dovecot took the port (False: it ended, as when the port was taken)."""
    while time.monotonic() < deadline and process.poll() is None:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
            return True
        time.sleep(0.05)
    return False


@contextlib.contextmanager
def dovecot(tmp_path: Path) -> Iterator[ImapServer]:
    """Dovecot serving one login, ``USER`` with ``PASSWORD``, over IMAPS on localhost."""
    folder = tmp_path / "dovecot"
    folder.mkdir()
    cert, key = self_signed(folder)
    owner = pwd.getpwnam("dovecot") if os.geteuid() == 0 else pwd.getpwuid(os.getuid())
    home = Path(tempfile.mkdtemp(prefix="syndicate-imap-"))
    os.chown(home, owner.pw_uid, owner.pw_gid)
    users = folder / "users"
    users.write_text(f"{USER}:{{PLAIN}}{PASSWORD}:{owner.pw_uid}:{owner.pw_gid}::{home}\n")
    users.chmod(0o600)
    try:
        for _ in range(5):  # the free port may be taken before Dovecot binds it: another
            port = _free_port()
            (folder / "dovecot.conf").write_text(_config(folder, port, cert, key, users))
            process = subprocess.Popen(
                [str(DOVECOT), "-F", "-c", str(folder / "dovecot.conf")],
                stdout=subprocess.DEVNULL,
                stderr=(folder / "stderr").open("wb"),
            )
            if _ready(process, port, time.monotonic() + 30):
                break
            _stop(process)
        else:
            raise RuntimeError(f"Dovecot did not start: {(folder / 'stderr').read_text()}")
        try:
            yield ImapServer(port, cert, folder / "dovecot.log")
        finally:
            _stop(process)
    finally:
        shutil.rmtree(home, ignore_errors=True)


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
