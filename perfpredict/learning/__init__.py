"""Learning: everything that turns measurements into the artifacts ``perfpredict.predictors`` serves.

Training data (measured rows -> feature tables), training and adaptation, evaluation and model selection, the
fitting half of every learner (one contract, ``learner.py``), the two-timeline model's scale fit, the GPU
op-efficiency rows and fitting, and the conformal intervals the two-timeline model ships. The predictors never
import this package: answering a question loads an artifact, it never reaches training code.
"""
