"""render: see docs/architecture.md."""
