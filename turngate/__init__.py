"""turngate: a sidecar proxy that keeps invalid LLM message sequences from being sent."""

__version__ = "0.1.0"
