"""Every code block of README.md and docs/*.md runs, against servers the docs start themselves.

One case per Markdown file (found by glob, so new pages are picked up), which pytest-xdist
spreads over its workers; the rules a page follows are in tests/docs_runner.py. The cases
below the first check the runner itself: that a page that is wrong fails, and says where.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest
from conftest import BACKENDS, POSTGRES_URL, REQUIRE_POSTGRES, postgres_unreachable
from docs_runner import REPO, DocFailure, DocSkipped, Settings, doc_files, run_document


def settings() -> Settings:
    missing = postgres_unreachable()
    if "postgresql" not in BACKENDS:
        missing = "QUEUELOG_TEST_BACKENDS leaves postgresql out"
    return Settings(POSTGRES_URL, missing, REQUIRE_POSTGRES)


@pytest.mark.parametrize("doc", doc_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_doc_runs(doc: Path, tmp_path: Path) -> None:
    try:
        skipped = run_document(doc, tmp_path, settings())
    except DocFailure as failure:
        message = str(failure)
    except DocSkipped as skip:
        pytest.skip(str(skip))
    else:
        for reason in skipped:
            print("skipped:", reason)
        return
    pytest.fail(message, pytrace=False)  # outside the except: the message once, not chained


def test_readme_test_command_is_the_one_ci_runs() -> None:
    """The README's second command runs the suite exactly as .ci/run does."""
    readme = (REPO / "README.md").read_text()
    blocks = re.findall(r"```sh\n(.*?)```", readme, re.S)
    command = blocks[1].strip().split(" && ")[-1]
    assert command == ".venv/bin/python -m pytest -q -n 6"
    assert command in (REPO / ".ci/run").read_text().splitlines()


# --- the runner itself, on small pages --------------------------------------------------------


def run_page(tmp_path: Path, text: str) -> list[str]:
    page = tmp_path / "page.md"
    page.write_text(textwrap.dedent(text))
    work = tmp_path / f"session-{len(list(tmp_path.glob('session-*')))}"
    work.mkdir()
    return run_document(page, work, Settings(POSTGRES_URL, "not needed here", False))


def failure(tmp_path: Path, text: str) -> str:
    with pytest.raises(DocFailure) as caught:
        run_page(tmp_path, text)
    return str(caught.value)


def test_variables_exports_and_cwd_carry_over_and_output_is_checked(tmp_path: Path) -> None:
    run_page(
        tmp_path,
        """\
        ```sh
        NAME=first
        export SHARED=visible
        greet() { echo "hello $1"; }
        mkdir -p sub && cd sub
        ```

        <!-- test: output="hello first in sub" -->
        ```sh
        echo "$(greet "$NAME") in $(basename "$PWD")"
        cd ..
        ```

        <!-- test: output="visible" -->
        ```python
        import os
        print(os.environ["SHARED"])
        ```
        """,
    )


def test_a_failing_command_is_named_with_its_line_and_output(tmp_path: Path) -> None:
    message = failure(
        tmp_path,
        """\
        # Title

        ```sh
        echo fine
        queuelog keys list
        echo never
        ```
        """,
    )
    assert message.startswith("page.md:3: ```sh block exited 127, not 0")
    assert "the command that failed (line 5, exit 127): queuelog keys list" in message
    assert "page.md: line 5: queuelog: command not found" in message


def test_a_python_traceback_names_the_doc_line(tmp_path: Path) -> None:
    message = failure(tmp_path, '\n\n```python\nx = 1\nraise SystemExit("no: " + str(x))\n```\n')
    assert message.startswith("page.md:3: ```python block exited 1")
    assert "no: 1" in message


def test_directives_are_checked(tmp_path: Path) -> None:
    assert "page.md:1: unknown directive 'backgroud'" in failure(
        tmp_path, "<!-- test: backgroud -->\n```sh\ntrue\n```\n"
    )
    assert "page.md:2: a test directive must be on the line directly above" in failure(
        tmp_path, "text\n<!-- test: skip reason=x -->\n\n```sh\ntrue\n```\n"
    )
    assert "page.md:1: ```yaml block: needs, on the line directly above it" in failure(
        tmp_path, "```yaml\na: 1\n```\n"
    )
    assert "a skip must say why" in failure(tmp_path, "<!-- test: skip -->\n```sh\nfalse\n```\n")
    assert "needs <!-- test: key=VAR -->" in failure(tmp_path, "```graphql\n{ me { name } }\n```\n")
    assert "page.md:2: a `$ ` prompt" in failure(tmp_path, "```sh\n$ ls\n```\n")


def test_same_as_names_the_first_line_that_differs(tmp_path: Path) -> None:
    assert run_page(tmp_path, '<!-- test: skip reason="no engine" -->\n```sh\nfalse\n```\n') == [
        "page.md:2: no engine"
    ]
    message = failure(
        tmp_path,
        """\
        <!-- test: same-as=pyproject.toml -->
        ```toml
        [project]
        name = "queuelog"
        version = "99"
        ```
        """,
    )
    assert "its lines 1-2 are, line 3 (doc line 5) is not: 'version = \"99\"'" in message


def test_a_response_block_matches_with_wildcards(tmp_path: Path) -> None:
    page = """\
        ```sh
        echo '{"data": {"job": {"id": "1", "status": "PENDING", "extra": 1}}, "list": [1, 2, 3]}'
        ```

        <!-- test: response -->
        ```json
        {"data": {"job": {"id": "...", "status": "%s", "...": "..."}}, "list": [1, "..."]}
        ```
        """
    (tmp_path / "ok").mkdir()
    run_page(tmp_path / "ok", page % "PENDING")
    assert '$.data.job.status: expected "DONE", got "PENDING"' in failure(tmp_path, page % "DONE")


def test_several_operations_in_a_block_are_each_named_once(tmp_path: Path) -> None:
    """A document with an anonymous operation beside others is refused whole by a server and
    by GraphiQL, so a reader pasting the block could not run it; the runner refuses it first."""
    page = "<!-- test: key=KEY -->\n```graphql\n%s\nquery { me { name } }\n```\n"
    where = "page.md:4: ```graphql block <!-- test: key=KEY -->: "
    anonymous = failure(tmp_path, page % "query First { me { name } }")
    assert anonymous.startswith(where + "an anonymous operation beside 1 other(s): name each one")
    twice = failure(tmp_path, (page % "query Me { me { name } }").replace("query {", "query Me {"))
    assert twice.startswith(where + "a second operation named 'Me'")
    alone = failure(tmp_path, "<!-- test: key=KEY -->\n```graphql\nquery { me { name } }\n```\n")
    assert "key=KEY: no shell variable KEY" in alone  # one anonymous operation alone is fine


def test_ports_and_postgresql_names_are_substituted() -> None:
    from docs_runner import Substitutions

    subs = Substitutions("postgresql://admin:pw@db.test:6543/test", name="queuelog_docs_x")
    text = subs.apply(
        "python3 -m venv .venv && .venv/bin/pip install -e '.[postgres]' && .venv/bin/queuelog serve\n"
        "sudo -u postgres createdb --owner queuelog queuelog_copy\n"
        "curl http://127.0.0.1:8000/healthz http://127.0.0.1:8001/ # 18000 8000.5\n"
        "export QUEUELOG_DATABASE_URL=postgresql://queuelog:secret@127.0.0.1:5432/queuelog\n",
        "here",
    )
    first, second = subs.ports[8000], subs.ports[8001]
    assert text.splitlines() == [
        f"true && true && .venv/bin/queuelog serve --port {first}",
        "createdb --owner queuelog_docs_x queuelog_docs_x_copy",
        f"curl http://127.0.0.1:{first}/healthz http://127.0.0.1:{second}/ # 18000 8000.5",
        "export QUEUELOG_DATABASE_URL=postgresql://queuelog_docs_x:secret@db.test:6543/queuelog_docs_x",
    ]
    with pytest.raises(DocFailure, match=r"here: `.venv/bin/pip install -e '.\[nosuch\]'` names extras"):
        subs.apply(".venv/bin/pip install -e '.[nosuch]'\n", "here")


def test_a_page_without_postgresql_skips_from_its_first_postgresql_block(tmp_path: Path) -> None:
    with pytest.raises(DocSkipped, match=r"page.md:4: ```sh block and the rest of page.md need PostgreSQL"):
        run_page(tmp_path, "```sh\ntrue\n```\n```sh\ncreatedb queuelog\n```\n")


def test_background_blocks_that_die_are_reported(tmp_path: Path) -> None:
    early = failure(tmp_path, "<!-- test: background -->\n```sh\necho cannot start\nexit 2\n```\n")
    assert early.startswith(
        "page.md:2: ```sh block <!-- test: background --> exited 2 before http://127.0.0.1:"
    )
    assert "cannot start" in early
    later = failure(
        tmp_path,
        """\
        <!-- test: background wait=none -->
        ```sh
        echo $$ > background.pid && echo "worker: bad key" && exit 3
        ```

        ```sh
        until [ -s background.pid ] && [ "$(cut -d' ' -f3 "/proc/$(cat background.pid)/stat")" = Z ]; do
          sleep 0.01  # until it has exited (a zombie until the runner reaps it)
        done
        false
        ```
        """,
    )
    assert later.startswith("page.md:6: ```sh block exited 1, not 0")
    assert "meanwhile, the background block at page.md:2 exited 3; its output ---\nworker: bad key" in later
