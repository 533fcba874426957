"""How peaked a model's next-token distributions are: the gap between its top two logprobs over random contexts.

A model whose gaps are mostly tiny makes token identity a test of nothing (every step is a near tie).
Usage: logit_gaps.py MODEL_DIR
"""

import sys

import torch
from transformers import AutoModelForCausalLM

dev = "cuda" if torch.cuda.is_available() else "cpu"
m = AutoModelForCausalLM.from_pretrained(sys.argv[1], dtype=torch.float32).to(dev)
torch.manual_seed(1)
ids = torch.randint(3, 590, (8, 64)).to(dev)
with torch.no_grad():
    lp = m(ids).logits.float().log_softmax(-1)
top = lp.topk(2, -1).values
gap = (top[..., 0] - top[..., 1]).flatten()
print(f"{sys.argv[1]}: top-1 logprob median {top[..., 0].median():.3f}; gap top1-top2 median {gap.median():.4f}, "
      f"p10 {gap.quantile(0.1):.4f}, share < 0.02: {(gap < 0.02).float().mean():.3f}, "
      f"share < 0.1: {(gap < 0.1).float().mean():.3f}")
