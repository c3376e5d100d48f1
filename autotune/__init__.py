"""autotune: find the fastest speculative-decoding configuration of an LLM inference server, or prove that none
beats the baseline."""

__version__ = "0.1.0"
