//! Files in and out of a `run_python` call: the `files` argument decoded into checked
//! [`InputFiles`] (a bad path or size is the client's `invalid_params` error, naming the problem),
//! and the files the code wrote under `/out` turned into content blocks within
//! [`MAX_FILES_REPLY_BYTES`]: small text inline, images as images, the rest as embedded resources.

use std::collections::BTreeMap;

use base64::prelude::{BASE64_STANDARD, Engine as _};
use rmcp::ErrorData;
use rmcp::model::{ContentBlock, ResourceContents};
use schemars::JsonSchema;
use serde::Deserialize;

use crate::outcome::OutputFile;
use crate::sandbox::files::{FileLimits, InputFiles};

/// The most bytes of written files one reply carries (before base64). Files past it are named in
/// the text, not sent: the code can write less, or a session can keep them for a later call.
pub const MAX_FILES_REPLY_BYTES: usize = 8 << 20;

/// Text files up to this size come inline in the text a model reads; larger ones as resources.
const MAX_INLINE_TEXT_BYTES: usize = 8 << 10;

/// A file's content as a client sends it.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(untagged)]
// Inline in the input schema: some clients do not follow `$ref`s.
#[schemars(inline)]
pub enum FileContent {
    /// UTF-8 text, as is: a CSV, JSON or any text file.
    Text(String),
    /// Any bytes (a spreadsheet, an image), base64-encoded with the standard alphabet.
    Binary {
        /// The file's bytes in base64.
        base64: String,
    },
}

/// The checked input files of a call, or the `invalid_params` error that names what is wrong.
pub fn input_files(
    files: Option<BTreeMap<String, FileContent>>,
) -> Result<Option<InputFiles>, ErrorData> {
    let Some(files) = files else {
        return Ok(None);
    };
    let mut decoded = Vec::with_capacity(files.len());
    for (path, content) in files {
        let bytes = match content {
            FileContent::Text(text) => text.into_bytes(),
            FileContent::Binary { base64 } => BASE64_STANDARD
                .decode(base64.trim())
                .map_err(|e| invalid(format!("file `{path}` is not valid base64: {e}")))?,
        };
        decoded.push((path, bytes));
    }
    InputFiles::new(decoded, FileLimits::default())
        .map(Some)
        .map_err(|e| invalid(e.to_string()))
}

fn invalid(message: String) -> ErrorData {
    ErrorData::invalid_params(message, None)
}

/// The written files as content blocks, in path order, and a sentence for the text: how many
/// follow, and which were left out for [`MAX_FILES_REPLY_BYTES`].
pub fn file_blocks(files: &[OutputFile]) -> (Vec<ContentBlock>, String) {
    let mut blocks = Vec::new();
    let mut left_out = Vec::new();
    let mut budget = MAX_FILES_REPLY_BYTES;
    for file in files {
        let size = file.data.len();
        if size > budget {
            left_out.push(format!("{} ({size} bytes)", file.path));
            continue;
        }
        budget -= size;
        blocks.push(block(file));
    }
    let mut note = match blocks.len() {
        0 => String::new(),
        1 => "1 file written under /out follows.\n".to_owned(),
        n => format!("{n} files written under /out follow.\n"),
    };
    if !left_out.is_empty() {
        note.push_str(&format!(
            "Left out of this reply, over its {} MiB for files: {}.\n",
            MAX_FILES_REPLY_BYTES >> 20,
            left_out.join(", ")
        ));
    }
    (blocks, note)
}

/// One written file as the client best shows it.
fn block(file: &OutputFile) -> ContentBlock {
    let media = file.media_type.as_str();
    let text = std::str::from_utf8(&file.data)
        .ok()
        .filter(|_| is_text(media));
    match text {
        _ if is_image(media, &file.data) => {
            ContentBlock::image(BASE64_STANDARD.encode(&*file.data), media)
        }
        Some(text) if text.len() <= MAX_INLINE_TEXT_BYTES => {
            ContentBlock::text(format!("--- {} ({media}) ---\n{text}", file.path))
        }
        Some(text) => ContentBlock::resource(ResourceContents::TextResourceContents {
            uri: uri(file),
            mime_type: Some(media.to_owned()),
            text: text.to_owned(),
            meta: None,
        }),
        None => ContentBlock::resource(ResourceContents::BlobResourceContents {
            uri: uri(file),
            mime_type: Some(media.to_owned()),
            blob: BASE64_STANDARD.encode(&*file.data),
            meta: None,
        }),
    }
}

/// Whether `data` is an image of type `media` that clients can show: its bytes must say so too,
/// as a client given junk under an image type may fail the whole reply.
fn is_image(media: &str, data: &[u8]) -> bool {
    match media {
        "image/png" => data.starts_with(b"\x89PNG\r\n\x1a\n"),
        "image/jpeg" => data.starts_with(b"\xff\xd8\xff"),
        "image/svg+xml" => std::str::from_utf8(data).is_ok_and(|t| t.contains("<svg")),
        _ => false,
    }
}

/// Whether files of `media` type are text for a reader.
fn is_text(media: &str) -> bool {
    media.starts_with("text/")
        || matches!(
            media,
            "application/json" | "application/xml" | "application/x-ndjson"
        )
}

/// The file's name as a resource: a scheme of its own, since it is no file of the client's
/// machine.
fn uri(file: &OutputFile) -> String {
    format!("sandbox://{}", file.path)
}
