"""The one contract every learner follows, in scikit-learn's shape.

- Hyper-parameters are the keyword arguments of ``__init__``, stored under the same names and never changed by
  ``fit``; :meth:`get_params` returns them, so ``type(learner)(**learner.get_params())`` is an unfitted copy
  with the same settings (cross-validation builds one per fold this way).
- ``fit(train, targets, seed) -> self`` learns from a :class:`~perfpredict.predictors.feature_rows.TrainingSet`.
  The seed is an argument of ``fit``, not a hyper-parameter: cross-validation and the benchmarks refit one
  setting under several seeds, and the artifact's manifest records the seed apart from the hyper-parameters.
- ``predict(data) -> {target: TargetPrediction}`` for the targets it learned; before ``fit`` (or a load) it
  raises :class:`~perfpredict.core.errors.NotFittedError`.
- A learner that ships an artifact saves with ``to_files() -> {name: bytes}`` and loads with the classmethod
  ``from_files(manifest, files)``; the loaded learner predicts what the saved one did.
- ``name``, ``version`` and ``schema`` (the feature-schema hash the manifest checks) are class attributes.

Where the answering half of a learner is served at prediction time (xgboost's trees), it lives in
``perfpredict.predictors`` and the learner here fits it; prediction never imports this package.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Protocol, TypeVar, runtime_checkable

from perfpredict.core.errors import NotFittedError

if TYPE_CHECKING:
    from perfpredict.predictors.artifacts import Manifest
    from perfpredict.predictors.feature_rows import TrainingSet
    from perfpredict.predictors.learned import TargetPrediction

Model = TypeVar("Model")


@runtime_checkable
class Learner(Protocol):
    name: ClassVar[str]

    def get_params(self) -> dict[str, Any]: ...

    def fit(self, train: TrainingSet, targets: Sequence[str], seed: int = 0) -> Learner: ...

    def predict(self, data: TrainingSet) -> dict[str, TargetPrediction]: ...


@runtime_checkable
class ArtifactLearner(Learner, Protocol):
    """A learner whose fitted state ships as an artifact (``perfpredict train`` writes it)."""

    version: ClassVar[str]
    schema: ClassVar[str]
    targets: list[str]

    def to_files(self) -> dict[str, bytes]: ...

    @classmethod
    def from_files(cls, manifest: Manifest | None, files: dict[str, bytes]) -> ArtifactLearner: ...


class Params:
    """``get_params`` read from ``__init__``'s signature, as scikit-learn's BaseEstimator does (without
    depending on scikit-learn for twenty lines): every keyword of ``__init__`` is stored under its own name."""

    def get_params(self) -> dict[str, Any]:
        names = [
            p.name
            for p in inspect.signature(type(self).__init__).parameters.values()
            if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        ]
        return {name: getattr(self, name) for name in names}

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
        return f"{type(self).__name__}({params})"


def not_fitted(learner: Any) -> NotFittedError:
    """The error a learner raises when asked to predict or save before it was fitted or loaded."""
    name = getattr(learner, "name", type(learner).__name__)
    return NotFittedError(
        f"{name!r} learner is not fitted: call fit(train, targets) first, or load a trained artifact "
        f"({type(learner).__name__}.from_files)"
    )


class FitsOneModel(Generic[Model]):
    """For a learner whose ``fit`` leaves one answering model in ``model_`` (None until then): ``model`` hands it
    out, and before ``fit`` raises NotFittedError as the contract says, in one place for every such learner."""

    model_: Model | None

    @property
    def model(self) -> Model:
        """The fitted model (raises NotFittedError before ``fit``)."""
        if self.model_ is None:
            raise not_fitted(self)
        return self.model_
