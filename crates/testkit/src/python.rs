//! Real clients written in Python (`tests/clients/*.py`), run with the test
//! virtualenv's interpreter, which `scripts/install-test-deps.sh` makes in
//! `target/pyenv`.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The repository's root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Runs `tests/clients/<script>` with `args` and `env`. Its stdout and stderr, as
/// Ok when it succeeded, as Err (with why it could not run) when it did not.
pub fn run_client(script: &str, args: &[String], env: &[(&str, &str)]) -> Result<String, String> {
    run_script(&Path::new("tests/clients").join(script), args, env)
}

/// The test virtualenv's interpreter, set to run `script` (a path from the
/// repository's root) with `args`.
fn interpreter(script: &Path, args: &[String]) -> Command {
    let mut command = Command::new(python());
    command.arg(root().join(script)).args(args);
    command
}

fn python() -> PathBuf {
    root().join("target/pyenv/bin/python")
}

fn cannot_run(e: std::io::Error) -> String {
    format!(
        "cannot run {} (scripts/install-test-deps.sh makes it): {e}",
        python().display()
    )
}

/// Runs the script at `script` (a path from the repository's root) with `args` and
/// `env`. Its stdout and stderr, as Ok when it exited 0, as Err (with its exit status,
/// or why it could not run) when it did not.
pub fn run_script(script: &Path, args: &[String], env: &[(&str, &str)]) -> Result<String, String> {
    let output = interpreter(script, args)
        .envs(env.iter().copied())
        .output()
        .map_err(cannot_run)?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    if output.status.success() {
        Ok(text)
    } else {
        Err(format!("{}\n{text}", output.status))
    }
}

/// As [`run_script`], with `input` on the script's standard input and without extra
/// environment: its stdout alone when it exited 0; Err with its stderr otherwise.
pub fn run_script_with_input(
    script: &Path,
    args: &[String],
    input: &[u8],
) -> Result<String, String> {
    use std::io::Write;
    use std::process::Stdio;
    let mut child = interpreter(script, args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(cannot_run)?;
    let written = child
        .stdin
        .take()
        .map(|mut stdin| stdin.write_all(input))
        .transpose();
    let output = child.wait_with_output().map_err(|e| e.to_string())?;
    written.map_err(|e| e.to_string())?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(format!(
            "{}\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        ))
    }
}
