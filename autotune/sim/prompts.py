"""The field report's benchmark prompts (5 fixed prompts, max_tokens 1024, temperature 0)."""

from __future__ import annotations

#: (id, text): general relativity; merge sort (code); climate change; photosynthesis; ML vs traditional programming
FIELD_REPORT_PROMPTS: tuple[tuple[str, str], ...] = (
    ("relativity", "Explain the theory of general relativity in simple terms."),
    ("merge-sort", "Write a Python function that implements merge sort, and explain how it works."),
    ("climate", "What are the main causes and consequences of climate change?"),
    ("photosynthesis", "Describe the process of photosynthesis in detail."),
    ("ml-vs-programming", "How does machine learning differ from traditional programming?"),
)
