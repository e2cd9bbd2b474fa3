"""The GPU recipe's package list, derived from ``pyproject.toml``: what ``bench/gpu/stage.sh`` downloads.

The offline GPU host has Python 3.12, torch and transformers (and their own dependencies); it lacks
vLLM, extractor and the rest. The recipe brings three sets, each a wheel for that host:

- ``pinned``: what vLLM imports at start that the host lacks, the tools the GPU runs use, and every
  one of extractor's dependencies these pins already cover, each ``name==version`` (downloaded
  without dependencies: the set is closed by hand, as vLLM's tree is);
- ``project``: every other dependency ``pyproject.toml`` lists, as written there, so a dependency
  added to the project travels without anyone editing the recipe (issue 58: the typed-value
  libraries did not);
- ``closure REPORT``: what pip resolves for ``project`` (``pip install --dry-run --report`` for the
  host's platform, the pins as constraints), less the host's packages and the pinned ones.

Stdlib only: it runs under the system Python that runs ``stage.sh``.

    python3 bench/gpu/wheels.py pinned          # name==version, one a line
    python3 bench/gpu/wheels.py project         # the project's dependencies no pin covers
    python3 bench/gpu/wheels.py closure REPORT  # from pip's report on those: name==version to download
"""

from __future__ import annotations

import json
import re
import sys
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"

# What the host image has (torch 2.11.0+cu130, transformers 5.17, and what they need): never downloaded.
HOST = {
    "torch": "the host's CUDA build",
    "transformers": "on the host (5.17)",
    "jinja2": "torch's dependency",
    "safetensors": "transformers' dependency",
    "regex": "transformers' dependency",
    "numpy": "torch's and transformers' dependency",
    "pyyaml": "transformers' dependency",
    "packaging": "transformers' dependency",
    "typing-extensions": "torch's dependency",
    "setuptools": "the host's Python",
}
_HOST_FAMILIES = ("nvidia-", "triton", "torch")  # never pulled in by a resolution: the host's CUDA stack

# vLLM 0.26.0's import chain at engine start that the host lacks (vLLM itself travels slimmed, apart)
VLLM_TREE = """
annotated-doc==0.0.7 annotated-types==0.8.0 apache-tvm-ffi==0.1.10 astor==0.8.1 blake3==1.0.11 cachetools==8.0.2
cbor2==6.3.0 depyf==0.20.0 dill==0.4.1 fastapi==0.136.3 gguf==0.19.0 ijson==3.6.0 interegular==0.3.3 jiter==0.19.0
json_repair==0.64.6 jsonschema==4.26.0 jsonschema-specifications==2025.9.1 lark==1.2.2 llguidance==1.7.6
lm-format-enforcer==0.11.3 loguru==0.7.3 msgspec==0.23.0 openai==3.57.0 distro outlines_core==0.2.14
partial-json-parser==0.2.1.1.post7 prometheus-fastapi-instrumentator==8.1.0 pybase64==1.5.1 pydantic==2.14.4
pydantic_core==2.50.5 python-json-logger==4.2.0 python-multipart==0.0.34 pyzmq==27.3.0 referencing==0.37.0
rpds-py==2026.9.1 setproctitle==1.3.8 sniffio==1.3.1 starlette==1.10.0 typing-inspection==0.4.5 uvicorn==0.54.0
watchfiles==1.3.0 xgrammar==0.2.1 compressed-tensors==0.17.0 websockets==17.4 httptools==0.9.0 python-dotenv==1.2.4
PyJWT==2.15.1 anthropic==2.14.0 cffi==2.1.1 cryptography==50.0.2 docstring_parser==0.18.0
googleapis-common-protos==1.76.0 httpcore2==2.16.2 httpx2==2.16.2 jmespath==1.1.0 mcp==2.3.0 mcp-types==2.3.0
mistral_common==1.13.1 model-hosting-container-standards==0.1.16 openai-harmony==0.0.8 opentelemetry-api==1.45.2
opentelemetry-exporter-http-transport==0.66b2 opentelemetry-exporter-otlp==1.45.2
opentelemetry-exporter-otlp-common==0.66b2
opentelemetry-exporter-otlp-proto-common==1.45.2 opentelemetry-exporter-otlp-proto-grpc==1.45.2
opentelemetry-exporter-otlp-proto-http==1.45.2 opentelemetry-proto==1.45.2 opentelemetry-semantic-conventions==0.66b2
opentelemetry-semantic-conventions-ai==0.5.1 pycountry==26.2.16 pycparser==3.12 pydantic-extra-types==2.11.1
sse-starlette==3.7.0 supervisor==4.3.0 truststore==0.10.5 pydantic-settings==2.16.3 httpx-sse importlib-metadata zipp
flashinfer-python==0.6.14 cuda-tile nvidia-cudnn-frontend
"""
# extractor's dependencies pinned to what was measured there, with theirs; the test runner; training;
# py-spy (the profiler the GPU runs use); the OpenAI front's tests
EXTRACTOR_TREE = """
zstandard==0.25.0 bm25s==0.3.16 rapidfuzz==3.14.6 prometheus-client==0.26.0 pytest==9.2.0
pytest-asyncio==1.5.0 pluggy==1.7.0 iniconfig==2.3.1 httpx==0.28.1 httpcore==1.0.9 h11==0.16.0 anyio==4.16.0
peft==0.21.2 accelerate==1.15.0 py-spy==0.4.2 google-re2==1.1.20251105 psutil==7.2.2 instructor==1.17.0 tenacity==9.2.1
aiohttp==3.14.5 aiohappyeyeballs==2.7.1 aiosignal==1.4.0 attrs==26.1.0 frozenlist==1.8.0 multidict==7.2.1
propcache==0.5.4 yarl==1.25.1 scipy==1.17.1 sqlalchemy==2.1.9 alembic==1.20.1 mako==1.4.3 greenlet==3.5.6 psycopg==3.3.9
psycopg-binary==3.3.9 pypdfium2==5.15.2 python-docx==1.2.0 lxml==6.1.3 pillow==13.0.0
"""


def normalize(name: str) -> str:
    """A distribution name as PEP 503 compares it (``Pint``, ``json_repair`` -> ``pint``, ``json-repair``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def name_of(requirement: str) -> str:
    """The normalized distribution name a requirement line names (``psycopg[binary]>=3.1,<4`` -> ``psycopg``)."""
    found = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    if found is None:
        raise ValueError(f"not a requirement: {requirement!r}")
    return normalize(found.group(1))


def dependencies(pyproject: Path = PYPROJECT) -> list[str]:
    """``[project].dependencies`` of ``pyproject``, as written."""
    with pyproject.open("rb") as file:
        project: Mapping[str, Any] = tomllib.load(file)["project"]
    return [str(d) for d in project.get("dependencies", [])]


def pinned() -> list[str]:
    """Every ``name==version`` (or bare name) the recipe downloads as is."""
    return (VLLM_TREE + EXTRACTOR_TREE).split()


def project(requirements: Iterable[str]) -> list[str]:
    """The project's requirements neither the host nor a pin covers: resolved by pip, with theirs."""
    covered = set(HOST) | {name_of(p) for p in pinned()}
    return [r for r in requirements if name_of(r) not in covered]


def closure(report: Mapping[str, Any]) -> list[str]:
    """``name==version`` of each package pip's ``--report`` installs, less the host's and the pinned."""
    covered = set(HOST) | {name_of(p) for p in pinned()}
    found = []
    for item in report.get("install", []):
        meta = item["metadata"]
        name = normalize(meta["name"])
        if name not in covered and not name.startswith(_HOST_FAMILIES):
            found.append(f"{meta['name']}=={meta['version']}")
    return found


def main(argv: list[str]) -> int:
    if argv[:1] == ["pinned"]:
        print("\n".join(pinned()))
    elif argv[:1] == ["project"]:
        print("\n".join(project(dependencies())))
    elif argv[:1] == ["closure"] and len(argv) == 2:
        print("\n".join(closure(json.loads(Path(argv[1]).read_text(encoding="utf-8")))))
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
