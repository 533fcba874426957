"""STAND-IN (not vLLM): the one vllm op SGLang 0.5.23 calls on a non-CUDA device without its CPU engine."""
