//! `meshparity completions SHELL` and `meshparity man`, checked by what consumes them: bash
//! completes a partial command line with the script loaded, and `man` renders the page.

use std::process::Command;

fn meshparity(args: &[&str]) -> String {
    let out = assert_cmd::Command::cargo_bin("meshparity")
        .unwrap()
        .args(args)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{args:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// Bash, with the generated script sourced, completes `meshparity pl` to `plan` and lists
/// `plan`'s own flags after it.
#[test]
fn bash_completes_commands_and_flags() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("meshparity.bash");
    std::fs::write(&script, meshparity(&["completions", "bash"])).unwrap();
    let complete = |words: &str, cword: usize| -> String {
        let out = Command::new("bash")
            .arg("-c")
            .arg(format!(
                "source '{}'; COMP_WORDS=({words}); COMP_CWORD={cword}; COMP_LINE='{words}'; \
                 COMP_POINT=${{#COMP_LINE}}; \
                 _meshparity meshparity \"${{COMP_WORDS[COMP_CWORD]}}\" \"${{COMP_WORDS[COMP_CWORD-1]}}\"; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
                script.display()
            ))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let commands = complete("meshparity pl", 1);
    assert_eq!(commands.trim(), "plan", "{commands}");
    let flags = complete("meshparity plan --ex", 2);
    assert_eq!(flags.trim(), "--explain-mesh", "{flags}");
    for shell in ["zsh", "fish", "elvish", "powershell"] {
        assert!(meshparity(&["completions", shell]).contains("meshparity"));
    }
}

/// The man page names every command and renders with `man` where it is installed.
#[test]
fn the_man_page_renders() {
    let page = meshparity(&["man"]);
    assert!(
        page.starts_with(".ie"),
        "roff: {}",
        &page[..80.min(page.len())]
    );
    assert!(page.contains(".TH meshparity 1"), "{page}");
    for command in [
        "validate",
        "plan",
        "run",
        "calibrate",
        "report",
        "compare",
        "completions",
    ] {
        assert!(page.contains(command), "{command} missing");
    }
    let man = Command::new("man").arg("--version").output();
    if !man.is_ok_and(|o| o.status.success()) {
        eprintln!("skipped rendering: no `man` here");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("meshparity.1");
    std::fs::write(&file, &page).unwrap();
    let out = Command::new("man")
        .arg("-l")
        .arg(&file)
        .env("MANPAGER", "cat")
        .env("MANWIDTH", "100")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && text.contains("NAME"), "{text}");
    assert!(text.contains("single-device oracle"), "{text}");
}
