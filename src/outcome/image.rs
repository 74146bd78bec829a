//! Images a call hands back beside its text: the figures matplotlib held at the end of a call on
//! the CPython engine. The bytes come from the guest, so they are checked and bounded here, before
//! the host keeps any: an image is read only if it fits, kept only if it is a PNG whose header
//! declares a size a client can decode, and anything else is counted as left out, never an error.

use schemars::JsonSchema;
use serde::Serialize;

/// The most images one call hands back. Each is a full image in an MCP reply, which a model
/// reads at a cost; a loop that makes a figure per step would otherwise flood it.
pub const MAX_IMAGES: usize = 8;
/// The largest image kept, in bytes. A typical plot is 20-100 KB; a dense one at the driver's
/// largest size is under a megabyte. The host allocates no more than this to read one.
pub const MAX_IMAGE_BYTES: usize = 2 << 20;
/// The most bytes of images one call hands back in all (an MCP reply carries them as base64, a
/// third larger), on top of its text, which the output limit bounds.
pub const MAX_IMAGES_BYTES: usize = 4 << 20;
/// The widest and tallest image kept, in pixels. A client decodes what it is sent, so a small
/// PNG that declares a huge size (a decompression bomb) is refused by its header.
pub const MAX_IMAGE_SIDE: u32 = 4096;

/// The media type of the images figures come back as.
pub const PNG: &str = "image/png";

/// The eight bytes every PNG starts with.
const PNG_SIGNATURE: [u8; 8] = [0x89, b'P', b'N', b'G', b'\r', b'\n', 0x1a, b'\n'];

/// An image a call produced, as bytes of the media type `mime`.
#[derive(Clone, PartialEq, Eq)]
pub struct Image {
    pub mime: String,
    pub data: Vec<u8>,
}

impl std::fmt::Debug for Image {
    // Megabytes of PNG in a test's failure message help nobody: show what `info` shows.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.info().fmt(f)
    }
}

/// What the JSON form of a result says about an image: everything but its bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub struct ImageInfo {
    /// The media type, "image/png" for a figure.
    pub mime: String,
    /// Its size in bytes.
    pub bytes: u64,
    /// Its width and height in pixels, when its header gives them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub width: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub height: Option<u32>,
}

impl Image {
    pub fn info(&self) -> ImageInfo {
        let size = (self.mime == PNG).then(|| png_size(&self.data)).flatten();
        ImageInfo {
            mime: self.mime.clone(),
            bytes: self.data.len() as u64,
            width: size.map(|(w, _)| w),
            height: size.map(|(_, h)| h),
        }
    }
}

/// The width and height a PNG's header declares: `None` unless `data` starts with the PNG
/// signature and an `IHDR` chunk of the standard length whose sizes are not zero.
pub fn png_size(data: &[u8]) -> Option<(u32, u32)> {
    let header = data.get(..24)?;
    if header[..8] != PNG_SIGNATURE || header[8..16] != *b"\0\0\0\x0dIHDR" {
        return None;
    }
    let side = |at: usize| {
        u32::from_be_bytes([header[at], header[at + 1], header[at + 2], header[at + 3]])
    };
    let (width, height) = (side(16), side(20));
    (width > 0 && height > 0).then_some((width, height))
}

/// The sentence a reply adds when images were left out, with the bounds that left them out.
pub fn left_out_note(left_out: usize) -> Option<String> {
    let plural = if left_out == 1 {
        "figure was"
    } else {
        "figures were"
    };
    (left_out > 0).then(|| {
        format!(
            "{left_out} {plural} left out: a call returns at most {MAX_IMAGES} PNG images, of at \
             most {} MiB each, {} MiB in all and {MAX_IMAGE_SIDE} pixels a side; close the \
             figures you do not need (plt.close) or make them smaller.",
            MAX_IMAGE_BYTES >> 20,
            MAX_IMAGES_BYTES >> 20
        )
    })
}

/// The images of one call as the guest sends them, within the bounds above.
#[derive(Debug, Default)]
pub(crate) struct ImageCollector {
    images: Vec<Image>,
    bytes: usize,
    left_out: usize,
}

impl ImageCollector {
    /// Takes an image of `len` bytes, which `read` fetches from the guest only if the collector
    /// has room for it; the bytes read are kept only if they are a PNG within bounds. Whatever is
    /// not kept is counted as left out. An error of `read` (the guest pointed outside its memory)
    /// is passed on, as the protocol fault it is.
    pub fn offer<E>(
        &mut self,
        len: u32,
        read: impl FnOnce(u32) -> Result<Vec<u8>, E>,
    ) -> Result<(), E> {
        let fits = |len: usize| len <= MAX_IMAGE_BYTES && self.bytes + len <= MAX_IMAGES_BYTES;
        if self.is_full() || !fits(len as usize) {
            self.left_out = self.left_out.saturating_add(1);
            return Ok(());
        }
        let data = read(len)?;
        let acceptable =
            png_size(&data).is_some_and(|(w, h)| w <= MAX_IMAGE_SIDE && h <= MAX_IMAGE_SIDE);
        if acceptable && fits(data.len()) {
            self.bytes += data.len();
            self.images.push(Image {
                mime: PNG.to_owned(),
                data,
            });
        } else {
            self.left_out = self.left_out.saturating_add(1);
        }
        Ok(())
    }

    /// Whether no further image can be kept: the guest need not make any more.
    pub fn is_full(&self) -> bool {
        self.images.len() >= MAX_IMAGES || self.bytes >= MAX_IMAGES_BYTES
    }

    /// The images kept and how many were left out, leaving the collector empty for the next call.
    pub fn take(&mut self) -> (Vec<Image>, usize) {
        let taken = std::mem::take(self);
        (taken.images, taken.left_out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The start of a PNG of `width` by `height` pixels, padded to `len` bytes.
    fn png(width: u32, height: u32, len: usize) -> Vec<u8> {
        let mut data = PNG_SIGNATURE.to_vec();
        data.extend_from_slice(b"\0\0\0\x0dIHDR");
        data.extend_from_slice(&width.to_be_bytes());
        data.extend_from_slice(&height.to_be_bytes());
        data.resize(len.max(data.len()), 0);
        data
    }

    fn offer(c: &mut ImageCollector, data: Vec<u8>) -> bool {
        let mut read = false;
        let len = data.len() as u32;
        c.offer(len, |_| {
            read = true;
            Ok::<_, ()>(data)
        })
        .unwrap();
        read
    }

    #[test]
    fn a_png_header_gives_its_size() {
        assert_eq!(png_size(&png(640, 480, 100)), Some((640, 480)));
        assert_eq!(png_size(&png(0, 480, 100)), None, "no pixels");
        assert_eq!(png_size(&png(640, 480, 100)[..23]), None, "cut short");
        let mut jpeg = png(640, 480, 100);
        jpeg[1] = b'J';
        assert_eq!(png_size(&jpeg), None);
        assert_eq!(png_size(b""), None);
    }

    #[test]
    fn only_pngs_within_bounds_are_kept() {
        let mut c = ImageCollector::default();
        assert!(offer(&mut c, png(640, 480, 1000)));
        assert!(offer(&mut c, b"garbage, not a PNG at all".to_vec()));
        assert!(
            offer(&mut c, png(100_000, 100_000, 1000)),
            "a bomb's header"
        );
        assert!(offer(&mut c, Vec::new()));
        let (images, left_out) = c.take();
        assert_eq!(images.len(), 1);
        assert_eq!(images[0].info().width, Some(640));
        assert_eq!(left_out, 3);
        assert_eq!(c.take(), (Vec::new(), 0), "taking empties it");
    }

    #[test]
    fn what_does_not_fit_is_never_read() {
        let mut c = ImageCollector::default();
        let mut huge_read = false;
        c.offer(u32::MAX, |_| {
            huge_read = true;
            Ok::<_, ()>(Vec::new())
        })
        .unwrap();
        assert!(!huge_read, "4 GiB announced, nothing read");
        assert!(!offer(&mut c, png(10, 10, MAX_IMAGE_BYTES + 1)));
        // Two of the largest fill the total; a third is not read.
        assert!(offer(&mut c, png(10, 10, MAX_IMAGE_BYTES)));
        assert!(offer(&mut c, png(10, 10, MAX_IMAGE_BYTES)));
        assert!(c.is_full());
        assert!(!offer(&mut c, png(10, 10, 100)));
        let (images, left_out) = c.take();
        assert_eq!((images.len(), left_out), (2, 3));
    }

    #[test]
    fn the_count_is_bounded_and_a_read_error_passes_through() {
        let mut c = ImageCollector::default();
        for _ in 0..MAX_IMAGES + 3 {
            offer(&mut c, png(10, 10, 100));
        }
        assert_eq!(c.take().1, 3);
        assert_eq!(c.offer(10, |_| Err("fault")), Err("fault"));
        assert_eq!(left_out_note(0), None);
        assert!(
            left_out_note(1)
                .unwrap()
                .starts_with("1 figure was left out")
        );
        assert!(
            left_out_note(3)
                .unwrap()
                .starts_with("3 figures were left out")
        );
    }
}
