"""kernelopt: LLM-driven CUDA kernel optimization with an honest referee."""

__version__ = "0.1.0"


def __getattr__(name: str):
    """`from kernelopt import Session`: loaded on first use, so `import kernelopt` stays light
    (the command line's parser imports this package and must not load torch or the LLM client)."""
    if name in ("Session", "SessionError"):
        from kernelopt.agent import session

        return getattr(session, name)
    raise AttributeError(f"module 'kernelopt' has no attribute {name!r}")
