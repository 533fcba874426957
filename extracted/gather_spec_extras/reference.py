"""Reference for gather_spec_extras (astra-sglang, written): advanced-index gathers by slot."""


def reference(**args):
    i = args["indices"]
    return {"topk_p": args["topk_p_buf"][i], "topk_index": args["topk_index_buf"][i],
            "bonus_tokens": args["output_tokens_buf"][i], "hidden_states": args["hidden_states_buf"][i]}
