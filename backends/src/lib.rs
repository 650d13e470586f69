//! The burn reference backend and the command backend will live here (issues 4 and 7). Empty
//! until then: the spec and planner work compiles and tests without burn.
