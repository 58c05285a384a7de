"""semiret: semi-parametric retrieval (BM25, tokenizer-only bag-of-tokens, learned sparse and dense search).

The layers and how a method composes them: docs/architecture.md."""

__version__ = "0.1.0"
