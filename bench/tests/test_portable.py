"""The published benchmark command and report name no path of the machine they ran on.

Run with any Python that has pytest (the suite's modules need only the standard library here):

    python -m pytest bench/tests -p no:cacheprovider
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

# bench/suite is a folder of scripts, not a package: import its modules the way bench/run.py does.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "suite"))

from portable import REPO, portable_paths, recorded_command
from report import END, START, update_docs

CHECKOUT = Path("/home/me/src/insitu")
HOME = Path("/home/me")


def test_the_nox_interpreter_path_is_recorded_relative_to_the_repository() -> None:
    interpreter = CHECKOUT / ".nox" / "bench-insitubatch-py312" / "bin" / "python"
    command = recorded_command(["--docs", "--insitubatch-python", str(interpreter)], CHECKOUT, HOME)
    assert (
        command == "python bench/run.py --docs --insitubatch-python .nox/bench-insitubatch-py312/bin/python"
    )


def test_other_paths_become_relative_or_start_with_the_home_directory() -> None:
    arguments = [
        "--out",
        str(CHECKOUT),
        "--torch-python",
        "/home/me/.pyenv/versions/3.12.1/bin/python",
        "--work=/home/me/src/insitu/bench/work",
        "--cases",
        "c1",
    ]
    assert recorded_command(arguments, CHECKOUT, HOME) == (
        "python bench/run.py --out . --torch-python ~/.pyenv/versions/3.12.1/bin/python "
        "--work=bench/work --cases c1"
    )


def test_look_alike_paths_are_left_alone() -> None:
    text = "/home/me/src/insitu2/x /srv/home/me/src/insitu/y /tmp/insitu-bench"
    assert (
        portable_paths(text, CHECKOUT, HOME) == "~/src/insitu2/x /srv/home/me/src/insitu/y /tmp/insitu-bench"
    )


def test_this_checkout_never_appears_in_a_recorded_command() -> None:
    interpreter = REPO / ".nox" / "bench-insitubatch-py312" / "bin" / "python"
    command = recorded_command(
        ["--insitubatch-python", str(interpreter), "--out", str(REPO / "bench" / "results")]
    )
    assert str(REPO) not in command
    assert "--insitubatch-python .nox/bench-insitubatch-py312/bin/python" in command
    assert "--out bench/results" in command


def test_the_docs_section_of_an_old_results_file_names_no_checkout(tmp_path: Path) -> None:
    # A results file written before commands were recorded portably, with an error quoting a source file.
    python = f"{REPO}/.nox/bench-insitubatch-py312/bin/python"
    results = {
        "created": "2026-11-29T21:51:43+00:00",
        "command": f"python bench/run.py --insitubatch-python {python}",
        "settings": {},
        "machine": {},
        "notes": [f"skipped insitubatch: interpreter {python} does not start"],
        "checks": {"errors": []},
    }
    target = tmp_path / "benchmarks.md"
    target.write_text(f"# Benchmarks\n\n{START}\nold\n{END}\n")
    assert update_docs(results, target, tmp_path / "img")
    text = target.read_text()
    assert str(REPO) not in text
    assert (
        "- Command: `python bench/run.py --insitubatch-python .nox/bench-insitubatch-py312/bin/python`"
        in text
    )
    assert "interpreter .nox/bench-insitubatch-py312/bin/python does not start" in text


def test_the_committed_docs_command_has_no_absolute_path() -> None:
    docs = (REPO / "docs" / "benchmarks.md").read_text()
    commands = re.findall(r"^- Command: `([^`]*)`", docs, flags=re.M)
    assert commands, "docs/benchmarks.md has no recorded command"
    for command in commands:
        absolute = [word for word in command.split() if word.startswith("/") or "=/" in word]
        assert not absolute, f"machine paths in the recorded command: {absolute}"
