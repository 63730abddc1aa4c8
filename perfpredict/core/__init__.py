"""The core types every layer shares: the OpGraph (graph), op kinds and their rules (ops, op_kinds), the report
(report) and its totals (breakdown, memory_advice), errors, byte units and the lazy public-name tables.
"""
