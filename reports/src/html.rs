//! The HTML report: one self-contained file (inline CSS and JS, no network), rendered with
//! handlebars in strict mode from [`crate::view::page`]. Every string from a job goes through
//! handlebars' escaping; the script only filters what is already on the page, so the report
//! reads the same with JavaScript disabled.

use handlebars::Handlebars;

use crate::calibration::{self, Calibration};
use crate::model::RunResults;
use crate::view::page;

const PAGE: &str = include_str!("../templates/report.hbs");
const JOB: &str = include_str!("../templates/job.hbs");

pub fn html(results: &RunResults) -> String {
    render(serde_json::to_value(page(results)).expect("the view model serializes"))
}

/// The report with a calibration of its spec as a section of its own (`meshparity calibrate
/// --report RUN_DIR`): how close the run's correct checks may come to their limits, and how far
/// past them its injected bugs went, over many seeds.
pub fn html_with_calibration(results: &RunResults, calibration: &Calibration) -> String {
    let mut view = serde_json::to_value(page(results)).expect("the view model serializes");
    view["calibration"] =
        serde_json::to_value(calibration::html::view(calibration)).expect("the view serializes");
    render(view)
}

fn render(view: serde_json::Value) -> String {
    let mut hb = Handlebars::new();
    hb.set_strict_mode(false);
    hb.register_template_string("page", PAGE)
        .expect("the page template parses");
    hb.register_partial("job", JOB)
        .expect("the job template parses");
    hb.register_partial("calibration_tables", calibration::html::TABLES)
        .expect("the calibration tables parse");
    crate::chars::xml_safe(hb.render("page", &view).expect("the view model renders"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A job's divergence paragraph as the template renders it.
    fn paragraph(divergence: serde_json::Value) -> String {
        let mut hb = Handlebars::new();
        hb.register_template_string("job", JOB).unwrap();
        let html = hb
            .render("job", &serde_json::json!({ "divergence": divergence }))
            .unwrap();
        let start = html
            .find("<p class=\"divergence\">")
            .expect("a divergence paragraph");
        html[start..html[start..].find("</p>").unwrap() + start].to_owned()
    }

    /// No traced site diverged: the summary alone, not "first divergence: , <empty mark>".
    #[test]
    fn a_localization_without_a_site_says_so_plainly() {
        let none = paragraph(serde_json::json!({
            "at": "", "site": "", "reading": "", "before": [],
            "what": "no traced site diverged (141 values compared)"
        }));
        assert!(!none.contains("first divergence"), "{none}");
        assert!(!none.contains("<mark"), "{none}");
        assert!(none.contains("no traced site diverged"), "{none}");
        let found = paragraph(serde_json::json!({
            "at": "step 0, forward", "site": "layers.0.mlp.out", "what": "layer output",
            "reading": "relative l2 6.4e-1 > 1e-4", "before": []
        }));
        assert!(
            found.contains(
                "first divergence: step 0, forward, <mark class=\"site\">layers.0.mlp.out</mark>"
            ),
            "{found}"
        );
    }
}
