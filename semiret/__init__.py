"""semiret: semi-parametric retrieval (bag-of-tokens, learned sparse, generative and hierarchical dense search)."""

__version__ = "0.1.0"
