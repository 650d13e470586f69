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
