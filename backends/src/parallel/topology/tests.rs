use meshparity_specs::{MeshConfig, Schedule};

use super::*;

fn mesh(dp: u32, tp: u32, pp: u32, cp: u32, ep: u32, etp: u32) -> Topology {
    Topology::new(&MeshConfig {
        dp,
        tp,
        pp,
        ep,
        etp,
        cp,
        sp: true,
        schedule: Schedule::OneFOneB,
        ..MeshConfig::DEFAULT
    })
}

/// `t` sharded (ZeRO-3), over groups of `shard` dp ranks (0: all of them).
fn sharded(t: Topology, shard: u32) -> Topology {
    Topology::new(&MeshConfig {
        zero: 3,
        shard,
        ..*t.mesh()
    })
}

/// Every family partitions the ranks: each rank in exactly one group, groups of one size.
#[test]
fn every_family_partitions_the_ranks() {
    for t in [
        mesh(2, 2, 2, 1, 1, 1),
        mesh(2, 2, 1, 2, 1, 1),
        mesh(1, 2, 2, 2, 1, 1),
        mesh(4, 2, 2, 1, 2, 2),
        mesh(2, 1, 2, 2, 2, 1),
        mesh(2, 2, 1, 1, 4, 1),
        sharded(mesh(4, 2, 2, 1, 1, 1), 2),
        sharded(mesh(2, 2, 1, 2, 1, 1), 0),
        sharded(mesh(4, 1, 2, 1, 2, 1), 0),
    ] {
        for axis in Axis::ALL {
            let groups = t.groups(axis);
            if groups.is_empty() {
                assert!(matches!(
                    axis,
                    Axis::Etp
                        | Axis::Ep
                        | Axis::Edp
                        | Axis::ExpertMp
                        | Axis::Shard
                        | Axis::Replicate
                        | Axis::Embedding
                ));
                assert!(axis != Axis::Embedding || t.pp() == 1);
                assert!(axis != Axis::Shard || t.zero() == 0);
                assert!(axis != Axis::Replicate || t.mesh().shard == 0);
                continue;
            }
            if axis == Axis::Embedding {
                // The first and last stages' ranks only.
                assert!(groups.iter().all(|g| g.len() == 2));
                continue;
            }
            let mut seen: Vec<usize> = groups.iter().flatten().copied().collect();
            seen.sort_unstable();
            assert_eq!(
                seen,
                (0..t.world()).collect::<Vec<_>>(),
                "{axis:?} of {t:?}"
            );
            assert!(groups.iter().all(|g| g.len() == groups[0].len()));
        }
    }
}

#[test]
fn groups_follow_megatron() {
    // dp2 · tp2 · pp2: rank = tp + 2·(dp + 2·pp).
    let t = mesh(2, 2, 2, 1, 1, 1);
    assert_eq!(
        t.groups(Axis::Tp),
        vec![vec![0, 1], vec![2, 3], vec![4, 5], vec![6, 7]]
    );
    assert_eq!(
        t.groups(Axis::DpCp),
        vec![vec![0, 2], vec![1, 3], vec![4, 6], vec![5, 7]]
    );
    assert_eq!(
        t.groups(Axis::Pp),
        vec![vec![0, 4], vec![1, 5], vec![2, 6], vec![3, 7]]
    );
    assert_eq!(t.groups(Axis::Mp), vec![vec![0, 1, 4, 5], vec![2, 3, 6, 7]]);
    assert!(t.sp() && t.lockstep() == 1 && t.odd_rank() == 3);
    // The context-parallel ring sits inside the data-parallel group of gradients.
    let c = mesh(2, 2, 1, 2, 1, 1);
    assert_eq!(c.groups(Axis::Cp)[0], vec![0, 2]);
    assert_eq!(c.dp_cp_group(0, 0), vec![0, 2, 4, 6]);
    assert_eq!(c.dp_group(0, 1, 0), vec![2, 6]);
    // Experts: etp fastest, then ep, then edp, over each stage's ranks.
    let x = mesh(4, 2, 2, 1, 2, 2);
    assert_eq!(x.lockstep(), 4);
    assert_eq!(x.groups(Axis::Ep)[0], vec![0, 2]);
    assert_eq!(x.edp_groups(1)[0], vec![8, 12]);
    assert_eq!(
        x.expert_model_groups(false)[0],
        vec![0, 1, 2, 3, 8, 9, 10, 11]
    );
    assert_eq!(x.expert_model_groups(true)[0], vec![0, 1, 8, 9]);
}

#[test]
fn stage_groups_hold_their_replicas_in_rank_order() {
    let t = mesh(2, 2, 2, 2, 1, 1);
    let g = t.stage(1..2, 1);
    assert_eq!(g.ranks, vec![12, 13, 14, 15]);
    assert_eq!(
        g.layout,
        Layout {
            tp: 2,
            cp: 2,
            replicas: 1
        }
    );
    assert_eq!(t.whole_stage(0).ranks, (0..8).collect::<Vec<_>>());
    assert_eq!(t.loss_ranks(), vec![8, 10, 12, 14]);
    assert_eq!(t.report_ranks(), vec![8, 12]);
}

#[test]
fn the_explanation_names_every_group() {
    let text = mesh(2, 2, 1, 1, 1, 1).explain().text();
    assert!(text.contains("4 ranks; sequence parallelism on"), "{text}");
    assert!(text.contains("     3  tp1 cp0 dp1 pp0"), "{text}");
    assert!(text.contains("dp-cp     2 group(s) of 2"), "{text}");
    assert!(text.contains("[0 2] [1 3]"), "{text}");
    assert!(
        text.contains("experts replicated") && !text.contains("expert-mp"),
        "{text}"
    );
}
