"""``digest --help`` imports no heavy library (in the style of lemon24/reader's test_lazy_imports).

A fresh interpreter runs the CLI and prints ``sys.modules``: a module that imports a
client library at its top would show up here long before anyone notices the second of
start-up it costs. A command that reads a database already at the head of the
migrations does not load Alembic (nor Mako and Pygments behind it); one that is behind
still gets migrated. The read commands (``preview``, ``events``, ``status``, ``subscribers
list``) load neither the network clients nor the pipeline's analysers and writers, nor
pydantic (the settings are checked by the standard library), and with the shipped schedule
not croniter either (its import forks ``file``). A preview compiles its templates once: the
next process loads them from the var dir. A command builds the parser of its own command group
alone, and leaves its heap frozen for the exit.
"""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
from pathlib import Path

import pytest
from alembic.script import ScriptDirectory
from croniter import croniter
from sqlalchemy import text

from digest import bootstrap
from digest.config import DEFAULT_SCHEDULE, load_settings
from digest.domain.errors import ConfigError
from digest.store.db import alembic_config, make_engine, migrate, open_database
from digest.store.reports import save_report
from tests.archive import DAY, NOW, build_archive

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("sqlalchemy", "openai", "jinja2", "feedparser", "httpx", "discord", "telegram", "aiosmtplib",
         "alembic", "starlette", "uvicorn", "pydantic", "pydantic_settings", "email_validator")
# loading and checking the settings needs none of these (digest.config is the standard library only)
PYDANTIC = ("pydantic", "pydantic_core", "pydantic_settings")
# what printing a built digest needs none of: the migration tool, the network clients, the web server
NOT_FOR_PREVIEW = ("alembic", "mako", "pygments", "openai", "feedparser", "httpx", "discord", "telegram",
                   "aiosmtplib", "starlette", "uvicorn", "croniter", *PYDANTIC)
# what a read command needs none of besides: the migration tool, the clients, the web server, the
# pipeline's parts (status reads the schedule, so croniter is left out of this list)
NOT_FOR_READING = ("alembic", "mako", "pygments", "openai", "feedparser", "httpx", "discord", "telegram",
                   "aiosmtplib", "starlette", "uvicorn", "jinja2", "bot", "digest.build", "digest.analyze",
                   "digest.write", "digest.ingest.fetch", "digest.ingest.normalize", "digest.daily",
                   "digest.service", "digest.web", "digest.deliver.publish", "digest.deliver.smtp", *PYDANTIC)
SCRIPT = """
import sys
from digest.cli.main import main
try:
    code = main({argv!r})
except SystemExit as exc:
    code = exc.code
print(code, " ".join(sorted(sys.modules)), file=sys.stderr)
"""


def run_cli(argv: list[str], env: dict[str, str] | None = None,
            cwd: Path = ROOT) -> tuple[object, set[str]]:
    """The exit code of ``digest ARGV`` in a fresh interpreter, and the top-level packages it then holds."""
    code, modules = run_cli_modules(argv, env, cwd)
    return code, {name.split(".")[0] for name in modules}


def run_cli_modules(argv: list[str], env: dict[str, str] | None = None,
                    cwd: Path = ROOT) -> tuple[object, set[str]]:
    """The exit code of ``digest ARGV`` in a fresh interpreter, and every module it then holds."""
    out = subprocess.run([sys.executable, "-c", SCRIPT.format(argv=argv)], capture_output=True,
                         text=True, cwd=cwd, timeout=120, check=True, env=env)
    code, *names = out.stderr.strip().splitlines()[-1].split()
    return code, set(names)


def loaded_by(argv: list[str]) -> set[str]:
    """The top-level packages a fresh interpreter holds after ``digest ARGV`` (help or a usage error)."""
    return run_cli(argv)[1]


def unwanted(modules: set[str], names: tuple[str, ...]) -> set[str]:
    """The modules of ``modules`` that are one of ``names`` or inside one of those packages."""
    return {m for m in modules for name in names if m == name or m.startswith(name + ".")}


@pytest.mark.parametrize("argv", [["--help"], ["sources", "--help"], ["preview", "--help"],
                                  ["subscribers", "remove", "--help"], ["buidl"]])
def test_help_and_usage_errors_import_no_heavy_library(argv: list[str]) -> None:
    assert loaded_by(argv) & set(HEAVY) == set()


def _env(tmp_path: Path, url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DIGEST_")}
    env.update(DIGEST_DATABASE_URL=url, DIGEST_VAR_DIR=str(tmp_path / "var"))
    return env


@pytest.mark.parametrize("fmt", ["md", "json"])
async def test_preview_of_a_current_database_loads_no_migration_tool(tmp_path: Path, fmt: str) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'lazy.db'}"
    async with open_database(url) as sessions:
        await build_archive(sessions)
    code, loaded = run_cli(["preview", "--date", DAY.isoformat(), "--format", fmt], _env(tmp_path, url),
                           cwd=tmp_path)
    assert code == "0"
    assert {"sqlalchemy", "aiosqlite", "digest"} <= loaded  # it did read the digest
    assert loaded & set(NOT_FOR_PREVIEW) == set()


COUNT_COMPILES = """
import sys, jinja2
compiled = []
compile_ = jinja2.Environment.compile
jinja2.Environment.compile = lambda self, *args, **kw: compiled.append(1) or compile_(self, *args, **kw)
from digest.cli.main import main
code = main({argv!r})
print(code, len(compiled), file=sys.stderr)
"""


@pytest.mark.parametrize("fmt", ["md", "html", "email"])
async def test_a_later_preview_compiles_no_template(tmp_path: Path, fmt: str) -> None:
    """The first preview keeps its compiled templates in the var dir; the next process loads them."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'var' / 'compiled.db'}"  # a var dir (never made for the cache)
    async with open_database(url) as sessions:
        await build_archive(sessions)
    argv = ["preview", "--date", DAY.isoformat(), "--format", fmt]
    runs = [subprocess.run([sys.executable, "-c", COUNT_COMPILES.format(argv=argv)], capture_output=True,
                           text=True, cwd=tmp_path, timeout=120, check=True, env=_env(tmp_path, url))
            for _ in range(2)]
    counts = [run.stderr.strip().splitlines()[-1].split() for run in runs]
    assert counts[0][0] == counts[1][0] == "0" and int(counts[0][1]) > 0 and counts[1][1] == "0"
    assert fmt == "email" or runs[0].stdout == runs[1].stdout  # a message has its own Date and boundary


async def test_preview_and_events_load_no_pipeline_part(tmp_path: Path) -> None:
    """Printing stored write-ups needs neither the extractive writer nor the analysers behind it."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'read.db'}"
    async with open_database(url) as sessions:
        await build_archive(sessions)
    for argv in (["preview", "--date", DAY.isoformat(), "--format", "md"],
                 ["events", "--date", DAY.isoformat(), "--json"]):
        code, modules = run_cli_modules(argv, _env(tmp_path, url), cwd=tmp_path)
        assert code == "0", argv
        assert "digest.store.queries" in modules  # it did read the digest
        allowed_here = ("jinja2",) if argv[0] == "preview" else ()
        assert unwanted(modules, tuple(n for n in NOT_FOR_READING if n not in allowed_here)) == set(), argv


@pytest.mark.parametrize("argv", [["status"], ["status", "--json"], ["subscribers", "list"]])
async def test_read_commands_load_no_client_pipeline_or_renderer(tmp_path: Path, argv: list[str]) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'status.db'}"
    async with open_database(url):
        pass
    code, modules = run_cli_modules(argv, _env(tmp_path, url), cwd=tmp_path)
    assert code == "0"
    assert "sqlalchemy" in modules and "digest.store.db" in modules  # it did open the database
    assert unwanted(modules, NOT_FOR_READING) == set()


@pytest.mark.parametrize(("argv", "group"), [(["status"], "status"), (["preview", "--help"], "digests"),
                                             (["subscribers", "list"], "subscribers")])
async def test_a_command_loads_its_own_group_alone(tmp_path: Path, argv: list[str], group: str) -> None:
    """Its parser is built without the other groups' modules (``digest --help`` has them all)."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'group.db'}"
    async with open_database(url):
        pass
    code, modules = run_cli_modules(argv, _env(tmp_path, url), cwd=tmp_path)
    assert code == "0"
    assert {m for m in modules if m.startswith("digest.cli.")} == {"digest.cli.main", "digest.cli.output",
                                                                  f"digest.cli.{group}"}
    assert {m for m in run_cli_modules(["--help"])[1] if m.startswith("digest.cli.")} >= {
        f"digest.cli.{name}" for name in ("ingest", "status", "subscribers", "web", "bots")}


@pytest.mark.parametrize("argv", [["preview", "--date", DAY.isoformat(), "--format", "md"], ["status"]])
async def test_loading_the_settings_imports_no_pydantic(tmp_path: Path, argv: list[str]) -> None:
    """Issue #15: pydantic-settings cost every command about 0.2 s; the settings need the standard library."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'settings.db'}"
    async with open_database(url) as sessions:
        await build_archive(sessions)
    env = {**_env(tmp_path, url), "DIGEST_LOCALES": "zh,en", "DIGEST_SCORE_WEIGHTS": '{"novelty": 5}',
           "DIGEST_TRUSTED_PROXIES": "127.0.0.1", "DIGEST_NOW": NOW.isoformat()}
    code, modules = run_cli_modules(argv, env, cwd=tmp_path)
    assert code == "0", argv
    assert {"digest.config", "digest.settings_fields"} <= modules  # the settings were loaded and checked
    assert unwanted(modules, PYDANTIC) == set(), argv


async def test_report_prints_the_last_run_without_loading_the_pipeline(tmp_path: Path) -> None:
    """`digest report` formats a stored report: the service and the pipeline stay unloaded."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'report.db'}"
    when = dt.datetime(2026, 9, 29, 8, tzinfo=dt.UTC)
    report = {"date": "2026-09-29", "ok": True, "error": None, "sources": {"ok": 3, "failed": []},
              "entries": 7, "events": 2, "built": True, "published": True, "deliveries": {},
              "llm": {"calls": 0, "tokens": 0}, "seconds": 1.5}
    async with open_database(url) as sessions, sessions() as session:
        await save_report(session, date=when.date(), trigger="scheduled", started=when,
                          finished=when, ok=True, report=report)
        await session.commit()
    code, modules = run_cli_modules(["report"], _env(tmp_path, url), cwd=tmp_path)
    assert code == "0" and "digest.render.report_text" in modules
    assert unwanted(modules, (*NOT_FOR_READING, "digest.service")) == set()


def test_the_shipped_schedule_is_a_cron_expression_without_loading_croniter() -> None:
    assert croniter.is_valid(DEFAULT_SCHEDULE)
    assert load_settings().schedule == DEFAULT_SCHEDULE


@pytest.mark.parametrize("schedule", ["0 9 * * 1-5", "30 7,19 * * *"])
def test_a_configured_schedule_is_still_checked(monkeypatch: pytest.MonkeyPatch, schedule: str) -> None:
    monkeypatch.setenv("DIGEST_SCHEDULE", schedule)
    assert load_settings().schedule == schedule
    monkeypatch.setenv("DIGEST_SCHEDULE", schedule.replace("*", "61", 1))
    with pytest.raises(ConfigError, match=r"^DIGEST_SCHEDULE: not a cron expression") as info:
        load_settings()
    assert "\n" not in str(info.value)


def test_the_head_read_without_alembic_is_alembics() -> None:
    assert bootstrap.schema_head() == ScriptDirectory.from_config(alembic_config()).get_current_head()


async def test_a_database_behind_the_head_is_migrated_on_open(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'old.db'}"
    engine = make_engine(url)
    try:
        await migrate(engine, "0005")
    finally:
        await engine.dispose()
    async with bootstrap.database(load_settings(database_url=url, var_dir=tmp_path / "var")) as sessions, \
            sessions() as session:
        found = (await session.scalars(text("SELECT version_num FROM alembic_version"))).all()
    assert found == [bootstrap.schema_head()] and found != ["0005"]


def test_a_command_leaves_its_heap_frozen_for_the_exit() -> None:
    """The teardown would collect every module's cycles again (~0.08 s once SQLAlchemy is loaded).

    A handler registered before main runs after main's own ones: by then the heap is frozen.
    """
    code = ("import atexit, gc\n"
            "atexit.register(lambda: print('frozen at exit:', gc.get_freeze_count() > 0))\n"
            "from digest.cli.main import main\n"
            "try:\n"
            "    main(['--version'])\n"
            "except SystemExit:\n"
            "    pass\n"
            "print('frozen before exit:', gc.get_freeze_count() > 0)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.splitlines()[-2:] == ["frozen before exit: False", "frozen at exit: True"]


def test_the_pipeline_loads_openai_only_for_a_client() -> None:
    """`fetch`, `build` and `serve` without an LLM key never pay for the openai SDK's import."""
    code = ("import sys, digest.daily, digest.service, digest.write.llm\n"
            "print('openai' in sys.modules)\n"
            "from digest.domain.retry import RetryPolicy\n"
            "from digest.write.llm import ChatTransport\n"
            "ChatTransport('k', 'http://127.0.0.1:9', 'm', 1.0, RetryPolicy())\n"
            "print('openai' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["False", "True"]
