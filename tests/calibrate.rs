//! `meshparity calibrate` as a user runs it: progress in a CI log, and the calibration added to
//! a run's own report.html.

mod common;

use std::process::Command;

fn meshparity() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_meshparity"));
    cmd.current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("NO_COLOR", "1");
    cmd
}

#[test]
fn a_calibration_becomes_a_section_of_the_runs_report() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    let filters = ["-f", "mesh=dp2"];
    let (code, _) = common::run_in_repo(
        &[&["examples/quickstart.toml"], &filters[..]].concat(),
        &run,
    );
    assert_eq!(code, Some(0));
    let before = std::fs::read_to_string(run.join("report.html")).unwrap();
    assert!(!before.contains("id=\"calibration\""));
    let out = meshparity()
        .args(["calibrate", "examples/quickstart.toml", "--seeds", "2"])
        .args(filters)
        .arg("--out")
        .arg(dir.path().join("cal"))
        .arg("--report")
        .arg(&run)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    // Not a terminal: a line per finished seed run, with the time so far.
    assert!(
        stderr.contains("calibrating: 2/2 seed runs, 0m"),
        "{stderr}"
    );
    let page = std::fs::read_to_string(run.join("report.html")).unwrap();
    let section = &page[page
        .find("<section id=\"calibration\">")
        .expect("a section")..];
    let section = &section[..section.find("</section>").unwrap()];
    assert!(
        section.contains("2 correct run(s) judged at")
            && section.contains("0 of those levels over their limit (false positives)"),
        "{section}"
    );
    for table in ["headroom", "margin", "limits"] {
        assert!(
            section.contains(&format!("<table class=\"{table}\">")),
            "{table}"
        );
    }
    assert!(
        section.contains("dp-skip-grad-all-reduce"),
        "the margin rows name the bugs"
    );
    // The run's jobs are still all there.
    assert_eq!(
        page.matches("<details class=\"job\"").count(),
        before.matches("<details class=\"job\"").count()
    );
    // A real browser builds the section's tables from the page (CI installs chromium).
    if let Some(dom) = dom(&run.join("report.html")) {
        let section = &dom[dom
            .find("id=\"calibration\"")
            .expect("the section in the DOM")..];
        assert!(
            section.contains("<table class=\"margin\"><thead>"),
            "{section}"
        );
        assert!(section.contains("dp-skip-grad-all-reduce"));
    }
}

/// The DOM Chromium builds from `page`, or `None` (said) where no chromium runs.
fn dom(page: &std::path::Path) -> Option<String> {
    let usable = Command::new("chromium")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !usable {
        assert!(std::env::var_os("CI").is_none(), "CI installs chromium");
        eprintln!("skipped the browser check: apt-get install chromium");
        return None;
    }
    let profile = tempfile::tempdir().unwrap();
    let out = Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--dump-dom",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(format!("file://{}", page.display()))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(String::from_utf8(out.stdout).unwrap())
}

#[test]
fn a_report_that_cannot_be_read_stops_the_calibration_before_it_starts() {
    let dir = tempfile::tempdir().unwrap();
    let out = meshparity()
        .args([
            "calibrate",
            "examples/quickstart.toml",
            "--seeds",
            "50",
            "--report",
        ])
        .arg(dir.path().join("no-such-run"))
        .arg("--out")
        .arg(dir.path().join("cal"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("error: --report:") && stderr.contains("results.json"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("calibrating:"),
        "nothing was swept: {stderr}"
    );
}

/// `--power`: every perturbation that applies to the mesh is measured at every size; the big
/// ones are caught, the table says by which level, and a level that cannot see a gradient
/// (roundtrip) says so instead of claiming power.
#[test]
fn power_reports_the_smallest_perturbation_each_level_catches() {
    let dir = tempfile::tempdir().unwrap();
    let out = meshparity()
        .args(["calibrate", "examples/quickstart.toml", "--power", "--json"])
        .args(["--seeds", "2", "--dtype", "f32", "-f", "mesh=dp2"])
        .arg("--out")
        .arg(dir.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let power = json["power"].as_array().expect("a power table");
    let classes: std::collections::BTreeSet<&str> = power
        .iter()
        .map(|p| p["perturbation"].as_str().unwrap())
        .collect();
    assert_eq!(
        classes,
        ["rank-grad-scale", "replica-grad-short", "residual-scale"].into()
    );
    let at = |class: &str, level: &str| {
        power
            .iter()
            .find(|p| p["perturbation"] == class && p["level"] == level)
            .unwrap_or_else(|| panic!("{class} {level}"))
    };
    for class in classes {
        let any = at(class, "any");
        assert_eq!(any["seeds"], 2);
        assert_eq!(any["tried"][0], 1.0, "{any}");
        let smallest = any["smallest"].as_f64().expect("caught at some size");
        assert!(smallest <= 0.2, "{class}: {smallest}");
        // The verdict sees at least what its best level sees.
        let oracle = at(class, "oracle")["smallest"].as_f64().unwrap();
        assert!(
            smallest <= oracle,
            "{class}: any {smallest} > oracle {oracle}"
        );
    }
    assert!(at("rank-grad-scale", "roundtrip")["smallest"].is_null());
    // The page has the table.
    let page = std::fs::read_to_string(dir.path().join("calibration.html")).unwrap();
    assert!(page.contains("<table class=\"power\">") && page.contains("detects rank-grad-scale"));
}

/// A command engine runs its program in the engine's own directory; calibrate gave it the seed
/// checkpoint by a path relative to where calibrate ran, so every round trip of every seed was
/// an error ("No such file or directory: meshparity-calibration/scratch/…/seed.safetensors").
#[test]
fn a_programs_round_trip_finds_the_seed_from_its_own_directory() {
    if !common::harness::jax() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let spec =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/command/jax-tp-dp.toml");
    let out = meshparity()
        .current_dir(dir.path())
        .arg("calibrate")
        .arg(&spec)
        .args(["--seeds", "1", "-f", "mesh=tp2 and level=roundtrip"])
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    assert!(!text.contains("No such file"), "{text}");
    assert!(text.contains("roundtrip"), "{text}");
}
