"""Run ON THE DEVICE: a LLaMA-architecture checkpoint with random weights and a byte-level BPE tokenizer trained
on the spot (the image has transformers and tokenizers but no network, hence no downloadable model).

Shapes are chosen to reach the shipped fused_add_rmsnorm patch's guard (hidden 4096; prefill batches of 128..512
tokens): hidden 4096, intermediate 11008, 32 heads of 128 (8 KV heads), a few layers. Weights are N(0, 0.02)
with a fixed seed, so both servers load the same model. The output head is N(0, 6/sqrt(hidden)) instead: logits
then spread by about 6 nats and the greedy token usually leads by a nat or more, as in a trained model. With
N(0, 0.02) the 640-way distribution is nearly flat: at hidden 4096, 5.3% of steps have a top-1/top-2 gap under
0.02 nats (1.4% with the scaled head; logit_gaps.py on the CPU host), so one-ulp differences flip tokens often and
token identity tests little.
With ``llama3-8b`` as LAYERS it writes LLaMA-3-8B's config alone (32 layers, hidden 4096, 32 q / 8 KV heads of 128,
intermediate 14336) beside the tokenizer: SGLang's ``--load-format dummy`` fills the weights (forward.py's runs).
Usage: make_model.py OUT_DIR [LAYERS | llama3-8b]
"""

import sys

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

out = sys.argv[1]
config_only = len(sys.argv) > 2 and sys.argv[2] == "llama3-8b"
layers = 32 if config_only else int(sys.argv[2]) if len(sys.argv) > 2 else 4
corpus = [
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
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=2048, special_tokens=["<s>", "</s>"],
                                                    initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>")
fast.save_pretrained(out)
vocab = (len(fast) + 63) // 64 * 64
cfg = LlamaConfig(vocab_size=128256 if config_only else vocab, hidden_size=4096,
                  intermediate_size=14336 if config_only else 11008, num_hidden_layers=layers,
                  num_attention_heads=32, num_key_value_heads=8, head_dim=128,
                  max_position_embeddings=16384 if config_only else 4096, rope_theta=500000.0 if config_only else 10000.0,
                  rms_norm_eps=1e-5, bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id,
                  torch_dtype="bfloat16", tie_word_embeddings=False)
if config_only:
    cfg.architectures = ["LlamaForCausalLM"]  # SGLang reads the model class from it; a bare config has None
    cfg.save_pretrained(out)
    print(f"config only: {out}: LLaMA-3-8B dims, {layers} layers (weights: --load-format dummy)")
    sys.exit(0)
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
print(f"model: {out}: {layers} layers, hidden {cfg.hidden_size}, {cfg.torch_dtype}, vocab {vocab} (tokenizer {len(fast)})")
