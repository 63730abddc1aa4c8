"""Frontends: each turns a framework's graph (torch.fx, TVM Relax, ONNX, a HuggingFace config) into an OpGraph."""
