"""Formatting only: a report as terminal text (text), a self-contained HTML page (html), and where the last report
goes (delivery: last_report, show, files).
"""
