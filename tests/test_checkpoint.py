"""Checkpoints of the long training loops: a run cut by SIGINT resumes bit-identically on CPU.

Each loop is interrupted by a real SIGINT raised inside a training step (a forward hook), as
``timeout --signal=INT`` would; the checkpoint is written at the end of that step, and a
second run with the same folder continues there. Deterministic: no timing is involved (saves
are forced by the signal or by a fake clock).
"""

from __future__ import annotations

import json
import signal
import threading
from pathlib import Path

import numpy as np
import pytest
import torch
from digits_helpers import digits_split, single_thread
from torch import nn

from dpkd_audit.cli.main import main
from dpkd_audit.data import load_dataset
from dpkd_audit.pipelines.common import checkpoint as checkpoint_module
from dpkd_audit.pipelines.common import ensemble as ensemble_module
from dpkd_audit.pipelines.common.checkpoint import (
    Checkpoints,
    active_checkpoints,
    code_identity,
    fingerprint,
)
from dpkd_audit.pipelines.common.ensemble import (
    EnsembleConfig,
    shard_of_records,
    train_ensemble,
)
from dpkd_audit.pipelines.common.generator import GeneratorConfig, GeneratorTrainer
from dpkd_audit.pipelines.common.student import StudentConfig, build_student, fit_classifier

pytestmark = pytest.mark.skipif(threading.current_thread() is not threading.main_thread(),
                                reason="signal handlers need the main thread")


class _SigintAt:
    """A forward hook that raises SIGINT in the ``at``-th training forward pass (once)."""

    def __init__(self, at: int) -> None:
        self.at, self.calls = at, 0

    def __call__(self, module: nn.Module, inputs: object, output: object) -> None:
        if module.training:
            self.calls += 1
            if self.calls == self.at:
                signal.raise_signal(signal.SIGINT)


def _same_state(a: nn.Module, b: nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def _files(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.pt"))


def _fit(digits: dict[str, np.ndarray], hook: _SigintAt | None = None):
    def build(shape: tuple[int, int], generator: torch.Generator) -> nn.Module:
        model = build_student(shape, 10, 4, generator=generator)
        if hook is not None:
            model.register_forward_hook(hook)
        return model

    config = StudentConfig(epochs=3, batch_size=64, width=4, learning_rate=0.05)
    return fit_classifier(build, digits["x"][:300], digits["y"][:300], num_classes=10,
                          test_images=digits["xt"][:100], test_labels=digits["yt"][:100],
                          config=config, seed=3, device=torch.device("cpu"), progress=False)


@pytest.mark.parametrize("at", [7, 5])  # mid-epoch (step 7 of 15), and an epoch's last step
def test_classifier_resumes_bit_identically_after_a_sigint(tmp_path: Path, at: int) -> None:
    digits = digits_split()
    with single_thread():
        reference = _fit(digits)
        with Checkpoints(tmp_path, every_seconds=1e9) as checkpoints:
            with pytest.raises(KeyboardInterrupt):
                _fit(digits, _SigintAt(at))
            assert len(_files(tmp_path)) == 1
            resumed = _fit(digits)
            assert checkpoints.take_resumed() == [{"stage": "classifier", "step": at,
                                                   "total": 15}]
    assert _same_state(reference.model, resumed.model)
    assert resumed.test_accuracy_per_epoch == reference.test_accuracy_per_epoch
    assert resumed.train_loss_per_epoch == reference.train_loss_per_epoch


def test_an_ended_loop_is_skipped_and_no_folder_means_no_files(tmp_path: Path) -> None:
    digits = digits_split()
    with single_thread():
        plain = _fit(digits)
        assert active_checkpoints() is None and not list(tmp_path.iterdir())
        with Checkpoints(tmp_path, every_seconds=1e9) as checkpoints:
            first = _fit(digits)
            counter = _SigintAt(at=10**9)
            second = _fit(digits, counter)
            assert counter.calls == 0  # no training step ran
            assert checkpoints.take_resumed() == [{"stage": "classifier", "step": 15,
                                                   "total": 15}]
        assert active_checkpoints() is None
    assert _same_state(plain.model, first.model) and _same_state(first.model, second.model)
    assert second.test_accuracy_per_epoch == plain.test_accuracy_per_epoch


def test_a_running_loop_saves_every_interval_of_the_clock(tmp_path: Path) -> None:
    digits = digits_split()
    ticks = iter(range(10**6))
    saves: list[int] = []
    original = checkpoint_module.LoopCheckpoint.save

    def counting(self, step, total, state):
        saves.append(step)
        original(self, step, total, state)

    with single_thread(), pytest.MonkeyPatch.context() as patch:
        patch.setattr(checkpoint_module.LoopCheckpoint, "save", counting)
        # the clock advances 1 per reading: a save every 3 readings' worth of steps
        with Checkpoints(tmp_path, every_seconds=3, clock=lambda: float(next(ticks))):
            _fit(digits)
    assert saves[-1] == 15 and len(saves) >= 4 and saves == sorted(saves)


def test_the_ensemble_resumes_bit_identically(tmp_path: Path) -> None:
    data = load_dataset("digits")
    shards = shard_of_records(data.train_images, 4, key=b"k" * 32)
    config = EnsembleConfig(num_teachers=4, widths=(2, 4), steps=12, batch_size=8,
                            learning_rate=1e-2, augment=True)
    kwargs = dict(num_classes=10, config=config, test_images=data.test_images[:50],
                  test_labels=data.test_labels[:50], seed=1, device="cpu", progress=False)
    with single_thread():
        reference = train_ensemble(data.train_images, data.train_labels, shards, **kwargs)
        with Checkpoints(tmp_path, every_seconds=1e9):
            calls = []

            def draw(*args, **kw):  # called once at the start of each step
                calls.append(1)
                if len(calls) == 5:
                    signal.raise_signal(signal.SIGINT)
                return original_draw(*args, **kw)

            original_draw = ensemble_module.draw_minibatches
            with pytest.MonkeyPatch.context() as patch:
                patch.setattr(ensemble_module, "draw_minibatches", draw)
                with pytest.raises(KeyboardInterrupt):
                    train_ensemble(data.train_images, data.train_labels, shards, **kwargs)
            assert len(calls) == 5
            resumed = train_ensemble(data.train_images, data.train_labels, shards, **kwargs)
    assert _same_state(reference.ensemble, resumed.ensemble)
    assert resumed.teacher_accuracy == reference.teacher_accuracy


def test_the_generator_resumes_bit_identically(tmp_path: Path) -> None:
    teacher = build_student((8, 8), 3, 4, generator=torch.Generator().manual_seed(1)).eval()
    config = GeneratorConfig(width=8, steps=9, batch_size=8, beta=1.0)

    def trained(hook: _SigintAt | None = None) -> GeneratorTrainer:
        trainer = GeneratorTrainer(teacher, image_shape=(8, 8), num_classes=3, config=config,
                                   seed=0, device="cpu")
        if hook is not None:
            trainer.generator.register_forward_hook(hook)
        trainer.train(config.steps)
        return trainer

    with single_thread():
        reference = trained()
        with Checkpoints(tmp_path, every_seconds=1e9):
            with pytest.raises(KeyboardInterrupt):
                trained(_SigintAt(at=4))
            resumed = trained()
    assert _same_state(reference.generator, resumed.generator)
    assert resumed.loss_terms == reference.loss_terms
    assert _same_state(teacher, build_student((8, 8), 3, 4,
                                              generator=torch.Generator().manual_seed(1)))


def test_a_checkpoint_of_other_code_or_another_key_is_refused_by_name(tmp_path: Path) -> None:
    digits = digits_split()
    with single_thread(), Checkpoints(tmp_path, every_seconds=1e9):
        _fit(digits)
        (path,) = _files(tmp_path)
        saved = torch.load(path, weights_only=True)
        header = json.loads(saved["header"])
        # other code: another sources hash in the header
        header["code"]["sources"] = "0" * 64
        torch.save({**saved, "header": json.dumps(header)}, path)
        with pytest.raises(ValueError, match=r"written by other code \(sources sha256 "
                                             r"000000000000.*this is sources "
                                             + code_identity()["sources"][:12]):
            _fit(digits)
        # another config: a key that is not this run's under this run's file name
        header["code"] = code_identity()
        header["key"] = json.dumps({"stage": "classifier", "seed": 99})
        torch.save({**saved, "header": json.dumps(header)}, path)
        with pytest.raises(ValueError, match=r"written for another config .*\"seed\": 99"):
            _fit(digits)
        path.write_bytes(b"not a checkpoint")
        with pytest.raises(ValueError, match=r"cannot be read .*remove it"):
            _fit(digits)


@pytest.mark.parametrize("kwargs, match", [
    ({"every_seconds": 0}, "every_seconds must be a finite number > 0; got 0"),
    ({"every_seconds": float("nan")}, "every_seconds"),
    ({"every_seconds": True}, "every_seconds"),
])
def test_bad_settings_are_refused(tmp_path: Path, kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        Checkpoints(tmp_path, **kwargs)


def test_a_file_is_not_a_checkpoint_folder(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    with pytest.raises(ValueError, match="exists and is not a folder"):
        Checkpoints(tmp_path / "f")


def test_fingerprints_tell_inputs_apart() -> None:
    a = np.arange(6, dtype=np.uint8)
    assert fingerprint(a) == fingerprint(a.copy())
    assert fingerprint(a) != fingerprint(a.astype(np.int16))
    assert fingerprint(a) != fingerprint(a.reshape(2, 3))
    assert fingerprint(torch.zeros(2)) != fingerprint(torch.zeros(3))
    assert fingerprint({"a": 1}) != fingerprint({"a": 2})
    with pytest.raises(TypeError, match="cannot fingerprint a object"):
        fingerprint(object())


def test_the_cli_resumes_a_run_and_says_so(tmp_path: Path, capsys) -> None:
    argv = ["run", "dgd", "--teachers", "4", "--ensemble-steps", "6", "--generator-steps", "3",
            "--student-steps", "3", "--synthetic", "300", "--queries", "20", "--quiet",
            "--checkpoint-dir", str(tmp_path / "ck"), "--json"]
    with single_thread():
        assert main([*argv, "--out", str(tmp_path / "a")]) == 0
        first = json.loads((tmp_path / "a" / "result.json").read_text())
        assert first["resumed_loops"] == []
        assert "ensemble.num_teachers: 4 (preset: 25)" in first["preset_departures"]
        assert main([*argv, "--out", str(tmp_path / "b")]) == 0
    second = json.loads((tmp_path / "b" / "result.json").read_text())
    assert [loop["stage"] for loop in second["resumed_loops"]] == ["ensemble", "baseline",
                                                                   "generator"]
    assert all(loop["step"] == loop["total"] for loop in second["resumed_loops"])
    assert second["test_accuracy"] == first["test_accuracy"]
    assert second["baseline_accuracy"] == first["baseline_accuracy"]
    assert "resumed at step 6 of 6" in capsys.readouterr().err
    (tmp_path / "file").write_text("x")
    assert main([*argv[:-3], "--checkpoint-dir", str(tmp_path / "file"),
                 "--out", str(tmp_path / "c")]) == 2
    assert "--checkpoint-dir must be a directory" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main([*argv, "--checkpoint-every", "0", "--out", str(tmp_path / "d")])
    assert "--checkpoint-every: must be a finite number > 0, got '0'" in capsys.readouterr().err
    assert not (tmp_path / "d").exists()


def test_a_ray_sweep_refuses_a_checkpoint_folder(tmp_path: Path, capsys) -> None:
    assert main(["sweep", "dgd", "--queries", "20", "--executor", "ray", "--checkpoint-dir",
                 str(tmp_path / "ck"), "--out", str(tmp_path / "o"), "--quiet"]) == 2
    assert "--checkpoint-dir works with --executor local only" in capsys.readouterr().err
    assert not (tmp_path / "ck").exists() and not (tmp_path / "o").exists()


def test_a_generator_call_without_checkpoint_writes_none(tmp_path: Path) -> None:
    teacher = build_student((8, 8), 3, 4, generator=torch.Generator().manual_seed(1)).eval()
    trainer = GeneratorTrainer(teacher, image_shape=(8, 8), num_classes=3, seed=0, device="cpu",
                               config=GeneratorConfig(width=8, steps=2, batch_size=4, beta=0.0))
    with single_thread(), Checkpoints(tmp_path):
        trainer.train(2, checkpoint=False)
        assert not _files(tmp_path)
        trainer.train(2)
        assert len(_files(tmp_path)) == 1


def test_a_second_sigint_stops_at_once_and_the_handler_is_restored(tmp_path: Path) -> None:
    before = signal.getsignal(signal.SIGINT)
    with Checkpoints(tmp_path, every_seconds=1e9) as checkpoints:
        loop = checkpoints.loop("twice", {"a": 1})
        with pytest.raises(KeyboardInterrupt), loop:
            signal.raise_signal(signal.SIGINT)  # held
            signal.raise_signal(signal.SIGINT)  # raises here, mid-step: nothing is saved
            loop.step_done(1, 2, lambda: {"x": 1})
    assert not _files(tmp_path)
    assert signal.getsignal(signal.SIGINT) is before
    with pytest.raises(ValueError, match="stage must be a plain name"):
        Checkpoints(tmp_path).loop("../x", {})


def test_a_generator_fitted_to_another_release_never_continues_an_old_checkpoint(
        tmp_path: Path) -> None:
    """The privacy claim of the module: a loop after a DP release keys on that release."""
    from types import SimpleNamespace

    from dpkd_audit.pipelines.common.generator import _statistics_fingerprint

    config = GeneratorConfig(width=8, steps=3, batch_size=4, beta=0.0)

    def train(seed: int) -> None:
        teacher = build_student((8, 8), 3, 4,
                                generator=torch.Generator().manual_seed(seed)).eval()
        GeneratorTrainer(teacher, image_shape=(8, 8), num_classes=3, config=config, seed=0,
                         device="cpu").train(config.steps)

    with single_thread(), Checkpoints(tmp_path) as checkpoints:
        train(1)
        train(2)  # another teacher (a second DP-SGD release): a fresh loop, a new file
        assert checkpoints.resumed == [] and len(_files(tmp_path)) == 2
        train(1)
        assert [stage for stage, _, _ in checkpoints.resumed] == ["generator"]

    def released(mean: float) -> SimpleNamespace:
        return SimpleNamespace(reference=SimpleNamespace(
            means=(torch.full((2,), mean),), variances=(torch.ones(2),),
            pixel_statistics=False))

    assert _statistics_fingerprint(released(0.5)) == _statistics_fingerprint(released(0.5))
    assert _statistics_fingerprint(released(0.5)) != _statistics_fingerprint(released(0.25))
