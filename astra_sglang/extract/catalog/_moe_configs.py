"""SGLang's fused-MoE launch configs per GPU (the H200's first) and the expert splits it serves MoE models with.

Shared by the MoE ops (moe_align_block_size's BLOCK_SIZE_M, fused_moe_kernel's tiles): both must use the config
SGLang would pick for a shape, or the folder pins a launch SGLang never makes.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from astra_sglang.extract.shapes import MOE_MODELS, TP_SIZES, MoeConfig

_CONFIG_DIR = "srt/layers/moe/moe_runner/triton_utils/configs"
# the GPUs whose tuned configs the fused-MoE contracts carry, as torch names them; the first is the contract's own
# (the H200 its issue targets). SGLang's file name is the torch name with "_" for " " (get_config_file_name)
SERVED_GPUS = ("NVIDIA H200", "NVIDIA H100 80GB HBM3")
PRIMARY_GPU = SERVED_GPUS[0]


def served_dtype(model: MoeConfig) -> tuple[str | None, list[int] | None]:
    """The expert-weight format a model is served in on the H200 (DeepSeek-V3 ships block-wise FP8)."""
    return ("fp8_w8a8", [128, 128]) if model.name.startswith("DeepSeek") else (None, None)


@cache
def _tuned(e: int, n: int, dtype: str | None, block: tuple[int, ...] | None,
           down: bool = False, gpu: str = PRIMARY_GPU) -> dict[int, dict[str, Any]] | None:
    """SGLang's tuned fused-MoE configs for ``gpu`` (get_moe_configs: this Triton's folder, else newest first;
    ``down``: the down-projection's own file, ``..._down.json``)."""
    import triton

    from astra_sglang.extract.sglang_env import sglang_root

    device = gpu.replace(" ", "_")
    name = f"E={e},N={n},device_name={device}" + (f",dtype={dtype}" if dtype else "") + (
        f",block_shape={list(block)}" if block else "") + ("_down" if down else "") + ".json"
    root = sglang_root() / _CONFIG_DIR
    own = f"triton_{triton.__version__.replace('.', '_')}"
    versions = sorted((d.name for d in root.iterdir() if d.name.startswith("triton_")),
                      key=lambda v: tuple(int(x) for x in v.removeprefix("triton_").split("_")), reverse=True)
    for folder in [own, *[v for v in versions if v != own]]:
        path: Path = root / folder / name
        if path.is_file():
            return {int(k): v for k, v in json.loads(path.read_text()).items()}
    return None


def moe_config(e: int, n: int, m: int, dtype: str | None, block: list[int] | None,
               gpu: str = PRIMARY_GPU) -> dict[str, Any]:
    """The fused_moe_kernel config SGLang picks on ``gpu`` for M tokens (try_get_optimal_moe_config): the tuned
    entry nearest M, else get_default_config's bf16 / block-FP8 default."""
    tuned = _tuned(e, n, dtype, tuple(block) if block else None, gpu=gpu)
    if tuned:
        return dict(tuned[min(tuned, key=lambda x: abs(x - m))])
    if dtype == "fp8_w8a8" and block:
        return {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": block[0], "BLOCK_SIZE_K": block[1], "GROUP_SIZE_M": 32,
                "num_warps": 4, "num_stages": 3}
    if m <= e:
        return {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 1}
    return {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": 8}


def moe_down_config(e: int, n: int, m: int, dtype: str | None, block: list[int] | None,
                    gpu: str = PRIMARY_GPU) -> dict[str, Any]:
    """The down-projection's config (try_get_optimal_moe_config(return_down_config=True)): the tuned ``_down``
    entry nearest M with the up config's BLOCK_SIZE_M (one moe_align sort serves both calls), else the up config
    itself (fused_experts_impl passes ``down_config or config``)."""
    up = moe_config(e, n, m, dtype, block, gpu)
    tuned = _tuned(e, n, dtype, tuple(block) if block else None, down=True, gpu=gpu)
    if not tuned:
        return up
    down = dict(tuned[min(tuned, key=lambda x: abs(x - m))])
    if down.pop("USE_TMA", False):  # on Hopper SGLang then takes the TMA path (a_use_tma, c_sorted): another call
        raise ValueError(f"E={e},N={n}: the {gpu} down config at M={m} asks for TMA, a call form no contract pins")
    return {**down, "BLOCK_SIZE_M": up["BLOCK_SIZE_M"]}


def moe_splits() -> list[tuple[MoeConfig, int, int, int, str]]:
    """(model, local experts, expert-parallel size, intermediate per expert after TP, source) for every split
    SGLang serves the model with: TP only (experts whole, intermediate split) and EP (experts split)."""
    out: list[tuple[MoeConfig, int, int, int, str]] = []
    for m in MOE_MODELS:
        for tp in TP_SIZES:
            if m.intermediate % tp == 0 and m.intermediate // tp >= 128 and (m.name != "DeepSeek-V3" or tp == 8):
                out.append((m, m.experts, 1, m.intermediate // tp, f"{m.name} TP{tp}"))
        for ep in m.ep_sizes:
            if ep > 1:
                out.append((m, m.experts // ep, ep, m.intermediate, f"{m.name} EP{ep}"))
    return out
