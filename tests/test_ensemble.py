"""Batched teacher ensemble: teachers independent, shards a function of the record."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F  # noqa: N812

from dpkd_audit.pipelines.common.ensemble import (
    EnsembleConfig,
    EnsembleKernel,
    TeacherEnsemble,
    choose_kernel,
    cuda_settings,
    shard_of_records,
    train_ensemble,
)

KEY = b"0123456789abcdef"


def _ensemble(n: int, seed: int = 0) -> TeacherEnsemble:
    return TeacherEnsemble(num_teachers=n, widths=(3, 4), image_shape=(8, 8), num_classes=5,
                           generator=torch.Generator().manual_seed(seed))


def _single(ensemble: TeacherEnsemble, t: int) -> TeacherEnsemble:
    """Teacher t of ``ensemble`` as a one-teacher ensemble (a copy of its weights)."""
    one = _ensemble(1)
    c1, c2 = ensemble.widths
    with torch.no_grad():
        one.conv1.copy_(ensemble.conv1[t * c1:(t + 1) * c1])
        one.bias1.copy_(ensemble.bias1[t * c1:(t + 1) * c1])
        one.conv2.copy_(ensemble.conv2[t * c2:(t + 1) * c2])
        one.bias2.copy_(ensemble.bias2[t * c2:(t + 1) * c2])
        one.head.copy_(ensemble.head[t:t + 1])
        one.head_bias.copy_(ensemble.head_bias[t:t + 1])
    return one


def test_each_teacher_computes_and_learns_as_a_separate_model() -> None:
    n = 4
    ensemble = _ensemble(n)
    x = torch.rand(6, n, 8, 8, generator=torch.Generator().manual_seed(1))
    y = torch.randint(0, 5, (6, n), generator=torch.Generator().manual_seed(2))
    logits = ensemble(x)
    loss = F.cross_entropy(logits.reshape(-1, 5), y.reshape(-1), reduction="sum") / 6
    loss.backward()
    c1 = ensemble.widths[0]
    for t in range(n):
        one = _single(ensemble, t)
        own = one(x[:, t:t + 1])
        torch.testing.assert_close(own[:, 0], logits[:, t].detach(), rtol=1e-5, atol=1e-6)
        F.cross_entropy(own[:, 0], y[:, t]).backward()
        # teacher t's gradient is its own mean loss's gradient, untouched by the others
        torch.testing.assert_close(one.conv1.grad, ensemble.conv1.grad[t * c1:(t + 1) * c1],
                                   rtol=1e-4, atol=1e-6)
        torch.testing.assert_close(one.head.grad, ensemble.head.grad[t:t + 1],
                                   rtol=1e-4, atol=1e-6)


def test_shared_images_reach_every_teacher_and_votes_count_them() -> None:
    ensemble = _ensemble(3).eval()
    x = torch.rand(5, 1, 8, 8, generator=torch.Generator().manual_seed(3))
    logits = ensemble(x)
    for t in range(3):
        torch.testing.assert_close(_single(ensemble, t)(x)[:, 0], logits[:, t])
    votes = ensemble.votes(x, batch_size=2)
    assert votes.shape == (5, 5) and (votes.sum(axis=1) == 3).all()
    np.testing.assert_array_equal(
        votes, F.one_hot(logits.argmax(dim=2), 5).sum(dim=1).numpy())


def test_shards_depend_on_the_record_not_its_position() -> None:
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, size=(300, 8, 8), dtype=np.uint8)
    shards = shard_of_records(images, 7, key=KEY)
    assert shards.min() >= 0 and shards.max() < 7 and len(set(shards.tolist())) == 7
    # remove record 10 and append a new one: every other record keeps its shard
    changed = np.concatenate([images[:10], images[11:], rng.integers(0, 256, (1, 8, 8),
                                                                      dtype=np.uint8)])
    again = shard_of_records(changed, 7, key=KEY)
    np.testing.assert_array_equal(again[:10], shards[:10])
    np.testing.assert_array_equal(again[10:299], shards[11:])
    other = shard_of_records(images, 7, key=b"another key, 16+")
    assert (other != shards).mean() > 0.5   # the key matters
    with pytest.raises(ValueError, match="key"):
        shard_of_records(images, 7, key=b"short")


def test_training_is_deterministic_and_checks_its_input() -> None:
    from dpkd_audit.data import load_dataset

    data = load_dataset("digits")
    shards = shard_of_records(data.train_images, 4, key=KEY)
    config = EnsembleConfig(num_teachers=4, widths=(4, 8), steps=60, batch_size=16,
                            learning_rate=1e-2)
    kwargs = dict(num_classes=10, config=config, test_images=data.test_images,
                  test_labels=data.test_labels, seed=0, device="cpu", progress=False)
    first = train_ensemble(data.train_images, data.train_labels, shards, **kwargs)
    second = train_ensemble(data.train_images, data.train_labels, shards, **kwargs)
    assert first.teacher_accuracy == second.teacher_accuracy
    assert sum(first.shard_sizes) == data.train_images.shape[0]
    assert min(first.teacher_accuracy) > 0.3          # chance is 0.1
    with pytest.raises(ValueError, match="shards must be integers"):
        train_ensemble(data.train_images, data.train_labels, shards + 1, **kwargs)
    empty = np.where(shards == 3, 0, shards)
    with pytest.raises(ValueError, match="shard 3 is empty"):
        train_ensemble(data.train_images, data.train_labels, empty, **kwargs)
    with pytest.raises(ValueError, match="num_teachers"):
        EnsembleConfig(num_teachers=1)
    with pytest.raises(ValueError, match="widths"):
        EnsembleConfig(widths=(4,))
    with pytest.raises(ValueError, match="augment must be a bool; got 'yes'"):
        EnsembleConfig(augment="yes")


@pytest.mark.parametrize("shape", [(8, 8), (10, 10), (9, 7)])
def test_kernels_agree_on_logits_and_gradients(shape: tuple[int, int]) -> None:
    """LOOP and IM2COL compute what GROUPED does (odd sizes: pooling drops the last row)."""
    base = TeacherEnsemble(num_teachers=3, widths=(3, 5), image_shape=shape, num_classes=4,
                           generator=torch.Generator().manual_seed(0))
    x = torch.rand(5, 3, *shape, generator=torch.Generator().manual_seed(1))
    shared = torch.rand(5, 1, *shape, generator=torch.Generator().manual_seed(2))
    got = {}
    for kernel in EnsembleKernel:
        if kernel is EnsembleKernel.AUTO:
            continue
        model = TeacherEnsemble(num_teachers=3, widths=(3, 5), image_shape=shape,
                                num_classes=4, generator=torch.Generator().manual_seed(0),
                                kernel=kernel)
        model.load_state_dict(base.state_dict())
        out = model(x)
        out.square().sum().backward()
        got[kernel] = (out.detach(), model(shared).detach(), model.conv1.grad,
                       model.conv2.grad, model.head.grad, model.bias2.grad)
    for kernel in (EnsembleKernel.LOOP, EnsembleKernel.IM2COL):
        for a, b in zip(got[kernel], got[EnsembleKernel.GROUPED], strict=True):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_im2col_inference_is_chunked_and_equal(monkeypatch: pytest.MonkeyPatch) -> None:
    import dpkd_audit.pipelines.common.ensemble as module

    model = _ensemble(3).eval()
    x = torch.rand(7, 1, 8, 8, generator=torch.Generator().manual_seed(4))
    whole = model(x)
    model.kernel = EnsembleKernel.IM2COL
    monkeypatch.setattr(module, "_IM2COL_CHUNK_BYTES", 3 * 9 * 64 * 4 * 2)  # 2 images
    with torch.inference_mode():
        torch.testing.assert_close(model(x), whole, rtol=1e-4, atol=1e-5)


def test_kernel_choice_and_bad_kernels() -> None:
    from dpkd_audit.data import load_dataset

    model = _ensemble(2)
    kernel, timings = choose_kernel(model, batch_size=4, device=torch.device("cpu"))
    assert kernel is EnsembleKernel.LOOP and timings == {}
    data = load_dataset("digits")
    shards = shard_of_records(data.train_images, 2, key=KEY)
    config = EnsembleConfig(num_teachers=2, widths=(2, 2), steps=1, batch_size=4)
    result = train_ensemble(data.train_images, data.train_labels, shards, num_classes=10,
                            config=config, test_images=data.test_images[:5],
                            test_labels=data.test_labels[:5], seed=0, device="cpu",
                            progress=False)
    assert result.kernel is EnsembleKernel.LOOP and result.ensemble.kernel is result.kernel
    with pytest.raises(ValueError, match=r"kernel must be one of .*got 'fused'"):
        train_ensemble(data.train_images, data.train_labels, shards, num_classes=10,
                       config=config, test_images=data.test_images[:5],
                       test_labels=data.test_labels[:5], seed=0, device="cpu",
                       progress=False, kernel="fused")
    with pytest.raises(ValueError, match="resolved by choose_kernel"):
        TeacherEnsemble(num_teachers=2, widths=(2, 2), image_shape=(8, 8), num_classes=3,
                        generator=torch.Generator(), kernel="auto")
    with pytest.raises(ValueError, match=r"x must be \(batch, 1 or 2, h, w\)"):
        model(torch.rand(3, 5, 8, 8))


def test_cuda_settings_turn_on_tf32_and_autotuning_and_restore_them() -> None:
    flags = torch.backends.cuda.matmul, torch.backends.cudnn
    saved = flags[0].allow_tf32, flags[1].benchmark
    try:
        flags[0].allow_tf32, flags[1].benchmark = False, False
        with cuda_settings(torch.device("cpu")):  # nothing changes on a CPU
            assert (flags[0].allow_tf32, flags[1].benchmark) == (False, False)
        # only flags are set (no CUDA call), so a CUDA device can be named without a GPU
        with pytest.raises(RuntimeError, match="inside"):
            with cuda_settings(torch.device("cuda")):
                assert (flags[0].allow_tf32, flags[1].benchmark) == (True, True)
                raise RuntimeError("inside")
        assert (flags[0].allow_tf32, flags[1].benchmark) == (False, False)
    finally:
        flags[0].allow_tf32, flags[1].benchmark = saved
