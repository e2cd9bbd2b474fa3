"""The ``extractor`` command line: ``main`` (the console script) and ``build_parser`` (tests, the docs' reference).

One module per command, or per family of commands (``serve`` and ``mcp``), each registering its
sub-parser and the function it runs, as vLLM's ``entrypoints/cli`` does; ``main`` builds the
parser from them. ``settings``, ``options`` and ``output`` are what the commands share: every
setting as a flag, the extraction options, and a stdout kept for the command's own output.
"""

from extractor.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
