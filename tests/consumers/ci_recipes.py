"""Run the README's CI recipes as written, step by step, on a real checkout:

    python3 tests/consumers/ci_recipes.py README.md SPEC WORK

SPEC is the `parity.toml` the checkout holds (a git repository made in WORK); `meshparity` must
be on PATH. Both YAML files are parsed (PyYAML) and their steps carried out as the CI systems
do: GitHub Actions' matrix jobs, `if: always()`, `${{ … }}` expressions, actions/checkout,
upload-artifact and download-artifact (each artifact a directory, downloaded into PATH/NAME),
the step summary file and annotations; GitLab's `parallel`, `extends`, `before_script`,
`script`, `needs` and artifacts. Every `run:`/`script:` line runs in bash as written, except
`cargo install …`, which is checked for its form and stands for the meshparity on PATH (a
release build per test would take minutes). Prints one JSON object: per system, each job's step
results, its step summary and the annotations it printed, and where the merged report is.
"""

import json
import os
import re
import shutil
import subprocess
import sys

import yaml

INSTALL = 'cargo install --locked --git "$MESHPARITY_GIT" meshparity'


def blocks(readme):
    """The ```yaml blocks after the GitHub Actions and GitLab CI headings, parsed."""
    text = open(readme).read()
    out = {}
    for system, heading in [("github", "GitHub Actions ("), ("gitlab", "GitLab CI (")]:
        at = text.index(heading)
        start = text.index("```yaml\n", at) + len("```yaml\n")
        out[system] = yaml.safe_load(text[start:text.index("```", start)])
    return out


def checkout(spec, work):
    """A git repository holding the spec as parity.toml, committed."""
    repo = os.path.join(work, "repo")
    os.makedirs(repo)
    shutil.copy(spec, os.path.join(repo, "parity.toml"))
    git = ["git", "-C", repo, "-c", "user.name=ci", "-c", "user.email=ci@example.com"]
    subprocess.run(git[:3] + ["init", "-q"], check=True)
    subprocess.run(git + ["add", "parity.toml"], check=True)
    subprocess.run(git + ["commit", "-qm", "spec"], check=True)
    return repo


def shell(cmd, cwd, env):
    """One step's command in bash, as a runner runs it; (exit code, stdout)."""
    if cmd.strip().startswith("cargo install"):
        assert cmd.strip() == INSTALL, f"the install step changed: {cmd!r}"
        return 0, ""
    p = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", cmd], cwd=cwd, env=env,
                       capture_output=True, text=True)
    sys.stderr.write(p.stderr)
    return p.returncode, p.stdout


def copy_into(src, dest):
    """`src` (a directory's contents, or a file) copied into the directory `dest`."""
    os.makedirs(dest, exist_ok=True)
    if os.path.isdir(src):
        shutil.copytree(src, dest, dirs_exist_ok=True, symlinks=True)
    else:
        shutil.copy(src, dest)


def github(wf, repo, work):
    artifacts = os.path.join(work, "github-artifacts")
    base_env = dict(os.environ, GITHUB_ACTIONS="true", GITHUB_SERVER_URL="https://github.com",
                    GITHUB_REPOSITORY="org/project", GITHUB_RUN_ID="7", CI="true")
    base_env.update({k: str(v) for k, v in (wf.get("env") or {}).items()})
    results = {}

    def run_job(name, job, matrix):
        ws = os.path.join(work, "github", name + "".join(f"-{v}" for v in matrix.values()))
        os.makedirs(ws)
        summary = ws + ".summary.md"
        open(summary, "w").close()  # the runner makes it; a step appends
        env = dict(base_env, GITHUB_STEP_SUMMARY=summary)

        def expand(s):
            def one(m):
                expr = m.group(1).strip()
                if expr.startswith("matrix."):
                    return str(matrix[expr[len("matrix."):]])
                return {"runner.os": "Linux", "github.server_url": env["GITHUB_SERVER_URL"],
                        "github.repository": env["GITHUB_REPOSITORY"],
                        "github.run_id": env["GITHUB_RUN_ID"]}[expr]
            return re.sub(r"\$\{\{(.*?)\}\}", one, s)

        failed, steps, stdout = False, [], ""
        for step in job["steps"]:
            if failed and step.get("if") != "always()":
                steps.append({"step": step.get("run") or step.get("uses"), "skipped": True})
                continue
            uses, w = step.get("uses", ""), {k: expand(str(v)) for k, v in (step.get("with") or {}).items()}
            code = 0
            if uses.startswith("actions/checkout"):
                copy_into(repo, ws)
            elif uses.startswith("actions/upload-artifact"):
                src = os.path.join(ws, w["path"])
                if os.path.exists(src):
                    copy_into(src, os.path.join(artifacts, w["name"]))
            elif uses.startswith("actions/download-artifact"):
                for a in sorted(os.listdir(artifacts)):
                    copy_into(os.path.join(artifacts, a), os.path.join(ws, w["path"], a))
            elif uses.startswith(("dtolnay/rust-toolchain", "actions/cache")):
                pass
            elif "run" in step:
                code, out = shell(expand(step["run"]), ws, env)
                stdout += out
            else:
                raise AssertionError(f"a step this simulation does not know: {step}")
            failed |= code != 0
            steps.append({"step": step.get("run") or uses, "code": code})
        return {"steps": steps, "failed": failed, "workspace": ws,
                "summary": open(summary).read() if os.path.exists(summary) else "",
                "annotations": [l for l in stdout.splitlines() if l.startswith("::")]}

    for name, job in wf["jobs"].items():
        needs = job.get("needs")
        if needs and job.get("if") != "always()" and any(
                r["failed"] for k, rs in results.items() if k == needs for r in rs):
            continue
        matrix = (job.get("strategy") or {}).get("matrix") or {}
        combos = [{}]
        for k, values in matrix.items():
            combos = [dict(c, **{k: v}) for c in combos for v in values]
        results[name] = [run_job(name, job, c) for c in combos]
    return results


def gitlab(ci, repo, work):
    variables = {k: str(v) for k, v in (ci.get("variables") or {}).items()}
    artifacts = os.path.join(work, "gitlab-artifacts")
    results = {}
    for name, job in ci.items():
        if name.startswith(".") or name == "variables":
            continue
        if "extends" in job:
            job = dict(ci[job["extends"]], **job)
        total = job.get("parallel", 1)
        results[name] = []
        for index in range(1, total + 1):
            ws = os.path.join(work, "gitlab", f"{name}-{index}")
            copy_into(repo, ws)  # GitLab checks the repository out for every job
            if job.get("needs"):
                for n in job["needs"]:
                    for k in range(1, 100):
                        a = os.path.join(artifacts, f"{n}-{k}")
                        if os.path.isdir(a):
                            copy_into(a, ws)
            env = dict(os.environ, **variables, CI="true", CI_PROJECT_DIR=ws)
            if total > 1:
                env.update(CI_NODE_INDEX=str(index), CI_NODE_TOTAL=str(total))
            steps, failed = [], False
            for cmd in job.get("before_script", []) + job.get("script", []):
                if failed:
                    steps.append({"step": cmd, "skipped": True})
                    continue
                if cmd.startswith("export "):
                    # Environment for the lines after, as one shell session keeps it.
                    out = subprocess.run(["bash", "-c", f"{cmd}; env -0"], env=env,
                                         capture_output=True, text=True, check=True).stdout
                    env = dict(kv.split("=", 1) for kv in out.split("\0") if "=" in kv)
                    steps.append({"step": cmd, "code": 0})
                    continue
                code, _ = shell(cmd, ws, env)
                failed |= code != 0
                steps.append({"step": cmd, "code": code})
            arts = job.get("artifacts") or {}
            keep = os.path.join(artifacts, f"{name}-{index}")
            for path in arts.get("paths", []):
                if os.path.exists(os.path.join(ws, path)):
                    copy_into(os.path.join(ws, path), os.path.join(keep, path))
            junit = (arts.get("reports") or {}).get("junit")
            results[name].append({"steps": steps, "failed": failed, "workspace": ws,
                                  "junit": os.path.join(ws, junit) if junit else None,
                                  "uploaded": sorted(arts.get("paths", []))})
    return results


def main():
    readme, spec, work = sys.argv[1], sys.argv[2], os.path.abspath(sys.argv[3])
    recipes = blocks(readme)
    repo = checkout(spec, work)
    print(json.dumps({"github": github(recipes["github"], repo, work),
                      "gitlab": gitlab(recipes["gitlab"], repo, work)}))


if __name__ == "__main__":
    main()
