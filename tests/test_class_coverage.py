"""Per-class coverage of a staged release: recall, counts, the last stage a class was released."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from dpkd_audit.pipelines.common.class_coverage import (
    ClassTally,
    class_coverage,
    class_recall,
    classes_at_risk,
    warn_classes_at_risk,
)


def test_recall_counts_each_class_and_marks_a_class_without_test_images() -> None:
    labels = np.array([0, 0, 0, 1, 1, 3])
    predictions = np.array([0, 1, 0, 1, 0, 0])
    recall = class_recall(predictions, labels, 4)
    assert recall[0] == pytest.approx(2 / 3) and recall[1] == 0.5 and recall[3] == 0.0
    assert math.isnan(recall[2])


@pytest.mark.parametrize(("predictions", "labels", "match"), [
    (np.array([0, 1]), np.array([0]), "same shape"),
    (np.array([0, 4]), np.array([0, 1]), r"predictions must lie in 0\.\.3; got values from 0 to 4"),
    (np.array([0.0, 1.0]), np.array([0, 1]), "predictions must be a 1-D integer array"),
    (np.array([0, 1]), np.array([[0, 1]]), "labels must be a 1-D integer array"),
])
def test_recall_refuses_bad_input_by_name(predictions, labels, match) -> None:
    with pytest.raises(ValueError, match=match):
        class_recall(predictions, labels, 4)


def test_tally_keeps_the_last_stage_each_class_was_released() -> None:
    tally = ClassTally(3)
    tally.update(np.array([0, 1, 2, 1]), np.array([0, 1, 1, 2]))
    tally.update(np.array([0, 1, 1, 1]), np.array([0, 0, 2, 2]))
    tally.update(np.array([2, 2, 0, 0]), np.array([0, 2, 0, 0]))
    assert tally.teacher_labels.tolist() == [4, 5, 3]
    assert tally.released.tolist() == [6, 2, 4]
    assert tally.last_released_stage.tolist() == [3, 1, 3]
    with pytest.raises(ValueError, match=r"released must lie in 0\.\.2"):
        tally.update(np.array([0]), np.array([3]))
    assert tally.stages == 3  # a refused update counts nothing


def _run() -> tuple[ClassTally, np.ndarray]:
    tally = ClassTally(3)
    tally.update(np.array([0, 1, 2]), np.array([0, 1, 2]))
    for _ in range(4):
        tally.update(np.array([0, 1, 2]), np.array([0, 2, 2]))  # class 1 never again
    return tally, np.array([0, 0, 1, 1, 2, 2])


def test_a_lost_class_is_named_with_the_stage_it_left_and_warned() -> None:
    tally, labels = _run()
    with pytest.warns(RuntimeWarning, match=r"class 1 \(student recall 0\.0%, teacher 100\.0%; "
                                            r"the teacher's label of 33\.3% .* 1 labels released\)"
                                            r": it left the release at stage 1 of 5"):
        coverage = class_coverage(tally, teacher_predictions=labels,
                                  student_predictions=np.array([0, 0, 2, 2, 2, 2]),
                                  test_labels=labels)
    assert coverage.lost_classes == (1,)
    record = coverage.to_record()
    assert record["lost"] == {"1": coverage.cause(1)} and record["last_released_stage"] == [5, 1, 5]
    assert record["released"] == [5, 1, 9] and record["student_recall"] == [1.0, 0.0, 1.0]


def test_a_class_the_teacher_does_not_know_is_not_lost() -> None:
    tally, labels = _run()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        coverage = class_coverage(tally, teacher_predictions=np.array([0, 0, 2, 2, 2, 2]),
                                  student_predictions=np.array([0, 0, 2, 2, 2, 2]),
                                  test_labels=labels)
    assert coverage.lost_classes == () and coverage.describe_lost() is None


def test_the_line_is_a_quarter_of_the_teachers_recall() -> None:
    tally = ClassTally(2)
    tally.update(np.array([0, 1]), np.array([0, 1]))
    labels = np.array([0] * 4 + [1] * 8)
    teacher = np.array([0] * 4 + [1] * 8)  # recall 1.0 on class 1
    kept = np.array([0] * 4 + [1] * 2 + [0] * 6)  # 2/8 = 0.25: not under a quarter
    lost = np.array([0] * 4 + [1] * 1 + [0] * 7)  # 1/8
    assert class_coverage(tally, teacher_predictions=teacher, student_predictions=kept,
                          test_labels=labels, warn=False).lost_classes == ()
    assert class_coverage(tally, teacher_predictions=teacher, student_predictions=lost,
                          test_labels=labels, warn=False).lost_classes == (1,)


def test_the_cause_tells_a_rare_class_from_a_dropped_and_an_unlearned_one() -> None:
    tally = ClassTally(4)
    for stage in range(1, 11):
        teacher = np.array([0] * 10 + [1] * 10 + [2] * 10 + [3])  # class 3: 1 of 31 < 1/16
        released = np.array([0] * 10 + [1] * 10 + ([2] * 10 if stage <= 5 else [0] * 10) + [3])
        tally.update(teacher, released)
    labels = np.arange(4)
    coverage = class_coverage(tally, teacher_predictions=labels,
                              student_predictions=np.array([0, 0, 0, 0]), test_labels=labels,
                              warn=False)
    assert coverage.lost_classes == (1, 2, 3)
    assert coverage.cause(1) == "it was released to the end but not learned"
    assert coverage.cause(2).startswith("it left the release at stage 5 of 10")
    assert coverage.cause(3) == "the generator rarely makes it"


# the generator histograms of the four measured Fashion-MNIST seeds (1,000 samples each,
# reports/benchmarks/published-caps-cpu/dpdfd_prep_seeds.jsonl, `gen_hist`)
_SEED_HISTOGRAMS = {
    0: [107, 28, 85, 80, 90, 118, 181, 56, 124, 131],
    1: [146, 69, 91, 67, 93, 121, 155, 59, 79, 120],
    2: [94, 60, 105, 52, 102, 132, 150, 73, 110, 122],
    3: [95, 49, 121, 92, 88, 121, 134, 94, 108, 98],
}


def test_a_class_the_generator_rarely_makes_is_flagged_at_small_epsilon_only() -> None:
    # seeds 0 and 3 lost trousers (class 1) at eps 1, seeds 1 and 2 kept them
    assert classes_at_risk(_SEED_HISTOGRAMS[0], epsilon=1.0) == (1,)
    assert classes_at_risk(_SEED_HISTOGRAMS[3], epsilon=1.0) == (1,)
    assert classes_at_risk(_SEED_HISTOGRAMS[1], epsilon=1.0) == ()
    assert classes_at_risk(_SEED_HISTOGRAMS[2], epsilon=1.0) == ()
    # at eps 10 the first stage keeps 0.9996 of the teacher's labels: nothing to flag; the
    # boundary is a keep probability of 1/2, e^eps = k - 1 (eps = ln 9 for k = 10)
    assert classes_at_risk(_SEED_HISTOGRAMS[0], epsilon=10.0) == ()
    assert classes_at_risk(_SEED_HISTOGRAMS[0], epsilon=math.log(9) - 1e-9) == (1,)
    assert classes_at_risk(_SEED_HISTOGRAMS[0], epsilon=math.log(9) + 1e-9) == ()
    assert classes_at_risk([10, 0, 10], epsilon=1e6) == ()
    # exactly 1/(2k) = 1/8 is not under it; two classes are never flagged (keep > 1/2)
    assert classes_at_risk([1, 3, 2, 2], epsilon=0.5) == ()
    assert classes_at_risk([1, 4, 2, 3], epsilon=0.5) == (0,)
    assert classes_at_risk([1, 99], epsilon=1e-3) == ()


def test_the_warning_names_the_class_its_share_and_the_keep_probability() -> None:
    with pytest.warns(RuntimeWarning, match=r"rarely makes 1 class\(es\) \(class 1 2\.8% of its "
                      r"images, under 1/\(2k\) = 5\.0%\) and at per-label eps=1 the first "
                      r"stage keeps the teacher's label with probability 0\.23"):
        assert warn_classes_at_risk(_SEED_HISTOGRAMS[0], epsilon=1.0) == (1,)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert warn_classes_at_risk(_SEED_HISTOGRAMS[1], epsilon=1.0) == ()


@pytest.mark.parametrize(("histogram", "epsilon", "match"), [
    ([3], 1.0, "class_histogram must be >= 2"),
    ([0, 0], 1.0, "positive sum"),
    ([1, -1, 2], 1.0, "non-negative"),
    ([1, float("nan")], 1.0, "class_histogram"),
    ([1, 2], 0.0, "epsilon"),
    ([1, 2], -1.0, "epsilon"),
])
def test_classes_at_risk_refuses_bad_input_by_name(histogram, epsilon, match) -> None:
    with pytest.raises(ValueError, match=match):
        classes_at_risk(histogram, epsilon=epsilon)
