"""ctxcore: the library behind ctxscope (trace contract, tokens, pipeline, store)."""

__version__ = "0.1.0"
