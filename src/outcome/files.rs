//! The files a call wrote under `/out`, as its result carries them: path, media type and bytes;
//! the JSON form lists them without their bytes.

use std::sync::Arc;

use schemars::JsonSchema;
use serde::Serialize;

/// Where the code writes files (`crate::sandbox::files::OUT_DIR`).
const OUT_DIR: &str = "/out";

/// A file the code wrote under `/out`.
#[derive(Clone, PartialEq, Eq)]
pub struct OutputFile {
    /// Its path in the sandbox (`/out/summary.csv`).
    pub path: String,
    /// Its media type, from its name (and, for a name that says nothing, its bytes).
    pub media_type: String,
    pub data: Arc<Vec<u8>>,
}

impl std::fmt::Debug for OutputFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutputFile")
            .field("path", &self.path)
            .field("media_type", &self.media_type)
            .field("size", &self.data.len())
            .finish()
    }
}

impl OutputFile {
    pub(crate) fn new(relative: &str, data: Arc<Vec<u8>>) -> OutputFile {
        OutputFile {
            path: format!("{OUT_DIR}/{relative}"),
            media_type: media_type(relative, &data).to_owned(),
            data,
        }
    }

    /// The path under `/out` (`summary.csv`).
    pub fn relative_path(&self) -> &str {
        self.path
            .strip_prefix(OUT_DIR)
            .map_or(&self.path, |p| p.trim_start_matches('/'))
    }
}

/// The media type of a file named `name` holding `data`.
pub fn media_type(name: &str, data: &[u8]) -> &'static str {
    let ext = name
        .rsplit_once('.')
        .map(|(_, e)| e.to_ascii_lowercase())
        .unwrap_or_default();
    match ext.as_str() {
        "csv" => "text/csv",
        "tsv" => "text/tab-separated-values",
        "txt" | "log" => "text/plain",
        "md" => "text/markdown",
        "html" | "htm" => "text/html",
        "json" => "application/json",
        "xml" => "application/xml",
        "yaml" | "yml" => "application/yaml",
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "svg" => "image/svg+xml",
        "pdf" => "application/pdf",
        "zip" => "application/zip",
        "xlsx" => "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
        "parquet" => "application/vnd.apache.parquet",
        _ if data.starts_with(b"\x89PNG\r\n\x1a\n") => "image/png",
        _ if std::str::from_utf8(data)
            .is_ok_and(|t| !t.chars().any(|c| c.is_control() && !"\t\n\r".contains(c))) =>
        {
            "text/plain"
        }
        _ => "application/octet-stream",
    }
}

/// What the JSON form of a result says about a written file: everything but its bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub struct OutputFileInfo {
    /// Its path in the sandbox, under `/out`.
    pub path: String,
    /// Its size in bytes.
    pub size: u64,
    /// Its media type (`text/csv`, `image/png`, ...).
    pub media_type: String,
}

impl OutputFile {
    pub fn info(&self) -> OutputFileInfo {
        OutputFileInfo {
            path: self.path.clone(),
            size: self.data.len() as u64,
            media_type: self.media_type.clone(),
        }
    }
}
