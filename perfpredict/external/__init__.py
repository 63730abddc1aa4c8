"""Converters of public GPU measurements into ``data/external/<source>/`` (one module per source, run once)."""
