def reference(**args):
    return {"out": args["table"].float()[args["index"].long()]}
