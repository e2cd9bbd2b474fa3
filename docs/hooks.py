"""MkDocs hooks: files from outside docs/ and the references generated from the code.

- The benchmark results (``bench/results/``: pages, plots, raw files) and the two READMEs under
  ``bench/`` are added to the site at their repository paths, so their own relative links keep working
  and a page under docs/ reaches them as ``../bench/results/NAME.md``; no copy is kept in docs/.
- ``reference/openapi.json`` is the OpenAPI document of the app (scripted engine, shipped catalog),
  built at each build; the HTTP page renders it and a table of its routes.
- The CLI page gets every command's ``--help`` and ``--help-settings`` from the argparse parser.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page

ROOT = Path(__file__).resolve().parent.parent
# Repository files served at their own paths (globs relative to the root).
EXTERNAL = ("bench/results/*.md", "bench/results/*.png", "bench/results/raw/*", "bench/gpu/README.md")
EXTERNAL_PAGES = ("bench/data/byo_schemas/README.md",)
OPENAPI = "reference/openapi.json"
HTTP_METHODS = ("get", "post", "put", "patch", "delete")
# The references describe the checkout being built, whatever `extractor` the environment installed.
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """Add the repository's benchmark files and the generated OpenAPI document to the site."""
    paths = sorted({p for pattern in EXTERNAL for p in ROOT.glob(pattern) if p.is_file()})
    paths += [ROOT / p for p in EXTERNAL_PAGES]
    for path in paths:
        files.append(File.generated(config, path.relative_to(ROOT).as_posix(), abs_src_path=str(path)))
    files.append(File.generated(config, OPENAPI, content=json.dumps(openapi(), indent=1, ensure_ascii=False)))
    return files


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    """Fill the generated references' placeholders."""
    if "<!-- routes -->" in markdown:
        markdown = markdown.replace("<!-- routes -->", routes_table(openapi()))
    if "<!-- cli -->" in markdown:
        markdown = markdown.replace("<!-- cli -->", cli_reference())
    return markdown


_OPENAPI: dict[str, Any] = {}


def openapi() -> dict[str, Any]:
    """The app's OpenAPI document, built once per process (no engine, no database: neither starts)."""
    if not _OPENAPI:
        from extractor import Catalog, Extractor, ScriptedEngine, Settings
        from extractor.config import repo_root
        from extractor.server.app import create_app

        with tempfile.TemporaryDirectory() as home:
            settings = Settings.from_env({}, home=Path(home), engine="scripted")
            extractor = Extractor(settings=settings, engine=ScriptedEngine(), catalog=Catalog.load(repo_root()))
            _OPENAPI.update(create_app(extractor, start_engine=False).openapi())
    return _OPENAPI


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _schema_name(schema: dict[str, Any] | None) -> str:
    if not schema:
        return ""
    if "$ref" in schema:
        return f"`{schema['$ref'].rsplit('/', 1)[-1]}`"
    if schema.get("type") == "array" and isinstance(schema.get("items"), dict):
        return f"array of {_schema_name(schema['items'])}"
    return f"`{schema.get('type', 'object')}`"


def routes_table(document: dict[str, Any]) -> str:
    """A Markdown table of every route: method, path, summary, request body and status codes."""
    rows = ["| method | path | summary | body | responses |", "|---|---|---|---|---|"]
    for path, item in document["paths"].items():
        for method in HTTP_METHODS:
            if method not in item:
                continue
            operation = item[method]
            body = operation.get("requestBody", {}).get("content", {})
            kinds = ", ".join(f"{_schema_name(c.get('schema'))} ({t})" for t, c in body.items())
            codes = ", ".join(operation.get("responses", {}))
            summary = operation.get("summary") or operation.get("description", "").split("\n\n")[0]
            rows.append(f"| `{method.upper()}` | `{path}` | {_cell(summary)} | {_cell(kinds)} | {codes} |")
    return "\n".join(rows)


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _help_sections(parser: argparse.ArgumentParser, name: str) -> list[str]:
    out = [f"### `{name}`", "", "```text", parser.format_help().rstrip(), "```", ""]
    for sub, child in _subparsers(parser).items():
        out += _help_sections(child, f"{name} {sub}")
    return out


def cli_reference() -> str:
    """Every command's ``--help`` (at 100 columns), then ``--help-settings``."""
    from extractor.cli import build_parser

    columns = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"
    try:
        parser = build_parser()
        sections = _help_sections(parser, "extractor")
        text = io.StringIO()
        with contextlib.redirect_stdout(text), contextlib.suppress(SystemExit):
            parser.parse_args(["serve", "--help-settings"])
    finally:
        if columns is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = columns
    sections += ["### `--help-settings`", "", "```text", text.getvalue().rstrip(), "```", ""]
    return "\n".join(sections)
