"""A/B validation of a real SGLang server: patches off against patches on, same prompts, same load.

Below the CLI and above the patches: it starts SGLang's own server (whose processes load the plugin), talks to
it only over SGLang's OpenAI-compatible HTTP API, and reads the plugin's per-process status records.
"""
