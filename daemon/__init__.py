"""docsumd: a long-running service that summarizes long documents with vLLM."""

__version__ = "0.2.0"
