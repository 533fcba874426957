"""One module per catalog op, named as its ``short_name``, each exporting its ``ENTRY``."""
