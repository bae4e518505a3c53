"""A few Prometheus metrics in the text exposition format (no client library needed for this many)."""

from __future__ import annotations

import bisect
import os
import threading

LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)


class Counter:
    def __init__(self, name: str, help: str):
        self.name, self.help, self.values = name, help, {}

    def inc(self, amount: float = 1.0, **labels: str) -> None:
        key = tuple(sorted(labels.items()))
        self.values[key] = self.values.get(key, 0.0) + amount

    def render(self) -> list[str]:
        lines = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} counter"]
        for key, value in sorted(self.values.items()) or [((), 0.0)]:
            lines.append(f"{self.name}{_labels(key)} {value:g}")
        return lines


class Gauge:
    def __init__(self, name: str, help: str, read=None):
        self.name, self.help, self.value, self.read = name, help, 0.0, read

    def set(self, value: float) -> None:
        self.value = value

    def render(self) -> list[str]:
        value = self.read() if self.read else self.value
        return [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} gauge", f"{self.name} {value:g}"]


class Histogram:
    def __init__(self, name: str, help: str, buckets=LATENCY_BUCKETS):
        self.name, self.help, self.buckets = name, help, tuple(buckets)
        self.counts = [0] * (len(self.buckets) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.buckets, value)] += 1
        self.sum += value

    def render(self) -> list[str]:
        lines = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} histogram"]
        total = 0
        for bound, count in zip(self.buckets + (float("inf"),), self.counts):
            total += count
            le = "+Inf" if bound == float("inf") else f"{bound:g}"
            lines.append(f'{self.name}_bucket{{le="{le}"}} {total}')
        return lines + [f"{self.name}_sum {self.sum:g}", f"{self.name}_count {total}"]


def _labels(key: tuple) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in key) + "}" if key else ""


def resident_bytes() -> float:
    """This process's resident memory (Linux /proc; 0 elsewhere)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return 0.0


class ServerMetrics:
    """Everything /metrics shows; updated from the scheduler thread and the event loop under one lock."""

    def __init__(self, queue_depth, active):
        self.lock = threading.Lock()
        self.requests = Counter("lopa_requests_total", "Finished requests by outcome.")
        self.prompt_tokens = Counter("lopa_prompt_tokens_total", "Prompt tokens of admitted requests.")
        self.tokens = Counter("lopa_generated_tokens_total", "Tokens generated.")
        self.row_forwards = Counter("lopa_sequence_forwards_total", "Forwards per sequence (prefill included).")
        self.batches = Counter("lopa_batched_forwards_total", "Batched verification forwards run by the scheduler.")
        self.tpf = Gauge("lopa_tokens_per_forward", "Generated tokens per sequence forward, since start.",
                         read=lambda: self.tokens.values.get((), 0.0) / max(1.0, self.row_forwards.values.get((), 0.0)))
        self.queue = Gauge("lopa_queue_depth", "Requests waiting for a batch slot.", read=queue_depth)
        self.active = Gauge("lopa_active_requests", "Requests decoding now.", read=active)
        self.memory = Gauge("process_resident_memory_bytes", "Resident memory of the server.", read=resident_bytes)
        self.latency = Histogram("lopa_request_latency_seconds", "Request latency, arrival to last token.")
        self.ttft = Histogram("lopa_time_to_first_token_seconds", "Arrival to first token.")
        self.batch_size = Histogram("lopa_batch_size", "Sequences per batched forward.", (1, 2, 4, 8, 16, 32, 64))
        self.all = [self.requests, self.prompt_tokens, self.tokens, self.row_forwards, self.batches, self.tpf,
                    self.queue, self.active, self.memory, self.latency, self.ttft, self.batch_size]

    def render(self) -> str:
        with self.lock:
            return "\n".join(line for metric in self.all for line in metric.render()) + "\n"
