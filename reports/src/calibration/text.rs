//! The calibration as plain-text tables for a terminal or a CI log.

use std::fmt::Write;

use super::{seed_range, short, times, Calibration, Reading};

/// Headroom, margin and suggestion tables, then one verdict line.
pub fn text(c: &Calibration) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "calibration of {} over {} ({} configuration(s): {}), {:.1} s",
        c.spec,
        seed_range(c.first_seed, c.seeds),
        c.configs.len(),
        c.configs.join(", "),
        c.seconds
    );
    let _ = writeln!(
        out,
        "\nheadroom: the correct mesh's reading closest to its limit (limit / worst; `!` under 10×)"
    );
    headroom(&mut out, c);
    margins(&mut out, c);
    suggestions(&mut out, c);
    power(&mut out, c);
    totals(&mut out, c);
    out
}

/// The correct meshes' closest readings to their limits.
fn headroom(out: &mut String, c: &Calibration) {
    let mut rows = vec![row(&[
        "config",
        "model",
        "mesh",
        "level",
        "runs",
        "fail",
        "closest reading",
        "headroom",
    ])];
    for h in &c.headroom {
        rows.push(vec![
            h.config.clone(),
            format!("{}@{}", h.model, h.dtype),
            h.mesh.clone(),
            h.level.clone(),
            h.runs.to_string(),
            h.failed_seeds.len().to_string(),
            reading(h.worst.as_ref()),
            flag(h.headroom, h.thin),
        ]);
    }
    table(out, &rows);
}

/// Each bug's weakest seed.
fn margins(out: &mut String, c: &Calibration) {
    if !c.margins.is_empty() {
        let _ = writeln!(
            out,
            "\nmargin: each bug's weakest seed, its strongest reading (value / limit; `!` under 10×)"
        );
        let mut rows = vec![row(&[
            "config",
            "model",
            "mesh",
            "mutation",
            "caught",
            "first level",
            "weakest signal",
            "margin",
            "localized",
        ])];
        for m in &c.margins {
            rows.push(vec![
                m.config.clone(),
                format!("{}@{}", m.model, m.dtype),
                m.mesh.clone(),
                m.mutation.clone(),
                format!("{}/{}", m.caught, m.runs),
                m.first_level.clone().unwrap_or_else(|| "-".into()),
                reading(m.weakest.as_ref()),
                flag(m.margin, m.thin),
                localized(m),
            ]);
        }
        table(out, &rows);
    }
}

/// Limits between the worst correct reading and the weakest bug.
fn suggestions(out: &mut String, c: &Calibration) {
    if !c.suggestions.is_empty() {
        let _ = writeln!(
            out,
            "\nlimits: worst correct reading, weakest caught bug, and a limit between them"
        );
        let mut rows = vec![row(&[
            "config",
            "level",
            "metric",
            "current",
            "worst correct",
            "weakest bug",
            "suggested",
        ])];
        for s in &c.suggestions {
            rows.push(vec![
                s.config.clone(),
                format!("{} {}", s.dtype, s.level),
                format!("{} ({})", s.metric, s.bound),
                format!("{}{}", short(s.current), if s.thin { " !" } else { "" }),
                short(s.worst_correct),
                s.weakest_bug.map_or_else(|| "-".into(), short),
                s.suggested
                    .map_or_else(|| "keep (no bug measured)".into(), short),
            ]);
        }
        table(out, &rows);
    }
}

/// The smallest perturbation each level catches.
fn power(out: &mut String, c: &Calibration) {
    if !c.power.is_empty() {
        let p = super::power::table(c);
        let _ = writeln!(
            out,
            "\npower: the smallest perturbation each level catches on every seed (`-`: not even \
             the largest)"
        );
        let mut rows = vec![p.headers];
        rows.extend(p.rows);
        table(out, &rows);
        for h in &p.headlines {
            let _ = writeln!(out, "  {h}");
        }
    }
}

/// The errors, then the sweep in one line.
fn totals(out: &mut String, c: &Calibration) {
    for e in &c.errors {
        let what = e.mutation.as_deref().unwrap_or("correct");
        let _ = writeln!(
            out,
            "error: {} {}@{} {what} seed {}: {}",
            e.config, e.model, e.mesh, e.seed, e.message
        );
    }
    let thin_h = c.headroom.iter().filter(|h| h.thin).count();
    let thin_m = c.margins.iter().filter(|m| m.thin).count();
    let _ = writeln!(
        out,
        "\n{} correct run(s) judged at {} level(s) in all, {} of those levels over their limit \
         (false positives); {} mutation run(s), {} missed, {} localized elsewhere than injected; \
         {} errors; {thin_h} thin headroom row(s), {thin_m} thin margin row(s)",
        c.correct_runs,
        c.correct_checks(),
        c.false_positives(),
        c.mutation_runs,
        c.missed(),
        c.mislocalized(),
        c.errors.len()
    );
}

fn row(cells: &[&str]) -> Vec<String> {
    cells.iter().map(|s| s.to_string()).collect()
}

fn reading(r: Option<&Reading>) -> String {
    match r {
        Some(r) => format!(
            "{} {} {} vs {} (seed {})",
            r.subject,
            r.metric,
            short(r.value),
            short(r.limit),
            r.seed
        ),
        None => "-".into(),
    }
}

fn flag(x: f64, thin: bool) -> String {
    format!("{}×{}", times(x), if thin { " !" } else { "" })
}

fn table(out: &mut String, rows: &[Vec<String>]) {
    let cols = rows[0].len();
    let width: Vec<usize> = (0..cols)
        .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect();
    for r in rows {
        let line: Vec<String> = r
            .iter()
            .zip(&width)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        let _ = writeln!(out, "  {}", line.join("  ").trim_end());
    }
}

/// The first diverging site(s) and how many runs were localized where the bug was injected;
/// without it where no run's injection site is known (a command engine's mutations are not in
/// the catalog: "0/3 as injected" on every row read as three mislocalizations).
pub(crate) fn localized(m: &super::Margin) -> String {
    if m.sites.is_empty() {
        return "-".to_owned();
    }
    let known = m.as_injected + m.mislocalized;
    if known == 0 {
        return format!("{} (injection site not known)", m.sites.join(", "));
    }
    format!(
        "{} ({}/{} as injected)",
        m.sites.join(", "),
        m.as_injected,
        m.runs
    )
}
