"""A workload: the requests a simulation serves, and the synthetic ones drawn from a seed."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


class WorkloadError(ValueError):
    """A workload that cannot be built; the message names the option to fix."""


@dataclass(frozen=True)
class RequestSpec:
    """One request: when its client wants to send it, its prompt and output lengths."""

    id: str
    arrival_s: float
    prompt_len: int
    output_len: int


@dataclass(frozen=True)
class Workload:
    """Requests in arrival order; at most ``concurrency`` in flight (None: no limit), a
    request waiting for a free slot is sent when one frees. ``acceptance[i]`` is the chance
    that draft i+1 is accepted given the drafts before it were; ``seed`` drives the draws."""

    requests: tuple[RequestSpec, ...]
    concurrency: int | None
    acceptance: tuple[float, ...]
    seed: int


@dataclass(frozen=True)
class Lengths:
    """A length distribution: uniform on ``low..high`` (equal bounds: fixed)."""

    low: int
    high: int

    @classmethod
    def parse(cls, text: str, option: str) -> "Lengths":
        """``N`` or ``LOW:HIGH``; WorkloadError naming ``option`` otherwise."""
        parts = text.split(":")
        if len(parts) in (1, 2) and all(p.isascii() and p.isdigit() for p in parts):
            low, high = int(parts[0]), int(parts[-1])
            if 1 <= low <= high:
                return cls(low, high)
        raise WorkloadError(f"{option} must be N or LOW:HIGH with 1 <= LOW <= HIGH, got {text[:40]!r}")

    def draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.integers(self.low, self.high + 1, size=n)


def parse_acceptance(text: str) -> tuple[float, ...]:
    """Comma-separated per-position acceptance rates in [0, 1]; WorkloadError otherwise."""
    try:
        rates = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        rates = ()
    if not rates or not all(math.isfinite(r) and 0 <= r <= 1 for r in rates):
        raise WorkloadError(f"--acceptance must be comma-separated rates in [0, 1], got {text[:60]!r}")
    return rates


def synthetic(num_requests: int, concurrency: int | None, rate: float | None, prompt: Lengths, output: Lengths,
              acceptance: tuple[float, ...], seed: int) -> Workload:
    """``num_requests`` requests: Poisson arrivals at ``rate`` per second (None: all at 0),
    lengths drawn from ``prompt`` and ``output``; the same arguments give the same workload."""
    if num_requests < 1:
        raise WorkloadError(f"--requests must be at least 1, got {num_requests}")
    rng = np.random.default_rng([seed, 0])
    gaps = rng.exponential(1.0 / rate, num_requests) if rate else np.zeros(num_requests)
    arrivals = np.cumsum(gaps) - gaps[0]
    prompts, outputs = prompt.draw(rng, num_requests), output.draw(rng, num_requests)
    requests = tuple(RequestSpec(f"r{i}", float(arrivals[i]), int(prompts[i]), int(outputs[i]))
                     for i in range(num_requests))
    return Workload(requests, concurrency, acceptance, seed)
