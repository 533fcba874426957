"""Offline patch tooling: add, verify, record, the on-GPU check. Never imported by the serving side (the plugin,
its install, runtime, guard, adapters and status), so nothing of it runs inside SGLang's server processes."""
