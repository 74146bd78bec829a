//! `--plots DIR`: the figures a run returns, written as `DIR/plot-1.png`, `plot-2.png`, ... The
//! names are this program's and the bytes were checked by the host (PNGs within bounds), but the
//! directory is the user's: a file is written only as a regular file directly in it, never
//! through a symbolic link, so a link planted at a figure's name cannot send it elsewhere.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use cap_fs_ext::{FollowSymlinks, OpenOptionsFollowExt};
use cap_std::ambient_authority;
use cap_std::fs::{Dir, OpenOptions};

use crate::outcome::{RunResult, left_out_note};

/// Where the figures go, and how many went there before (a REPL's entries number on).
pub(super) struct Plots {
    dir: Option<PathBuf>,
    written: usize,
}

impl Plots {
    pub(super) fn new(dir: Option<PathBuf>) -> Plots {
        Plots { dir, written: 0 }
    }

    /// Writes `result`'s figures, or says how to get them; says on stderr what it did and
    /// how many figures were left out.
    pub(super) fn take(&mut self, result: &RunResult) -> anyhow::Result<()> {
        if let Some(note) = left_out_note(result.images_left_out) {
            eprintln!("sandbox-run: {note}");
        }
        let count = result.images.len();
        if count == 0 {
            return Ok(());
        }
        let Some(dir) = &self.dir else {
            let figures = if count == 1 { "figure" } else { "figures" };
            eprintln!(
                "sandbox-run: the code returned {count} {figures}; add --plots DIR to write them as PNG files"
            );
            return Ok(());
        };
        self.written += write_all(dir, self.written, result)?;
        Ok(())
    }
}

/// Writes the figures of `result` into `dir` (created if missing), numbered after `before`,
/// saying on stderr what each became; how many were written.
fn write_all(dir: &Path, before: usize, result: &RunResult) -> anyhow::Result<usize> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let opened = Dir::open_ambient_dir(dir, ambient_authority())
        .with_context(|| format!("cannot open {}", dir.display()))?;
    for (i, image) in result.images.iter().enumerate() {
        let name = format!("plot-{}.png", before + i + 1);
        let path = dir.join(&name);
        write_one(&opened, &name, &image.data)
            .with_context(|| format!("cannot write {}", path.display()))?;
        eprintln!("sandbox-run: wrote {}", path.display());
    }
    Ok(result.images.len())
}

/// Writes `data` as the regular file `name` in `dir`, replacing one that is there; anything
/// else at that name (a link, a directory, a pipe) is refused, not followed or opened.
pub(super) fn write_one(dir: &Dir, name: &str, data: &[u8]) -> anyhow::Result<()> {
    match dir.symlink_metadata(name) {
        Ok(meta) if !meta.is_file() => bail!("it exists and is not a regular file"),
        _ => {}
    }
    let mut options = OpenOptions::new();
    options.write(true).create(true).truncate(true);
    options.follow(FollowSymlinks::No);
    let mut file = dir.open_with(name, &options)?;
    file.write_all(data)?;
    Ok(())
}
