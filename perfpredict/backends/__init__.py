"""The compiler doors: the torch.compile backend (torch_backend) and the TVM Relax pass (relax_pass). Each turns
what the compiler hands it into an OpGraph with the frontends and asks for the report: the backend through the
pipeline (``pipeline.predict``), the Relax pass through ``graph_report.report_for_graph`` for the one graph it holds.
"""
