//! `--file NAME=PATH` and `--out DIR`: host files read into the sandbox's `/data`, and the files
//! the code wrote under `/out` written back. The code never sees a host path. What it wrote is
//! written only inside DIR, as regular files and real folders: a symbolic link or anything else
//! at a name on the way is refused, never followed, so nothing lands outside DIR.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use cap_fs_ext::DirExt;
use cap_std::ambient_authority;
use cap_std::fs::Dir;

use crate::outcome::RunResult;
use crate::sandbox::files::{FileLimits, InputFiles};

/// Parses `NAME=PATH`.
pub(super) fn parse_file_arg(arg: &str) -> Result<(String, PathBuf), String> {
    match arg.split_once('=') {
        Some((name, path)) if !name.is_empty() && !path.is_empty() => {
            Ok((name.to_owned(), PathBuf::from(path)))
        }
        _ => Err(format!(
            "`{arg}` is not NAME=PATH (the code reads PATH's content as /data/NAME)"
        )),
    }
}

/// The input files, read from the host, checked as a client's would be; `None` (no file system)
/// when there are none and no `--out`.
pub(super) fn read_inputs(
    files: &[(String, PathBuf)],
    out: bool,
) -> anyhow::Result<Option<InputFiles>> {
    if files.is_empty() && !out {
        return Ok(None);
    }
    let limits = FileLimits::default();
    let mut read = Vec::with_capacity(files.len());
    for (name, path) in files {
        // The size first: a huge file is refused unread.
        let size = std::fs::metadata(path)
            .with_context(|| format!("cannot read {}", path.display()))?
            .len();
        if size > limits.max_file_bytes as u64 {
            bail!(
                "{} is {size} bytes; a file may have at most {}",
                path.display(),
                limits.max_file_bytes
            );
        }
        let bytes =
            std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
        read.push((name.clone(), bytes));
    }
    Ok(Some(InputFiles::new(read, limits)?))
}

/// Writes the files of `result` into `dir` (created if missing), saying on stderr what each
/// became.
pub(super) fn write_out(dir: &Path, result: &RunResult) -> anyhow::Result<()> {
    if result.files.is_empty() {
        return Ok(());
    }
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let root = Dir::open_ambient_dir(dir, ambient_authority())
        .with_context(|| format!("cannot open {}", dir.display()))?;
    for file in &result.files {
        let relative = file.relative_path();
        let path = dir.join(relative);
        write_one(&root, relative, &file.data)
            .with_context(|| format!("cannot write {}", path.display()))?;
        eprintln!("sandbox-run: wrote {}", path.display());
    }
    Ok(())
}

/// Writes `data` at the relative path `relative` under `root`: each folder on the way must be a
/// real folder (made if missing), the file a regular one (replaced) or nothing.
fn write_one(root: &Dir, relative: &str, data: &[u8]) -> anyhow::Result<()> {
    let mut names: Vec<&str> = relative.split('/').collect();
    let name = names.pop().unwrap_or_default();
    if names
        .iter()
        .chain([&name])
        .any(|n| matches!(*n, "" | "." | ".."))
    {
        bail!("`{relative}` is not a plain relative path");
    }
    let mut dir = root.try_clone()?;
    for folder in names {
        match dir.symlink_metadata(folder) {
            Ok(meta) if !meta.is_dir() => bail!("`{folder}` exists and is not a folder"),
            Ok(_) => {}
            Err(_) => dir.create_dir(folder)?,
        }
        dir = dir.open_dir_nofollow(folder)?;
    }
    super::plots::write_one(&dir, name, data)
}
