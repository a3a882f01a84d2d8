"""scripts/check-layering on hand-made packages (no blemu, no radio): a target that imports one of
its package's modules without declaring it fails the check, in every spelling of `import`; a
declared one, a module from outside, and text that only looks like an import pass."""

from __future__ import annotations

import subprocess
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CHECK = REPO / "scripts" / "check-layering"

MANIFEST = """\
// swift-tools-version: 6.1
import PackageDescription

let package = Package(
    name: "layers",
    products: [.library(name: "LayersKit", targets: ["Bottom", "Middle"])],
    targets: [
        .target(name: "Bottom"),
        .target(name: "Middle", dependencies: ["Bottom"]),
        .target(name: "Top", dependencies: [{top}]),
        .testTarget(name: "TopTests", dependencies: [{tests}]),
    ]
)
"""

# Every spelling of an import of Bottom, which Top reaches only through Middle.
TOP_IMPORTS = """\
import Middle
import Glibc
@testable import Bottom
@_implementationOnly import Bottom
public import struct Bottom.Brick
// import Elsewhere: a comment is not an import
/* import Elsewhere
   nor a block comment */
let text = \"\"\"
import Elsewhere
\"\"\"
"""


def make_package(root: Path, top: str, tests: str, consumer_depends_on_product: bool) -> Path:
    package = root / "layers"
    (package / "Sources" / "Bottom").mkdir(parents=True)
    (package / "Sources" / "Middle").mkdir(parents=True)
    (package / "Sources" / "Top").mkdir(parents=True)
    (package / "Tests" / "TopTests").mkdir(parents=True)
    (package / "Package.swift").write_text(MANIFEST.replace("{top}", top).replace("{tests}", tests))
    (package / "Sources" / "Bottom" / "Brick.swift").write_text("public struct Brick {}\n")
    (package / "Sources" / "Middle" / "Wall.swift").write_text("import Bottom\npublic struct Wall { let brick: Brick }\n")
    (package / "Sources" / "Top" / "House.swift").write_text(TOP_IMPORTS)
    (package / "Tests" / "TopTests" / "HouseTests.swift").write_text("import Testing\n@testable import Top\nimport Middle\n")
    # A second package that uses the first by path, through its product: the product's modules
    # are declared, the target outside it is not.
    consumer = root / "consumer"
    (consumer / "Sources" / "App").mkdir(parents=True)
    dependency = '.product(name: "LayersKit", package: "layers")' if consumer_depends_on_product else ""
    (consumer / "Package.swift").write_text(textwrap.dedent(f"""\
        // swift-tools-version: 6.1
        import PackageDescription

        let package = Package(
            name: "consumer",
            dependencies: [.package(path: "../layers")],
            targets: [.executableTarget(name: "App", dependencies: [{dependency}])]
        )
        """))
    (consumer / "Sources" / "App" / "main.swift").write_text("import Bottom\nimport Middle\nimport Top\n")
    return package


def run_check(*packages: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(CHECK), *map(str, packages)], capture_output=True, text=True, timeout=600,
                          cwd=packages[0].parent)


def test_an_undeclared_import_fails_in_every_spelling(tmp_path):
    package = make_package(tmp_path, top='"Middle"', tests='"Top"', consumer_depends_on_product=True)
    result = run_check(package, tmp_path / "consumer")
    assert result.returncode == 1, result.stdout + result.stderr
    lines = [line for line in result.stderr.splitlines() if " imports " in line]
    assert lines == [
        "layers/Sources/Top/House.swift:3: Top imports Bottom, not among its dependencies in layers/Package.swift",
        "layers/Sources/Top/House.swift:4: Top imports Bottom, not among its dependencies in layers/Package.swift",
        "layers/Sources/Top/House.swift:5: Top imports Bottom, not among its dependencies in layers/Package.swift",
        "layers/Tests/TopTests/HouseTests.swift:3: TopTests imports Middle, not among its dependencies in layers/Package.swift",
        # Top is a module of the package the consumer uses, but not of the product it names.
        "consumer/Sources/App/main.swift:3: App imports Top, not among its dependencies in consumer/Package.swift",
    ], result.stderr
    assert "layers: 4 undeclared import(s)" in result.stderr
    assert "consumer: 1 undeclared import(s)" in result.stderr


def test_a_consumer_that_names_no_product_may_import_none_of_its_modules(tmp_path):
    make_package(tmp_path, top='"Middle", "Bottom"', tests='"Top", "Middle"', consumer_depends_on_product=False)
    result = run_check(tmp_path / "consumer")
    assert result.returncode == 1, result.stdout + result.stderr
    assert [line.split(": ", 1)[1] for line in result.stderr.splitlines() if " imports " in line] == [
        f"App imports {module}, not among its dependencies in consumer/Package.swift" for module in ("Bottom", "Middle", "Top")
    ], result.stderr


def test_declared_imports_pass(tmp_path):
    package = make_package(tmp_path, top='"Middle", "Bottom"', tests='"Top", "Middle"', consumer_depends_on_product=True)
    # The consumer's App may import the product's Bottom and Middle; not Top.
    (tmp_path / "consumer" / "Sources" / "App" / "main.swift").write_text("import Bottom\nimport Middle\n")
    result = run_check(package, tmp_path / "consumer")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "layers: 4 targets, 4 Swift files, every internal import declared" in result.stdout
    assert "consumer: 1 targets, 1 Swift files, every internal import declared" in result.stdout
