"""Converters of public measurements into compact tables under ``data/external/<source>/`` (run once, offline)."""
