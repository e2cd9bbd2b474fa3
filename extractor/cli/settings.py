"""Every setting as a flag of each command: the settings group of every ``--help``, and ``--help-settings``."""

from __future__ import annotations

import argparse
import sys
import types
import typing
from collections.abc import Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

from extractor.config import Settings, parse_bool
from extractor.errors import ConfigError

SETTING_HELP = {
    "home": "cache folder for converted models (EXTRACTOR_HOME)",
    "tasks_dir": "catalog root holding schemas/ and prompts/ (EXTRACTOR_TASKS_DIR)",
    "engine": "vllm (default, in-process), remote (OpenAI-compatible servers at --remote-urls) or scripted "
    "(a dry run answering with each task's first example)",
    "remote_urls": "engine remote: the base URL of one OpenAI-compatible endpoint (EXTRACTOR_REMOTE_URLS)",
    "remote_api_key": "engine remote: bearer token for the servers; prefer EXTRACTOR_REMOTE_API_KEY",
    "model": "'default' (embedded SmolLM2-135M-Instruct), 'gemma3-270m' (Gemma 3 270M base, multilingual; "
    "`model prepare --model gemma3-270m` first) or a model directory",
    "grammar_backend": "guidance (default) or xgrammar",
    "vllm_args": "more vLLM engine arguments, a JSON object: '{\"max_num_batched_tokens\": 4096}'",
    "database_url": "the review queue's PostgreSQL (postgresql://user:password@host/db); default SQLite "
    "review.sqlite3 under --home; prefer EXTRACTOR_DATABASE_URL",
}
# Flags that only matter to some commands are still accepted everywhere: one vocabulary.
SERVE_ONLY = {
    "host",
    "port",
    "max_in_flight",
    "max_queued",
    "max_batch_items",
    "max_body_bytes",
    "request_timeout_s",
    "ready_cache_s",
    "shutdown_timeout_s",
    "header_timeout_s",
    "chat_max_tokens",
    "watch",
    "playground",
}


# Shown in every command's --help; the other settings are accepted everywhere they apply, the
# service's shown by `serve --help`, all of them (once) by each command's --help-settings.
COMMON = ("home", "tasks_dir", "engine", "model")
SERVICE = (*COMMON, *sorted(SERVE_ONLY - {"watch", "playground"}), "api_keys", "api_keys_file", "metrics_open")


_METAVARS: dict[Any, str] = {int: "N", float: "N", bool: "BOOL", Path: "DIR"}


class _SettingsHelp(argparse.Action):
    """``--help-settings``: every setting with its flag, variable and meaning, then exit."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> None:
        lines = ["settings: each a flag of the commands it applies to and a variable (flags win)", ""]
        for f in fields(Settings):
            flag = f"--{f.name.replace('_', '-')}"
            where = " (serve)" if f.name in SERVE_ONLY else ""
            lines.append(f"  {flag:32} EXTRACTOR_{f.name.upper()}{where}")
            if f.name in SETTING_HELP:
                lines.append(f"  {'':32} {SETTING_HELP[f.name].replace(f' (EXTRACTOR_{f.name.upper()})', '')}")
        sys.stdout.write("\n".join(lines) + "\n")
        parser.exit()


def add_settings(parser: argparse.ArgumentParser, *, serve: bool = False, shown: Sequence[str] = COMMON) -> None:
    """Every setting as a flag (the service's own only with ``serve``); those in ``shown`` in the help."""
    group = parser.add_argument_group("settings (each also EXTRACTOR_<NAME>; --help-settings lists all)")
    group.add_argument("--help-settings", action=_SettingsHelp, help="list every setting and its variable, then exit")
    hints = typing.get_type_hints(Settings)
    for f in fields(Settings):
        if f.name in SERVE_ONLY and not serve:
            continue
        kind = hints[f.name]
        if type(kind) is types.UnionType:  # `int | None`: the flag converts like `int`
            kind = next(t for t in typing.get_args(kind) if t is not type(None))
        convert: Any = int if kind is int else float if kind is float else str
        if kind is bool:

            def convert(raw: str, name: str = f.name) -> bool:
                try:
                    return parse_bool(name, raw)
                except ConfigError as error:
                    raise argparse.ArgumentTypeError(str(error)) from None

        group.add_argument(
            f"--{f.name.replace('_', '-')}",
            dest=f.name,
            type=convert,
            default=None,
            metavar=_METAVARS.get(kind, f.name.upper()),
            help=SETTING_HELP.get(f.name, f"(EXTRACTOR_{f.name.upper()})") if f.name in shown else argparse.SUPPRESS,
        )


def settings_from(args: argparse.Namespace) -> Settings:
    """The settings: each flag given on the command line, else its variable, else its default."""
    overrides = {f.name: getattr(args, f.name, None) for f in fields(Settings)}
    return Settings.from_env(**overrides)
