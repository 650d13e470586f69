//! Result model and reports (JUnit XML, HTML, JSON, Markdown) will live here (issue 6). Empty
//! until then.
