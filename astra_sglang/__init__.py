"""astra-sglang: extract SGLang's GPU kernels, optimize them with a multi-agent LLM loop, patch winners back.

Importing this package must stay cheap and dependency-free (it runs inside every SGLang process through the
plugin entry point): no torch, triton or openai-agents at import time.
"""

__version__ = "0.1.0"
