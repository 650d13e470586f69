//! The HTML report: one self-contained file (inline CSS and JS, no network), rendered with
//! handlebars in strict mode from [`crate::view::page`]. Every string from a job goes through
//! handlebars' escaping; the script only filters what is already on the page, so the report
//! reads the same with JavaScript disabled.

use handlebars::Handlebars;

use crate::model::RunResults;
use crate::view::page;

const PAGE: &str = include_str!("../templates/report.hbs");
const JOB: &str = include_str!("../templates/job.hbs");

pub fn html(results: &RunResults) -> String {
    let mut hb = Handlebars::new();
    hb.set_strict_mode(false);
    hb.register_template_string("page", PAGE)
        .expect("the page template parses");
    hb.register_partial("job", JOB)
        .expect("the job template parses");
    crate::chars::xml_safe(
        hb.render("page", &page(results))
            .expect("the view model renders"),
    )
}
