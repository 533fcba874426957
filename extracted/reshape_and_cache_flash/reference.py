"""Reference for reshape_and_cache_flash (astra-sglang, written): a scatter of K/V rows into the paged cache.

slot s < 0 is padding and writes nothing; slot s >= 0 is page s // page_size, row s % page_size."""


def reference(**args):
    key_cache = args["key_cache"].clone()
    value_cache = args["value_cache"].clone()
    pages, page_size, heads, dim = key_cache.shape
    slots = args["slot_mapping"].long()
    keep = slots >= 0
    key_cache.view(pages * page_size, heads, dim)[slots[keep]] = args["key"][keep]
    value_cache.view(pages * page_size, heads, dim)[slots[keep]] = args["value"][keep]
    return {"key_cache": key_cache, "value_cache": value_cache}
