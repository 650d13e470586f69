//! The plan for people (`text`), for Graphviz (`dot`) and for programs (`json`).

mod dot;
mod json;
mod text;

pub use dot::dot;
pub use json::{json, PLAN_FORMAT_VERSION};
pub use text::text;
