"""A share of a spike's rise is read only from a predictor that predicts held-out steps."""

import math

from hypothesis import given
from hypothesis import strategies as st

from dflash_diag.spikes.attribute import R2_MIN, trusted_predictions
from dflash_diag.spikes.model import CompositionModel


def model_with(r2_cv: float) -> CompositionModel:
    return CompositionModel(
        features=("mean_len",),
        coef=(1.0,),
        intercept=0.0,
        n=100,
        n_outliers=0,
        r2=0.5,
        r2_quiet=0.5,
        r2_cv=r2_cv,
        r2_cv_folds=(r2_cv,),
        resid_scale=0.1,
    )


r2s = st.one_of(st.none(), st.just(math.nan), st.floats(-3, 1))
preds = st.one_of(st.none(), st.floats(-10, 10))


def usable(r2: float | None) -> bool:
    return r2 is not None and math.isfinite(r2) and r2 >= R2_MIN


def test_the_model_that_predicts_nothing_held_out_gives_no_share():
    # the case seen live at step 52: model R² -1.09, the similar batches' predictor usable
    pred, like = trusted_predictions(3.5, 2.0, model_with(-1.09), 0.4)
    assert (pred, like) == (None, 2.0)


@given(preds, preds, r2s, r2s)
def test_kept_predictions_come_from_usable_predictors(pred, like, r2_cv, r2_similar):
    model = None if r2_cv is None else model_with(r2_cv)
    got_pred, got_like = trusted_predictions(pred, like, model, r2_similar)
    any_usable = usable(r2_cv) or usable(r2_similar)
    if not any_usable:
        assert (got_pred, got_like) == (pred, like)  # the verdict then says "predicts nothing"
    else:
        assert got_pred == (pred if usable(r2_cv) else None)
        assert got_like == (like if usable(r2_similar) else None)
