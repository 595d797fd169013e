"""The largest sizes, counts and seeds a pipeline run accepts (issue 65).

A size reaches torch or numpy as an allocation (``--stage-size 10**12`` asked for 4 TB after the
teacher and the generator had trained; ``--canaries 10**12`` after the data had loaded). Each
limit here is stated once and checked twice before any work: by the ``dpkd run`` /
``dpkd sweep`` / ``dpkd audit-run`` flags when they are parsed (the refusal names the flag and
the limit), and by the configs (:class:`~dpkd_audit.pipelines.rknn.RknnConfig`,
:class:`~dpkd_audit.pipelines.dpdfd.DpdfdConfig`, :class:`~dpkd_audit.pipelines.dgd.DgdConfig`)
for callers of the library. Sizes that also depend on the data (clusters within the public
split, canaries within half of the private split, teachers within the shards) are checked
against it when the data is loaded, before any training.

Every limit is well above the papers' settings and the committed runs (noted beside each), and
this module imports nothing, so that building the command line stays fast.
"""

from __future__ import annotations

__all__ = ["MAX_CANARIES", "MAX_CLUSTERS", "MAX_EPOCHS", "MAX_PUBLIC_SIZE", "MAX_QUERIES",
           "MAX_ROUNDS", "MAX_SEED", "MAX_STAGES", "MAX_STAGE_SIZE", "MAX_STEPS",
           "MAX_SYNTHETIC", "MAX_TEACHERS"]

#: Largest seed: numpy and torch seed their generators from it (torch refuses seeds >= 2^64,
#: and a seed plus an offset must stay below).
MAX_SEED = 2**32 - 1
#: Most stages of DP-DFD (the small preset's published runs take 300).
MAX_STAGES = 10_000
#: Most labels per DP-DFD stage: a stage's synthetic images are held at once (100,000 MNIST
#: images are 0.3 GB; the presets take 2,000).
MAX_STAGE_SIZE = 100_000
#: Most synthetic images of DGD, held at once (the presets take at most a few thousand); DGD's
#: queries are at most this minus 2.
MAX_SYNTHETIC = 1_000_000
#: Most label queries of DGD (each queries one synthetic image; two are kept back).
MAX_QUERIES = MAX_SYNTHETIC - 2
#: Most teachers of DGD's ensemble (the paper: 250), trained as one batched model.
MAX_TEACHERS = 10_000
#: Most queries (k-means clusters) of reverse k-NN; at most the public split as well.
MAX_CLUSTERS = 100_000
#: Largest public split of reverse k-NN (at most the test split as well: 10,000 on MNIST).
MAX_PUBLIC_SIZE = 10_000_000
#: Most epochs of any training (teachers, students, encoders; the presets take at most 100).
MAX_EPOCHS = 10_000
#: Most optimisation steps of any training (generators, ensembles, students).
MAX_STEPS = 10_000_000
#: Most self-training rounds of reverse k-NN.
MAX_ROUNDS = 100
#: Most canaries of a one-run audit (the committed audits take 100,000); also
#: :data:`dpkd_audit.training_audit.canaries.MAX_CANARIES`.
MAX_CANARIES = 10_000_000
