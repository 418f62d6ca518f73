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

/// Runs the script at `script` (a path from the repository's root) with `args` and
/// `env`. Its stdout and stderr, as Ok when it exited 0, as Err (with its exit status,
/// or why it could not run) when it did not.
pub fn run_script(script: &Path, args: &[String], env: &[(&str, &str)]) -> Result<String, String> {
    let python = root().join("target/pyenv/bin/python");
    let output = Command::new(&python)
        .arg(root().join(script))
        .args(args)
        .envs(env.iter().copied())
        .output()
        .map_err(|e| {
            format!(
                "cannot run {} (scripts/install-test-deps.sh makes it): {e}",
                python.display()
            )
        })?;
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
