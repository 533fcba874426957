"""Config-only model folders (``config.json`` + a small tokenizer) for well-known architectures, so ``profile``
runs SGLang's forward at real model dimensions without weights (``--load-format dummy`` fills them).

The values are the public ``config.json`` of each model on the Hugging Face Hub (meta-llama/Meta-Llama-3-8B,
Qwen/Qwen3-8B, Qwen/Qwen3-30B-A3B, mistralai/Mixtral-8x7B-v0.1, deepseek-ai/DeepSeek-V2-Lite), the fields
transformers' config classes read (LlamaConfig, Qwen3Config, Qwen3MoeConfig, MixtralConfig, DeepseekV2Config).
``llama3-8b`` reproduces ``scripts/h200_server/make_model.py llama3-8b`` field for field (max_position_embeddings
16384 there, against the model's 8192, so longer --input-len runs fit; everything that sets a kernel shape is
the model's). The token ids of bos/eos are the small tokenizer's, as in make_model.py.

The tokenizer is a byte-level BPE trained on the spot (2048 tokens, the corpus of make_model.py): no network
is needed, and its ids are all below every model's vocabulary, so a prompt is valid input for the model.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from astra_sglang.errors import AstraError

_COMMON: dict[str, Any] = {"torch_dtype": "bfloat16", "hidden_act": "silu", "initializer_range": 0.02,
                           "attention_bias": False, "attention_dropout": 0.0, "use_cache": True}

CONFIGS: dict[str, dict[str, Any]] = {
    "llama3-8b": {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "vocab_size": 128256, "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
        "max_position_embeddings": 16384, "rope_theta": 500000.0, "rms_norm_eps": 1e-5,
        "tie_word_embeddings": False, "mlp_bias": False, "pretraining_tp": 1, "rope_scaling": None,
    },
    "qwen3-8b": {
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
        "vocab_size": 151936, "hidden_size": 4096, "intermediate_size": 12288, "num_hidden_layers": 36,
        "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
        "max_position_embeddings": 40960, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6,
        "tie_word_embeddings": False, "rope_scaling": None, "use_sliding_window": False, "sliding_window": None,
        "max_window_layers": 36,
    },
    "qwen3-30b-a3b": {
        "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
        "vocab_size": 151936, "hidden_size": 2048, "intermediate_size": 6144, "num_hidden_layers": 48,
        "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
        "max_position_embeddings": 40960, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6,
        "num_experts": 128, "num_experts_per_tok": 8, "moe_intermediate_size": 768, "norm_topk_prob": True,
        "decoder_sparse_step": 1, "mlp_only_layers": [], "output_router_logits": False,
        "router_aux_loss_coef": 0.001, "tie_word_embeddings": False, "rope_scaling": None,
        "use_sliding_window": False, "sliding_window": None, "max_window_layers": 48,
    },
    "mixtral-8x7b": {
        "architectures": ["MixtralForCausalLM"], "model_type": "mixtral",
        "vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
        "max_position_embeddings": 32768, "rope_theta": 1000000.0, "rms_norm_eps": 1e-5,
        "num_local_experts": 8, "num_experts_per_tok": 2, "output_router_logits": False,
        "router_aux_loss_coef": 0.02, "sliding_window": None, "tie_word_embeddings": False,
    },
    "deepseek-v2-lite": {
        "architectures": ["DeepseekV2ForCausalLM"], "model_type": "deepseek_v2",
        "vocab_size": 102400, "hidden_size": 2048, "intermediate_size": 10944, "num_hidden_layers": 27,
        "num_attention_heads": 16, "num_key_value_heads": 16,
        "kv_lora_rank": 512, "q_lora_rank": None, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
        "v_head_dim": 128,
        "n_routed_experts": 64, "n_shared_experts": 2, "num_experts_per_tok": 6, "moe_intermediate_size": 1408,
        "first_k_dense_replace": 1, "moe_layer_freq": 1, "topk_method": "greedy", "n_group": 1, "topk_group": 1,
        "routed_scaling_factor": 1.0, "scoring_func": "softmax", "norm_topk_prob": False, "aux_loss_alpha": 0.001,
        "seq_aux": True,
        "max_position_embeddings": 163840, "rope_theta": 10000.0, "rms_norm_eps": 1e-6,
        "rope_scaling": {"type": "yarn", "factor": 40.0,
                         "original_max_position_embeddings": 4096, "beta_fast": 32, "beta_slow": 1,
                         "mscale": 0.707, "mscale_all_dim": 0.707},
        "tie_word_embeddings": False,
    },
}
ALIASES = {"llama-3-8b": "llama3-8b", "meta-llama-3-8b": "llama3-8b", "mixtral-8x7b-v0.1": "mixtral-8x7b"}

# make_model.py's corpus: the tokenizer it trains is the one forward.py's runs used
_CORPUS = [
    "The scheduler batches requests so that the GPU stays busy while tokens stream back to clients.",
    "Each layer normalizes its input, attends over the cached keys and values, and mixes the result.",
    "A kernel that reads every byte once and writes every byte once is bound by memory bandwidth.",
    "When two kernels compute the same function in a different order, rounding can differ in the last bit.",
    "Operators watch throughput, latency and the share of requests that finish without an error.",
    "The capital of France is Paris. Once upon a time, in a quiet village by the sea, there lived a fisherman.",
    "def fibonacci(n): return n if n < 2 else fibonacci(n - 1) + fibonacci(n - 2)",
    "Translate to German: The weather is nice today. Das Wetter ist heute schoen.",
    "Q: What is 17 times 23? A: 391. List three prime numbers: 2, 3, 5.",
] * 50
TOKENIZER_VOCAB = 2048


def config_names() -> list[str]:
    return sorted(CONFIGS)


def model_config(name: str) -> dict[str, Any]:
    """The config.json body for ``name`` (case-insensitive; a few aliases); AstraError naming the known ones."""
    key = ALIASES.get(name.lower(), name.lower())
    if key not in CONFIGS:
        raise AstraError(f"no config {name!r} (known: {', '.join(config_names())})")
    return {**_COMMON, **CONFIGS[key]}


def write_tokenizer(out: Path) -> tuple[int, int]:
    """A byte-level BPE tokenizer trained on the spot, saved as tokenizer.json + tokenizer_config.json (what
    transformers' AutoTokenizer and SGLang load); returns (bos id, eos id)."""
    try:
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    except ImportError:
        raise AstraError("writing the tokenizer needs the `tokenizers` package (pip install tokenizers)") from None
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(_CORPUS, trainers.BpeTrainer(vocab_size=TOKENIZER_VOCAB, special_tokens=["<s>", "</s>"],
                                                         initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.save(str(out / "tokenizer.json"))
    bos, eos = tok.token_to_id("<s>"), tok.token_to_id("</s>")
    assert bos is not None and eos is not None  # the trainer was given both as special tokens
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
        "model_max_length": 1 << 30, "clean_up_tokenization_spaces": False}, indent=2) + "\n")
    (out / "special_tokens_map.json").write_text(json.dumps({"bos_token": "<s>", "eos_token": "</s>"}, indent=2) + "\n")
    return bos, eos


def write_config_model(name: str, out: Path) -> Path:
    """``out``/config.json for ``name`` plus the tokenizer; returns ``out``. Weights: ``--load-format dummy``."""
    cfg = model_config(name)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    bos, eos = write_tokenizer(out)
    cfg.update(bos_token_id=bos, eos_token_id=eos)
    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    return out
