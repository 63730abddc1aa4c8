"""Neural architecture search: predict thousands of candidates in milliseconds each, adapt to a few measurements.

``perfpredict.predict_models`` (``batch.py``) scores candidate models as numpy columns, each captured by
``candidates.py``; ``adapt.py`` fits a latency model to a handful of measured candidates; ``fbnet.py`` is the
FBNet search space that HELP's public latency set (``perfpredict.external.help``) measured.
"""
