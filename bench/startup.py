"""Benchmark: the fixed cost of starting the ``digest`` command.

    python bench/startup.py [--runs 7]

Prints the wall time (median of ``--runs``) of ``python -c pass``,
``digest --help``, ``digest preview --date D --format md`` (against a
digest built once from the bundled samples in a temporary folder) and
``digest status`` (a read command that opens the database), each
one's ratio to a bare interpreter, and the CPU time (user + system,
median) the command used: on a machine shared with other work the CPU time
moves less than the wall time. As a yardstick, the import of the libraries
the two read commands cannot do without (SQLAlchemy's asyncio layer and the
SQLite driver, plus croniter for status): as a plain script does it, and
as a digest command does (``bootstrap.start_heap`` first: fewer cycle
collections, none at exit, which alone spares the libraries 0.07 s of
teardown), and what each command costs beyond the latter. The first
preview keeps its compiled template in the var dir, as any run does: the
median is that of the runs after it. Targets: ``--help`` under 0.3 s,
every command's fixed cost under 0.4 s.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NOW = dt.datetime(2026, 12, 5, 3, 0, tzinfo=dt.UTC)  # the samples' clock, as in tests/test_cli.py
sys.path.insert(0, str(ROOT))

from digest.domain.window import latest_closed  # noqa: E402

DATE = latest_closed(NOW, "Asia/Shanghai").isoformat()  # the day the samples build at NOW
LIBRARIES = "import sqlalchemy.ext.asyncio, sqlalchemy.dialects.sqlite.aiosqlite"
HEAP = "from digest.bootstrap import start_heap; start_heap(); "  # as digest.cli.main.main begins
AS_DIGEST = ("  the first, as digest starts (start_heap)", "  the second, as digest starts (start_heap)")


def environment(tmp: Path) -> dict[str, str]:
    """A private database and clock; the caller's DIGEST_* settings left out.

    Bytecode is written and used as an installed command's is: with PYTHONDONTWRITEBYTECODE
    inherited, every run would compile each module it imports again and time that.
    """
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("DIGEST_") and k != "PYTHONDONTWRITEBYTECODE"}
    env.update(DIGEST_DATABASE_URL=f"sqlite+aiosqlite:///{tmp / 'bench.db'}",
               DIGEST_VAR_DIR=str(tmp / "var"), DIGEST_NOW=NOW.isoformat(),
               DIGEST_SOURCES=str(tmp / "samples" / "sources.toml"), PYTHONPATH=str(ROOT))
    return env


def digest(*args: str) -> list[str]:
    """The command line of ``digest ARGS`` (run as ``python -m digest``)."""
    return [sys.executable, "-m", "digest", *args]


def prepare(tmp: Path, env: dict[str, str]) -> None:
    """Compile the package, write the samples and build the day once: preview has a digest to print."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "digest")], env=env, check=True,
                   stdout=subprocess.DEVNULL)
    for args in (("samples", "--out", str(tmp / "samples")), ("run",)):
        subprocess.run(digest(*args), env=env, cwd=tmp, check=True, capture_output=True)


def _cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def median_seconds(argv: list[str], env: dict[str, str], cwd: Path, runs: int) -> tuple[float, float]:
    """The median wall and CPU times of ``runs`` runs of ``argv`` (output discarded, failure raised)."""
    wall, cpu = [], []
    for _ in range(runs):
        start, used = time.perf_counter(), _cpu()
        subprocess.run(argv, env=env, cwd=cwd, check=True, stdout=subprocess.DEVNULL)
        wall.append(time.perf_counter() - start)
        cpu.append(_cpu() - used)
    return statistics.median(wall), statistics.median(cpu)


def main() -> int:
    parser = argparse.ArgumentParser(description="the start-up cost of digest commands")
    parser.add_argument("--runs", type=int, default=7, help="runs of each command (median)")
    runs = parser.parse_args().runs
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        env = environment(tmp)
        prepare(tmp, env)
        commands = {
            "python -c pass": [sys.executable, "-c", "pass"],
            "digest --help": digest("--help"),
            f"digest preview --date {DATE} --format md": digest("preview", "--date", DATE, "--format", "md"),
            "digest status": digest("status"),
            # the yardstick: the libraries a read command cannot do without (the database layer and
            # its SQLite driver; status also reads the schedule with croniter), imported and no more,
            # then the same with the collector run as a digest command runs it
            "import sqlalchemy async + aiosqlite": [sys.executable, "-c", LIBRARIES],
            "import the same + croniter": [sys.executable, "-c", f"{LIBRARIES}, croniter"],
            AS_DIGEST[0]: [sys.executable, "-c", HEAP + LIBRARIES],
            AS_DIGEST[1]: [sys.executable, "-c", f"{HEAP}{LIBRARIES}, croniter"],
        }
        timings = {label: median_seconds(argv, env, tmp, runs) for label, argv in commands.items()}
    base = timings["python -c pass"][0]
    print(f"{'command':<48} {'median s':>9} {'x python':>9} {'cpu s':>7}   (median of {runs})")
    for label, (seconds, cpu) in timings.items():
        print(f"{label:<48} {seconds:>9.3f} {seconds / base:>9.1f} {cpu:>7.3f}")
    own = {"preview": timings[f"digest preview --date {DATE} --format md"][0] - timings[AS_DIGEST[0]][0],
           "status": timings["digest status"][0] - timings[AS_DIGEST[1]][0]}
    print("beyond the libraries they need, imported as digest starts: "
          + ", ".join(f"{name} {seconds:.3f} s" for name, seconds in own.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
