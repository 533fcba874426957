"""``astra-sglang e2e``: SGLang's own model forward, patches off / on / placebo, in fresh processes, judged."""
