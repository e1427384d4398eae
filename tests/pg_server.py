"""A real, throwaway PostgreSQL server for the tests (and the store benchmark).

Where the binaries come from, first found wins:

1. ``pgserver`` (in the ``test`` extra): a PyPI wheel that ships PostgreSQL's binaries,
   so ``nox -s tests`` gets a server on a fresh machine with nothing installed by hand;
2. ``$TOOLNEXUS_PG_BIN``, then Debian's ``/usr/lib/postgresql/<N>/bin``.

The server runs ``initdb`` and ``pg_ctl`` on a fresh temporary directory, listens on a
free loopback port (with a password: scram-sha-256) and on a socket in that directory,
with ``fsync=off`` (the data is thrown away) unless asked to be durable. PostgreSQL refuses to run as root, so as
root (CI) it runs as ``nobody``, on a copy of the binaries if their directory is not
reachable by other users.
"""

from __future__ import annotations

import importlib.util
import os
import pwd
import shutil
import socket
import stat
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

USER = "toolnexus"
PASSWORD = "pg-test-" + uuid.uuid4().hex  # unique, so a test can look for it in output


def find_binaries() -> Path | None:
    """The directory holding ``initdb``/``pg_ctl``/``postgres``, or ``None``."""
    spec = importlib.util.find_spec("pgserver")
    if spec is not None and spec.submodule_search_locations:
        for location in spec.submodule_search_locations:
            candidate = Path(location) / "pginstall" / "bin"
            if (candidate / "pg_ctl").exists():
                return candidate
    if os.environ.get("TOOLNEXUS_PG_BIN"):
        return Path(os.environ["TOOLNEXUS_PG_BIN"])
    debian = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"), reverse=True)
    return debian[0].parent if debian else None


def _reachable_by_others(path: Path) -> bool:
    return all(p.stat().st_mode & stat.S_IXOTH for p in [path, *path.parents])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class PgServer:
    """One running server; :meth:`dsn` names a database on it, :meth:`restart` bounces it."""

    def __init__(self, bindir: Path, root: Path, *, durable: bool = False) -> None:
        self.durable = durable
        self.bindir = bindir
        self.root = root
        self.data = root / "data"
        self.port = _free_port()
        self._as: dict[str, Any] = {}
        if os.geteuid() == 0:
            nobody = pwd.getpwnam("nobody")
            self._as = {"user": nobody.pw_uid, "group": nobody.pw_gid, "extra_groups": []}
            os.chown(root, nobody.pw_uid, nobody.pw_gid)
            if not _reachable_by_others(bindir):
                # e.g. a clone under /root: copy the install (bin, lib, share) next to
                # the data, where nobody can run it.
                # pgserver's binaries find their libraries at $ORIGIN/../../../pgserver.libs
                # (auditwheel): keep that layout.
                copy = root / "site" / "pgserver" / "pginstall"
                shutil.copytree(bindir.parent, copy, symlinks=True)
                libs = bindir.parents[2] / "pgserver.libs"
                if libs.is_dir():
                    shutil.copytree(libs, root / "site" / "pgserver.libs", symlinks=True)
                self.bindir = copy / "bin"

    def _run(self, *args: str) -> None:
        done = subprocess.run(
            [str(self.bindir / args[0]), *args[1:]],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
            **self._as,
        )
        if done.returncode != 0:
            log = self.root / "server.log"
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise RuntimeError(f"{args[0]} failed: {done.stdout}{done.stderr}\n{tail}")

    def init(self) -> None:
        pwfile = self.root / "pw"
        pwfile.write_text(PASSWORD + "\n")
        if self._as:
            os.chown(pwfile, self._as["user"], self._as["group"])
        self._run(
            "initdb", "-D", str(self.data), "-U", USER, "--pwfile", str(pwfile),
            "-A", "scram-sha-256", "-E", "UTF8", "--locale=C", "--no-sync",
        )  # fmt: skip
        pwfile.unlink()

    def start(self) -> None:
        options = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 "
            f"-c unix_socket_directories={self.root} -c max_connections=200"
        )
        if not self.durable:  # the tests throw the data away: no need to flush it
            options += " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        log = str(self.root / "server.log")
        self._run(
            "pg_ctl", "-D", str(self.data), "-l", log, "-w", "-t", "60", "-o", options, "start"
        )

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop")

    def restart(self, mode: str = "fast") -> None:
        """Stop (``fast``: sessions are ended; ``immediate``: every backend quits at once,
        releasing nothing on its way out) and start again on the same port."""
        self.stop(mode)
        self.start()

    def pids(self) -> list[int]:
        """The server's processes: the postmaster (``postmaster.pid``) and its children."""
        main = int((self.data / "postmaster.pid").read_text().split("\n", 1)[0])
        found = [main]
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat_line = (entry / "stat").read_text()
            except OSError:  # gone meanwhile
                continue
            # "pid (comm) state ppid ...": comm may hold spaces, so split after the ")".
            if int(stat_line.rsplit(")", 1)[1].split()[1]) == main:
                found.append(int(entry.name))
        return found

    def dsn(self, dbname: str = "postgres") -> str:
        return f"postgresql://{USER}:{PASSWORD}@127.0.0.1:{self.port}/{dbname}"

    def admin(self, sql: str) -> None:
        """Run *sql* outside a transaction (``CREATE/DROP DATABASE``)."""
        import psycopg

        with psycopg.connect(self.dsn(), autocommit=True) as connection:
            connection.execute(sql.encode())

    @contextmanager
    def database(self) -> Iterator[str]:
        """A fresh database for one test: its DSN; dropped afterwards."""
        name = "t_" + uuid.uuid4().hex[:16]
        self.admin(f"CREATE DATABASE {name}")
        try:
            yield self.dsn(name)
        finally:
            self.admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@contextmanager
def running_server(*, durable: bool = False) -> Iterator[PgServer | None]:
    """A started server, stopped and deleted on exit; ``None`` without binaries.

    *durable*: flush commits to disk as a production server does (the benchmark);
    the tests' server does not.
    """
    bindir = find_binaries()
    if bindir is None:
        yield None
        return
    root = Path(tempfile.mkdtemp(prefix="toolnexus-pg-"))
    server = PgServer(bindir, root, durable=durable)
    try:
        server.init()
        server.start()
        try:
            yield server
        finally:
            server.stop("immediate")
    finally:
        shutil.rmtree(root, ignore_errors=True)
