"""Rebuild the vendored browser assets from pinned npm packages.

    python -m queuelog.web.vendor          # needs node's npm; run from anywhere

Neither `pip install` nor CI runs this: its output is committed. It fetches each package
below with `npm pack` (checking the tarball against the pinned integrity), copies the
listed files into queuelog/web/static/vendor/ (or, for axe-core, which only the browser
tests use, into tests/vendor/), drops their `sourceMappingURL` comments (the maps are not
shipped), and copies each package's licence beside them. graphiql's bundle also contains
its own dependencies (graphql-js, CodeMirror, ...): their licences are collected from
graphiql's dependency tree into licenses/graphiql-THIRD-PARTY.txt. vendor/README.md lists
what is there, from which version, with each file's sha256.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
VENDOR = HERE / "static" / "vendor"
TESTS_VENDOR = HERE.parent.parent / "tests" / "vendor"
SOURCE_MAP = re.compile(rb"\n?/[/*]# sourceMappingURL=[^\n]*\n?")


@dataclass(frozen=True)
class Package:
    name: str
    version: str
    integrity: str
    files: dict[str, str]  # path in the package -> file name in the destination
    license: str  # the licence file's path in the package
    for_tests: bool = False


PACKAGES = [
    Package(
        "react",
        "18.3.1",
        "sha512-wS+hAgJShR0KhEvPJArfuPVN1+Hz1t0Y6n5jLrGQbkb4urgPE/0Rve+1kMB1v/oWgHgm4WIcV+i7F2pTVj+2iQ==",
        {"umd/react.production.min.js": "react.production.min.js"},
        "LICENSE",
    ),
    Package(
        "react-dom",
        "18.3.1",
        "sha512-5m4nQKp+rZRb09LNH59GM4BxTh9251/ylbKIbpe7TpGxfJ+9kv6BLkLBXIjjspbgbnIBNqlI23tRnTWT0snUIw==",
        {"umd/react-dom.production.min.js": "react-dom.production.min.js"},
        "LICENSE",
    ),
    Package(
        "graphiql",
        "3.9.0",
        "sha512-rJYFlHdBbug9+YbFSwRVvgfPjCayC7wHecZkx/qB4XLuQPFQZw/yB9pmHFtOJV6RiNBBHro3u1GdocKa3YcGRA==",
        {"graphiql.min.js": "graphiql.min.js", "graphiql.min.css": "graphiql.min.css"},
        "LICENSE",
    ),
    Package(
        "graphql-ws",
        "5.16.2",
        "sha512-E1uccsZxt/96jH/OwmLPuXMACILs76pKF2i3W861LpKBCYtGIyPQGtWLuBLkND4ox1KHns70e83PS4te50nvPQ==",
        {"umd/graphql-ws.min.js": "graphql-ws.min.js"},
        "LICENSE.md",
    ),
    Package(
        "axe-core",
        "4.10.3",
        "sha512-Xm7bpRXnDSX2YE2YFfBk2FnF0ep6tmG7xPh8iHee8MIcrgq762Nkce856dYtJYLkuIoYZvGfTs/PbZhideTcEg==",
        {"axe.min.js": "axe.min.js"},
        "LICENSE",
        for_tests=True,
    ),
]
# graphiql's UMD bundle leaves out only React and ReactDOM; graphql-js goes in at this major.
GRAPHQL_PEER = "graphql@16"


def npm(*args: str, cwd: Path) -> str:
    return subprocess.run(["npm", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


def unpack(package: Package, work: Path) -> Path:
    spec = f"{package.name}@{package.version}"
    packed = json.loads(npm("pack", spec, "--json", "--pack-destination", str(work), cwd=work))[0]
    if packed["integrity"] != package.integrity:
        sys.exit(f"{spec}: integrity {packed['integrity']} is not the pinned {package.integrity}")
    target = work / package.name
    with tarfile.open(work / packed["filename"]) as tar:
        tar.extractall(target, filter="data")
    return target / "package"


def third_party_licenses(work: Path) -> str:
    """The licences of every package in graphiql's dependency tree but graphiql, React, ReactDOM."""
    tree = work / "tree"
    tree.mkdir()
    npm(
        "install", "--ignore-scripts", "--no-audit", "--no-fund", "--omit=dev", "--no-save",
        f"graphiql@{next(p.version for p in PACKAGES if p.name == 'graphiql')}",
        "react@18.3.1", "react-dom@18.3.1", GRAPHQL_PEER,
        cwd=tree,
    )  # fmt: skip
    skip = {"graphiql", "react", "react-dom", "loose-envify", "js-tokens", "scheduler"}
    sections = []
    for manifest in sorted((tree / "node_modules").glob("**/package.json")):
        folder = manifest.parent
        if folder.parent.name != "node_modules" and folder.parent.parent.name != "node_modules":
            continue  # a package.json inside a package, not a package
        meta = json.loads(manifest.read_text())
        if "name" not in meta or meta["name"] in skip or folder.name != meta["name"].split("/")[-1]:
            continue
        licences = sorted(p for p in folder.iterdir() if re.match(r"(?i)licen[cs]e|copying", p.name))
        text = "\n".join(p.read_text(errors="replace").strip() for p in licences)
        header = f"{meta['name']}@{meta.get('version', '?')} ({meta.get('license', 'see text')})"
        sections.append(f"{'=' * 78}\n{header}\n{'=' * 78}\n{text or '(no licence file shipped)'}\n")
    unique = dict.fromkeys(sections)
    return "Licences of the packages bundled into graphiql.min.js\n\n" + "\n".join(unique)


def main() -> None:
    manifest = [
        "# Vendored browser assets",
        "",
        "Rebuilt by `python -m queuelog.web.vendor`: do not edit.",
        "",
    ]
    manifest += ["| file | package | sha256 |", "| --- | --- | --- |"]
    with tempfile.TemporaryDirectory() as temp:
        work = Path(temp)
        for destination in (VENDOR, TESTS_VENDOR):
            shutil.rmtree(destination, ignore_errors=True)
            (destination / "licenses").mkdir(parents=True)
        for package in PACKAGES:
            source = unpack(package, work)
            destination = TESTS_VENDOR if package.for_tests else VENDOR
            for inside, name in package.files.items():
                content = SOURCE_MAP.sub(b"\n", (source / inside).read_bytes())
                (destination / name).write_bytes(content)
                digest = hashlib.sha256(content).hexdigest()
                where = destination.relative_to(HERE.parent.parent) / name
                manifest.append(f"| `{where}` | {package.name}@{package.version} | `{digest}` |")
            shutil.copyfile(source / package.license, destination / "licenses" / f"{package.name}-LICENSE")
        (VENDOR / "licenses" / "graphiql-THIRD-PARTY.txt").write_text(third_party_licenses(work))
    (VENDOR / "README.md").write_text("\n".join(manifest) + "\n")
    print(f"vendored {len(PACKAGES)} packages into {VENDOR} and {TESTS_VENDOR}")


if __name__ == "__main__":
    main()
