"""Prometheus metrics of the service, in a registry of its own (one per app)."""

from __future__ import annotations

from collections.abc import Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from extractor.results import Attempt
from extractor.server.admission import Admission

CONTENT_TYPE = CONTENT_TYPE_LATEST
_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)


class Metrics:
    """Requests by route, task and status; latency; attempts, repairs, failures; tokens; load.

    ``task`` labels only ever hold names from the loaded catalog (``-`` otherwise), so a client
    cannot grow the label set.
    """

    def __init__(self, admission: Admission) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "extractor_requests", "HTTP requests by route, task and status", ["route", "task", "status"], registry=r
        )
        self.latency = Histogram(
            "extractor_request_duration_seconds",
            "HTTP request latency, body read to last byte sent",
            ["route", "task"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.attempts = Counter("extractor_attempts", "extraction attempts, re-asks included", ["task"], registry=r)
        self.repairs = Counter("extractor_repairs", "attempts whose JSON json-repair had to fix", ["task"], registry=r)
        self.validation_failures = Counter(
            "extractor_validation_failures", "attempts rejected by validation or grounding", ["task"], registry=r
        )
        self.cuts = Counter(
            "extractor_cut_attempts",
            "attempts cut at max_tokens (finish reason length)",
            ["task"],
            registry=r,
        )
        self.tokens = Counter(
            "extractor_tokens", "tokens in (prompt) and out (completion)", ["task", "direction"], registry=r
        )
        self.grounded_decoding = Counter(
            "extractor_grounded_decoding",
            "extractions by how grounded fields were held to the text while decoding: grammar, enum, "
            "posthoc (asked for but not possible: a text past the word limit), off",
            ["task", "mode"],
            registry=r,
        )
        queue = Gauge("extractor_queue_depth", "admitted engine jobs waiting for an in-flight slot", registry=r)
        queue.set_function(lambda: admission.queued)
        in_flight = Gauge("extractor_in_flight", "engine jobs in flight", registry=r)
        in_flight.set_function(lambda: admission.in_flight)

    def observe_request(self, *, route: str, task: str, status: int, seconds: float) -> None:
        """One HTTP request, whatever its outcome."""
        self.requests.labels(route, task, str(status)).inc()
        self.latency.labels(route, task).observe(seconds)

    def observe_attempts(self, task: str, attempts: Sequence[Attempt]) -> None:
        """The attempts of one extraction, successful or not."""
        self.attempts.labels(task).inc(len(attempts))
        repaired = sum(1 for a in attempts if a.repaired)
        if repaired:
            self.repairs.labels(task).inc(repaired)
        failed = sum(1 for a in attempts if a.errors)
        if failed:
            self.validation_failures.labels(task).inc(failed)
        cuts = sum(1 for a in attempts if a.finish_reason == "length")
        if cuts:
            self.cuts.labels(task).inc(cuts)
        self.tokens.labels(task, "in").inc(sum(a.prompt_tokens for a in attempts))
        self.tokens.labels(task, "out").inc(sum(a.completion_tokens for a in attempts))

    def observe_result(self, task: str, mode: str) -> None:
        """One successful extraction and how its grounded fields were decoded."""
        self.grounded_decoding.labels(task, mode).inc()

    def render(self) -> bytes:
        """The text exposition format."""
        return bytes(generate_latest(self.registry))
