//! The likely causes that name each catalogued bug rightly.

/// The cause each catalogued bug has, as the likely-cause labels (`kind` or `kind:axis`) that
/// name it rightly: what the bug does, from its description and code, not from what the
/// diagnosis says. A bug not listed counts as wrong.
pub const EXPECTED: &[(&str, &[&str])] = &[
    ("tp-skip-forward-all-reduce", &["partial:tp"]),
    ("tp-average-instead-of-sum", &["scaled:1/tp"]),
    ("tp-skip-input-grad-all-reduce", &["partial:tp"]),
    ("tp-skip-qkv-grad-all-reduce", &["partial:tp"]),
    ("tp-all-reduce-as-all-gather", &["partial:tp"]),
    ("sp-all-gather-as-all-reduce", &["reduced:tp"]),
    ("dp-skip-grad-all-reduce", &["partial:dp"]),
    ("dp-local-loss-normalization", &["partial:dp"]),
    ("dp-local-loss-normalization-sum", &["partial:dp"]),
    ("dp-wrong-accumulation-count", &["part-scaled:dp"]),
    ("sp-skip-norm-grad-all-reduce", &["partial:tp"]),
    ("grad-reduce-before-last-microbatch", &["part-scaled"]),
    // Only the last microbatch's share survives the stages' re-initialization.
    ("pp-stage-reinit-wipes-grads", &["part-scaled"]),
    // Sent to the wrong peer: the stage that needed it received nothing (or another's).
    ("pp-wrong-send-peer", &["permuted", "zero"]),
    // One rank's gradient scaled: a replica's share, a shard, a copy, or (a tensor only that
    // rank holds, under PP) the whole value.
    (
        "scale-one-rank-grad",
        &["part-scaled", "one-shard", "one-copy", "scaled"],
    ),
    (
        "scale-several-ranks-grad",
        &["part-scaled", "one-shard", "one-copy", "scaled"],
    ),
    // One rank's norm computes differently: that rank's copy, rows or shard — or, where one
    // rank computes the whole value (a pipeline stage, CP's interleaved chunks), the
    // computation.
    (
        "norm-epsilon-one-rank",
        &["one-block", "one-copy", "one-shard", "computation"],
    ),
    (
        "norm-wrong-power-one-rank",
        &["one-block", "one-copy", "one-shard", "computation"],
    ),
    ("residual-scale-all-ranks", &["computation"]),
    ("swiglu-backward-wrong-operand", &["computation"]),
    ("rope-backward-swapped", &["computation"]),
    ("cp-no-lse-renormalization", &["computation"]),
    ("cp-stale-kv-chunk", &["computation"]),
    // Each later step's gradient is the first step's: the ring backward's own arithmetic.
    ("cp-backward-stale-kv", &["computation"]),
    ("cp-skip-grad-reduce", &["partial:cp"]),
    ("moe-router-not-renormalized", &["computation"]),
    ("moe-load-balance-local-counts", &["partial"]),
    ("ep-a2a-combine-wrong-permutation", &["permuted"]),
    ("ep-expert-grad-dense-group", &["partial"]),
    ("ep-expert-grad-sync-skipped", &["partial"]),
    // Every expert gradient ep times its value.
    ("ep-expert-grad-scaled-by-ep", &["scaled"]),
    // Each TP rank's router gradient from its own sequence shard only.
    (
        "moe-router-grad-unsynced-under-sp",
        &["partial:tp", "partial"],
    ),
    ("moe-capacity-local-tokens", &["computation", "zero"]),
    ("moe-expert-bias-one-rank", &["one-copy"]),
    ("clip-norm-local-shards", &["partial-norm"]),
    ("clip-norm-tp-duplicates", &["scaled"]),
    ("clip-norm-missing-ep", &["partial-norm"]),
    // One TP rank's partial sum corrupted: that rank's rows where replicas tell them apart,
    // otherwise the computation before the reduction (a partial has no reference of its own).
    (
        "activation-shard-corrupted",
        &["one-block", "one-copy", "one-shard", "computation"],
    ),
    // Each shard updated from its neighbour shard's state: the state's shards moved.
    ("zero-foreign-optimizer-state", &["permuted", "shifted"]),
    // Each rank reads its neighbour's reduce-scattered shard: the gradient's rows moved.
    ("zero-grad-shard-misaligned", &["permuted", "shifted"]),
    // Only the last microbatch's share reaches the optimizer (ZeRO-2), or is reduced (ZeRO-1).
    ("zero2-last-microbatch-only", &["part-scaled"]),
    (
        "zero1-last-microbatch-unreduced",
        &["part-scaled", "partial"],
    ),
    // The unshard is a no-op: the parameters of the step before the last update.
    ("fsdp-stale-unshard", &["other-step"]),
    // A chunk computes another chunk's layers: its output is another computation's.
    ("interleaved-chunks-reversed", &["computation"]),
    // Each TP rank's own block of Σ z, never summed over TP.
    ("label-smoothing-local-vocab", &["partial:tp"]),
    // The padding's columns enter each rank's Σ exp: the rank's own arithmetic is wrong.
    ("vocab-padding-unmasked", &["computation"]),
    // Every rank sums exp over the whole vocabulary: Σ exp counted tp times.
    ("ce-on-gathered-logits", &["scaled:tp", "computation"]),
    // Each CP rank's labels are its own tokens rolled: the target logits it picks are wrong.
    ("cp-labels-rolled-per-shard", &["computation"]),
    // The loss's gradient cp times world size 1's.
    ("cp-loss-grad-scaled-by-cp", &["scaled:cp"]),
    // One replica's weights are another draw: its copy alone differs (under ZeRO-3, where the
    // parameters are the all-gather of the dp ranks' shards, those ranks' shards).
    (
        "init-seeded-per-dp-rank",
        &["one-copy", "one-copy:dp", "one-shard:dp"],
    ),
    // Every TP rank drops its heads' probabilities with the first heads' mask: each rank's
    // own computation is wrong.
    ("dropout-shared-across-tp", &["computation"]),
    // The TP ranks drop different elements of the replicated stream: the copies differ.
    (
        "dropout-forked-in-replicated-region",
        &["one-copy", "one-copy:tp"],
    ),
    // Every CP rank drops at its local indices: each rank's own computation is wrong.
    ("dropout-shared-across-cp", &["computation"]),
    // The re-run drops other elements than the forward: backward's own arithmetic is wrong.
    ("recompute-rng-not-restored", &["computation"]),
    // Each CP rank's attention over the ring's chunks is wrong: its own computation. Where the
    // documents are padded (the THD layout), the first replica's short rows hold one document
    // each and are untouched: only the other replica's row block differs.
    // On cp2 only rank 1 receives earlier positions around the ring, so only its shard can
    // differ: "one shard of cp" names that rank-local wrong computation too.
    (
        "cp-ring-crosses-documents",
        &["computation", "one-block", "one-shard:cp"],
    ),
    // Each CP rank rotates with wrong positions: its own computation (one row block, as above,
    // with padded documents).
    (
        "cp-packed-positions-from-chunks",
        &["computation", "one-block"],
    ),
    // A CP rank holds the row split's tokens at the per-document positions: its embedding
    // output is another layout's, the rank's own shard of the sequence wrong (only the row
    // block whose rows hold several documents, as above).
    (
        "cp-thd-split-by-rows",
        &["one-shard:cp", "one-block", "computation"],
    ),
    // Each microbatch's loss scaled by its own count, a factor no axis explains: the
    // computation of the loss's gradient is wrong.
    // (or, where each block's factor fits, each block scaled by its own).
    (
        "microbatch-local-loss-normalization",
        &["computation", "block-scaled"],
    ),
    // Every sequence's load-balance weight over dp times the sequences: scaled.
    ("moe-aux-loss-scaled-by-dp", &["scaled:dp", "scaled"]),
    // Each rank's per-token weights scaled by its own share of its sequences' real tokens (or
    // its inverse): where one rank holds every real token of a short row, only the others'
    // shards or row blocks differ; where the shares are even, a scaling by the split's degree.
    (
        "moe-aux-loss-token-share-over-sequence",
        &[
            "one-shard:tp",
            "one-shard:cp",
            "one-block",
            "block-scaled:dp",
            "scaled:tp",
            "scaled:cp",
            "scaled",
        ],
    ),
    (
        "moe-aux-loss-token-count-overwritten",
        &[
            "one-shard:tp",
            "one-shard:cp",
            "one-block",
            "block-scaled:dp",
            "scaled:tp",
            "scaled:cp",
            "scaled",
        ],
    ),
];
