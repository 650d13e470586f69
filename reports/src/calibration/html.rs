//! The calibration as one self-contained HTML page (no network, no script), rendered with
//! handlebars so every string is escaped.

use handlebars::Handlebars;
use serde::Serialize;

use super::{short, Calibration, Reading};

const PAGE: &str = include_str!("../../templates/calibration.hbs");
/// The headroom, margin and limits tables (and errors): the page's body, and the calibration
/// section of a run's report.
pub(crate) const TABLES: &str = include_str!("../../templates/calibration_tables.hbs");

#[derive(Serialize)]
pub(crate) struct View {
    title: String,
    summary: String,
    clean: bool,
    headroom: Vec<Vec<Cell>>,
    margins: Vec<Vec<Cell>>,
    suggestions: Vec<Vec<Cell>>,
    errors: Vec<String>,
    power_headers: Vec<String>,
    power: Vec<Vec<Cell>>,
    power_headlines: Vec<String>,
}

#[derive(Serialize)]
struct Cell {
    text: String,
    /// `bad` (failed/missed), `thin` (under 10×) or empty.
    class: &'static str,
}

fn cell(text: impl Into<String>) -> Cell {
    Cell {
        text: text.into(),
        class: "",
    }
}

fn graded(x: f64, thin: bool) -> Cell {
    Cell {
        text: format!("{}×", super::times(x)),
        class: if x < 1.0 {
            "bad"
        } else if thin {
            "thin"
        } else {
            "ok"
        },
    }
}

fn reading(r: Option<&Reading>) -> Cell {
    cell(r.map_or_else(
        || "-".to_owned(),
        |r| {
            format!(
                "{} {} {} vs limit {} (seed {})",
                r.subject,
                r.metric,
                short(r.value),
                short(r.limit),
                r.seed
            )
        },
    ))
}

pub fn html(c: &Calibration) -> String {
    let mut hb = Handlebars::new();
    hb.register_template_string("page", PAGE)
        .expect("the calibration template parses");
    hb.register_partial("calibration_tables", TABLES)
        .expect("the calibration tables parse");
    hb.render("page", &view(c)).expect("the view renders")
}

/// What the templates show of a calibration.
pub(crate) fn view(c: &Calibration) -> View {
    let power = super::power::table(c);
    View {
        power_headers: if c.power.is_empty() {
            Vec::new()
        } else {
            power.headers
        },
        power: power
            .rows
            .into_iter()
            .map(|r| r.into_iter().map(cell).collect())
            .collect(),
        power_headlines: power.headlines,
        title: format!("meshparity calibration: {}", c.spec),
        summary: format!(
            "{}, configurations: {}; {} correct run(s) judged at {} level(s) in all, {} of those \
             levels over their limit (false positives); {} mutation run(s), {} missed, {} \
             localized elsewhere than injected; {} error(s); {:.1} s",
            super::seed_range(c.first_seed, c.seeds),
            c.configs.join(", "),
            c.correct_runs,
            c.correct_checks(),
            c.false_positives(),
            c.mutation_runs,
            c.missed(),
            c.mislocalized(),
            c.errors.len(),
            c.seconds
        ),
        clean: c.clean(),
        headroom: headroom(c),
        margins: margins(c),
        suggestions: suggestions(c),
        errors: c
            .errors
            .iter()
            .map(|e| {
                format!(
                    "{} {}@{} {} seed {}: {}",
                    e.config,
                    e.model,
                    e.mesh,
                    e.mutation.as_deref().unwrap_or("correct"),
                    e.seed,
                    e.message
                )
            })
            .collect(),
    }
}

/// The headroom table's rows.
fn headroom(c: &Calibration) -> Vec<Vec<Cell>> {
    c.headroom
        .iter()
        .map(|h| {
            vec![
                cell(&h.config),
                cell(format!("{}@{}", h.model, h.dtype)),
                cell(&h.mesh),
                cell(&h.level),
                cell(format!(
                    "{}/{}",
                    h.runs - h.failed_seeds.len() as u64,
                    h.runs
                )),
                reading(h.worst.as_ref()),
                graded(h.headroom, h.thin),
            ]
        })
        .collect()
}

/// The margin table's rows.
fn margins(c: &Calibration) -> Vec<Vec<Cell>> {
    c.margins
        .iter()
        .map(|m| {
            vec![
                cell(&m.config),
                cell(format!("{}@{}", m.model, m.dtype)),
                cell(&m.mesh),
                cell(&m.mutation),
                cell(format!("{}/{}", m.caught, m.runs)),
                cell(m.first_level.clone().unwrap_or_else(|| "-".into())),
                reading(m.weakest.as_ref()),
                graded(m.margin, m.thin),
                cell(super::text::localized(m)),
                cell(m.classes.join("; ")),
            ]
        })
        .collect()
}

/// The suggested limits' rows.
fn suggestions(c: &Calibration) -> Vec<Vec<Cell>> {
    c.suggestions
        .iter()
        .map(|s| {
            vec![
                cell(&s.config),
                cell(format!("{} {}", s.dtype, s.level)),
                cell(format!("{} ({})", s.metric, s.bound)),
                Cell {
                    text: short(s.current),
                    class: if s.thin { "thin" } else { "" },
                },
                cell(short(s.worst_correct)),
                cell(s.weakest_bug.map_or_else(|| "-".into(), short)),
                cell(
                    s.suggested
                        .map_or_else(|| "keep (no bug measured)".into(), short),
                ),
            ]
        })
        .collect()
}
