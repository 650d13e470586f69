//! Packed documents padded for context parallelism (`pad_documents_to`; issue 36): every
//! document padded to a multiple of 2·cp and cut into its own 2·cp chunks (TransformerEngine's
//! THD layout), so each row gives a CP rank its own positions. Every mesh matches the oracle to
//! round-off in f64 with every production feature on; the layout is real (ranks hold other
//! positions than under the row split, and the padding is in the rows); and the bug of cutting
//! such a batch by rows moves the loss on every CP mesh and nothing without CP or padding.

mod common;

use burn::tensor::{DType, Device};
use common::{mesh, tiny, tiny_moe_options, training, worst};
use meshparity_backends::data::{Batch, IGNORE};
use meshparity_backends::parallel::context::{positions, Local};
use meshparity_backends::parallel::Fault;
use meshparity_backends::sharding::ShardingPlan;
use meshparity_backends::train::{self, Length, Probe};
use meshparity_specs::{DropPolicy, Dropout, ModelConfig, Optimizer, Packing, Recompute, Training};

const LEN: Length = Length {
    steps: 3,
    weights_after: 2,
    backward: true,
};

const THD: Packing = Packing {
    documents: true,
    prompts: true,
    pad_to: Some(8),
};

/// [`tiny`] with rows of 32: two to four padded documents each.
fn long() -> ModelConfig {
    ModelConfig {
        seq_len: 32,
        ..tiny()
    }
}

fn padded(seed: u64, optimizer: Optimizer) -> Training {
    Training {
        packing: Some(THD),
        ..training(seed, optimizer)
    }
}

/// Every feature of issue 36 with the THD layout.
fn everything(seed: u64, optimizer: Optimizer) -> Training {
    Training {
        dropout: Some(Dropout {
            attention: 0.2,
            hidden: 0.1,
        }),
        recompute: Some(Recompute::Full),
        label_smoothing: Some(0.1),
        z_loss: Some(1e-3),
        ..padded(seed, optimizer)
    }
}

#[test]
fn padded_documents_match_the_oracle_in_f64_on_every_cp_layout() {
    let meshes = [
        "cp2",
        "cp4",
        "tp2-cp2",
        "dp2-tp2-sp-cp2",
        "tp2-sp-cp2-pp2-mb2",
        "dp2-cp2-mb2",
        "tp2-sp",
    ];
    let t = padded(11, Optimizer::Sgd);
    common::matches_oracle(&long(), &t, &meshes, (DType::F64, LEN), 1e-12);
    let vocab = ModelConfig {
        vocab: 61,
        ..long()
    };
    let all = everything(5, Optimizer::Adamw);
    let meshes = ["dp2-tp2-sp-cp2", "tp2-sp-cp2-pp2-mb2", "cp4"];
    common::matches_oracle(&vocab, &all, &meshes, (DType::F64, LEN), 1e-12);
    let moe = ModelConfig {
        seq_len: 32,
        ..tiny_moe_options(DropPolicy::Probs)
    };
    let meshes = ["cp2", "dp2-cp2-ep2", "cp4"];
    common::matches_oracle(
        &moe,
        &everything(3, Optimizer::Sgd),
        &meshes,
        (DType::F64, LEN),
        1e-12,
    );
}

/// Not vacuous: the rows hold padding inside them, and a CP rank holds other positions of a
/// row of several documents than the row split gives it (the same where a row is one document).
#[test]
fn each_document_is_cut_and_rows_differ_from_the_row_split() {
    let t = padded(11, Optimizer::Sgd);
    let batch = train::batch(&long(), &t, 1);
    assert!(batch.padded_documents);
    let inner_pads = (0..batch.batch)
        .map(|r| {
            (0..batch.lengths[r])
                .filter(|&p| batch.tokens[r * 32 + p] == 0)
                .count()
        })
        .sum::<usize>();
    assert!(inner_pads > 0, "documents are padded inside the rows");
    let rowwise = Batch {
        padded_documents: false,
        ..batch.clone()
    };
    let (mut differ, mut same) = (0, 0);
    for c in 0..2 {
        let (thd, rows) = (positions(c, 2, 32, &batch), positions(c, 2, 32, &rowwise));
        for r in 0..batch.batch {
            if batch.starts[r].len() > 1 {
                differ += usize::from(thd.row(r) != rows.row(r));
            } else {
                // One document: both layouts cut the row alike.
                assert_eq!(thd.row(r), rows.row(r), "row {r} of one document, rank {c}");
                same += 1;
            }
            // Rank 0 holds the first chunk of every document.
            if c == 0 {
                assert!(batch.starts[r].iter().all(|s| thd.row(r).contains(s)));
            }
        }
    }
    assert!(differ > 0, "no row's positions differ from the row split");
    eprintln!("{differ} rank-rows differ from the row split, {same} one-document rows agree");
    // Every rank's share counts the labels it holds; together, the batch's.
    let locals = Local::split(&batch, 4, 1);
    let counted: usize = locals.iter().map(|l| l.batch.counted()).sum();
    assert_eq!(counted, batch.counted());
    assert!(locals
        .iter()
        .all(|l| l.batch.targets.iter().any(|&t| t != IGNORE)));
}

/// The catalogued bugs of padded documents under CP — the batch cut by the row-level split
/// while attention, RoPE and dropout take the per-document layout (Megatron-Bridge PR#1867,
/// Megatron-LM PR#7238), and the documents' boundaries taken from the unpadded lengths
/// (Megatron-LM PR#4495, Automodel PR#3640) — move the loss and the gradients on every CP mesh,
/// and do nothing without CP, without padding, or where every row is one document.
#[test]
fn padded_document_bugs_are_caught_and_no_ops_elsewhere() {
    let dev = Device::flex();
    let m = long();
    for bug in ["cp-thd-split-by-rows", "cp-thd-unpadded-boundaries"] {
        let probe = Probe {
            fault: Fault::from_name(bug),
            ..Probe::default()
        };
        let moved = |t: &Training, name: &str| {
            let oracle = train::oracle(&m, t, LEN, &dev, DType::F64);
            let run = train::mesh(&m, &mesh(name), t, LEN, probe, &dev, DType::F64).unwrap();
            worst(&ShardingPlan::llama(&m, &mesh(name)), &oracle, &run)
        };
        for name in ["cp2", "cp4", "dp2-tp2-sp-cp2"] {
            let w = moved(&padded(11, Optimizer::Sgd), name);
            eprintln!("{bug} on {name}: {w:?}");
            assert!(
                w.0 > 1e-2 && w.2 > 1e-2,
                "{bug} on {name} moved nothing: {w:?}"
            );
        }
        let quiet = |t: &Training, name: &str, why: &str| {
            let w = moved(t, name);
            assert!(w.0 < 1e-12 && w.2 < 1e-12, "{bug}: {why}, yet {w:?}");
        };
        quiet(&padded(11, Optimizer::Sgd), "dp2-tp2-sp", "no CP");
        let unpadded = Training {
            packing: Some(Packing {
                pad_to: None,
                ..THD
            }),
            ..training(11, Optimizer::Sgd)
        };
        quiet(&unpadded, "cp2", "no padding");
        let whole = Training {
            packing: Some(Packing {
                documents: false,
                ..THD
            }),
            ..training(11, Optimizer::Sgd)
        };
        quiet(&whole, "cp2", "one document per row");
    }
}
