"""kernelopt: LLM-driven CUDA kernel optimization with an honest referee."""

__version__ = "0.1.0"
