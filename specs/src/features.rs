//! The production features of `[run]` (issue 36): label smoothing, z-loss, dropout, activation
//! recompute and packed sequences — their types, and the reading of their keys with the
//! checks that need nothing but `[run]` (whether they fit a mesh and model is [`crate::fit`]'s).

use serde::Serialize;

use crate::decode::{Ctx, Keyword, Table};
use crate::diagnostic::Diagnostic;
use crate::source::Located;

/// Activation recompute (Megatron's `--recompute-granularity`): what the backward re-runs from
/// saved inputs instead of keeping its activations.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, schemars::JsonSchema, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Recompute {
    /// Every transformer layer's attention and MLP blocks (a moe layer's routed experts are
    /// kept: their routing and auxiliary losses are the forward's).
    Full,
    /// What sits between the attention block's TP collectives: the q/k/v projections, RoPE,
    /// scores, softmax, dropout, values and the o projection (Megatron's selective recompute
    /// re-runs the core attention alone, without the projections).
    Selective,
}

impl Keyword for Recompute {
    const WHAT: &'static str = "recompute granularity";
    const ALL: &'static [(&'static str, Self)] = &[
        ("full", Recompute::Full),
        ("selective", Recompute::Selective),
    ];
}

/// Packed sequences and loss masks, as fine-tuning stacks feed them (Megatron's
/// `--reset-position-ids --reset-attention-mask`, NeMo's packed sequences, HF's
/// `DataCollatorWithFlattening`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Packing {
    /// Several documents per row: attention stays inside a document, positions restart at each
    /// document's first token, and no label crosses a document boundary.
    pub documents: bool,
    /// Each document opens with a prompt whose labels are ignored (`-100`), as in supervised
    /// fine-tuning; valid-token counts then differ from row to row and document to document.
    pub prompts: bool,
    /// Each document padded to a multiple of this many tokens (`pad_documents_to`), as
    /// TransformerEngine's THD layout needs under context parallelism: CP then cuts every
    /// document, not every row, into 2·cp chunks. The padding is a document's tail of token 0
    /// with ignored labels. Absent from the serialized form when unset, so every other job
    /// keeps its identity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pad_to: Option<u32>,
}

/// Megatron's two dropout probabilities (`--attention-dropout`, `--hidden-dropout`), each in
/// [0, 1). The masks are not random draws of a rank but a function of the run's seed, the step
/// and where they act (meshparity's engine), so a correct mesh drops exactly what world size 1
/// drops.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, serde::Deserialize)]
pub struct Dropout {
    /// On the attention probabilities (after the softmax, before the values).
    pub attention: f64,
    /// On each residual branch's output (attention's and the MLP's), before the residual add.
    pub hidden: f64,
}

/// The features' values of one `[run]` table, for its `Training`.
pub(crate) struct Features {
    pub label_smoothing: Option<f64>,
    pub z_loss: Option<f64>,
    pub dropout: Option<Dropout>,
    pub recompute: Option<Recompute>,
    pub packing: Option<Packing>,
    /// `pad_documents_to`, where it was written (for its location in later checks).
    pub padding: Option<Located<u32>>,
}

/// Reads the features' keys of `[run]`.
pub(crate) fn read(cx: &mut Ctx<'_>, t: &mut Table<'_, '_>) -> Features {
    let label_smoothing = fraction(
        cx,
        t,
        "label_smoothing",
        "the label itself would weigh nothing",
        "give ε in [0, 1), as torch and Megatron take it (0.1 is usual)",
    );
    let z_loss = fraction(
        cx,
        t,
        "z_loss",
        "the normalizer's penalty would outweigh the loss",
        "give the weight in [0, 1), as PaLM's 1e-4",
    );
    let dropped = "every activation would be dropped";
    let usual = "give a probability in [0, 1), as Megatron's --attention-dropout and --hidden-dropout (0.1 is usual)";
    let attention = fraction(cx, t, "attention_dropout", dropped, usual);
    let hidden = fraction(cx, t, "hidden_dropout", dropped, usual);
    let dropout = (attention.is_some() || hidden.is_some()).then(|| Dropout {
        attention: attention.unwrap_or(0.0),
        hidden: hidden.unwrap_or(0.0),
    });
    let recompute = t.keyword::<Recompute>(cx, "recompute").map(|r| r.value);
    let documents = t.bool(cx, "packed_sequences").is_some_and(|b| b.value);
    let prompts = t.bool(cx, "mask_prompts").is_some_and(|b| b.value);
    let padding = document_padding(cx, t, documents);
    let packing = (documents || prompts).then_some(Packing {
        documents,
        prompts,
        pad_to: padding.as_ref().map(|p| p.value),
    });
    Features {
        label_smoothing,
        z_loss,
        dropout,
        recompute,
        packing,
        padding,
    }
}

/// `pad_documents_to`: at least 2, and only with `packed_sequences` (there are no documents
/// to pad otherwise). Whether it fits each mesh and model is [`crate::fit`]'s.
fn document_padding(
    cx: &mut Ctx<'_>,
    t: &mut Table<'_, '_>,
    documents: bool,
) -> Option<Located<u32>> {
    let v = t.positive(cx, "pad_documents_to")?;
    let problem = if !documents {
        Some((
            "`run.pad_documents_to` needs `packed_sequences = true`".to_owned(),
            "it pads each packed document for context parallelism's per-document chunks; set `packed_sequences = true` or remove it",
        ))
    } else if v.value < 2 {
        Some((
            format!("`run.pad_documents_to` is {}: nothing to pad to", v.value),
            "give a multiple of 2·cp for every mesh with context parallelism (8 covers cp 2 and 4)",
        ))
    } else {
        None
    };
    if let Some((message, help)) = problem {
        cx.error(Diagnostic::error(&v.loc, message).help(help.to_owned()));
        return None;
    }
    Some(v)
}

/// A `[run]` value in [0, 1) (a probability or weight), `None` when absent or 0; 1 or more is
/// an error saying `why` it cannot be and `help`.
fn fraction(
    cx: &mut Ctx<'_>,
    t: &mut Table<'_, '_>,
    key: &'static str,
    why: &str,
    help: &str,
) -> Option<f64> {
    let v = t.limit(cx, key)?;
    if v.value < 1.0 {
        return Some(v.value).filter(|&v| v > 0.0);
    }
    cx.error(
        Diagnostic::error(&v.loc, format!("`run.{key}` is 1 or more: {why}")).help(help.to_owned()),
    );
    None
}
