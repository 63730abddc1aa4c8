"""The benchmark suite: each module reproduces figures the README and the docs quote (``python -m benchmarks``).

One-off studies whose findings are now in the code or in data/README.md live in ``studies/``.
"""
