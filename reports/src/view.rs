//! The view model the HTML template renders: everything computed here, so the template only
//! lays out and handlebars escapes every string from a job.

use indexmap::IndexMap;
use meshparity_judge::Comparison;

use crate::plot::{plot, Plot};
use serde::Serialize;

use crate::chars::clean;
use crate::divergence::{divergence, DivergenceView};
use crate::junit::compared;
pub use crate::model::anchor;

use crate::model::{JobRecord, RunMeta, RunResults, Status};

#[derive(Serialize)]
pub struct Page {
    pub title: String,
    pub meta: RunMeta,
    pub counts: Vec<Count>,
    pub total: usize,
    pub meshes: Vec<String>,
    pub grid: Vec<Row>,
    pub references: Vec<Item>,
    pub failures: Vec<JobView>,
    pub failure_count: usize,
    pub jobs: Vec<JobView>,
    pub run_seconds: String,
    /// What a large run's page leaves out, and where to find it.
    pub condensed: Option<String>,
    /// Performance figures, reference beside candidate (reported, never gated), after the
    /// verdicts.
    pub performance: Vec<PerfView>,
    /// The run was on a CPU, where the ratios say little (ranks share its cores).
    pub performance_on_cpu: bool,
    /// What comparisons left out or could not decide, each once.
    pub notes: Vec<crate::notes::Note>,
}

#[derive(Serialize)]
pub struct PerfView {
    pub job: String,
    pub anchor: String,
    pub metric: String,
    pub reference: String,
    pub candidate: String,
    pub ratio: String,
}

/// Past this many jobs the page condenses: matrix cells show counts per status instead of one
/// link per job, and only jobs that did not pass are shown in detail (at most
/// [`DETAILED_AT_MOST`]), so a 100,000-job sweep gives a page a browser opens at once instead
/// of one of ~700 MB. Every job stays in results.json and junit.xml.
pub const CONDENSE_OVER: usize = 2_000;
pub const DETAILED_AT_MOST: usize = 200;

#[derive(Serialize)]
pub struct Count {
    pub status: &'static str,
    pub n: usize,
}

#[derive(Serialize)]
pub struct Row {
    pub label: String,
    pub cells: Vec<Cell>,
}

#[derive(Serialize)]
pub struct Cell {
    pub mesh: String,
    pub items: Vec<Item>,
}

#[derive(Serialize)]
pub struct Item {
    pub label: String,
    pub status: &'static str,
    pub anchor: String,
    pub title: String,
}

#[derive(Serialize)]
pub struct JobView {
    pub anchor: String,
    pub name: String,
    pub status: &'static str,
    pub summary: String,
    pub seconds: String,
    pub reproduce: String,
    /// `cpu`, or the GPU adapter that computed the job.
    pub device: String,
    pub compared: Option<u64>,
    pub collectives: Option<u64>,
    /// The run's peak activations held for backward, e.g. `1.2 MB`.
    pub activations: Option<String>,
    pub comparisons: Vec<ComparisonView>,
    pub curve: Option<Plot>,
    pub caught_by: Vec<String>,
    pub altered: Vec<String>,
    /// The first diverging site, with the values compared just before it.
    pub divergence: Option<DivergenceView>,
    pub log_tail: String,
    pub attempts: Vec<AttemptView>,
    pub open: bool,
}

#[derive(Serialize)]
pub struct ComparisonView {
    pub what: String,
    pub passed: bool,
    pub failure: String,
    pub compared: u64,
    pub reference: String,
    pub candidate: String,
    pub worst: Vec<TensorRow>,
    /// The trace level's worst sites ([`crate::sites`]).
    pub sites: Vec<crate::sites::SiteRow>,
    pub notes: Vec<String>,
    /// Its files were not kept (a caught mutation keeps one failed comparison's).
    pub unkept: bool,
}

#[derive(Serialize)]
pub struct TensorRow {
    pub name: String,
    pub shape: String,
    pub max_abs: String,
    pub max_rel: String,
    pub relative_l2: String,
    pub cosine: String,
    pub allclose_mismatched: String,
    pub passed: bool,
}

#[derive(Serialize)]
pub struct AttemptView {
    pub n: usize,
    pub status: &'static str,
    pub seconds: String,
    pub exit: String,
}

/// Rows of the worst-tensors table.
pub const WORST: usize = 8;

/// A comparison report's tensors as the worst-tensors table lists them: failed ones first,
/// then by relative L2, largest first; the table shows the first [`WORST`].
pub fn worst_tensors(report: &serde_json::Value) -> Vec<&serde_json::Value> {
    let mut worst: Vec<&serde_json::Value> = report["tensors"]
        .as_array()
        .map(|t| t.iter().collect())
        .unwrap_or_default();
    let key = |t: &serde_json::Value| t["metrics"]["relative_l2"].as_f64().unwrap_or(0.0);
    worst.sort_by(|a, b| {
        (a["passed"] == true)
            .cmp(&(b["passed"] == true))
            .then(key(b).total_cmp(&key(a)))
    });
    worst
}

fn sci(x: Option<f64>) -> String {
    match x {
        Some(0.0) => "0".into(),
        Some(x) => format!("{x:.3e}"),
        None => "—".into(),
    }
}

fn clean_meta(m: &RunMeta) -> RunMeta {
    RunMeta {
        spec: clean(&m.spec),
        spec_name: clean(&m.spec_name),
        spec_hash: clean(&m.spec_hash),
        git_commit: m.git_commit.as_deref().map(clean),
        host: clean(&m.host),
        backend: clean(&m.backend),
        device: clean(&m.device),
        meshparity_version: clean(&m.meshparity_version),
        started: clean(&m.started),
        finished: clean(&m.finished),
        run_dir: clean(&m.run_dir),
        ..m.clone()
    }
}

/// Lines in first-seen order, each once, `(×N)` after one that came N times: a fault that
/// alters a site at every step listed the same line once per step.
fn once_each(lines: &[String]) -> Vec<String> {
    let mut counts: indexmap::IndexMap<String, usize> = indexmap::IndexMap::new();
    for l in lines {
        *counts.entry(clean(l)).or_default() += 1;
    }
    counts
        .into_iter()
        .map(|(l, n)| if n > 1 { format!("{l} (×{n})") } else { l })
        .collect()
}

fn comparison(c: &Comparison) -> ComparisonView {
    let worst = worst_tensors(&c.report);
    ComparisonView {
        what: clean(&c.what),
        passed: c.passed,
        failure: clean(c.failure.as_deref().unwrap_or("")),
        compared: c.compared,
        reference: clean(&c.reference),
        candidate: clean(&c.candidate),
        notes: c.notes.iter().map(|n| clean(n)).collect(),
        unkept: c.unkept,
        sites: crate::sites::rows(&c.report),
        worst: worst
            .into_iter()
            .take(WORST)
            .map(|t| {
                let m = &t["metrics"];
                TensorRow {
                    name: clean(t["name"].as_str().unwrap_or("")),
                    shape: format!("{}", t["shape"]),
                    max_abs: sci(m["max_abs"].as_f64()),
                    max_rel: sci(m["max_rel"].as_f64()),
                    relative_l2: sci(m["relative_l2"].as_f64()),
                    cosine: m["cosine"]
                        .as_f64()
                        .map(|c| format!("{c:.9}"))
                        .unwrap_or_else(|| "—".into()),
                    allclose_mismatched: m["allclose"]["mismatched"]
                        .as_u64()
                        .map(|n| n.to_string())
                        .unwrap_or_default(),
                    passed: t["passed"] == true,
                }
            })
            .collect(),
    }
}

fn job_view(job: &JobRecord) -> JobView {
    let d = job.detail.as_ref();
    let comparisons: Vec<ComparisonView> = d
        .map(|d| d.comparisons().into_iter().map(comparison).collect())
        .unwrap_or_default();
    let curve = d.and_then(|d| {
        d.outcomes()
            .into_iter()
            .find_map(|o| o.losses.as_ref().and_then(plot))
    });
    let mutation = d.and_then(|d| d.mutation());
    JobView {
        anchor: anchor(job),
        name: clean(&if job.dependency {
            format!(
                "{} (dependency: reported by the shard that selects it)",
                job.name
            )
        } else {
            job.name.clone()
        }),
        status: job.status.as_str(),
        summary: clean(&job.summary),
        seconds: format!("{:.2}", job.seconds),
        reproduce: clean(&job.reproduce),
        device: clean(if job.adapter.is_empty() || job.adapter == job.device {
            &job.device
        } else {
            &job.adapter
        }),
        compared: compared(job),
        collectives: d.and_then(|d| d.collectives()).map(|n| n as u64),
        activations: d
            .and_then(|d| d.activation_bytes())
            .map(|b| format!("{:.1} MB", b as f64 / 1e6)),
        comparisons,
        curve,
        caught_by: mutation
            .map(|m| m.caught_by.iter().map(|l| l.as_str().to_owned()).collect())
            .unwrap_or_default(),
        altered: mutation.map(|m| once_each(&m.altered)).unwrap_or_default(),
        divergence: d.and_then(|d| d.localization()).map(divergence),
        log_tail: job
            .attempts
            .last()
            .map(|a| clean(&a.log_tail))
            .unwrap_or_default(),
        attempts: job
            .attempts
            .iter()
            .enumerate()
            .map(|(i, a)| AttemptView {
                n: i + 1,
                status: a.status.as_str(),
                seconds: format!("{:.2}", a.seconds),
                exit: a.exit.clone().map(|e| clean(&e)).unwrap_or_default(),
            })
            .collect(),
        open: !job.status.passed(),
    }
}

fn item(job: &JobRecord) -> Item {
    let label = match (&job.mutation, &job.level) {
        (Some(m), _) => format!("m:{m}"),
        (None, Some(l)) => l.clone(),
        _ => job.kind.clone(),
    };
    // A shard's dependency is counted where it is selected; here it is marked, not hidden.
    let label = if job.dependency {
        format!("({label})")
    } else {
        label
    };
    Item {
        label: clean(&label),
        status: job.status.as_str(),
        anchor: anchor(job),
        title: clean(&format!(
            "{} — {}: {}",
            job.name,
            job.status.as_str(),
            job.summary
        )),
    }
}

pub fn page(results: &RunResults) -> Page {
    let condense = results.jobs.len() > CONDENSE_OVER;
    let (meshes, grid, references) = matrix(results, condense);
    // Condensed, the failures have their own section: the list below holds the other jobs that
    // did not pass (skipped, not run), not the failures again.
    let shown = |j: &&JobRecord| !condense || !(j.status.passed() || failed(j));
    let detailed = if condense {
        DETAILED_AT_MOST
    } else {
        usize::MAX
    };
    let jobs: Vec<JobView> = results
        .jobs
        .iter()
        .filter(shown)
        .take(detailed)
        .map(job_view)
        .collect();
    let others = results.jobs.iter().filter(shown).count();
    let failure_count = results.jobs.iter().filter(|j| failed(j)).count();
    let condensed = condense.then(|| {
        format!(
            "{} jobs: matrix cells count jobs by status; failures are above (the first {} of \
             {failure_count} in detail) and the other jobs that did not pass below ({} of \
             {others}). Every job, with its evidence, is in results.json and junit.xml beside \
             this page.",
            results.jobs.len(),
            failure_count.min(detailed),
            jobs.len()
        )
    });
    let failures: Vec<JobView> = results
        .jobs
        .iter()
        .filter(|j| failed(j))
        .take(detailed)
        .map(job_view)
        .map(|mut v| {
            v.anchor = format!("failure-{}", v.anchor);
            v
        })
        .collect();
    Page {
        title: clean(&format!("meshparity — {}", results.meta.spec_name)),
        meta: clean_meta(&results.meta),
        counts: Status::ALL
            .iter()
            .map(|s| Count {
                status: s.as_str(),
                n: results.count(*s),
            })
            .filter(|c| c.n > 0)
            .collect(),
        total: results.jobs.len(),
        meshes: meshes.iter().map(|m| clean(m)).collect(),
        grid,
        references,
        failure_count,
        failures,
        jobs,
        run_seconds: format!("{:.1}", results.meta.seconds),
        condensed,
        performance_on_cpu: results.meta.device.starts_with("cpu"),
        notes: notes(results),
        performance: performance(results),
    }
}

/// The matrix: meshes in first-seen order, a row per model@dtype with a cell per mesh, and the
/// reference jobs (no mesh) apart; cells and references counted by status when `condense`.
fn matrix(results: &RunResults, condense: bool) -> (Vec<String>, Vec<Row>, Vec<Item>) {
    let mut meshes: Vec<String> = Vec::new();
    let mut rows: IndexMap<String, IndexMap<String, Vec<Item>>> = IndexMap::new();
    let mut references = Vec::new();
    for job in &results.jobs {
        let Some(mesh) = &job.mesh else {
            references.push(item(job));
            continue;
        };
        if !meshes.contains(mesh) {
            meshes.push(mesh.clone());
        }
        rows.entry(format!("{}@{}", job.model, job.dtype))
            .or_default()
            .entry(mesh.clone())
            .or_default()
            .push(item(job));
    }
    let grid = rows
        .into_iter()
        .map(|(label, mut cells)| Row {
            label: clean(&label),
            cells: meshes
                .iter()
                .map(|m| {
                    let items = cells.swap_remove(m).unwrap_or_default();
                    Cell {
                        mesh: clean(m),
                        items: if condense { counted(items) } else { items },
                    }
                })
                .collect(),
        })
        .collect();
    let references = if condense {
        counted(references)
    } else {
        references
    };
    (meshes, grid, references)
}

/// The run's notes, their text cleaned for the page.
fn notes(results: &RunResults) -> Vec<crate::notes::Note> {
    crate::notes::notes(results)
        .into_iter()
        .map(|n| crate::notes::Note {
            text: clean(&n.text),
            first_job: clean(&n.first_job),
            ..n
        })
        .collect()
}

/// The performance figures side by side.
fn performance(results: &RunResults) -> Vec<PerfView> {
    crate::performance::rows(results)
        .into_iter()
        .map(|r| PerfView {
            job: clean(&r.job),
            anchor: r.anchor,
            metric: clean(&r.metric),
            reference: figure(r.reference),
            candidate: figure(r.candidate),
            ratio: r.ratio.map_or_else(|| "—".into(), |x| format!("{x:.3}×")),
        })
        .collect()
}

/// A performance figure: four significant digits.
pub(crate) fn figure(x: f64) -> String {
    if x != 0.0 && (x.abs() >= 1e5 || x.abs() < 1e-3) {
        format!("{x:.3e}")
    } else {
        format!("{}", (x * 1e4).round() / 1e4)
    }
}

fn failed(j: &JobRecord) -> bool {
    matches!(j.status, Status::Failed | Status::Error | Status::Timeout)
}

/// A cell's jobs as one link per status with its count (a condensed page).
fn counted(items: Vec<Item>) -> Vec<Item> {
    let mut by_status: IndexMap<&'static str, usize> = IndexMap::new();
    for i in &items {
        *by_status.entry(i.status).or_default() += 1;
    }
    by_status
        .into_iter()
        .map(|(status, n)| Item {
            label: format!("{n} {status}"),
            status,
            anchor: String::new(),
            title: format!("{n} job(s) {status}"),
        })
        .collect()
}
