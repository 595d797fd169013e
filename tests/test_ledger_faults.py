"""Faults outside the file's content: paths, file types, permissions, full disks, threads, fork.

Each must surface as a LedgerError subclass naming the path and the cause (never a raw sqlite3
error, never a hang), and the command line prints one line and exits 2.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading

import pytest

from dpkd_audit import BudgetExceededError, Ledger, LedgerError
from dpkd_audit.cli.main import main
from dpkd_audit.errors import LedgerAccessError, LedgerCorruptError
from dpkd_audit.events import PureDpEvent
from dpkd_audit.ledger import store


@pytest.fixture(autouse=True)
def _no_key_in_environment(monkeypatch):
    monkeypatch.delenv("DPKD_LEDGER_KEY", raising=False)
    monkeypatch.delenv("DPKD_LEDGER_KEY_FILE", raising=False)


@pytest.fixture
def no_hang():
    """Fail (instead of hanging the suite) if a test blocks for 20 s."""
    def alarm(signum, frame):
        raise TimeoutError("the ledger blocked for 20 s")

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(20)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def _one_line_error(capsys, argv, *needles):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    for needle in needles:
        assert needle in err, err
    return err


# ------------------------------------------------------------------------ paths and file types


def test_missing_directory_is_named(tmp_path, capsys):
    path = tmp_path / "missing" / "l.sqlite"
    for attempt in (lambda: Ledger(epsilon=1.0, path=path), lambda: Ledger.open(path)):
        with pytest.raises(LedgerAccessError, match="does not exist") as info:
            attempt()
        assert str(path) in str(info.value)
    assert not (tmp_path / "missing").exists()
    _one_line_error(capsys, ["demo", "--ledger", str(path)], "does not exist")


def test_missing_file_is_not_created_by_open(tmp_path, capsys):
    path = tmp_path / "l.sqlite"
    with pytest.raises(LedgerAccessError, match="no ledger"):
        Ledger.open(path)
    assert not path.exists()
    _one_line_error(capsys, ["ledger", str(path)], "no ledger")


def _fifo(tmp_path):
    path = tmp_path / "fifo"
    os.mkfifo(path)
    return path


@pytest.mark.parametrize("kind", ["fifo", "directory", "device", "fifo-journal", "dangling"])
def test_non_regular_paths_are_refused_at_once(tmp_path, capsys, no_hang, kind):
    path = {"fifo": lambda: _fifo(tmp_path), "directory": lambda: tmp_path,
            "device": lambda: tmp_path / "null", "fifo-journal": lambda: tmp_path / "l.sqlite",
            "dangling": lambda: tmp_path / "link"}[kind]()
    if kind == "device":
        os.symlink("/dev/null", path)
    if kind == "fifo-journal":
        Ledger(epsilon=1.0, path=path).close()
        os.mkfifo(f"{path}-journal")
    if kind == "dangling":
        os.symlink(tmp_path / "nowhere", path)
    expected = {"fifo": "FIFO", "directory": "directory", "device": "character device",
                "fifo-journal": "journal", "dangling": "symbolic link"}[kind]
    attempts = [lambda: Ledger(epsilon=1.0, path=path)]
    if kind != "dangling":
        attempts += [lambda: Ledger.open(path), lambda: Ledger.open(path, read_only=True)]
    for attempt in attempts:
        with pytest.raises(LedgerAccessError, match=expected) as info:
            attempt()
        assert str(path) in str(info.value)
    if kind != "dangling":
        _one_line_error(capsys, ["ledger", str(path)], expected)
        _one_line_error(capsys, ["demo", "--ledger", str(path)], str(path))
    assert not (tmp_path / "nowhere").exists()  # nothing created through a dangling link


def test_cli_reports_tampered_and_keyed_files_in_one_line(tmp_path, capsys, monkeypatch):
    path = tmp_path / "l.sqlite"
    with Ledger(epsilon=1.0, path=path) as ledger:
        ledger.charge(PureDpEvent(0.2), label="x")
    conn = sqlite3.connect(path)
    conn.execute("DELETE FROM charges")
    conn.commit()
    conn.close()
    _one_line_error(capsys, ["ledger", str(path)], "refusing", str(path))
    keyed = tmp_path / "k.sqlite"
    Ledger(epsilon=1.0, path=keyed, key=b"k" * 20).close()
    _one_line_error(capsys, ["ledger", str(keyed)], "no key was given")
    monkeypatch.setenv("DPKD_LEDGER_KEY", "k" * 20)
    assert main(["ledger", str(keyed)]) == 0
    assert "HMAC-SHA256" in capsys.readouterr().out


# ------------------------------------------------------------------------ read-only files

_READ_ONLY_CHECKS = textwrap.dedent("""
    import json, sys
    from dpkd_audit import Ledger
    from dpkd_audit.errors import LedgerAccessError, LedgerError
    from dpkd_audit.events import PureDpEvent
    plain, hot, fresh = sys.argv[1:4]
    out = {}
    for name, attempt in (("constructor", lambda: Ledger(epsilon=1.0, path=plain)),
                          ("open", lambda: Ledger.open(plain)),
                          ("create", lambda: Ledger(epsilon=1.0, path=fresh)),
                          ("hot", lambda: Ledger.open(hot, read_only=True))):
        try:
            attempt()
            out[name] = "opened"
        except LedgerAccessError as exc:
            out[name] = str(exc)
    reader = Ledger.open(plain, read_only=True)
    out["charges"] = reader.spent().charges
    try:
        reader.charge(PureDpEvent(0.1), label="x")
    except LedgerError as exc:
        out["charge"] = str(exc)
    from dpkd_audit.cli.main import main
    out["cli"] = main(["ledger", plain])
    print("JSON" + json.dumps(out))
""")


def _run_read_only(directory, *args):
    """Run the checks with ``directory`` read-only (chmod; for root, a read-only bind mount)."""
    command = [sys.executable, "-c", _READ_ONLY_CHECKS, *map(str, args)]
    if os.geteuid() != 0:
        modes = {p: p.stat().st_mode for p in [directory, *directory.iterdir()]}
        for p in modes:
            p.chmod(0o555 if p.is_dir() else 0o444)
        try:
            out = subprocess.run(command, capture_output=True, text=True, timeout=120)
        finally:
            for p, mode in modes.items():
                p.chmod(mode)
    else:
        if shutil.which("unshare") is None:
            pytest.skip("running as root without unshare: cannot make a read-only file")
        script = ('mount --bind "$0" "$0" && mount -o remount,ro,bind "$0" && exec "$@"')
        out = subprocess.run(["unshare", "-rm", "sh", "-c", script, str(directory), *command],
                             capture_output=True, text=True, timeout=120)
        if "JSON" not in out.stdout and ("mount" in out.stderr or "unshare" in out.stderr):
            pytest.skip(f"cannot make a read-only mount here: {out.stderr.strip()}")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.split("JSON", 1)[1])


def test_read_only_file_is_readable_but_never_charged(tmp_path):
    from test_ledger_crash import _leave_hot_journal

    directory = tmp_path / "ro"
    directory.mkdir()
    plain, hot = directory / "plain.sqlite", directory / "hot.sqlite"
    for path in (plain, hot):
        with Ledger(epsilon=1.0, path=path) as ledger:
            ledger.charge(PureDpEvent(0.2), label="before")
    _leave_hot_journal(hot)
    out = _run_read_only(directory, plain, hot, directory / "fresh.sqlite")
    assert "read_only=True" in out["constructor"] and str(plain) in out["constructor"]
    assert "read_only=True" in out["open"]
    assert "fresh.sqlite" in out["create"]
    assert "hot journal" in out["hot"] and "write access" in out["hot"]
    assert out["charges"] == 1
    assert "read-only" in out["charge"]
    assert out["cli"] == 0
    # with write access again, the hot journal is rolled back and nothing was lost
    assert Ledger.open(hot, read_only=True).spent().charges == 1


# ------------------------------------------------------------------------ full disk


def _charge_until_full(ledger):
    acknowledged = 0
    for i in range(10_000):
        try:
            ledger.charge(PureDpEvent(1e-6), label=f"release {i} " + "x" * 2000)
        except LedgerError as exc:
            return acknowledged, exc
        acknowledged += 1
    raise AssertionError("the disk never filled up")


def test_full_disk_is_reported_as_such_and_records_nothing(tmp_path, monkeypatch):
    """Simulated with PRAGMA max_page_count on the ledger's own connection."""
    path = tmp_path / "l.sqlite"
    Ledger(epsilon=1.0, path=path).close()
    connect = store.connect

    def small_disk(*args, **kwargs):
        conn = connect(*args, **kwargs)
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        conn.execute(f"PRAGMA max_page_count={pages + 3}")
        return conn

    monkeypatch.setattr(store, "connect", small_disk)
    ledger = Ledger.open(path)
    acknowledged, error = _charge_until_full(ledger)
    assert isinstance(error, LedgerAccessError)
    message = str(error)
    assert "full" in message and str(path) in message and "not recorded" in message
    assert "cannot rollback" not in message
    assert ledger.spent().charges == acknowledged  # the handle is still consistent
    monkeypatch.undo()
    reopened = Ledger.open(path)
    assert reopened.spent().charges == acknowledged > 0
    reopened.charge(PureDpEvent(0.1), label="after space was freed")


_FULL_DISK_CHECKS = textwrap.dedent("""
    import json, os, sys
    from dpkd_audit import Ledger
    from dpkd_audit.errors import LedgerError
    from dpkd_audit.events import PureDpEvent
    directory = sys.argv[1]
    path = os.path.join(directory, "l.sqlite")
    ledger = Ledger(epsilon=1.0, path=path)
    acknowledged, message = 0, None
    for i in range(100000):
        try:
            ledger.charge(PureDpEvent(1e-6), label=f"release {i} " + "x" * 2000)
        except LedgerError as exc:
            message = f"{type(exc).__name__}: {exc}"
            break
        acknowledged += 1
    try:
        Ledger(epsilon=1.0, path=os.path.join(directory, "second.sqlite"))
        create = "created"
    except LedgerError as exc:
        create = f"{type(exc).__name__}: {exc}"
    ledger.close()
    reopened = Ledger.open(path).spent().charges
    print("JSON" + json.dumps({"acknowledged": acknowledged, "message": message,
                               "create": create, "reopened": reopened,
                               "files": sorted(os.listdir(directory))}))
""")


def test_full_tmpfs_is_reported_as_such_and_records_nothing(tmp_path):
    """A real full file system: a 64 KiB tmpfs in a user and mount namespace (if permitted)."""
    if shutil.which("unshare") is None:
        pytest.skip("unshare is not available")
    directory = tmp_path / "small"
    directory.mkdir()
    script = 'mount -t tmpfs -o size=64k tmpfs "$0" && exec "$@"'
    out = subprocess.run(["unshare", "-rm", "sh", "-c", script, str(directory), sys.executable,
                          "-c", _FULL_DISK_CHECKS, str(directory)],
                         capture_output=True, text=True, timeout=120)
    if "JSON" not in out.stdout:
        pytest.skip(f"cannot mount a small tmpfs here: {out.stderr.strip()[-300:]}")
    result = json.loads(out.stdout.split("JSON", 1)[1])
    assert result["message"].startswith("LedgerAccessError")
    assert "full" in result["message"] and "cannot rollback" not in result["message"]
    assert result["reopened"] == result["acknowledged"] > 0
    assert result["create"].startswith("LedgerAccessError") and "full" in result["create"]
    assert result["files"] == ["l.sqlite"]  # no half-created ledger, no temporary file left


# ------------------------------------------------------------------------ threads and fork


def test_a_ledger_can_be_charged_from_another_thread(tmp_path):
    ledger = Ledger(epsilon=1.0, path=tmp_path / "l.sqlite")
    errors = []

    def work():
        try:
            for i in range(5):
                ledger.charge(PureDpEvent(0.1), label=f"t{i}")
        except Exception as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert ledger.spent().charges == 10
    with pytest.raises(BudgetExceededError):
        ledger.charge(PureDpEvent(0.1), label="eleventh")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_ledger_survives_fork(tmp_path):
    ledger = Ledger(epsilon=1.0, path=tmp_path / "l.sqlite")
    ledger.charge(PureDpEvent(0.3), label="parent before")
    pid = os.fork()
    if pid == 0:  # the child uses the inherited handle: it must open its own connection
        code = 1
        try:
            ledger.charge(PureDpEvent(0.3), label="child")
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert [c.label for c in ledger.charges()] == ["parent before", "child"]
    with pytest.raises(BudgetExceededError):
        ledger.charge(PureDpEvent(0.5), label="parent after")


@pytest.mark.parametrize("label", ["a\x00b", "\ud800", ""])
def test_bad_labels_are_named(tmp_path, label):
    ledger = Ledger(epsilon=1.0, path=tmp_path / "l.sqlite")
    with pytest.raises(ValueError, match="label"):
        ledger.charge(PureDpEvent(0.1), label=label)
    assert ledger.spent().charges == 0


def test_corrupt_error_is_a_ledger_error():
    assert issubclass(LedgerCorruptError, LedgerError)
    assert issubclass(LedgerAccessError, LedgerError)
