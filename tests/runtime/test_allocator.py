"""drumbeat.runtime.allocator: which malloc the crawl's processes run on, and how it gets there."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from drumbeat.runtime import allocator

MIMALLOC = allocator.library("auto") if "mimalloc" in (allocator.library("auto") or "") else None
needs_mimalloc = pytest.mark.skipif(
    MIMALLOC is None,
    reason="libmimalloc is not installed (.ci/run installs it: apt-get install libmimalloc2.0)",
)


def _in_use(env: dict[str, str]) -> str:
    return subprocess.run(
        [sys.executable, "-c", "from drumbeat.runtime import allocator; print(allocator.in_use())"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.strip()


def test_choices() -> None:
    assert allocator.library("system") is None
    with pytest.raises(ValueError, match="unknown allocator"):
        allocator.library("tcmalloc")
    for name in ("mimalloc", "jemalloc"):
        try:
            lib = allocator.library(name)
        except allocator.AllocatorMissing as e:
            assert "apt-get install" in str(e)  # tells the operator what to do
        else:
            assert lib is not None and name in lib


def test_preload_env_puts_the_library_first_once() -> None:
    env = allocator.preload_env("libx.so.2", {"LD_PRELOAD": "liby.so libx.so.2", "A": "1"})
    assert env == {"LD_PRELOAD": "libx.so.2 liby.so", "A": "1", "PYTHONSAFEPATH": "1"}
    assert allocator.preload_env(None, {"A": "1"}) == {"A": "1", "PYTHONSAFEPATH": "1"}


def test_a_plain_process_runs_on_the_system_malloc() -> None:
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    assert _in_use(env) == "system"


@needs_mimalloc
def test_a_process_started_with_preload_env_runs_on_mimalloc() -> None:
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    assert _in_use(allocator.preload_env(MIMALLOC, env)) == "mimalloc"


@needs_mimalloc
def test_drumbeat_executes_itself_again_once_with_the_allocator(tmp_path) -> None:
    """`python -m drumbeat crawl` re-executes with mimalloc, so the manager and its
    fetcher processes run on it; --allocator system keeps glibc's malloc in both."""
    env = {
        k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "DRUMBEAT_ALLOCATOR_REEXEC")
    }
    for choice, expected in (("auto", "mimalloc"), ("system", "system")):
        state = tmp_path / choice
        # Port 1 on loopback refuses connections: the crawl runs its 2 s and stops.
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "drumbeat",
                "crawl",
                "http://127.0.0.1:1/",
                "--state",
                str(state),
                "--allow-loopback",
                "--allocator",
                choice,
                "--fetchers",
                "1",
                "--max-time",
                "2",
                "--no-progress",
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 0, proc.stderr
        stages = json.loads((state / "stages.json").read_text())
        assert stages["allocator"] == {"manager": expected, "fetchers": [expected]}
        assert f"malloc: {expected}" in (state / "drumbeat.log").read_text()


@needs_mimalloc
def test_the_crawl_is_imported_only_by_the_process_executed_again(tmp_path) -> None:
    """The process that executes itself again for its allocator checks the flags
    without importing the crawl's modules, which would be imported again after it; the
    manager leaves the fetcher's modules to its fetcher processes."""
    env = {
        k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "DRUMBEAT_ALLOCATOR_REEXEC")
    }
    env["PYTHONPROFILEIMPORTTIME"] = "1"  # every process lists its imports on stderr
    proc = subprocess.run(
        [sys.executable, "-m", "drumbeat", "crawl", "http://127.0.0.1:1/",
         "--state", str(tmp_path / "state"), "--allow-loopback", "--web", "127.0.0.1:0",
         "--fetchers", "1", "--max-time", "1", "--no-progress"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    imported = [line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines()]
    # Two interpreters started the manager (drumbeat.cli twice); one imported the crawl.
    assert imported.count("drumbeat.cli") == 2
    assert imported.count("drumbeat.standalone") == 1
    assert imported.count("drumbeat.web.server") == 1
    # The fetcher's code is its process's alone (--fetchers 1): the manager needs none.
    assert imported.count("drumbeat.fetcher") == 1


@needs_mimalloc
def test_a_lone_fetcher_imports_its_role_only_once_executed_again(tmp_path, redis_server) -> None:
    """`drumbeat fetcher --processes 1` executes itself again for its allocator, and
    imports the cluster's code only then."""
    env = {
        k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "DRUMBEAT_ALLOCATOR_REEXEC")
    }
    env["PYTHONPROFILEIMPORTTIME"] = "1"
    state, err_path = tmp_path / "fetcher", tmp_path / "stderr"
    with open(err_path, "w") as err_file:  # a pipe would fill up and block the process
        proc = subprocess.Popen(
            [sys.executable, "-m", "drumbeat", "fetcher", "--redis", redis_server.url,
             "--state", str(state), "--processes", "1"],
            env=env,
            stderr=err_file,
        )  # fmt: skip
    try:
        log = state / "drumbeat.log"
        deadline = time.monotonic() + 60
        while not (log.exists() and "serving the crawls" in log.read_text()):
            assert proc.poll() is None and time.monotonic() < deadline, "no fetcher started"
            time.sleep(0.1)
        proc.terminate()
        proc.wait(timeout=60)
    finally:
        proc.kill()
    err = err_path.read_text()
    assert proc.returncode == 0, err[-2000:]
    imported = [line.rsplit("|", 1)[-1].strip() for line in err.splitlines()]
    assert imported.count("drumbeat.cli") == 2
    assert imported.count("drumbeat.cluster") == 1


def _shadow(directory) -> None:
    """A ``drumbeat`` package in ``directory`` that fails on import, as a stale source
    checkout or another project's package would."""
    (directory / "drumbeat").mkdir()
    (directory / "drumbeat" / "__init__.py").write_text(
        "raise ImportError('the drumbeat in the current directory was imported')\n"
    )


def test_child_processes_import_this_processes_drumbeat(tmp_path) -> None:
    """A child started with preload_env's environment imports drumbeat from where this
    process did, not from its current directory."""
    import drumbeat

    _shadow(tmp_path)
    where = subprocess.run(
        [sys.executable, "-c", "import drumbeat; print(drumbeat.__file__)"],
        env=allocator.preload_env(None),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert where.returncode == 0, where.stderr
    assert where.stdout.strip() == drumbeat.__file__


@pytest.mark.parametrize("cwd_holds", ["package", "state_dir"])
def test_a_crawl_runs_from_a_directory_holding_a_drumbeat(tmp_path, cwd_holds) -> None:
    """`drumbeat crawl` started from a directory with a `drumbeat` package, or with its
    state dir named `drumbeat`: the re-executed manager and the fetcher processes still run
    the drumbeat that the command started with."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    if cwd_holds == "package":
        _shadow(cwd)
    state = cwd / "drumbeat" / "state" if cwd_holds == "package" else cwd / "drumbeat"
    # As the `drumbeat` console script does: its own directory, not the current one, is
    # first on the import path.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "drumbeat").write_text(
        "import sys\nfrom drumbeat.cli import main\nsys.exit(main())\n"
    )
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("LD_PRELOAD", "DRUMBEAT_ALLOCATOR_REEXEC", "PYTHONSAFEPATH")
    }
    proc = subprocess.run(
        [
            sys.executable,
            str(bin_dir / "drumbeat"),
            "crawl",
            "http://127.0.0.1:1/",
            "--state",
            str(state.relative_to(cwd)),
            "--allow-loopback",
            "--fetchers",
            "1",
            "--max-time",
            "2",
            "--no-progress",
        ],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    stages = json.loads((state / "stages.json").read_text())
    expected = "mimalloc" if MIMALLOC else "system"  # the manager was executed again
    assert stages["allocator"] == {"manager": expected, "fetchers": [expected]}
