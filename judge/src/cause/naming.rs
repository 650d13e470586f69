//! How a cause names the mesh: the axes a site's copies run over, and the factor of the mesh
//! (a degree, a microbatch count) a fitted scale is.

use super::Axes;

/// The axes a value's copies run over, major first: the ones the trace names (`over`, a
/// command engine's program says which ranks its copies are), else as the built-in engine
/// traces them (rank order: tp fastest, then cp, then dp): activations are copied per TP rank;
/// finalized gradients, parameters and the loss normalizer per data-parallel replica (dp, cp)
/// and, for replicated weights, TP rank; anything else per rank.
pub(super) fn copy_axes(
    site: &str,
    n: usize,
    axes: &Axes,
    over: &[String],
) -> Vec<(String, usize)> {
    let pick = |names: &[&str]| -> Option<Vec<(String, usize)>> {
        let v: Vec<(String, usize)> = names
            .iter()
            .map(|a| (a.to_string(), axes.degree(a)))
            .filter(|(_, d)| *d > 1)
            .collect();
        (!v.is_empty() && v.iter().map(|(_, d)| d).product::<usize>() == n).then_some(v)
    };
    let named: Vec<&str> = over.iter().map(String::as_str).collect();
    if let Some(v) = (!named.is_empty()).then(|| pick(&named)).flatten() {
        return v;
    }
    let tried: &[&[&'static str]] = if site.starts_with("layers.") || site.starts_with("pp.") {
        &[&["tp"]]
    } else if ["grad.", "param.", "adam.", "loss."]
        .iter()
        .any(|p| site.starts_with(p))
    {
        &[&["dp", "cp", "tp"], &["dp", "cp"], &["tp"]]
    } else {
        &[]
    };
    tried
        .iter()
        .find_map(|names| pick(names))
        .unwrap_or_else(|| vec![(format!("{n} ranks"), n)])
}

/// ` (= m/(m+1), m = 2)` and the like, or nothing.
pub(super) fn named(k: f64, axes: &Axes, microbatches: usize, site: &str) -> String {
    factor(k, axes, microbatches, site)
        .map(|(_, words)| format!(" ({words})"))
        .unwrap_or_default()
}

/// The mesh's factors a fitted `k` may be: (label, words). Where two axes have the same
/// degree, the one the site belongs to comes first: TP and CP for activations, the
/// data-parallel axes for gradients and the loss (tp for the vocab-parallel loss's sums), the
/// expert-parallel axes for an expert's gradient.
pub(super) fn factor(
    k: f64,
    axes: &Axes,
    microbatches: usize,
    site: &str,
) -> Option<(String, String)> {
    let mut candidates: Vec<(f64, String, String)> = Vec::new();
    // The vocab-parallel cross-entropy's sums (`loss.sumexp`, `loss.target`, `loss.smooth`)
    // are reduced over tp, within one replica's loss: tp first for their forward values (their
    // gradients scale with the loss's normalization: data-parallel axes first there).
    let vocab_parallel = site.contains(".fwd.")
        && ["loss.sumexp", "loss.target", "loss.smooth"]
            .iter()
            .any(|p| site.starts_with(p));
    let gradient = !vocab_parallel
        && ["grad", "loss", "param", "adam"]
            .iter()
            .any(|p| site.starts_with(p));
    // An expert's gradient is reduced over its expert-parallel group first (its tokens come
    // from every EP rank): ep and etp before the data-parallel axes there.
    let expert = gradient && site.contains("expert");
    let mut degrees = axes.degrees.clone();
    degrees.sort_by_key(|(a, _)| match *a {
        "ep" | "etp" if expert => 0,
        a => 1 + usize::from(gradient != matches!(a, "dp" | "cp")),
    });
    for &(a, n) in &degrees {
        let n = n as f64;
        candidates.push((n, a.to_owned(), format!("×{a} = {n}")));
        candidates.push((1.0 / n, format!("1/{a}"), format!("÷{a} = {n}")));
    }
    let m = microbatches.max(axes.microbatches) as f64;
    if m > 1.0 {
        candidates.push((
            m,
            "microbatches".into(),
            format!("×m, m = {m} microbatches"),
        ));
        candidates.push((
            1.0 / m,
            "1/microbatches".into(),
            format!("÷m, m = {m} microbatches"),
        ));
        candidates.push((m / (m + 1.0), "m/(m+1)".into(), format!("m/(m+1), m = {m}")));
        candidates.push(((m - 1.0) / m, "(m-1)/m".into(), format!("(m-1)/m, m = {m}")));
    }
    let near = |c: &f64| (k / c - 1.0).abs() <= 0.02;
    if !candidates.iter().any(|(c, _, _)| near(c)) {
        candidates.push((0.5, "1/2".into(), "½".into()));
        candidates.push((2.0, "2".into(), "×2".into()));
    }
    let matching: Vec<(String, String)> = candidates
        .into_iter()
        .filter(|(c, _, _)| near(c))
        .map(|(_, label, words)| (label, words))
        .collect();
    let (label, _) = matching.first()?;
    let words: Vec<&str> = matching.iter().map(|(_, w)| w.as_str()).collect();
    Some((label.clone(), words.join(", or ")))
}
