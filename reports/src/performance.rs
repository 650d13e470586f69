//! Performance figures side by side: every metric a curve comparison reported but did not gate
//! (step time, memory, throughput — `meshparity_compare::curve::is_performance`), as the mean
//! over the compared steps of the reference (the base variant, or world size 1) beside the
//! candidate's. For the HTML and Markdown reports; never a verdict.

use crate::model::RunResults;

/// One performance figure of one job.
#[derive(Clone, Debug, serde::Serialize)]
pub struct PerfRow {
    pub job: String,
    /// The job's anchor in the HTML report.
    pub anchor: String,
    pub metric: String,
    pub reference: f64,
    pub candidate: f64,
    /// candidate / reference (`None` when the reference is 0).
    pub ratio: Option<f64>,
}

/// Every job's ungated curve metrics, in job order.
pub fn rows(results: &RunResults) -> Vec<PerfRow> {
    let mut out = Vec::new();
    for job in &results.jobs {
        let Some(d) = job.detail.as_ref() else {
            continue;
        };
        for c in d.comparisons() {
            let metrics = c.report["metrics"].as_array().into_iter().flatten();
            for m in metrics.filter(|m| m["gated"] == false) {
                let (Some(r), Some(x)) =
                    (m["reference_mean"].as_f64(), m["candidate_mean"].as_f64())
                else {
                    continue;
                };
                out.push(PerfRow {
                    job: job.name.clone(),
                    anchor: crate::model::anchor(job),
                    metric: m["name"].as_str().unwrap_or("").to_owned(),
                    reference: r,
                    candidate: x,
                    ratio: (r != 0.0).then(|| x / r),
                });
            }
        }
    }
    out
}
