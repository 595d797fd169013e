"""Shared pipeline building blocks (torch lives here): devices, progress, features, models."""

from dpkd_audit.pipelines.common.student import (
    LrSchedule,
    StudentConfig,
    StudentOptimizer,
    StudentResult,
    build_student,
    predict,
    train_student,
)

__all__ = [
    "LrSchedule",
    "StudentConfig",
    "StudentOptimizer",
    "StudentResult",
    "build_student",
    "predict",
    "train_student",
]
