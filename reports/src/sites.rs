//! The trace level's worst sites as a job's page lists them: each site's relative L2 beside
//! its error-analysis bound, the multiple and the limit on it (the judge writes them into the
//! comparison's report as `sites`).

use serde::Serialize;

use crate::chars::clean;

/// One listed site, its numbers formatted.
#[derive(Serialize)]
pub struct SiteRow {
    pub site: String,
    pub relative_l2: String,
    pub bound: String,
    pub ratio: String,
    pub limit: String,
    pub passed: bool,
}

/// The rows of a comparison's `report.sites`, in the judge's order (worst first); none for a
/// comparison of another kind.
pub fn rows(report: &serde_json::Value) -> Vec<SiteRow> {
    let sci = |v: &serde_json::Value| v.as_f64().map_or("—".to_owned(), |x| format!("{x:.2e}"));
    let Some(sites) = report["sites"].as_array() else {
        return Vec::new();
    };
    sites
        .iter()
        .map(|s| {
            let (ratio, limit) = (s["ratio"].as_f64(), s["limit"].as_f64());
            SiteRow {
                site: clean(s["site"].as_str().unwrap_or("")),
                relative_l2: sci(&s["relative_l2"]),
                bound: sci(&s["bound"]),
                ratio: ratio.map_or("—".to_owned(), |r| format!("{r:.2}×")),
                limit: limit.map_or("not gated".to_owned(), |l| format!("{l}×")),
                passed: match (ratio, limit) {
                    (Some(r), Some(l)) => r <= l,
                    _ => true,
                },
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_site_over_its_limit_is_marked_and_an_ungated_one_is_said() {
        let report = serde_json::json!({ "sites": [
            { "site": "s0.layers.0.mlp.combine.fwd.in", "relative_l2": 0.064, "bound": 0.0322,
              "ratio": 1.99, "limit": 1.5 },
            { "site": "s0.grad_norm", "relative_l2": 0.001, "bound": 0.031, "ratio": 0.03,
              "limit": null },
        ]});
        let rows = rows(&report);
        assert_eq!(rows.len(), 2);
        assert!(!rows[0].passed);
        assert_eq!(rows[0].bound, "3.22e-2");
        assert_eq!(rows[0].ratio, "1.99×");
        assert_eq!(rows[1].limit, "not gated");
        assert!(super::rows(&serde_json::json!({ "tensors": [] })).is_empty());
    }
}
