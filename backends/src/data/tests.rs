//! The synthetic batches: padding, determinism, packing, THD padding, the MTP shift.

use super::*;

#[test]
fn batches_pad_and_are_deterministic() {
    let b = Batch::synthetic(7, 0, (8, 16, 128), None);
    assert_eq!(b, Batch::synthetic(7, 0, (8, 16, 128), None));
    assert_ne!(b.tokens, Batch::synthetic(7, 1, (8, 16, 128), None).tokens);
    assert!(
        b.lengths.iter().any(|&l| l < 16),
        "some sequences are padded"
    );
    let distinct: std::collections::HashSet<_> = b.lengths.iter().collect();
    assert!(distinct.len() > 1, "lengths vary: {:?}", b.lengths);
    assert_eq!(b.counted(), b.lengths.iter().map(|l| l - 1).sum::<usize>());
    assert!(b.tokens.iter().all(|&t| (0..128).contains(&t)));
    let half = b.rows(4, 4);
    assert_eq!(half.tokens[..], b.tokens[4 * 16..]);
    let (first, second) = (b.rows(0, 4).counted(), half.counted());
    assert!(
        second as f64 >= 2.0 * first as f64,
        "data-parallel halves hold very unequal token counts: {first} vs {second}"
    );
}

#[test]
fn shifted_rows_predict_the_token_after_next_within_each_document() {
    let thd = Packing {
        documents: true,
        prompts: true,
        pad_to: Some(4),
    };
    let b = Batch::synthetic(7, 0, (8, 32, 128), Some(thd));
    let m = b.shifted();
    assert_eq!(
        (m.lengths.clone(), m.starts.clone()),
        (b.lengths.clone(), b.starts.clone())
    );
    for r in 0..8 {
        for i in 0..32 {
            let at = r * 32 + i;
            let last = i == 31 || b.starts[r].contains(&(i + 1));
            if last {
                assert_eq!(
                    (m.tokens[at], m.targets[at]),
                    (0, IGNORE),
                    "row {r} pos {i}"
                );
            } else {
                assert_eq!(
                    (m.tokens[at], m.targets[at]),
                    (b.tokens[at + 1], b.targets[at + 1])
                );
            }
        }
    }
    assert!(m.counted() > 0 && m.counted() < b.counted());
}

#[test]
fn packing_cuts_documents_and_masks_labels() {
    let plain = Batch::synthetic(7, 0, (8, 32, 128), None);
    let both = Packing {
        documents: true,
        prompts: true,
        pad_to: None,
    };
    let packed = Batch::synthetic(7, 0, (8, 32, 128), Some(both));
    assert_eq!(packed.tokens, plain.tokens, "packing keeps the tokens");
    assert!(packed.packed() && !plain.packed());
    assert!(packed.counted() < plain.counted());
    for b in 0..8 {
        let starts = &packed.starts[b];
        assert_eq!(starts[0], 0);
        assert!(starts.windows(2).all(|w| w[0] < w[1]));
        assert!(starts.iter().all(|&s| s < packed.lengths[b]));
        for &s in &starts[1..] {
            assert_eq!(packed.targets[b * 32 + s - 1], IGNORE, "no label crosses");
            assert_eq!(packed.document_start(b, s), s);
            assert!(packed.document_start(b, s - 1) < s);
        }
    }
    assert!(
        packed.starts.iter().any(|s| s.len() >= 3),
        "rows hold several documents"
    );
    let prompts = Packing {
        documents: false,
        prompts: true,
        pad_to: None,
    };
    let prompted = Batch::synthetic(7, 0, (8, 32, 128), Some(prompts));
    assert!(!prompted.packed() && prompted.counted() < plain.counted());
}

#[test]
fn padded_documents_start_on_the_multiple_and_pad_with_ignored_labels() {
    let thd = Packing {
        documents: true,
        prompts: true,
        pad_to: Some(8),
    };
    let plain = Batch::synthetic(7, 0, (8, 64, 128), None);
    let padded = Batch::synthetic(7, 0, (8, 64, 128), Some(thd));
    assert!(padded.packed());
    let mut pads = 0;
    for b in 0..8 {
        let starts = &padded.starts[b];
        assert!(starts.iter().all(|&s| s % 8 == 0), "{starts:?}");
        for w in starts.windows(2) {
            // A document's real tokens, then its padding up to the next start.
            let doc = w[0]..w[1];
            let real = doc
                .clone()
                .filter(|&p| padded.tokens[b * 64 + p] != 0)
                .count();
            assert!(real >= 1);
            for p in doc {
                let (tok, tgt) = (padded.tokens[b * 64 + p], padded.targets[b * 64 + p]);
                if tok == 0 && plain.tokens[b * 64 + p] != 0 {
                    pads += 1;
                    assert_eq!(tgt, IGNORE, "a pad's label is ignored");
                }
            }
            assert_eq!(
                padded.targets[b * 64 + w[1] - 1],
                IGNORE,
                "no label crosses"
            );
        }
    }
    assert!(pads > 0, "some documents are padded");
    let unpadded = Packing {
        pad_to: None,
        ..thd
    };
    assert_eq!(
        Batch::synthetic(
            7,
            0,
            (8, 64, 128),
            Some(Packing {
                pad_to: Some(1),
                ..thd
            })
        ),
        Batch::synthetic(7, 0, (8, 64, 128), Some(unpadded)),
        "a multiple of 1 pads nothing"
    );
}
