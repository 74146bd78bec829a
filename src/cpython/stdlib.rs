//! The files the CPython reactor reads, served from memory: its standard library zip, where the
//! reactor looks for it (`/usr/local/lib/python315.zip`), and matplotlib's data files, which the
//! zip carries as an inner archive and matplotlib reads by path, beside its `__file__` inside the
//! zip. No host directory is ever preopened; the guest sees these two folders and nothing else.

use std::io::{Cursor, Read};
use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;

use crate::vfs::{Dir, TreeBuilder};

/// Where the reactor finds its zip: it is on `sys.path` under this folder.
const LIB_GUEST: &str = "/usr/local/lib";
/// The zip's name there, from the CPython version (3.15).
const ZIP_NAME: &str = "python315.zip";
/// matplotlib's data: an inner archive of the zip, and the folder it is served at.
const MPL_DATA_MEMBER: &str = "matplotlib/mpl-data.zip";
const MPL_DATA_GUEST: &str = "/usr/local/lib/python315.zip/matplotlib/mpl-data";
/// matplotlib's data is fonts, style sheets and sample data: a bound on what is unpacked from it.
const MPL_DATA_MAX_BYTES: u64 = 256 << 20;

#[derive(Debug, thiserror::Error)]
pub enum StdlibError {
    #[error("cannot read the standard library zip {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("the standard library zip is damaged ({0}): install the CPython engine again")]
    Zip(String),
}

/// A folder the guest sees: its guest path and what is in it.
pub(crate) type Preopen = (Arc<str>, Arc<Dir>);

/// The reactor's read-only folders, shared by every instance of a sandbox.
#[derive(Clone)]
pub(crate) struct Stdlib {
    pub(crate) preopens: Arc<[Preopen]>,
}

impl Stdlib {
    /// Reads the zip at `path` into memory and unpacks matplotlib's data from it.
    pub(crate) fn load(path: &Path) -> Result<Stdlib, StdlibError> {
        let zip = std::fs::read(path).map_err(|source| StdlibError::Read {
            path: path.display().to_string(),
            source,
        })?;
        let zip = Bytes::from(zip);
        let mut lib = TreeBuilder::default();
        lib.insert_file(ZIP_NAME, zip.clone())
            .map_err(|e| StdlibError::Zip(e.to_string()))?;
        let mut preopens: Vec<Preopen> = vec![(LIB_GUEST.into(), lib.build())];
        if let Some(data) = mpl_data(&zip)? {
            preopens.push((MPL_DATA_GUEST.into(), data));
        }
        Ok(Stdlib {
            preopens: preopens.into(),
        })
    }
}

/// matplotlib's data folder, from the zip's inner archive; `None` if the zip carries none.
fn mpl_data(zip: &Bytes) -> Result<Option<Arc<Dir>>, StdlibError> {
    let damaged = |e: &dyn std::fmt::Display| StdlibError::Zip(e.to_string());
    let mut outer = zip::ZipArchive::new(Cursor::new(zip.clone())).map_err(|e| damaged(&e))?;
    let inner = match outer.by_name(MPL_DATA_MEMBER) {
        Ok(mut member) => {
            let mut bytes = Vec::new();
            (&mut member)
                .take(MPL_DATA_MAX_BYTES)
                .read_to_end(&mut bytes)
                .map_err(|e| damaged(&e))?;
            bytes
        }
        Err(zip::result::ZipError::FileNotFound) => return Ok(None),
        Err(e) => return Err(damaged(&e)),
    };
    let mut archive = zip::ZipArchive::new(Cursor::new(inner)).map_err(|e| damaged(&e))?;
    let mut tree = TreeBuilder::default();
    let mut budget = MPL_DATA_MAX_BYTES;
    for i in 0..archive.len() {
        let mut member = archive.by_index(i).map_err(|e| damaged(&e))?;
        if member.is_dir() {
            continue;
        }
        let Some(name) = member.enclosed_name() else {
            let raw = String::from_utf8_lossy(member.name_raw()).into_owned();
            return Err(damaged(&format!("a member escapes its folder: {raw}")));
        };
        let name = name.to_string_lossy().into_owned();
        let mut bytes = Vec::new();
        (&mut member)
            .take(budget)
            .read_to_end(&mut bytes)
            .map_err(|e| damaged(&e))?;
        budget -= bytes.len() as u64;
        tree.insert_file(&name, Bytes::from(bytes))
            .map_err(|e| damaged(&e))?;
    }
    Ok(Some(tree.build()))
}
