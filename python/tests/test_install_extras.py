"""The install line the docs give (Docs/TESTING-APPS.md, "Install"; python/README.md) names
extras that exist in pyproject.toml and that give the documented example what it needs: pytest
for the plugin, rootcanal (pinned to the version whose binary runs on Debian 12) for the radio,
and a distribution for every module the example imports beyond the standard library."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import tomllib

from test_docs_example import example_block

ROOT = Path(__file__).resolve().parents[2]
INSTALL_LINE = re.compile(r"pip install '\./python\[([a-z,]+)\]'")


def documented_extras(path: Path) -> list[set[str]]:
    return [set(found.split(",")) for found in INSTALL_LINE.findall(path.read_text())]


def requirement_names(requirements: list[str]) -> set[str]:
    return {re.split(r"[<>=!~\[ ;]", requirement, maxsplit=1)[0].lower() for requirement in requirements}


def test_the_documented_install_line_gives_the_example_what_it_imports_and_runs_on() -> None:
    install = ROOT / "Docs" / "TESTING-APPS.md"
    lines = documented_extras(install)
    assert lines, f"no `pip install './python[EXTRAS]'` line in {install}"
    # python/README.md gives the same line, then blemu-pandora's (the test below).
    assert documented_extras(ROOT / "python" / "README.md")[:1] == lines[:1], "python/README.md gives another line"
    extras = tomllib.loads((ROOT / "python" / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for named in lines:
        assert named <= set(extras), f"extras {sorted(named - set(extras))} are not in pyproject.toml"
    requirements = [r for extra in sorted(lines[0]) for r in extras[extra]]
    installed = requirement_names(requirements)

    imported = set()
    for node in ast.walk(ast.parse(example_block())):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            imported.add(node.module.split(".")[0])
    beyond_stdlib = {module for module in imported if module not in sys.stdlib_module_names}
    assert beyond_stdlib, "the example imports nothing beyond the standard library: check the parse"
    assert beyond_stdlib <= installed, f"the example imports {sorted(beyond_stdlib - installed)}, not installed by the line"
    assert "pytest" in installed  # the example is a pytest test, its fixtures the plugin's
    assert "rootcanal==1.10.0" in requirements  # blemu_rootcanal starts one; newer ones need glibc 2.38


# The distribution of each module blemu-pandora imports beyond the standard library and the kit.
PANDORA_DISTRIBUTIONS = {"grpc": "grpcio", "pandora": "bt-test-interfaces", "google": "bt-test-interfaces"}  # protobuf comes with it


def test_the_pandora_extra_gives_blemu_pandora_what_it_imports_and_the_docs_name_it() -> None:
    """`pip install './python[pandora]'` (python/README.md, Docs/TEST-FRAMEWORKS.md) installs
    every distribution the server's modules import, and the console script points at its main."""
    project = tomllib.loads((ROOT / "python" / "pyproject.toml").read_text())["project"]
    installed = requirement_names(project["optional-dependencies"]["pandora"])
    imported = set()
    for source in (ROOT / "python" / "blemu_testkit" / "pandora").glob("*.py"):
        for node in ast.walk(ast.parse(source.read_text())):
            if isinstance(node, ast.Import):
                imported |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                imported.add(node.module.split(".")[0])
    beyond = {m for m in imported if m not in sys.stdlib_module_names and m != "blemu_testkit"}
    assert beyond == set(PANDORA_DISTRIBUTIONS), f"blemu-pandora imports {sorted(beyond)}: name their distributions here"
    assert {PANDORA_DISTRIBUTIONS[m] for m in beyond} <= installed
    assert project["scripts"]["blemu-pandora"] == "blemu_testkit.pandora.server:main"
    for doc in (ROOT / "python" / "README.md", ROOT / "Docs" / "TEST-FRAMEWORKS.md"):
        assert {"pandora"} in documented_extras(doc), f"{doc.name} does not give `pip install './python[pandora]'`"
