"""On-disk caches: size-limited, concurrency-safe gzipped-JSON storage (disk_store) and the one graph cache on it
(graph_store), keyed by the capture code's digest and the question.
"""
