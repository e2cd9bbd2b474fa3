"""Frozen settings, read from ``EXTRACTOR_*`` environment variables and CLI flags."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Literal

from extractor.errors import ConfigError

GrammarBackend = Literal["guidance", "xgrammar"]
EngineKind = Literal["vllm", "scripted", "remote"]

DEFAULT_MODEL = "default"
MAX_ATTEMPTS_LIMIT = 3


def repo_root() -> Path:
    """The folder above the package: the catalog's default home in a source checkout."""
    return Path(__file__).resolve().parent.parent


def default_home() -> Path:
    """Where converted models and other caches live unless ``EXTRACTOR_HOME`` says otherwise."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "extractor"


def default_conversion_processes(cores: int | None = None) -> int:
    """Conversion workers by default: half the cores (at most 8) where there are 8 or more, else 0 (a thread).

    On one H200 host (16 cores) the expert contract task read 83 Kleister dev contracts at 5.28 a
    second with 8 workers against 3.00 with the thread, F1 0.607 against 0.602
    (``bench/results/documents.md``). On a small machine the engine needs the cores: 0.
    """
    if cores is None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return min(8, cores // 2) if cores >= 8 else 0


ADAPTER_SERVING = ("auto", "merged", "lora", "off")
ENGINE_PROCESS = ("auto", "own", "shared")
OCR_MODES = ("off", "auto", "always")
# tesseract's language codes (eng, chi_sim, deu_latf...) joined by "+"
_OCR_LANGUAGES = re.compile(r"[a-z]{3}(_[a-z]+)*(\+[a-z]{3}(_[a-z]+)*)*")


@dataclass(frozen=True)
class Settings:
    """Everything that configures an :class:`~extractor.Extractor`.

    Each field maps to an environment variable ``EXTRACTOR_<FIELD>`` (upper case) and to a
    CLI flag ``--<field>`` (dashes for underscores).
    """

    home: Path = field(default_factory=default_home)
    tasks_dir: Path = field(default_factory=repo_root)
    engine: EngineKind = "vllm"
    model: str = DEFAULT_MODEL
    dtype: str = "auto"
    max_model_len: int = 4096
    gpu_memory_utilization: float = 0.5
    tensor_parallel_size: int = 1
    quantization: str | None = None
    # vLLM's load format: "auto" reads the weights; "dummy" gives random weights of the model's config
    # (benchmarks of a model size whose weights are not at hand; what it generates is noise)
    load_format: str = "auto"
    max_num_seqs: int = 64
    # vLLM without torch.compile (and CUDA graphs): the engine starts sooner and decodes slower. On the
    # 2-core CPU vLLM 0.32 compiles the model at every start (its compile cache does not load there):
    # 220 s to start against 44 s eager; `extractor eval` (140 SNIPS lines, two engines) started in 92
    # instead of 228 s at 0.92 of the docs/s (docs/reference/settings.md). The test suite runs eager
    enforce_eager: bool = False
    # KV-cache block size in tokens (None: vLLM's default, 128 on CPU). Prefix caching reuses whole
    # blocks only, so smaller blocks keep more of a shared instruction cached (see README).
    block_size: int | None = None
    grammar_backend: GrammarBackend = "guidance"
    # Prompt-lookup speculation (vLLM's "ngram" proposer): up to this many tokens per step proposed by
    # matching the answer's last tokens in the prompt, where grounded values and the schema's keys
    # come from; the model checks them all in one step. 0: off. See README "Speculation".
    speculative_tokens: int = 0
    # GPU: each decoding step's token masks filled in llguidance's pool of this many threads (the mask
    # pool hook, extractor.vllm_plugins.masks); None: 16 on CUDA (at most the host's cores), else 0
    mask_threads: int | None = None
    # more of vLLM's engine arguments, as a JSON object of AsyncEngineArgs fields (`vllm serve`'s flags
    # with underscores), over the ones above: '{"compilation_config": {"max_cudagraph_capture_size": 1024}}'
    vllm_args: str = ""
    # LoRA adapters (``extractor train``): 0 derives the rank from the catalog's adapters (LoRA off without any)
    max_lora_rank: int = 0
    max_loras: int = 8
    # How the in-process engine serves a task's adapter: "merged" (each adapter folded into its own
    # copy of the weights, one vLLM engine per adapter beside the base model's; LoRA stays off),
    # "lora" (one engine, vLLM's per-request LoRA), "off" (tasks served by the base model with their
    # worked examples, adapters ignored). "auto": merged on CPU; on a GPU merged up to 4 adapters whose
    # weights fit, LoRA beyond (extractor.engines.adapter_serving). The remote engine always names the adapter.
    adapter_serving: str = "auto"
    # Where the in-process engine's vLLM front end runs: "own" (a child process, beside the engine core;
    # this interpreter keeps the pipeline), "shared" (this process, on a thread of its own). "auto": own
    # on CUDA, where the front end keeps a core busy and starves the pipeline's thread of the GIL
    # (bench/results/gil_starvation.md); shared on CPU.
    engine_process: str = "auto"
    # CPU KV cache in GiB; None: the default (4), or less when the free memory cannot hold it
    kv_cache_space_gib: int | None = None
    # CPU only: the engine's processes run at this nice value (0-19; 0 leaves them as they are), so
    # the service's own work (a 429 at the door, /healthz) does not wait behind generation.
    # None: SERVE_ENGINE_NICE under `serve`, 0 elsewhere (batch, eval and the API want throughput)
    engine_nice: int | None = None
    # grounded decoding: substring grammars up to this many words; each value within one clause
    grounded_max_words: int = 5000
    grounded_clauses: bool = True
    # each value's confidence from its tokens' log-probabilities (the review queue's order and `below`);
    # false: vLLM is asked for none and results carry no confidence. vLLM 0.26 charges for them: on an
    # H200 `extractor batch` ran at 0.84 of raw vLLM with them, 1.09 without (bench/results/gpu.md)
    confidences: bool = True
    temperature: float = 0.1
    max_tokens: int = 256
    max_attempts: int = MAX_ATTEMPTS_LIMIT
    host: str = "127.0.0.1"
    port: int = 8000
    # engine "remote": the base URL of one OpenAI-compatible endpoint (`vllm serve`, vllm-router in front of many)
    remote_urls: str = ""
    remote_api_key: str | None = field(default=None, repr=False)
    remote_model: str | None = None
    remote_timeout_s: float = 120.0
    remote_retries: int = 2
    # the HTTP service
    max_in_flight: int = 64
    max_queued: int = 256
    max_batch_items: int = 256
    max_body_bytes: int = 1_048_576
    max_text_chars: int = 100_000
    # documents (PDF, HTML, DOCX): pages read at most, characters their text may convert to
    max_document_pages: int = 1000
    max_document_chars: int = 1_000_000
    # OCR of PDF pages (Debian's tesseract-ocr): "auto" the pages without a text layer, "always" every
    # page, "off" none (a PDF without any text is then a 422 no_text_layer). Languages: tesseract's codes
    # joined by "+" (each needs its tesseract-ocr-<code> package); a page drawn at ocr_dpi (its longer side
    # at most 5000 px) and read within ocr_timeout_s seconds, else left unread with a note
    ocr: str = "auto"
    ocr_languages: str = "eng+chi_sim"
    ocr_dpi: int = 300
    ocr_timeout_s: float = 30.0
    # pages of one document read at once (a tesseract process each, one core each)
    ocr_workers: int = 2
    # documents converted at once in processes of their own, beside the pipeline's thread
    # (extractor.documents.converting); 0: in a worker thread of the caller's process. None (unset):
    # half the cores, at most 8, on a machine of 8 cores or more, else 0 (:attr:`conversion_workers`),
    # and a thread after all where the workers cannot start
    conversion_processes: int | None = None
    request_timeout_s: float = 120.0
    ready_cache_s: float = 5.0
    shutdown_timeout_s: float = 30.0
    chat_max_tokens: int = 512
    scripted_delay_s: float = 0.0
    # a request body must arrive within this many seconds of the request line (slow clients: 408)
    body_timeout_s: float = 30.0
    # `serve`: a request line and headers must arrive within this many seconds of their first byte (408)
    header_timeout_s: float = 10.0
    # access (extractor.server.access): API keys, comma-separated, and/or a file of them, one per line,
    # each `KEY [name=NAME] [scopes=extract+review+admin]`; with any, every route but /healthz and
    # /readyz needs `Authorization: Bearer KEY` with the route's scope
    api_keys: str | None = field(default=None, repr=False)
    api_keys_file: str | None = None
    metrics_open: bool = False  # /metrics without a key (a scraper inside the network)
    cors_origins: str = ""  # comma-separated origins allowed to call from a browser; empty: CORS off
    # `extractor serve`: reload the catalog when its files change; the playground page at GET /
    watch: bool = True
    playground: bool = True
    # the review queue (extractor.review): PostgreSQL when set (postgresql://user:pass@host/db), else
    # SQLite in review.sqlite3 under ``home``; hidden from repr (it may hold a password)
    database_url: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.engine not in ("vllm", "scripted", "remote"):
            raise ConfigError(f"EXTRACTOR_ENGINE: unknown engine {self.engine!r}; use 'vllm', 'remote' or 'scripted'")
        if self.grammar_backend not in ("guidance", "xgrammar"):
            raise ConfigError(
                f"EXTRACTOR_GRAMMAR_BACKEND: unknown backend {self.grammar_backend!r}; use 'guidance' or 'xgrammar'"
            )
        if self.adapter_serving not in ADAPTER_SERVING:
            raise ConfigError(
                f"EXTRACTOR_ADAPTER_SERVING: unknown mode {self.adapter_serving!r}; "
                f"use one of {', '.join(ADAPTER_SERVING)}"
            )
        if self.engine_process not in ENGINE_PROCESS:
            raise ConfigError(
                f"EXTRACTOR_ENGINE_PROCESS: unknown place {self.engine_process!r}; "
                f"use one of {', '.join(ENGINE_PROCESS)}"
            )
        if self.mask_threads is not None and self.mask_threads < 0:
            raise ConfigError(
                f"EXTRACTOR_MASK_THREADS: {self.mask_threads} threads; give 0 (vLLM's own mask fill) or more"
            )
        if self.ocr not in OCR_MODES:
            raise ConfigError(f"EXTRACTOR_OCR: unknown mode {self.ocr!r}; use one of {', '.join(OCR_MODES)}")
        if not _OCR_LANGUAGES.fullmatch(self.ocr_languages):
            raise ConfigError(
                f"EXTRACTOR_OCR_LANGUAGES: tesseract's language codes joined by '+' (eng+chi_sim), "
                f"got {self.ocr_languages!r}"
            )
        if not 72 <= self.ocr_dpi <= 600:
            raise ConfigError(f"EXTRACTOR_OCR_DPI: from 72 to 600, got {self.ocr_dpi}")
        if not 1 <= self.max_attempts <= MAX_ATTEMPTS_LIMIT:
            raise ConfigError(f"EXTRACTOR_MAX_ATTEMPTS: must be 1..{MAX_ATTEMPTS_LIMIT}, got {self.max_attempts}")
        if not 0.0 < self.gpu_memory_utilization <= 1.0:
            raise ConfigError("EXTRACTOR_GPU_MEMORY_UTILIZATION: must be in (0, 1]")
        if self.grounded_max_words < 1:
            raise ConfigError("EXTRACTOR_GROUNDED_MAX_WORDS: must be >= 1")
        if self.max_model_len < 64 or self.max_tokens < 1:
            raise ConfigError("EXTRACTOR_MAX_MODEL_LEN must be >= 64 and EXTRACTOR_MAX_TOKENS >= 1")
        _ = self.engine_arguments
        self._check_service()

    @property
    def engine_arguments(self) -> dict[str, Any]:
        """``vllm_args`` read: a JSON object ({} when empty); a :class:`ConfigError` naming what is wrong."""
        if not self.vllm_args.strip():
            return {}
        try:
            value = json.loads(self.vllm_args)
        except json.JSONDecodeError as error:
            raise ConfigError(f"EXTRACTOR_VLLM_ARGS: not JSON ({error})") from None
        if not isinstance(value, dict):
            raise ConfigError(
                'EXTRACTOR_VLLM_ARGS: a JSON object of vLLM engine arguments, e.g. {"max_num_batched_tokens": 4096}'
            )
        return value

    def _check_service(self) -> None:
        if self.engine == "remote" and not self.remote_base_urls:
            raise ConfigError(
                "EXTRACTOR_REMOTE_URLS: engine 'remote' needs the base URL of an OpenAI-compatible server"
            )
        if len(self.remote_base_urls) > 1:
            raise ConfigError(
                "EXTRACTOR_REMOTE_URLS: one endpoint; put several servers behind vllm-router, or run "
                "`vllm serve --data-parallel-size N` (README: Scaling out)"
            )
        for url in self.remote_base_urls:
            if not url.startswith(("http://", "https://")):
                raise ConfigError(f"EXTRACTOR_REMOTE_URLS: {url!r} is not an http:// or https:// URL")
        for name in ("remote_retries", "scripted_delay_s", "speculative_tokens", "conversion_processes"):
            if (getattr(self, name) or 0) < 0:
                raise ConfigError(f"EXTRACTOR_{name.upper()}: must be >= 0")
        positive = (
            "max_in_flight",
            "max_batch_items",
            "max_body_bytes",
            "max_text_chars",
            "max_document_pages",
            "max_document_chars",
            "ocr_workers",
            "chat_max_tokens",
        )
        timeouts = (
            "ocr_timeout_s",
            "remote_timeout_s",
            "request_timeout_s",
            "shutdown_timeout_s",
            "body_timeout_s",
            "header_timeout_s",
        )
        for name in (*positive, *timeouts):
            if getattr(self, name) <= 0:
                raise ConfigError(f"EXTRACTOR_{name.upper()}: must be > 0")
        if self.engine_nice is not None and not 0 <= self.engine_nice <= 19:
            raise ConfigError(f"EXTRACTOR_ENGINE_NICE: a nice value from 0 to 19 (0: leave it), got {self.engine_nice}")
        if self.max_queued < 0 or self.ready_cache_s < 0:
            raise ConfigError("EXTRACTOR_MAX_QUEUED and EXTRACTOR_READY_CACHE_S must be >= 0")
        if self.database_url is not None:
            scheme = self.database_url.split(":", 1)[0].split("+", 1)[0].lower()
            if "://" not in self.database_url or scheme not in ("postgresql", "postgres", "sqlite"):
                # the scheme only: the rest of the URL may hold a password
                raise ConfigError(
                    f"EXTRACTOR_DATABASE_URL: use postgresql://user:password@host/database (or sqlite:///file), "
                    f"not a {scheme!r} URL"
                )

    @property
    def remote_base_urls(self) -> tuple[str, ...]:
        """``remote_urls`` split on commas, without trailing slashes."""
        return tuple(u.strip().rstrip("/") for u in self.remote_urls.split(",") if u.strip())

    @property
    def serves_adapters_merged(self) -> bool:
        """Whether the in-process engine serves each adapter as a merged model of its own."""
        return self.engine == "vllm" and self.adapter_serving in ("auto", "merged")

    @property
    def models_dir(self) -> Path:
        """Where converted models are cached."""
        return self.home / "models"

    @property
    def pools_dir(self) -> Path:
        """The reviewers' example pools (``<task>.jsonl``), merged after the catalog's at load."""
        return self.home / "pools"

    @property
    def conversion_workers(self) -> int:
        """Conversion worker processes: ``conversion_processes``, else the machine's default."""
        if self.conversion_processes is None:
            return default_conversion_processes()
        return self.conversion_processes

    @property
    def review_database(self) -> Path:
        """The review queue's SQLite file, used when ``database_url`` is not set."""
        return self.home / "review.sqlite3"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        """Build settings from ``EXTRACTOR_*`` variables, then apply non-None ``overrides``."""
        env = os.environ if env is None else env
        values: dict[str, Any] = {}
        for f in fields(cls):
            raw = env.get(f"EXTRACTOR_{f.name.upper()}")
            if raw is not None and raw != "":
                values[f.name] = _coerce(f.name, f.type, raw)
        values.update({k: v for k, v in overrides.items() if v is not None})
        for key in ("home", "tasks_dir"):
            if key in values:
                values[key] = Path(values[key]).expanduser()
        return cls(**values)

    def with_(self, **changes: Any) -> Settings:
        """A copy with some fields changed (None values are ignored)."""
        return replace(self, **{k: v for k, v in changes.items() if v is not None})


def parse_bool(name: str, raw: str) -> bool:
    """``1/true/yes/on`` or ``0/false/no/off`` (any case); anything else is a :class:`ConfigError`."""
    value = raw.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"EXTRACTOR_{name.upper()}: expected true or false, got {raw!r}")


def _coerce(name: str, annotation: object, raw: str) -> Any:
    kind = str(annotation)
    if kind == "bool":
        return parse_bool(name, raw)
    try:
        if kind.startswith("int"):
            return int(raw)
        if kind.startswith("float"):
            return float(raw)
    except ValueError:
        raise ConfigError(f"EXTRACTOR_{name.upper()}: expected a number, got {raw!r}") from None
    if kind.startswith("str | None") and raw.lower() in ("none", "null"):
        return None
    return raw
