"""The compiler doors: the torch.compile backend (torch_backend) and the TVM Relax pass (relax_pass). Each turns
what the compiler hands it into an OpGraph with the frontends and asks the pipeline for the report.
"""
