"""Public GPU measurements, converted once into perfpredict's op-row schema (``data/external/<source>/``).

Each source has a converter module here that reads a fetched copy of the source's repository
(``python -m perfpredict.external.convert <source> <path>``) and writes a compact parquet with the source's license
and a README. Nothing is downloaded at run time: the parquet files are committed.
"""
