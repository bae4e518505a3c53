"""What /metrics shows, through prometheus_client (the library vLLM and TGI expose theirs with).

Each server has its own registry, so several apps in one process (the tests) do not mix
their figures. prometheus_client's metrics are thread-safe: the scheduler thread updates
them and the event loop renders them without a lock of ours.
"""

from __future__ import annotations

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    generate_latest,
)

LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
CONTENT_TYPE = CONTENT_TYPE_LATEST


class ServerMetrics:
    """Everything /metrics shows. `queue_depth` and `active` are read when scraped."""

    def __init__(self, queue_depth, active):
        self.registry = registry = CollectorRegistry()
        self.requests = Counter("lopa_requests", "Finished requests by outcome.", ["outcome"], registry=registry)
        self.prompt_tokens = Counter("lopa_prompt_tokens", "Prompt tokens of admitted requests.", registry=registry)
        self.tokens = Counter("lopa_generated_tokens", "Tokens generated.", registry=registry)
        self.row_forwards = Counter(
            "lopa_sequence_forwards", "Forwards per sequence (prefill included).", registry=registry
        )
        self.batches = Counter(
            "lopa_batched_forwards", "Batched verification forwards run by the scheduler.", registry=registry
        )
        self.latency = Histogram(
            "lopa_request_latency_seconds",
            "Request latency, arrival to last token.",
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.ttft = Histogram(
            "lopa_time_to_first_token_seconds", "Arrival to first token.", buckets=LATENCY_BUCKETS, registry=registry
        )
        self.batch_size = Histogram(
            "lopa_batch_size", "Sequences per batched forward.", buckets=(1, 2, 4, 8, 16, 32, 64), registry=registry
        )
        self._generated = self._forwards = 0
        Gauge(
            "lopa_tokens_per_forward", "Generated tokens per sequence forward, since start.", registry=registry
        ).set_function(lambda: self._generated / max(1, self._forwards))
        Gauge("lopa_queue_depth", "Requests waiting for a batch slot.", registry=registry).set_function(queue_depth)
        Gauge("lopa_active_requests", "Requests decoding now.", registry=registry).set_function(active)
        ProcessCollector(registry=registry)  # process_resident_memory_bytes, CPU seconds, open files (Linux)

    def step(self, tokens: int) -> None:
        """One sequence's forward emitted `tokens` tokens (called from the scheduler thread only)."""
        self.tokens.inc(tokens)
        self.row_forwards.inc()
        self._generated += tokens
        self._forwards += 1

    def render(self) -> bytes:
        return generate_latest(self.registry)
