"""forensics: post-incident forensic analyzer for LLM inference hosts."""

__version__ = "0.1.0"
