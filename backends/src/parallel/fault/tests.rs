use super::*;

/// Every catalog entry is injected somewhere: a site it alters or a hook that fires.
#[test]
fn every_catalog_entry_does_something() {
    let sites = [
        "layers.0.mlp.down.fwd.all_reduce",
        "layers.0.attn.o.fwd.all_reduce",
        "layers.0.mlp.in.bwd.all_reduce",
        "layers.0.attn.in.bwd.all_reduce",
        "layers.0.mlp.in.fwd.all_gather",
        "grad.embed.weight.dp.all_reduce",
        "loss.tokens.dp.all_reduce",
        "grad.layers.0.attn_norm.weight.tp.all_reduce",
        "pp.stage0.fwd.send",
        "grad.layers.1.mlp.router.weight.tp.all_reduce",
        "layers.0.attn.kv.ring1.fwd.send_recv",
        "layers.0.mlp.router.counts.all_reduce",
        "grad_norm.dense.all_reduce",
        "grad.embed.weight.embedding.all_reduce",
        "loss.smooth.fwd.all_reduce",
    ];
    for f in Fault::all() {
        let acts = sites.iter().any(|s| f.alter(s).is_some())
            || f.drops_microbatch(1, 2)
            || (0..3).any(|r| f.grad_scale(r, 3).is_some())
            || f.replica_scale(1, 2, 2).is_some()
            || f.norm(0).is_some()
            || f.residual_scale(0).is_some()
            || f.swiglu_wrong_operand(0)
            || f.rope_swapped(0)
            || f.cp_unweighted_merge(0)
            || f.cp_backward_stale_kv(0)
            || f.cp_grad_reduce_skipped()
            || f.router_unnormalized(0)
            || f.ep_combine_permuted(0)
            || f.expert_grad_dense_group()
            || f.expert_grad_sync_skipped()
            || f.expert_grads_scaled_by_ep()
            || f.stage_reinit_wipes(0, 2)
            || f.capacity_local(0)
            || f.bias_one_rank(0)
            || f.norm_counts_tp_duplicates()
            || f.norm_misses_ep()
            || f.zero_shard_misaligned()
            || f.zero2_last_microbatch_only()
            || f.zero1_last_microbatch_unreduced()
            || f.fsdp_stale_unshard("layers.0.attn.q.weight")
            || f.tied_shards_mismatched()
            || f.schedule_extra_steps(2) > 0
            || f.activation_noise(0).is_some()
            || f.foreign_optimizer_state().is_some()
            || f.decays_exempt_shards()
            || f.chunks_reversed()
            || f.leaves_vocab_padding_unmasked()
            || f.gathers_logits_before_loss()
            || f.rolls_labels_per_cp_shard()
            || f.mtp_rolled_per_cp_shard()
            || f.mtp_loss_scaled_down_by_cp()
            || f.scales_loss_grad_by_cp()
            || f.init_seeded_per_dp_rank()
            || f.dropout_shared_across_tp()
            || f.dropout_forked_in_replicated_region()
            || f.dropout_shared_across_cp()
            || f.recompute_rng_not_restored()
            || f.ring_crosses_documents()
            || f.packed_positions_from_chunks()
            || f.thd_split_by_rows()
            || f.thd_unpadded_boundaries()
            || f.normalizes_per_microbatch()
            || f.logs_microbatch_sum()
            || f.aux_loss_over_dp(0)
            || f.aux_token_count(0).is_some()
            || f.save().is_some()
            || f.resume().is_some();
        assert!(acts, "{} is never injected", f.name());
        assert_eq!(Fault::from_name(f.name()), Some(f));
    }
}

/// Only the scalable faults take a size, and it is the one applied.
#[test]
fn sizes_are_parsed_and_applied() {
    let f = Fault::from_name("scale-one-rank-grad@1e-3").unwrap();
    assert_eq!(f.grad_scale(1, 2), Some(1.001));
    let f = Fault::from_name("dp-wrong-accumulation-count@0.25").unwrap();
    assert_eq!(f.replica_scale(1, 2, 4), Some(0.75));
    let f = Fault::from_name("activation-shard-corrupted@1e-2").unwrap();
    assert_eq!(f.activation_noise(0), Some(0.01));
    assert_eq!(f.activation_noise(1), None);
    let f = Fault::from_name("zero-foreign-optimizer-state@0.5").unwrap();
    let state = f.foreign_optimizer_state().unwrap();
    assert_eq!((state.fraction, state.every_rank), (0.5, false));
    let f = Fault::from_name("zero-foreign-optimizer-state").unwrap();
    let state = f.foreign_optimizer_state().unwrap();
    assert_eq!((state.fraction, state.every_rank), (1.0, true));
    let f = Fault::from_name("grad-reduce-before-last-microbatch@0.25").unwrap();
    assert_eq!(f.microbatch_scale(1, 2), Some(0.75));
    assert!(!f.drops_microbatch(1, 2));
    let f = Fault::from_name("grad-reduce-before-last-microbatch").unwrap();
    assert!(f.drops_microbatch(1, 2) && !f.drops_microbatch(0, 2));
    assert!(Fault::from_name("tp-skip-forward-all-reduce@0.1").is_none());
    assert!(Fault::from_name("scale-one-rank-grad@0").is_none());
    assert!(Fault::from_name("scale-one-rank-grad@x").is_none());
}
