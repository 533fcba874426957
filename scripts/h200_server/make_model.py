"""Run ON THE DEVICE: a LLaMA-architecture checkpoint with random weights and a byte-level BPE tokenizer trained
on the spot (the image has transformers and tokenizers but no network, hence no downloadable model).

Shapes are chosen to reach the shipped fused_add_rmsnorm patch's guard (hidden 4096; prefill batches of 128..512
tokens): hidden 4096, intermediate 11008, 32 heads of 128 (8 KV heads), a few layers. Weights are N(0, 0.02)
with a fixed seed, so both servers load the same model. The output head is N(0, 6/sqrt(hidden)) instead: logits
then spread by about 6 nats and the greedy token usually leads by a nat or more, as in a trained model. With
N(0, 0.02) the 640-way distribution is nearly flat: at hidden 4096, 5.3% of steps have a top-1/top-2 gap under
0.02 nats (1.4% with the scaled head; logit_gaps.py on the CPU host), so one-ulp differences flip tokens often and
token identity tests little.
With a config name instead of LAYERS (``llama3-8b``, ``qwen3-30b-a3b``, ... any of ``astra-sglang profile
--config``'s) it writes that config alone beside the tokenizer (``astra_sglang.profile.configs``): SGLang's
``--load-format dummy`` fills the weights (forward.py's and e2e's runs, MAKE_MODEL="DIR NAME" in device.sh). Needs
astra-sglang importable (device.sh puts its wheel on PYTHONPATH).
MAX_POS (environment, default 4096): the random-weight model's max_position_embeddings, SGLang's context length:
16384 for a validate at context 8192 (device.sh keeps that model in /tmp/model-$MAX_POS).
Usage: make_model.py OUT_DIR [LAYERS | CONFIG_NAME]
"""

import os
import sys
from pathlib import Path

import torch
from tokenizers import Tokenizer
from transformers import LlamaConfig, LlamaForCausalLM

from astra_sglang.profile.configs import write_config_model, write_tokenizer

out = sys.argv[1]
if len(sys.argv) > 2 and not sys.argv[2].isdigit():  # config only, any of profile --config's names
    name = sys.argv[2]
    try:
        write_config_model(name, Path(out))
    except Exception as e:  # an unknown name: say which exist
        sys.exit(f"make_model.py: {e}")
    print(f"config only: {out}: {name} dims (weights: --load-format dummy)")
    sys.exit(0)
layers = int(sys.argv[2]) if len(sys.argv) > 2 else 4
Path(out).mkdir(parents=True, exist_ok=True)
bos, eos = write_tokenizer(Path(out))  # the tokenizer profile's config folders get: one corpus, one trainer
size = Tokenizer.from_file(str(Path(out) / "tokenizer.json")).get_vocab_size()
vocab = (size + 63) // 64 * 64
cfg = LlamaConfig(vocab_size=vocab, hidden_size=4096, intermediate_size=11008, num_hidden_layers=layers,
                  num_attention_heads=32, num_key_value_heads=8, head_dim=128,
                  max_position_embeddings=int(os.environ.get("MAX_POS", "4096")),
                  rms_norm_eps=1e-5, bos_token_id=bos, eos_token_id=eos, torch_dtype="bfloat16",
                  tie_word_embeddings=False)
torch.manual_seed(0)
model = LlamaForCausalLM(cfg)
with torch.no_grad():
    for p in model.parameters():
        p.normal_(0.0, 0.02)
    for name, p in model.named_parameters():
        if "norm" in name:  # RMSNorm gains near 1, as in a trained model
            p.normal_(1.0, 0.1)
    model.lm_head.weight.normal_(0.0, 6.0 / cfg.hidden_size ** 0.5)
model.to(torch.bfloat16).save_pretrained(out, safe_serialization=True)
print(f"model: {out}: {layers} layers, hidden {cfg.hidden_size}, {cfg.torch_dtype}, vocab {vocab} (tokenizer {size}), "
      f"context {cfg.max_position_embeddings}")
